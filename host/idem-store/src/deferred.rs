//! A store opened on first use.
//!
//! `idem run` reads and derives every operation before it touches the
//! store, so that a policy that fails on line 7 leaves nothing behind: no
//! SQLite file created, no PostgreSQL schema migrated. The job runner is
//! built over an engine, and the engine over a store; [`Deferred`] lets the
//! store exist before it is opened: the URL is checked at once, the store
//! opened at the first call that needs it ([`Store::ready`], which the job
//! runner calls once its first read is done, or any other).

use std::time::Duration;

use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::OnceCell;

use crate::attempt::{AttemptEntry, AttemptFilter, ResolveRequest};
use crate::clock::StoreClock;
use crate::error::StoreError;
use crate::holder::Holder;
use crate::record::{
    Claim, ClaimOutcome, ClaimRequest, Finish, JobLeaseAcquire, ListFilter, Membership, Outcome,
    OwnershipToken, RecordKey, RecordView, StoreOptions, Write, WriteOutcome,
};
use crate::registry::{Activation, Registration, Rollback};
use crate::store::Store;
use crate::url::{StoreUrl, redacted_url};

/// A store by URL, opened (created, migrated) on first use; see the module
/// docs. A failed open is that call's error, and the next call tries again.
pub struct Deferred {
    url: String,
    shown: String,
    options: StoreOptions,
    batches_share_commits: bool,
    concurrent_commits: usize,
    mixes_writes: bool,
    store: OnceCell<Arc<dyn Store>>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("url", &self.shown)
            .field("open", &self.store.initialized())
            .finish()
    }
}

impl Deferred {
    /// The store `url` names, to be opened with `options` on first use. A
    /// URL that does not parse is refused now.
    pub fn new(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let parsed: StoreUrl = url.parse()?;
        Ok(Deferred {
            url: url.to_string(),
            shown: redacted_url(url),
            options,
            // What the store will say (see `Store::batches_share_commits`
            // and `concurrent_commits`), known from its kind before it is
            // open.
            batches_share_commits: !matches!(parsed, StoreUrl::Memory),
            concurrent_commits: if matches!(parsed, StoreUrl::Postgres(_)) {
                4
            } else {
                1
            },
            mixes_writes: matches!(parsed, StoreUrl::Sqlite { .. }),
            store: OnceCell::new(),
        })
    }

    /// Whether the store has been opened.
    pub fn is_open(&self) -> bool {
        self.store.initialized()
    }

    async fn store(&self) -> Result<&Arc<dyn Store>, StoreError> {
        self.store
            .get_or_try_init(|| crate::open(&self.url, self.options.clone()))
            .await
    }
}

#[async_trait]
impl Store for Deferred {
    fn describe(&self) -> String {
        match self.store.get() {
            Some(store) => store.describe(),
            None => self.shown.clone(),
        }
    }

    fn clock(&self) -> &StoreClock {
        // The clock the store will be opened with (a clone shares it).
        &self.options.clock
    }

    fn batches_share_commits(&self) -> bool {
        self.batches_share_commits
    }

    fn concurrent_commits(&self) -> usize {
        self.concurrent_commits
    }

    fn mixes_writes(&self) -> bool {
        self.mixes_writes
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.store().await?.ready().await
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.store().await?.claim(request).await
    }

    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        self.store().await?.claim_many(requests).await
    }

    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        self.store().await?.write_many(writes).await
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        self.store()
            .await?
            .take_over_with(key, observed_fence, lease, holder, ownership)
            .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        self.store().await?.mark_unknown(key, observed_fence).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.store().await?.complete(key, fence, outcome).await
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.store()
            .await?
            .fail(key, fence, retryable, outcome)
            .await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.store().await?.finish_many(finishes).await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.store().await?.heartbeat(key, fence, lease).await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        self.store().await?.get(key).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        self.store().await?.list(filter).await
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        self.store().await?.gc().await
    }

    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        self.store().await?.log_answers(entries).await
    }

    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        self.store().await?.attempts(filter).await
    }

    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        self.store().await?.resolve(request).await
    }

    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        self.store().await?.join_membership(group, members).await
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        self.store().await?.membership(group).await
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        self.store()
            .await?
            .acquire_job_lease(job, holder, lease)
            .await
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.store()
            .await?
            .heartbeat_job_lease(job, fence, lease)
            .await
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        self.store().await?.release_job_lease(job, fence).await
    }

    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError> {
        self.store().await?.registration(namespace).await
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.store().await?.registrations().await
    }

    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError> {
        self.store().await?.activate_policy(request).await
    }

    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError> {
        self.store().await?.rollback_policy(request).await
    }

    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store().await?.policy_component(digest).await
    }

    async fn requires_registration(&self) -> Result<bool, StoreError> {
        self.store().await?.requires_registration().await
    }

    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError> {
        self.store().await?.set_require_registration(on).await
    }
}
