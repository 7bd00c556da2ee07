//! `idem consume` against the real brokers of the machine: NATS JetStream
//! (`IDEM_TEST_NATS_URL`, `nats.rs`), RabbitMQ (`IDEM_TEST_AMQP_URL`,
//! `amqp.rs`) and Redis Streams (`IDEM_TEST_REDIS_URL`, `redis.rs`), and
//! Kafka (`kafka.rs`: librdkafka's mock cluster, started by each test), each
//! running the same checks (this file) through a [`Broker`] of its own:
//! - messages published several times (a publisher retrying) and delivered
//!   again run each effect once, and every message ends acknowledged;
//! - a consumer killed mid-effect leaves one effect, and the consumer that
//!   gets the message again sends the lapsed claim to review (the billing
//!   policy does not re-run a charge blindly) and acknowledges it;
//! - two consumers share thousands of deliveries, one is killed mid-run
//!   and the other takes over: no effect twice, nothing lost;
//! - two consumers as shards 0 and 1 of 2 (`--shard`; NATS only, RabbitMQ
//!   refuses it): each runs only the partitions it owns, every effect once;
//! - issue 42's, in `poison.rs`: one fate per message, decided once;
//! - Redis's and Kafka's, in `paused.rs`: a consumer paused past the
//!   broker's threshold, then resumed;
//! - issue 45's, in `same_fate.rs`: an ops file and a broker give each
//!   operation the same end, each source settling it its own way.

mod amqp;
mod flags;
mod kafka;
mod nats;
mod paused;
mod poison;
mod redis;
mod same_fate;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_tests::{idem_bin, policy_path};

/// A broker's place for one test (a stream, or an exchange and queues),
/// removed at the end.
trait Broker {
    /// `idem consume`'s flags that read `reader`'s share of the messages
    /// (every reader sees every message; readers of one name share them).
    fn flags(&self, reader: &str) -> Vec<String>;

    /// Publishes each body, waiting for the broker to have stored it.
    fn publish(&self, bodies: &[String]);

    /// How many of `reader`'s messages are not settled: waiting, or
    /// delivered and not acknowledged.
    fn unsettled(&self, reader: &str) -> u64;

    /// Flags for a consumer about to be killed: how soon the broker gives
    /// its deliveries to another.
    fn redeliver_soon(&self) -> Vec<String>;

    /// A place for `--review-to` (a subject a stream of its own captures;
    /// a queue no reader reads).
    fn review_to(&self) -> String;

    /// What was forwarded to [`Broker::review_to`], in order: each body and
    /// the value of each of `headers` (empty when absent).
    fn forwarded(&self, headers: &[&str]) -> Vec<(String, Vec<String>)>;

    /// The bodies of `reader`'s messages the broker was told to refuse for
    /// good, once per telling (JetStream: its terminated advisories;
    /// RabbitMQ: the reader's dead-letter queue).
    fn refused(&self, reader: &str) -> Vec<String>;
}

fn charge(invoice: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c-{invoice}","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

/// A name no other test run uses.
fn unique(test: &str) -> String {
    format!(
        "{test}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// `idem consume` of `broker` as `reader`, the effect `effect` (a shell
/// script; `$LEDGER` is `dir/ledger`); `extra` flags before the command.
fn consume(broker: &dyn Broker, dir: &Path, reader: &str, extra: &[&str], effect: &str) -> Command {
    let store = format!("sqlite:{}", dir.join("idem.db").display());
    consume_on(broker, dir, &store, reader, extra, effect)
}

/// [`consume`] with the store at `store`.
fn consume_on(
    broker: &dyn Broker,
    dir: &Path,
    store: &str,
    reader: &str,
    extra: &[&str],
    effect: &str,
) -> Command {
    let mut c = Command::new(idem_bin());
    c.args(["consume", "--policy"])
        .arg(policy_path("billing-charge"))
        .args(["--store", store])
        .args(broker.flags(reader))
        .args(extra)
        .args(["--json", "--", "sh", "-c", effect])
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .env("LEDGER", dir.join("ledger"));
    c
}

/// Appends the operation to the ledger: the effect, seen from outside.
const APPEND: &str = r#"cat >> "$LEDGER"; echo >> "$LEDGER""#;

fn summary(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// How many ledger lines name `invoice`.
fn effects_of(dir: &Path, invoice: &str) -> usize {
    let needle = format!("\"invoice_id\":\"{invoice}\"");
    std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

/// Starts `command` with its output kept, for `wait_with_output`.
fn spawn_piped(mut command: Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the ledger in `dir` holds at least `charges` charges;
/// `stalled` is the failure's message after two minutes without them.
fn wait_for_charges(dir: &Path, charges: usize, stalled: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .count()
        < charges
    {
        assert!(Instant::now() < deadline, "{stalled}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `command` in a process group of its own, its output dropped.
fn spawn_group(mut command: Command) -> Child {
    command
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// SIGKILLs `child`'s whole group: idem and its effects' shells. (procps'
/// `kill -9 -PGID` takes the group for an option and kills nothing.)
fn kill_group(child: &mut Child) {
    let group = format!("-{}", child.id());
    assert_eq!(
        Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status()
            .unwrap()
            .code(),
        Some(0)
    );
    let killed = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9),
        "the consumer was killed"
    );
}

/// What `idem SUBCOMMAND --json` (`review`, `inspect`) lists of the
/// store in `dir`.
fn listed(dir: &Path, subcommand: &str) -> Vec<serde_json::Value> {
    let out = Command::new(idem_bin())
        .args([subcommand, "--json", "--limit", "100000", "--store"])
        .arg(format!("sqlite:{}", dir.join("idem.db").display()))
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    listed.as_array().expect("a list").clone()
}

/// The invoices of the records `idem review` lists as waiting.
fn in_review(dir: &Path) -> Vec<String> {
    listed(dir, "review")
        .iter()
        .map(|w| {
            let op = w["operation"].to_string();
            let start = op.find("\"invoice_id\":\"").expect("the invoice is shown") + 14;
            op[start..start + op[start..].find('"').unwrap()].to_string()
        })
        .collect()
}

/// After a consumer holding up to `slots` charges was killed: no effect
/// twice among `prefix0`..`prefix{count-1}`, each charge made once, or
/// (what the killed consumer held) waiting for a person.
fn each_charge_once_or_in_review(
    dir: &Path,
    prefix: &str,
    count: usize,
    slots: usize,
    stderr: &str,
) {
    let review = in_review(dir);
    assert!(review.len() <= slots, "{review:?}");
    for i in 0..count {
        let invoice = format!("{prefix}{i}");
        let effects = effects_of(dir, &invoice);
        if review.contains(&invoice) {
            assert!(effects <= 1, "{invoice}: {effects} effects");
        } else {
            assert_eq!(effects, 1, "{invoice}: not in review; {stderr}");
        }
    }
}

fn messages_published_and_delivered_again_run_each_effect_once(broker: &dyn Broker) {
    let dir = tempfile::tempdir().unwrap();
    // 40 charges, each published three times (a publisher retrying without
    // a message id), interleaved; and one message that is not an operation.
    let mut bodies = Vec::new();
    for round in 0..3 {
        for i in 0..40 {
            bodies.push(charge(&format!("i{}", (i * 7 + round) % 40)));
        }
    }
    bodies.push("not json".to_string());
    broker.publish(&bodies);
    let out = consume(
        broker,
        dir.path(),
        "billing",
        &["--concurrency", "4", "--stop-when-idle", "2s"],
        APPEND,
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tally = summary(&out);
    assert_eq!(
        (
            tally["executed"].as_u64(),
            tally["refused"].as_u64(),
            tally["unknown"].as_u64()
        ),
        (Some(40), Some(1), Some(0)),
        "{tally}"
    );
    // The duplicates replayed, or were put off while their first ran and
    // replayed when delivered again: 80 replays in all.
    assert_eq!(tally["replayed"], 80, "{tally}");
    for i in 0..40 {
        assert_eq!(effects_of(dir.path(), &format!("i{i}")), 1, "invoice i{i}");
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an operation"),
        "the bad message is named"
    );
    // Every message settled: none left, none delivered and unacknowledged.
    assert_eq!(broker.unsettled("billing"), 0);
    // Every message again, read by a second service: every charge a
    // replay, no effect.
    let again = consume(
        broker,
        dir.path(),
        "again",
        &["--stop-when-idle", "2s"],
        APPEND,
    )
    .output()
    .unwrap();
    let tally = summary(&again);
    assert_eq!(
        (tally["executed"].as_u64(), tally["replayed"].as_u64()),
        (Some(0), Some(120)),
        "{tally}"
    );
    for i in 0..40 {
        assert_eq!(effects_of(dir.path(), &format!("i{i}")), 1, "invoice i{i}");
    }
    assert_eq!(broker.unsettled("again"), 0);
}

fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review(
    broker: &dyn Broker,
) {
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<String> = (0..6).map(|i| charge(&format!("k{i}"))).collect();
    broker.publish(&bodies);
    // The first consumer charges k3 and is then paused for good (killed
    // before it records or acknowledges anything about it).
    let stall = format!(
        r#"{APPEND}; case "$(tail -n 2 "$LEDGER")" in *'"invoice_id":"k3"'*) sleep 600 ;; esac"#
    );
    let mut flags = vec!["--lease".to_string(), "1s".to_string()];
    flags.extend(broker.redeliver_soon());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut first = spawn_group(consume(broker, dir.path(), "billing", &flags, &stall));
    let deadline = Instant::now() + Duration::from_secs(60);
    while effects_of(dir.path(), "k3") == 0 {
        assert!(Instant::now() < deadline, "k3 was never charged");
        std::thread::sleep(Duration::from_millis(50));
    }
    kill_group(&mut first);
    // The second consumer gets what the first left: k3 again once the
    // broker gives it back, by then (or once put off) past its 1 s lease;
    // it forwards k3 to the review place.
    let review_to = broker.review_to();
    let out = consume(
        broker,
        dir.path(),
        "billing",
        &[
            "--lease",
            "1s",
            "--stop-when-idle",
            "5s",
            "--review-to",
            &review_to,
        ],
        APPEND,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let tally = summary(&out);
    assert_eq!(tally["sent_to_review"], 1, "{tally}; {stderr}");
    for i in 0..6 {
        assert_eq!(effects_of(dir.path(), &format!("k{i}")), 1, "invoice k{i}");
    }
    assert_eq!(broker.unsettled("billing"), 0, "every message settled");
    // k3 waits for a person, named by `idem review`.
    let review = Command::new(idem_bin())
        .args(["review", "--store"])
        .arg(format!("sqlite:{}", dir.path().join("idem.db").display()))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&review.stdout);
    assert!(listed.contains("k3"), "{listed}");
    // The message itself went to the review place, naming its record.
    let headers = ["idem-namespace", "idem-key", "idem-reason", "idem-delivery"];
    let forwarded = broker.forwarded(&headers);
    assert_eq!(forwarded.len(), 1, "{forwarded:?}");
    let (body, values) = &forwarded[0];
    assert_eq!(body, &charge("k3"));
    let key = &values[1];
    assert_eq!(key.len(), 64, "{values:?}");
    assert!(listed.contains(&key[..12]), "{key} in {listed}");
    assert!(values.iter().all(|v| !v.is_empty()), "{values:?}");
}

fn two_consumers_one_killed_mid_run_the_other_takes_over(broker: &dyn Broker) {
    const CHARGES: usize = 1000;
    const SLOTS: &str = "4";
    let dir = tempfile::tempdir().unwrap();
    // Each charge published twice (a publisher retrying), the second copy
    // far from the first.
    let bodies: Vec<String> = (0..2 * CHARGES)
        .map(|n| charge(&format!("s{}", n % CHARGES)))
        .collect();
    broker.publish(&bodies);
    // A 5 s lease: well past an effect's time here even on a loaded
    // machine, so only the killed consumer's claims lapse.
    let mut flags = vec!["--lease", "5s", "--concurrency", SLOTS]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
    flags.extend(broker.redeliver_soon());
    let mut first_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut first = spawn_group(consume(broker, dir.path(), "billing", &first_flags, APPEND));
    std::thread::sleep(Duration::from_millis(300));
    first_flags.extend(["--stop-when-idle", "10s"]);
    let second = spawn_piped(consume(broker, dir.path(), "billing", &first_flags, APPEND));
    // Killed mid-run: once a fifth of the charges are made.
    wait_for_charges(dir.path(), CHARGES / 5, "the consumers made no progress");
    kill_group(&mut first);
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // No effect twice; every charge made, or (what the killed consumer
    // held: at most its slots) waiting for a person.
    let tally = summary(&out);
    eprintln!("the consumer left: {tally}");
    // It took over: it ran charges after the first was killed.
    assert!(tally["executed"].as_u64() > Some(0), "{tally}");
    each_charge_once_or_in_review(dir.path(), "s", CHARGES, 4, &stderr);
    assert_eq!(broker.unsettled("billing"), 0, "every message settled");
}

fn two_shards_each_run_only_the_messages_they_own(broker: &dyn Broker) {
    const CHARGES: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<String> = (0..CHARGES).map(|n| charge(&format!("o{n}"))).collect();
    broker.publish(&bodies);
    // Two consumers of one reader, shards 0 and 1 of 2: each effect writes
    // its partition to its shard's file.
    let shards: Vec<Child> = (0..2)
        .map(|i| {
            let effect = format!(r#"echo "$IDEM_PARTITION" >> part{i}; {APPEND}"#);
            let shard = format!("{i}/2");
            spawn_piped(consume(
                broker,
                dir.path(),
                "billing",
                &["--shard", &shard, "--concurrency", "4"],
                &effect,
            ))
        })
        .collect();
    wait_for_charges(dir.path(), CHARGES, "the shards made no progress");
    // Every charge made: stop both (SIGTERM: what runs finishes and is
    // acknowledged).
    let mut executed = 0;
    let mut not_owned = 0;
    for shard in shards {
        let pid = shard.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-s", "TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let out = shard.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let tally = summary(&out);
        executed += tally["executed"].as_u64().unwrap();
        not_owned += tally["not_owned"].as_u64().unwrap();
        assert_eq!(tally["stale_epoch"], 0, "{tally}");
    }
    eprintln!("put off as another shard's: {not_owned}");
    assert_eq!(executed, CHARGES as u64);
    for n in 0..CHARGES {
        assert_eq!(effects_of(dir.path(), &format!("o{n}")), 1, "invoice o{n}");
    }
    // Each shard ran only partitions it owns, and both ran some.
    let members = idem_core::ownership::shard_members(2);
    for i in 0..2 {
        let ran = std::fs::read_to_string(dir.path().join(format!("part{i}"))).unwrap_or_default();
        let partitions: Vec<&str> = ran.lines().filter(|l| !l.is_empty()).collect();
        assert!(!partitions.is_empty(), "shard {i} ran nothing");
        for partition in partitions {
            assert!(
                idem_core::ownership::owns(partition, &i.to_string(), &members),
                "shard {i} ran partition {partition}, not its own"
            );
        }
    }
    assert_eq!(broker.unsettled("billing"), 0, "every message settled");
}
