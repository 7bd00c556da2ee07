//! The job lease check: one live holder per job, fenced.

use std::future::Future;

use super::Fixture;
use super::assert::{START_MS, claimed, fixture, key, ms, request};
use idem_store::{JobLease, JobLeaseAcquire, StoreError, StoreOptions};

fn acquired(result: Result<JobLeaseAcquire, StoreError>) -> JobLease {
    match result {
        Ok(JobLeaseAcquire::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn held(result: Result<JobLeaseAcquire, StoreError>) -> (JobLease, u64) {
    match result {
        Ok(JobLeaseAcquire::Held {
            current,
            remaining_ms,
        }) => (current, remaining_ms),
        other => panic!("expected Held, got {other:?}"),
    }
}

fn assert_lost<T: std::fmt::Debug>(result: Result<T, StoreError>, fence: u64) {
    match result {
        Err(StoreError::JobLeaseLost { fence: f, .. }) if f == fence => {}
        other => panic!("expected JobLeaseLost (fence {fence}), got {other:?}"),
    }
}

/// Job leases: one live holder per job, by the store clock; heartbeat and
/// release are fenced; a lease that ended or was released is taken under a
/// higher fence (from the store-wide fence sequence).
pub async fn job_lease<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let a = acquired(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-a", ms(1_000))
            .await,
    );
    assert_eq!((a.job.as_str(), a.holder.as_str()), ("nightly", "run-a"));
    assert_eq!(a.lease_until_ms, START_MS + 1_000);
    let (current, left) = held(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-b", ms(1_000))
            .await,
    );
    assert_eq!((current.clone(), left), (a.clone(), 1_000));
    // Another job is independent.
    let other = acquired(
        store
            .ownership()
            .acquire_job_lease("hourly", "run-b", ms(1_000))
            .await,
    );
    assert!(other.fence > a.fence);

    clock.advance(ms(400));
    let until = store
        .ownership()
        .heartbeat_job_lease("nightly", a.fence, ms(1_000))
        .await
        .expect("heartbeat");
    assert_eq!(until, START_MS + 1_400);
    clock.advance(ms(999));
    let (_, left) = held(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-b", ms(1_000))
            .await,
    );
    assert_eq!(left, 1, "live until its last millisecond");
    clock.advance(ms(1));
    // Ended by the store clock: taken under a higher fence.
    let b = acquired(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-b", ms(1_000))
            .await,
    );
    assert!(b.fence > other.fence);
    // The deposed holder can neither extend nor release it.
    assert_lost(
        store
            .ownership()
            .heartbeat_job_lease("nightly", a.fence, ms(1_000))
            .await,
        a.fence,
    );
    assert_lost(
        store
            .ownership()
            .release_job_lease("nightly", a.fence)
            .await,
        a.fence,
    );
    let (current, _) = held(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-c", ms(1_000))
            .await,
    );
    assert_eq!(current, b, "a refused release changes nothing");
    // Released: the next run takes it at once.
    store
        .ownership()
        .release_job_lease("nightly", b.fence)
        .await
        .expect("release");
    assert_lost(
        store
            .ownership()
            .release_job_lease("nightly", b.fence)
            .await,
        b.fence,
    );
    assert_lost(
        store
            .ownership()
            .heartbeat_job_lease("nightly", b.fence, ms(1))
            .await,
        b.fence,
    );
    let c = acquired(
        store
            .ownership()
            .acquire_job_lease("nightly", "run-c", ms(1_000))
            .await,
    );
    assert!(c.fence > b.fence);
    // Job-lease fences and record fences share one sequence.
    let claim = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    assert!(claim.fence > c.fence);
    for (job, who) in [("", "run"), ("job", ""), ("job\n", "run")] {
        assert!(
            matches!(
                store.ownership().acquire_job_lease(job, who, ms(1)).await,
                Err(StoreError::InvalidRequest(_))
            ),
            "job {job:?} holder {who:?}"
        );
    }
}
