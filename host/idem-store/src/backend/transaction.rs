//! One record transaction, as the executor hands it to a backend: the call,
//! the decision, what the decision does, and what a fast path wrote.

use crate::vocabulary::AttemptEntry;
use crate::vocabulary::StoreError;
use crate::vocabulary::{OwnershipToken, Record, RecordKey};

/// What a decision does once it has seen the record: write a record or
/// not, append an attempt-log entry or not, and answer (a refusal may
/// still append an entry: a fenced write is refused *and* logged).
pub struct Step<T> {
    /// The record to write in place of the one that was read, if any.
    pub record: Option<Box<Record>>,
    /// The attempt-log entry to append in the same transaction.
    pub entry: Option<AttemptEntry>,
    /// The answer, once committed. A refusal never writes a record.
    pub answer: Result<T, StoreError>,
}

impl<T> Step<T> {
    /// Nothing to write: end the transaction and answer `answer`.
    pub fn done(answer: T) -> Self {
        Step {
            record: None,
            entry: None,
            answer: Ok(answer),
        }
    }

    /// Write `record` and answer `answer` once it is committed.
    pub fn put(record: Record, answer: T) -> Self {
        Step {
            record: Some(Box::new(record)),
            entry: None,
            answer: Ok(answer),
        }
    }

    /// Refuse, but keep the entry appended with [`Step::logging`].
    pub fn refuse(refusal: StoreError) -> Self {
        Step {
            record: None,
            entry: None,
            answer: Err(refusal),
        }
    }

    /// Appends `entry` to the attempt log in the same transaction.
    pub fn logging(mut self, entry: AttemptEntry) -> Self {
        self.entry = Some(entry);
        self
    }

    /// The same step with its answer mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U> {
        Step {
            record: self.record,
            entry: self.entry,
            answer: self.answer.map(f),
        }
    }
}

/// Where a decision gets a new fence from: a backend draws one from its
/// store-wide sequence inside the transaction, only when the decision asks
/// (a replay or a refusal draws none).
pub trait Fences {
    /// The next fence of the store-wide sequence.
    fn next_fence(&mut self) -> Result<u64, StoreError>;
}

/// A decision: given the record under the key (`None` when there is no
/// row; a row past its retention is passed as it is, the machine treats it
/// as absent), the store clock and a fence source, what to write. An `Err`
/// is a refusal that writes nothing at all (not even a log entry). A backend may call it more
/// than once (a retried transaction), so it must not have side effects.
pub type Decide<T> =
    Box<dyn FnMut(Option<Record>, u64, &mut dyn Fences) -> Result<Step<T>, StoreError> + Send>;

/// One record transaction: which record, why, and what it needs.
#[derive(Debug, Clone)]
pub struct Call {
    /// What the call does, for error messages ("claiming", "heartbeating").
    pub context: &'static str,
    /// The record.
    pub key: RecordKey,
    /// Whether the decision may ask for a fence (a backend that cannot draw
    /// lazily draws one up front only then).
    pub draws_fence: bool,
    /// An ownership token to check against the group's current epoch,
    /// inside the transaction, before deciding.
    pub ownership: Option<OwnershipToken>,
}

/// What a fast path wrote, for the executor to check against the
/// machine (debug builds).
#[derive(Debug, Clone)]
pub struct Written {
    /// The fence of the written record.
    pub fence: u64,
    /// The store clock the statement wrote with.
    pub now_ms: u64,
    /// The whole row as written, when the backend returned it (debug
    /// builds only: it costs the row's bytes on the wire).
    pub row: Option<Record>,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): a backend answers each request of a batch
// claim in one of these ways, and the batch path handles each.
/// One request's answer from [`RecordBackend::batch_claim`].
#[derive(Debug)]
pub enum BatchAnswer {
    /// The statement inserted the record: what it wrote.
    Inserted(Written),
    /// A record existed: the machine decides on it, at this clock. (A
    /// record past its retention goes to the single path, which replaces
    /// it under a lock.)
    Found(Record, u64),
    /// Refused (a stale epoch): this request's answer.
    Refused(StoreError),
    /// Neither: the single path decides.
    Single,
}
