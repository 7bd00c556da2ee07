//! The store's vocabulary: plain data, no I/O. Keys, records and outcomes
//! (`record.rs`), what a claim asks and gets (`claim.rs`), a holder's end
//! (`finish.rs`), the gate a downstream keeps (`gate.rs`), who holds a record (`holder.rs`), memberships and job
//! leases (`ownership.rs`), an effect in the store's transaction
//! (`effect.rs`), the attempt log (`attempt.rs`), a namespace's
//! registration (`registration.rs`), the store clock (`clock.rs`), what a
//! store is opened with (`options.rs`) and what can go wrong (`error.rs`).

mod attempt;
mod claim;
mod clock;
mod effect;
mod error;
mod finish;
mod gate;
mod holder;
mod options;
mod ownership;
mod record;
mod registration;

pub use attempt::{
    AMENDS, AttemptEntry, AttemptEvent, AttemptFilter, MAX_NOTE_BYTES, Resolution, ResolveRequest,
};
pub(crate) use attempt::{bounded_note, end_note};
pub use claim::{Claim, ClaimOutcome, ClaimRequest, EXPIRED_WITHOUT_EFFECT, Existing};
pub use clock::{ManualClock, StoreClock};
pub use effect::{EffectError, TxEnd};
pub(crate) use effect::{is_our_completion, statement_failed};
pub(crate) use error::cause;
pub use error::{ConnectErrorKind, ErrorClass, OpenErrorKind, StoreError};
pub use finish::{Ending, Finish, Write, WriteOutcome};
pub use gate::{
    Admission, GateEntry, GateRequest, GateRun, GateState, GateTicket, MAX_GATE_KEY_BYTES,
};
pub use holder::{CallerName, Holder, HolderToken};
pub use options::{DEFAULT_MAX_OUTCOME_BYTES, StoreOptions};
pub use ownership::{JobLease, JobLeaseAcquire, Membership, OwnershipToken};
pub use record::{
    Digest, KeptOperation, ListCursor, ListFilter, MAX_ERROR_BYTES, MAX_KEPT_OPERATION_BYTES,
    NotKept, Outcome, Record, RecordKey, RecordState, RecordView, TRUNCATION_MARK,
};
pub use registration::{
    Activation, DualRead, MAX_HISTORY, Registration, RegistryAction, RegistryEvent, Rollback,
};
pub(crate) use registration::{decode, encode};
