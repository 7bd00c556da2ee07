//! How each attempt-log entry reads to a person. The log stores what the
//! store did (`taken-over`, `rejected`); a person wants what it meant: a
//! take-over after a recorded end is a plain retry, a take-over of an
//! expired claim whose effect is atomic with its end re-executes what was
//! never done, and a rejection given about a record the same caller just
//! marked unknown sent it to review.

use std::collections::{BTreeMap, HashSet};

use idem_store::{AttemptEntry, AttemptEvent, RecordKey};

use super::runs::ends_attempt;

/// An entry as people read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShownEvent {
    /// The stored event, as it is.
    Stored(AttemptEvent),
    /// A take-over of an attempt that had ended (a retryable failure, or a
    /// record released by a person): a retry, not a rescue.
    Retried,
    /// The caller found the claim expired and the policy sent the record
    /// to review (stored as a rejection beside a `marked-unknown`).
    SentToReview,
    /// A take-over of a claim that expired with its effect atomic with its
    /// end: the earlier attempt did nothing, so this one runs the effect
    /// for the first time that lasts, never a second.
    ReExecuted,
}

impl ShownEvent {
    /// The spelling a person reads (`retried`, `sent-to-review`,
    /// `re-executed`, or the stored event's own).
    pub fn as_str(self) -> &'static str {
        match self {
            ShownEvent::Stored(event) => event.as_str(),
            ShownEvent::Retried => "retried",
            ShownEvent::SentToReview => "sent-to-review",
            ShownEvent::ReExecuted => "re-executed",
        }
    }

    /// The stored event underneath.
    pub fn stored(self) -> AttemptEvent {
        match self {
            ShownEvent::Stored(event) => event,
            ShownEvent::Retried | ShownEvent::ReExecuted => AttemptEvent::TakenOver,
            ShownEvent::SentToReview => AttemptEvent::Rejected,
        }
    }
}

/// How each of `entries` reads, in their order. Each key's entries are
/// read in time order (by store clock, then id).
pub fn shown_events(entries: &[AttemptEntry]) -> Vec<ShownEvent> {
    let marked: HashSet<(&RecordKey, u64)> = entries
        .iter()
        .filter(|e| e.event == AttemptEvent::MarkedUnknown)
        .map(|e| (&e.key, e.fence))
        .collect();
    let mut by_key: BTreeMap<&RecordKey, Vec<usize>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_key.entry(&e.key).or_default().push(i);
    }
    let mut out: Vec<ShownEvent> = entries
        .iter()
        .map(|e| ShownEvent::Stored(e.event))
        .collect();
    for indices in by_key.values_mut() {
        indices.sort_by_key(|&i| (entries[i].at_ms, entries[i].id));
        // The fence of the attempt in force, and whether it has ended.
        let mut current: Option<(u64, bool)> = None;
        for &i in indices.iter() {
            let e = &entries[i];
            match e.event {
                AttemptEvent::TakenOver => {
                    if current.is_some_and(|(_, ended)| ended) {
                        out[i] = ShownEvent::Retried;
                    } else if super::classify::re_executes(e) {
                        out[i] = ShownEvent::ReExecuted;
                    }
                    current = Some((e.fence, false));
                }
                AttemptEvent::Executed => current = Some((e.fence, false)),
                AttemptEvent::Rejected if marked.contains(&(&e.key, e.fence)) => {
                    out[i] = ShownEvent::SentToReview;
                }
                event if ends_attempt(event) => {
                    if let Some((fence, ended)) = current.as_mut()
                        && (*fence == e.fence || event.is_resolution())
                    {
                        *ended = true;
                    }
                }
                _ => {}
            }
        }
    }
    out
}
