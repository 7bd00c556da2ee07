//! `billing-charge`: the seed's policy. One charge per (tenant, customer,
//! billing period, invoice), however often the nightly job runs.
//!
//! - key: tenant, customer, billing_period, invoice_id (the tenant scopes the
//!   others: two tenants' `c1` are different customers);
//! - fingerprint: amount and currency (a re-run with another amount is not a
//!   replay: it is refused with 422);
//! - partition: the customer, for partitioned ownership;
//! - retention: 400 days (a billing period plus the dispute window), lease
//!   5 minutes;
//! - duplicates: completed → replay; in progress → 409 with retry-after;
//!   lease expired → outcome-unknown for review; failed-retryable →
//!   re-execute; outcome-unknown → 409 for review.

use idem_policy::*;

/// The billing-charge policy.
pub struct BillingCharge;

impl Policy for BillingCharge {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "billing-charge",
            "1.0.0",
            "billing",
            "One charge per customer, billing period and invoice",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
        if op.kind != "charge" {
            return Err(PolicyError::unsupported_kind(&op.kind));
        }
        let customer = op.text("customer")?;
        let period = op.text("billing_period")?;
        if !is_year_month(period) {
            return Err(PolicyError::invalid(
                "billing_period",
                "must be a month like 2026-11",
            ));
        }
        let currency = op.text("currency")?;
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PolicyError::invalid(
                "currency",
                "must be an ISO 4217 code like EUR",
            ));
        }
        Ok(Derivation::new(customer)
            .key("tenant", &op.tenant)
            .key("customer", customer)
            .key("billing_period", period)
            .key("invoice_id", op.text("invoice_id")?)
            .fingerprint("amount", op.material("amount")?)
            .fingerprint("currency", currency)
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE as u32))
    }

    fn on_duplicate(ctx: &DuplicateContext) -> Decision {
        Decision::standard(ctx)
    }
}

fn is_year_month(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7
        && b[4] == b'-'
        && b[..4].iter().chain(&b[5..]).all(u8::is_ascii_digit)
        && matches!(
            &s[5..],
            "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12"
        )
}

export_policy!(BillingCharge);

#[cfg(test)]
mod tests {
    #[test]
    fn cases_pass_natively() {
        idem_policy::testing::assert_cases::<super::BillingCharge>("cases.json");
    }
}
