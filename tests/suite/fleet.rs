//! Many machines, simulated here: 8 worker processes run `idem run` over the
//! same 10,000 operations against one PostgreSQL, while a chaos thread pauses
//! them (SIGSTOP past the lease, then SIGCONT) and kills one mid-run.
//!
//! The effect is a charge sent to a payment provider, played by this test:
//! it deduplicates by the idempotency key, refuses a fence lower than one it
//! has seen for the key, and appends every request it gets, with its key,
//! fence, sender and answer, to an append-only ledger table. The policy
//! (`provider-charge`) therefore takes over an expired claim under a higher
//! fence instead of sending it to review. After the fleet and one sweeping
//! run (the next night's job, which finishes what the killed worker held):
//! every operation is completed and was charged exactly once, and every
//! stale holder's completion was fenced.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use idem_tests::{idem_bin, policy_path, postgres_url, succeed};

const WORKERS: usize = 8;

fn ops_count() -> usize {
    std::env::var("IDEM_FLEET_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// A small seeded generator (xorshift64*): the chaos schedule is replayable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The operations (by index) whose records worker `w` holds in progress.
fn held_by(url: &str, schema: &str, w: usize) -> Vec<usize> {
    let sql = format!(
        "SELECT partition FROM {schema}.records WHERE state = 'in-progress' AND holder_run_id = 'worker-{w}'"
    );
    psql(url, &sql)
        .lines()
        .filter_map(|l| l.strip_prefix('c')?.parse().ok())
        .collect()
}

/// Runs one SQL command through `psql` and returns its unaligned output.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql -c {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Signals a worker's whole process group: the worker and the commands it
/// runs stop (and die) together, as on a machine that stalls.
fn signal_group(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

/// The store's schema goes with the test, failed or not.
struct DropStoreOnExit<'a>(&'a str);

impl Drop for DropStoreOnExit<'_> {
    fn drop(&mut self) {
        idem_store_conformance::drop_postgres_schema(self.0);
    }
}

/// On a failing test, the last lines each run wrote to its stderr (kept in
/// `<sender>.err` files), before the temporary directory goes.
struct ShowLogsOnFailure<'a>(&'a std::path::Path);

impl Drop for ShowLogsOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.0) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "err") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(10)..].join("\n");
                eprintln!("--- {} (last lines)\n{tail}", path.display());
            }
        }
    }
}

/// The workers. Each leads a process group of its own, so it would outlive
/// a failing test and keep loading the machine: whichever of them still
/// runs when this is dropped has its group killed. Only unreaped children
/// are signalled (their pids cannot have been reused).
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                signal_group(child.id(), "-KILL");
                let _ = child.wait();
            }
        }
    }
}

/// One request the provider got, as its ledger keeps it.
#[derive(Debug, Clone)]
struct Request {
    key: String,
    fence: u64,
    sender: String,
    /// `charged`, `repeat` (answered from its record) or `fenced`
    /// (refused: it had seen a higher fence for the key).
    answer: String,
}

/// The payment provider: a TCP service on 127.0.0.1 taking one line
/// `KEY FENCE SENDER` per connection and answering `charged`, `repeat` or
/// `fenced`. It keeps its state in PostgreSQL, in a schema of its own: the
/// highest fence seen per key, and the append-only ledger of requests. One
/// thread answers the requests one at a time, each in a transaction, so the
/// answer for a key always sees every earlier request for it.
struct Provider {
    port: u16,
    url: String,
    schema: String,
}

impl Provider {
    fn start(url: &str, schema: &str) -> Provider {
        psql(
            url,
            &format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.fences (key text PRIMARY KEY, fence bigint NOT NULL);
                 CREATE TABLE {schema}.ledger (seq bigserial PRIMARY KEY, key text NOT NULL,
                   fence bigint NOT NULL, sender text NOT NULL,
                   answer text NOT NULL CHECK (answer IN ('charged', 'repeat', 'fenced')));
                 CREATE RULE ledger_append_only_update AS ON UPDATE TO {schema}.ledger DO INSTEAD NOTHING;
                 CREATE RULE ledger_append_only_delete AS ON DELETE TO {schema}.ledger DO INSTEAD NOTHING;"
            ),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel::<(String, mpsc::Sender<String>)>();
        let (db, ns) = (url.to_string(), schema.to_string());
        std::thread::spawn(move || answer_requests(&db, &ns, rx));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let tx = tx.clone();
                std::thread::spawn(move || serve(stream, tx));
            }
        });
        Provider {
            port,
            url: url.to_string(),
            schema: schema.to_string(),
        }
    }

    /// Every request, in the order the provider answered them.
    fn ledger(&self) -> Vec<Request> {
        psql(
            &self.url,
            &format!(
                "SELECT key, fence, sender, answer FROM {}.ledger ORDER BY seq",
                self.schema
            ),
        )
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            Request {
                key: f[0].to_string(),
                fence: f[1].parse().unwrap(),
                sender: f[2].to_string(),
                answer: f[3].to_string(),
            }
        })
        .collect()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &self.url,
                "-q",
                "-c",
                &format!("DROP SCHEMA {} CASCADE", self.schema),
            ])
            .output();
    }
}

/// One connection: a request line in, the answer line out.
fn serve(stream: TcpStream, requests: mpsc::Sender<(String, mpsc::Sender<String>)>) {
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let (reply, answer) = mpsc::channel();
    if requests.send((line.trim().to_string(), reply)).is_err() {
        return;
    }
    if let Ok(answer) = answer.recv() {
        let _ = writeln!(&stream, "{answer}");
    }
}

/// The provider's one worker: each request in a transaction of its own.
fn answer_requests(
    url: &str,
    schema: &str,
    requests: mpsc::Receiver<(String, mpsc::Sender<String>)>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        // The ledger is the test's record, not a bank's: no fsync per request.
        client
            .batch_execute("SET synchronous_commit = off")
            .await
            .unwrap();
        // Blocking between requests is fine: nothing is in flight then.
        while let Ok((line, reply)) = requests.recv() {
            let mut parts = line.split(' ');
            let (Some(key), Some(Ok(fence)), Some(sender)) = (
                parts.next(),
                parts.next().map(str::parse::<i64>),
                parts.next(),
            ) else {
                let _ = reply.send(format!("bad request {line:?}"));
                continue;
            };
            let tx = client.transaction().await.unwrap();
            // Locks the key's row until commit: requests for one key queue.
            tx.execute(
                &format!(
                    "INSERT INTO {schema}.fences AS f VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET fence = GREATEST(f.fence, EXCLUDED.fence)"
                ),
                &[&key, &fence],
            )
            .await
            .unwrap();
            let answer: String = tx
                .query_one(
                    &format!(
                        "INSERT INTO {schema}.ledger (key, fence, sender, answer)
                         SELECT $1, $2, $3, CASE
                           WHEN (SELECT fence FROM {schema}.fences WHERE key = $1) > $2 THEN 'fenced'
                           WHEN EXISTS (SELECT 1 FROM {schema}.ledger WHERE key = $1 AND answer = 'charged') THEN 'repeat'
                           ELSE 'charged' END
                         RETURNING answer"
                    ),
                    &[&key, &fence, &sender],
                )
                .await
                .unwrap()
                .get(0);
            tx.commit().await.unwrap();
            let _ = reply.send(answer);
        }
    });
}

/// The effect each worker runs: send the charge to the provider; a refusal
/// (a higher fence was seen) fails the command. It takes 0-40 ms to get
/// going (as a real call to a provider would), so a pause often catches a
/// holder before its request left: the provider then refuses it by fence.
const CHARGE: &str = r#"sleep "0.0$((RANDOM % 5))" && exec 3<>"/dev/tcp/127.0.0.1/$PROVIDER_PORT" && echo "$IDEM_KEY $IDEM_FENCE $SENDER" >&3 && read -r answer <&3 && [ "$answer" = charged ] || [ "$answer" = repeat ]"#;

/// `idem run` over `ops` as `sender`, charging through the provider.
fn run_worker(
    sender: &str,
    store: &str,
    ops: &std::path::Path,
    provider: &Provider,
    dir: &std::path::Path,
) -> Command {
    let log = std::fs::File::create(dir.join(format!("{sender}.err"))).unwrap();
    let mut command = Command::new(idem_bin());
    command
        .args(["run", "--policy"])
        .arg(policy_path("provider-charge"))
        .args(["--store", store, "--ops"])
        .arg(ops)
        .args([
            "--concurrency",
            "4",
            "--lease",
            "1s",
            "--json",
            "--run-id",
            sender,
        ])
        .args(["--", "bash", "-c", CHARGE])
        .env("PROVIDER_PORT", provider.port.to_string())
        .env("SENDER", sender)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .stdout(Stdio::piped())
        .stderr(log)
        // A group of its own, so that a pause or a kill takes its commands
        // with it.
        .process_group(0);
    command
}

fn summary(sender: &str, out: std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{sender} printed no summary ({e}): {text}"))
}

#[test]
fn a_fleet_of_workers_charges_every_op_exactly_once_and_fences_stale_holders() {
    let Some(url) = postgres_url("fleet") else {
        return;
    };
    let seed: u64 = std::env::var("IDEM_FLEET_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x1DE3);
    eprintln!(
        "fleet: seed {seed} (replay with IDEM_FLEET_SEED={seed}), {} ops",
        ops_count()
    );
    let dir = tempfile::tempdir().unwrap();
    let _logs = ShowLogsOnFailure(dir.path());
    let cache = dir.path().join("cache");
    let schema = format!("idem_fleet_{}", std::process::id());
    // A small pool per process: 8 workers, the operator, the sweeps and
    // the provider stay well inside the server's connection limit.
    let store = format!(
        "{url}{}idem_schema={schema}&idem_pool_size=6",
        if url.contains('?') { '&' } else { '?' }
    );
    let _drop_store = DropStoreOnExit(&store);
    let provider = Provider::start(&url, &format!("{schema}_provider"));
    // The store exists before the workers start (and the chaos looks in it).
    succeed(Command::new(idem_bin()).args(["migrate", "--store", &store]));
    let n = ops_count();
    let ops: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{i}","billing_period":"2026-11","invoice_id":"i{i}","amount":"{}","currency":"EUR"}}}}"#,
                100 + i % 50
            )
        })
        .collect();
    let all_ops = dir.path().join("ops.jsonl");
    std::fs::write(&all_ops, ops.join("\n") + "\n").unwrap();
    // Each worker gets the same operations in its own (seeded) order, so a
    // paused worker's claims are soon reached by the others.
    let mut rng = Rng(seed | 1);
    let mut workers = Workers(
        (0..WORKERS)
            .map(|w| {
                let mut order = ops.clone();
                for i in (1..order.len()).rev() {
                    order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
                }
                let path = dir.path().join(format!("ops-{w}.jsonl"));
                std::fs::write(&path, order.join("\n") + "\n").unwrap();
                run_worker(&format!("worker-{w}"), &store, &path, &provider, dir.path())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );

    // Chaos: pause a random worker past its lease, again and again; kill
    // the last one once a quarter of the charges are made.
    let victim = WORKERS - 1;
    let mut killed = false;
    let mut pauses = 0;
    let mut operator_runs = 0u64;
    loop {
        let alive: Vec<usize> = (0..WORKERS)
            .filter(|&w| !(killed && w == victim) && workers.0[w].try_wait().unwrap().is_none())
            .collect();
        if alive.is_empty() {
            break;
        }
        if !killed {
            let charged = psql(
                &url,
                &format!(
                    "SELECT count(*) FROM {}.ledger WHERE answer = 'charged'",
                    provider.schema
                ),
            );
            if charged.trim().parse::<usize>().unwrap() >= n / 4 {
                signal_group(workers.0[victim].id(), "-KILL");
                killed = true;
                continue;
            }
        }
        let w = alive[(rng.next() % alive.len() as u64) as usize];
        let pid = workers.0[w].id();
        signal_group(pid, "-STOP");
        pauses += 1;
        // Fault injection, not an assertion: longer than the 1 s lease.
        std::thread::sleep(Duration::from_millis(1_500));
        // While it is stalled, an operator re-runs by hand the operations
        // it holds: their leases expired, so the policy takes them over
        // under a higher fence, and the stalled worker is deposed.
        for i in held_by(&url, &schema, w).into_iter().take(2) {
            let op = dir.path().join("manual-op.json");
            std::fs::write(&op, &ops[i]).unwrap();
            let out = Command::new(idem_bin())
                .args(["exec", "--policy"])
                .arg(policy_path("provider-charge"))
                .args(["--store", &store, "--op"])
                .arg(&op)
                .args(["--run-id", "operator", "--trigger", "manual"])
                .args(["--", "bash", "-c", CHARGE])
                .env("PROVIDER_PORT", provider.port.to_string())
                .env("SENDER", "operator")
                .env("IDEM_CACHE_DIR", &cache)
                .output()
                .unwrap();
            // 0: taken over and charged (or answered as a repeat), or it had
            // finished meanwhile and was replayed; 75: another worker took
            // it over first and holds it.
            assert!(
                matches!(out.status.code(), Some(0) | Some(75)),
                "seed {seed}: the operator's run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            operator_runs += u64::from(out.status.code() == Some(0));
        }
        signal_group(pid, "-CONT");
        std::thread::sleep(Duration::from_millis(200 + rng.next() % 400));
    }
    assert!(
        killed,
        "the run ended before a worker could be killed; raise IDEM_FLEET_OPS"
    );
    assert!(
        operator_runs > 0,
        "seed {seed}: no pause caught a worker holding a claim; the test proved nothing"
    );

    // What each surviving worker says it did.
    let mut summaries = HashMap::new();
    for (w, child) in std::mem::take(&mut workers.0).into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        if w != victim {
            summaries.insert(format!("worker-{w}"), summary(&format!("worker {w}"), out));
        }
    }

    // The next night's run finishes what the killed worker (or a worker
    // whose session the server ended) left in progress, once its lease has
    // lapsed; until then such an op answers "in progress".
    let mut sweeps = 0;
    loop {
        sweeps += 1;
        let sender = format!("sweep-{sweeps}");
        let out = run_worker(&sender, &store, &all_ops, &provider, dir.path())
            .output()
            .unwrap();
        let finished = out.status.success();
        let s = summary("the sweep", out);
        assert_eq!(s["fenced"].as_u64(), Some(0), "seed {seed}: sweep: {s}");
        summaries.insert(sender, s.clone());
        // Exit 0: every operation is done.
        if finished {
            break;
        }
        assert!(
            sweeps < 10,
            "seed {seed}: not done after {sweeps} sweeps: {s}"
        );
        // Not an assertion: the held leases are 1 s long.
        std::thread::sleep(Duration::from_millis(1_100));
    }

    // What the store holds.
    let out = succeed(Command::new(idem_bin()).args([
        "inspect",
        "--json",
        "--limit",
        &(n * 2).to_string(),
        "--store",
        &store,
    ]));
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ledger = provider.ledger();
    drop(provider);

    let mut requests: HashMap<&str, Vec<&Request>> = HashMap::new();
    for r in &ledger {
        requests.entry(r.key.as_str()).or_default().push(r);
    }
    // 1. Every operation is completed, under the highest fence its key got.
    assert_eq!(records.len(), n, "seed {seed}");
    let mut final_fence = HashMap::new();
    for r in &records {
        let key = r["key"].as_str().unwrap();
        let fence = r["fence"].as_u64().unwrap();
        assert_eq!(r["state"], "completed", "seed {seed}: {r}");
        let sent = requests
            .get(key)
            .unwrap_or_else(|| panic!("seed {seed}: completed without a charge: {r}"));
        assert_eq!(
            sent.iter().map(|q| q.fence).max(),
            Some(fence),
            "seed {seed}: completed under a fence that is not the last one sent: {r} {sent:?}"
        );
        final_fence.insert(key, fence);
    }
    // 2. No claim ran its effect twice: each request for a key carries a
    //    fence of its own, and a key got no more requests than it had
    //    attempts (the first claim plus each take-over). The provider heard
    //    of no other key, and charged each once (its own guarantee, by key
    //    and fence: what makes re-sending after a take-over safe).
    assert_eq!(requests.len(), n, "seed {seed}");
    let attempts: HashMap<&str, u64> = records
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["attempts"].as_u64().unwrap()))
        .collect();
    for (key, sent) in &requests {
        let fences: std::collections::HashSet<u64> = sent.iter().map(|q| q.fence).collect();
        assert_eq!(
            fences.len(),
            sent.len(),
            "seed {seed}: a claim ran twice: {sent:?}"
        );
        assert!(
            sent.len() as u64 <= attempts[key],
            "seed {seed}: {key}: {} requests, {} attempts: {sent:?}",
            sent.len(),
            attempts[key]
        );
        let charged = sent.iter().filter(|q| q.answer == "charged").count();
        assert_eq!(
            charged, 1,
            "seed {seed}: {key} charged {charged} times: {sent:?}"
        );
    }
    // 3. Every stale holder was fenced: a request under a fence other than
    //    the record's final one came from a holder that was deposed, and its
    //    completion was refused by the store (`fenced`), unless its session
    //    was ended by the server while it was stalled (`unknown`).
    let stale: Vec<&Request> = ledger
        .iter()
        .filter(|q| final_fence[q.key.as_str()] != q.fence)
        .collect();
    assert!(
        !stale.is_empty(),
        "seed {seed}: no holder was deposed; the test proved nothing"
    );
    for (sender, s) in &summaries {
        let count = |k: &str| s[k].as_u64().unwrap();
        let stale_here = stale.iter().filter(|q| q.sender == *sender).count() as u64;
        assert!(
            count("fenced") <= stale_here && stale_here <= count("fenced") + count("unknown"),
            "seed {seed}: {sender}: {stale_here} requests under a stale fence: {s}"
        );
        // 4. Each run accounted for every operation, and each effect it
        //    started is one request the provider got.
        let total: u64 = [
            "executed",
            "replayed",
            "in_progress",
            "conflicts",
            "rejected",
            "failed",
            "fenced",
            "unknown",
            "stale_epoch",
            "not_owned",
        ]
        .iter()
        .map(|k| count(k))
        .sum();
        assert_eq!(total as usize, n, "seed {seed}: {sender}: {s}");
        let runs = count("executed") + count("fenced") + count("failed");
        let sent = ledger.iter().filter(|q| q.sender == *sender).count() as u64;
        assert!(
            runs <= sent && sent <= runs + count("unknown"),
            "seed {seed}: {sender}: {sent} requests: {s}"
        );
    }
    let refused = ledger.iter().filter(|q| q.answer == "fenced").count();
    let repeats = ledger.iter().filter(|q| q.answer == "repeat").count();
    eprintln!(
        "fleet: {pauses} pauses, {operator_runs} operator take-overs, {} requests ({refused} refused by fence, {repeats} answered as repeats), {} stale holders fenced, {sweeps} sweeps",
        ledger.len(),
        stale.len()
    );
}
