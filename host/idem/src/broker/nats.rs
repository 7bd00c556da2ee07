//! NATS JetStream as a [`MessageSource`]: a durable pull consumer with
//! explicit acknowledgement, on the `async-nats` client.
//!
//! JetStream's own deduplication (`Nats-Msg-Id`) covers publishes within
//! a window; it says nothing of a consumer that crashed after its effect
//! and before its ack, which is what the consumer here is for.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use async_trait::async_trait;
use futures_util::{FutureExt, StreamExt};
use idem_core::text::escaped;

use super::without_password;
use super::{Delivery, MessageSource, SourceError};

/// A JetStream durable pull consumer.
pub struct JetStreamSource {
    consumer: PullConsumer,
    described: String,
    /// With [`JetStreamSource::read_ahead`]: how many messages a standing
    /// pull keeps coming, and the pull once open.
    read_ahead: Option<(usize, Option<pull::Stream>)>,
}

impl JetStreamSource {
    /// Connects to `url` (`nats://host:port`) and binds to the durable
    /// consumer `consumer` of `stream`, creating it (explicit
    /// acknowledgement, `filter` as its subject filter, `ack_wait` before a
    /// delivery not acknowledged goes to another consumer) if it does not
    /// exist. The stream must exist.
    pub async fn connect(
        url: &str,
        stream: &str,
        consumer: &str,
        filter: Option<&str>,
        ack_wait: Duration,
    ) -> Result<Self, SourceError> {
        let shown = without_password(url);
        let described = format!("{shown} stream {stream} consumer {consumer}");
        let client = async_nats::connect(url)
            .await
            .map_err(|e| SourceError::new(format!("connecting to {shown}"), e))?;
        let context = jetstream::new(client);
        let found = context
            .get_stream(stream)
            .await
            .map_err(|e| SourceError::new(format!("finding stream {stream} at {shown}"), e))?;
        let config = pull::Config {
            durable_name: Some(consumer.to_string()),
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            filter_subject: filter.unwrap_or_default().to_string(),
            ..Default::default()
        };
        let consumer = found
            .get_or_create_consumer(consumer, config)
            .await
            .map_err(|e| SourceError::new(format!("binding to consumer {consumer}"), e))?;
        Ok(JetStreamSource {
            consumer,
            described,
            read_ahead: None,
        })
    }

    /// Keeps a pull of `messages` open (asked for again when half are taken,
    /// so up to about one and a half times that wait here), so that a fetch
    /// takes what has already arrived rather than
    /// making a pull request (a round trip) of its own. Messages waiting
    /// here are delivered, their ack wait running, and not yet reported in
    /// progress: `messages` about the consumer's concurrency keeps that wait
    /// to about one effect. Without it: a pull request per fetch.
    pub fn read_ahead(mut self, messages: usize) -> Self {
        self.read_ahead = Some((messages.max(1), None));
        self
    }

    /// A fetch from the standing pull: the first message waited for up to
    /// `wait`, the rest what has already arrived. A failed pull is opened
    /// again at the next fetch.
    async fn fetch_ahead(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        let context = format!("fetching from {}", self.described);
        let Some((batch, open)) = &mut self.read_ahead else {
            return Ok(Vec::new());
        };
        if open.is_none() {
            let pull = self
                .consumer
                .stream()
                .max_messages_per_batch(*batch)
                .messages()
                .await
                .map_err(|e| SourceError::new(context.clone(), e))?;
            *open = Some(pull);
        }
        let pull = open.as_mut().expect("opened above");
        let first = match tokio::time::timeout(wait, pull.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => {
                *open = None;
                return Err(SourceError::new(context, e));
            }
            Ok(None) => {
                *open = None;
                return Err(SourceError::new(context, "the pull ended"));
            }
        };
        let mut out: Vec<Box<dyn Delivery>> = Vec::with_capacity(max);
        out.push(Box::new(JetStreamDelivery(first)));
        while out.len() < max {
            match pull.next().now_or_never() {
                Some(Some(Ok(message))) => out.push(Box::new(JetStreamDelivery(message))),
                // An error or the end shows at the next fetch; the batch in
                // hand is settled first.
                _ => break,
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl MessageSource for JetStreamSource {
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        if self.read_ahead.is_some() {
            return self.fetch_ahead(max, wait).await;
        }
        let fail = |e: &dyn std::fmt::Display| {
            SourceError::new(format!("fetching from {}", self.described), e)
        };
        let mut batch = self
            .consumer
            .batch()
            .max_messages(max)
            .expires(wait)
            .messages()
            .await
            .map_err(|e| fail(&e))?;
        let mut out: Vec<Box<dyn Delivery>> = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| fail(&e))?;
            out.push(Box::new(JetStreamDelivery(message)));
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    /// What the standing pull has delivered and no fetch took is handed
    /// back (`-NAK`): delivered again at once, to this consumer's
    /// successor or a peer.
    async fn give_back(&mut self) {
        let Some((_, open)) = &mut self.read_ahead else {
            return;
        };
        if let Some(pull) = open {
            let mut client = None;
            while let Some(Some(item)) = pull.next().now_or_never() {
                let Ok(message) = item else { continue };
                if let Err(e) = message.ack_with(AckKind::Nak(None)).await {
                    tracing::warn!(error = %e, "handing back a message read ahead");
                }
                client.get_or_insert_with(|| message.context.client());
            }
            // The hand-backs are publishes: sent before the process ends.
            if let Some(client) = client
                && let Err(e) = client.flush().await
            {
                tracing::warn!(error = %e, "handing back the messages read ahead");
            }
        }
        *open = None;
    }

    /// A third of the consumer's ack wait (as the server has it: a
    /// consumer that existed keeps its own), so that a running effect is
    /// reported twice before the broker would give its delivery away.
    fn progress_every(&self) -> Option<Duration> {
        let ack_wait = self.consumer.cached_info().config.ack_wait;
        (!ack_wait.is_zero()).then(|| (ack_wait / 3).max(Duration::from_millis(100)))
    }

    /// The durable consumer's messages not settled, as the server counts
    /// them: deliveries pending acknowledgement (every consumer of the
    /// name's, a crashed one's until its ack wait runs out, and those put
    /// off with a delay) and messages not yet delivered at all.
    ///
    /// Asked only when this consumer has had nothing for a while: messages
    /// waiting while the server holds no pull request of this consumer's
    /// mean the standing pull stopped asking (the client's count of what
    /// it is owed drifted), so it is opened again at the next fetch. With
    /// no request waiting, nothing is on its way to the old pull.
    async fn unacknowledged(&mut self) -> Result<Option<u64>, SourceError> {
        let info =
            self.consumer.info().await.map_err(|e| {
                SourceError::new(format!("reading the state of {}", self.described), e)
            })?;
        if info.num_pending > 0
            && info.num_waiting == 0
            && let Some((_, open)) = &mut self.read_ahead
            && open.is_some()
        {
            tracing::warn!(
                pending = info.num_pending,
                "{}: messages wait and no pull asks for them; pulling again",
                self.described
            );
            *open = None;
        }
        Ok(Some(info.num_ack_pending as u64 + info.num_pending))
    }

    /// The consumer's ack wait, as the server has it.
    fn redelivery_wait(&self) -> Duration {
        self.consumer.cached_info().config.ack_wait
    }
}

/// One JetStream delivery.
struct JetStreamDelivery(jetstream::Message);

impl JetStreamDelivery {
    async fn send(&self, kind: AckKind, what: &str) -> Result<(), SourceError> {
        self.0
            .ack_with(kind)
            .await
            .map_err(|e| SourceError::new(format!("{what} {}", self.describe()), e))
    }
}

#[async_trait]
impl Delivery for JetStreamDelivery {
    fn body(&self) -> &[u8] {
        &self.0.payload
    }

    fn describe(&self) -> String {
        match self.0.info() {
            Ok(info) => format!("{} message {}", escaped(info.stream), info.stream_sequence),
            Err(_) => format!("a message on {}", escaped(&self.0.subject)),
        }
    }

    fn delivered(&self) -> u64 {
        self.0
            .info()
            .map_or(1, |info| u64::try_from(info.delivered).unwrap_or(1))
    }

    async fn ack(&self) -> Result<(), SourceError> {
        self.send(AckKind::Ack, "acknowledging").await
    }

    async fn nack(&self, delay: Duration) -> Result<(), SourceError> {
        self.send(AckKind::Nak(Some(delay)), "putting off").await
    }

    async fn term(&self) -> Result<(), SourceError> {
        self.send(AckKind::Term, "terminating").await
    }

    async fn in_progress(&self) -> Result<(), SourceError> {
        self.send(AckKind::Progress, "extending").await
    }

    /// Published through JetStream and its acknowledgement awaited: the
    /// copy is stored by the stream that captures `to` (no stream, no copy:
    /// an error).
    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        let fail = |e: &dyn std::fmt::Display| {
            SourceError::new(format!("forwarding {} to {to}", self.describe()), e)
        };
        // The message's own headers but JetStream's (`Nats-Msg-Id`,
        // `Nats-Expected-*`, `Nats-Rollup`, `Nats-TTL`, …), which would make
        // the review stream drop, refuse or roll up the copy.
        let mut all = async_nats::HeaderMap::new();
        if let Some(own) = &self.0.headers {
            for (name, values) in own.iter() {
                if name.to_string().to_ascii_lowercase().starts_with("nats-") {
                    continue;
                }
                for value in values {
                    all.append(name.clone(), value.clone());
                }
            }
        }
        for (name, value) in headers {
            all.insert(*name, value.as_str());
        }
        self.0
            .context
            .publish_with_headers(to.to_string(), all, self.0.payload.clone())
            .await
            .map_err(|e| fail(&e))?
            .await
            .map(drop)
            .map_err(|e| fail(&e))
    }
}
