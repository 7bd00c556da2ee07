//! [`Writes`]: a claim and an end, alone or many per call.

use async_trait::async_trait;

use crate::vocabulary::StoreError;
use crate::vocabulary::{
    ClaimOutcome, ClaimRequest, Ending, Finish, Outcome, RecordKey, Write, WriteOutcome,
};

/// What one call of many writes costs a store, for [`crate::GroupCommit`]
/// (whether and how to group concurrent callers' writes) and for the
/// batch paths themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Whether one call of many writes costs much less than as many single
    /// calls (they share a durable commit or a round trip), so that
    /// concurrent callers gain from sharing calls. SQLite and PostgreSQL:
    /// yes; the in-memory store: no.
    pub shares_commits: bool,
    /// How many calls of one kind the store serves at once to good effect:
    /// a SQLite file has one writer (1); a PostgreSQL server flushes
    /// concurrent commits together, so a few calls in flight keep it busy
    /// (4: about what 32 callers get on 32 connections of their own, on an
    /// eighth of the connections, which matters to a fleet sharing one
    /// server's connection limit; see `docs/benchmarks.md`).
    pub in_flight: usize,
    /// Whether one call carrying claims *and* finishes is one transaction
    /// and one commit, so that a group commit sends both kinds in one line
    /// instead of a line each. SQLite: yes (one writer: two lines would only
    /// take turns on its one connection, each paying a commit). PostgreSQL:
    /// no (a claim batch and a finish batch are a statement each, and
    /// several run at once).
    pub one_transaction: bool,
}

impl Batching {
    /// A store whose batches cost as much as their single calls: nothing to
    /// gain from grouping (the in-memory store).
    pub const NONE: Batching = Batching {
        shares_commits: false,
        in_flight: 1,
        one_transaction: false,
    };
}

/// The writes every operation makes: its claim, and its holder's end.
///
/// Every call is atomic and decided by the store's own clock; a conflict
/// is a typed refusal ([`StoreError::is_conflict`]) that changes nothing.
#[async_trait]
pub trait Writes: Send + Sync + 'static {
    /// What a batch costs this store (see [`Batching`]).
    fn batching(&self) -> Batching;

    /// Claims `request.key`: inserts an in-progress record under a new fence
    /// when no live record exists (a record past its retention counts as
    /// absent and is replaced), else reports the existing record. A record
    /// this very attempt made (the same [`crate::HolderToken`] in
    /// `request.holder`, still in progress under a live lease, the same
    /// fingerprint) is answered as the claim it is, writing nothing: the
    /// request was sent again after its answer was lost.
    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError>;

    /// Ends the attempt holding `finish.fence`, conditional on that fence
    /// still being the record's: completed (the record is then final),
    /// failed-retryable (a take-over may follow) or failed-permanent
    /// (final). A final record is never overwritten.
    async fn finish(&self, finish: Finish) -> Result<(), StoreError>;

    /// [`Writes::finish`] as completed.
    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.finish(Finish {
            key: key.clone(),
            fence,
            ending: Ending::Completed,
            outcome,
        })
        .await
    }

    /// [`Writes::finish`] as failed: retryable or permanent.
    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.finish(Finish {
            key: key.clone(),
            fence,
            ending: Ending::Failed { retryable },
            outcome,
        })
        .await
    }

    /// [`Writes::claim`] for many requests in one call: what each would have
    /// got, in order, as if claimed one after the other (a key repeated in
    /// the batch finds the record its first occurrence made, even when it is
    /// the same attempt's: one claim per attempt). The fences of the claims
    /// a batch makes are new and higher than any before it, in an order of
    /// the store's choosing (PostgreSQL inserts in key order, so that racing
    /// batches never deadlock). Each claim is atomic on its own; the batch
    /// is not a transaction, only fewer round trips (PostgreSQL: one
    /// statement for the fresh keys, one for the rest) and fewer commits
    /// (SQLite: one transaction, one fsync). The outer error is a failure
    /// of the whole call (nothing, or only some claims, may have been made:
    /// each made claim is live and fenced like any other); the inner ones
    /// are per request, as `claim` returns them. The default claims one at
    /// a time.
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

    /// [`Writes::finish`] for many holders in one call: what each would
    /// have got, in order. Each write is conditional on its own key and
    /// fence, exactly as alone; the batch is not a transaction, only fewer
    /// round trips (PostgreSQL: one statement) and fewer commits (SQLite:
    /// one transaction, one fsync). The outer error is a failure of the
    /// whole call (some writes may have been made); the inner ones are per
    /// holder. The default finishes one at a time.
    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut results = Vec::with_capacity(finishes.len());
        for finish in finishes {
            results.push(self.finish(finish).await);
        }
        Ok(results)
    }

    /// Claims and finishes in one call: what each would have got, answered
    /// in the writes' order, with the guarantees of [`Writes::claim_many`]
    /// and [`Writes::finish_many`] (each write decided alone, conditional on
    /// its own key and fence; claims in order among claims, finishes among
    /// finishes; the call is not a transaction, only fewer commits). A
    /// claim and a finish of the same key in one call are decided in either
    /// order, as two callers racing would be. Where the store's batches are
    /// [`Batching::one_transaction`], all of them share one commit; the
    /// default sends the claims in one `claim_many` and the finishes in one
    /// `finish_many`, both at once.
    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        write_by_kind(self, writes).await
    }
}

/// [`Writes::write_many`] as a `claim_many` of its claims and a
/// `finish_many` of its finishes, answers put back in the writes' order.
pub(crate) async fn write_by_kind<S: Writes + ?Sized>(
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
    // The two kinds are independent calls: sent at once, a store with
    // several connections (PostgreSQL) commits them side by side, where
    // one transaction would run them one after the other before its one
    // commit (measured slower: `docs/benchmarks.md`, a lone worker).
    let claiming = async {
        match claims.len() {
            0 => Ok(Vec::new()),
            1 => Ok(vec![store.claim(claims.pop().expect("one claim")).await]),
            _ => store.claim_many(claims).await,
        }
    };
    let finishing = async {
        match finishes.len() {
            0 => Ok(Vec::new()),
            _ => store.finish_many(finishes).await,
        }
    };
    let (claimed, finished) = tokio::join!(claiming, finishing);
    let (claimed, finished) = (claimed?, finished?);
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
