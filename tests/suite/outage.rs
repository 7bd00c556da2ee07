//! A job rides out its store going away: a PostgreSQL server of the test's
//! own (never the shared one) crashed and restarted, or its connections
//! killed, in the middle of a run; one that stays down past the outage
//! budget; a SQLite store whose disk fills. Real faults, never mocks. The
//! effect itself pulls the trigger at its Nth call, so the fault lands at a
//! known point of the run rather than at a guessed moment; with one
//! operation at a time, no claim is in flight when it does (the end of the
//! previous operation may be, and is settled by reading it back). And a
//! store call whose commit happened while its answer was lost (a proxy cuts
//! the connection between the two): a claim recognised as its own, an end
//! read back.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Engine, EngineOptions, ExecContext};
use idem::job::{EffectOutcome, JobEvent, JobOptions, JobRunner, Summary};
use idem::store::{Outcome, StoreOptions};
use idem_tests::cut_proxy::CutProxy;
use idem_tests::pg_cluster::PgCluster;
use idem_tests::tmpfs::SmallDisk;
use idem_tests::{idem_bin, load, policy_path};

const OPERATIONS: usize = 40;
/// The call of the effect that brings the store down.
const FAULT_AT: usize = 15;

fn charges(n: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| {
            let json = format!(
                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{i}","billing_period":"2026-11","invoice_id":"inv-{i}","amount":"100","currency":"EUR"}}}}"#
            );
            Operation::from_json(&json, &OperationLimits::default()).unwrap()
        })
        .collect()
}

/// How often the effect ran for each key, and a fault to set off at one
/// call.
#[derive(Clone)]
struct Effect {
    ran: Arc<Mutex<HashMap<String, usize>>>,
    calls: Arc<AtomicUsize>,
    fault: Arc<dyn Fn() + Send + Sync>,
}

impl Effect {
    fn new(fault: impl Fn() + Send + Sync + 'static) -> Effect {
        Effect {
            ran: Arc::default(),
            calls: Arc::default(),
            fault: Arc::new(fault),
        }
    }

    fn closure(
        &self,
    ) -> impl Fn(Operation, ExecContext) -> std::future::Ready<EffectOutcome> + Send + Sync + 'static
    {
        let me = self.clone();
        move |_op, ctx| {
            *me.ran.lock().unwrap().entry(ctx.key.clone()).or_default() += 1;
            if me.calls.fetch_add(1, Ordering::SeqCst) + 1 == FAULT_AT {
                (me.fault)();
            }
            std::future::ready(EffectOutcome::Completed(Outcome::new(0, "charged")))
        }
    }

    fn most_runs_of_a_key(&self) -> usize {
        self.ran
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// One operation at a time, ends recorded in batches (the finisher is a
/// task of its own, so the previous end may be in flight at the fault).
fn options(store_outage: Duration) -> JobOptions {
    JobOptions {
        concurrency: NonZeroUsize::MIN,
        store_outage,
        ..JobOptions::default()
    }
}

async fn run_job(url: &str, effect: &Effect, options: JobOptions) -> (Summary, Vec<String>) {
    let store = idem::store::open(url, StoreOptions::default())
        .await
        .unwrap();
    let engine = Engine::new(load("billing-charge"), store, EngineOptions::default());
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let heard = warnings.clone();
    let summary = JobRunner::new(engine, options)
        .on_event(move |event| {
            if let JobEvent::Warning(w) = event {
                heard.lock().unwrap().push(w.to_string());
            }
        })
        .run(charges(OPERATIONS), effect.closure())
        .await
        .unwrap();
    let warnings = warnings.lock().unwrap().clone();
    (summary, warnings)
}

/// Runs the job on a cluster of the test's own, with `fault` set off at the
/// effect's [`FAULT_AT`]th call, and checks that the run rode it out: every
/// operation executed, each effect once; and, when `paused`, that the run
/// said it was waiting (a killed connection may just be replaced by the
/// pool, with nothing to wait for).
async fn rides_out(
    test: &str,
    paused: bool,
    fault: impl Fn(&Arc<PgCluster>) + Send + Sync + 'static,
) {
    let Some(cluster) = PgCluster::start(test) else {
        return;
    };
    let cluster = Arc::new(cluster);
    let server = cluster.clone();
    let effect = Effect::new(move || fault(&server));
    let (summary, warnings) =
        run_job(&cluster.url(), &effect, options(Duration::from_secs(60))).await;
    assert!(summary.all_completed(), "{summary:?}; {warnings:?}");
    assert_eq!(summary.executed, OPERATIONS as u64, "{summary:?}");
    assert_eq!(summary.outage, None);
    assert_eq!(effect.most_runs_of_a_key(), 1, "an effect ran twice");
    assert!(
        !paused || warnings.iter().any(|w| w.contains("unavailable")),
        "the pause is told: {warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_rides_out_a_postgres_crash_and_restart() {
    rides_out(
        "a_job_rides_out_a_postgres_crash_and_restart",
        true,
        |server| {
            // A crash (immediate shutdown: no checkpoint, connections cut),
            // back a second later, as a restarted server or a fail-over is.
            server.crash();
            let server = server.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(1));
                server.start_again();
            });
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_rides_out_its_connections_being_killed() {
    rides_out(
        "a_job_rides_out_its_connections_being_killed",
        false,
        |server| {
            server.terminate_backends();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outage_past_the_budget_stops_the_run_and_counts_what_is_known() {
    let Some(cluster) = PgCluster::start("an_outage_past_the_budget_stops_the_run") else {
        return;
    };
    let cluster = Arc::new(cluster);
    let server = cluster.clone();
    let effect = Effect::new(move || server.crash());
    let (summary, warnings) =
        run_job(&cluster.url(), &effect, options(Duration::from_secs(2))).await;
    let outage = summary.outage.clone().expect("the run says it gave up");
    assert!(outage.lasted_ms >= 2_000, "{outage:?}");
    // Up to the fault, each effect ran; those whose end was recorded before
    // the crash are executed, the rest (the one that brought the store down,
    // and any whose end was still queued) are unknown: they ran, and their
    // end could not be written within the budget. After the fault nothing
    // started: not run, none of it unknown.
    assert_eq!(
        summary.executed + summary.unknown,
        FAULT_AT as u64,
        "{summary:?}"
    );
    assert!(summary.unknown >= 1, "{summary:?}");
    assert_eq!(
        summary.not_run,
        (OPERATIONS - FAULT_AT) as u64,
        "{summary:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("stopped taking operations")),
        "{warnings:?}"
    );

    // The store back, a re-run does exactly the rest: what was not run
    // runs, what completed replays, and the unknown one is still held (its
    // lease runs) for the policy or a person to settle, never re-run.
    cluster.start_again();
    let rerun = Effect::new(|| {});
    let (again, _) = run_job(&cluster.url(), &rerun, options(Duration::from_secs(60))).await;
    assert_eq!(again.executed, summary.not_run, "{again:?}");
    assert_eq!(again.replayed, summary.executed, "{again:?}");
    assert_eq!(again.in_progress, summary.unknown, "{again:?}");
    assert_eq!(rerun.most_runs_of_a_key(), 1);
    let both = effect
        .ran
        .lock()
        .unwrap()
        .keys()
        .filter(|k| rerun.ran.lock().unwrap().contains_key(*k))
        .count();
    assert_eq!(both, 0, "a key ran in both runs");
}

/// A cluster of the test's own behind a [`CutProxy`], and the URL through
/// the proxy (no TLS: the proxy reads the server's messages).
fn behind_a_proxy(test: &str) -> Option<(PgCluster, CutProxy, String)> {
    let cluster = PgCluster::start(test)?;
    let proxy = CutProxy::start(([127, 0, 0, 1], cluster.port()).into()).unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    Some((cluster, proxy, url))
}

/// The claim of one operation commits and its answer is lost. Sent again
/// with the same holder token, the claim finds its own record and goes on
/// as that claim: the operation executes in this run, once, under the
/// claim's first fence (without the token it would find a record "in
/// progress" and not run until its lease ran out). `concurrency` 1 claims
/// one at a time (the one-statement claim); 8, in batches (the batch
/// statement).
async fn a_lost_claim_answer_is_recognised(test: &str, concurrency: usize) {
    let Some((cluster, proxy, url)) = behind_a_proxy(test) else {
        return;
    };
    // The kept operation travels only with its claim: the first message
    // carrying the invoice is the claim of operation FAULT_AT.
    proxy.cut_reply_to(format!("\"inv-{FAULT_AT}\"").as_bytes());
    let effect = Effect::new(|| {});
    let options = JobOptions {
        concurrency: NonZeroUsize::new(concurrency).unwrap(),
        ..options(Duration::from_secs(60))
    };
    let (summary, warnings) = run_job(&url, &effect, options).await;
    assert_eq!(proxy.cuts(), 1, "the claim's answer was lost: {warnings:?}");
    assert!(summary.all_completed(), "{summary:?}; {warnings:?}");
    assert_eq!(summary.executed, OPERATIONS as u64, "{summary:?}");
    assert_eq!(effect.most_runs_of_a_key(), 1, "an effect ran twice");
    // Each record was claimed once: none was taken over, or claimed twice.
    let store = idem::store::open(&cluster.url(), StoreOptions::default())
        .await
        .unwrap();
    let records = store.records().list(Default::default()).await.unwrap();
    assert_eq!(records.len(), OPERATIONS);
    assert!(
        records.iter().all(|v| v.record.attempts == 1),
        "a record was claimed again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_answer_was_lost_goes_on_as_that_claim() {
    a_lost_claim_answer_is_recognised("a_claim_whose_answer_was_lost", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_claims_whose_answer_was_lost_goes_on_as_those_claims() {
    a_lost_claim_answer_is_recognised("a_batch_of_claims_whose_answer_was_lost", 8).await;
}

/// An end commits and its answer is lost: sent again, it is refused (the
/// record is no longer in progress) and read back: the same end under the
/// same fence counts as recorded. Every operation ends executed, none
/// unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_end_whose_answer_was_lost_is_read_back() {
    let Some((_cluster, proxy, url)) = behind_a_proxy("an_end_whose_answer_was_lost") else {
        return;
    };
    let proxy = Arc::new(proxy);
    let cue = proxy.clone();
    // From the FAULT_AT-th effect on, the next message carrying an
    // outcome's body (an end) loses its answer.
    let effect = Effect::new(move || cue.cut_reply_to(b"charged"));
    let (summary, warnings) = run_job(&url, &effect, options(Duration::from_secs(60))).await;
    assert_eq!(proxy.cuts(), 1, "an end's answer was lost: {warnings:?}");
    assert!(summary.all_completed(), "{summary:?}; {warnings:?}");
    assert_eq!(summary.executed, OPERATIONS as u64, "{summary:?}");
    assert_eq!(summary.unknown, 0, "{summary:?}");
    assert_eq!(effect.most_runs_of_a_key(), 1, "an effect ran twice");
}

/// `idem exec` with its store down when it starts: it waits, within
/// `--store-outage`, and runs the command once the server is back; with the
/// server down past the budget, it exits 69 and the command never runs.
#[test]
fn idem_exec_waits_for_its_store_within_the_budget() {
    let Some(cluster) = PgCluster::start("idem_exec_waits_for_its_store") else {
        return;
    };
    let cluster = Arc::new(cluster);
    let work = tempfile::tempdir().unwrap();
    let op = work.path().join("op.json");
    std::fs::write(&op, charges(1)[0].canonical_json()).unwrap();
    let ledger = work.path().join("ledger");
    let exec = |outage: &str| {
        Command::new(idem_bin())
            .env("IDEM_CACHE_DIR", work.path().join("cache"))
            .env("LEDGER", &ledger)
            .args(["exec", "--policy"])
            .arg(policy_path("billing-charge"))
            .args(["--store", &cluster.url(), "--op"])
            .arg(&op)
            .args(["--store-outage", outage, "--", "sh", "-c"])
            .arg(r#"echo "$IDEM_KEY" >> "$LEDGER"; echo charged"#)
            .output()
            .unwrap()
    };
    cluster.crash();
    let out = exec("1s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("the command did not run"), "{stderr}");
    assert!(!ledger.exists(), "the command ran");

    let server = cluster.clone();
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_500));
        server.start_again();
    });
    let out = exec("60s");
    back.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the store is unavailable"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "charged\n");
    let ran = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(ran.lines().count(), 1, "{ran}");
}

/// Twenty charges in an operations file in `dir`, for `idem run`.
fn nightly_file(dir: &std::path::Path) -> std::path::PathBuf {
    let ops = dir.join("ops.jsonl");
    let lines: Vec<String> = charges(20).iter().map(|op| op.canonical_json()).collect();
    std::fs::write(&ops, lines.join("\n") + "\n").unwrap();
    ops
}

/// The command `idem run` runs for each charge: it counts its calls and
/// appends each key to a ledger (both in its working directory), and at
/// its fifth call runs `fault`.
fn at_the_fifth(fault: &str) -> String {
    format!(
        "cat >/dev/null; n=$(($(cat count 2>/dev/null || echo 0) + 1)); echo $n > count; \
         echo \"$IDEM_KEY\" >> ledger; if [ $n -eq 5 ]; then {fault}; fi; echo ok"
    )
}

/// The ledger in `dir` holds each of the twenty charges once.
fn every_charge_once(dir: &std::path::Path) {
    let ledger = std::fs::read_to_string(dir.join("ledger")).unwrap();
    let mut keys: Vec<&str> = ledger.lines().collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!((all, keys.len()), (20, 20), "every charge once: {ledger}");
}

/// `idem run` over a SQLite store on a disk that fills at the fifth
/// operation and is never freed: the run waits out its budget, stops with
/// exit 69, and says what is known (one unknown, the rest not run); once
/// space is freed, a re-run does exactly the rest.
#[test]
fn idem_run_on_a_full_disk_stops_past_its_budget_then_a_rerun_does_the_rest() {
    let Some(disk) = SmallDisk::mount("idem_run_on_a_full_disk", 8 * 1024 * 1024) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let ops = nightly_file(work.path());
    let store = format!("sqlite:{}", disk.path().join("idem.db").display());
    // The command counts its calls outside the small disk and, at the
    // fifth, fills it; every call appends to a ledger there too.
    let script = at_the_fifth(&format!(
        "dd if=/dev/zero of={}/ballast bs=64k 2>/dev/null || true",
        disk.path().display()
    ));
    let run = |outage: &str| {
        Command::new(idem_bin())
            .current_dir(work.path())
            .env("IDEM_CACHE_DIR", work.path().join("cache"))
            .args(["run", "--policy"])
            .arg(policy_path("billing-charge"))
            .args(["--store", &store, "--ops"])
            .arg(&ops)
            .args([
                "--json",
                "--store-outage",
                outage,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .output()
            .unwrap()
    };
    let out = run("1s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["executed"], 4, "{summary}");
    assert_eq!(summary["unknown"], 1, "{summary}");
    assert_eq!(summary["not_run"], 15, "{summary}");
    assert!(
        summary["outage"]["error"]
            .as_str()
            .unwrap()
            .contains("full"),
        "{summary}"
    );
    assert!(stderr.contains("stopped taking operations"), "{stderr}");

    std::fs::remove_file(disk.path().join("ballast")).unwrap();
    let out = run("60s");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["executed"], 15, "{summary}");
    assert_eq!(summary["replayed"], 4, "{summary}");
    assert_eq!(summary["in_progress"], 1, "{summary}");
    every_charge_once(work.path());
}

/// `idem run` whose SQLite file is moved away under it at the fifth
/// operation: every later call is refused with an error naming the file
/// (never written into the moved file), the run stops past its budget with
/// exit 69; once the file is back, a re-run does exactly the rest.
#[test]
fn idem_run_whose_store_file_is_moved_away_stops_then_a_rerun_does_the_rest() {
    let work = tempfile::tempdir().unwrap();
    let ops = nightly_file(work.path());
    let db = work.path().join("idem.db");
    let moved = work.path().join("moved.db");
    let store = format!("sqlite:{}", db.display());
    let script = at_the_fifth(&format!("mv {} {}", db.display(), moved.display()));
    let run = |outage: &str| {
        Command::new(idem_bin())
            .current_dir(work.path())
            .env("IDEM_CACHE_DIR", work.path().join("cache"))
            .args(["run", "--policy"])
            .arg(policy_path("billing-charge"))
            .args(["--store", &store, "--ops"])
            .arg(&ops)
            .args(["--json", "--concurrency", "1", "--store-outage", outage])
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    let out = run("1s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the store file {} was removed or replaced",
            db.display()
        )),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["executed"], 4, "{summary}");
    assert_eq!(summary["unknown"], 1, "{summary}");
    assert_eq!(summary["not_run"], 15, "{summary}");
    assert!(!db.exists(), "a new store was created in its place");

    std::fs::rename(&moved, &db).unwrap();
    let out = run("60s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["executed"], 15, "{summary}; {stderr}");
    assert_eq!(summary["replayed"], 4, "{summary}");
    assert_eq!(summary["in_progress"], 1, "{summary}");
    every_charge_once(work.path());
}

/// `idem run` on a SQLite store another program locks (an exclusive
/// transaction held well past the store's `busy_timeout_ms`) at the fifth
/// operation: the calls refused as busy are waited out, and once the other
/// program lets go the run completes every operation, each once.
#[test]
fn idem_run_waits_out_a_store_another_program_locks() {
    let work = tempfile::tempdir().unwrap();
    let ops = nightly_file(work.path());
    let db = work.path().join("idem.db");
    let store = format!("sqlite:{}?busy_timeout_ms=100", db.display());
    // The other program: takes the write lock, says so, holds it 1.5 s.
    let locker = format!(
        "import sqlite3, time, pathlib; c = sqlite3.connect('{}', isolation_level=None); \
         c.execute('BEGIN EXCLUSIVE'); pathlib.Path('locked').touch(); time.sleep(1.5); \
         c.execute('COMMIT')",
        db.display()
    );
    let script = at_the_fifth(&format!(
        "python3 -c \"{locker}\" >/dev/null 2>&1 & while [ ! -e locked ]; do sleep 0.05; done"
    ));
    let out = Command::new(idem_bin())
        .current_dir(work.path())
        .env("IDEM_CACHE_DIR", work.path().join("cache"))
        .args(["run", "--policy"])
        .arg(policy_path("billing-charge"))
        .args(["--store", &store, "--ops"])
        .arg(&ops)
        .args(["--json", "--concurrency", "1", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("is busy (locked by another connection past the busy timeout)"),
        "the wait is told: {stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["executed"], 20, "{summary}");
    every_charge_once(work.path());
}
