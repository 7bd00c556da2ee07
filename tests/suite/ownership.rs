//! Partitioned ownership and the job lease, through `idem run` processes on
//! every persistent store (a real SQLite file, and PostgreSQL when
//! `IDEM_TEST_POSTGRES_URL` is set): shards split the work with no overlap,
//! a worker deposed while paused is refused when it wakes, and a second run
//! exits early while the first holds the job lease.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use idem::core::ownership::owner;
use idem_tests::{idem_bin, policy_path, postgres_url};

/// How many customers (partitions) the ops cover, one op each.
const CUSTOMERS: usize = 24;

/// Each scenario below runs once per store: `sqlite::NAME` on a SQLite file,
/// `postgres::NAME` in a fresh PostgreSQL schema (skipped, and said so,
/// without a database; a failure under `CI=true`).
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(super::Env::sqlite());
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if let Some(env) = super::Env::postgres(stringify!($name)) {
                    super::$name(env);
                }
            })*
        }
    };
}

on_every_store!(
    two_shards_execute_every_op_exactly_once_between_them,
    named_members_from_a_file_split_the_work,
    a_worker_deposed_while_paused_is_refused_when_it_wakes,
    a_second_run_exits_early_while_the_first_holds_the_job_lease,
    a_run_stalled_past_its_job_lease_overlaps_the_next_and_nothing_runs_twice,
);

struct Env {
    dir: tempfile::TempDir,
    store: String,
    /// A PostgreSQL store's schema is dropped with the environment.
    postgres: bool,
}

impl Drop for Env {
    fn drop(&mut self) {
        // A test that failed before waking its paused run would leave the
        // run's effect blocked on the FIFO forever: wake it. Opened without
        // blocking (Linux's O_NONBLOCK), so no reader means no wait.
        if self.path("started").exists() && !self.path("woken").exists() {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            const O_NONBLOCK: i32 = 0o4000;
            if let Ok(mut fifo) = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(O_NONBLOCK)
                .open(self.path("go"))
            {
                let _ = fifo.write_all(b"go\n");
            }
        }
        if self.postgres {
            idem_store_conformance::drop_postgres_schema(&self.store);
        }
    }
}

impl Env {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("idem.db").display());
        Env::with_store(dir, store, false)
    }

    fn postgres(test: &str) -> Option<Self> {
        let url = postgres_url(&format!("ownership::postgres::{test}"))?;
        let sep = if url.contains('?') { '&' } else { '?' };
        let schema = idem_store_conformance::fresh_schema();
        let store = format!("{url}{sep}idem_schema={schema}&idem_pool_size=4");
        Some(Env::with_store(tempfile::tempdir().unwrap(), store, true))
    }

    fn with_store(dir: tempfile::TempDir, store: String, postgres: bool) -> Self {
        let env = Env {
            dir,
            store,
            postgres,
        };
        // One operation per customer: the policy's partition key.
        let ops: String = (0..CUSTOMERS)
            .map(|i| {
                format!(
                    "{{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{{\"customer\":\"c{i}\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i{i}\",\"amount\":\"100\",\"currency\":\"EUR\"}}}}\n"
                )
            })
            .collect();
        std::fs::write(env.path("ops.jsonl"), ops).unwrap();
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn store(&self) -> String {
        self.store.clone()
    }

    /// `idem run` over the ops, each effect appending `PARTITION KEY` to
    /// the ledger `ledger`. The first effect of a run started with
    /// `pause = true` stops after touching `started` until the test writes
    /// to the FIFO `go`: a worker paused while holding a claim.
    fn run(&self, ledger: &str, pause: bool, extra: &[&str]) -> Command {
        let policy = policy_path("billing-charge");
        let mut script = String::new();
        if pause {
            script.push_str(
                r#"if [ ! -e "$DIR/paused" ]; then : > "$DIR/paused"; : > "$DIR/started"; read go < "$DIR/go"; fi; "#,
            );
        }
        script.push_str(r#"echo "$IDEM_PARTITION $IDEM_KEY" >> "$LEDGER""#);
        let mut c = Command::new(idem_bin());
        c.args([
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store(),
            "--ops",
            self.path("ops.jsonl").to_str().unwrap(),
            "--json",
        ])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .env("IDEM_CACHE_DIR", self.path("cache"))
        .env("LEDGER", self.path(ledger))
        .env("DIR", self.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    }

    /// The ledger's lines as (partition, key).
    fn ledger(&self, name: &str) -> Vec<(String, String)> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (p, k) = l.split_once(' ').expect("PARTITION KEY");
                (p.to_string(), k.to_string())
            })
            .collect()
    }

    /// Waits until a paused run is inside its first effect: a condition
    /// (the file its command touched), checked while the run is alive.
    fn wait_started(&self, child: &mut Child) {
        while !self.path("started").exists() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the run ended before it paused: {status}");
            }
            // A poll, not a deadline: leave the cores to the run.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Wakes the paused run.
    fn go(&self) {
        std::fs::write(self.path("woken"), "").unwrap();
        std::fs::write(self.path("go"), "go\n").unwrap();
    }

    /// Stops `child` (SIGSTOP) at a moment it holds no store lock. On SQLite
    /// a process stopped inside a write transaction (a heartbeat, say) keeps
    /// the file's write lock, and every other process would time out on it:
    /// while the lock is held, let it run a little and stop it again.
    fn stall(&self, child: &Child) -> Stalled {
        let pid = child.id().to_string();
        for _ in 0..100 {
            let stalled = Stalled::new(&pid);
            if !self.sqlite_write_locked() {
                return stalled;
            }
            drop(stalled);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("the run always held the SQLite write lock when stopped");
    }

    fn sqlite_write_locked(&self) -> bool {
        if self.postgres {
            return false;
        }
        let c = rusqlite::Connection::open(self.path("idem.db")).unwrap();
        c.busy_timeout(std::time::Duration::from_millis(100))
            .unwrap();
        c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_err()
    }

    fn mkfifo_go(&self) {
        let ok = Command::new("mkfifo")
            .arg(self.path("go"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo");
    }
}

/// A stopped child, continued (SIGCONT) when this is dropped — also when the
/// test fails. The child is not reaped while this lives, so its pid is its.
struct Stalled(String);

impl Stalled {
    fn new(pid: &str) -> Self {
        let stopped = Command::new("kill").args(["-STOP", pid]).status();
        assert!(stopped.unwrap().success(), "kill -STOP {pid}");
        Stalled(pid.to_string())
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn summary(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "summary JSON ({e}): stdout {} stderr {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn count(summary: &serde_json::Value, field: &str) -> usize {
    summary[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {summary}")) as usize
}

fn customers() -> Vec<String> {
    (0..CUSTOMERS).map(|i| format!("c{i}")).collect()
}

/// Which customers each member owns.
fn owned_by(members: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut map: BTreeMap<String, BTreeSet<String>> = members
        .iter()
        .map(|m| (m.to_string(), BTreeSet::new()))
        .collect();
    for c in customers() {
        let m = owner(&c, members).expect("members");
        map.get_mut(*m).unwrap().insert(c);
    }
    map
}

fn partitions(lines: &[(String, String)]) -> BTreeSet<String> {
    lines.iter().map(|(p, _)| p.clone()).collect()
}

fn assert_unique(lines: &[(String, String)]) {
    let keys: BTreeSet<&String> = lines.iter().map(|(_, k)| k).collect();
    assert_eq!(keys.len(), lines.len(), "a key ran twice: {lines:?}");
}

fn two_shards_execute_every_op_exactly_once_between_them(env: Env) {
    let owners = owned_by(&["0", "1"]);
    assert!(
        owners.values().all(|set| !set.is_empty()),
        "both shards own something: {owners:?}"
    );
    // Both at once, over the same ops and the same store file.
    let a = env
        .run("ledger-0", false, &["--shard", "0/2", "--concurrency", "4"])
        .spawn()
        .unwrap();
    let b = env
        .run("ledger-1", false, &["--shard", "1/2", "--concurrency", "4"])
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for (shard, out) in [("0", &a), ("1", &b)] {
        assert!(out.status.success(), "shard {shard}: {}", text(&out.stderr));
        let s = summary(out);
        assert_eq!(
            count(&s, "executed"),
            owners[shard].len(),
            "shard {shard}: {s}"
        );
        assert_eq!(
            count(&s, "not_owned"),
            CUSTOMERS - owners[shard].len(),
            "shard {shard}: {s}"
        );
        assert_eq!(count(&s, "stale_epoch"), 0, "shard {shard}: {s}");
    }
    let (l0, l1) = (env.ledger("ledger-0"), env.ledger("ledger-1"));
    assert_eq!(partitions(&l0), owners["0"], "shard 0 ran exactly its own");
    assert_eq!(partitions(&l1), owners["1"], "shard 1 ran exactly its own");
    let all: Vec<_> = l0.iter().chain(&l1).cloned().collect();
    assert_unique(&all);
    assert_eq!(all.len(), CUSTOMERS, "every op ran once between them");

    // A shard re-run changes nothing: its ops replay.
    let again = env
        .run("ledger-0", false, &["--shard", "0/2"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(count(&summary(&again), "replayed"), owners["0"].len());
    assert_eq!(env.ledger("ledger-0").len(), owners["0"].len());
}

fn named_members_from_a_file_split_the_work(env: Env) {
    std::fs::write(env.path("members"), "# workers\nalpha\nbeta\ngamma\n").unwrap();
    let members = env.path("members");
    let owners = owned_by(&["alpha", "beta", "gamma"]);
    let mut all = Vec::new();
    for me in ["alpha", "beta", "gamma"] {
        let ledger = format!("ledger-{me}");
        let out = env
            .run(
                &ledger,
                false,
                &["--members", members.to_str().unwrap(), "--member", me],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{me}: {}", text(&out.stderr));
        let lines = env.ledger(&ledger);
        assert_eq!(partitions(&lines), owners[me], "{me}");
        all.extend(lines);
    }
    assert_unique(&all);
    assert_eq!(all.len(), CUSTOMERS);

    // Not a member: refused before anything runs.
    let out = env
        .run(
            "ledger-x",
            false,
            &["--members", "alpha,beta", "--member", "zeta"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("zeta"), "{}", text(&out.stderr));
    assert!(env.ledger("ledger-x").is_empty());
}

fn a_worker_deposed_while_paused_is_refused_when_it_wakes(env: Env) {
    env.mkfifo_go();
    let before = owned_by(&["w0", "w1"]);
    let after = owned_by(&["w1", "w2"]);
    assert!(before["w0"].len() >= 2, "w0 owns several customers");
    // w0 claims its first op and pauses inside the effect.
    let mut a = env
        .run(
            "ledger-w0",
            true,
            &["--members", "w0,w1", "--member", "w0", "--concurrency", "1"],
        )
        .spawn()
        .unwrap();
    env.wait_started(&mut a);
    // Meanwhile the membership changes without w0: w2 takes over its share.
    let b = env
        .run(
            "ledger-w2",
            false,
            &["--members", "w1,w2", "--member", "w2"],
        )
        .output()
        .unwrap();
    let b_summary = summary(&b);
    // w0 wakes: the effect it was in finishes (its fence is still current),
    // every later claim under its stale epoch is refused and not run.
    env.go();
    let a = a.wait_with_output().unwrap();
    let a_summary = summary(&a);
    assert_eq!(a.status.code(), Some(1), "{}", text(&a.stderr));
    assert_eq!(count(&a_summary, "executed"), 1, "{a_summary}");
    assert_eq!(
        count(&a_summary, "stale_epoch"),
        before["w0"].len() - 1,
        "{a_summary}"
    );
    assert!(
        text(&a.stderr).contains("stale ownership epoch"),
        "{}",
        text(&a.stderr)
    );
    let (la, lb) = (env.ledger("ledger-w0"), env.ledger("ledger-w2"));
    assert_eq!(la.len(), 1, "the deposed worker ran only the op it was in");
    let paused = &la[0].0;
    assert!(before["w0"].contains(paused));
    // w2 ran what it owns, except the op w0 still held while it ran.
    let mut expected = after["w2"].clone();
    let held_by_w0 = expected.remove(paused);
    assert_eq!(partitions(&lb), expected, "{b_summary}");
    assert_eq!(
        count(&b_summary, "in_progress"),
        usize::from(held_by_w0),
        "{b_summary}"
    );
    let all: Vec<_> = la.iter().chain(&lb).cloned().collect();
    assert_unique(&all);
}

fn a_second_run_exits_early_while_the_first_holds_the_job_lease(env: Env) {
    env.mkfifo_go();
    let lease = ["--job-lease", "nightly", "--concurrency", "1"];
    let mut first = env.run("ledger", true, &lease).spawn().unwrap();
    env.wait_started(&mut first);
    let second = env.run("ledger", false, &lease).output().unwrap();
    assert_eq!(second.status.code(), Some(75), "{}", text(&second.stderr));
    let stderr = text(&second.stderr);
    assert!(
        stderr.contains("job nightly is already running") && stderr.contains("did nothing"),
        "{stderr}"
    );
    assert!(second.stdout.is_empty(), "no summary: nothing ran");

    env.go();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    // The first run released the lease: the next run runs (and replays).
    let third = env.run("ledger", false, &lease).output().unwrap();
    assert!(third.status.success(), "{}", text(&third.stderr));
    assert_eq!(count(&summary(&third), "replayed"), CUSTOMERS);
    let lines = env.ledger("ledger");
    assert_eq!(
        lines.len(),
        CUSTOMERS,
        "every op ran once, by the first run"
    );
    assert_unique(&lines);
}

/// The job lease is efficiency only: a run stalled past it (SIGSTOP) loses
/// it, the next run takes it and works alongside, and still no operation
/// runs twice — the per-operation claims decide, not the lease.
fn a_run_stalled_past_its_job_lease_overlaps_the_next_and_nothing_runs_twice(env: Env) {
    env.mkfifo_go();
    let lease = [
        "--job-lease",
        "nightly",
        "--job-lease-ttl",
        "1s",
        "--concurrency",
        "1",
    ];
    let mut first = env.run("ledger", true, &lease).spawn().unwrap();
    env.wait_started(&mut first);
    let stalled = env.stall(&first);
    // The next run is refused (75) while the stalled run's lease lasts; once
    // it has lapsed by the store's clock, the next run takes it and works.
    let mut attempts = 0;
    let second = loop {
        attempts += 1;
        let out = env.run("ledger", false, &lease).output().unwrap();
        if out.status.code() != Some(75) {
            break out;
        }
        assert!(attempts < 100, "the stalled run's job lease never lapsed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // It ran everything but the operation the stalled run still holds.
    let s = summary(&second);
    assert_eq!(second.status.code(), Some(1), "{}", text(&second.stderr));
    assert_eq!(count(&s, "executed"), CUSTOMERS - 1, "{s}");
    assert_eq!(count(&s, "in_progress"), 1, "{s}");

    // The stalled run wakes: it finishes the effect it was in (its claim is
    // still current), finds the rest done, and says its lease was lost.
    drop(stalled);
    env.go();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    let s = summary(&first);
    assert_eq!(count(&s, "executed"), 1, "{s}");
    assert_eq!(count(&s, "replayed"), CUSTOMERS - 1, "{s}");
    assert!(
        text(&first.stderr).contains("job lease nightly lost"),
        "{}",
        text(&first.stderr)
    );
    let lines = env.ledger("ledger");
    assert_eq!(lines.len(), CUSTOMERS, "every op ran once between them");
    assert_unique(&lines);
}
