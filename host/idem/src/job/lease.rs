//! The job lease: one live run of a job at a time, as an efficiency
//! measure only. Two runs that overlap anyway (a holder paused past its
//! lease) stay correct: every operation is still claimed, fenced and
//! epoch-checked on its own.

use std::time::Duration;

use idem_store::{Holder, JobLease, JobLeaseAcquire, Store};
use tokio::task::JoinHandle;

use super::error::JobError;
use super::event::{JobEvent, Observer};

/// Which job lease a run takes before it starts, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLeaseOptions {
    /// The lease's name: runs of the same job use the same name.
    pub name: String,
    /// How long the lease lasts without a heartbeat; the run renews it
    /// every third of that. Must be more than zero.
    pub ttl: Duration,
    /// Who holds it, as another run's refusal shows it (free text).
    pub holder: String,
}

impl JobLeaseOptions {
    /// The lease `name` for `ttl`, held by this process (`host:pid`, and
    /// ` run RUN_ID` when given).
    pub fn new(name: impl Into<String>, ttl: Duration, run_id: Option<&str>) -> Self {
        let me = Holder::this_process();
        let holder = match run_id {
            Some(run) => format!("{}:{} run {run}", me.host, me.pid),
            None => format!("{}:{}", me.host, me.pid),
        };
        JobLeaseOptions {
            name: name.into(),
            ttl,
            holder,
        }
    }
}

/// Takes the job lease, or says who holds it.
pub(crate) async fn acquire(
    store: &Store,
    options: &JobLeaseOptions,
) -> Result<JobLease, JobError> {
    let name = &options.name;
    match store
        .ownership()
        .acquire_job_lease(name, &options.holder, options.ttl)
        .await
    {
        Ok(JobLeaseAcquire::Acquired(lease)) => Ok(lease),
        Ok(JobLeaseAcquire::Held {
            current,
            remaining_ms,
        }) => Err(JobError::JobLeaseHeld {
            name: name.clone(),
            current,
            remaining_ms,
        }),
        Err(error) => Err(JobError::JobLease {
            name: name.clone(),
            error,
        }),
    }
}

/// Renews the job lease every third of its length until aborted. A lost
/// lease only costs efficiency (another run may start the same work, and
/// the per-operation claims keep that safe), so the run goes on and says
/// so.
pub(crate) fn spawn_heartbeat(
    store: &Store,
    lease: &JobLease,
    ttl: Duration,
    observer: Observer,
) -> JoinHandle<()> {
    let (store, job, fence) = (store.clone(), lease.job.clone(), lease.fence);
    tokio::spawn(async move {
        let every = (ttl / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = store
                .ownership()
                .heartbeat_job_lease(&job, fence, ttl)
                .await
            {
                observer(JobEvent::Warning(&format!(
                    "job lease {job} lost ({e}); carrying on, correctness does not depend on it"
                )));
                return;
            }
        }
    })
}

/// Releases the job lease so the next run need not wait for it to expire.
pub(crate) async fn release(store: &Store, lease: &JobLease, observer: &Observer) {
    if let Err(e) = store
        .ownership()
        .release_job_lease(&lease.job, lease.fence)
        .await
    {
        // Harmless: the lease ends by itself, and nothing depends on it.
        observer(JobEvent::Warning(&format!(
            "could not release job lease {}: {e}",
            lease.job
        )));
    }
}
