//! The policy runtime against real built components: golden vectors,
//! determinism, containment of bad policies, the artifact cache.

use idem::core::cases::{CasesFile, run_cases};
use idem::core::{Decision, DuplicateContext, Operation, OperationLimits, RecordState};
use idem::policy::{CodeSource, EvalError, LoadError, PolicyRuntime, RuntimeConfig};
use idem_tests::{load, policy_bytes, runtime, workspace_root};
use proptest::prelude::*;

const SEED_OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}"#;
/// Computed independently of this code base (Python's hashlib over the
/// documented encoding); also pinned in the policy's cases file.
const SEED_KEY: &str = "7ac249ecd5b53b49b9492abf4c55ce59e61b2dda00009c74f18a652d2270be97";

fn op(json: &str) -> Operation {
    Operation::from_json(json, &OperationLimits::default()).expect("valid op")
}

/// Adapts a loaded policy to the cases runner (same as `idem test`).
struct Wasm(idem::policy::LoadedPolicy);

impl idem::core::cases::Subject for Wasm {
    fn describe(&mut self) -> Result<idem::core::PolicyInfo, String> {
        Ok(self.0.info().clone())
    }
    fn derive(
        &mut self,
        op: &Operation,
    ) -> Result<Result<idem::core::Derivation, idem::core::PolicyError>, String> {
        self.0
            .derive_raw(op, 0)
            .map(|e| e.value)
            .map_err(|e| e.to_string())
    }
    fn on_duplicate(&mut self, ctx: &DuplicateContext) -> Result<Decision, String> {
        self.0
            .on_duplicate_unchecked(ctx, 0)
            .map(|e| e.value)
            .map_err(|e| e.to_string())
    }
}

#[test]
fn example_policies_pass_their_cases_as_wasm() {
    for name in ["billing-charge", "http-idempotency-key", "provider-charge"] {
        let path = workspace_root().join(format!("guest/policies/{name}/cases.json"));
        let file = CasesFile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let report = run_cases(&mut Wasm(load(name)), &file);
        let failures: Vec<_> = report.results.iter().filter(|r| !r.passed).collect();
        assert!(failures.is_empty(), "{name}: {failures:#?}");
        assert!(
            report.passed() >= 10,
            "{name}: only {} cases",
            report.passed()
        );
    }
}

// A case whose `expect` checks nothing fails alone: it still derives its
// key, so the cases that compare theirs with it are judged on their own,
// and a case naming a failed one twice says so once.
#[test]
fn an_empty_expect_fails_alone() {
    let op = SEED_OP.split(",\"run\"").next().unwrap().to_string() + "}";
    let cases = format!(
        r#"{{"cases":[
            {{"name":"empty","op":{op},"expect":{{}}}},
            {{"name":"same","op":{op},"expect":{{"same_key_as":"empty","same_fingerprint_as":"empty"}}}},
            {{"name":"bad","op":{{"kind":"charge","tenant":"acme","fields":{{}}}},"expect":{{"key":"00"}}}},
            {{"name":"twice","op":{op},"expect":{{"same_key_as":"bad","same_fingerprint_as":"bad"}}}}
        ]}}"#
    );
    let file = CasesFile::from_json(&cases).unwrap();
    let report = run_cases(&mut Wasm(load("billing-charge")), &file);
    let verdict: Vec<(&str, bool)> = report
        .results
        .iter()
        .map(|r| (r.name.as_str(), r.passed))
        .collect();
    assert_eq!(
        verdict,
        [
            ("empty", false),
            ("same", true),
            ("bad", false),
            ("twice", false)
        ],
        "{:#?}",
        report.results
    );
    assert!(report.results[0].detail.contains("checks nothing"));
    let twice = &report.results[3].detail;
    assert_eq!(
        twice.matches("failed without deriving a key").count(),
        1,
        "{twice}"
    );
}

/// A memoized policy answers exactly as the guest does (every case of both
/// example policies, evaluated and then answered from memory), counts what
/// it answered, and tells inputs apart down to the logical time.
#[test]
fn a_memoized_policy_answers_as_the_guest_does() {
    for name in ["billing-charge", "http-idempotency-key", "provider-charge"] {
        let path = workspace_root().join(format!("guest/policies/{name}/cases.json"));
        let file = CasesFile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let policy = load(name).memoized(1024);
        assert_eq!(policy.memo_stats().map(|s| s.hits + s.misses), Some(0));
        let first = run_cases(&mut Wasm(policy.clone()), &file);
        let after_first = policy.memo_stats().unwrap();
        assert!(after_first.misses > 0, "{name}: {after_first:?}");
        let second = run_cases(&mut Wasm(policy.clone()), &file);
        let after_second = policy.memo_stats().unwrap();
        for report in [&first, &second] {
            let failures: Vec<_> = report.results.iter().filter(|r| !r.passed).collect();
            assert!(failures.is_empty(), "{name}: {failures:#?}");
        }
        // The second pass asked the same questions: all answered from memory.
        assert_eq!(after_second.misses, after_first.misses, "{name}");
        assert_eq!(
            after_second.hits - after_first.hits,
            after_first.hits + after_first.misses,
            "{name}"
        );
    }
    let plain = load("billing-charge");
    let memo = plain.memoized(1024);
    for now_ms in [0, 1, 1_800_000_000_000] {
        assert_eq!(
            memo.derive(&op(SEED_OP), now_ms).unwrap(),
            plain.derive(&op(SEED_OP), now_ms).unwrap()
        );
    }
    assert_eq!(
        memo.memo_stats().unwrap().misses,
        3,
        "now_ms is part of the input"
    );
    // Capacity 0 remembers nothing.
    let none = plain.memoized(0);
    for _ in 0..2 {
        none.derive(&op(SEED_OP), 0).unwrap();
    }
    assert_eq!(none.memo_stats().unwrap().hits, 0);
}

#[test]
fn golden_seed_key_through_wasm() {
    let policy = load("billing-charge");
    let keyed = policy.derive(&op(SEED_OP), 0).unwrap().value.unwrap();
    assert_eq!(keyed.key.to_hex(), SEED_KEY);
    assert_eq!(keyed.partition, "c1");
    assert!(policy.digest().starts_with("sha256:") && policy.digest().len() == 7 + 64);
}

#[test]
fn fresh_instances_share_no_state_and_agree() {
    let policy = load("billing-charge");
    let first = policy.derive(&op(SEED_OP), 0).unwrap();
    for now in [0, 1, 1_800_000_000_000] {
        let again = policy.derive(&op(SEED_OP), now).unwrap();
        assert_eq!(again.value, first.value);
        // Same input, fresh instance: the same deterministic fuel.
        assert_eq!(again.fuel_used, first.fuel_used);
    }
    // Another runtime (another engine) agrees too.
    let other = PolicyRuntime::new(RuntimeConfig {
        cache_dir: None,
        ..Default::default()
    })
    .unwrap();
    let p2 = other.load_bytes(&policy_bytes("billing-charge")).unwrap();
    assert_eq!(p2.derive(&op(SEED_OP), 0).unwrap().value, first.value);
}

#[test]
fn describe_is_checked_at_load() {
    let policy = load("http-idempotency-key");
    assert_eq!(policy.info().name, "http-idempotency-key");
    assert_eq!(policy.info().namespace, "http");
}

fn expect_load_error(bytes: &[u8], check: impl Fn(&LoadError) -> bool, needle: &str) {
    match runtime().load_bytes(bytes) {
        Ok(p) => panic!(
            "loaded {:?}, expected an error containing {needle:?}",
            p.info()
        ),
        Err(e) => {
            assert!(check(&e), "unexpected error kind: {e:?}");
            assert!(
                e.to_string().contains(needle),
                "{e} should mention {needle:?}"
            );
        }
    }
}

#[test]
fn bad_components_are_refused_with_their_own_error() {
    expect_load_error(
        &policy_bytes("fixture-wasi-import"),
        |e| matches!(e, LoadError::ForbiddenImport { .. }),
        "policy imports `wasi:clocks/wall-clock@0.2.0`, `wasi:clocks/monotonic-clock@0.2.0`;",
    );
    expect_load_error(
        &policy_bytes("fixture-wrong-world"),
        |e| matches!(e, LoadError::IncompatibleVersion { .. }),
        "idem:policy/policy@9.0.0",
    );
    expect_load_error(
        &std::fs::read(idem_tests::policies_dir().join("billing-charge.core.wasm")).unwrap(),
        |e| matches!(e, LoadError::CoreModule),
        "core WebAssembly module",
    );
    expect_load_error(
        b"\0asm\x0d\0\x01\0",
        |e| matches!(e, LoadError::WrongWorld { .. }),
        "exports: nothing",
    );
    expect_load_error(
        b"#!/bin/sh\necho hi\n",
        |e| matches!(e, LoadError::NotWasm { .. }),
        "\\0asm",
    );
    expect_load_error(
        b"",
        |e| matches!(e, LoadError::NotWasm { .. }),
        "truncated or empty",
    );
    expect_load_error(
        b"\x7fELF\x02\x01\x01\0",
        |e| matches!(e, LoadError::Precompiled),
        "precompiled",
    );
    let good = policy_bytes("billing-charge");
    for cut in [9, good.len() / 3, good.len() - 1] {
        expect_load_error(
            &good[..cut],
            |e| matches!(e, LoadError::Invalid(_)),
            "invalid",
        );
    }
}

#[test]
fn oversized_components_are_refused_before_compiling() {
    let rt = PolicyRuntime::new(RuntimeConfig {
        cache_dir: None,
        limits: idem::policy::Limits {
            max_component_bytes: 1024,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let err = rt.load_bytes(&policy_bytes("billing-charge")).unwrap_err();
    assert!(
        matches!(err, LoadError::TooLarge { limit: 1024, .. }),
        "{err}"
    );
}

#[test]
fn each_misbehaviour_fails_alone_and_the_host_serves_the_next_call() {
    let policy = load("fixture-misbehaving");
    let good = op(r#"{"kind":"fine","tenant":"t"}"#);
    let expected = policy.derive(&good, 0).unwrap().value.unwrap();
    type Check = fn(&EvalError) -> bool;
    let cases: [(&str, Check); 6] = [
        // A panic: the SDK told the host its message before the trap.
        (
            "trap",
            |e| matches!(e, EvalError::Failed { message, .. } if message.starts_with("panic: asked to trap at ")),
        ),
        ("loop", |e| matches!(e, EvalError::OutOfFuel { .. })),
        ("memory-bomb", |e| {
            matches!(e, EvalError::MemoryLimit { .. })
        }),
        (
            "stack-overflow",
            |e| matches!(e, EvalError::Trap { message } if message.starts_with("stack overflow")),
        ),
        ("no-key", |e| matches!(e, EvalError::Malformed(_))),
        ("huge-key", |e| matches!(e, EvalError::Malformed(_))),
    ];
    for (kind, check) in cases {
        let bad = op(&format!(r#"{{"kind":"{kind}","tenant":"t"}}"#));
        let err = policy.derive(&bad, 0).expect_err(kind);
        assert!(check(&err), "{kind}: {err:?}");
        // The host lives on, and the same policy still answers correctly.
        assert_eq!(
            policy.derive(&good, 0).unwrap().value.unwrap(),
            expected,
            "after {kind}"
        );
    }
    // And other policies on the same runtime are untouched.
    assert_eq!(
        load("billing-charge")
            .derive(&op(SEED_OP), 0)
            .unwrap()
            .value
            .unwrap()
            .key
            .to_hex(),
        SEED_KEY
    );
}

#[test]
fn fuel_limit_is_deterministic_and_configurable() {
    let needed = load("billing-charge")
        .derive(&op(SEED_OP), 0)
        .unwrap()
        .fuel_used;
    let with_fuel = |fuel: u64| {
        let rt = PolicyRuntime::new(RuntimeConfig {
            cache_dir: None,
            limits: idem::policy::Limits {
                fuel,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        rt.load_bytes(&policy_bytes("billing-charge")).unwrap()
    };
    // Fuel is deterministic: the measured amount always suffices and is
    // always the same; half of it never does. (Wasmtime checks fuel at loop
    // heads and calls, so the boundary is not exact to the unit.)
    let exact = with_fuel(needed);
    let short = with_fuel(needed / 2);
    for _ in 0..3 {
        assert_eq!(exact.derive(&op(SEED_OP), 0).unwrap().fuel_used, needed);
        let err = short.derive(&op(SEED_OP), 0).unwrap_err();
        assert!(
            matches!(err, EvalError::OutOfFuel { limit } if limit == needed / 2),
            "{err}"
        );
    }
}

#[test]
fn unsafe_decisions_are_refused() {
    let policy = load("fixture-misbehaving");
    let ctx = DuplicateContext {
        operation: op(r#"{"kind":"fine","tenant":"t"}"#),
        state: RecordState::Completed,
        fingerprint_matches: true,
        attempts: 1,
        age_ms: 5,
        lease_remaining_ms: 0,
        outcome: None,
    };
    // The fixture always says re-execute: unsafe for a completed record.
    assert_eq!(
        policy.on_duplicate_unchecked(&ctx, 0).unwrap().value,
        Decision::ReExecute
    );
    let err = policy.on_duplicate(&ctx, 0).unwrap_err();
    assert!(matches!(err, EvalError::Unsafe(_)), "{err}");
    assert!(err.to_string().contains("never executed again"), "{err}");
    // Safe where it is safe.
    let retryable = DuplicateContext {
        state: RecordState::FailedRetryable,
        ..ctx
    };
    assert_eq!(
        policy.on_duplicate(&retryable, 0).unwrap().value,
        Decision::ReExecute
    );
}

#[test]
fn oversized_operations_are_refused() {
    let policy = load("billing-charge");
    let big = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"{}","billing_period":"2026-11","invoice_id":"i1","amount":"1","currency":"EUR"}}}}"#,
        "c".repeat(70_000)
    );
    let err = Operation::from_json(&big, &policy.limits().operation).unwrap_err();
    assert!(
        err.to_string().contains("the limit is 65536 bytes"),
        "{err}"
    );
    // An operation built in code, bypassing the JSON reader, is checked too.
    let mut o = op(SEED_OP);
    o.fields
        .insert("blob".into(), idem::core::Value::Text("x".repeat(70_000)));
    let err = policy.derive(&o, 0).unwrap_err();
    assert!(matches!(err, EvalError::Operation(_)), "{err}");
}

#[test]
fn compiled_artifacts_are_cached_and_a_corrupt_cache_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = policy_bytes("billing-charge");
    let first = PolicyRuntime::new(config())
        .unwrap()
        .load_bytes(&bytes)
        .unwrap();
    assert_eq!(first.code_source(), CodeSource::Compiled);
    let second = PolicyRuntime::new(config())
        .unwrap()
        .load_bytes(&bytes)
        .unwrap();
    assert_eq!(second.code_source(), CodeSource::Cache);
    assert_eq!(
        second.derive(&op(SEED_OP), 0).unwrap().value,
        first.derive(&op(SEED_OP), 0).unwrap().value
    );
    // Corrupt every artifact: the next load compiles again and still works.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let third = PolicyRuntime::new(config())
        .unwrap()
        .load_bytes(&bytes)
        .unwrap();
    assert_eq!(third.code_source(), CodeSource::Compiled);
    assert_eq!(
        third
            .derive(&op(SEED_OP), 0)
            .unwrap()
            .value
            .unwrap()
            .key
            .to_hex(),
        SEED_KEY
    );
}

fn field_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        "[a-zA-Z0-9 éü_-]{0,12}".prop_map(serde_json::Value::from),
        any::<i32>().prop_map(serde_json::Value::from),
        any::<bool>().prop_map(serde_json::Value::from),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The native SDK (what `cargo test` runs) and the built component give
    /// the same key, fingerprint or refusal for any operation.
    #[test]
    fn native_sdk_and_wasm_agree(
        customer in "[a-z0-9é]{0,6}",
        period in prop_oneof!["2026-(0[1-9]|1[0-2])", "[0-9-]{0,8}"],
        invoice in "[a-z0-9]{1,6}",
        amount in field_value(),
        currency in prop_oneof![Just("EUR".to_string()), "[A-Za-z]{2,4}"],
        tenant in "[a-z]{1,5}",
        drop_customer in any::<bool>(),
    ) {
        let mut fields = serde_json::json!({
            "billing_period": period, "invoice_id": invoice, "amount": amount, "currency": currency,
        });
        if !drop_customer {
            fields["customer"] = customer.into();
        }
        let doc = serde_json::json!({"kind": "charge", "tenant": tenant, "fields": fields}).to_string();
        let native = idem_policy::testing::derive_key::<billing_charge::BillingCharge>(&doc);
        let wasm = load_billing().derive(&op(&doc), 0).unwrap().value;
        match (native, wasm) {
            (Ok(n), Ok(w)) => prop_assert_eq!(n, w),
            (Err(n), Err(w)) => prop_assert_eq!(n, w.to_string()),
            (n, w) => prop_assert!(false, "native {:?} vs wasm {:?}", n, w),
        }
    }
}

fn load_billing() -> &'static idem::policy::LoadedPolicy {
    static P: std::sync::OnceLock<idem::policy::LoadedPolicy> = std::sync::OnceLock::new();
    P.get_or_init(|| load("billing-charge"))
}

/// More callers than the instance pool has slots: evaluations beyond
/// `max_concurrent_evaluations` wait for a slot instead of failing (a busy
/// pool is not the policy's fault). Threads, as the async runtime's workers
/// and its blocking threads are.
#[test]
fn more_callers_than_slots_wait_for_a_slot() {
    let runtime = PolicyRuntime::new(RuntimeConfig {
        cache_dir: None,
        max_concurrent_evaluations: 2,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let policy = runtime.load_bytes(&policy_bytes("billing-charge")).unwrap();
    let failures: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..32)
            .map(|t| {
                let policy = &policy;
                scope.spawn(move || {
                    (0..40)
                        .filter(|i| {
                            let op = op(&format!(
                                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{t}","billing_period":"2026-11","invoice_id":"i{i}","amount":"1","currency":"EUR"}}}}"#
                            ));
                            policy.derive(&op, 0).is_err()
                        })
                        .count()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(failures, 0, "evaluations failed for want of a slot");
}
