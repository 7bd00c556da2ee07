//! A duplicate that finds a live holder and a policy that says `wait`: the
//! wait is bounded in all (the first `wait`'s milliseconds, not one round's),
//! the host's `--max-wait` caps it, and the answer says how many times it
//! waited and under which bound, as the guide shows. Every assertion is on
//! the answer (its exit status and words), none on how long it took.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path, workspace_root};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `idem exec` of one operation of `kind` with the misbehaving fixture,
/// running `cmd`, with `extra` flags.
fn exec(dir: &Path, kind: &str, extra: &[&str], cmd: &str) -> Command {
    let op = dir.join(format!("{kind}.json"));
    std::fs::write(
        &op,
        format!(r#"{{"kind":"{kind}","tenant":"t","fields":{{}}}}"#),
    )
    .unwrap();
    let mut c = Command::new(idem_bin());
    c.args(["exec", "--policy"])
        .arg(policy_path("fixture-misbehaving"))
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("idem.db").display()))
        .arg("--op")
        .arg(op)
        .args(extra)
        .args(["--", "sh", "-c", cmd])
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// While one `idem exec` of `kind` holds the key (its command runs until
/// told to stop), one duplicate per entry of `waiters`, each with those
/// flags: why each was answered in progress (exit 75, its command not run).
fn waiters_say(kind: &str, waiters: &[&[&str]]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let holder = exec(
        d,
        kind,
        &[],
        "touch started; while [ ! -e go ]; do sleep 0.05; done",
    )
    .spawn()
    .unwrap();
    while !d.join("started").exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let said: Vec<Output> = waiters
        .iter()
        .map(|flags| exec(d, kind, flags, "echo ran").output().unwrap())
        .collect();
    std::fs::write(d.join("go"), "").unwrap();
    let held = holder.wait_with_output().unwrap();
    assert!(held.status.success(), "{}", text(&held.stderr));
    said.iter()
        .map(|out| {
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(75), "{stderr}");
            assert_eq!(text(&out.stdout), "", "a waiter ran its command: {stderr}");
            // `idem: key K is in progress elsewhere: REASON[; retry after N ms]`
            let reason = stderr
                .split_once("is in progress elsewhere: ")
                .unwrap_or_else(|| panic!("no in-progress answer in: {stderr}"))
                .1;
            reason
                .split("; retry after")
                .next()
                .unwrap()
                .trim_end()
                .to_string()
        })
        .collect()
}

/// A policy that answers "wait" for a duplicate in progress, every time:
/// the engine waits what the first wait said, in all, then says the
/// operation is still in progress (not that the record kept changing).
/// `--max-wait` caps it: the shorter bound holds, and `0` waits not at all.
#[test]
fn a_repeated_wait_ends_still_in_progress_within_its_bound() {
    let said = waiters_say(
        "wait",
        &[
            &[],
            &["--max-wait", "5ms"],
            &["--max-wait", "0"],
            &["--max-wait", "30s"],
        ],
    );
    // `wait(20)` is 20 ms in all: asked again once it is spent, the engine
    // does not wait another 20 ms per round.
    let policy_s = "waited 1 time as the policy asked (at most 20 ms in all); the operation is \
                    still in progress";
    assert_eq!(said[0], policy_s);
    // A cap below the policy's bound is the bound: one wait, then the
    // answer names both.
    assert_eq!(
        said[1],
        "waited 1 time (at most 5 ms in all: the policy asked 20 ms, the host waits at most 5 ms); \
         the operation is still in progress"
    );
    assert_eq!(
        said[2],
        "did not wait: the policy asked 20 ms, the host waits at most 0 ms; the operation is \
         still in progress"
    );
    // A cap above it changes nothing.
    assert_eq!(said[3], policy_s);
}

/// The guide's `Decision::Wait(2_000)` (writing-a-policy.md), run: what the
/// duplicate is told, with and without `--max-wait 500ms`, is word for word
/// what the guide quotes.
#[test]
fn the_guide_s_wait_is_what_happens() {
    let guide =
        std::fs::read_to_string(workspace_root().join("docs/guide/writing-a-policy.md")).unwrap();
    assert!(guide.contains("Decision::Wait(2_000)"));
    let said = waiters_say("wait-2s", &[&[], &["--max-wait", "500ms"]]);
    for reason in &said {
        assert!(
            guide.contains(&format!("is in progress elsewhere: {reason}")),
            "the guide does not quote what a waiter is told: {reason}"
        );
    }
}
