//! The rules that name the cause of one key's duplicate, from its
//! timeline alone (plus when each run was active).

use idem_store::{AttemptEntry, AttemptEvent};

use super::{Activity, Cause, Duplicate, Spans, caller_of, human_ms, is_ask};

/// Whether `event` ends the attempt of its fence (by its holder or by a
/// person).
pub(crate) fn ends_attempt(event: AttemptEvent) -> bool {
    matches!(
        event,
        AttemptEvent::Completed
            | AttemptEvent::FailedRetryable
            | AttemptEvent::FailedPermanent
            | AttemptEvent::ResolvedCompleted
            | AttemptEvent::ResolvedReleased
            | AttemptEvent::ResolvedRejected
    )
}

fn trigger(entry: &AttemptEntry) -> Option<&str> {
    entry.holder.as_ref()?.trigger.as_deref()
}

fn has_run(entry: &AttemptEntry) -> bool {
    entry.holder.as_ref().is_some_and(|h| h.run_id.is_some())
}

fn name(entry: &AttemptEntry) -> String {
    caller_of(entry).unwrap_or_else(|| "an unknown caller".into())
}

/// Names the cause of `timeline`'s duplicate (one key's entries, in time
/// order: by `at_ms`, then id), or `None` when the key was asked for once. `spans` says when
/// each run was active (its first and last entry in the slice).
pub(crate) fn classify_key(timeline: &[&AttemptEntry], spans: &Spans) -> Option<Duplicate> {
    let asks: Vec<&AttemptEntry> = timeline.iter().copied().filter(|e| is_ask(e)).collect();
    if asks.len() < 2 {
        return None;
    }
    let mut runs: Vec<String> = Vec::new();
    for ask in &asks {
        if let Some(run) = caller_of(ask)
            && !runs.contains(&run)
        {
            runs.push(run);
        }
    }
    let (cause, explanation) = take_over(timeline)
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
            .count(),
        fenced: timeline
            .iter()
            .filter(|e| e.event == AttemptEvent::Fenced)
            .count(),
        drift: None,
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
            let came_back = after(timeline, over)
                .into_iter()
                .find(|e| e.fence == earlier.fence && e.event == AttemptEvent::Fenced);
            let lost = before(timeline, over)
                .iter()
                .any(|e| e.fence == earlier.fence && e.event == AttemptEvent::MarkedUnknown);
            let after = match came_back {
                Some(fenced) => format!(
                    "; {} came back {} after the take-over and its write was refused (fenced)",
                    name(earlier),
                    human_ms(fenced.at_ms.saturating_sub(over.at_ms))
                ),
                None if lost => format!(
                    "; {}'s outcome had been sent to review (unknown) and it never wrote again",
                    name(earlier)
                ),
                None => format!(
                    "; {} never wrote again (crashed, or still paused)",
                    name(earlier)
                ),
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
        // One caller asked more than once.
        let later = asks[1];
        return (trigger(later) == Some("client")).then(|| {
            (
                Cause::ClientRetry,
                format!(
                    "{} asked again {} later (trigger client)",
                    name(later),
                    human_ms(later.at_ms.saturating_sub(first.at_ms))
                ),
            )
        });
    };
    let activity = |e: &AttemptEntry| caller_of(e).and_then(|run| spans.get(&run).copied());
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
            format!("{} asked again (trigger client)", name(late)),
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
