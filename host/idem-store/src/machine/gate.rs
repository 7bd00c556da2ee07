//! The gate a downstream keeps, as pure decisions: admit a `(key, fence)`,
//! record an admission's result, release it, extend its window. Every
//! store runs them inside one transaction holding the key's entry, with the
//! store's clock read under that lock.
//!
//! Why an admission, not the fence, is what may record a result: the fence
//! decides who is *admitted* (a fence lower than the highest seen is
//! refused there). Once admitted, the holder's effect may have been
//! applied; a higher fence that arrives meanwhile is told the key is busy
//! and raises the highest fence (so the lower one can never be admitted
//! again), but the admitted effect's result is still recorded when it
//! ends, so that the higher holder's retry gets it as a replay instead of
//! applying the effect a second time. Refusing that result would leave the
//! gate not knowing an effect it let through was applied.

use super::after;
use crate::vocabulary::{
    Admission, GateEntry, GateRequest, GateState, GateTicket, MAX_GATE_KEY_BYTES, StoreError,
};

/// What a decision writes (if anything) and answers (public for the
/// backend port that carries it; the module is private to the crate).
#[derive(Debug)]
pub struct GateStep<T> {
    /// The entry to save, when it changed.
    pub save: Option<GateEntry>,
    /// The answer.
    pub answer: T,
}

/// Refuses a request no store keeps: an empty or overlong gate name or
/// key, a NUL in either, a fence past what SQL integers hold.
pub(crate) fn check_request(gate: &str, key: &str, fence: u64) -> Result<(), StoreError> {
    for (what, text) in [("the gate name", gate), ("the gate key", key)] {
        if text.is_empty() || text.len() > MAX_GATE_KEY_BYTES {
            return Err(StoreError::InvalidRequest(format!(
                "{what} must be 1 to {MAX_GATE_KEY_BYTES} bytes, not {}",
                text.len()
            )));
        }
        super::storable(what, text)?;
    }
    if fence > super::MAX_TIME_MS {
        return Err(StoreError::InvalidRequest(format!(
            "a fence of {fence} is larger than a store keeps ({})",
            super::MAX_TIME_MS
        )));
    }
    Ok(())
}

/// The gate's answer to `request` given the key's `entry` at `now`.
pub(crate) fn admit(
    entry: Option<GateEntry>,
    request: &GateRequest,
    now: u64,
) -> GateStep<Admission> {
    let Some(mut e) = entry else {
        let fresh = GateEntry {
            gate: request.gate.clone(),
            key: request.key.clone(),
            highest_fence: request.fence,
            admission: 0,
            admitted_fence: 0,
            state: GateState::Free,
            in_flight_until_ms: now,
            fingerprint: request.fingerprint.clone(),
            result: None,
            created_ms: now,
            updated_ms: now,
        };
        return admitted(fresh, request, now, None);
    };
    if request.fence < e.highest_fence {
        return GateStep {
            save: None,
            answer: Admission::Stale {
                highest: e.highest_fence,
            },
        };
    }
    if let (Some(kept), Some(asked)) = (&e.fingerprint, &request.fingerprint)
        && kept != asked
    {
        return GateStep {
            save: None,
            answer: Admission::Mismatch,
        };
    }
    // Seen: from now on a lower fence is refused, whatever is answered.
    let raised = request.fence > e.highest_fence;
    if raised {
        e.highest_fence = request.fence;
        e.updated_ms = now;
    }
    let unchanged = |e: GateEntry| raised.then_some(e);
    match e.state {
        GateState::Done => {
            let answer = Admission::Replay {
                result: e.result.clone().unwrap_or_default(),
                fence: e.admitted_fence,
            };
            GateStep {
                save: unchanged(e),
                answer,
            }
        }
        GateState::InFlight if now < e.in_flight_until_ms => {
            let answer = Admission::Busy {
                in_flight: e.admitted_fence,
                retry_after_ms: e.in_flight_until_ms - now,
            };
            GateStep {
                save: unchanged(e),
                answer,
            }
        }
        GateState::InFlight => {
            let lapsed = Some(e.admitted_fence);
            admitted(e, request, now, lapsed)
        }
        GateState::Free => admitted(e, request, now, None),
    }
}

/// `e` admitting `request` now.
fn admitted(
    mut e: GateEntry,
    request: &GateRequest,
    now: u64,
    lapsed: Option<u64>,
) -> GateStep<Admission> {
    e.highest_fence = e.highest_fence.max(request.fence);
    e.admission += 1;
    e.admitted_fence = request.fence;
    e.state = GateState::InFlight;
    e.in_flight_until_ms = after(now, request.window);
    e.result = None;
    if e.fingerprint.is_none() {
        e.fingerprint = request.fingerprint.clone();
    }
    e.updated_ms = now;
    let ticket = GateTicket {
        gate: e.gate.clone(),
        key: e.key.clone(),
        fence: request.fence,
        admission: e.admission,
    };
    GateStep {
        save: Some(e),
        answer: Admission::Admitted { ticket, lapsed },
    }
}

/// The entry `ticket` may write to: its admission, still in flight.
fn held(entry: Option<GateEntry>, ticket: &GateTicket) -> Result<GateEntry, StoreError> {
    let refused = |why: &str| StoreError::GateRefused {
        gate: ticket.gate.clone(),
        key: ticket.key.clone(),
        fence: ticket.fence,
        why: why.to_string(),
    };
    let Some(e) = entry else {
        return Err(refused("the gate has no entry for the key"));
    };
    if e.admission != ticket.admission || e.admitted_fence != ticket.fence {
        return Err(refused(
            "another holder was admitted after this admission's window ran out",
        ));
    }
    match e.state {
        GateState::InFlight => Ok(e),
        GateState::Done => Err(refused("the admission's result is already recorded")),
        GateState::Free => Err(refused("the admission was released")),
    }
}

/// Records the admission's `result`: the key is done, and every later
/// holder not lower than the highest fence gets it replayed.
pub(crate) fn record(
    entry: Option<GateEntry>,
    ticket: &GateTicket,
    result: Vec<u8>,
    now: u64,
) -> Result<GateEntry, StoreError> {
    let mut e = held(entry, ticket)?;
    e.state = GateState::Done;
    e.result = Some(result);
    e.updated_ms = now;
    Ok(e)
}

/// Releases the admission (its effect applied nothing): the next holder
/// not lower than the highest fence is admitted.
pub(crate) fn release(
    entry: Option<GateEntry>,
    ticket: &GateTicket,
    now: u64,
) -> Result<GateEntry, StoreError> {
    let mut e = held(entry, ticket)?;
    e.state = GateState::Free;
    e.updated_ms = now;
    Ok(e)
}

/// Extends the admission's window to `window` from now; answers until
/// when it holds.
pub(crate) fn extend(
    entry: Option<GateEntry>,
    ticket: &GateTicket,
    window: std::time::Duration,
    now: u64,
) -> Result<GateEntry, StoreError> {
    let mut e = held(entry, ticket)?;
    e.in_flight_until_ms = after(now, window);
    e.updated_ms = now;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(fence: u64) -> GateRequest {
        GateRequest {
            gate: "charges".into(),
            key: "k".into(),
            fence,
            fingerprint: Some(b"same".to_vec()),
            window: Duration::from_millis(100),
        }
    }

    /// Applies `admit` and keeps what it saves.
    fn step(entry: &mut Option<GateEntry>, fence: u64, now: u64) -> Admission {
        let s = admit(entry.clone(), &request(fence), now);
        if let Some(saved) = s.save {
            *entry = Some(saved);
        }
        s.answer
    }

    fn ticket(a: Admission) -> GateTicket {
        match a {
            Admission::Admitted { ticket, .. } => ticket,
            other => panic!("not admitted: {other:?}"),
        }
    }

    /// Every interleaving of two or three holders (each: admit, then
    /// record or release) applies the effect at most once while no window
    /// runs out, never overwrites a result, and refuses a fence lower than
    /// one seen before it.
    #[test]
    fn every_interleaving_applies_at_most_once() {
        // A holder's steps: 0 admit, 1 end (record when `records`).
        fn run(order: &[usize], records: &[bool]) {
            let mut entry = None;
            let mut tickets: Vec<Option<GateTicket>> = vec![None; records.len()];
            let mut next = vec![0; records.len()];
            let mut applied = 0;
            let mut seen = 0;
            for &h in order {
                let fence = h as u64 + 1;
                if next[h] == 0 {
                    let a = step(&mut entry, fence, 0);
                    if fence < seen {
                        assert_eq!(a, Admission::Stale { highest: seen }, "{order:?}");
                    }
                    seen = seen.max(fence);
                    if let Admission::Admitted { .. } = a {
                        tickets[h] = Some(ticket(a));
                    }
                } else if let Some(t) = tickets[h].take() {
                    let e = if records[h] {
                        applied += 1;
                        record(entry.clone(), &t, vec![h as u8], 1)
                    } else {
                        release(entry.clone(), &t, 1)
                    };
                    entry = Some(e.expect("an admission in flight ends"));
                }
                next[h] += 1;
            }
            assert!(applied <= 1, "{order:?} {records:?}: applied {applied}");
            let e = entry.expect("an entry");
            if applied == 1 {
                assert_eq!(e.state, GateState::Done);
            }
        }
        fn orders(counts: &mut Vec<usize>, order: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            if counts.iter().all(|&c| c == 0) {
                out.push(order.clone());
                return;
            }
            for h in 0..counts.len() {
                if counts[h] > 0 {
                    counts[h] -= 1;
                    order.push(h);
                    orders(counts, order, out);
                    order.pop();
                    counts[h] += 1;
                }
            }
        }
        for holders in [2, 3] {
            let mut all = Vec::new();
            orders(&mut vec![2; holders], &mut Vec::new(), &mut all);
            for order in &all {
                for mask in 0..(1 << holders) {
                    let records: Vec<bool> = (0..holders).map(|h| mask & (1 << h) != 0).collect();
                    run(order, &records);
                }
            }
        }
    }

    #[test]
    fn a_higher_fence_waits_then_replays_and_the_lower_is_refused() {
        let mut e = None;
        let one = ticket(step(&mut e, 1, 0));
        assert_eq!(
            step(&mut e, 2, 10),
            Admission::Busy {
                in_flight: 1,
                retry_after_ms: 90
            }
        );
        // The admitted effect ran: its result is kept, though 2 was seen.
        e = Some(record(e, &one, b"receipt".to_vec(), 20).unwrap());
        assert_eq!(
            step(&mut e, 2, 30),
            Admission::Replay {
                result: b"receipt".to_vec(),
                fence: 1
            }
        );
        assert_eq!(step(&mut e, 1, 40), Admission::Stale { highest: 2 });
        assert!(record(e.clone(), &one, b"again".to_vec(), 50).is_err());
    }

    #[test]
    fn a_lapsed_admission_is_named_and_can_no_longer_record() {
        let mut e = None;
        let one = ticket(step(&mut e, 1, 0));
        match step(&mut e, 2, 100) {
            Admission::Admitted { ticket, lapsed } => {
                assert_eq!((ticket.fence, ticket.admission, lapsed), (2, 2, Some(1)))
            }
            other => panic!("{other:?}"),
        }
        assert!(record(e.clone(), &one, vec![1], 110).is_err());
    }

    #[test]
    fn a_released_key_admits_the_next_and_another_request_is_told_apart() {
        let mut e = None;
        let one = ticket(step(&mut e, 1, 0));
        e = Some(release(e, &one, 5).unwrap());
        assert!(matches!(
            step(&mut e, 1, 6),
            Admission::Admitted { lapsed: None, .. }
        ));
        let other = GateRequest {
            fingerprint: Some(b"other".to_vec()),
            ..request(3)
        };
        assert_eq!(admit(e, &other, 7).answer, Admission::Mismatch);
    }
}
