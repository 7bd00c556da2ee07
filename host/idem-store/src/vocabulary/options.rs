//! What a store is opened with.

use super::StoreClock;

/// Default cap on an outcome's body: 64 KiB.
pub const DEFAULT_MAX_OUTCOME_BYTES: usize = 64 * 1024;

/// Options every store takes.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The store clock: the system clock unless a test injects one.
    pub clock: StoreClock,
    /// Largest outcome body accepted (default 64 KiB).
    pub max_outcome_bytes: usize,
    /// Whether this process writes the attempt log (default: yes). Off, its
    /// claims, ends and answers leave no entries: `idem report` cannot say
    /// why they ran twice, and `idem review` shows their records without a
    /// timeline. For a caller that cannot spare the log's cost (two
    /// entries per begin+complete, written in the same transactions; see
    /// `docs/benchmarks.md`); the records and their guarantees are the
    /// same.
    pub attempt_log: bool,
    /// Whether opening may create the store or bring an older schema up to
    /// date (default: yes). Off — for commands that only read — a store
    /// that does not exist (a SQLite file, a PostgreSQL schema) or whose
    /// schema is older than this build's is refused with
    /// [`crate::StoreError::NotMigrated`] and nothing is created: a
    /// mistyped `?idem_schema=` is an error, not a new empty store.
    pub migrate: bool,
    /// Whether records keep the canonical operation their claim carried
    /// (default: yes). Off, every record says
    /// [`NotKept::OffByHost`] instead: for a service whose operations carry
    /// fields that must not sit in the store. Its records cannot be diffed
    /// (`idem diff --store` cannot derive their keys again with another
    /// policy version, and says so), and an activation cannot prove that
    /// an upgrade keeps their keys.
    pub keep_operations: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            clock: StoreClock::system(),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            attempt_log: true,
            migrate: true,
            keep_operations: true,
        }
    }
}
