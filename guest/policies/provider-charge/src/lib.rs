//! `provider-charge`: a charge sent to a payment provider that deduplicates
//! by the idempotency key it is given and refuses a fencing token lower than
//! one it has already seen for that key.
//!
//! The effect is idempotent downstream, so an attempt whose outcome nobody
//! knows can safely be sent again: the provider answers a repeat from its
//! own record instead of charging twice, and a deposed holder that wakes up
//! late is refused by the provider (lower fence) and by the store (its
//! completion is fenced). Compare `billing-charge`, whose effect has no such
//! downstream and so sends an expired claim to review instead.
//!
//! - key: tenant, customer, billing_period, invoice_id; fingerprint: amount
//!   and currency (another amount under the same key is refused with 422);
//!   partition: the customer;
//! - retention: 400 days; lease: 5 minutes;
//! - duplicates: completed → replay; in progress → 409 with retry-after;
//!   lease expired, outcome-unknown or failed-retryable → re-execute (a
//!   take-over under a higher fence; hand `IDEM_KEY` and `IDEM_FENCE` to the
//!   provider).

use idem_policy::*;

/// The provider-charge policy.
pub struct ProviderCharge;

impl Policy for ProviderCharge {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "provider-charge",
            "1.0.0",
            "payments",
            "One charge per invoice through a provider that deduplicates by key and fence",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
        if op.kind != "charge" {
            return Err(PolicyError::unsupported_kind(&op.kind));
        }
        let customer = op.text("customer")?;
        Ok(Derivation::new(customer)
            .key("tenant", &op.tenant)
            .key("customer", customer)
            .key("billing_period", op.text("billing_period")?)
            .key("invoice_id", op.text("invoice_id")?)
            .fingerprint("amount", op.material("amount")?)
            .fingerprint("currency", op.text("currency")?)
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE as u32))
    }

    fn on_duplicate(ctx: &DuplicateContext) -> Decision {
        if !ctx.fingerprint_matches {
            return Decision::standard(ctx);
        }
        match ctx.state {
            // The provider refuses the deposed holder's late request by its
            // fence and answers ours from its record if it already charged.
            RecordState::InProgress if ctx.lease_remaining_ms == 0 => Decision::ReExecute,
            RecordState::OutcomeUnknown => Decision::ReExecute,
            _ => Decision::standard(ctx),
        }
    }
}

export_policy!(ProviderCharge);

#[cfg(test)]
mod tests {
    #[test]
    fn cases_pass_natively() {
        idem_policy::testing::assert_cases::<super::ProviderCharge>("cases.json");
    }
}
