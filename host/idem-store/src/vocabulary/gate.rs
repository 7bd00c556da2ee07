//! The gate a downstream keeps: what it is asked, what it answers, and the
//! entry it keeps per key.
//!
//! A gate stands in front of a downstream's writes (a provider adapter, an
//! internal ledger service) and admits each `(key, fence)` once: a repeat
//! of a key gets the result stored for it, a fence lower than the highest
//! seen for the key is refused, and while one admission's effect runs
//! every other caller of the key is told to come back. The decisions are
//! `machine::gate`'s; see the `Gates` port for the calls.

use std::time::Duration;

/// The longest gate name or key a gate keeps, in bytes.
pub const MAX_GATE_KEY_BYTES: usize = 512;

/// A request to pass the gate: a holder's `(key, fence)`, and what it asks
/// for, to tell a repeat from another request under the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRequest {
    /// Which gate (a downstream may keep several, one per kind of write).
    pub gate: String,
    /// The key the holder was handed (for idem's holders, the 64 hex
    /// characters of its record key: `IDEM_KEY`, `FencedKey::key`).
    pub key: String,
    /// The holder's fence (`IDEM_FENCE`, `FencedKey::fence`).
    pub fence: u64,
    /// What the request asks for (a digest of its parameters), kept with
    /// the first admission: a later request under the key with another
    /// fingerprint is [`Admission::Mismatch`]. `None` skips the check.
    pub fingerprint: Option<Vec<u8>>,
    /// How long an admission may stay in flight without an end (measured
    /// by the store's clock) before the gate stops waiting for it and may
    /// admit another holder of the key. Extend it while the effect runs
    /// ([`crate::Gates::extend`]).
    pub window: Duration,
}

/// What one admission holds: present it to record the effect's result, to
/// release the key, or to extend the window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GateTicket {
    /// The gate.
    pub gate: String,
    /// The key.
    pub key: String,
    /// The fence admitted.
    pub fence: u64,
    /// Which admission of the key this is (1 for the first): a ticket of
    /// an admission the gate gave up on (its window ran out and another was
    /// admitted) is refused, even under the same fence.
    pub admission: u64,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the gate's answers, each of which its caller
// (the HTTP gate) must turn into a response of its own.
/// The gate's answer to a [`GateRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead: this holder's effect is the key's one. Record its result
    /// ([`crate::Gates::record`]) or, if it applied nothing, release the
    /// key ([`crate::Gates::release`]).
    Admitted {
        /// What the admission holds.
        ticket: GateTicket,
        /// The fence of an earlier admission whose window ran out with no
        /// end recorded: its effect may or may not have been applied, and
        /// the downstream should look before it applies again. `None` when
        /// the key was never admitted, or its last admission was released.
        lapsed: Option<u64>,
    },
    /// The key's effect was applied and its result stored: answer with it,
    /// apply nothing.
    Replay {
        /// The stored result.
        result: Vec<u8>,
        /// The fence whose admission recorded it.
        fence: u64,
    },
    /// The fence is lower than the highest the gate has seen for the key:
    /// the holder was deposed. Nothing changed.
    Stale {
        /// The highest fence seen for the key.
        highest: u64,
    },
    /// Another admission of the key is in flight: come back later.
    Busy {
        /// The fence admitted and in flight.
        in_flight: u64,
        /// How long until its window runs out, by the store's clock (ms).
        retry_after_ms: u64,
    },
    /// The key was first admitted for another request (its fingerprint
    /// differs). Nothing changed.
    Mismatch,
}

/// Where a key's admissions stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GateState {
    /// An admission is in flight: its effect may be running.
    InFlight,
    /// An admission recorded its result: the key's effect was applied.
    Done,
    /// The last admission was released (it applied nothing): the next
    /// holder not lower than the highest fence is admitted.
    Free,
}

impl GateState {
    /// As the SQL stores keep it.
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::InFlight => "in-flight",
            GateState::Done => "done",
            GateState::Free => "free",
        }
    }

    /// The state a stored name stands for.
    pub fn parse(s: &str) -> Option<GateState> {
        match s {
            "in-flight" => Some(GateState::InFlight),
            "done" => Some(GateState::Done),
            "free" => Some(GateState::Free),
            _ => None,
        }
    }
}

/// What a gate keeps per `(gate, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateEntry {
    /// The gate.
    pub gate: String,
    /// The key.
    pub key: String,
    /// The highest fence seen for the key, admitted or not.
    pub highest_fence: u64,
    /// How many admissions the key has had.
    pub admission: u64,
    /// The fence of the last admission (0 before the first).
    pub admitted_fence: u64,
    /// Where the key stands.
    pub state: GateState,
    /// Until when (store clock, ms) the admission in flight holds the key.
    pub in_flight_until_ms: u64,
    /// The fingerprint of the first admitted request.
    pub fingerprint: Option<Vec<u8>>,
    /// The stored result (when done).
    pub result: Option<Vec<u8>>,
    /// When the key was first seen (store clock, ms).
    pub created_ms: u64,
    /// When it last changed (store clock, ms).
    pub updated_ms: u64,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the effect applied, was not admitted, or
// failed and rolled back.
/// How an effect run behind the gate in the store's own transaction ended
/// (`SqliteStore::gate_in_transaction`).
#[derive(Debug)]
pub enum GateRun<E> {
    /// Admitted: the effect's writes and its result committed together.
    Applied(Vec<u8>),
    /// Not admitted (a replay, a stale fence, another in flight, another
    /// request): the effect did not run.
    NotAdmitted(Admission),
    /// Admitted, but the effect failed: its writes were rolled back and
    /// the admission with them; the key is as it was.
    Failed(E),
}
