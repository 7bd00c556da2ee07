//! A policy's life across versions, through the CLI with real policies:
//! `idem diff` over a corpus and over a store's records (SQLite and
//! PostgreSQL), a key-changing upgrade caught and a compatible one passed;
//! the golden vectors a component carries, and the gate that runs them;
//! the lifecycle manifest.
//!
//! The versions are test fixtures built from `billing-charge` 1.0.0:
//! `fixture-billing-v2-renamed` (2.0.0: the key part `invoice_id` renamed
//! `invoice`, so every key changes) and `fixture-billing-v1-1` (1.1.0: a
//! new optional field `po_number`, the same keys).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use idem::lifecycle::{GateError, run_golden_vectors};
use idem_guest_build::add_sections;
use idem_tests::{TestStore, idem_bin, policy_path, postgres_url};
use serde_json::Value;

const V1: &str = "billing-charge";
const V2_RENAMED: &str = "fixture-billing-v2-renamed";
const V1_1: &str = "fixture-billing-v1-1";

fn op(invoice: u32) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{invoice}","billing_period":"2026-11","invoice_id":"i{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

/// The test's directory and store (`idem_tests::TestStore`), with the
/// commands this file runs against them.
struct Env(TestStore);

impl std::ops::Deref for Env {
    type Target = TestStore;
    fn deref(&self) -> &TestStore {
        &self.0
    }
}

impl Env {
    fn sqlite() -> Env {
        Env(TestStore::sqlite())
    }

    fn postgres(url: &str) -> Env {
        Env(TestStore::postgres(url))
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn idem(&self, args: &[&str]) -> Output {
        Command::new(idem_bin())
            .args(args)
            .env("IDEM_CACHE_DIR", self.dir.path().join("cache"))
            .stdin(Stdio::null())
            .output()
            .expect("idem runs")
    }

    /// `idem exec` of `op` under `policy`, running `true`.
    fn exec(&self, policy: &str, op: &str, extra: &[&str]) {
        let path = self.write("op.json", op);
        let policy = policy_path(policy);
        let mut args = vec![
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store,
            "--op",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "true"]);
        let out = self.idem(&args);
        assert!(out.status.success(), "exec: {}", text(&out.stderr));
    }

    /// `idem diff --json` of `old` against `new` over `source` (`--ops
    /// FILE` or `--store URL`): the exit status and the report.
    fn diff(&self, old: &str, new: &str, source: &[&str]) -> (i32, Value) {
        let (old, new) = (policy_path(old), policy_path(new));
        let mut args = vec![
            "diff",
            "--old",
            old.to_str().unwrap(),
            "--new",
            new.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(source);
        let out = self.idem(&args);
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
        (out.status.code().unwrap(), report)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn on_every_store(test: &str, check: impl Fn(&Env)) {
    check(&Env::sqlite());
    if let Some(url) = postgres_url(&format!("lifecycle::{test}")) {
        check(&Env::postgres(&url));
    }
}

fn corpus(env: &Env, lines: &[String]) -> PathBuf {
    env.write("corpus.jsonl", &(lines.join("\n") + "\n"))
}

#[test]
fn diff_over_a_corpus_names_the_renamed_part_and_fails() {
    let env = Env::sqlite();
    let ops: Vec<String> = (1..=3).map(op).collect();
    let file = corpus(&env, &ops);
    let file = file.to_str().unwrap();
    let (status, report) = env.diff(V1, V2_RENAMED, &["--ops", file]);
    assert_eq!(status, 1, "{report:#}");
    assert_eq!(report["compared"], 3);
    assert_eq!(report["unchanged"], 0);
    assert_eq!(report["key_changes"], 3);
    let groups = report["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "one edit, one group: {report:#}");
    assert_eq!(groups[0]["changes"], serde_json::json!(["key"]));
    assert_eq!(
        groups[0]["explanation"],
        serde_json::json!(["key part `invoice_id` renamed `invoice`"])
    );
    assert_eq!(groups[0]["count"], 3);
    assert_eq!(groups[0]["examples"][0]["source"], "line 1");
    assert_ne!(
        groups[0]["examples"][0]["old"]["key"],
        groups[0]["examples"][0]["new"]["key"]
    );

    // The text report says the same, and why it exits 1.
    let (old, new) = (policy_path(V1), policy_path(V2_RENAMED));
    let out = env.idem(&[
        "diff",
        "--old",
        old.to_str().unwrap(),
        "--new",
        new.to_str().unwrap(),
        "--ops",
        file,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("key (3): key part `invoice_id` renamed `invoice`"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("3 keys would change"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn diff_over_a_corpus_passes_a_compatible_upgrade() {
    let env = Env::sqlite();
    let mut ops: Vec<String> = (1..=3).map(op).collect();
    // An operation the new version accepts with its new optional field:
    // still the same key as without it.
    ops.push(op(4).replace(
        r#""currency":"EUR""#,
        r#""currency":"EUR","po_number":"PO-7""#,
    ));
    let file = corpus(&env, &ops);
    let (status, report) = env.diff(V1, V1_1, &["--ops", file.to_str().unwrap()]);
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["compared"], 4);
    assert_eq!(report["unchanged"], 4);
    assert_eq!(report["groups"], serde_json::json!([]));
}

#[test]
fn diff_names_a_bad_corpus_line() {
    let env = Env::sqlite();
    let file = corpus(&env, &[op(1), "{\"kind\":".into()]);
    let (old, new) = (policy_path(V1), policy_path(V1_1));
    let out = env.idem(&[
        "diff",
        "--old",
        old.to_str().unwrap(),
        "--new",
        new.to_str().unwrap(),
        "--ops",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("line 2"),
        "{}",
        text(&out.stderr)
    );
}

// Records made by `idem exec` keep their operation; `idem diff --store`
// derives each again: the renamed key part changes every key (exit 1), the
// compatible version none (exit 0); a record whose operation was not kept
// is listed as not diffable, with why.
#[test]
fn diff_over_a_store_catches_the_key_change_in_retention() {
    on_every_store("diff_over_a_store", |env| {
        env.exec(V1, &op(1), &[]);
        env.exec(V1, &op(2), &[]);
        env.exec(V1, &op(3), &["--no-keep-operations"]);
        let store = ["--store", env.store.as_str()];

        let (status, report) = env.diff(V1, V2_RENAMED, &store);
        assert_eq!(status, 1, "{report:#}");
        assert_eq!(report["compared"], 2);
        assert_eq!(report["key_changes"], 2);
        assert_eq!(
            report["groups"][0]["explanation"],
            serde_json::json!(["key part `invoice_id` renamed `invoice`"])
        );
        let not = &report["not_diffable"];
        assert_eq!(not.as_array().unwrap().len(), 1, "{report:#}");
        assert_eq!(not[0]["count"], 1);
        assert_eq!(
            not[0]["reason"],
            "the host was configured not to keep operations"
        );

        let (status, report) = env.diff(V1, V1_1, &store);
        assert_eq!(status, 0, "{report:#}");
        assert_eq!(report["compared"], 2);
        assert_eq!(report["unchanged"], 2);
    });
}

// The golden vectors: `idem build` (here the tests' build script, through
// the same idem-guest-build) embeds the cases.json beside a policy crate
// as the component's `idem-cases` section; the host finds it and it passes.
#[test]
fn built_policies_carry_their_golden_vectors_and_pass_them() {
    let policy = idem_tests::load(V1);
    let carried = policy
        .golden_cases()
        .expect("billing-charge carries its cases.json");
    let file = idem_tests::workspace_root().join("guest/policies/billing-charge/cases.json");
    assert_eq!(carried, std::fs::read_to_string(file).unwrap());
    let report = run_golden_vectors(&policy, None)
        .expect("it passes its own vectors")
        .expect("it has vectors");
    assert!(report.results.len() >= 4, "{report:?}");
    assert!(
        idem_tests::load(V2_RENAMED).golden_cases().is_none(),
        "a crate without cases.json carries none"
    );

    // `idem test` without a cases file runs the carried ones.
    let env = Env::sqlite();
    let policy = policy_path(V1);
    let out = env.idem(&["test", "--policy", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(" passed, 0 failed"),
        "{}",
        text(&out.stdout)
    );
    let renamed = policy_path(V2_RENAMED);
    let out = env.idem(&["test", "--policy", renamed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("carries no golden vectors"),
        "{}",
        text(&out.stderr)
    );
}

// Version 2.0.0 shipped with version 1.0.0's vectors (its author renamed a
// key part and forgot the pinned keys): the gate refuses it, naming the
// first failing case.
#[test]
fn a_version_failing_its_own_vectors_is_refused_naming_the_case() {
    let v1_cases = std::fs::read(
        idem_tests::workspace_root().join("guest/policies/billing-charge/cases.json"),
    )
    .unwrap();
    let bytes = add_sections(idem_tests::policy_bytes(V2_RENAMED), None, Some(&v1_cases));
    let policy = idem_tests::runtime().load_bytes(&bytes).expect("loads");
    match run_golden_vectors(&policy, None) {
        Err(GateError::Failed { case, failed, .. }) => {
            assert_eq!(case, "seed charge");
            assert!(failed >= 1);
        }
        other => panic!("expected the gate to refuse, got {other:?}"),
    }
    // Vectors shipped beside the component take the place of the carried.
    let own = r#"{"cases":[{"name":"a charge","op":{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"}},"expect":{"partition":"c1"}}]}"#;
    assert!(run_golden_vectors(&policy, Some(own)).unwrap().is_some());
    assert!(matches!(
        run_golden_vectors(&policy, Some("{")),
        Err(GateError::Unreadable(_))
    ));
}

// The lifecycle manifest: read at load; a malformed or repeated section is
// refused, naming it; `keep-operations: false` is the policy's switch.
#[test]
fn the_lifecycle_manifest_is_read_and_checked_at_load() {
    let bytes = idem_tests::policy_bytes(V1);
    let load = |manifest: &str| {
        idem_tests::runtime().load_bytes(&add_sections(bytes.clone(), Some(manifest), None))
    };
    let off = load(r#"{"keep-operations":false}"#).expect("loads");
    assert!(!off.keeps_operations());
    assert!(idem_tests::load(V1).keeps_operations());
    for (manifest, says) in [
        (r#"{"keep-operations":"no"}"#, "idem-lifecycle"),
        (r#"{"replaces":"sha256:nope"}"#, "sha256:nope"),
        (r#"{"keeps":true}"#, "keeps"),
    ] {
        let err = load(manifest).expect_err(manifest).to_string();
        assert!(
            err.contains(says) && err.contains("idem-lifecycle"),
            "{manifest}: {err}"
        );
    }
    let twice = add_sections(
        add_sections(bytes.clone(), Some("{}"), None),
        Some("{}"),
        None,
    );
    let err = idem_tests::runtime()
        .load_bytes(&twice)
        .expect_err("twice")
        .to_string();
    assert!(err.contains("appears twice"), "{err}");
}

impl Env {
    /// `idem policy ARGS… --store URL` (after the subcommand's own words).
    fn policy(&self, args: &[&str]) -> Output {
        let mut all = vec!["policy"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", &self.store]);
        self.idem(&all)
    }

    fn activate(&self, path: &std::path::Path, extra: &[&str]) -> Output {
        let mut args = vec!["activate", path.to_str().unwrap(), "--by", "alice"];
        args.extend_from_slice(extra);
        self.policy(&args)
    }

    fn registration(&self) -> Value {
        let out = self.policy(&["list", "--json", "--namespace", "billing"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["namespaces"][0].clone()
    }

    fn records(&self) -> usize {
        let out = self.idem(&["inspect", "--store", &self.store, "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().len()
    }

    /// `idem exec` that is expected to fail: its status and stderr.
    fn exec_refused(&self, policy: &std::path::Path, op: &str) -> (i32, String) {
        let path = self.write("refused-op.json", op);
        let out = self.idem(&[
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store,
            "--op",
            path.to_str().unwrap(),
            "--",
            "true",
        ]);
        (out.status.code().unwrap(), text(&out.stderr))
    }
}

fn digest_of(path: &std::path::Path) -> String {
    idem_tests::runtime()
        .load_file(path)
        .expect("loads")
        .digest()
        .to_string()
}

// The whole life on every store: version 1.0.0 activated (its golden
// vectors pass) and used; 2.0.0 (a renamed key part) refused by the diff
// over the store's records; 1.1.0 (compatible) activated; 2.0.0 and a
// tampered 1.0.0 refused by the engine with nothing written (the digest
// found and the ones accepted named); 2.0.0 forced with a reason, logged;
// a rollback; a version failing its own vectors refused by the gate,
// naming the case.
#[test]
fn activation_gates_diffs_pins_and_rolls_back() {
    on_every_store("activation", |env| {
        let (v1, v2, v11) = (policy_path(V1), policy_path(V2_RENAMED), policy_path(V1_1));
        let out = env.activate(&v1, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("golden vectors: "),
            "{}",
            text(&out.stdout)
        );
        env.exec(V1, &op(1), &[]);
        env.exec(V1, &op(2), &[]);

        let out = env.activate(&v2, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("2 keys within retention would change"),
            "{stderr}"
        );
        assert!(
            stderr.contains("key part `invoice_id` renamed `invoice`"),
            "{stderr}"
        );
        assert!(stderr.contains("--force --reason"), "{stderr}");
        assert_eq!(env.registration()["active"], digest_of(&v1));

        let out = env.activate(&v11, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let reg = env.registration();
        assert_eq!(reg["active"], digest_of(&v11));
        assert_eq!(
            reg["registered"],
            serde_json::json!([digest_of(&v1), digest_of(&v11)])
        );

        // A version nobody registered, and a tampered copy of a registered
        // one, are refused before anything is written.
        let before = env.records();
        let (status, stderr) = env.exec_refused(&v2, &op(3));
        assert_eq!(status, 2, "{stderr}");
        assert!(stderr.contains(&digest_of(&v2)), "{stderr}");
        assert!(
            stderr.contains(&digest_of(&v1)) && stderr.contains(&digest_of(&v11)),
            "{stderr}"
        );
        assert!(stderr.contains("not registered"), "{stderr}");
        // A job with it stops at once, saying why, instead of counting
        // every line not run.
        let ops = env.write("unregistered.jsonl", &format!("{}\n{}\n", op(3), op(5)));
        let out = env.idem(&[
            "run",
            "--policy",
            v2.to_str().unwrap(),
            "--store",
            &env.store,
            "--ops",
            ops.to_str().unwrap(),
            "--",
            "true",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let said = text(&out.stdout);
        assert!(
            said.contains("stopped: ") && said.contains("not registered"),
            "{said}"
        );
        let tampered = env.write("tampered.wasm", "");
        std::fs::write(
            &tampered,
            add_sections(
                idem_tests::policy_bytes(V1),
                Some(r#"{"keep-operations":false}"#),
                None,
            ),
        )
        .unwrap();
        let (status, stderr) = env.exec_refused(&tampered, &op(3));
        assert_eq!(status, 2, "{stderr}");
        assert!(stderr.contains(&digest_of(&tampered)), "{stderr}");
        assert_eq!(env.records(), before, "nothing written");
        // Registered versions still claim (a fleet upgrades machine by machine).
        env.exec(V1, &op(3), &[]);
        env.exec(V1_1, &op(4), &[]);

        let out = env.activate(
            &v2,
            &[
                "--force",
                "--reason",
                "invoice ids renamed; old records settled",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let reg = env.registration();
        assert_eq!(reg["active"], digest_of(&v2));
        let last = &reg["history"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["action"], "forced");
        assert_eq!(last["by"], "alice");
        assert_eq!(last["reason"], "invoice ids renamed; old records settled");
        assert_eq!(last["previous"], digest_of(&v11));

        let out = env.policy(&[
            "rollback",
            "--namespace",
            "billing",
            "--reason",
            "reconciliation broke",
            "--by",
            "bob",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let reg = env.registration();
        assert_eq!(reg["active"], digest_of(&v11));
        assert_eq!(
            reg["history"].as_array().unwrap().last().unwrap()["action"],
            "rolled-back"
        );

        // 2.0.0 with 1.0.0's vectors: the gate names the failing case.
        let stale = env.write("stale.wasm", "");
        let v1_cases = std::fs::read(
            idem_tests::workspace_root().join("guest/policies/billing-charge/cases.json"),
        )
        .unwrap();
        std::fs::write(
            &stale,
            add_sections(idem_tests::policy_bytes(V2_RENAMED), None, Some(&v1_cases)),
        )
        .unwrap();
        let out = env.activate(&stale, &["--force", "--reason", "try"]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("case `seed charge`"), "{stderr}");
        assert_eq!(env.registration()["active"], digest_of(&v11));
    });
}

// A version whose manifest says which version it replaces is activated
// only over that one.
#[test]
fn a_version_replaces_only_the_version_it_names() {
    let env = Env::sqlite();
    let out = env.activate(&policy_path(V1), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v1 = digest_of(&policy_path(V1));
    let other = format!("sha256:{}", "ab".repeat(32));
    for (replaces, ok) in [(other.as_str(), false), (v1.as_str(), true)] {
        let manifest = format!(r#"{{"replaces":"{replaces}"}}"#);
        let path = env.write(&format!("v1-1-{ok}.wasm"), "");
        std::fs::write(
            &path,
            add_sections(idem_tests::policy_bytes(V1_1), Some(&manifest), None),
        )
        .unwrap();
        let out = env.activate(&path, &[]);
        assert_eq!(out.status.success(), ok, "{}", text(&out.stderr));
        if !ok {
            let stderr = text(&out.stderr);
            assert!(stderr.contains(&other) && stderr.contains(&v1), "{stderr}");
            assert_eq!(env.registration()["active"], v1);
        }
    }
}

// Unregistered namespaces are open by default (so an upgrade of idem
// breaks no running job); a store that requires registration refuses a
// claim in one, with nothing written.
#[test]
fn a_store_may_require_registration() {
    on_every_store("require_registration", |env| {
        env.exec(V1, &op(1), &[]);
        let out = env.policy(&["require-registration", "on"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (status, stderr) = env.exec_refused(&policy_path(V1), &op(2));
        assert_eq!(status, 2, "{stderr}");
        assert!(stderr.contains("requires a registered policy"), "{stderr}");
        assert_eq!(env.records(), 1);
        let out = env.activate(&policy_path(V1), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        env.exec(V1, &op(2), &[]);
        assert_eq!(env.records(), 2);
    });
}

impl Env {
    /// `idem exec` of `op` under `policy`, its command appending a line to
    /// `ran.txt`; how many lines the file then has.
    fn exec_counted(&self, policy: &str, op: &str) -> usize {
        let path = self.write("counted-op.json", op);
        let policy = policy_path(policy);
        let ran = self.dir.path().join("ran.txt");
        let out = self.idem(&[
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store,
            "--op",
            path.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &format!("echo ran >> '{}'", ran.display()),
        ]);
        assert!(out.status.success(), "exec: {}", text(&out.stderr));
        std::fs::read_to_string(&ran)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

// A key-changing upgrade forced with a dual-read window: the new version's
// claim also looks up the key the replaced version derives (loaded from
// the component the store kept), so an operation done before the upgrade
// is replayed, not run again; a new operation runs. Without the window the
// same upgrade runs it again — the duplicate dual-read exists to stop.
#[test]
fn a_dual_read_window_replays_across_a_key_changing_upgrade() {
    for dual_read in [true, false] {
        on_every_store("dual_read", |env| {
            let out = env.activate(&policy_path(V1), &[]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert_eq!(env.exec_counted(V1, &op(1)), 1);
            let mut flags = vec!["--force", "--reason", "invoice ids renamed"];
            if dual_read {
                flags.extend_from_slice(&["--dual-read", "1h"]);
            }
            let out = env.activate(&policy_path(V2_RENAMED), &flags);
            assert!(out.status.success(), "{}", text(&out.stderr));
            let after = env.exec_counted(V2_RENAMED, &op(1));
            if dual_read {
                assert_eq!(after, 1, "replayed from the old key, not run again");
                assert!(env.registration()["dual_read"]["previous"].is_string());
            } else {
                assert_eq!(after, 2, "without the window the upgrade runs it again");
            }
            assert_eq!(
                env.exec_counted(V2_RENAMED, &op(5)),
                after + 1,
                "a new one runs"
            );
        });
    }
}

/// The parsed operation `op(n)`.
fn operation(n: u32) -> idem_core::Operation {
    idem_core::Operation::from_json(&op(n), &Default::default()).unwrap()
}

// Hot swap in the library: a candidate that changes keys is refused by the
// diff unless a person allows it, one failing its own vectors by the gate;
// then, with 8 tasks beginning and completing 400 operations through the
// HotEngine, the policy is swapped and rolled back again and again. No
// evaluation is lost (every operation executed once, every completion
// recorded), and none mixes versions: each record lies under the key the
// version named by its own policy digest derives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swap_under_load_loses_no_evaluation_and_mixes_no_versions() {
    use idem::engine::{Begin, Engine, EngineOptions};
    use idem::lifecycle::{HotEngine, SwapCheck, SwapError};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("idem.db").display());
    let store = idem_store::open(&url, Default::default()).await.unwrap();
    let (v1, v2) = (idem_tests::load(V1), idem_tests::load(V2_RENAMED));
    let hot = Arc::new(HotEngine::new(Engine::new(
        v1.clone(),
        store.clone(),
        EngineOptions::default(),
    )));

    let check = SwapCheck {
        corpus: vec![operation(1), operation(2)],
        ..SwapCheck::default()
    };
    let v2_bytes = idem_tests::policy_bytes(V2_RENAMED);
    match hot.prepare(&v2_bytes, &check).await {
        Err(SwapError::KeysChange(report)) => {
            assert_eq!(report.key_changes, 2);
            assert_eq!(
                report.groups[0].explanation,
                ["key part `invoice_id` renamed `invoice`"]
            );
        }
        other => panic!("expected the diff to refuse, got {other:?}"),
    }
    let v1_cases = std::fs::read(
        idem_tests::workspace_root().join("guest/policies/billing-charge/cases.json"),
    )
    .unwrap();
    let stale = add_sections(v2_bytes.clone(), None, Some(&v1_cases));
    assert!(matches!(
        hot.prepare(&stale, &check).await,
        Err(SwapError::Gate(_))
    ));
    let compatible = hot
        .prepare(&idem_tests::policy_bytes(V1_1), &check)
        .await
        .expect("a compatible version passes");
    assert!(compatible.diff.keeps_keys());
    assert!(matches!(hot.rollback(), Err(SwapError::NothingToRollBack)));
    assert_eq!(
        hot.engine().policy().digest(),
        v1.digest(),
        "prepare swaps nothing"
    );

    let prepared = hot
        .prepare(
            &v2_bytes,
            &SwapCheck {
                allow_key_change: true,
                ..check
            },
        )
        .await
        .expect("allowed");

    const TASKS: u32 = 8;
    const EACH: u32 = 50;
    let done = Arc::new(AtomicBool::new(false));
    // Completions per version, so that the swapper swaps again only once the
    // version it installed has served: both serve, whatever the scheduling.
    let served = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let v2_digest = v2.digest().to_string();
    // The first swap before the load starts: version 1 serves again only
    // after a rollback made under load.
    hot.swap(prepared);
    let swapper = {
        let (hot, done, served) = (hot.clone(), done.clone(), served.clone());
        tokio::spawn(async move {
            let mut swaps = 1u32;
            loop {
                let installed = usize::from(hot.engine().policy().digest() == v2_digest);
                let before = served[installed].load(Ordering::SeqCst);
                while served[installed].load(Ordering::SeqCst) == before {
                    if done.load(Ordering::SeqCst) {
                        return swaps;
                    }
                    tokio::task::yield_now().await;
                }
                hot.rollback().expect("the previous version is warm");
                swaps += 1;
            }
        })
    };
    let workers: Vec<_> = (0..TASKS)
        .map(|t| {
            let (hot, served, v2_digest) = (hot.clone(), served.clone(), v2.digest().to_string());
            tokio::spawn(async move {
                for i in 0..EACH {
                    let n = 1000 + t * EACH + i;
                    // One evaluation, one version: hold the snapshot.
                    let engine = hot.engine();
                    match engine.begin(&operation(n)).await.expect("begin") {
                        Begin::Execute(claim) => claim
                            .complete(idem_store::Outcome::new(0, format!("charged {n}")))
                            .await
                            .expect("complete"),
                        other => panic!("operation {n}: expected to execute, got {other:?}"),
                    }
                    let version = usize::from(engine.policy().digest() == v2_digest);
                    served[version].fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("a worker");
    }
    done.store(true, Ordering::Relaxed);
    let swaps = swapper.await.unwrap();
    assert!(
        served.iter().all(|n| n.load(Ordering::SeqCst) > 0),
        "both versions served ({swaps} swaps)"
    );

    let mut by_version = [0u32; 2];
    for n in 1000..1000 + TASKS * EACH {
        let op = operation(n);
        let mut found = Vec::new();
        for (v, policy) in [&v1, &v2].into_iter().enumerate() {
            let keyed = policy.derive(&op, 0).unwrap().value.unwrap();
            let key = idem_store::RecordKey::new(keyed.namespace, keyed.key);
            if let Some(view) = store.records().get(&key).await.unwrap() {
                assert_eq!(
                    view.record.policy_digest,
                    policy.digest(),
                    "operation {n}: its key is one version's, its digest the other's"
                );
                assert_eq!(view.record.state, idem_store::RecordState::Completed);
                found.push(v);
            }
        }
        assert_eq!(
            found.len(),
            1,
            "operation {n}: one record, under one version's key"
        );
        by_version[found[0]] += 1;
    }
    // Both versions served (the swaps happened under load).
    assert!(by_version[0] > 0 && by_version[1] > 0, "{by_version:?}");
}
