//! `idem consume` against the real NATS JetStream server of the machine
//! (`IDEM_TEST_NATS_URL`): messages published several times (a publisher
//! retrying) and delivered again run each effect once, and every message
//! ends acknowledged; a consumer killed mid-effect leaves one effect, and
//! the consumer that gets the message again sends the lapsed claim to
//! review (the billing policy does not re-run a charge blindly) and
//! acknowledges it.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer, stream};
use idem_tests::{idem_bin, nats_url, policy_path};

/// A stream of its own for one test, deleted at the end.
struct Stream {
    context: jetstream::Context,
    name: String,
    subject: String,
    runtime: tokio::runtime::Runtime,
}

impl Stream {
    fn create(url: &str, test: &str) -> Stream {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let unique = format!(
            "{test}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let name = unique.replace(['.', '-'], "_");
        let subject = format!("idemtest.{name}");
        let context = runtime.block_on(async {
            let client = async_nats::connect(url).await.expect("NATS is reachable");
            let context = jetstream::new(client);
            context
                .create_stream(stream::Config {
                    name: name.clone(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .expect("create the stream");
            context
        });
        Stream {
            context,
            name,
            subject,
            runtime,
        }
    }

    /// Publishes each body, waiting for the stream's acknowledgement.
    fn publish(&self, bodies: &[String]) {
        self.runtime.block_on(async {
            for body in bodies {
                self.context
                    .publish(self.subject.clone(), body.clone().into())
                    .await
                    .expect("publish")
                    .await
                    .expect("the stream stored it");
            }
        });
    }

    /// The consumer's messages not yet delivered, and delivered but not
    /// acknowledged.
    fn pending(&self, consumer: &str) -> (u64, u64) {
        self.runtime.block_on(async {
            let stream = self.context.get_stream(&self.name).await.unwrap();
            let mut consumer: PullConsumer = stream.get_consumer(consumer).await.unwrap();
            let info = consumer.info().await.unwrap();
            (info.num_pending, info.num_ack_pending as u64)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self
            .runtime
            .block_on(self.context.delete_stream(&self.name));
    }
}

fn charge(invoice: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c-{invoice}","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

/// `idem consume` of `stream` through `consumer`, the effect appending
/// the operation to `dir/ledger`; `extra` flags before the command.
fn consume(
    url: &str,
    stream: &Stream,
    dir: &Path,
    consumer: &str,
    extra: &[&str],
    effect: &str,
) -> Command {
    let mut c = Command::new(idem_bin());
    c.args(["consume", "--policy"])
        .arg(policy_path("billing-charge"))
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("idem.db").display()))
        .args([
            "--from",
            url,
            "--stream",
            &stream.name,
            "--consumer",
            consumer,
        ])
        .args(extra)
        .args(["--json", "--", "sh", "-c", effect])
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .env("LEDGER", dir.join("ledger"));
    c
}

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

#[test]
fn messages_published_and_delivered_again_run_each_effect_once() {
    let test = "consume::messages_published_and_delivered_again_run_each_effect_once";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "dup");
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
    stream.publish(&bodies);
    let out = consume(
        &url,
        &stream,
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
            tally["skipped"].as_u64(),
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
    assert_eq!(stream.pending("billing"), (0, 0));
    // The whole stream again, through a consumer of its own (a second
    // service reading the same events): every charge a replay, no effect.
    let again = consume(
        &url,
        &stream,
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
}

#[test]
fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review() {
    let test =
        "consume::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "kill");
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<String> = (0..6).map(|i| charge(&format!("k{i}"))).collect();
    stream.publish(&bodies);
    // The first consumer charges k3 and is then paused for good (killed
    // before it records or acknowledges anything about it).
    let stall = format!(
        r#"{APPEND}; case "$(tail -n 2 "$LEDGER")" in *'"invoice_id":"k3"'*) sleep 600 ;; esac"#
    );
    let mut first = consume(
        &url,
        &stream,
        dir.path(),
        "billing",
        &["--lease", "1s", "--ack-wait", "2s"],
        &stall,
    );
    use std::os::unix::process::CommandExt;
    let mut first = first
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while effects_of(dir.path(), "k3") == 0 {
        assert!(Instant::now() < deadline, "k3 was never charged");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGKILL the whole group: idem and its effect's shell. (procps'
    // `kill -9 -PGID` takes the group for an option and kills nothing.)
    let group = format!("-{}", first.id());
    assert_eq!(
        Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status()
            .unwrap()
            .code(),
        Some(0)
    );
    let killed = first.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9),
        "the first consumer was killed"
    );
    // The second consumer gets what the first left: k3 again once the
    // broker's ack wait is over, by then past its 1 s lease.
    let out = consume(
        &url,
        &stream,
        dir.path(),
        "billing",
        &["--lease", "1s", "--stop-when-idle", "5s"],
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
    assert_eq!(stream.pending("billing"), (0, 0), "every message settled");
    // k3 waits for a person, named by `idem review`.
    let review = Command::new(idem_bin())
        .args(["review", "--store"])
        .arg(format!("sqlite:{}", dir.path().join("idem.db").display()))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&review.stdout);
    assert!(listed.contains("k3"), "{listed}");
}
