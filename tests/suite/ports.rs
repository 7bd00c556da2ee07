//! The JavaScript and Python ports of the example policies, and the refund
//! policy of issue 46 written in all three languages (TypeScript
//! `guest/js/sdk/typecheck/refund-policy.ts`, `guest/python/policies/refunds`,
//! `guest/policies/refunds`), built as `idem build` builds them (JavaScript
//! with each engine, StarlingMonkey and QuickJS: [`PORTS`]) and run in
//! the host as any policy is: for thousands of generated operations
//! (unicode, numbers in every spelling, wrong types, missing fields) each
//! derives byte-identical keys and fingerprints to the Rust policy, or the
//! same refusal (code, field and message); and each gives the Rust policy's
//! decisions on every case of its cases file (`idem test`; the refunds'
//! is `guest/testdata/refund-cases.json`, whose first case pins the key).
//!
//! The toolchains are installed on first use, the components built once
//! per run of the suite and compiled once into a cache kept in the target
//! directory. Node.js and CPython are on every machine of this kind;
//! elsewhere a missing one is said and skipped, and under CI it is a
//! failure.

use std::cell::Cell;
use std::process::Command;
use std::sync::OnceLock;

use idem::core::{Operation, OperationLimits};
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig};
use idem_tests::ports::{self, PORTS};
use idem_tests::{idem_bin, load, tool_available, workspace_root};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The policies ported to every language.
pub(crate) const POLICIES: [&str; 4] = [
    "billing-charge",
    "provider-charge",
    "http-idempotency-key",
    "refunds",
];

/// The program a port's build needs.
pub(crate) fn program_of(port: &str) -> &'static str {
    match ports::language_of(port).0 {
        "js" => "node",
        _ => "python3",
    }
}

/// A runtime whose artifact cache outlives the run: a 12–19 MB component
/// compiles once.
pub(crate) fn runtime() -> &'static PolicyRuntime {
    static RUNTIME: OnceLock<PolicyRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        PolicyRuntime::new(RuntimeConfig {
            cache_dir: Some(ports::cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    })
}

/// Any value an operation may carry: text (unicode, decomposed forms the
/// host normalises), a number in one of its many spellings, or a boolean;
/// as JSON text.
fn any_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "\\PC{0,8}".prop_map(json_text),
        1 => Just(json_text("e\u{301}".into())),
        3 => number(),
        1 => number().prop_map(json_text),
        1 => any::<bool>().prop_map(|b| b.to_string()),
    ]
}

/// A number as JSON spells it, in every spelling the canonical form must
/// see through.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,2})?",
        1 => Just("10.50".to_string()),
        1 => Just("-0".to_string()),
        1 => Just("0.000".to_string()),
        1 => Just("1e3".to_string()),
        1 => Just("123456789012345678901234567890.0100".to_string()),
    ]
}

pub(crate) fn json_text(text: String) -> String {
    serde_json::Value::from(text).to_string()
}

/// The cases file every language's `name` answers.
fn cases_of(name: &str) -> std::path::PathBuf {
    match name {
        "refunds" => workspace_root().join("guest/testdata/refund-cases.json"),
        _ => workspace_root()
            .join("guest/policies")
            .join(name)
            .join("cases.json"),
    }
}

/// The fields the four policies read, each with values of the shape a
/// policy accepts (then mixed with any value, or left out).
fn fields() -> [(&'static str, BoxedStrategy<String>); 11] {
    let text = |pattern: &'static str| pattern.prop_map(json_text).boxed();
    [
        (
            "customer",
            prop_oneof![text("[a-z0-9é]{1,8}"), text("\\PC{1,6}")].boxed(),
        ),
        ("billing_period", text("20[0-9]{2}-(0[1-9]|1[0-2])")),
        (
            "invoice_id",
            prop_oneof![text("[a-zA-Z0-9-]{1,10}"), text("\\PC{1,8}")].boxed(),
        ),
        (
            "amount",
            prop_oneof![number(), number().prop_map(json_text)].boxed(),
        ),
        ("currency", text("[A-Z]{3}")),
        ("idempotency_key", text("\\PC{1,40}")),
        ("method", text("POST|PUT|PATCH|DELETE")),
        ("path", text("/[a-z0-9/é]{0,12}")),
        ("body_sha256", text("[0-9a-fA-F]{64}")),
        (
            "charge_id",
            prop_oneof![text("ch_[a-z0-9]{1,8}"), text("\\PC{1,8}")].boxed(),
        ),
        (
            "refund_id",
            prop_oneof![text("re_[a-z0-9]{1,8}"), text("\\PC{1,8}")].boxed(),
        ),
    ]
}

/// An operation any of the four policies may be handed: each field of
/// the shape the policies accept, or of any value, or missing.
pub(crate) fn operation() -> impl Strategy<Value = String> {
    let fields: Vec<BoxedStrategy<Option<String>>> = fields()
        .into_iter()
        .map(|(name, shaped)| {
            prop_oneof![
                14 => shaped,
                3 => any_value(),
            ]
            .prop_map(move |v| format!("{name:?}:{v}"))
            .prop_map(Some)
            .boxed()
        })
        .map(|present| prop_oneof![17 => present, 3 => Just(None)].boxed())
        .collect();
    (
        prop_oneof![
            4 => Just("charge".to_string()),
            2 => Just("refund".to_string()),
            1 => "[a-z]{1,8}",
        ],
        prop_oneof![Just("acme".to_string()), "\\PC{1,6}"],
        fields,
    )
        .prop_map(|(kind, tenant, fields)| {
            let fields: Vec<String> = fields.into_iter().flatten().collect();
            format!(
                r#"{{"kind":{},"tenant":{},"fields":{{{}}}}}"#,
                json_text(kind),
                json_text(tenant),
                fields.join(",")
            )
        })
}

/// What a policy answered, in the terms that must agree across languages.
fn answer(policy: &LoadedPolicy, op: &Operation) -> String {
    let evaluated = policy.derive(op, 0).unwrap_or_else(|e| {
        panic!(
            "{} failed on {}: {e}",
            policy.info().name,
            op.canonical_json()
        )
    });
    match evaluated.value {
        Ok(d) => format!(
            "key {} fingerprint {} partition {:?} retention {} lease {}",
            d.key.to_hex(),
            d.fingerprint.to_hex(),
            d.partition,
            d.retention_s,
            d.lease_s
        ),
        // Code, status, field and message: the same in every language.
        Err(e) => format!("refused {e}"),
    }
}

/// Cases per policy and language.
const CASES: u32 = 1_000;

#[test]
fn the_ports_derive_the_rust_keys_for_generated_operations() {
    let test = "the_ports_derive_the_rust_keys_for_generated_operations";
    for lang in PORTS {
        if !tool_available(test, program_of(lang)) {
            continue;
        }
        for name in POLICIES {
            let rust = load(name);
            let port = runtime()
                .load_file(&ports::component(lang, name))
                .unwrap_or_else(|e| panic!("loading the {lang} {name}: {e}"));
            let mut runner = TestRunner::new(Config {
                cases: CASES,
                failure_persistence: None,
                ..Config::default()
            });
            let (derived, refused) = (Cell::new(0), Cell::new(0));
            let result = runner.run(&operation(), |doc| {
                // What the host would refuse before any policy sees it is
                // no test of the ports.
                let Ok(op) = Operation::from_json(&doc, &OperationLimits::default()) else {
                    return Ok(());
                };
                let expected = answer(&rust, &op);
                let side = if expected.starts_with("refused") {
                    &refused
                } else {
                    &derived
                };
                side.set(side.get() + 1);
                prop_assert_eq!(answer(&port, &op), expected, "{}", doc);
                Ok(())
            });
            if let Err(e) = result {
                panic!("the {lang} {name} differs from the Rust one: {e}");
            }
            // The generator reaches both sides of every policy.
            let (derived, refused) = (derived.get(), refused.get());
            assert!(
                derived >= 20 && refused >= 20,
                "{lang} {name}: {derived} derived, {refused} refused: the operations test too little"
            );
        }
    }
}

#[test]
fn the_ports_pass_the_rust_policies_cases_in_the_host() {
    let test = "the_ports_pass_the_rust_policies_cases_in_the_host";
    for lang in PORTS {
        if !tool_available(test, program_of(lang)) {
            continue;
        }
        for name in POLICIES {
            let cases = cases_of(name);
            let count =
                serde_json::from_slice::<serde_json::Value>(&std::fs::read(&cases).unwrap())
                    .unwrap()["cases"]
                    .as_array()
                    .unwrap()
                    .len();
            let out = Command::new(idem_bin())
                .arg("test")
                .arg("--policy")
                .arg(ports::component(lang, name))
                .arg("--cache-dir")
                .arg(ports::cache_dir())
                .arg(&cases)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{lang} {name}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let all = format!("{count} passed, 0 failed");
            assert_eq!(
                stdout.lines().last(),
                Some(all.as_str()),
                "{lang} {name}: {stdout}"
            );
        }
    }
}
