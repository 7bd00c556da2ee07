//! Which named part explains a changed key: the material of two
//! derivations of one operation compared part by part (the material
//! `idem key --explain` shows). Pure; the lines name parts, never values,
//! so that every operation changed by the same edit falls in one group.

use idem_core::{KeyedDerivation, Part};

/// The lines that explain how `new`'s key and fingerprint material differ
/// from `old`'s: a namespace change, parts renamed (same value, new name),
/// added, removed, with a changed value, or reordered. Empty when the
/// material is the same.
pub fn explain(old: &KeyedDerivation, new: &KeyedDerivation) -> Vec<String> {
    let mut lines = Vec::new();
    if old.namespace != new.namespace {
        lines.push(format!(
            "namespace `{}` became `{}`",
            old.namespace, new.namespace
        ));
    }
    lines.extend(parts("key", &old.key_material, &new.key_material));
    lines.extend(parts(
        "fingerprint",
        &old.fingerprint_material,
        &new.fingerprint_material,
    ));
    lines
}

/// How one list of parts changed.
fn parts(domain: &str, old: &[Part], new: &[Part]) -> Vec<String> {
    let value_of = |list: &[Part], name: &str| {
        list.iter()
            .find(|p| p.name == name)
            .map(|p| p.value.clone())
    };
    let mut removed: Vec<&Part> = old
        .iter()
        .filter(|p| value_of(new, &p.name).is_none())
        .collect();
    let mut added: Vec<&Part> = new
        .iter()
        .filter(|p| value_of(old, &p.name).is_none())
        .collect();
    let mut lines = Vec::new();
    // A removed part whose value reappears under a new name was renamed.
    removed.retain(|r| match added.iter().position(|a| a.value == r.value) {
        Some(i) => {
            lines.push(format!(
                "{domain} part `{}` renamed `{}`",
                r.name, added[i].name
            ));
            added.remove(i);
            false
        }
        None => true,
    });
    for r in removed {
        lines.push(format!("{domain} part `{}` removed", r.name));
    }
    for a in added {
        lines.push(format!("{domain} part `{}` added", a.name));
    }
    for p in old {
        if let Some(v) = value_of(new, &p.name)
            && v != p.value
        {
            lines.push(format!("{domain} part `{}` has another value", p.name));
        }
    }
    if lines.is_empty() && old != new {
        lines.push(format!("{domain} parts reordered"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::Derivation;

    fn keyed(namespace: &str, key: &[(&str, &str)], fp: &[(&str, &str)]) -> KeyedDerivation {
        let parts = |l: &[(&str, &str)]| l.iter().map(|(n, v)| Part::new(*n, *v)).collect();
        Derivation {
            key: parts(key),
            fingerprint: parts(fp),
            partition: "p".into(),
            retention_s: 60,
            lease_s: 1,
        }
        .finish(namespace)
        .unwrap()
    }

    #[test]
    fn names_renamed_added_removed_changed_and_reordered_parts() {
        let old = keyed(
            "billing",
            &[("customer", "c1"), ("invoice_id", "i1")],
            &[("amount", "100")],
        );
        assert!(explain(&old, &old).is_empty());
        let renamed = keyed(
            "billing",
            &[("customer", "c1"), ("invoice", "i1")],
            &[("amount", "100")],
        );
        assert_eq!(
            explain(&old, &renamed),
            ["key part `invoice_id` renamed `invoice`"]
        );
        let added = keyed(
            "billing",
            &[
                ("customer", "c1"),
                ("invoice_id", "i1"),
                ("currency", "EUR"),
            ],
            &[],
        );
        assert_eq!(
            explain(&old, &added),
            [
                "key part `currency` added",
                "fingerprint part `amount` removed"
            ]
        );
        let changed = keyed(
            "billing",
            &[("customer", "C1"), ("invoice_id", "i1")],
            &[("amount", "100")],
        );
        assert_eq!(
            explain(&old, &changed),
            ["key part `customer` has another value"]
        );
        let reordered = keyed(
            "billing",
            &[("invoice_id", "i1"), ("customer", "c1")],
            &[("amount", "100")],
        );
        assert_eq!(explain(&old, &reordered), ["key parts reordered"]);
        assert_ne!(old.key, reordered.key, "the order is hashed");
        let moved = keyed(
            "billing-2",
            &[("customer", "c1"), ("invoice_id", "i1")],
            &[("amount", "100")],
        );
        assert_eq!(
            explain(&old, &moved),
            ["namespace `billing` became `billing-2`"]
        );
    }
}
