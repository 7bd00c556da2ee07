//! The payment ledger: the payment provider the nightly job charges.
//!
//! It records every charge attempt with the key and fence it carried, and
//! can be configured like a real provider: honour idempotency keys (a
//! repeated key gets the original charge back, no money moves), honour
//! fences (a fence lower than the highest seen for the key is refused), or
//! neither (every request moves money: a plain card-charge API).
//!
//! Whatever its mode, the ledger also *watches* for key drift: an invoice
//! charged twice under two different keys. It cannot refuse that (to a
//! provider, a new key is a new payment), but it reports it, so that a
//! policy change that altered keys mid-period is never a silent double
//! charge.

use std::collections::HashMap;

use serde::Serialize;

/// What the ledger enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LedgerMode {
    /// A repeated idempotency key gets the original charge back and moves
    /// no money.
    pub honour_keys: bool,
    /// A fence lower than the highest accepted for the same key is refused.
    pub honour_fences: bool,
}

impl LedgerMode {
    /// Neither keys nor fences: every request moves money.
    pub const NAIVE: LedgerMode = LedgerMode {
        honour_keys: false,
        honour_fences: false,
    };
    /// Deduplicates by idempotency key.
    pub const KEYS: LedgerMode = LedgerMode {
        honour_keys: true,
        honour_fences: false,
    };
    /// Refuses stale fences.
    pub const FENCES: LedgerMode = LedgerMode {
        honour_keys: false,
        honour_fences: true,
    };
    /// Both.
    pub const BOTH: LedgerMode = LedgerMode {
        honour_keys: true,
        honour_fences: true,
    };

    /// A short name for reports: `naive`, `keys`, `fences`, `keys+fences`.
    pub fn name(self) -> &'static str {
        match (self.honour_keys, self.honour_fences) {
            (false, false) => "naive",
            (true, false) => "keys",
            (false, true) => "fences",
            (true, true) => "keys+fences",
        }
    }
}

/// What the ledger answered a charge request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum LedgerReply {
    /// Money moved; here is the receipt.
    Charged {
        /// The new charge's receipt.
        receipt: String,
    },
    /// The key was seen before: no money moved; the original receipt.
    AlreadyCharged {
        /// The receipt of the charge first made under this key.
        receipt: String,
    },
    /// The fence is lower than one already accepted for this key: refused.
    StaleFence {
        /// The highest fence the ledger accepted for this key.
        highest: u64,
    },
}

impl LedgerReply {
    /// Whether money moved.
    pub fn moved_money(&self) -> bool {
        matches!(self, LedgerReply::Charged { .. })
    }
}

/// One charge request, as the ledger saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    /// Simulated ms since the simulation started.
    pub at_ms: u64,
    /// The run that sent it.
    pub run: String,
    /// The invoice's index in the job.
    pub invoice: usize,
    /// The idempotency key it carried (none under a lock alone).
    pub key: Option<String>,
    /// The fence it carried (none under a lock alone).
    pub fence: Option<u64>,
    /// What the ledger did.
    pub reply: LedgerReply,
}

/// Two accepted charges of one invoice under different keys: the policy
/// changed how it derives keys while the invoice's first charge stood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyDrift {
    /// The invoice's index in the job.
    pub invoice: usize,
    /// The key of the earlier charge.
    pub first_key: String,
    /// The key of the later charge.
    pub later_key: String,
    /// The run that made the later charge.
    pub run: String,
}

/// The simulated payment provider.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    mode: LedgerMode,
    entries: Vec<LedgerEntry>,
    /// Receipt of the first accepted charge per key.
    by_key: HashMap<String, String>,
    /// Highest accepted fence per key.
    highest_fence: HashMap<String, u64>,
    /// Keys of the accepted charges per invoice (for drift).
    keys_by_invoice: HashMap<usize, Vec<String>>,
    drift: Vec<KeyDrift>,
    next_receipt: u64,
}

impl Ledger {
    /// An empty ledger enforcing `mode`.
    pub fn new(mode: LedgerMode) -> Self {
        Ledger {
            mode,
            ..Ledger::default()
        }
    }

    /// What the ledger enforces.
    pub fn mode(&self) -> LedgerMode {
        self.mode
    }

    /// Charges `invoice` on behalf of `run`, carrying `key` and `fence`.
    pub fn charge(
        &mut self,
        at_ms: u64,
        run: &str,
        invoice: usize,
        key: Option<&str>,
        fence: Option<u64>,
    ) -> LedgerReply {
        let reply = self.decide(key, fence);
        if let (LedgerReply::Charged { .. }, Some(key)) = (&reply, key) {
            let keys = self.keys_by_invoice.entry(invoice).or_default();
            if let Some(first) = keys.iter().find(|k| k.as_str() != key) {
                self.drift.push(KeyDrift {
                    invoice,
                    first_key: first.clone(),
                    later_key: key.to_string(),
                    run: run.to_string(),
                });
            }
            keys.push(key.to_string());
        }
        self.entries.push(LedgerEntry {
            at_ms,
            run: run.to_string(),
            invoice,
            key: key.map(str::to_string),
            fence,
            reply: reply.clone(),
        });
        reply
    }

    /// The receipt the next charge that moves money gets: what an effect
    /// in the store's transaction stores as its outcome before its commit
    /// (the charge it records once committed gets this very receipt).
    pub fn next_receipt(&self) -> String {
        format!("rcpt-{:04}", self.next_receipt + 1)
    }

    fn decide(&mut self, key: Option<&str>, fence: Option<u64>) -> LedgerReply {
        if let Some(key) = key {
            if self.mode.honour_fences
                && let (Some(fence), Some(&highest)) = (fence, self.highest_fence.get(key))
                && fence < highest
            {
                return LedgerReply::StaleFence { highest };
            }
            if self.mode.honour_keys
                && let Some(receipt) = self.by_key.get(key)
            {
                return LedgerReply::AlreadyCharged {
                    receipt: receipt.clone(),
                };
            }
        }
        let receipt = self.next_receipt();
        self.next_receipt += 1;
        if let Some(key) = key {
            self.by_key
                .entry(key.to_string())
                .or_insert_with(|| receipt.clone());
            if let Some(fence) = fence {
                let highest = self.highest_fence.entry(key.to_string()).or_insert(0);
                *highest = (*highest).max(fence);
            }
        }
        LedgerReply::Charged { receipt }
    }

    /// Every request, in order.
    pub fn entries(&self) -> &[LedgerEntry] {
        &self.entries
    }

    /// Every key drift seen.
    pub fn drift(&self) -> &[KeyDrift] {
        &self.drift
    }

    /// Accepted charges (money moved) per invoice, for `invoices` invoices.
    pub fn charges_per_invoice(&self, invoices: usize) -> Vec<u32> {
        let mut counts = vec![0u32; invoices];
        for e in &self.entries {
            if e.reply.moved_money()
                && let Some(c) = counts.get_mut(e.invoice)
            {
                *c += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_naive_ledger_charges_every_request() {
        let mut l = Ledger::new(LedgerMode::NAIVE);
        assert!(l.charge(0, "a", 0, Some("k"), Some(2)).moved_money());
        assert!(l.charge(1, "b", 0, Some("k"), Some(1)).moved_money());
        assert_eq!(l.charges_per_invoice(1), vec![2]);
    }

    #[test]
    fn keys_and_fences_refuse_what_they_should() {
        let mut l = Ledger::new(LedgerMode::KEYS);
        let first = l.charge(0, "a", 0, Some("k"), Some(1));
        assert_eq!(
            l.charge(1, "b", 0, Some("k"), Some(2)),
            LedgerReply::AlreadyCharged {
                receipt: match first {
                    LedgerReply::Charged { receipt } => receipt,
                    other => panic!("{other:?}"),
                }
            }
        );
        let mut l = Ledger::new(LedgerMode::FENCES);
        assert!(l.charge(0, "b", 0, Some("k"), Some(5)).moved_money());
        assert_eq!(
            l.charge(1, "a", 0, Some("k"), Some(4)),
            LedgerReply::StaleFence { highest: 5 }
        );
        // A fence is no key: a higher fence moves money again.
        assert!(l.charge(2, "c", 0, Some("k"), Some(6)).moved_money());
        assert_eq!(l.charges_per_invoice(1), vec![2]);
    }

    #[test]
    fn key_drift_is_reported_even_when_keys_are_honoured() {
        let mut l = Ledger::new(LedgerMode::BOTH);
        assert!(l.charge(0, "a", 3, Some("k1"), Some(1)).moved_money());
        assert!(l.charge(1, "b", 3, Some("k2"), Some(2)).moved_money());
        assert_eq!(l.drift().len(), 1);
        assert_eq!((l.drift()[0].invoice, l.drift()[0].run.as_str()), (3, "b"));
    }
}
