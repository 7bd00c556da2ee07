//! The runnable examples the book quotes (`host/idem/examples/`,
//! `host/idem-http/examples/`), run against the policies the build made:
//! each must do what its page says (executed once, then replayed).
//!
//! The example binaries are not built here: `cargo test --workspace`
//! builds every package's examples before it runs the tests, and they sit
//! beside this test binary in `<target>/<profile>/examples/`. Run alone,
//! this suite needs `cargo build -p idem-host -p idem-http --examples` first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idem_tests::policy_path;

/// An example gets this long (the first load compiles its policy).
const TIMEOUT: Duration = Duration::from_secs(120);

/// The built example `name`: `<target>/<profile>/examples/NAME`.
pub(crate) fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // <target>/<profile>/deps/suite-<hash> → <target>/<profile>/examples/NAME
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples"))
        .expect("target layout")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: run the suites with `cargo test --workspace`, which builds every \
         package's examples, or run `cargo build -p idem-host -p idem-http --examples` first",
        bin.display()
    );
    bin
}

/// A directory for one test, and its compiled-policy cache (kept out of
/// the user's own cache).
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// An example's command: `IDEM_EXAMPLE_POLICY` unset, the cache here.
    fn example(&self, name: &str) -> Command {
        let mut cmd = Command::new(example_bin(name));
        cmd.env_remove("IDEM_EXAMPLE_POLICY")
            .env("IDEM_CACHE_DIR", self.path("cache"));
        cmd
    }
}

/// Runs `cmd` to its end (killing it past [`TIMEOUT`]) and returns its
/// standard output, failing the test unless it succeeded.
fn stdout_of(mut cmd: Command) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > TIMEOUT {
            child.kill().unwrap();
            panic!("{cmd:?} still runs after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// How many lines of `out` contain `text`.
fn lines_with(out: &str, text: &str) -> usize {
    out.lines().filter(|line| line.contains(text)).count()
}

/// The one line of `out` that starts with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    let found: Vec<&str> = out.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "one line starting {prefix:?} in:\n{out}");
    found[0]
}

fn with_args(mut cmd: Command, args: &[&Path]) -> Command {
    cmd.args(args);
    cmd
}

#[test]
fn begin_complete_executes_once_then_replays_even_in_a_second_process() {
    let env = Env::new();
    let (policy, store) = (policy_path("billing-charge"), env.path("store"));
    let args = [policy.as_path(), store.as_path()];
    let first = stdout_of(with_args(env.example("begin_complete"), &args));
    assert!(
        line(&first, "policy billing-charge 1.0.0, store sqlite:").contains("idem.db"),
        "{first}"
    );
    let executed = line(&first, "begin #1: executed: charging c1 100 EUR under key ");
    assert!(executed.ends_with(" at fence 1"), "{first}");
    assert_eq!(lines_with(&first, "recorded as completed"), 1, "{first}");
    assert!(
        line(&first, "begin #2: ")
            .starts_with("begin #2: replayed: receipt of c1 (recorded at fence 1)"),
        "{first}"
    );
    // The store is a file: a second process only replays.
    let second = stdout_of(with_args(env.example("begin_complete"), &args));
    assert_eq!(lines_with(&second, "executed"), 0, "{second}");
    assert_eq!(
        lines_with(&second, ": replayed: receipt of c1 (recorded at fence 1)"),
        2,
        "{second}"
    );
}

#[test]
fn run_once_runs_the_closure_once_in_two_calls() {
    let env = Env::new();
    let policy = policy_path("billing-charge");
    // No store directory: a temporary one.
    let out = stdout_of(with_args(env.example("run_once"), &[&policy]));
    assert_eq!(
        lines_with(&out, "  effect: charging c1 under key "),
        1,
        "{out}"
    );
    line(&out, "call #1: executed at fence 1, recorded as completed");
    line(
        &out,
        "call #2: replayed receipt of c1 (fence 1); the closure did not run",
    );
    line(&out, "the closure ran 1 time(s) in 2 calls");
}

#[test]
fn an_effect_in_the_store_transaction_is_executed_once_then_replayed() {
    let env = Env::new();
    let policy = policy_path("provider-charge");
    // No store URL: a SQLite file in a temporary directory, two rounds.
    let out = stdout_of(with_args(env.example("effect_in_store"), &[&policy]));
    for n in 1..=3 {
        line(&out, &format!("inv-{n}: executed at fence {n}"));
        line(&out, &format!("inv-{n}: replayed ledger row of inv-{n}"));
    }
}

#[test]
fn a_job_run_twice_executes_every_charge_once_and_then_replays_them() {
    let env = Env::new();
    // The policy from IDEM_EXAMPLE_POLICY, as the example's usage says.
    let mut cmd = env.example("job");
    cmd.env("IDEM_EXAMPLE_POLICY", policy_path("billing-charge"));
    let out = stdout_of(cmd);
    assert_eq!(lines_with(&out, "  effect: charging c"), 5, "{out}");
    for n in 1..=5 {
        assert_eq!(
            lines_with(&out, &format!("charging c{n} under key")),
            1,
            "{out}"
        );
    }
    let summaries: Vec<&str> = out.lines().filter(|l| l.contains("summary:")).collect();
    assert_eq!(
        summaries,
        [
            "  summary: 5 executed, 0 replayed, 0 failed, all completed: true",
            "  summary: 0 executed, 5 replayed, 0 failed, all completed: true",
        ],
        "{out}"
    );
}

#[test]
fn the_axum_router_runs_the_handler_once_and_replays_the_retry() {
    let env = Env::new();
    let policy = policy_path("http-idempotency-key");
    let out = stdout_of(with_args(env.example("axum_router"), &[&policy]));
    assert!(
        line(&out, "listening on http://127.0.0.1:").len() > 30,
        "{out}"
    );
    assert_eq!(lines_with(&out, "  handler: charging "), 1, "{out}");
    let first = line(&out, "request #1: ");
    let second = line(&out, "request #2: ");
    assert!(
        first.starts_with(
            "request #1: 201 Created, Idempotent-Replayed: false, body {\"charge\":\"ch_"
        ),
        "{out}"
    );
    assert!(
        second.starts_with("request #2: 201 Created, Idempotent-Replayed: true, body "),
        "{out}"
    );
    // The retry got the stored response: the same body.
    let body = |l: &str| l.split_once(", body ").map(|(_, b)| b.to_string());
    assert_eq!(body(first), body(second), "{out}");
}

#[test]
fn the_downstream_gate_charges_once_replays_the_successor_and_refuses_the_late_holder() {
    let env = Env::new();
    let store = env.path("gate.db");
    let url = format!("sqlite:{}", store.display());
    let mut cmd = env.example("downstream_gate");
    cmd.arg(&url);
    let out = stdout_of(cmd);
    assert_eq!(lines_with(&out, "  downstream: charging "), 1, "{out}");
    assert!(
        line(&out, "the holder (fence 1): ")
            .starts_with("the holder (fence 1): 201 Created, Idempotent-Replayed: false, body "),
        "{out}"
    );
    assert!(
        line(&out, "its successor after a take-over (fence 2): ")
            .contains(": 201 Created, Idempotent-Replayed: true, body "),
        "{out}"
    );
    let late = line(&out, "the first holder, late (fence 1): ");
    assert!(
        late.contains("409 Conflict")
            && late.contains("Idempotent-Replayed: false")
            && late.contains("stale-fence"),
        "{out}"
    );
}

#[test]
fn a_crash_is_told_in_flight_needs_review_rejected_then_replays_what_the_service_settled() {
    let env = Env::new();
    let policy = policy_path("http-idempotency-key");
    let out = stdout_of(with_args(env.example("settle_after_a_crash"), &[&policy]));
    assert_eq!(lines_with(&out, "  handler: charging "), 1, "{out}");
    line(
        &out,
        "request #1: the service crashed mid-charge; no answer",
    );
    let answers = [
        (
            "retry within the lease: ",
            "409 Conflict, Retry-After: 1, Idempotent-Replayed: false",
            "problem/request-in-flight",
        ),
        (
            "first retry past the lease: ",
            "409 Conflict, Retry-After: (none), Idempotent-Replayed: false",
            "problem/needs-review",
        ),
        (
            "next retry: ",
            "409 Conflict, Retry-After: (none), Idempotent-Replayed: false",
            "problem/rejected\"",
        ),
        (
            "retry after settling: ",
            "201 Created, Retry-After: (none), Idempotent-Replayed: true",
            "{\"charge\":\"ch_1001\"}",
        ),
    ];
    let lines: Vec<&str> = out.lines().collect();
    for (prefix, head, body) in answers {
        let at = lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in:\n{out}"));
        assert_eq!(lines[at], format!("{prefix}{head}"), "{out}");
        assert!(lines[at + 1].contains(body), "{out}");
    }
    assert!(
        line(&out, "the service finds http/")
            .ends_with("waiting: outcome unknown: the holder may or may not have done the effect"),
        "{out}"
    );
    line(&out, "the service settles it: completed at fence ");
}

/// The settling code `docs/guide/through-a-crash.md` quotes is the
/// example's own: every line of the page's Rust block, in order, is a line
/// of `host/idem-http/examples/settle_after_a_crash.rs`.
#[test]
fn the_crash_page_quotes_the_examples_own_settling_code() {
    let root = idem_tests::workspace_root();
    let page = std::fs::read_to_string(root.join("docs/guide/through-a-crash.md")).unwrap();
    let example =
        std::fs::read_to_string(root.join("host/idem-http/examples/settle_after_a_crash.rs"))
            .unwrap();
    let block: Vec<&str> = page
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a Rust block on the page")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let source: Vec<&str> = example.lines().map(str::trim).collect();
    let starts = source.iter().position(|l| *l == block[0]);
    let quoted = starts.is_some_and(|at| {
        source[at..]
            .iter()
            .filter(|l| !l.is_empty())
            .take(block.len())
            .eq(block.iter())
    });
    assert!(
        quoted,
        "the page's Rust block is not the example's code:\n{}",
        block.join("\n")
    );
}
