//! Admission to the instance pool. The pool has a fixed number of slots
//! ([`super::RuntimeConfig::max_concurrent_evaluations`]); instantiating
//! with every slot taken fails, and that failure is no fault of the policy.
//! So an evaluation first takes a slot here, waiting while all are busy
//! (an evaluation holds one for at most its deadline), and gives it back
//! when it ends, whatever the outcome.

use std::sync::{Condvar, Mutex, PoisonError};

/// A counting semaphore for threads: evaluations are synchronous, and run
/// on async workers and on blocking threads alike.
pub(crate) struct Slots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// A taken slot, given back when dropped.
pub(crate) struct Slot<'a>(&'a Slots);

impl Slots {
    pub(crate) fn new(count: u32) -> Slots {
        Slots {
            free: Mutex::new(count.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Takes a slot, waiting for one while all are busy.
    pub(crate) fn take(&self) -> Slot<'_> {
        // The count stays right even if a holder panicked: recover it.
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(PoisonError::into_inner);
        *free += 1;
        self.0.freed.notify_one();
    }
}
