//! The checks of `mod.rs` through NATS JetStream: a stream of its own per
//! test; a reader is a durable pull consumer (`idem consume` creates it).

use std::sync::{Arc, Mutex};

use async_nats::jetstream::{self, consumer::PullConsumer, stream};
use futures_util::StreamExt;
use idem_tests::nats_url;

use super::Broker;

struct Stream {
    url: String,
    context: jetstream::Context,
    name: String,
    subject: String,
    /// The terminated advisories of the stream's consumers, as they come:
    /// (consumer, stream sequence).
    terminated: Arc<Mutex<Vec<(String, u64)>>>,
    runtime: tokio::runtime::Runtime,
}

impl Stream {
    fn create(url: &str, test: &str) -> Stream {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let name = super::unique(test).replace(['.', '-'], "_");
        let subject = format!("idemtest.{name}");
        let terminated = Arc::new(Mutex::new(Vec::new()));
        let context = runtime.block_on(async {
            let client = async_nats::connect(url).await.expect("NATS is reachable");
            // Every +TERM the server is told, whichever consumer sent it.
            let mut advisories = client
                .subscribe(format!(
                    "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{name}.*"
                ))
                .await
                .expect("subscribe to the terminated advisories");
            client.flush().await.expect("the subscription is in place");
            let seen = terminated.clone();
            tokio::spawn(async move {
                while let Some(message) = advisories.next().await {
                    let advisory: serde_json::Value =
                        serde_json::from_slice(&message.payload).unwrap_or_default();
                    seen.lock().unwrap().push((
                        advisory["consumer"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        advisory["stream_seq"].as_u64().unwrap_or_default(),
                    ));
                }
            });
            let context = jetstream::new(client);
            context
                .create_stream(stream::Config {
                    name: name.clone(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .expect("create the stream");
            // Where --review-to forwards: a stream of its own, so that no
            // reader of the first sees what went to review.
            context
                .create_stream(stream::Config {
                    name: format!("{name}_review"),
                    subjects: vec![format!("{subject}.review")],
                    ..Default::default()
                })
                .await
                .expect("create the review stream");
            context
        });
        Stream {
            url: url.to_string(),
            context,
            name,
            subject,
            terminated,
            runtime,
        }
    }
}

impl Broker for Stream {
    fn flags(&self, reader: &str) -> Vec<String> {
        [
            "--from",
            &self.url,
            "--stream",
            &self.name,
            "--consumer",
            reader,
        ]
        .map(str::to_string)
        .to_vec()
    }

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

    fn unsettled(&self, reader: &str) -> u64 {
        self.runtime.block_on(async {
            let stream = self.context.get_stream(&self.name).await.unwrap();
            let mut consumer: PullConsumer = stream.get_consumer(reader).await.unwrap();
            let info = consumer.info().await.unwrap();
            info.num_pending + info.num_ack_pending as u64
        })
    }

    fn redeliver_soon(&self) -> Vec<String> {
        vec!["--ack-wait".into(), "2s".into()]
    }

    fn review_to(&self) -> String {
        format!("{}.review", self.subject)
    }

    fn refused(&self, reader: &str) -> Vec<String> {
        self.refused_bodies(reader)
    }

    fn forwarded(&self, headers: &[&str]) -> Vec<(String, Vec<String>)> {
        self.runtime.block_on(async {
            let mut stream = self
                .context
                .get_stream(format!("{}_review", self.name))
                .await
                .unwrap();
            let count = stream.info().await.unwrap().state.messages;
            let mut out = Vec::new();
            for sequence in 1..=count {
                let message = stream.get_raw_message(sequence).await.unwrap();
                let values = headers
                    .iter()
                    .map(|h| {
                        message
                            .headers
                            .get(*h)
                            .map_or(String::new(), |v| v.to_string())
                    })
                    .collect();
                out.push((
                    String::from_utf8_lossy(&message.payload).into_owned(),
                    values,
                ));
            }
            out
        })
    }
}

impl Stream {
    fn refused_bodies(&self, reader: &str) -> Vec<String> {
        // The advisories are published as the server handles each +TERM:
        // read once they stop coming.
        let mut count = usize::MAX;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = self.terminated.lock().unwrap().len();
            if now == count {
                break;
            }
            count = now;
        }
        let sequences: Vec<u64> = self
            .terminated
            .lock()
            .unwrap()
            .iter()
            .filter(|(consumer, _)| consumer == reader)
            .map(|(_, sequence)| *sequence)
            .collect();
        self.runtime.block_on(async {
            let stream = self.context.get_stream(&self.name).await.unwrap();
            let mut out = Vec::new();
            for sequence in sequences {
                let message = stream.get_raw_message(sequence).await.unwrap();
                out.push(String::from_utf8_lossy(&message.payload).into_owned());
            }
            out
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self
            .runtime
            .block_on(self.context.delete_stream(&self.name));
        let _ = self
            .runtime
            .block_on(self.context.delete_stream(format!("{}_review", self.name)));
    }
}

#[test]
fn messages_published_and_delivered_again_run_each_effect_once() {
    let test = "consume::nats::messages_published_and_delivered_again_run_each_effect_once";
    let Some(url) = nats_url(test) else { return };
    super::messages_published_and_delivered_again_run_each_effect_once(&Stream::create(
        &url, "dup",
    ));
}

#[test]
fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review() {
    let test = "consume::nats::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review";
    let Some(url) = nats_url(test) else { return };
    super::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review(
        &Stream::create(&url, "kill"),
    );
}

#[test]
fn two_consumers_one_killed_mid_run_the_other_takes_over() {
    let test = "consume::nats::two_consumers_one_killed_mid_run_the_other_takes_over";
    let Some(url) = nats_url(test) else { return };
    super::two_consumers_one_killed_mid_run_the_other_takes_over(&Stream::create(&url, "two"));
}

#[test]
fn an_effect_longer_than_the_ack_wait_is_reported_in_progress_and_not_delivered_again() {
    let test = "consume::nats::an_effect_longer_than_the_ack_wait_is_reported_in_progress_and_not_delivered_again";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "long");
    let dir = tempfile::tempdir().unwrap();
    stream.publish(&[super::charge("long")]);
    // The effect takes 7 s, the ack wait is 3 s, and a second slot is free:
    // without the consumer's reports the broker would deliver the message
    // again to that slot.
    let out = super::consume(
        &stream,
        dir.path(),
        "billing",
        &[
            "--ack-wait",
            "3s",
            "--concurrency",
            "2",
            "--stop-when-idle",
            "2s",
        ],
        &format!("sleep 7; {}", super::APPEND),
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let tally = super::summary(&out);
    // Delivered again, it would have been put off (in progress) or, once
    // the policy's wait for the first ran out, replayed.
    assert_eq!(
        (
            tally["executed"].as_u64(),
            tally["in_progress"].as_u64(),
            tally["replayed"].as_u64()
        ),
        (Some(1), Some(0), Some(0)),
        "delivered once: {tally}; {stderr}"
    );
    assert_eq!(super::effects_of(dir.path(), "long"), 1);
    assert_eq!(stream.unsettled("billing"), 0);
}

#[test]
fn two_shards_each_run_only_the_messages_they_own() {
    let test = "consume::nats::two_shards_each_run_only_the_messages_they_own";
    let Some(url) = nats_url(test) else { return };
    super::two_shards_each_run_only_the_messages_they_own(&Stream::create(&url, "shards"));
}

#[test]
fn a_shard_deposed_by_a_new_membership_stops_and_says_so() {
    let test = "consume::nats::a_shard_deposed_by_a_new_membership_stops_and_says_so";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "deposed");
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<String> = (0..40).map(|n| super::charge(&format!("d{n}"))).collect();
    stream.publish(&bodies);
    // Shard 0 of 2 charges slowly, a message at a time.
    let first = super::spawn_piped(super::consume(
        &stream,
        dir.path(),
        "billing",
        &["--shard", "0/2"],
        &format!("sleep 0.5; {}", super::APPEND),
    ));
    super::wait_for_charges(dir.path(), 1, "shard 0 charged nothing");
    // Another consumer joins the same group with three shards: the
    // membership moves on, and shard 0 of 2 is deposed.
    let second = super::consume(
        &stream,
        dir.path(),
        "billing",
        &["--shard", "0/3", "--max-messages", "1"],
        super::APPEND,
    )
    .output()
    .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let out = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "exits as deposed: {stderr}");
    assert!(stderr.contains("deposed"), "{stderr}");
    assert_eq!(super::summary(&out)["deposed"], true);
    for n in 0..40 {
        assert!(
            super::effects_of(dir.path(), &format!("d{n}")) <= 1,
            "invoice d{n}"
        );
    }
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_sqlite() {
    let test = "consume::nats::poison_is_refused_once_beside_good_charges_on_sqlite";
    let Some(url) = nats_url(test) else { return };
    super::poison::poison_is_refused_once_beside_good_charges(
        &Stream::create(&url, "poison"),
        &idem_tests::TestStore::sqlite(),
    );
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_postgres() {
    let test = "consume::nats::poison_is_refused_once_beside_good_charges_on_postgres";
    let Some(url) = nats_url(test) else { return };
    let Some(store) =
        idem_tests::postgres_url(test).map(|url| idem_tests::TestStore::postgres(&url))
    else {
        return;
    };
    super::poison::poison_is_refused_once_beside_good_charges(
        &Stream::create(&url, "poison_pg"),
        &store,
    );
}

#[test]
fn the_run_flags_reach_the_records() {
    let test = "consume::nats::the_run_flags_reach_the_records";
    let Some(url) = nats_url(test) else { return };
    super::poison::the_run_flags_reach_the_records(&Stream::create(&url, "run"));
}

#[test]
fn stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held() {
    let test =
        "consume::nats::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held";
    let Some(url) = nats_url(test) else { return };
    // The crashed consumer's delivery comes back 5 s after its last
    // progress report: well after the next consumer is idle for 1 s.
    super::poison::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held(
        &Stream::create(&url, "crash"),
        &["--ack-wait", "5s"],
    );
}

#[test]
fn stopping_when_idle_beside_a_live_holder_exits_1_naming_what_it_leaves() {
    let test =
        "consume::nats::stopping_when_idle_beside_a_live_holder_exits_1_naming_what_it_leaves";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "holder");
    let dir = tempfile::tempdir().unwrap();
    stream.publish(&[super::charge("h1")]);
    // A live consumer holds h1 (its effect hangs, reported in progress).
    let mut holder = super::spawn_group(super::consume(
        &stream,
        dir.path(),
        "billing",
        &["--ack-wait", "2s"],
        &format!("{}; sleep 600", super::APPEND),
    ));
    super::wait_for_charges(dir.path(), 1, "h1 was never charged");
    let out = super::poison::output_within(
        super::consume(
            &stream,
            dir.path(),
            "billing",
            &["--stop-when-idle", "1s"],
            super::APPEND,
        ),
        "the idle consumer",
    );
    super::kill_group(&mut holder);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("leaving 1 messages"), "{stderr}");
    assert_eq!(super::summary(&out)["unacknowledged"], 1);
}

/// `--metrics`: while the consumer runs, its deliveries by end (every end
/// present from the start, at zero), the engine's begins and the review
/// queue, scraped as Prometheus would.
#[test]
fn a_consumer_serves_its_metrics_while_it_runs() {
    use std::io::{BufRead, BufReader};

    let test = "consume::nats::a_consumer_serves_its_metrics_while_it_runs";
    let Some(url) = nats_url(test) else { return };
    let stream = Stream::create(&url, "metrics");
    let dir = tempfile::tempdir().unwrap();
    stream.publish(&[
        super::charge("m1"),
        super::charge("m2"),
        super::charge("m1"),
    ]);
    let mut consumer = super::spawn_piped(super::consume(
        &stream,
        dir.path(),
        "billing",
        &["--metrics", "127.0.0.1:0", "--stop-when-idle", "30s"],
        super::APPEND,
    ));
    let stderr = consumer.stderr.take().unwrap();
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("idem: metrics at http://") {
                let _ = found.send(rest.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let addr = address
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the consumer says where its metrics are");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let text = loop {
        let reply = crate::serve::request(&addr, "GET", "/metrics", &[], b"");
        assert_eq!(reply.status, 200);
        let text = reply.text();
        if text.contains("idem_consume_deliveries_total{end=\"replayed\"} 1") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the three deliveries never showed:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = consumer.kill();
    let _ = consumer.wait();
    for expected in [
        "idem_consume_deliveries_total{end=\"executed\"} 2",
        "idem_consume_deliveries_total{end=\"refused\"} 0",
        "idem_begin_total{answer=\"execute\"} 2",
        "idem_review_waiting 0",
        "# HELP idem_consume_deliveries_total",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
}

#[test]
fn a_file_and_a_broker_give_each_operation_the_same_end() {
    let test = "consume::nats::a_file_and_a_broker_give_each_operation_the_same_end";
    let Some(url) = nats_url(test) else { return };
    super::same_fate::a_file_and_a_broker_give_each_operation_the_same_end(&Stream::create(
        &url, "same",
    ));
}
