//! The checks of `mod.rs` through Redis Streams: a stream of its own per
//! test; a reader is a consumer group (created here at the start of the
//! stream, so each sees every entry), its refusals copied to a dead-letter
//! stream of its own. The claim threshold (`--ack-wait`) is 3 s for every
//! reader: a consumer killed or paused has its entries taken over by
//! another within seconds. And the scenario Redis users meet
//! (redis/redis#13956): a consumer paused past the claim threshold while a
//! peer takes its entries, then resumed.

use std::time::{Duration, Instant};

use idem_tests::redis_url;
use redis::streams::{StreamInfoGroupsReply, StreamRangeReply};

use super::{APPEND, Broker, charge, consume, effects_of, spawn_group, summary};

/// The claim threshold every reader here is given.
const CLAIM_IDLE: &str = "3s";

struct Stream {
    url: String,
    name: String,
    client: redis::Client,
    /// Every reader's claim threshold.
    claim_idle: &'static str,
}

impl Stream {
    fn create(url: &str, test: &str, readers: &[&str]) -> Stream {
        Stream::with_claim_idle(url, test, readers, CLAIM_IDLE)
    }

    fn with_claim_idle(
        url: &str,
        test: &str,
        readers: &[&str],
        claim_idle: &'static str,
    ) -> Stream {
        let client = redis::Client::open(url).expect("a Redis URL");
        let name = super::unique(test);
        let stream = Stream {
            url: url.to_string(),
            name,
            client,
            claim_idle,
        };
        for reader in readers {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream.name)
                .arg(*reader)
                .arg("0")
                .arg("MKSTREAM")
                .query(&mut stream.connection())
                .expect("create the group");
        }
        stream
    }

    fn connection(&self) -> redis::Connection {
        self.client.get_connection().expect("Redis is reachable")
    }

    fn dead_letter(&self, reader: &str) -> String {
        format!("{}.{reader}.dead", self.name)
    }

    /// Every entry of `stream`: its `operation` field and the value of
    /// each of `fields` (empty when absent).
    fn entries(&self, stream: &str, fields: &[&str]) -> Vec<(String, Vec<String>)> {
        let range: StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream)
            .arg("-")
            .arg("+")
            .query(&mut self.connection())
            .expect("read the stream");
        range
            .ids
            .iter()
            .map(|entry| {
                let field = |name: &str| entry.get::<String>(name).unwrap_or_default();
                (
                    field("operation"),
                    fields.iter().map(|name| field(name)).collect(),
                )
            })
            .collect()
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
            "--ack-wait",
            self.claim_idle,
            "--dead-letter",
            &self.dead_letter(reader),
        ]
        .map(str::to_string)
        .to_vec()
    }

    fn publish(&self, bodies: &[String]) {
        let mut connection = self.connection();
        for body in bodies {
            let _: String = redis::cmd("XADD")
                .arg(&self.name)
                .arg("*")
                .arg("operation")
                .arg(body)
                .query(&mut connection)
                .expect("publish");
        }
    }

    fn unsettled(&self, reader: &str) -> u64 {
        let groups: StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.name)
            .query(&mut self.connection())
            .expect("the stream exists");
        let group = groups
            .groups
            .into_iter()
            .find(|g| g.name == reader)
            .expect("the reader's group exists");
        (group.pending + group.lag.expect("Redis 7 counts the lag")) as u64
    }

    fn redeliver_soon(&self) -> Vec<String> {
        // Every reader's claim threshold is short already.
        Vec::new()
    }

    fn review_to(&self) -> String {
        format!("{}.review", self.name)
    }

    fn forwarded(&self, headers: &[&str]) -> Vec<(String, Vec<String>)> {
        self.entries(&self.review_to(), headers)
    }

    fn refused(&self, reader: &str) -> Vec<String> {
        self.entries(&self.dead_letter(reader), &[])
            .into_iter()
            .map(|(body, _)| body)
            .collect()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(mut connection) = self.client.get_connection() {
            let mut del = redis::cmd("DEL");
            del.arg(&self.name).arg(self.review_to());
            for reader in ["billing", "again", "same"] {
                del.arg(self.dead_letter(reader));
            }
            let _: Result<u64, _> = del.query(&mut connection);
        }
    }
}

#[test]
fn messages_published_and_delivered_again_run_each_effect_once() {
    let test = "consume::redis::messages_published_and_delivered_again_run_each_effect_once";
    let Some(url) = redis_url(test) else { return };
    super::messages_published_and_delivered_again_run_each_effect_once(&Stream::create(
        &url,
        "dup",
        &["billing", "again"],
    ));
}

#[test]
fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review() {
    let test = "consume::redis::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review";
    let Some(url) = redis_url(test) else { return };
    super::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review(
        &Stream::create(&url, "kill", &["billing"]),
    );
}

#[test]
fn two_consumers_one_killed_mid_run_the_other_takes_over() {
    let test = "consume::redis::two_consumers_one_killed_mid_run_the_other_takes_over";
    let Some(url) = redis_url(test) else { return };
    super::two_consumers_one_killed_mid_run_the_other_takes_over(&Stream::create(
        &url,
        "two",
        &["billing"],
    ));
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_sqlite() {
    let test = "consume::redis::poison_is_refused_once_beside_good_charges_on_sqlite";
    let Some(url) = redis_url(test) else { return };
    super::poison::poison_is_refused_once_beside_good_charges(
        &Stream::create(&url, "poison", &["billing"]),
        &idem_tests::TestStore::sqlite(),
    );
}

#[test]
fn the_run_flags_reach_the_records() {
    let test = "consume::redis::the_run_flags_reach_the_records";
    let Some(url) = redis_url(test) else { return };
    super::poison::the_run_flags_reach_the_records(&Stream::create(&url, "run", &["billing"]));
}

#[test]
fn stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held() {
    let test =
        "consume::redis::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held";
    let Some(url) = redis_url(test) else { return };
    super::poison::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held(
        &Stream::create(&url, "crash", &["billing"]),
        &[],
    );
}

#[test]
fn a_file_and_a_broker_give_each_operation_the_same_end() {
    let test = "consume::redis::a_file_and_a_broker_give_each_operation_the_same_end";
    let Some(url) = redis_url(test) else { return };
    super::same_fate::a_file_and_a_broker_give_each_operation_the_same_end(&Stream::create(
        &url,
        "same",
        &["same"],
    ));
}

/// The seed's paused holder, on Redis: a consumer stopped (SIGSTOP) in the
/// middle of an effect, past the claim threshold, while a second consumer
/// of the group takes its entries over with `XAUTOCLAIM`; then resumed.
/// Redis lets the resumed consumer act and acknowledge; the store does not
/// let it record: its claim lapsed and went to review, its late end is
/// refused. Every effect happens once and every entry ends settled.
#[test]
fn a_consumer_paused_past_the_claim_threshold_is_fenced_when_it_resumes() {
    let test =
        "consume::redis::a_consumer_paused_past_the_claim_threshold_is_fenced_when_it_resumes";
    let Some(url) = redis_url(test) else { return };
    let stream = Stream::create(&url, "paused", &["billing"]);
    super::paused::a_consumer_paused_past_the_brokers_threshold_is_fenced_when_it_resumes(&stream);
}

/// An effect longer than the claim threshold keeps its entry: reset while
/// it runs, it is never taken over by a second consumer of the group.
#[test]
fn an_effect_longer_than_the_claim_threshold_is_not_taken_over() {
    let test = "consume::redis::an_effect_longer_than_the_claim_threshold_is_not_taken_over";
    let Some(url) = redis_url(test) else { return };
    // A 6 s threshold, reset every 2 s: room for a loaded machine's
    // stalls, and still well under the effect's 20 s.
    let stream = Stream::with_claim_idle(&url, "long", &["billing"], "6s");
    let dir = tempfile::tempdir().unwrap();
    stream.publish(&[charge("long")]);
    let slow = r#"op=$(cat); touch "$LEDGER.started"; sleep 20; printf '%s\n' "$op" >> "$LEDGER""#;
    let first = spawn_group(consume(
        &stream,
        dir.path(),
        "billing",
        &["--stop-when-idle", "2s"],
        slow,
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("ledger.started").exists() {
        assert!(Instant::now() < deadline, "the effect never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second consumer of the group, for longer than the threshold while
    // the effect runs: it gets nothing.
    let second = consume(
        &stream,
        dir.path(),
        "billing",
        &["--stop-when-idle", "4s"],
        APPEND,
    )
    .output()
    .unwrap();
    // Taken over, it would have found the first's claim live: in progress.
    let tally = summary(&second);
    assert_eq!(
        (tally["executed"].as_u64(), tally["in_progress"].as_u64()),
        (Some(0), Some(0)),
        "the second consumer got nothing: {tally}"
    );
    let mut first = first;
    let status = first.wait().unwrap();
    assert!(status.success(), "the first consumer finished");
    assert_eq!(effects_of(dir.path(), "long"), 1);
    assert_eq!(stream.unsettled("billing"), 0);
}

/// Redis acknowledges for anyone: a consumer deposed while paused, whose
/// entry another consumer took over and still holds, must not acknowledge
/// it (the holder may have put it off after a retryable failure: it would
/// never be delivered again), nor keep it alive, nor copy it.
#[test]
fn a_deposed_consumer_leaves_the_takers_entry_alone() {
    use idem::broker::MessageSource;
    use idem::broker::redis::{DEFAULT_FIELD, RedisStreamSource};
    let test = "consume::redis::a_deposed_consumer_leaves_the_takers_entry_alone";
    let Some(url) = redis_url(test) else { return };
    let stream = Stream::create(&url, "deposed", &["billing"]);
    stream.publish(&[charge("d1")]);
    let pending = || stream.unsettled("billing");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let threshold = Duration::from_millis(300);
        let connect = || {
            RedisStreamSource::connect(
                &url,
                &stream.name,
                "billing",
                DEFAULT_FIELD,
                threshold,
                None,
            )
        };
        let (mut first, mut second) = (connect().await.unwrap(), connect().await.unwrap());
        let wait = Duration::from_secs(1);
        let held = first.fetch(1, wait).await.unwrap();
        assert_eq!(held.len(), 1, "the first consumer reads the entry");
        // Past the threshold, the second takes it over (no reset came).
        tokio::time::sleep(threshold * 2).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        let taken = loop {
            let got = second.fetch(1, Duration::from_millis(100)).await.unwrap();
            if !got.is_empty() {
                break got;
            }
            assert!(Instant::now() < deadline, "never taken over");
        };
        assert_eq!(taken[0].body(), held[0].body());
        // The first, resumed: refused everything, and the entry stays.
        assert!(held[0].in_progress().await.is_err(), "not kept alive");
        assert!(held[0].ack().await.is_err(), "not acknowledged");
        assert!(held[0].term().await.is_err(), "not terminated");
        assert_eq!(pending(), 1, "still pending, with its taker");
        taken[0].ack().await.expect("the taker acknowledges");
        assert_eq!(pending(), 0);
    });
}
