//! The exactly-once engine: a policy composed with a store.
//!
//! [`Engine::begin`] derives an operation's key through the policy and makes
//! an atomic claim in the store. The caller then either holds an
//! [`Execution`] (and performs the effect, handing the key and fence
//! downstream) or gets what the policy decided a duplicate gets: a replay of
//! the stored outcome, in-progress, a conflict or a rejection.
//!
//! Every write an [`Execution`] makes is conditional on its fence: a holder
//! that was deposed (its lease expired and someone took over) gets
//! [`EngineError::Fenced`] and changes nothing. Leases expire by the store's
//! clock. An expired claim is never re-executed blindly: the policy decides
//! (re-execute with the same key, send to review, reject). A claim whose
//! effect commits with its end ([`Engine::begin_in_store`]) is known to
//! have done nothing when it expired: its policy is told so (a retryable
//! failure), and re-executes.
//!
//! ```no_run
//! # async fn charge(key: &str, fence: u64) -> Vec<u8> { Vec::new() }
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::engine::{Begin, Engine, EngineOptions};
//! use idem::policy::{PolicyRuntime, RuntimeConfig};
//! use idem::store::{Outcome, StoreOptions};
//!
//! let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file("billing-charge.wasm".as_ref())?;
//! let store = idem::store::open("sqlite:idem.db", StoreOptions::default()).await?;
//! let engine = Engine::new(policy, store, EngineOptions::default());
//! let op = idem::core::Operation::from_json(
//!     r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"}}"#,
//!     &Default::default(),
//! )?;
//! match engine.begin(&op).await? {
//!     Begin::Execute(claim) => {
//!         let receipt = charge(&claim.key_hex(), claim.fence()).await;
//!         claim.complete(Outcome::new(0, receipt)).await?;
//!     }
//!     Begin::Replay(replay) => println!("already charged: {:?}", replay.outcome),
//!     other => println!("not now: {other:?}"),
//! }
//! # Ok(())
//! # }
//! ```

pub mod admission;
mod answer_log;
mod batch;
pub mod dual_read;
mod duplicate;
mod error;
mod execution;
mod fenced;
mod in_doubt;
mod in_store_tx;
mod look_ahead;
mod pair;
mod run_once;
mod settle;
pub(crate) mod telemetry;

pub use telemetry::MAX_ATTRIBUTE;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{KeyedDerivation, Operation, RecordState};
use idem_store::{
    AttemptEntry, AttemptEvent, CallerName, ClaimOutcome, ClaimRequest, GroupCommit,
    GroupCommitOptions, Holder, HolderToken, KeptOperation, NotKept, Outcome, OwnershipToken,
    RecordKey, Store, StoreError,
};

use crate::policy::LoadedPolicy;
use answer_log::AnswerLog;

pub use batch::FirstClaim;
pub(crate) use batch::ToClaim;
pub use duplicate::in_flight_retry_after_ms;
pub use error::EngineError;
pub use execution::{ExecContext, Execution};
#[cfg(feature = "postgres")]
pub use in_store_tx::PostgresEffect;
#[cfg(feature = "sqlite")]
pub use in_store_tx::SqliteEffect;
pub use run_once::{Failed, RunResult, heartbeat_loop, spawn_heartbeat};

/// Settings of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Overrides the policy's lease for claims made by this engine.
    pub lease: Option<Duration>,
    /// How often a `wait` decision looks at the record again.
    pub wait_poll: Duration,
    /// How many times `begin` retries after losing a race (another holder
    /// took over or finished between our read and our write).
    pub max_rounds: u32,
    /// The longest one `begin` waits for a live holder in all, whatever
    /// the policy's `wait` asks (`idem exec`/`run`/`consume`/`serve
    /// --max-wait`): the wait is the shorter of the two. `Some(ZERO)`:
    /// a duplicate is never waited for, and is answered in progress at
    /// once. `None` (the default): the policy's `wait` alone bounds it
    /// (at most 60 s).
    pub max_wait: Option<Duration>,
    /// Partitioned ownership: the membership epoch every claim and
    /// take-over carries, so that the store refuses them once the
    /// membership moved on (`StoreError::StaleEpoch`, surfaced as
    /// [`EngineError::Store`]). `None` (the default): no ownership check.
    pub ownership: Option<OwnershipToken>,
    /// Group commit: concurrent callers' claims and finishes share store
    /// calls (one transaction on SQLite, one statement on PostgreSQL),
    /// applied where the store gains from it
    /// ([`Batching::shares_commits`](idem_store::Batching::shares_commits)). On by default; a lone caller
    /// pays nothing for it (see [`idem_store::GroupCommit`]).
    pub group_commit: GroupCommitOptions,
    /// Whether each claim hands the store the canonical operation to keep
    /// with its record (default: yes), so that `idem diff --store` and an
    /// activation can derive the record's key again with another policy
    /// version. Off (operations with fields that must not sit in the
    /// store), records say so instead, and cannot be diffed. A policy can
    /// ask for the same (see `LoadedPolicy::keeps_operations`).
    pub keep_operations: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lease: None,
            wait_poll: Duration::from_millis(25),
            max_rounds: 4,
            max_wait: None,
            ownership: None,
            group_commit: GroupCommitOptions::default(),
            keep_operations: true,
        }
    }
}

/// What [`Engine::begin`] got.
#[derive(Debug)]
#[non_exhaustive]
pub enum Begin {
    /// The caller holds the key: perform the effect, then complete or fail.
    Execute(Execution),
    /// The effect already happened (or failed for good): here is its outcome.
    Replay(Replay),
    /// Another holder is performing the effect.
    InProgress {
        /// Namespace and key.
        key: RecordKey,
        /// When trying again may help, in milliseconds: the policy's
        /// suggestion, or the lease that was left when the engine stopped
        /// waiting.
        retry_after_ms: Option<u64>,
        /// What is left of the holder's lease, in milliseconds by the
        /// store's clock, as of this answer: by then the holder has ended,
        /// or the next duplicate is the policy's to decide (a crashed
        /// holder's claim lapses). The bound on any "come back later" a
        /// face gives (the HTTP layer's `Retry-After`), whatever the
        /// policy's suggestion.
        lease_remaining_ms: u64,
        /// Why, for the caller.
        reason: String,
    },
    /// The key was used for a different request (fingerprint mismatch).
    Conflict {
        /// Namespace and key.
        key: RecordKey,
        /// The policy's HTTP-style status (typically 422).
        status: i32,
        /// Why, for the caller.
        reason: String,
    },
    /// The policy rejected the duplicate. `marked_unknown` says the engine
    /// sent an expired claim to review (outcome-unknown) on the policy's word.
    Rejected {
        /// Namespace and key.
        key: RecordKey,
        /// The policy's HTTP-style status.
        status: i32,
        /// Why, for the caller.
        reason: String,
        /// When trying again may help, in milliseconds.
        retry_after_ms: Option<u64>,
        /// Whether the engine marked the record outcome-unknown.
        marked_unknown: bool,
    },
}

impl Begin {
    /// The namespace and key the answer is about, whatever the answer.
    pub fn key(&self) -> &RecordKey {
        match self {
            Begin::Execute(execution) => execution.key(),
            Begin::Replay(replay) => &replay.key,
            Begin::InProgress { key, .. }
            | Begin::Conflict { key, .. }
            | Begin::Rejected { key, .. } => key,
        }
    }
}

/// A stored outcome handed back to a duplicate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replay {
    /// Namespace and key.
    pub key: RecordKey,
    /// Completed or failed-permanent.
    pub state: RecordState,
    /// The stored outcome: status, body and, for a failure, its error.
    pub outcome: Outcome,
    /// The fence of the attempt that produced the outcome.
    pub fence: u64,
}

/// A policy composed with a store.
#[derive(Clone)]
pub struct Engine {
    policy: LoadedPolicy,
    store: Store,
    options: EngineOptions,
    /// Answers to duplicates, on their way to the attempt log (shared by
    /// clones).
    answers: Arc<AnswerLog>,
    /// Whether the policy may claim in its namespace (shared by clones).
    admission: Arc<admission::Admission>,
    /// A dual-read window given by the caller (else the store's).
    dual_read: Option<Arc<dual_read::DualRead>>,
}

impl Engine {
    /// An engine deduplicating with `policy` against `store`.
    pub fn new(policy: LoadedPolicy, store: Store, options: EngineOptions) -> Self {
        let store = GroupCommit::wrap_if_useful(&store, options.group_commit);
        Engine {
            answers: AnswerLog::new(store.clone()),
            admission: Arc::default(),
            dual_read: None,
            policy,
            store,
            options,
        }
    }

    /// This engine with other options, on the same policy and store (the
    /// store as this engine wrapped it: its group commit is shared, never
    /// wrapped twice) and the same answer log. `options.group_commit` is
    /// the original engine's.
    pub(crate) fn reconfigured(&self, options: EngineOptions) -> Engine {
        Engine {
            policy: self.policy.clone(),
            store: self.store.clone(),
            answers: self.answers.clone(),
            admission: self.admission.clone(),
            dual_read: self.dual_read.clone(),
            options: EngineOptions {
                group_commit: self.options.group_commit,
                ..options
            },
        }
    }

    /// This engine with another policy (a hot swap), on the same store as
    /// this engine wrapped it (never wrapped twice) and the same answer
    /// log; the new policy's admission is checked afresh.
    pub(crate) fn with_policy(&self, policy: LoadedPolicy) -> Engine {
        Engine {
            policy,
            store: self.store.clone(),
            answers: self.answers.clone(),
            admission: Arc::default(),
            dual_read: None,
            options: self.options.clone(),
        }
    }

    /// Waits until every answer to a duplicate given so far (a replay, in
    /// progress, a conflict, a rejection) is in the store's attempt log.
    /// Answers are written in batches behind the caller's back (a record
    /// change is logged in its own transaction, never later); call this
    /// before reporting on, or exiting after, a batch of work.
    pub async fn flush_log(&self) {
        self.answers.flush().await;
    }

    /// Queues the answer `event` a duplicate of `request` got, about the
    /// record at `fence`.
    fn log_answer(
        &self,
        request: &ClaimRequest,
        fence: u64,
        event: AttemptEvent,
        detail: Option<&str>,
    ) {
        self.answers.push(AttemptEntry::answer(
            request.key.clone(),
            fence,
            event,
            request.holder.clone(),
            self.store.clock().now_ms(),
            request.policy_digest.clone(),
            request.operation_digest,
            detail.map(str::to_string),
        ));
    }

    /// The policy.
    pub fn policy(&self) -> &LoadedPolicy {
        &self.policy
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The settings this engine claims with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The logical time handed to the policy (for operations without their
    /// own): the store's clock as this process reads it. It never decides a
    /// lease (the store does, by its own clock); reading the same clock
    /// makes a simulation on a manual clock deterministic end to end.
    fn policy_now_ms(&self) -> u64 {
        self.store.clock().now_ms()
    }

    /// Derives the operation's key (no store access): what `begin` would
    /// claim.
    pub fn derive(&self, op: &Operation) -> Result<KeyedDerivation, EngineError> {
        derive_with(&self.policy, op, self.policy_now_ms())
    }

    /// Derives the key and claims it; see [`Begin`].
    pub async fn begin(&self, op: &Operation) -> Result<Begin, EngineError> {
        let keyed = self.derive(op)?;
        self.begin_derived(op, keyed).await
    }

    /// [`Engine::begin`] for an operation whose key is already derived.
    pub async fn begin_derived(
        &self,
        op: &Operation,
        keyed: KeyedDerivation,
    ) -> Result<Begin, EngineError> {
        self.begin_claiming(op, keyed, false, None).await
    }

    /// [`Engine::begin`] on behalf of a caller that named itself (a client
    /// of `idem serve`): the claim, every answer and the end are logged
    /// under `caller` instead of this process ([`Holder::named()`]), so the
    /// attempt log says which client held the record, and `idem report`
    /// tells that client's crash, its retry and another caller's re-run
    /// apart. With `atomic`, as [`Engine::begin_in_store`].
    pub async fn begin_for(
        &self,
        op: &Operation,
        caller: &CallerName,
        atomic: bool,
    ) -> Result<Begin, EngineError> {
        if atomic {
            self.store().database().await?;
        }
        let keyed = self.derive(op)?;
        self.begin_claiming(op, keyed, atomic, Some(caller)).await
    }

    /// Derives, admits and claims; the claim (or take-over) says whether
    /// its effect commits with its end (`effect_atomic`), and holds it
    /// under `caller`'s name when it gave one.
    pub(crate) async fn begin_claiming(
        &self,
        op: &Operation,
        keyed: KeyedDerivation,
        effect_atomic: bool,
        caller: Option<&CallerName>,
    ) -> Result<Begin, EngineError> {
        self.admission.check(&self.store, &self.policy).await?;
        if let Some(mut found) = self.dual_read_hit(op, &keyed).await? {
            found.request.effect_atomic = effect_atomic;
            if let Some(caller) = caller {
                found.request.holder = holder_for(op, Some(caller));
            }
            return self
                .settle_traced(op, found.keyed, found.request, Some(Ok(found.first)))
                .await;
        }
        let mut request = self.claim_request(op, &keyed);
        request.effect_atomic = effect_atomic;
        if let Some(caller) = caller {
            request.holder = holder_for(op, Some(caller));
        }
        self.settle_traced(op, keyed, request, None).await
    }

    /// [`Engine::settle`] in a span, counted and timed.
    async fn settle_traced(
        &self,
        op: &Operation,
        keyed: KeyedDerivation,
        request: ClaimRequest,
        first: Option<Result<ClaimOutcome, StoreError>>,
    ) -> Result<Begin, EngineError> {
        use tracing::Instrument;
        let started = std::time::Instant::now();
        let span = tracing::debug_span!(
            "idem.begin",
            idem.namespace = %request.key.namespace,
            idem.key = %request.key.digest,
            idem.holder = telemetry::holder(&request.holder),
            idem.run_id = telemetry::run_id(&request.holder),
            idem.fence = tracing::field::Empty,
            idem.attempt = tracing::field::Empty,
            idem.answer = tracing::field::Empty,
            db.system.name = telemetry::db_system(&self.store),
            db.operation.name = "claim",
            otel.status_code = tracing::field::Empty,
        );
        async {
            let result = self.settle(op, keyed, request, first).await;
            telemetry::begun(&result, started);
            result
        }
        .instrument(span)
        .await
    }

    /// The claim `begin` makes for `op`.
    fn claim_request(&self, op: &Operation, keyed: &KeyedDerivation) -> ClaimRequest {
        ClaimRequest {
            key: RecordKey::new(keyed.namespace.clone(), keyed.key),
            policy_digest: self.policy.digest().to_string(),
            fingerprint: keyed.fingerprint,
            partition: keyed.partition.clone(),
            lease: self.lease_for(keyed),
            retention: Duration::from_secs(keyed.retention_s),
            holder: holder_for(op, None),
            operation_digest: Some(op.business_digest()),
            operation: Some(self.kept_operation(op)),
            ownership: self.options.ownership.clone(),
            effect_atomic: false,
        }
    }

    /// What the record keeps of `op`: its canonical JSON without the run,
    /// unless the host or the policy said not to.
    fn kept_operation(&self, op: &Operation) -> KeptOperation {
        if !self.options.keep_operations {
            KeptOperation::NotKept(NotKept::OffByHost)
        } else if !self.policy.keeps_operations() {
            KeptOperation::NotKept(NotKept::OffByPolicy)
        } else {
            KeptOperation::Kept(op.kept_json())
        }
    }

    /// The lease a claim takes: the options' override, else the policy's.
    fn lease_for(&self, keyed: &KeyedDerivation) -> Duration {
        self.options
            .lease
            .unwrap_or(Duration::from_secs(u64::from(keyed.lease_s)))
    }
}

/// `policy`'s derivation of `op` at `now_ms`, as [`Engine::derive`] gives
/// it: for work read and derived before any store is open (a job's plan).
pub(crate) fn derive_with(
    policy: &LoadedPolicy,
    op: &Operation,
    now_ms: u64,
) -> Result<KeyedDerivation, EngineError> {
    let span = tracing::debug_span!(
        "idem.derive",
        idem.namespace = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let _entered = span.enter();
    let derived = policy.derive(op, now_ms).map(|d| d.value);
    match &derived {
        Ok(Ok(keyed)) => {
            span.record("idem.namespace", keyed.namespace.as_str());
        }
        _ => {
            span.record("otel.status_code", "ERROR");
        }
    }
    derived?.map_err(EngineError::Refused)
}

/// Who claims: the run from the operation, this host and pid (or the name
/// the caller gave itself), and a token of this claim attempt's own (see
/// [`idem_store::HolderToken`]).
fn holder_for(op: &Operation, caller: Option<&CallerName>) -> Holder {
    let mut holder = caller.map_or_else(Holder::this_process, Holder::named);
    holder.token = Some(HolderToken::new());
    if let Some(run) = &op.run {
        holder.run_id = Some(run.run_id.clone());
        holder.trigger = Some(run.trigger.as_str().to_string());
        holder.attempt = Some(run.attempt);
    }
    holder
}
