//! The checks of `mod.rs` through Kafka: no broker is packaged for this
//! machine, so each test starts librdkafka's own mock cluster (three
//! brokers speaking the Kafka protocol on loopback ports, in this test's
//! process; consumer groups, rebalances and commits included) and
//! `idem consume` reaches it as it would a real cluster. A topic of four
//! partitions per test; a reader is a consumer group, so each sees every
//! message; refusals go to a dead-letter topic of the reader's. Every
//! reader's session timeout (`--ack-wait`) is 3 s: a consumer killed or
//! paused loses its partitions within seconds. And Kafka's own: a consumer
//! paused past its session while a second takes its partitions, then
//! resumed (PostHog#80897's rebalance, with a paused owner); and offsets
//! never committed ahead of what the store recorded.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use super::{APPEND, Broker, charge, consume, spawn_group, summary};

/// Every reader's session timeout.
const SESSION: &str = "3s";
const PARTITIONS: i32 = 4;
const WAIT: Duration = Duration::from_secs(10);

/// A mock cluster and one test's topic on it.
struct Cluster {
    /// The client that hosts the mock cluster (it lives as long as this
    /// client), and publishes.
    host: ThreadedProducer<DefaultProducerContext>,
    servers: String,
    topic: String,
}

impl Cluster {
    fn start(test: &str, readers: &[&str]) -> Cluster {
        let host: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("test.mock.num.brokers", "3")
            // The poison checks publish an operation past idem's size
            // limit, and past the client's default 1 MB.
            .set("message.max.bytes", "16000000")
            .create()
            .expect("a mock cluster");
        let mock = host
            .client()
            .mock_cluster()
            .expect("the client's mock cluster");
        // A real cluster's default (3 s before a new group's first
        // assignment) would only slow every consumer's start here.
        // SAFETY: the mock cluster's handle is valid while `host` lives.
        unsafe {
            let handle =
                rdkafka::bindings::rd_kafka_handle_mock_cluster(host.client().native_ptr());
            rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(handle, 0);
        }
        let topic = super::unique(test);
        mock.create_topic(&topic, PARTITIONS, 1).expect("the topic");
        mock.create_topic(&format!("{topic}.review"), 1, 1)
            .expect("the review topic");
        for reader in readers {
            mock.create_topic(&format!("{topic}.{reader}.dead"), 1, 1)
                .expect("a dead-letter topic");
        }
        let servers = mock.bootstrap_servers();
        drop(mock);
        Cluster {
            host,
            servers,
            topic,
        }
    }

    fn url(&self) -> String {
        format!("kafka://{}", self.servers)
    }

    fn dead_letter(&self, reader: &str) -> String {
        format!("{}.{reader}.dead", self.topic)
    }

    /// A consumer of no group's share: reads by assignment, commits
    /// nothing (or, with `group`, reads that group's committed offsets).
    fn client(&self, group: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer")
    }

    /// Each partition of `topic`'s (low, high) watermarks.
    fn watermarks(&self, client: &BaseConsumer, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
        (0..partitions)
            .map(|p| client.fetch_watermarks(topic, p, WAIT).expect("watermarks"))
            .collect()
    }

    /// `group`'s committed position in each partition of the topic (the
    /// low watermark when it committed nothing).
    fn committed(&self, group: &str) -> Vec<i64> {
        let client = self.client(group);
        let mut list = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            list.add_partition(&self.topic, p);
        }
        let committed = client.committed_offsets(list, WAIT).expect("committed");
        let marks = self.watermarks(&client, &self.topic, PARTITIONS);
        (0..PARTITIONS)
            .map(|p| {
                let at = committed.find_partition(&self.topic, p).map(|e| e.offset());
                match at {
                    Some(Offset::Offset(at)) => at,
                    _ => marks[p as usize].0,
                }
            })
            .collect()
    }

    /// Every message of `topic` (of `partitions`): its partition, offset,
    /// body and the value of each of `headers` (empty when absent).
    fn messages(
        &self,
        topic: &str,
        partitions: i32,
        headers: &[&str],
    ) -> Vec<(i32, i64, String, Vec<String>)> {
        let client = self.client(&super::unique("reader"));
        let marks = self.watermarks(&client, topic, partitions);
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        client.assign(&list).expect("assigned");
        let total: i64 = marks.iter().map(|(low, high)| high - low).sum();
        let mut out = Vec::new();
        let deadline = Instant::now() + WAIT;
        while (out.len() as i64) < total {
            assert!(
                Instant::now() < deadline,
                "{topic}: read {}/{total}",
                out.len()
            );
            let Some(read) = client.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = read.expect("a message");
            let body = String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string();
            let values = headers
                .iter()
                .map(|name| {
                    message
                        .headers()
                        .and_then(|h| h.iter().find(|header| header.key == *name))
                        .and_then(|header| header.value)
                        .map(|v| String::from_utf8_lossy(v).to_string())
                        .unwrap_or_default()
                })
                .collect();
            out.push((message.partition(), message.offset(), body, values));
        }
        out
    }
}

impl Broker for Cluster {
    fn flags(&self, reader: &str) -> Vec<String> {
        [
            "--from",
            &self.url(),
            "--topic",
            &self.topic,
            "--consumer",
            reader,
            "--ack-wait",
            SESSION,
            "--dead-letter",
            &self.dead_letter(reader),
        ]
        .map(str::to_string)
        .to_vec()
    }

    fn publish(&self, bodies: &[String]) {
        let client = self.client("publisher");
        let before: i64 = self
            .watermarks(&client, &self.topic, PARTITIONS)
            .iter()
            .map(|(_, high)| high)
            .sum();
        for body in bodies {
            // Keyed by the invoice, as a publisher keys by the entity: a
            // publisher's copies, and a second request for the same
            // invoice, land on one partition, in the order published (the
            // checks count on that order); the rest spread over all four.
            let key = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|op| op["fields"]["invoice_id"].as_str().map(str::to_string));
            let mut record = BaseRecord::<String, _>::to(&self.topic).payload(body);
            if let Some(key) = &key {
                record = record.key(key);
            }
            self.host.send(record).map_err(|(e, _)| e).expect("queued");
        }
        self.host.flush(WAIT).expect("published");
        let after: i64 = self
            .watermarks(&client, &self.topic, PARTITIONS)
            .iter()
            .map(|(_, high)| high)
            .sum();
        assert_eq!(after - before, bodies.len() as i64, "every message stored");
    }

    fn unsettled(&self, reader: &str) -> u64 {
        let client = self.client(reader);
        let marks = self.watermarks(&client, &self.topic, PARTITIONS);
        self.committed(reader)
            .iter()
            .zip(marks)
            .map(|(at, (_, high))| (high - at).max(0) as u64)
            .sum()
    }

    fn redeliver_soon(&self) -> Vec<String> {
        // Every reader's session is short already.
        Vec::new()
    }

    fn review_to(&self) -> String {
        format!("{}.review", self.topic)
    }

    fn forwarded(&self, headers: &[&str]) -> Vec<(String, Vec<String>)> {
        self.messages(&self.review_to(), 1, headers)
            .into_iter()
            .map(|(_, _, body, values)| (body, values))
            .collect()
    }

    fn refused(&self, reader: &str) -> Vec<String> {
        self.messages(&self.dead_letter(reader), 1, &[])
            .into_iter()
            .map(|(_, _, body, _)| body)
            .collect()
    }
}

#[test]
fn messages_published_and_delivered_again_run_each_effect_once() {
    super::messages_published_and_delivered_again_run_each_effect_once(&Cluster::start(
        "dup",
        &["billing", "again"],
    ));
}

#[test]
fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review() {
    super::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review(
        &Cluster::start("kill", &["billing"]),
    );
}

#[test]
fn two_consumers_one_killed_mid_run_the_other_takes_over() {
    super::two_consumers_one_killed_mid_run_the_other_takes_over(&Cluster::start(
        "two",
        &["billing"],
    ));
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_sqlite() {
    super::poison::poison_is_refused_once_beside_good_charges(
        &Cluster::start("poison", &["billing"]),
        &idem_tests::TestStore::sqlite(),
    );
}

#[test]
fn the_run_flags_reach_the_records() {
    super::poison::the_run_flags_reach_the_records(&Cluster::start("run", &["billing"]));
}

#[test]
fn stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held() {
    super::poison::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held(
        &Cluster::start("crash", &["billing"]),
        &[],
    );
}

#[test]
fn a_file_and_a_broker_give_each_operation_the_same_end() {
    super::same_fate::a_file_and_a_broker_give_each_operation_the_same_end(&Cluster::start(
        "same",
        &["same"],
    ));
}

/// The seed's paused holder, on Kafka: a consumer stopped (SIGSTOP) in the
/// middle of an effect, past its session, so the group gives its
/// partitions to a second consumer, which reads the message again from the
/// committed position; then resumed. Kafka lets the resumed consumer act;
/// the store does not let it record: its claim lapsed and went to review,
/// its late end is refused. Every effect happens once and every message
/// ends settled.
#[test]
fn a_consumer_paused_past_its_session_is_fenced_when_it_resumes() {
    let cluster = Cluster::start("paused", &["billing"]);
    super::paused::a_consumer_paused_past_the_brokers_threshold_is_fenced_when_it_resumes(&cluster);
}

/// The invoices whose records `idem inspect` shows ended (completed).
fn completed(dir: &Path) -> Vec<String> {
    super::listed(dir, "inspect")
        .iter()
        .filter(|r| r["state"] == "completed")
        .map(|r| {
            r["operation"]["fields"]["invoice_id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Kafka commits a position, not a message: a consumer killed in the
/// middle of a run has committed, in each partition, no position past a
/// message whose end the store has not recorded (a crash loses no
/// message), and a second consumer finishes the rest.
#[test]
fn offsets_are_never_committed_ahead_of_the_records() {
    const CHARGES: usize = 400;
    let cluster = Cluster::start("ahead", &["billing"]);
    let dir = tempfile::tempdir().unwrap();
    cluster.publish(
        &(0..CHARGES)
            .map(|i| charge(&format!("o{i}")))
            .collect::<Vec<_>>(),
    );
    let mut first = spawn_group(consume(
        &cluster,
        dir.path(),
        "billing",
        &["--lease", "5s", "--concurrency", "4"],
        APPEND,
    ));
    super::wait_for_charges(dir.path(), CHARGES / 3, "the consumer made no progress");
    super::kill_group(&mut first);
    let committed = cluster.committed("billing");
    let done = completed(dir.path());
    let messages = cluster.messages(&cluster.topic, PARTITIONS, &[]);
    let mut below: HashMap<i32, usize> = HashMap::new();
    for (partition, offset, body, _) in &messages {
        if *offset < committed[*partition as usize] {
            *below.entry(*partition).or_default() += 1;
            let operation: serde_json::Value = serde_json::from_str(body).unwrap();
            let invoice = operation["fields"]["invoice_id"].as_str().unwrap();
            assert!(
                done.iter().any(|d| d == invoice),
                "partition {partition} committed past offset {offset} ({invoice}), not recorded"
            );
        }
    }
    assert!(
        !below.is_empty(),
        "the killed consumer committed something: {committed:?}"
    );
    let out = consume(
        &cluster,
        dir.path(),
        "billing",
        &[
            "--lease",
            "1s",
            "--concurrency",
            "4",
            "--stop-when-idle",
            "5s",
        ],
        APPEND,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    super::each_charge_once_or_in_review(dir.path(), "o", CHARGES, 4, &stderr);
    assert_eq!(cluster.unsettled("billing"), 0, "every message settled");
}

/// A refused message whose copy the cluster refuses for good (here: not
/// allowed to write the dead-letter topic) is not put off for ever: the
/// position moves past it, and the warning says it was not copied.
#[test]
fn a_refusal_the_dead_letter_topic_will_not_take_is_passed_all_the_same() {
    let cluster = Cluster::start("nodead", &["billing"]);
    let mock = cluster.host.client().mock_cluster().unwrap();
    mock.topic_error(
        &cluster.dead_letter("billing"),
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    cluster.publish(&[charge("n1"), "not json".to_string(), charge("n2")]);
    let out = consume(
        &cluster,
        dir.path(),
        "billing",
        &["--stop-when-idle", "2s"],
        APPEND,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let tally = summary(&out);
    assert_eq!(
        (tally["executed"].as_u64(), tally["refused"].as_u64()),
        (Some(2), Some(1)),
        "{tally}; {stderr}"
    );
    assert!(stderr.contains("not copied"), "{stderr}");
    assert_eq!(cluster.unsettled("billing"), 0, "every message passed");
}
