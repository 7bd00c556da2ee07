//! Group commit: concurrent callers' claims and finishes share store calls.
//!
//! A payment service serves many requests at once, each claiming a key and
//! later completing it. Alone, each of those writes is a durable commit of
//! its own (SQLite: one fsync; PostgreSQL: one round trip and one WAL
//! flush). [`GroupCommit`] wraps a store so that every claim that arrives
//! while another claim's store call is in flight waits for it and then goes,
//! with all the others that queued meanwhile, in *one*
//! [`Writes::claim_many`] call — one transaction on SQLite, one statement on
//! PostgreSQL; finishes likewise through [`Writes::finish_many`]. Where the
//! store has one writer and a batch of both kinds is one commit
//! ([`Batching::one_transaction`]: SQLite), claims and finishes wait in *one*
//! line and go together through [`Writes::write_many`]: two lines would
//! only take turns on the one connection, each paying a commit.
//!
//! No timer: a caller that finds nothing in flight (more generally, fewer
//! than [`GroupCommitOptions::max_in_flight`] calls) makes its own call at
//! once, exactly as without the wrapper (a lone caller pays a lock and
//! nothing else); the wait is bounded by the one call in flight. No weaker
//! guarantee: a batch call returns only once its writes are committed, so
//! each caller learns its answer only after its own write is durable; each
//! write is still conditional on its own key and fence (the store decides
//! each item as it would alone, in arrival order: a key repeated in a batch
//! finds what its first occurrence made); a refusal is that caller's alone.
//! A failure of a whole batch call (the disk, the connection) is every
//! caller's in it, as it would have been had each called alone at that
//! moment. A caller that gives up (its future dropped) before its batch is
//! sent is left out of it: nothing is written for it.
//!
//! Only claims and finishes are grouped: they are the writes every
//! operation makes. A group commit is a [`Writes`] and takes the place of
//! the store's own ([`GroupCommit::wrap_if_useful`]); take-overs,
//! heartbeats and the rest are other capabilities and never pass through
//! it.
//!
//! `lane.rs` holds the line callers wait in.

mod lane;

use std::sync::Arc;

use async_trait::async_trait;

use crate::machine;
use crate::port::{Batching, Writes, write_by_kind};
use crate::store::Store;
use crate::vocabulary::StoreError;
use crate::vocabulary::{ClaimOutcome, ClaimRequest, Finish, Write, WriteOutcome};
use lane::{Kind, Lane};

/// How [`GroupCommit`] groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Whether to group at all. An engine groups only on a store whose
    /// batches share commits ([`Batching::shares_commits`]).
    pub enabled: bool,
    /// The most items one store call carries; more waiting callers go in
    /// the next call. Bounds the size of a transaction (and so how long it
    /// holds SQLite's write lock).
    pub max_batch: usize,
    /// How many store calls of one kind (claims, finishes) may be in flight
    /// at once before callers wait in line; `None` (the default): what the
    /// store says serves it best ([`Batching::in_flight`]: one on
    /// SQLite, a single writer; four on PostgreSQL, whose server already
    /// flushes concurrent commits together). One groups the most.
    pub max_in_flight: Option<usize>,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions {
            enabled: true,
            max_batch: 64,
            max_in_flight: None,
        }
    }
}

/// What a [`GroupCommit`] did (see [`GroupCommit::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Claims.
    pub claims: LaneStats,
    /// Completions and failures.
    pub finishes: LaneStats,
    /// Store calls made in all. Where the store mixes writes
    /// ([`Batching::one_transaction`]) one call may carry claims and finishes
    /// together, and counts in both kinds' `calls`, once here.
    pub calls: u64,
}

/// One kind of grouped call's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Store calls that carried this kind (a lone item or a batch each).
    pub calls: u64,
    /// Items of this kind those calls carried: `items / calls` is the mean
    /// batch size.
    pub items: u64,
    /// Callers of this kind waiting now for a call in flight to end.
    pub waiting: usize,
}

/// Writes whose concurrent claims and finishes share store calls (see the
/// module docs): the [`Writes`] of a store wrapped by
/// [`GroupCommit::wrap_if_useful`].
pub struct GroupCommit {
    inner: Arc<dyn Writes>,
    claims: Arc<Lane>,
    /// The claims' own lane where one transaction carries both kinds
    /// ([`Batching::one_transaction`]): claims and finishes then wait in
    /// one line and share each commit.
    finishes: Arc<Lane>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("max_batch", &self.claims.max_batch)
            .field("max_in_flight", &self.claims.max_in_flight)
            .field("mixed", &self.mixed())
            .finish()
    }
}

impl GroupCommit {
    /// Groups the writes of `inner`. `options.enabled` is not consulted
    /// here: wrapping is the decision to group.
    pub fn new(inner: Arc<dyn Writes>, options: GroupCommitOptions) -> Self {
        let batching = inner.batching();
        let max_batch = options.max_batch.max(1);
        let max_in_flight = options.max_in_flight.unwrap_or(batching.in_flight).max(1);
        let claims = Lane::new(inner.clone(), max_batch, max_in_flight);
        let finishes = if batching.one_transaction {
            claims.clone()
        } else {
            Lane::new(inner.clone(), max_batch, max_in_flight)
        };
        GroupCommit {
            claims,
            finishes,
            inner,
        }
    }

    /// `store` with its writes grouped, when `options` ask for grouping
    /// and the store gains from it ([`Batching::shares_commits`]); else
    /// `store` as it is. Every other capability is the store's own.
    pub fn wrap_if_useful(store: &Store, options: GroupCommitOptions) -> Store {
        if options.enabled && store.writes().batching().shares_commits {
            store.with_writes(Arc::new(GroupCommit::new(store.writes_handle(), options)))
        } else {
            store.clone()
        }
    }

    /// The wrapped writes.
    pub fn inner(&self) -> &Arc<dyn Writes> {
        &self.inner
    }

    /// Whether claims and finishes wait in one line and share store calls.
    fn mixed(&self) -> bool {
        Arc::ptr_eq(&self.claims, &self.finishes)
    }

    /// How much grouping happened so far, and who waits now.
    pub fn stats(&self) -> GroupCommitStats {
        let calls = if self.mixed() {
            self.claims.calls()
        } else {
            self.claims.calls() + self.finishes.calls()
        };
        GroupCommitStats {
            claims: self.claims.stats(Kind::Claim),
            finishes: self.finishes.stats(Kind::Finish),
            calls,
        }
    }
}

#[async_trait]
impl Writes for GroupCommit {
    fn batching(&self) -> Batching {
        self.inner.batching()
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        as_claim(self.claims.submit(Write::Claim(request)).await)
    }

    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        as_finished(self.finishes.submit(Write::Finish(finish)).await)
    }

    /// On one writer, a caller's batch smaller than a full call joins the
    /// line (so that a job's claims and its finishes share commits);
    /// otherwise it is one store call of its own (PostgreSQL: one
    /// statement).
    async fn claim_many(
        &self,
        mut requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        if !self.mixed() || requests.len() >= self.claims.max_batch {
            return self.inner.claim_many(requests).await;
        }
        // In line, the batch is decided with everyone else's writes: one
        // claim per attempt here, as the store's own claim_many does.
        machine::one_claim_per_attempt(&mut requests);
        let writes = requests.into_iter().map(Write::Claim).collect();
        Ok(self
            .claims
            .submit_many(writes)
            .await
            .into_iter()
            .map(as_claim)
            .collect())
    }

    /// As [`GroupCommit::claim_many`]: in line on one writer, else one
    /// store call.
    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        if !self.mixed() || finishes.len() >= self.finishes.max_batch {
            return self.inner.finish_many(finishes).await;
        }
        let writes = finishes.into_iter().map(Write::Finish).collect();
        Ok(self
            .finishes
            .submit_many(writes)
            .await
            .into_iter()
            .map(as_finished)
            .collect())
    }

    /// Claims and finishes together (a lone worker's end of one operation
    /// and claim of the next): in line on one writer, sharing a commit with
    /// whatever else waits; otherwise each kind in its own line, both at
    /// once (PostgreSQL commits them side by side on two connections).
    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        if !self.mixed() {
            return write_by_kind(self, writes).await;
        }
        if writes.len() >= self.claims.max_batch {
            return self.inner.write_many(writes).await;
        }
        Ok(self.claims.submit_many(writes).await)
    }
}

/// A claim's answer from its line. Another kind of answer (never, from a
/// correct store) is an error, not a panic.
fn as_claim(answer: Result<WriteOutcome, StoreError>) -> Result<ClaimOutcome, StoreError> {
    match answer? {
        WriteOutcome::Claim(outcome) => Ok(outcome),
        WriteOutcome::Finished => Err(mismatched("claim")),
    }
}

/// A finish's answer from its line (see [`as_claim`]).
fn as_finished(answer: Result<WriteOutcome, StoreError>) -> Result<(), StoreError> {
    match answer? {
        WriteOutcome::Finished => Ok(()),
        WriteOutcome::Claim(_) => Err(mismatched("finish")),
    }
}

fn mismatched(kind: &str) -> StoreError {
    StoreError::Task(format!(
        "the group commit got another kind of answer for a {kind}"
    ))
}
