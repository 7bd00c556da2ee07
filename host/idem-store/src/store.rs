//! The store trait: what the engine asks of every store.

use std::time::Duration;

use async_trait::async_trait;

use crate::attempt::{AttemptEntry, AttemptFilter, ResolveRequest};
use crate::clock::StoreClock;
use crate::error::StoreError;
use crate::holder::Holder;
use crate::record::{
    Claim, ClaimOutcome, ClaimRequest, Ending, Finish, JobLeaseAcquire, ListFilter, Membership,
    Outcome, OwnershipToken, RecordKey, RecordView, Write, WriteOutcome,
};
use crate::registry::{Activation, Registration, Rollback};

/// A record store.
///
/// Every method is one atomic transaction that reads the store's own clock.
/// Conflicts are typed errors: [`StoreError::Fenced`],
/// [`StoreError::NotInProgress`], [`StoreError::NotEligible`],
/// [`StoreError::Gone`] (see [`StoreError::is_conflict`]); a conflicting call
/// changes nothing.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Where the store is, for messages (e.g. `sqlite:/var/lib/idem.db`).
    fn describe(&self) -> String;

    /// The clock this store decides leases by, as this process reads it (a
    /// database server's own clock stays the authority for leases; see
    /// [`StoreClock`]). The engine hands its reading to policies as their
    /// logical time, so that a simulation on a [`ManualClock`] is
    /// deterministic down to what the policy sees.
    fn clock(&self) -> &StoreClock;

    /// Whether one [`Store::claim_many`] or [`Store::finish_many`] call of
    /// many items costs much less than as many single calls (they share a
    /// durable commit or a round trip), so that concurrent callers gain from
    /// sharing calls ([`crate::GroupCommit`]). SQLite and PostgreSQL: yes;
    /// the in-memory store: no. Default: no.
    fn batches_share_commits(&self) -> bool {
        false
    }

    /// How many commits of one kind the store serves at once to good
    /// effect, for [`crate::GroupCommit`]: a SQLite file has one writer
    /// (1); a PostgreSQL server flushes concurrent commits together, so a
    /// few calls in flight keep it busy (4: about what 32 callers get on
    /// 32 connections of their own, on an eighth of the connections, which
    /// matters to a fleet sharing one server's connection limit; see
    /// `docs/benchmarks.md`). Default: 1.
    fn concurrent_commits(&self) -> usize {
        1
    }

    /// Whether one [`Store::write_many`] call carrying claims *and*
    /// finishes is one commit, so that [`crate::GroupCommit`] sends both
    /// kinds in one line instead of a line each. SQLite: yes (one writer:
    /// two lines would only take turns on its one connection, each paying
    /// a commit). PostgreSQL: no (a claim batch and a finish batch are a
    /// statement each, and several run at once). Default: no.
    fn mixes_writes(&self) -> bool {
        false
    }

    /// Makes sure the store is open and usable, changing nothing: a store
    /// opened on first use ([`crate::Deferred`]) opens here. A caller that
    /// prepares work before touching the store (the job runner reads and
    /// derives every operation first) calls it before the first write, so
    /// that a store that cannot be opened stops the work before anything
    /// is claimed. Default: nothing to do.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Claims `request.key`: inserts an in-progress record under a new fence
    /// when no live record exists (a record past its retention counts as
    /// absent and is replaced), else reports the existing record. A record
    /// this very attempt made (the same [`crate::HolderToken`] in
    /// `request.holder`, still in progress under a live lease, the same
    /// fingerprint) is answered as the claim it is, writing nothing: the
    /// request was sent again after its answer was lost.
    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError>;

    /// [`Store::claim`] for many requests in one call: what each would have
    /// got, in order, as if claimed one after the other (a key repeated in
    /// the batch finds the record its first occurrence made, even when it is
    /// the same attempt's: one claim per attempt). The fences of
    /// the claims a batch makes are new and higher than any before it, in
    /// an order of the store's choosing (PostgreSQL inserts in key order,
    /// so that racing batches never deadlock). Each claim is
    /// atomic on its own; the batch is not a transaction, only fewer round
    /// trips (PostgreSQL: one statement for the fresh keys, one for the
    /// rest) and fewer commits (SQLite: one transaction, one fsync). The
    /// outer error is a failure of the whole call (nothing, or only some
    /// claims, may have been made: each made claim is live and fenced like
    /// any other); the inner ones are per request, as `claim` returns them.
    /// The default claims one at a time.
    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        let mut requests = requests;
        crate::machine::one_claim_per_attempt(&mut requests);
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(self.claim(request).await);
        }
        Ok(outcomes)
    }

    /// Re-executes under a new, higher fence (attempts + 1), after the policy
    /// decided `re-execute`. Succeeds only while the record still carries
    /// `observed_fence` and is failed-retryable, outcome-unknown, or
    /// in-progress with its lease expired by the store clock.
    async fn take_over(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
    ) -> Result<Claim, StoreError> {
        self.take_over_with(key, observed_fence, lease, holder, None)
            .await
    }

    /// [`Store::take_over`] under partitioned ownership: refused with
    /// [`StoreError::StaleEpoch`] (changing nothing) unless `ownership` is
    /// the group's current epoch. `None` checks nothing.
    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError>;

    /// Marks an in-progress record whose lease expired as outcome-unknown,
    /// if it still carries `observed_fence`. Idempotent: a record already
    /// outcome-unknown under `observed_fence` is left as it is.
    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError>;

    /// Completes the attempt holding `fence`; the record is then final.
    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError>;

    /// Records the failure of the attempt holding `fence`: failed-retryable
    /// (a take-over may follow) or failed-permanent (final).
    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError>;

    /// [`Store::complete`] and [`Store::fail`] for many holders in one call:
    /// what each would have got, in order. Each write is conditional on its
    /// own key and fence, exactly as alone; the batch is not a transaction,
    /// only fewer round trips (PostgreSQL: one statement) and fewer commits
    /// (SQLite: one transaction, one fsync). The outer error is a failure of
    /// the whole call (some writes may have been made); the inner ones are
    /// per holder, as `complete` and `fail` return them. The default
    /// finishes one at a time.
    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut results = Vec::with_capacity(finishes.len());
        for f in finishes {
            results.push(match f.ending {
                Ending::Completed => self.complete(&f.key, f.fence, f.outcome).await,
                Ending::Failed { retryable } => {
                    self.fail(&f.key, f.fence, retryable, f.outcome).await
                }
            });
        }
        Ok(results)
    }

    /// Claims and finishes in one call: what each would have got, answered
    /// in the writes' order, with the guarantees of [`Store::claim_many`]
    /// and [`Store::finish_many`] (each write decided alone, conditional on
    /// its own key and fence; claims in order among claims, finishes among
    /// finishes; the call is not a transaction, only fewer commits). A
    /// claim and a finish of the same key in one call are decided in
    /// either order, as two callers racing would be. Where
    /// [`Store::mixes_writes`], all of them share one commit; the default
    /// sends the claims in one `claim_many` and the finishes in one
    /// `finish_many`.
    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        write_by_kind(self, writes).await
    }

    /// Extends the lease of the attempt holding `fence` to store-now +
    /// `lease`; returns the new `lease_until_ms`.
    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// The live record under `key`, if any.
    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError>;

    /// Live records matching `filter`, most recently updated first.
    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError>;

    /// Removes the records past their retention (never an in-progress record
    /// whose lease is live), and their attempt-log entries; returns how many
    /// records were removed.
    async fn gc(&self) -> Result<u64, StoreError>;

    /// Appends answers to duplicates to the attempt log (a replay, in
    /// progress, a conflict, a rejection: answers that change no record),
    /// in one transaction. Each keeps its `at_ms`: when the answer was
    /// given, by the caller's reading of [`Store::clock`] (an answer may be
    /// written a little after it was given; its time is when it happened).
    /// An answer about a record that is no longer stored (gc removed it
    /// after the answer was given) is not written: it would outlive the
    /// record's other entries, which gc removed with it. Entries that
    /// describe a record change are written by the change itself; passing
    /// one here is [`StoreError::InvalidRequest`].
    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError>;

    /// The attempt-log entries `filter` selects, oldest first.
    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError>;

    /// A person settles a record waiting for review: outcome-unknown, or in
    /// progress with its lease expired by the store clock. Under a new,
    /// higher fence (a late write of the deposed holder is then refused as
    /// fenced), conditional on `request.observed_fence` still being the
    /// record's ([`StoreError::Fenced`] otherwise: a resolution racing a late
    /// completion has one winner), and logged with who and why in the same
    /// transaction. A record not waiting for review is
    /// [`StoreError::NotEligible`] and nothing changes. Returns the record
    /// as resolved.
    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError>;

    /// Registers `members` as the membership of `group` and returns the
    /// group's membership. When the members (as a set) differ from the
    /// stored ones, or the group has none yet, the group gets a new epoch
    /// from a store-wide monotonic sequence, in the same transaction;
    /// otherwise the stored epoch is returned unchanged, so that workers
    /// joining with the same view agree on it. Members must be non-empty
    /// names without control characters ([`StoreError::InvalidRequest`]).
    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError>;

    /// The membership of `group`, if one was registered.
    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError>;

    /// Takes the job lease `job` for `lease` (store clock) under a new fence,
    /// unless another holder's lease is live ([`JobLeaseAcquire::Held`]).
    /// A lease that expired, or was released, is taken.
    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError>;

    /// Extends the job lease held under `fence` to store-now + `lease`;
    /// returns the new `lease_until_ms`. [`StoreError::JobLeaseLost`] when
    /// someone else took it (or it was released).
    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Releases the job lease held under `fence`, so the next run need not
    /// wait for it to expire. [`StoreError::JobLeaseLost`] when it is no
    /// longer held under `fence`.
    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError>;

    /// The registration of `namespace`: its active policy digest, the
    /// digests it accepts claims from, its dual-read window and history.
    /// `None` when no policy was ever activated for it.
    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError>;

    /// Every namespace's registration, by namespace.
    async fn registrations(&self) -> Result<Vec<Registration>, StoreError>;

    /// Makes `request.digest` the active policy of its namespace (and a
    /// registered one), keeping its component bytes and logging who, why
    /// and when (store clock) — conditional on `request.expected_active`
    /// still being the active digest ([`StoreError::RegistryMoved`]
    /// otherwise, nothing changed). Activating the active digest changes
    /// nothing. The caller runs the gate and the diff first: the store
    /// never looks inside a component.
    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError>;

    /// Makes the version active before the current one active again,
    /// conditional on `request.expected_active`, logged; closes the
    /// dual-read window.
    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError>;

    /// The component bytes an activation kept under `digest`.
    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether the store requires every namespace to be registered before
    /// anything claims in it (default: no — see
    /// [`Store::set_require_registration`]).
    async fn requires_registration(&self) -> Result<bool, StoreError>;

    /// Turns the requirement on or off for every process using the store.
    /// Off (the default), a namespace nobody registered works as before
    /// registries existed, so upgrading idem breaks no running job; a
    /// registered namespace is always enforced. On, a claim in an
    /// unregistered namespace is refused too: for a shared store where one
    /// team must not be able to start writing into a namespace first.
    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError>;
}

/// [`Store::write_many`] as a `claim_many` of its claims and a
/// `finish_many` of its finishes, answers put back in the writes' order.
pub(crate) async fn write_by_kind<S: Store + ?Sized>(
    store: &S,
    writes: Vec<Write>,
) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
    let mut is_claim = Vec::with_capacity(writes.len());
    let mut claims = Vec::new();
    let mut finishes = Vec::new();
    for write in writes {
        match write {
            Write::Claim(request) => {
                is_claim.push(true);
                claims.push(request);
            }
            Write::Finish(finish) => {
                is_claim.push(false);
                finishes.push(finish);
            }
        }
    }
    let asked = (claims.len(), finishes.len());
    let claimed = match claims.len() {
        0 => Vec::new(),
        1 => vec![store.claim(claims.pop().expect("one claim")).await],
        _ => store.claim_many(claims).await?,
    };
    let finished = match finishes.len() {
        0 => Vec::new(),
        _ => store.finish_many(finishes).await?,
    };
    if (claimed.len(), finished.len()) != asked {
        return Err(StoreError::Task(format!(
            "the store answered {} of {} claims and {} of {} finishes",
            claimed.len(),
            asked.0,
            finished.len(),
            asked.1
        )));
    }
    let mut claimed = claimed.into_iter();
    let mut finished = finished.into_iter();
    Ok(is_claim
        .into_iter()
        .map(|claim| {
            if claim {
                claimed.next().expect("counted").map(WriteOutcome::Claim)
            } else {
                finished
                    .next()
                    .expect("counted")
                    .map(|()| WriteOutcome::Finished)
            }
        })
        .collect())
}
