//! Kafka as a [`MessageSource`]: a consumer group's share of one topic, on
//! `rdkafka` (librdkafka, the ecosystem's client).
//!
//! Kafka's exactly-once covers consume → produce inside Kafka; an effect
//! outside it runs twice when a rebalance moves a partition between a
//! consumer's effect and its offset commit (PostHog#80897). Here the store
//! decides instead: the new owner reads the message again from the committed
//! position, finds the record, and replays it, waits for it, or (a claim
//! lapsed under a paused owner) does what the policy says, while the old
//! owner's late end is fenced.
//!
//! Kafka acknowledges by position, not by message (`offsets.rs`): a
//! partition's committed position is the lowest offset given out and not
//! settled, so it is never ahead of what the store has recorded; a
//! message put off holds its partition's position back and is given out
//! again from memory when due (Kafka has no delayed redelivery). Each
//! assignment of a partition is numbered: once it is revoked, nothing of
//! the old assignment is committed, put off or copied from here, and what
//! was fetched of it and not given out is dropped (its new owner reads it
//! from the committed position).
//!
//! One task (`poller.rs`) polls the consumer all the time, so that the group
//! hears from it while every slot runs a long effect (librdkafka leaves the
//! group of a consumer not polled within `max.poll.interval.ms`); what it
//! reads ahead is bounded by pausing the assigned partitions. It also
//! commits the positions every [`COMMIT_EVERY`]. A refused message is
//! copied to a dead-letter topic when one is given, then settled.

mod delivery;
mod offsets;
mod poller;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::FutureProducer;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message};
use tokio::sync::mpsc;

use super::{Delivery, MessageSource, SourceError};
use delivery::KafkaDelivery;
use offsets::{Offsets, Partition};

/// How many messages are read ahead of the consumer's asking before the
/// assigned partitions are paused. Not a small number: librdkafka fetches
/// again only a while after a partition is resumed (measured here: 121
/// messages took 5.2 s with a bound of 8, in bursts every half second,
/// 1.3 s without one); the bound is there for a consumer whose slots are
/// all held by long effects, and librdkafka's own queue holds as much.
const READ_AHEAD: usize = 1024;

/// How often the positions settled are committed.
const COMMIT_EVERY: Duration = Duration::from_millis(200);

/// How long a call that waits on the cluster (a commit on leaving, the
/// lag) waits.
const CLUSTER_WAIT: Duration = Duration::from_secs(5);

/// A message put off, given out again when due.
struct PutOff {
    due: Instant,
    partition: Partition,
    serial: u64,
    message: OwnedMessage,
    delivered: u64,
}

/// What the consumer's context, the poller and the deliveries share.
///
/// Locks, when both are taken: `put_off`, then `offsets`.
struct Shared {
    offsets: Mutex<Offsets>,
    put_off: Mutex<VecDeque<PutOff>>,
    /// Since when, and why, no broker of the cluster answers (librdkafka
    /// says so through its error callback, and keeps trying meanwhile).
    down: Mutex<Option<(Instant, String)>>,
    producer: FutureProducer,
    dead_letter: Option<String>,
    /// The consumer is closing: nothing more is fetched (its partitions
    /// stay paused) while the effects under way finish and are committed.
    closing: AtomicBool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Maps and markers, never left half-changed.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn offsets(&self) -> MutexGuard<'_, Offsets> {
        locked(&self.offsets)
    }

    fn put_off(&self) -> MutexGuard<'_, VecDeque<PutOff>> {
        locked(&self.put_off)
    }

    fn down(&self) -> MutexGuard<'_, Option<(Instant, String)>> {
        locked(&self.down)
    }
}

/// The consumer's context: librdkafka calls it while the consumer is
/// polled, on the poller's task.
struct Context {
    shared: Arc<Shared>,
}

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        let unreachable = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure)
        );
        if unreachable {
            let mut down = self.shared.down();
            if down.is_none() {
                *down = Some((Instant::now(), format!("{error}: {reason}")));
            }
        } else {
            tracing::warn!(%error, reason, "kafka");
        }
    }
}

impl ConsumerContext for Context {
    /// A partition revoked commits what is settled of it first (its new
    /// owner starts there), and nothing of it is settled here after.
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        let mut commit = TopicPartitionList::new();
        {
            let mut offsets = self.shared.offsets();
            for element in revoked.elements() {
                let partition = (element.topic().to_string(), element.partition());
                if let Some(position) = offsets.revoke(&partition) {
                    let _ = commit.add_partition_offset(
                        &partition.0,
                        partition.1,
                        Offset::Offset(position),
                    );
                }
            }
        }
        {
            // Locked in the order every other user locks them.
            let mut put_off = self.shared.put_off();
            let offsets = self.shared.offsets();
            put_off.retain(|p| offsets.holds(&p.partition, p.serial));
        }
        // A lost assignment (the session lapsed: the group moved on
        // without this consumer) commits nothing; Kafka would refuse it.
        if commit.count() > 0
            && !consumer.assignment_lost()
            && let Err(e) = blocking(|| consumer.commit(&commit, CommitMode::Sync))
        {
            // Its new owner reads from the last position committed: what
            // was settled since is answered again from the store.
            tracing::warn!(error = %e, "committing the positions of revoked partitions");
        }
    }

    /// A partition assigned is read from now: librdkafka keeps an
    /// application's pause across assignments, so one paused before it
    /// was revoked (the poller over its bound) would come back paused and
    /// never be read. Paused instead when the consumer is closing; the
    /// poller pauses it again if it is over its bound.
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            {
                let mut offsets = self.shared.offsets();
                for element in assigned.elements() {
                    offsets.assign((element.topic().to_string(), element.partition()));
                }
            }
            let _ = match self.shared.closing.load(Ordering::Relaxed) {
                true => consumer.pause(assigned),
                false => consumer.resume(assigned),
            };
        }
    }
}

/// Runs `f`, which waits on the cluster, letting the runtime's other tasks
/// move to another worker meanwhile (librdkafka calls the rebalance
/// callbacks inside a poll, on the poller's task).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

type Consumed = StreamConsumer<Context>;

/// A message the poller read, under the serial its partition was held by.
struct Inbound {
    partition: Partition,
    serial: u64,
    message: OwnedMessage,
}

/// A consumer of one topic within a consumer group.
pub struct KafkaSource {
    shared: Arc<Shared>,
    consumer: Arc<Consumed>,
    inbound: mpsc::Receiver<Inbound>,
    poller: Option<poller::Poller>,
    topic: String,
    servers: String,
    group: String,
    session_timeout: Duration,
    described: String,
}

impl KafkaSource {
    /// Joins consumer group `group` on the cluster at `url`
    /// (`kafka://HOST:PORT[,HOST:PORT…]`) and reads `topic`, from its start
    /// when the group has committed nothing. A consumer that stops being
    /// heard for `session_timeout` (crashed, paused) loses its partitions
    /// to the others. Refused messages are copied to `dead_letter` (a
    /// topic) when given.
    pub async fn connect(
        url: &str,
        topic: &str,
        group: &str,
        session_timeout: Duration,
        dead_letter: Option<&str>,
    ) -> Result<Self, SourceError> {
        let servers = bootstrap_servers(url)?;
        let fail = |what: &str, e: KafkaError| SourceError::new(format!("{what} {url}"), e);
        let me = idem_store::Holder::this_process();
        let client_id = format!("idem-{}-{}", me.host, me.pid);
        let session_ms = session_timeout.as_millis().max(1) as u64;
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("client.id", &client_id)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "10000")
            // Whatever was read may be copied: the cluster, not this
            // client, says what a topic takes (librdkafka's ceiling).
            .set("message.max.bytes", "1000000000")
            .create()
            .map_err(|e| fail("connecting a producer to", e))?;
        let shared = Arc::new(Shared {
            offsets: Mutex::new(Offsets::default()),
            put_off: Mutex::new(VecDeque::new()),
            down: Mutex::new(None),
            producer,
            dead_letter: dead_letter.map(str::to_string),
            closing: AtomicBool::new(false),
        });
        let consumer: Consumed = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", group)
            .set("client.id", &client_id)
            // Positions are committed here, once settled; never by the
            // client on its own.
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", session_ms.to_string())
            .set("heartbeat.interval.ms", (session_ms / 3).max(1).to_string())
            // The poller polls all the time; the interval only has to be
            // at least the session's, as librdkafka requires.
            .set("max.poll.interval.ms", session_ms.max(300_000).to_string())
            .create_with_context(Context {
                shared: shared.clone(),
            })
            .map_err(|e| fail("connecting a consumer to", e))?;
        consumer
            .subscribe(&[topic])
            .map_err(|e| fail(&format!("subscribing to {topic} at"), e))?;
        let consumer = Arc::new(consumer);
        let (poller, inbound) = poller::Poller::start(consumer.clone(), shared.clone(), READ_AHEAD);
        Ok(KafkaSource {
            shared,
            consumer,
            inbound,
            poller: Some(poller),
            topic: topic.to_string(),
            servers: servers.clone(),
            group: group.to_string(),
            session_timeout,
            described: format!("{url} topic {topic} group {group}"),
        })
    }

    /// Whether the cluster answers again after it was found unreachable:
    /// asked for the topic's metadata.
    async fn cluster_back(&self) -> Result<(), SourceError> {
        let consumer = self.consumer.clone();
        let topic = self.topic.clone();
        let asked = tokio::task::spawn_blocking(move || {
            consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(1))
                .map(drop)
        })
        .await;
        match asked {
            Ok(Ok(())) => {
                *self.shared.down() = None;
                Ok(())
            }
            _ => {
                let why = self.shared.down().as_ref().map(|(_, why)| why.clone());
                Err(SourceError::new(
                    format!("fetching from {}", self.described),
                    why.unwrap_or_else(|| "no broker answers".into()),
                ))
            }
        }
    }

    /// Put-off messages whose delay has passed, of partitions still held
    /// under the same assignment, up to `max`.
    fn due(&self, max: usize, out: &mut Vec<Box<dyn Delivery>>) {
        let now = Instant::now();
        let mut put_off = self.shared.put_off();
        let offsets = self.shared.offsets();
        let mut kept = VecDeque::with_capacity(put_off.len());
        while let Some(p) = put_off.pop_front() {
            if !offsets.holds(&p.partition, p.serial) {
                continue;
            }
            if p.due <= now && out.len() < max {
                out.push(Box::new(KafkaDelivery::new(
                    self.shared.clone(),
                    p.partition,
                    p.serial,
                    p.message,
                    p.delivered + 1,
                )));
            } else {
                kept.push_back(p);
            }
        }
        *put_off = kept;
    }
}

#[async_trait]
impl MessageSource for KafkaSource {
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        let mut out = Vec::new();
        self.due(max, &mut out);
        while out.len() < max {
            let next = if out.is_empty() {
                match tokio::time::timeout(wait, self.inbound.recv()).await {
                    Ok(Some(inbound)) => Some(inbound),
                    Ok(None) => {
                        return Err(SourceError::new(
                            format!("fetching from {}", self.described),
                            "the consumer stopped polling",
                        ));
                    }
                    Err(_) => None,
                }
            } else {
                self.inbound.try_recv().ok()
            };
            let Some(inbound) = next else { break };
            let offset = inbound.message.offset();
            if self
                .shared
                .offsets()
                .give_out(&inbound.partition, inbound.serial, offset)
            {
                out.push(Box::new(KafkaDelivery::new(
                    self.shared.clone(),
                    inbound.partition,
                    inbound.serial,
                    inbound.message,
                    1,
                )));
            }
        }
        if out.is_empty() && self.shared.down().is_some() {
            self.cluster_back().await?;
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    /// A message put off from a partition later revoked is dropped, not
    /// waited for: its new owner reads it again.
    fn held(&self) -> usize {
        // Locked in the order every other user locks them.
        let put_off = self.shared.put_off();
        let offsets = self.shared.offsets();
        put_off
            .iter()
            .filter(|p| offsets.holds(&p.partition, p.serial))
            .count()
    }

    /// Stops fetching: the partitions are paused, and the poller goes on
    /// polling (the group still hears from this consumer, a rebalance
    /// meanwhile is answered) and committing while the effects under way
    /// finish; what is settled so far is committed now, the rest when the
    /// consumer closes (its partitions revoked, in `pre_rebalance`).
    async fn give_back(&mut self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        if let Ok(assigned) = self.consumer.assignment() {
            let _ = self.consumer.pause(&assigned);
        }
        let commit = positions(&self.shared.offsets().to_commit());
        if commit.count() > 0 {
            let consumer = self.consumer.clone();
            let committed =
                tokio::task::spawn_blocking(move || consumer.commit(&commit, CommitMode::Sync))
                    .await;
            if let Ok(Err(e)) = committed {
                tracing::warn!(error = %e, "committing the positions settled, on leaving");
            }
        }
    }

    /// The group's messages not settled in the topic: past each
    /// partition's committed position (any member's, a crashed one's until
    /// its partitions move) up to its end.
    async fn unacknowledged(&mut self) -> Result<Option<u64>, SourceError> {
        let (servers, group, topic) =
            (self.servers.clone(), self.group.clone(), self.topic.clone());
        let lag = tokio::task::spawn_blocking(move || lag(&servers, &group, &topic))
            .await
            .map_err(|e| SourceError::new("reading the group's lag", e))?;
        lag.map(Some).map_err(|e| {
            SourceError::new(format!("reading the group's lag on {}", self.described), e)
        })
    }

    /// How long the partitions of a member that crashed take to move: its
    /// session's timeout, then the group's rebalance.
    fn redelivery_wait(&self) -> Duration {
        self.session_timeout * 2 + Duration::from_secs(3)
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        if let Some(poller) = self.poller.take() {
            poller.abort();
        }
    }
}

/// The list librdkafka commits, of `positions`.
fn positions(positions: &[(Partition, i64)]) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for ((topic, partition), position) in positions {
        let _ = list.add_partition_offset(topic, *partition, Offset::Offset(*position));
    }
    list
}

/// The group's messages of `topic` past its committed positions, read by
/// a client of its own that joins nothing (measured: asked of the group's
/// member, the committed positions timed out, 5 s each, on a consumer with
/// nothing to read).
fn lag(servers: &str, group: &str, topic: &str) -> KafkaResult<u64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), CLUSTER_WAIT)?;
    let mut list = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            list.add_partition(t.name(), p.id());
        }
    }
    let committed = consumer.committed_offsets(list, CLUSTER_WAIT)?;
    let mut lag = 0u64;
    for element in committed.elements() {
        let (low, high) = consumer.fetch_watermarks(topic, element.partition(), CLUSTER_WAIT)?;
        let from = match element.offset() {
            Offset::Offset(at) => at.max(low),
            _ => low,
        };
        lag += (high - from).max(0) as u64;
    }
    Ok(lag)
}

/// `bootstrap.servers` of a `kafka://HOST:PORT[,HOST:PORT…]` URL; a URL
/// with credentials or a path is refused (SASL and TLS are not built in).
fn bootstrap_servers(url: &str) -> Result<String, SourceError> {
    let refuse = |why: &str| SourceError::new(format!("reading {url}"), why);
    let Some(rest) = url.strip_prefix("kafka://") else {
        return Err(refuse("expected kafka://HOST:PORT[,HOST:PORT…]"));
    };
    let servers = rest.trim_end_matches('/');
    if servers.contains('@') {
        return Err(refuse(
            "credentials in the URL: SASL is not built into idem's Kafka client",
        ));
    }
    if servers.is_empty() || servers.contains('/') || servers.contains('?') {
        return Err(refuse("expected kafka://HOST:PORT[,HOST:PORT…]"));
    }
    Ok(servers.to_string())
}

#[cfg(test)]
mod tests {
    use super::bootstrap_servers;

    #[test]
    fn a_url_names_the_bootstrap_servers() {
        assert_eq!(
            bootstrap_servers("kafka://10.0.0.1:9092,10.0.0.2:9092").unwrap(),
            "10.0.0.1:9092,10.0.0.2:9092"
        );
        assert_eq!(
            bootstrap_servers("kafka://127.0.0.1:9092/").unwrap(),
            "127.0.0.1:9092"
        );
        for refused in [
            "kafka://user:pass@10.0.0.1:9092",
            "kafka://",
            "kafka://host:9092/topic",
            "nats://host:4222",
        ] {
            assert!(bootstrap_servers(refused).is_err(), "{refused}");
        }
    }
}
