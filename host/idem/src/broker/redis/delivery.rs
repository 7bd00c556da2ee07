//! One entry as delivered to this consumer, and how it is settled. Redis
//! checks nobody's ownership on `XACK` or `XCLAIM`: a consumer paused past
//! the claim threshold, resuming, would acknowledge an entry another
//! consumer took over and is still working on (put off after a retryable
//! failure, say), and the entry would never be delivered again. So every
//! settle that touches the group goes through one script that acts only
//! while the entry is still pending with this consumer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_core::text::escaped;

use super::Place;
use super::reply::Entry;
use crate::broker::{Delivery, SourceError};

/// Acts on entry `ARGV[2]` of group `ARGV[1]` only while it is pending with
/// consumer `ARGV[3]`: `ack` acknowledges it, `keep` resets its idle time
/// (`XCLAIM … JUSTID`: no delivery counted), `check` does nothing. 1 when
/// it was this consumer's, 0 when not (another's, or no longer pending).
pub(super) const IF_MINE: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if p[1] == nil or p[1][2] ~= ARGV[3] then return 0 end
if ARGV[4] == 'ack' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
elseif ARGV[4] == 'keep' then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
end
return 1
";

/// One entry as delivered to this consumer.
pub(super) struct RedisDelivery {
    place: Arc<Place>,
    id: String,
    /// The entry's fields, in order, as written (copied whole by a forward).
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Which of them is the operation, if the entry has it.
    body: Option<usize>,
}

impl RedisDelivery {
    pub(super) fn of(entry: Entry, place: &Arc<Place>) -> Self {
        let body = entry
            .fields
            .iter()
            .position(|(name, _)| name == place.field.as_bytes());
        RedisDelivery {
            place: place.clone(),
            id: entry.id,
            fields: entry.fields,
            body,
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(format!("{what} {}", self.describe()), e)
    }

    /// [`IF_MINE`] with `action`: whether the entry was this consumer's.
    async fn if_mine(&self, action: &str, what: &str) -> Result<bool, SourceError> {
        let mut control = self.place.control.clone();
        let mine: u64 = self
            .place
            .if_mine
            .key(&self.place.stream)
            .arg(&self.place.group)
            .arg(&self.id)
            .arg(&self.place.consumer)
            .arg(action)
            .invoke_async(&mut control)
            .await
            .map_err(|e| self.error(what, e))?;
        Ok(mine == 1)
    }

    /// Why an entry no longer this consumer's is left alone.
    fn not_mine(&self, what: &str) -> SourceError {
        self.error(
            what,
            "no longer this consumer's (another consumer of the group took it over after the \
             claim threshold, or it was settled): left to its holder; the store fenced this \
             consumer's end if the taker's claim came first",
        )
    }

    /// Appends a copy of the entry, with `extra` fields, to `to`, if the
    /// entry is still this consumer's (else its holder settles it).
    async fn copy_to(&self, to: &str, extra: &[(&str, String)]) -> Result<(), SourceError> {
        let what = format!("copying to {to}");
        if !self.if_mine("check", &what).await? {
            return Err(self.not_mine(&what));
        }
        let mut add = redis::cmd("XADD");
        add.arg(to).arg("*");
        for (name, value) in &self.fields {
            add.arg(name.as_slice()).arg(value.as_slice());
        }
        for (name, value) in extra {
            add.arg(*name).arg(value);
        }
        let mut control = self.place.control.clone();
        add.query_async::<String>(&mut control)
            .await
            .map(drop)
            .map_err(|e| self.error(&what, e))
    }

    async fn ack_if_mine(&self) -> Result<(), SourceError> {
        match self.if_mine("ack", "acknowledging").await? {
            true => Ok(()),
            false => Err(self.not_mine("acknowledging")),
        }
    }
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

    /// Redis counts deliveries, but a read of new entries does not say it:
    /// 1, whether new or taken over.
    fn delivered(&self) -> u64 {
        1
    }

    /// Only while the entry is still this consumer's: a consumer deposed
    /// while paused must not acknowledge what another now holds.
    async fn ack(&self) -> Result<(), SourceError> {
        self.ack_if_mine().await
    }

    /// Kept pending here and read again once `delay` has passed (Redis has
    /// no delayed redelivery), or sooner by whichever consumer's
    /// `XAUTOCLAIM` finds it idle past the claim threshold.
    async fn nack(&self, delay: Duration) -> Result<(), SourceError> {
        let due = Instant::now() + delay;
        self.place.put_off().insert(self.id.clone(), (due, delay));
        Ok(())
    }

    /// Copied to the dead-letter stream when there is one (with the field
    /// `idem-delivery` naming where it came from), then acknowledged; both
    /// only while it is still this consumer's.
    async fn term(&self) -> Result<(), SourceError> {
        if let Some(dead) = &self.place.dead_letter {
            self.copy_to(dead, &[("idem-delivery", self.describe())])
                .await?;
        }
        self.ack_if_mine().await
    }

    /// Appended to the stream `to`, its fields with `headers` added.
    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        self.copy_to(to, headers).await
    }

    /// The entry's idle time reset while it is still this consumer's, so
    /// that no other takes it over meanwhile; never taken back from one
    /// that did.
    async fn in_progress(&self) -> Result<(), SourceError> {
        match self.if_mine("keep", "extending").await? {
            true => Ok(()),
            false => Err(self.not_mine("extending")),
        }
    }
}
