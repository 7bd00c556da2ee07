//! One begin, round by round: the claim, and for a record that exists,
//! what the policy's `on-duplicate` decides (replay, reject, wait,
//! re-execute, send to review), carried out against the store; a round
//! lost to another holder's move looks again, up to `max_rounds`.

use std::time::Duration;

use idem_core::{Decision, KeyedDerivation, Operation, RecordState};
use idem_store::{AttemptEvent, ClaimOutcome, ClaimRequest, RecordKey, StoreError};

use super::{Begin, Engine, EngineError, Execution};

impl Engine {
    /// Claims (or takes `first` as the first claim's answer) and settles
    /// what a duplicate gets, for up to `max_rounds` rounds.
    pub(super) async fn settle(
        &self,
        op: &Operation,
        keyed: KeyedDerivation,
        request: ClaimRequest,
        mut first: Option<Result<ClaimOutcome, StoreError>>,
    ) -> Result<Begin, EngineError> {
        let key = request.key.clone();
        let lease = request.lease;
        let holder = request.holder.clone();
        let mut last_in_progress = None;
        let mut last_fence = None;
        let mut waits = 0u32;
        let mut last_round_waited = false;
        // A `wait(T)` is at most T in all, from the first one: the policy is
        // asked again after each wait, and a wait it repeats gets only what
        // is left (else `wait(2000)` waited once per round). The operator's
        // `max_wait` caps T: a sidecar or a job may not afford what a
        // policy would wait.
        let mut wait_bound: Option<WaitBound> = None;
        for _round in 0..self.options.max_rounds.max(1) {
            last_round_waited = false;
            let answer = match first.take() {
                Some(answer) => answer,
                None => self.store.writes().claim(request.clone()).await,
            };
            let existing = match answer? {
                ClaimOutcome::Claimed(claim) => {
                    return Ok(Begin::Execute(Execution::new(
                        self.store.clone(),
                        claim,
                        lease,
                        keyed,
                        false,
                    )));
                }
                ClaimOutcome::Existing(existing) => existing,
            };
            let record = &existing.view.record;
            last_fence = Some(record.fence);
            let ctx = existing.duplicate_context(op.clone());
            let decision = self.policy.on_duplicate(&ctx, self.policy_now_ms())?.value;
            tracing::debug!(key = %key, state = record.state.as_str(), decision = decision.name(), "duplicate");
            match decision {
                Decision::Replay => return Ok(self.replay(&request, key, record)),
                Decision::Reject(r) => return Ok(self.refuse(&request, key, &existing, r)),
                Decision::Wait { max_ms } => {
                    let now = tokio::time::Instant::now();
                    last_round_waited = true;
                    last_in_progress = Some((existing.view.lease_remaining_ms, now));
                    let bound = *wait_bound
                        .get_or_insert_with(|| WaitBound::new(now, max_ms, self.options.max_wait));
                    let left = bound
                        .until
                        .saturating_duration_since(now)
                        .min(Duration::from_millis(max_ms));
                    if left.is_zero() {
                        break;
                    }
                    waits += 1;
                    self.wait_while_in_progress(&key, record.fence, left)
                        .await?;
                }
                Decision::ReExecute => match self
                    .store
                    .records()
                    .take_over_as(
                        &key,
                        record.fence,
                        lease,
                        holder.clone(),
                        self.options.ownership.as_ref(),
                        request.effect_atomic,
                    )
                    .await
                {
                    Ok(claim) => {
                        return Ok(Begin::Execute(Execution::new(
                            self.store.clone(),
                            claim,
                            lease,
                            keyed,
                            true,
                        )));
                    }
                    // Someone else moved first; look again.
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e.into()),
                },
                Decision::MarkUnknown(r) => {
                    match self.store.records().mark_unknown(&key, record.fence).await {
                        Ok(()) => {
                            // The store logged the record's change under its
                            // holder; this logs who found it lost.
                            let detail = format!("sent to review: {}", r.reason);
                            let event = AttemptEvent::Rejected;
                            self.log_answer(&request, record.fence, event, Some(&detail));
                            return Ok(Begin::Rejected {
                                key,
                                status: r.status,
                                reason: r.reason,
                                retry_after_ms: r.retry_after_ms,
                                marked_unknown: true,
                            });
                        }
                        Err(e) if e.is_conflict() => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        // Waited every round and the holder is still at it: say so, rather
        // than blame a record that did not change.
        let reason = if let (true, Some(bound)) = (last_round_waited, wait_bound) {
            bound.reason(waits)
        } else {
            "the record kept changing while we looked at it".into()
        };
        if let Some(fence) = last_fence {
            self.log_answer(&request, fence, AttemptEvent::InProgress, Some(&reason));
        }
        // The lease as last seen, less the time spent waiting since.
        let lease_remaining_ms = last_in_progress.map_or(0, |(ms, seen)| {
            let waited = u64::try_from(seen.elapsed().as_millis()).unwrap_or(u64::MAX);
            ms.saturating_sub(waited)
        });
        Ok(Begin::InProgress {
            key,
            retry_after_ms: last_in_progress.map(|(ms, _)| ms),
            lease_remaining_ms,
            reason,
        })
    }

    /// Polls the record until it is no longer the in-progress attempt
    /// `fence`, its lease expires, or `max` passes.
    async fn wait_while_in_progress(
        &self,
        key: &RecordKey,
        fence: u64,
        max: Duration,
    ) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            match self.store.records().get(key).await? {
                Some(view)
                    if view.record.fence == fence
                        && view.record.state == RecordState::InProgress
                        && view.lease_remaining_ms > 0 => {}
                _ => return Ok(()),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(());
            }
            tokio::time::sleep(self.options.wait_poll.min(deadline - now)).await;
        }
    }
}

/// How long one `begin` may wait for a live holder in all: fixed by the
/// first `wait` the policy decides, capped by the engine's `max_wait`.
#[derive(Debug, Clone, Copy)]
struct WaitBound {
    /// When waiting ends, whatever the policy decides after.
    until: tokio::time::Instant,
    /// What the first `wait` asked, in milliseconds.
    asked_ms: u64,
    /// The bound in force, in milliseconds: `asked_ms`, or the cap when
    /// lower.
    bound_ms: u64,
}

impl WaitBound {
    fn new(now: tokio::time::Instant, asked_ms: u64, cap: Option<Duration>) -> WaitBound {
        let cap_ms = cap.map_or(u64::MAX, |c| {
            u64::try_from(c.as_millis()).unwrap_or(u64::MAX)
        });
        let bound_ms = asked_ms.min(cap_ms);
        WaitBound {
            until: now + Duration::from_millis(bound_ms),
            asked_ms,
            bound_ms,
        }
    }

    /// Why a duplicate that waited `waits` times is answered in progress.
    fn reason(&self, waits: u32) -> String {
        let times = if waits == 1 { "time" } else { "times" };
        if self.bound_ms == self.asked_ms {
            return format!(
                "waited {waits} {times} as the policy asked (at most {} ms in all); the operation \
                 is still in progress",
                self.bound_ms
            );
        }
        if waits == 0 {
            return format!(
                "did not wait: the policy asked {} ms, the host waits at most {} ms; the \
                 operation is still in progress",
                self.asked_ms, self.bound_ms
            );
        }
        format!(
            "waited {waits} {times} (at most {} ms in all: the policy asked {} ms, the host waits \
             at most {} ms); the operation is still in progress",
            self.bound_ms, self.asked_ms, self.bound_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_the_policy_s_unless_the_host_caps_it() {
        let now = tokio::time::Instant::now();
        let asked = WaitBound::new(now, 2_000, None);
        assert_eq!(
            (asked.bound_ms, asked.until),
            (2_000, now + Duration::from_secs(2))
        );
        assert_eq!(
            asked.reason(1),
            "waited 1 time as the policy asked (at most 2000 ms in all); the operation is still \
             in progress"
        );
        let roomy = WaitBound::new(now, 2_000, Some(Duration::from_secs(5)));
        assert_eq!(roomy.bound_ms, 2_000);
        let capped = WaitBound::new(now, 2_000, Some(Duration::from_millis(500)));
        assert_eq!(
            (capped.bound_ms, capped.until),
            (500, now + Duration::from_millis(500))
        );
        assert_eq!(
            capped.reason(2),
            "waited 2 times (at most 500 ms in all: the policy asked 2000 ms, the host waits at \
             most 500 ms); the operation is still in progress"
        );
        let never = WaitBound::new(now, 2_000, Some(Duration::ZERO));
        assert_eq!(never.until, now);
        assert_eq!(
            never.reason(0),
            "did not wait: the policy asked 2000 ms, the host waits at most 0 ms; the operation \
             is still in progress"
        );
    }
}
