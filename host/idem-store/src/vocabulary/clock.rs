//! The store clock.
//!
//! Leases and retention are measured by the store's clock, never the
//! caller's: a store reads its clock inside each transaction (for SQLite,
//! after it holds the write lock, so that "now" is ordered with the writes
//! it decides). A networked store would read the database server's clock;
//! tests inject a [`ManualClock`] instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a store's time comes from: the system clock by default, or a
/// [`ManualClock`] in tests.
#[derive(Debug, Clone, Default)]
pub struct StoreClock(Source);

#[derive(Debug, Clone, Default)]
enum Source {
    #[default]
    System,
    Manual(Arc<AtomicU64>),
    Offset(i64),
}

impl StoreClock {
    /// The system clock (ms since the Unix epoch).
    pub fn system() -> Self {
        StoreClock(Source::System)
    }

    /// The system clock shifted by `offset_ms` (either way): for tests that
    /// run separate processes on one store file and need leases to have
    /// expired in one of them without sleeping.
    pub fn system_with_offset(offset_ms: i64) -> Self {
        StoreClock(Source::Offset(offset_ms))
    }

    /// How a store with a clock of its own (a database server's) reads this
    /// clock: `(Some(ms), 0)` pins "now" to a [`ManualClock`]'s reading;
    /// `(None, offset)` means the database's clock shifted by `offset` ms
    /// (0 for [`StoreClock::system`]). The system clock of *this* process is
    /// then never read: leases are measured by the server, which every
    /// client of a shared database agrees on.
    #[cfg(feature = "postgres")]
    pub(crate) fn for_database(&self) -> (Option<u64>, i64) {
        match &self.0 {
            Source::System => (None, 0),
            Source::Manual(ms) => (Some(ms.load(Ordering::SeqCst)), 0),
            Source::Offset(offset) => (None, *offset),
        }
    }

    /// Now, in ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Source::System => system_ms(),
            Source::Manual(ms) => ms.load(Ordering::SeqCst),
            Source::Offset(offset) => system_ms().saturating_add_signed(*offset),
        }
    }
}

/// The system clock in ms. A clock before 1970 reads as 0: leases then look
/// expired, which fails safe (take-overs are still fenced).
fn system_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A clock that only moves when told to, shared by every store it is given
/// to (clones share the same time).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        // fetch_update cannot fail with a closure that always returns Some.
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }

    /// Now, in ms.
    pub fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// A store clock driven by this clock.
    pub fn store_clock(&self) -> StoreClock {
        StoreClock(Source::Manual(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let manual = ManualClock::new(1_000);
        let clock = manual.store_clock();
        assert_eq!(clock.now_ms(), 1_000);
        manual.advance(Duration::from_millis(250));
        assert_eq!(clock.now_ms(), 1_250);
        assert_eq!(manual.clone().now_ms(), 1_250);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(StoreClock::system().now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn an_offset_clock_runs_ahead_of_the_system_clock() {
        let day = 86_400_000;
        let before = StoreClock::system().now_ms();
        let ahead = StoreClock::system_with_offset(day).now_ms();
        let after = StoreClock::system().now_ms();
        assert!(ahead >= before + day as u64 && ahead <= after + day as u64);
        assert!(StoreClock::system_with_offset(-day).now_ms() <= after - day as u64);
    }
}
