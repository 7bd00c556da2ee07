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
//! claim still live or lapsed. Three things keep Redis from making it
//! worse: an entry is acknowledged, copied or kept alive (its idle time
//! reset, `XCLAIM … JUSTID`) only while it is still this consumer's, in
//! one script (`delivery.rs`), so a consumer deposed while paused neither
//! acknowledges what another now holds nor takes it back; and this
//! consumer itself takes over abandoned entries, so a crashed peer's are
//! run. `reply.rs` reads entries from Redis's raw replies, as bytes.
//!
//! Each process reads as a consumer of its own name (host, process id and
//! a random part) within the group; the group is the consumer name given (`--consumer`),
//! created at the start of the stream if it does not exist. An entry's
//! operation is one of its fields (`operation` unless told otherwise); an
//! entry without it is refused like any other poison. A refused entry is
//! copied to a dead-letter stream when one is given, then acknowledged.
//! Redis has no delayed redelivery: an entry put off stays pending here
//! and is read again (`XCLAIM`) once its delay has passed, or sooner by a
//! scan that finds it idle past the claim threshold.

mod delivery;
mod reply;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::streams::StreamInfoGroupsReply;
use redis::{Script, Value};

use super::{Delivery, MessageSource, SourceError, without_password};
use delivery::{IF_MINE, RedisDelivery};
use reply::Entry;

/// The field an entry's operation is in, unless told otherwise.
pub const DEFAULT_FIELD: &str = "operation";

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
    if_mine: Script,
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
        // Host and process, and a random part: two containers whose
        // processes are each pid 1 on hosts of one name, or a pid used
        // again, are two consumers, never one sharing a pending list.
        // (std's RandomState is keyed afresh from the system's random
        // source for each source made.)
        use std::hash::BuildHasher;
        let me = idem_store::Holder::this_process();
        let random = std::collections::hash_map::RandomState::new().hash_one(me.pid) as u32;
        let consumer = format!("{}-{}-{random:08x}", me.host, me.pid);
        let described = format!("{shown} stream {stream} group {group} consumer {consumer}");
        Ok(RedisStreamSource {
            place: Arc::new(Place {
                control,
                stream: stream.to_string(),
                group: group.to_string(),
                consumer,
                field: field.to_string(),
                dead_letter: dead_letter.map(str::to_string),
                if_mine: Script::new(IF_MINE),
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
    /// took meanwhile is its now). On a failure, what was read again is
    /// kept and the rest put back.
    async fn due(&mut self, max: usize, out: &mut Vec<Entry>) -> Result<(), SourceError> {
        let now = Instant::now();
        let mut due: Vec<(String, (Instant, Duration))> = {
            let mut put_off = self.place.put_off();
            let ids: Vec<String> = put_off
                .iter()
                .filter(|(_, (at, _))| *at <= now)
                .map(|(id, _)| id.clone())
                .take(max)
                .collect();
            ids.into_iter()
                .filter_map(|id| put_off.remove(&id).map(|when| (id, when)))
                .collect()
        };
        while let Some((id, (at, delay))) = due.pop() {
            let idle = delay.saturating_sub(Duration::from_millis(50));
            let claimed: Result<Value, _> = redis::cmd("XCLAIM")
                .arg(&self.place.stream)
                .arg(&self.place.group)
                .arg(&self.place.consumer)
                .arg(idle.as_millis() as u64)
                .arg(&id)
                .query_async(&mut self.reader)
                .await;
            match claimed {
                Ok(reply) => out.extend(reply::entries(reply)),
                Err(e) => {
                    let mut put_off = self.place.put_off();
                    put_off.insert(id, (at, delay));
                    put_off.extend(due);
                    return Err(self.failed(e));
                }
            }
        }
        Ok(())
    }

    /// Entries pending past the claim threshold, whoever holds them, taken
    /// over (`XAUTOCLAIM`), at most every quarter of it.
    async fn abandoned(&mut self, max: usize) -> Result<Vec<Entry>, SourceError> {
        let now = Instant::now();
        if now < self.next_claim {
            return Ok(Vec::new());
        }
        let claimed: Value = redis::cmd("XAUTOCLAIM")
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
        let (cursor, claimed) = reply::autoclaim(claimed);
        self.claim_cursor = cursor;
        // A scan that wrapped waits a while; one with more to go goes on
        // at the next fetch.
        if self.claim_cursor == "0-0" {
            self.next_claim = now + self.scan_every();
        }
        // One of this consumer's own, put off past the threshold, comes
        // back this way: not read again when its delay ends too.
        let mut put_off = self.place.put_off();
        for entry in &claimed {
            put_off.remove(&entry.id);
        }
        Ok(claimed)
    }

    /// How often the pending entries are scanned for abandoned ones.
    fn scan_every(&self) -> Duration {
        (self.claim_idle / 4).max(Duration::from_millis(100))
    }

    /// New entries for the group, waiting up to `wait` for the first when
    /// given.
    async fn new_entries(
        &mut self,
        max: usize,
        wait: Option<Duration>,
    ) -> Result<Vec<Entry>, SourceError> {
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(&self.place.group)
            .arg(&self.place.consumer)
            .arg("COUNT")
            .arg(max);
        if let Some(wait) = wait {
            read.arg("BLOCK").arg(wait.as_millis().max(1) as u64);
        }
        let reply: Value = read
            .arg("STREAMS")
            .arg(&self.place.stream)
            .arg(">")
            .query_async(&mut self.reader)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(reply::read(reply))
    }

    /// Up to `max` entries into `out`: those put off and due, then those
    /// abandoned by other consumers, then new ones (waiting up to `wait`
    /// when nothing else came).
    async fn read_into(
        &mut self,
        max: usize,
        wait: Duration,
        out: &mut Vec<Entry>,
    ) -> Result<(), SourceError> {
        self.due(max, out).await?;
        if out.len() < max {
            let more = self.abandoned(max - out.len()).await?;
            out.extend(more);
        }
        if out.len() < max {
            let block = out.is_empty().then_some(wait);
            let more = self.new_entries(max - out.len(), block).await?;
            out.extend(more);
        }
        Ok(())
    }

    /// Forgets the entries put off that are no longer pending with this
    /// consumer (another took them over): nothing of them is to wait for.
    async fn forget_taken(&mut self) -> Result<(), SourceError> {
        if self.place.put_off().is_empty() {
            return Ok(());
        }
        // An id put off and not listed is forgotten: one listed past this
        // count (this consumer holding that many) comes back by a scan.
        const LISTED: usize = 10_000;
        let pending: Value = redis::cmd("XPENDING")
            .arg(&self.place.stream)
            .arg(&self.place.group)
            .arg("-")
            .arg("+")
            .arg(LISTED)
            .arg(&self.place.consumer)
            .query_async(&mut self.reader)
            .await
            .map_err(|e| self.failed(e))?;
        let Value::Array(rows) = pending else {
            return Ok(());
        };
        let mine: std::collections::HashSet<Vec<u8>> = rows
            .into_iter()
            .filter_map(|row| match row {
                Value::Array(mut row) if !row.is_empty() => match row.swap_remove(0) {
                    Value::BulkString(id) => Some(id),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        self.place
            .put_off()
            .retain(|id, _| mine.contains(id.as_bytes()));
        Ok(())
    }
}

#[async_trait]
impl MessageSource for RedisStreamSource {
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        let mut entries = Vec::new();
        // What one step read is delivered even when a later one fails: it
        // is pending here already.
        let read = self.read_into(max, wait, &mut entries).await;
        if entries.is_empty() {
            read?;
            // Idle: what was put off and taken over by another is not
            // waited for.
            self.forget_taken().await?;
        } else if let Err(e) = read {
            tracing::warn!(error = %e, "reading the rest of a fetch; delivering what came");
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

    /// How long an entry left pending by a consumer that crashed may take
    /// to come back: the claim threshold, counted from its last reset
    /// (up to a third of it after this consumer went idle), and the next
    /// scan of the pending entries.
    fn redelivery_wait(&self) -> Duration {
        self.claim_idle + self.claim_idle / 3 + self.scan_every()
    }
}

impl Place {
    fn put_off(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Duration)>> {
        // A map of ids, never left half-changed.
        self.put_off.lock().unwrap_or_else(|p| p.into_inner())
    }
}
