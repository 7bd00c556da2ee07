//! A generated fuzz of `idem serve` from its OpenAPI document, by a tool
//! that is not ours: Schemathesis (pinned, installed from PyPI into the
//! target directory on first use) generates requests from
//! `docs/reference/serve-openapi.json`, sends them to a real server with a
//! token, and checks every answer against the document: no 5xx, every
//! answer's status, content type and body as documented, every request the
//! document admits accepted (or refused only as `schemathesis.toml` lists).
//!
//! Requests the document excludes are not sent as such (Schemathesis's
//! negative checks are off): JSON Schema cannot say "at most 256 UTF-8
//! bytes", so a document that admits every good request cannot also exclude
//! every bad one. Bad requests are `serve_contract.rs`'s own fuzz.

use std::path::PathBuf;
use std::process::Command;

use idem_tests::{tool_available, workspace_root};

use crate::serve::{Server, TestStore};

/// The Schemathesis release the fuzz runs with.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// Schemathesis's `st`, installed on first use into a virtual environment
/// kept in the target directory; `None` (a skip, said so) without Python.
fn schemathesis() -> Option<PathBuf> {
    if !tool_available("a_generated_fuzz_of_the_document", "python3") {
        return None;
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schemathesis-4.32.5");
    let st = venv.join("bin").join("st");
    if !st.is_file() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 runs");
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let installed = Command::new(venv.join("bin").join("pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SCHEMATHESIS,
            ])
            .status()
            .expect("pip runs");
        assert!(
            installed.success(),
            "pip install {SCHEMATHESIS} (PyPI must be reachable)"
        );
    }
    Some(st)
}

/// The document as the fuzz reads it, written into `dir`: the published
/// one, but with an operation's field numbers kept to integers of at most
/// 15 digits, `begin`'s `atomic` kept to `false` and its `caller` to 32
/// characters (at most 128 UTF-8 bytes). The host refuses a
/// number whose exact spelling runs past 128 digits (`7.8e-142`), and
/// `atomic: true` on a store that is not PostgreSQL (the fuzz's store is
/// SQLite): rules JSON Schema cannot state; everything else is the
/// document as published.
fn fuzzed_document(root: &std::path::Path, dir: &std::path::Path) -> PathBuf {
    let path = root.join("docs/reference/serve-openapi.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let values = &mut doc["components"]["schemas"]["Operation"]["properties"]["fields"]["additionalProperties"];
    assert_eq!(
        values["type"],
        serde_json::json!(["string", "number", "boolean"])
    );
    *values = serde_json::json!({
        "anyOf": [
            {"type": ["string", "boolean"]},
            {"type": "integer", "minimum": -999_999_999_999_999i64, "maximum": 999_999_999_999_999i64}
        ]
    });
    let atomic = &mut doc["components"]["schemas"]["BeginRequest"]["properties"]["atomic"];
    assert_eq!(atomic["type"], "boolean");
    atomic["const"] = serde_json::json!(false);
    // `caller` is at most 128 UTF-8 bytes: 32 characters never exceed it.
    let caller = &mut doc["components"]["schemas"]["BeginRequest"]["properties"]["caller"];
    assert_eq!(caller["maxLength"], 128);
    caller["maxLength"] = serde_json::json!(32);
    let fuzzed = dir.join("serve-openapi.fuzzed.json");
    std::fs::write(&fuzzed, doc.to_string()).unwrap();
    fuzzed
}

#[test]
fn a_generated_fuzz_of_the_document_finds_no_mismatch() {
    let Some(st) = schemathesis() else { return };
    let store = TestStore::sqlite();
    let token = "fuzz-token-0123456789";
    let server = Server::start(&store.url, &[], &[("IDEM_SERVE_TOKEN", token)]);
    let root = workspace_root();
    let document = fuzzed_document(&root, store.dir.path());
    let out = Command::new(&st)
        .arg("--config-file")
        .arg(root.join("tests/suite/schemathesis.toml"))
        .arg("run")
        .arg(&document)
        .args(["--url", &format!("http://{}", server.addr)])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", "all"])
        .args(["--exclude-checks", "negative_data_rejection"])
        // A bounded budget, the same cases every run.
        .args([
            "--max-examples",
            "40",
            "--seed",
            "20261203",
            "--workers",
            "1",
        ])
        .args(["--generation-deterministic", "--no-color"])
        .current_dir(store.dir.path())
        .output()
        .expect("st runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Schemathesis found mismatches between idem serve and its document:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("generated"), "{report}");
}
