//! Redis Streams as a [`MessageSource`]: a consumer group read with
//! `XREADGROUP`, on the `redis` crate.
//!
//! A consumer group gives each entry to one consumer and keeps it pending
//! until `XACK`. An entry pending longer than the group's claim threshold
//! (`--ack-wait`) is taken over by whichever consumer asks (`XAUTOCLAIM`):
//! exactly a lock's lease expiring under a paused holder, and `XACK`
//! checks nobody's ownership, so the first consumer, resuming, acts and
//! acknowledges too (redis/redis#13956; dapr components-contrib #4599).
//! Here the store decides instead: the taker's claim fences the paused
//! consumer's late end, and the policy decides what the taker does with a
//! claim still live or lapsed. Two things keep Redis from making it worse:
//! an entry whose effect runs is kept from being claimed away by resetting
//! its idle time while it is still this consumer's (`XCLAIM … JUSTID` in
//! one script, never taking it from another consumer); and this consumer
//! itself takes over abandoned entries, so a crashed peer's are run.
//!
//! Each process reads as a consumer of its own name (host and process id)
//! within the group; the group is the consumer name given (`--consumer`),
//! created at the start of the stream if it does not exist. An entry's
//! operation is one of its fields (`operation` unless told otherwise); an
//! entry without it is refused like any other poison. A refused entry is
//! copied to a dead-letter stream when one is given, then acknowledged.
//! Redis has no delayed redelivery: an entry put off stays pending here
//! and is read again (`XCLAIM`) once its delay has passed, unless another
//! consumer took it meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_core::text::escaped;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::streams::{
    StreamAutoClaimReply, StreamClaimReply, StreamId, StreamInfoGroupsReply, StreamReadReply,
};
use redis::{Script, Value};

use super::{Delivery, MessageSource, SourceError, without_password};

/// The field an entry's operation is in, unless told otherwise.
pub const DEFAULT_FIELD: &str = "operation";

/// Resets an entry's idle time only while it is still `ARGV[3]`'s: a
/// consumer whose entry was taken over while it was paused must not take
/// it back (it keeps running its effect; the store fences its end).
const KEEP_IF_MINE: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if p[1] == nil or p[1][2] ~= ARGV[3] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
";

/// Where one consumer reads: what its deliveries need to settle.
struct Place {
    /// Acknowledgements, claims and copies; reads block on a connection of
    /// their own, which would hold these up behind them.
    control: ConnectionManager,
    stream: String,
    group: String,
    consumer: String,
    field: String,
    dead_letter: Option<String>,
    keep_if_mine: Script,
    /// Entries put off, still pending here: when each is due, and for how
    /// long it was put off.
    put_off: Mutex<HashMap<String, (Instant, Duration)>>,
}

/// A consumer of one Redis stream's consumer group.
pub struct RedisStreamSource {
    place: Arc<Place>,
    reader: ConnectionManager,
    claim_idle: Duration,
    /// Where the next `XAUTOCLAIM` scan of the pending entries starts, and
    /// when it is due.
    claim_cursor: String,
    next_claim: Instant,
    described: String,
}

impl RedisStreamSource {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`) and
    /// reads `stream` as a consumer of `group` (created at the start of
    /// the stream, and the stream with it, if it does not exist), the
    /// operation of each entry in `field`. An entry pending longer than
    /// `claim_idle` (another consumer's that crashed or is paused) is taken
    /// over; an entry whose effect runs here is kept from that by resetting
    /// its idle time every third of it. Refused entries are copied to
    /// `dead_letter` (a stream) when given, then acknowledged.
    pub async fn connect(
        url: &str,
        stream: &str,
        group: &str,
        field: &str,
        claim_idle: Duration,
        dead_letter: Option<&str>,
    ) -> Result<Self, SourceError> {
        let shown = without_password(url);
        let fail =
            |what: &str, e: redis::RedisError| SourceError::new(format!("{what} {shown}"), e);
        let client = redis::Client::open(url).map_err(|e| fail("opening", e))?;
        let connect = |timeout: Duration| {
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(2);
            client.get_connection_manager_with_config(config)
        };
        // A blocking read waits up to a fetch's wait for its answer.
        let reader = connect(Duration::from_secs(10))
            .await
            .map_err(|e| fail("connecting to", e))?;
        let mut control = connect(Duration::from_secs(5))
            .await
            .map_err(|e| fail("connecting to", e))?;
        let created: Result<(), _> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(group)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut control)
            .await;
        match created {
            Ok(()) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => {
                return Err(SourceError::new(
                    format!("creating group {group} of stream {stream} at {shown}"),
                    e,
                ));
            }
        }
        let me = idem_store::Holder::this_process();
        let consumer = format!("{}-{}", me.host, me.pid);
        let described = format!("{shown} stream {stream} group {group} consumer {consumer}");
        Ok(RedisStreamSource {
            place: Arc::new(Place {
                control,
                stream: stream.to_string(),
                group: group.to_string(),
                consumer,
                field: field.to_string(),
                dead_letter: dead_letter.map(str::to_string),
                keep_if_mine: Script::new(KEEP_IF_MINE),
                put_off: Mutex::new(HashMap::new()),
            }),
            reader,
            claim_idle,
            claim_cursor: "0-0".into(),
            next_claim: Instant::now(),
            described,
        })
    }

    fn failed(&self, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(format!("fetching from {}", self.described), e)
    }

    /// The entries put off whose delay has passed, read again (`XCLAIM`
    /// by this consumer, only if still idle since: one another consumer
    /// took meanwhile is its now).
    async fn due(&mut self, max: usize) -> Result<Vec<StreamId>, SourceError> {
        let now = Instant::now();
        let due: Vec<(String, Duration)> = {
            let mut put_off = self.place.put_off();
            let ids: Vec<String> = put_off
                .iter()
                .filter(|(_, (at, _))| *at <= now)
                .map(|(id, _)| id.clone())
                .take(max)
                .collect();
            ids.into_iter()
                .filter_map(|id| put_off.remove(&id).map(|(_, delay)| (id, delay)))
                .collect()
        };
        let mut out = Vec::new();
        for (id, delay) in due {
            let idle = delay.saturating_sub(Duration::from_millis(50));
            let reply: StreamClaimReply = redis::cmd("XCLAIM")
                .arg(&self.place.stream)
                .arg(&self.place.group)
                .arg(&self.place.consumer)
                .arg(idle.as_millis() as u64)
                .arg(&id)
                .query_async(&mut self.reader)
                .await
                .map_err(|e| self.failed(e))?;
            out.extend(reply.ids);
        }
        Ok(out)
    }

    /// Entries pending past the claim threshold, whoever holds them, taken
    /// over (`XAUTOCLAIM`), at most every quarter of it.
    async fn abandoned(&mut self, max: usize) -> Result<Vec<StreamId>, SourceError> {
        let now = Instant::now();
        if now < self.next_claim {
            return Ok(Vec::new());
        }
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&self.place.stream)
            .arg(&self.place.group)
            .arg(&self.place.consumer)
            .arg(self.claim_idle.as_millis() as u64)
            .arg(&self.claim_cursor)
            .arg("COUNT")
            .arg(max)
            .query_async(&mut self.reader)
            .await
            .map_err(|e| self.failed(e))?;
        self.claim_cursor = reply.next_stream_id;
        // A scan that wrapped waits a while; one with more to go goes on
        // at the next fetch.
        if self.claim_cursor == "0-0" {
            self.next_claim = now + (self.claim_idle / 4).max(Duration::from_millis(100));
        }
        // One of this consumer's own, put off past the threshold, comes
        // back this way: not read again when its delay ends too.
        let mut put_off = self.place.put_off();
        for entry in &reply.claimed {
            put_off.remove(&entry.id);
        }
        Ok(reply.claimed)
    }

    /// New entries for the group, waiting up to `wait` for the first when
    /// `block`.
    async fn new_entries(
        &mut self,
        max: usize,
        wait: Option<Duration>,
    ) -> Result<Vec<StreamId>, SourceError> {
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(&self.place.group)
            .arg(&self.place.consumer)
            .arg("COUNT")
            .arg(max);
        if let Some(wait) = wait {
            read.arg("BLOCK").arg(wait.as_millis().max(1) as u64);
        }
        let reply: Option<StreamReadReply> = read
            .arg("STREAMS")
            .arg(&self.place.stream)
            .arg(">")
            .query_async(&mut self.reader)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .collect())
    }
}

#[async_trait]
impl MessageSource for RedisStreamSource {
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        let mut entries = self.due(max).await?;
        if entries.len() < max {
            let more = self.abandoned(max - entries.len()).await?;
            entries.extend(more);
        }
        if entries.len() < max {
            let block = entries.is_empty().then_some(wait);
            let more = self.new_entries(max - entries.len(), block).await?;
            entries.extend(more);
        }
        Ok(entries
            .into_iter()
            .map(|entry| Box::new(RedisDelivery::of(entry, &self.place)) as Box<dyn Delivery>)
            .collect())
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    /// A third of the claim threshold: a running effect's entry is kept
    /// twice before another consumer could take it.
    fn progress_every(&self) -> Option<Duration> {
        Some((self.claim_idle / 3).max(Duration::from_millis(100)))
    }

    fn held(&self) -> usize {
        self.place.put_off().len()
    }

    /// The group's entries not settled, as Redis counts them: pending (any
    /// consumer's, a crashed one's until it is taken over, and those put
    /// off) and not yet delivered (the group's lag).
    async fn unacknowledged(&mut self) -> Result<Option<u64>, SourceError> {
        let fail = |e| SourceError::new(format!("reading the state of {}", self.described), e);
        let reply: StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.place.stream)
            .query_async(&mut self.reader)
            .await
            .map_err(fail)?;
        let group = reply
            .groups
            .into_iter()
            .find(|g| g.name == self.place.group);
        Ok(Some(group.map_or(0, |g| {
            g.pending as u64 + g.lag.unwrap_or_default() as u64
        })))
    }

    /// The claim threshold: an entry left pending comes back after it.
    fn redelivery_wait(&self) -> Duration {
        self.claim_idle
    }
}

impl Place {
    fn put_off(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Duration)>> {
        // A map of ids, never left half-changed.
        self.put_off.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One entry as delivered to this consumer.
struct RedisDelivery {
    place: Arc<Place>,
    id: String,
    /// The entry's fields, as stored (copied whole by a forward).
    fields: Vec<(String, Vec<u8>)>,
    /// The operation field's value, if the entry has one.
    body: Option<usize>,
}

impl RedisDelivery {
    fn of(entry: StreamId, place: &Arc<Place>) -> Self {
        let fields: Vec<(String, Vec<u8>)> = entry
            .map
            .into_iter()
            .map(|(name, value)| (name, bytes(value)))
            .collect();
        let body = fields.iter().position(|(name, _)| *name == place.field);
        RedisDelivery {
            place: place.clone(),
            id: entry.id,
            fields,
            body,
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(format!("{what} {}", self.describe()), e)
    }

    async fn ack_now(&self) -> Result<(), SourceError> {
        let mut control = self.place.control.clone();
        redis::cmd("XACK")
            .arg(&self.place.stream)
            .arg(&self.place.group)
            .arg(&self.id)
            .query_async::<u64>(&mut control)
            .await
            .map(drop)
            .map_err(|e| self.error("acknowledging", e))
    }

    /// Appends a copy of the entry, with `extra` fields, to `to`.
    async fn copy_to(&self, to: &str, extra: &[(&str, String)]) -> Result<(), SourceError> {
        let mut add = redis::cmd("XADD");
        add.arg(to).arg("*");
        for (name, value) in &self.fields {
            add.arg(name).arg(value);
        }
        for (name, value) in extra {
            add.arg(*name).arg(value);
        }
        let mut control = self.place.control.clone();
        add.query_async::<String>(&mut control)
            .await
            .map(drop)
            .map_err(|e| self.error(&format!("copying to {to}"), e))
    }
}

/// A field's value as bytes (a number as its digits).
fn bytes(value: Value) -> Vec<u8> {
    redis::from_redis_value::<Vec<u8>>(value).unwrap_or_default()
}

#[async_trait]
impl Delivery for RedisDelivery {
    fn body(&self) -> &[u8] {
        self.body.map_or(&[][..], |i| self.fields[i].1.as_slice())
    }

    fn describe(&self) -> String {
        let missing = match self.body {
            Some(_) => String::new(),
            None => format!(" (no field {})", escaped(&self.place.field)),
        };
        format!(
            "{} entry {}{missing}",
            escaped(&self.place.stream),
            escaped(&self.id)
        )
    }

    /// Not counted by a read of new entries; a take-over's is at least 2.
    fn delivered(&self) -> u64 {
        1
    }

    async fn ack(&self) -> Result<(), SourceError> {
        self.ack_now().await
    }

    /// Kept pending here and read again once `delay` has passed (Redis has
    /// no delayed redelivery); another consumer may take it meanwhile
    /// after the claim threshold.
    async fn nack(&self, delay: Duration) -> Result<(), SourceError> {
        let due = Instant::now() + delay;
        self.place.put_off().insert(self.id.clone(), (due, delay));
        Ok(())
    }

    /// Copied to the dead-letter stream when there is one (with the field
    /// `idem-delivery` naming where it came from), then acknowledged.
    async fn term(&self) -> Result<(), SourceError> {
        if let Some(dead) = &self.place.dead_letter {
            self.copy_to(dead, &[("idem-delivery", self.describe())])
                .await?;
        }
        self.ack_now().await
    }

    /// Appended to the stream `to`, its fields with `headers` added.
    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        self.copy_to(to, headers).await
    }

    /// The entry's idle time reset while it is still this consumer's, so
    /// that no other takes it over meanwhile.
    async fn in_progress(&self) -> Result<(), SourceError> {
        let mut control = self.place.control.clone();
        let kept: u64 = self
            .place
            .keep_if_mine
            .key(&self.place.stream)
            .arg(&self.place.group)
            .arg(&self.id)
            .arg(&self.place.consumer)
            .invoke_async(&mut control)
            .await
            .map_err(|e| self.error("extending", e))?;
        if kept == 0 {
            return Err(self.error(
                "extending",
                "another consumer of the group took it over (pending past the claim threshold): \
                 the store fences this consumer's end if the taker's claim came first",
            ));
        }
        Ok(())
    }
}
