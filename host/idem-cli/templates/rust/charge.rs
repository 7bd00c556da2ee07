//! `{{name}}`: one charge per (tenant, customer, invoice), however often the
//! job that sends it runs.
//!
//! - key: tenant, customer, invoice_id (the tenant scopes the others: two
//!   tenants' `c1` are different customers);
//! - fingerprint: amount (as a canonical decimal: `"10.50"`, `"10.5"` and
//!   `10.5` are one amount) and currency; the same invoice with another
//!   amount is not a replay, it is refused with 422;
//! - partition: the customer;
//! - retention: 400 days, lease: 5 minutes;
//! - duplicates: `Decision::standard` (completed → replay, in progress →
//!   409 with retry-after, lease expired → outcome-unknown for review,
//!   failed-retryable → re-execute).
//!
//! Build and test: `idem build` then `idem test --policy <the .wasm it
//! printed> cases.json`; `cargo test` runs the same cases natively.

use idem_policy::*;

/// The policy.
pub struct {{Type}};

impl Policy for {{Type}} {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "{{name}}",
            "0.1.0",
            "{{name}}",
            "One charge per tenant, customer and invoice",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
        if op.kind != "charge" {
            return Err(PolicyError::unsupported_kind(&op.kind));
        }
        let customer = op.text("customer")?;
        let amount = op.decimal("amount")?;
        if amount.starts_with('-') || amount == "0" {
            return Err(PolicyError::invalid("amount", "must be more than 0"));
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
            .key("invoice_id", op.text("invoice_id")?)
            .fingerprint("amount", &amount)
            .fingerprint("currency", currency)
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE as u32))
    }

    fn on_duplicate(ctx: &DuplicateContext) -> Decision {
        Decision::standard(ctx)
    }
}

export_policy!({{Type}});

#[cfg(test)]
mod tests {
    /// The cases, natively: fast, and a failing case's panic is readable.
    #[test]
    fn cases() {
        idem_policy::testing::assert_cases::<super::{{Type}}>("cases.json");
    }

    /// The same cases against the built component, in the host (needs
    /// `idem` on PATH or in IDEM_BIN): what the host will run.
    #[test]
    fn cases_in_the_host() {
        idem_policy::testing::assert_cases_in_host("cases.json");
    }
}
