//! The rules that name the cause of one key's duplicate, from its
//! timeline alone (plus when each run was active).

use idem_store::{AttemptEntry, AttemptEvent, EXPIRED_WITHOUT_EFFECT};

use super::runs::ends_attempt;
use super::{Activity, Caller, Cause, Duplicate, Spans, caller_of, human_ms, is_ask, process_of};

fn trigger(entry: &AttemptEntry) -> Option<&str> {
    entry.holder.as_ref()?.trigger.as_deref()
}

fn has_run(entry: &AttemptEntry) -> bool {
    entry.holder.as_ref().is_some_and(|h| h.run_id.is_some())
}

/// Whether the entry's caller named itself (a client of `idem serve`):
/// its name, not the sidecar's process, is who asked.
fn named(entry: &AttemptEntry) -> bool {
    entry.holder.as_ref().is_some_and(|h| h.is_named())
}

/// Who asked, as the explanation names it: the run, with the caller's own
/// name beside it when it gave one ([`super::shown_holder`]).
fn name(entry: &AttemptEntry) -> String {
    entry
        .holder
        .as_ref()
        .map_or_else(|| "an unknown caller".into(), super::shown_holder)
}

/// Names the cause of `timeline`'s duplicate (one key's entries, in time
/// order: by `at_ms`, then id), or `None` when the key was asked for once. `spans` says when
/// each run was active (its first and last entry in the slice).
pub(crate) fn classify_key(timeline: &[&AttemptEntry], spans: &Spans) -> Option<Duplicate> {
    let asks: Vec<&AttemptEntry> = timeline.iter().copied().filter(|e| is_ask(e)).collect();
    if asks.len() < 2 {
        return None;
    }
    let mut runs: Vec<Caller> = Vec::new();
    for ask in &asks {
        if let Some(run) = caller_of(ask)
            && !runs.contains(&run)
        {
            runs.push(run);
        }
    }
    let runs: Vec<String> = runs.iter().map(Caller::to_string).collect();
    let (cause, explanation) = take_over(timeline)
        .or_else(|| lapsed_to_review(timeline))
        .or_else(|| by_trigger(&asks, spans))
        .unwrap_or_else(|| unrecognised(&asks));
    Some(Duplicate {
        key: asks[0].key.clone(),
        cause,
        explanation,
        runs,
        asks: asks.len(),
        executions: timeline
            .iter()
            .filter(|e| e.event.starts_execution())
            .count()
            // Each take-over of an expired atomic claim proves the attempt
            // it deposed did nothing.
            .saturating_sub(timeline.iter().filter(|e| re_executes(e)).count()),
        fenced: timeline
            .iter()
            .filter(|e| e.event == AttemptEvent::Fenced)
            .count(),
        drift: None,
        operation: None,
    })
}

/// The entries of `timeline` before `entry` (timelines are in time order).
fn before<'a>(timeline: &[&'a AttemptEntry], entry: &AttemptEntry) -> Vec<&'a AttemptEntry> {
    timeline
        .iter()
        .copied()
        .take_while(|e| !std::ptr::eq(*e, entry))
        .collect()
}

/// The entries of `timeline` after `entry`.
fn after<'a>(timeline: &[&'a AttemptEntry], entry: &AttemptEntry) -> Vec<&'a AttemptEntry> {
    timeline
        .iter()
        .copied()
        .skip_while(|e| !std::ptr::eq(*e, entry))
        .skip(1)
        .collect()
}

/// The execution (fresh claim or take-over) in force just before `entry`.
fn execution_before<'a>(
    timeline: &[&'a AttemptEntry],
    entry: &AttemptEntry,
) -> Option<&'a AttemptEntry> {
    before(timeline, entry)
        .into_iter()
        .rfind(|e| e.event.starts_execution())
}

/// Whether the attempt under `fence` ended before `entry`.
fn ended_before(timeline: &[&AttemptEntry], fence: u64, entry: &AttemptEntry) -> bool {
    before(timeline, entry)
        .iter()
        .any(|e| e.fence == fence && ends_attempt(e.event))
}

/// A take-over of an attempt that had not ended: its holder paused or
/// crashed past its lease (or was sent to review and then taken over).
fn take_over(timeline: &[&AttemptEntry]) -> Option<(Cause, String)> {
    timeline
        .iter()
        .copied()
        .filter(|e| e.event == AttemptEvent::TakenOver)
        .find_map(|over| {
            let earlier = execution_before(timeline, over)?;
            if ended_before(timeline, earlier.fence, over) {
                // A take-over after a recorded end is an ordinary retry:
                // the trigger says whose.
                return None;
            }
            let came_back = late_write(timeline, earlier, over);
            let lost = before(timeline, over)
                .iter()
                .any(|e| e.fence == earlier.fence && e.event == AttemptEvent::MarkedUnknown);
            if re_executes(over) {
                return Some((
                    Cause::TakeOverAfterPause,
                    atomic_expiry(earlier, over, came_back),
                ));
            }
            let after = if came_back.is_none() && lost {
                format!(
                    "; {}'s outcome had been sent to review (unknown) and it never wrote again",
                    name(earlier)
                )
            } else {
                afterwards(
                    earlier,
                    over,
                    came_back,
                    "after the take-over and its write was refused (fenced)",
                )
            };
            Some((
                Cause::TakeOverAfterPause,
                format!(
                    "{} started it at fence {} and held it {} without finishing; {} took over at fence {}{after}",
                    name(earlier),
                    earlier.fence,
                    human_ms(over.at_ms.saturating_sub(earlier.at_ms)),
                    name(over),
                    over.fence,
                ),
            ))
        })
}

/// An attempt that never ended, found lapsed by a later caller and sent
/// to review (mark-unknown): its holder crashed or paused mid-effect, and
/// the policy would not run it again before a person looked. The same
/// cause as a take-over: the story is the lapsed holder's, not the asker's.
/// Only for a holder that named no run (a client, a server): a job's lost
/// attempt is told by its runs (a scheduler's retry, a re-run).
fn lapsed_to_review(timeline: &[&AttemptEntry]) -> Option<(Cause, String)> {
    let marked = timeline
        .iter()
        .copied()
        .find(|e| e.event == AttemptEvent::MarkedUnknown)?;
    let earlier = timeline
        .iter()
        .copied()
        .rfind(|e| e.event.starts_execution() && e.fence == marked.fence)
        .filter(|e| !has_run(e))?;
    // The ask that found it: the answer beside the mark-unknown, about the
    // same fence (queued after it, so it may come later in the log).
    let finder = timeline.iter().copied().find(|e| {
        e.event == AttemptEvent::Rejected && e.fence == marked.fence && e.at_ms >= earlier.at_ms
    })?;
    let after = afterwards(
        earlier,
        marked,
        late_write(timeline, earlier, marked),
        "later and its write was refused (fenced)",
    );
    Some((
        Cause::TakeOverAfterPause,
        format!(
            "{} started it at fence {} and its lease lapsed without an end; {} asked {} later, found it lost and it was sent to review (not run again){after}",
            name(earlier),
            earlier.fence,
            name(finder),
            human_ms(finder.at_ms.saturating_sub(earlier.at_ms)),
        ),
    ))
}

/// The refused late write of `earlier`'s holder after `since` (a
/// take-over, or the mark-unknown that sent it to review): the deposed
/// holder came back.
fn late_write<'a>(
    timeline: &[&'a AttemptEntry],
    earlier: &AttemptEntry,
    since: &AttemptEntry,
) -> Option<&'a AttemptEntry> {
    after(timeline, since)
        .into_iter()
        .find(|e| e.fence == earlier.fence && e.event == AttemptEvent::Fenced)
}

/// The close of an explanation about `earlier`'s holder once it was
/// deposed at `since`: it came back (`came_back`, how long after, then
/// `refused`, what became of its write), or it never wrote again.
fn afterwards(
    earlier: &AttemptEntry,
    since: &AttemptEntry,
    came_back: Option<&AttemptEntry>,
    refused: &str,
) -> String {
    match came_back {
        Some(fenced) => format!(
            "; {} came back {} {refused}",
            name(earlier),
            human_ms(fenced.at_ms.saturating_sub(since.at_ms))
        ),
        None => format!(
            "; {} never wrote again (crashed, or still paused)",
            name(earlier)
        ),
    }
}

/// Whether `entry` is a take-over of a claim that expired with its effect
/// atomic with its end: the store logs it with
/// [`EXPIRED_WITHOUT_EFFECT`] as its detail.
pub(crate) fn re_executes(entry: &AttemptEntry) -> bool {
    entry.event == AttemptEvent::TakenOver
        && entry.detail.as_deref() == Some(EXPIRED_WITHOUT_EFFECT)
}

/// The explanation of a take-over of an expired atomic claim: nothing
/// was done, so the take-over re-executed (no one's outcome was lost).
fn atomic_expiry(
    earlier: &AttemptEntry,
    over: &AttemptEntry,
    came_back: Option<&AttemptEntry>,
) -> String {
    let after = afterwards(
        earlier,
        over,
        came_back,
        "after it and its commit was refused inside its own transaction (fenced): its writes rolled back",
    );
    format!(
        "{} started it at fence {} and its claim expired after {} without an end; its effect is atomic with its end, so nothing was done; {} re-executed it under fence {}{after}",
        name(earlier),
        earlier.fence,
        human_ms(over.at_ms.saturating_sub(earlier.at_ms)),
        name(over),
        over.fence,
    )
}

/// The first two callers of the key, taken in the order their runs
/// started: the later run is the duplicate's source, and its trigger and
/// what the earlier run was doing when it started say why.
fn by_trigger(asks: &[&AttemptEntry], spans: &Spans) -> Option<(Cause, String)> {
    let first = asks[0];
    let Some(other) = asks
        .iter()
        .copied()
        .find(|a| caller_of(a) != caller_of(first))
    else {
        return same_run(asks, spans);
    };
    let activity = |e: &AttemptEntry| caller_of(e).and_then(|run| spans.runs.get(&run).copied());
    let (a, b) = (activity(first)?, activity(other)?);
    // The earlier- and the later-started run, each with its ask.
    let ((early, early_run), (late, late_run)) = if a.first_ms <= b.first_ms {
        ((first, a), (other, b))
    } else {
        ((other, b), (first, a))
    };
    let start = late_run.first_ms;
    let gap = human_ms(start.saturating_sub(early_run.first_ms));
    match trigger(late) {
        Some("client") if !has_run(early) && !has_run(late) => Some((
            Cause::ClientRetry,
            format!(
                "a client that named no run asked again through {} (trigger client)",
                name(late)
            ),
        )),
        Some("retry") if early_run.running_or_lost_at(start) => {
            let state = if early_run.last_ms >= start {
                "still running"
            } else {
                "lost (it left an attempt unfinished)"
            };
            Some((
                Cause::SchedulerRetry,
                format!(
                    "retry {} started {gap} after {} while that run was {state}",
                    name(late),
                    name(early)
                ),
            ))
        }
        Some("manual") if early_run.last_ms <= start => Some((
            Cause::ManualRerun,
            format!(
                "{} was re-run by hand as {} {gap} after it started, once it had stopped{}",
                name(early),
                name(late),
                unfinished(&early_run),
            ),
        )),
        // Callers that named no run nor themselves, alive at once: servers
        // answering clients (an HTTP service), not jobs. A client asked
        // again.
        _ if early_run.last_ms >= start
            && !has_run(early)
            && !has_run(late)
            && !named(early)
            && !named(late) =>
        {
            Some((
                Cause::ClientRetry,
                format!(
                    "a client that named no run asked again through {} while {} was serving it",
                    name(late),
                    name(early)
                ),
            ))
        }
        _ if early_run.last_ms >= start => Some((
            Cause::Overlap,
            format!(
                "{} and {} ran at the same time ({} started {gap} after the other)",
                name(early),
                name(late),
                name(late),
            ),
        )),
        // The earlier run had stopped, and the later one does not say why
        // it ran: a re-run, by hand or by a scheduler.
        None => Some((
            Cause::Rerun,
            format!(
                "{} ran again as {} {gap} after it started, once it had stopped{}; no trigger said why",
                name(early),
                name(late),
                unfinished(&early_run),
            ),
        )),
        _ => None,
    }
}

/// Every ask came from one run id: its processes say what happened (a
/// run id reused by a re-run, two processes of one run at once, or one
/// process asking again).
fn same_run(asks: &[&AttemptEntry], spans: &Spans) -> Option<(Cause, String)> {
    let first = asks[0];
    let run = name(first);
    let Some(other) = asks
        .iter()
        .copied()
        .find(|a| process_of(a) != process_of(first))
    else {
        let later = asks[1];
        let gap = human_ms(later.at_ms.saturating_sub(first.at_ms));
        let explanation = if trigger(later) == Some("client") {
            format!("{run} asked again {gap} later (trigger client)")
        } else if named(later) && !has_run(later) {
            format!("{run} asked again {gap} later: the same caller retried")
        } else if !has_run(later) {
            format!("a client that named no run asked {run} again {gap} later")
        } else {
            format!(
                "{run} asked again {gap} later from the same process ({}): its caller retried, or the operation is in its input twice",
                process_of(later).map(|p| p.to_string()).unwrap_or_default()
            )
        };
        return Some((Cause::ClientRetry, explanation));
    };
    let activity = |e: &AttemptEntry| process_of(e).and_then(|p| spans.processes.get(&p).copied());
    let (a, b) = (activity(first)?, activity(other)?);
    let ((early, early_p), (late, late_p)) = if a.first_ms <= b.first_ms {
        ((first, a), (other, b))
    } else {
        ((other, b), (first, a))
    };
    let (early_name, late_name) = (
        process_of(early)?.to_string(),
        process_of(late)?.to_string(),
    );
    let start = late_p.first_ms;
    let gap = human_ms(start.saturating_sub(early_p.first_ms));
    if early_p.last_ms >= start {
        return Some((
            Cause::Overlap,
            format!(
                "two processes of {run} ran at the same time ({early_name}, then {late_name} {gap} later)"
            ),
        ));
    }
    let cause = match trigger(late) {
        Some("manual") => Cause::ManualRerun,
        Some("retry") if early_p.unfinished_since.is_some() => Cause::SchedulerRetry,
        _ => Cause::Rerun,
    };
    Some((
        cause,
        format!(
            "{run} ran again under the same run id (trigger {}): process {late_name} started {gap} after {early_name}, once it had stopped{}",
            trigger(late).unwrap_or("none"),
            unfinished(&early_p),
        ),
    ))
}

/// " with an attempt unfinished" when `run` left one, for the re-run
/// explanations.
fn unfinished(run: &Activity) -> &'static str {
    if run.unfinished_since.is_some() {
        " with an attempt unfinished"
    } else {
        ""
    }
}

fn unrecognised(asks: &[&AttemptEntry]) -> (Cause, String) {
    let first = asks[0];
    let later = asks
        .iter()
        .copied()
        .find(|a| caller_of(a) != caller_of(first))
        .unwrap_or(asks[1]);
    (
        Cause::Unrecognised,
        format!(
            "{} (trigger {}) then {} (trigger {}) {} later",
            name(first),
            trigger(first).unwrap_or("none"),
            name(later),
            trigger(later).unwrap_or("none"),
            human_ms(later.at_ms.saturating_sub(first.at_ms))
        ),
    )
}
