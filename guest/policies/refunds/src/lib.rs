//! `refunds`: one refund per customer, charge and refund id — the scenario
//! of issue 46, written in all three languages against one cases file
//! (`guest/testdata/refund-cases.json`): this crate, the TypeScript policy
//! `guest/js/sdk/typecheck/refund-policy.ts` and the Python one
//! `guest/python/policies/refunds/app.py`. The suite holds them to the same
//! keys, fingerprints, refusals and decisions in the host
//! (`tests/suite/ports.rs`).
//!
//! - key: customer, charge_id, refund_id;
//! - fingerprint: amount (a canonical decimal, never negative) and currency;
//! - partition: the customer;
//! - retention: 90 days, lease 2 minutes;
//! - duplicates: another amount → the standard 422; in progress → wait 2 s
//!   a round while the claim is live, review once it expired (the refund may
//!   have been made); a retryable failure → run again; else the standard.

use idem_policy::*;

/// The refund policy.
pub struct Refunds;

impl Policy for Refunds {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "refunds",
            "1.0.0",
            "refunds",
            "One refund per charge and refund id",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
        if op.kind != "refund" {
            return Err(PolicyError::unsupported_kind(&op.kind));
        }
        let customer = op.text("customer")?;
        let amount = op.decimal("amount")?;
        if amount.starts_with('-') {
            return Err(PolicyError::invalid("amount", "must not be negative"));
        }
        let currency = op.text("currency")?;
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PolicyError::invalid(
                "currency",
                "must be an ISO 4217 code like EUR",
            ));
        }
        Ok(Derivation::new(customer)
            .key("customer", customer)
            .key("charge_id", op.text("charge_id")?)
            .key("refund_id", op.text("refund_id")?)
            .fingerprint("amount", &amount)
            .fingerprint("currency", currency)
            .retention_s(90 * DAY)
            .lease_s(2 * MINUTE as u32))
    }

    fn on_duplicate(ctx: &DuplicateContext) -> Decision {
        if !ctx.fingerprint_matches {
            return Decision::standard(ctx);
        }
        match ctx.state {
            // A live claim: wait for it (2 s a round); an expired one may
            // have refunded already, so a person decides.
            RecordState::InProgress if ctx.lease_remaining_ms > 0 => Decision::Wait(2000),
            RecordState::InProgress => Decision::MarkUnknown(Rejection::new(
                409,
                "the refund may have been made; it needs review",
            )),
            RecordState::FailedRetryable => Decision::ReExecute,
            RecordState::Completed | RecordState::FailedPermanent | RecordState::OutcomeUnknown => {
                Decision::standard(ctx)
            }
        }
    }
}

export_policy!(Refunds);

#[cfg(test)]
mod tests {
    #[test]
    fn the_shared_refund_cases_pass_natively() {
        idem_policy::testing::assert_cases::<super::Refunds>("../../testdata/refund-cases.json");
    }
}
