//! The invariants idem guarantees, and exactly which configurations they
//! cover.

use std::collections::HashMap;

use idem_core::RecordState;

use crate::Report;
use crate::ledger::{LedgerMode, LedgerReply};

/// What idem promises about charges, which depends on the policy and on
/// what the payment provider enforces.
///
/// The engine guarantees one live claim per key and fences every write. The
/// effect, though, happens at the provider: when a policy re-executes an
/// expired claim, the first holder may already have charged (or may charge
/// on waking up), and only the provider can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// The policy never re-executes an expired claim (`billing-charge`
    /// sends it to review): at most one charge per invoice, whatever the
    /// ledger enforces.
    NoBlindReExecution,
    /// The policy re-executes expired claims and the ledger deduplicates by
    /// key (with or without fences): at most one charge per invoice.
    LedgerHonoursKeys,
    /// The policy re-executes expired claims and the ledger refuses only
    /// stale fences: a deposed holder's late charge is refused, but a charge
    /// made *before* its holder was deposed (a crash, a lost completion, a
    /// pause after the charge) is followed by the take-over's own charge. So:
    /// no accepted charge carries a fence lower than an earlier accepted
    /// charge of the same invoice, and that is all.
    LedgerRefusesStaleFences,
    /// The policy re-executes expired claims and the ledger enforces
    /// nothing: no promise about charges (only that nothing is lost).
    NoneWithoutDownstreamHelp,
}

impl Guarantee {
    /// The guarantee for a policy that does (or does not) re-execute
    /// expired claims, with a ledger in `mode`.
    pub fn for_config(policy_re_executes: bool, mode: LedgerMode) -> Self {
        match (policy_re_executes, mode.honour_keys, mode.honour_fences) {
            (false, _, _) => Guarantee::NoBlindReExecution,
            (true, true, _) => Guarantee::LedgerHonoursKeys,
            (true, false, true) => Guarantee::LedgerRefusesStaleFences,
            (true, false, false) => Guarantee::NoneWithoutDownstreamHelp,
        }
    }

    /// Whether each invoice is charged at most once.
    pub fn at_most_once(self) -> bool {
        matches!(
            self,
            Guarantee::NoBlindReExecution | Guarantee::LedgerHonoursKeys
        )
    }
}

impl Report {
    /// Checks an idem report against `guarantee`; `reconciled` says the
    /// scenario ended with a clean run after every lease expired. Returns
    /// every violation found.
    ///
    /// - **At most once** (when the guarantee says so): each (customer,
    ///   period, invoice) moved money at most once. Under
    ///   [`Guarantee::LedgerRefusesStaleFences`]: no stale fence got through.
    /// - **Nothing lost**: an invoice that was charged has a record, either
    ///   completed or held for review (in progress or outcome-unknown),
    ///   never absent or failed; a completion the store accepted is still
    ///   there, completed; a completed record's receipt is one the ledger
    ///   really issued for that invoice.
    /// - **Every completed op recorded** (when `reconciled`): every invoice
    ///   ends completed or outcome-unknown (listed for review); nothing is
    ///   left silently undone.
    /// - **No key drift**: one policy, one key per invoice.
    pub fn check_idem(&self, guarantee: Guarantee, reconciled: bool) -> Result<(), Vec<String>> {
        let mut bad = Vec::new();
        let mut receipts: HashMap<usize, Vec<&str>> = HashMap::new();
        let mut last_fence: HashMap<usize, u64> = HashMap::new();
        for e in &self.ledger {
            if let LedgerReply::Charged { receipt } = &e.reply {
                receipts.entry(e.invoice).or_default().push(receipt);
                if guarantee == Guarantee::LedgerRefusesStaleFences {
                    let fence = e.fence.unwrap_or(0);
                    if let Some(&last) = last_fence.get(&e.invoice)
                        && fence <= last
                    {
                        bad.push(format!(
                            "invoice {}: charge under fence {fence} accepted after one under fence {last}",
                            e.invoice
                        ));
                    }
                    last_fence.insert(e.invoice, fence);
                }
            }
        }
        for (i, inv) in self.invoices.iter().enumerate() {
            let name = &inv.invoice_id;
            if guarantee.at_most_once() && inv.charges > 1 {
                bad.push(format!("{name}: charged {} times", inv.charges));
            }
            if inv.charges > 0
                && !matches!(
                    inv.record,
                    Some(
                        RecordState::Completed
                            | RecordState::InProgress
                            | RecordState::OutcomeUnknown
                    )
                )
            {
                bad.push(format!(
                    "{name}: charged, but its record is {:?} (lost)",
                    inv.record
                ));
            }
            if inv.recorded_by_a_run && inv.record != Some(RecordState::Completed) {
                bad.push(format!(
                    "{name}: a completion was accepted, yet the record is {:?}",
                    inv.record
                ));
            }
            if let Some(receipt) = &inv.receipt
                && !receipts
                    .get(&i)
                    .is_some_and(|r| r.contains(&receipt.as_str()))
            {
                bad.push(format!(
                    "{name}: completed with receipt {receipt}, which the ledger never issued for it"
                ));
            }
            if reconciled
                && !matches!(
                    inv.record,
                    Some(RecordState::Completed | RecordState::OutcomeUnknown)
                )
            {
                bad.push(format!(
                    "{name}: after reconciliation its record is {:?}",
                    inv.record
                ));
            }
        }
        for d in &self.drift {
            bad.push(format!(
                "invoice {}: charged under two keys ({} then {}, by {})",
                d.invoice, d.first_key, d.later_key, d.run
            ));
        }
        if bad.is_empty() { Ok(()) } else { Err(bad) }
    }

    /// Checks a report of the in-store guard ([`crate::Guard::InStore`]),
    /// whose charge commits with its end, whatever the policy and the
    /// ledger: every [`Report::check_idem`] rule with at most one charge
    /// per invoice, and **nothing for a person**: no record outcome-unknown,
    /// no expired claim sent to review. When `reconciled`: every invoice
    /// charged exactly once and completed, nothing left in progress.
    pub fn check_in_store(&self, reconciled: bool) -> Result<(), Vec<String>> {
        let mut bad = self
            .check_idem(Guarantee::NoBlindReExecution, reconciled)
            .err()
            .unwrap_or_default();
        let c = &self.counters;
        if c.outcome_unknown > 0 || c.marked_unknown > 0 {
            bad.push(format!(
                "{} records outcome-unknown, {} expired claims sent to review: none may wait for a person",
                c.outcome_unknown, c.marked_unknown
            ));
        }
        if reconciled {
            for inv in &self.invoices {
                if inv.charges != 1 || inv.record != Some(RecordState::Completed) {
                    bad.push(format!(
                        "{}: after reconciliation charged {} times, record {:?}",
                        inv.invoice_id, inv.charges, inv.record
                    ));
                }
            }
        }
        if bad.is_empty() { Ok(()) } else { Err(bad) }
    }
}
