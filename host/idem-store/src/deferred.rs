//! A store opened on first use.
//!
//! `idem run` reads and derives every operation before it touches the
//! store, so that a policy that fails on line 7 leaves nothing behind: no
//! SQLite file created, no PostgreSQL schema migrated. The job runner is
//! built over an engine, and the engine over a store; [`Deferred`] lets the
//! store exist before it is opened: the URL is checked at once, the store
//! opened at the first call that needs it ([`Records::ready`], which the
//! job runner calls once its first read is done, or any other). Every
//! capability it stands in for opens first, then makes the call.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::port::{
    Batching, Database, Gates, Ownership, PolicyRegistry, Records, Transactions, Writes,
};
use crate::store::Store;
use crate::url::{StoreUrl, redacted_url};
use crate::vocabulary::Holder;
use crate::vocabulary::StoreError;
use crate::vocabulary::{Activation, Registration, Rollback};
use crate::vocabulary::{Admission, GateEntry, GateRequest, GateTicket};
use crate::vocabulary::{AttemptEntry, AttemptFilter, ResolveRequest};
use crate::vocabulary::{
    Claim, ClaimOutcome, ClaimRequest, Finish, JobLeaseAcquire, ListFilter, Membership,
    OwnershipToken, RecordKey, RecordView, StoreOptions, Write, WriteOutcome,
};

/// A store by URL, opened (created, migrated) on first use; see the module
/// docs. A failed open is that call's error, and the next call tries again.
pub struct Deferred {
    url: String,
    options: StoreOptions,
    batching: Batching,
    store: OnceCell<Store>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("url", &redacted_url(&self.url))
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
            options,
            // What the store will say (see `Writes::batching`), known from
            // its kind before it is open.
            batching: match parsed {
                StoreUrl::Memory => Batching::NONE,
                StoreUrl::Sqlite { .. } => crate::sqlite::BATCHING,
                StoreUrl::Postgres(_) => crate::postgres::BATCHING,
            },
            store: OnceCell::new(),
        })
    }

    /// The store `url` names, to be opened on first use, as a [`Store`]
    /// whose every capability opens it first. Its name is the URL with any
    /// password hidden; its clock is `options.clock`.
    pub fn store(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let clock = options.clock.clone();
        let deferred = Arc::new(Deferred::new(url, options)?);
        Ok(Store::from_backend(redacted_url(url), clock, deferred))
    }

    /// Whether the store has been opened.
    pub fn is_open(&self) -> bool {
        self.store.initialized()
    }

    async fn open(&self) -> Result<&Store, StoreError> {
        self.store
            .get_or_try_init(|| crate::open(&self.url, self.options.clone()))
            .await
    }
}

#[async_trait]
impl Transactions for Deferred {
    async fn database(&self) -> Result<Database, StoreError> {
        self.open().await?.database().await
    }
}

#[async_trait]
impl Gates for Deferred {
    async fn admit(&self, request: &GateRequest) -> Result<Admission, StoreError> {
        self.open().await?.gates().admit(request).await
    }

    async fn record(&self, ticket: &GateTicket, result: Vec<u8>) -> Result<(), StoreError> {
        self.open().await?.gates().record(ticket, result).await
    }

    async fn release(&self, ticket: &GateTicket) -> Result<(), StoreError> {
        self.open().await?.gates().release(ticket).await
    }

    async fn extend(&self, ticket: &GateTicket, window: Duration) -> Result<(), StoreError> {
        self.open().await?.gates().extend(ticket, window).await
    }

    async fn entry(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError> {
        self.open().await?.gates().entry(gate, key).await
    }

    async fn forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError> {
        self.open().await?.gates().forget(gate, before_ms).await
    }
}

#[async_trait]
impl Writes for Deferred {
    fn batching(&self) -> Batching {
        self.batching
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.open().await?.writes().claim(request).await
    }

    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        self.open().await?.writes().finish(finish).await
    }

    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        self.open().await?.writes().claim_many(requests).await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.open().await?.writes().finish_many(finishes).await
    }

    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        self.open().await?.writes().write_many(writes).await
    }
}

#[async_trait]
impl Records for Deferred {
    async fn ready(&self) -> Result<(), StoreError> {
        self.open().await?.records().ready().await
    }

    async fn take_over_as(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
        effect_atomic: bool,
    ) -> Result<Claim, StoreError> {
        let records = self.open().await?.records();
        records
            .take_over_as(key, observed_fence, lease, holder, ownership, effect_atomic)
            .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        let records = self.open().await?.records();
        records.mark_unknown(key, observed_fence).await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.open()
            .await?
            .records()
            .heartbeat(key, fence, lease)
            .await
    }

    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        self.open().await?.records().resolve(request).await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        self.open().await?.records().get(key).await
    }

    async fn get_many(&self, keys: &[RecordKey]) -> Result<Vec<Option<RecordView>>, StoreError> {
        self.open().await?.records().get_many(keys).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        self.open().await?.records().list(filter).await
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        self.open().await?.records().gc().await
    }

    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        self.open().await?.records().log_answers(entries).await
    }

    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        self.open().await?.records().attempts(filter).await
    }
}

#[async_trait]
impl Ownership for Deferred {
    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        let ownership = self.open().await?.ownership();
        ownership.join_membership(group, members).await
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        self.open().await?.ownership().membership(group).await
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        let ownership = self.open().await?.ownership();
        ownership.acquire_job_lease(job, holder, lease).await
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let ownership = self.open().await?.ownership();
        ownership.heartbeat_job_lease(job, fence, lease).await
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let ownership = self.open().await?.ownership();
        ownership.release_job_lease(job, fence).await
    }
}

#[async_trait]
impl PolicyRegistry for Deferred {
    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError> {
        self.open().await?.registry().registration(namespace).await
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.open().await?.registry().registrations().await
    }

    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError> {
        self.open().await?.registry().activate_policy(request).await
    }

    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError> {
        self.open().await?.registry().rollback_policy(request).await
    }

    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.open().await?.registry().policy_component(digest).await
    }

    async fn requires_registration(&self) -> Result<bool, StoreError> {
        self.open().await?.registry().requires_registration().await
    }

    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError> {
        let registry = self.open().await?.registry();
        registry.set_require_registration(on).await
    }
}
