//! RabbitMQ (AMQP 0-9-1) as a [`MessageSource`]: a consumer on a queue
//! with manual acknowledgement and a prefetch limit, on the `lapin` client.
//!
//! RabbitMQ deduplicates nothing: a publisher's retry is a second message,
//! and a delivery not acknowledged when its channel closes (the consumer
//! crashed after its effect) is delivered again. Both are what the engine's
//! key is for. AMQP has no delayed negative acknowledgement, so a delivery
//! to be put off is held (unacknowledged, counting against the prefetch)
//! for its delay and then requeued; should the consumer stop first, closing
//! the channel requeues it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{FutureExt, StreamExt};
use idem_core::text::escaped;
use lapin::Confirmation;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};

use super::without_password;
use super::{Delivery, MessageSource, SourceError};

struct Open {
    _connection: Connection,
    _channel: Channel,
    consumer: Consumer,
    publisher: Channel,
}

/// A consumer on one RabbitMQ queue. A lost connection is opened again
/// at the next fetch; deliveries taken on the old one are the broker's to
/// deliver again (answered from the record).
pub struct AmqpSource {
    url: String,
    queue: String,
    prefetch: u16,
    /// The connection, the consumer, and a channel in confirm mode to
    /// forward messages on; `None` once the connection failed.
    open: Option<Open>,
    /// Deliveries held to be requeued after their delay.
    held: Arc<AtomicUsize>,
    described: String,
}

impl AmqpSource {
    /// Connects to `url` (`amqp://user:pass@host:port/vhost`) and consumes
    /// `queue` (which must exist) with manual acknowledgement, at most
    /// `prefetch` deliveries unacknowledged at once.
    pub async fn connect(url: &str, queue: &str, prefetch: u16) -> Result<Self, SourceError> {
        let mut source = AmqpSource {
            url: url.to_string(),
            queue: queue.to_string(),
            prefetch: prefetch.max(1),
            open: None,
            held: Arc::new(AtomicUsize::new(0)),
            described: format!("{} queue {queue}", without_password(url)),
        };
        source.open().await?;
        Ok(source)
    }

    async fn open(&mut self) -> Result<(), SourceError> {
        let shown = without_password(&self.url);
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|e| SourceError::new(format!("connecting to {shown}"), e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| SourceError::new(format!("opening a channel on {shown}"), e))?;
        channel
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| SourceError::new(format!("setting the prefetch on {shown}"), e))?;
        let consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                SourceError::new(format!("consuming queue {} on {shown}", self.queue), e)
            })?;
        let publisher = connection
            .create_channel()
            .await
            .map_err(|e| SourceError::new(format!("opening a channel on {shown}"), e))?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| SourceError::new(format!("asking {shown} for confirms"), e))?;
        self.open = Some(Open {
            _connection: connection,
            _channel: channel,
            consumer,
            publisher,
        });
        Ok(())
    }

    fn failed(&mut self, e: impl std::fmt::Display) -> SourceError {
        self.open = None;
        SourceError::new(format!("fetching from {}", self.described), e)
    }
}

#[async_trait]
impl MessageSource for AmqpSource {
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError> {
        if self.open.is_none() {
            self.open().await?;
        }
        let Open {
            consumer,
            publisher,
            ..
        } = self.open.as_mut().expect("opened above");
        let first = match tokio::time::timeout(wait, consumer.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(None) => return Err(self.failed("the broker cancelled the consumer")),
            Ok(Some(Err(e))) => return Err(self.failed(e)),
            Ok(Some(Ok(delivery))) => delivery,
        };
        let mut out: Vec<Box<dyn Delivery>> = Vec::with_capacity(max);
        out.push(Box::new(AmqpDelivery::new(first, publisher, &self.held)));
        // The rest of the batch: what has already arrived, without waiting.
        while out.len() < max {
            match consumer.next().now_or_never() {
                Some(Some(Ok(delivery))) => {
                    out.push(Box::new(AmqpDelivery::new(delivery, publisher, &self.held)))
                }
                // An error or the end shows at the next fetch; the batch
                // in hand is settled first.
                _ => break,
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// One RabbitMQ delivery.
struct AmqpDelivery {
    delivery: Arc<lapin::message::Delivery>,
    /// The connection's channel in confirm mode.
    publisher: Channel,
    held: Arc<AtomicUsize>,
}

impl AmqpDelivery {
    fn new(
        delivery: lapin::message::Delivery,
        publisher: &Channel,
        held: &Arc<AtomicUsize>,
    ) -> Self {
        AmqpDelivery {
            delivery: Arc::new(delivery),
            publisher: publisher.clone(),
            held: held.clone(),
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(format!("{what} {}", self.describe()), e)
    }
}

#[async_trait]
impl Delivery for AmqpDelivery {
    fn body(&self) -> &[u8] {
        &self.delivery.data
    }

    fn describe(&self) -> String {
        let d = &self.delivery;
        // Both chosen by the publisher.
        match d.properties.message_id() {
            Some(id) => format!(
                "message {} (delivery {})",
                escaped(id.as_str()),
                d.delivery_tag
            ),
            None => format!(
                "delivery {} from {}",
                d.delivery_tag,
                escaped(d.routing_key.as_str())
            ),
        }
    }

    fn delivered(&self) -> u64 {
        // Quorum queues count deliveries in a header; classic queues only
        // say whether this is not the first.
        let counted = self
            .delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-delivery-count"))
            .and_then(|v| match v {
                AMQPValue::LongLongInt(n) => u64::try_from(*n).ok(),
                AMQPValue::LongInt(n) => u64::try_from(*n).ok(),
                AMQPValue::LongUInt(n) => Some(u64::from(*n)),
                _ => None,
            });
        match counted {
            Some(n) => n + 1,
            None if self.delivery.redelivered => 2,
            None => 1,
        }
    }

    async fn ack(&self) -> Result<(), SourceError> {
        self.delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .map(drop)
            .map_err(|e| self.error("acknowledging", e))
    }

    async fn nack(&self, delay: Duration) -> Result<(), SourceError> {
        if delay.is_zero() {
            return requeue(&self.delivery)
                .await
                .map(drop)
                .map_err(|e| self.error("requeueing", e));
        }
        // Held for the delay, then requeued: the consumer's slot is free
        // meanwhile; the prefetch counts it until it goes back.
        self.held.fetch_add(1, Ordering::Relaxed);
        let (delivery, held) = (self.delivery.clone(), self.held.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = requeue(&delivery).await {
                // The channel is gone: the broker requeued it already.
                tracing::warn!(error = %e, "requeueing a delivery put off");
            }
            held.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(())
    }

    /// Published to the default exchange with `to` as its routing key (the
    /// queue of that name), persistent and mandatory, and the broker's
    /// confirm awaited: a queue that does not exist is an error.
    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        let what = format!("forwarding to queue {to}");
        let mut table = self
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        for (name, value) in headers {
            table.insert((*name).into(), AMQPValue::LongString(value.as_str().into()));
        }
        // What describes the message is kept; not its expiration (the copy
        // waits until read) nor its user-id (the broker checks it against
        // this connection's user).
        let own = &self.delivery.properties;
        let mut properties = BasicProperties::default()
            .with_headers(table)
            .with_delivery_mode(2);
        if let Some(v) = own.content_type() {
            properties = properties.with_content_type(v.clone());
        }
        if let Some(v) = own.content_encoding() {
            properties = properties.with_content_encoding(v.clone());
        }
        if let Some(v) = own.message_id() {
            properties = properties.with_message_id(v.clone());
        }
        if let Some(v) = own.correlation_id() {
            properties = properties.with_correlation_id(v.clone());
        }
        if let Some(v) = own.timestamp() {
            properties = properties.with_timestamp(*v);
        }
        if let Some(v) = own.kind() {
            properties = properties.with_type(v.clone());
        }
        if let Some(v) = own.app_id() {
            properties = properties.with_app_id(v.clone());
        }
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirmed = self
            .publisher
            .basic_publish(
                "".into(),
                to.into(),
                options,
                &self.delivery.data,
                properties,
            )
            .await
            .map_err(|e| self.error(&what, e))?
            .await
            .map_err(|e| self.error(&what, e))?;
        match confirmed {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(_)) => Err(self.error(&what, "no queue of that name")),
            Confirmation::Nack(_) => Err(self.error(&what, "the broker refused it")),
            Confirmation::NotRequested => Err(self.error(&what, "no confirm was asked for")),
        }
    }

    async fn term(&self) -> Result<(), SourceError> {
        // Not requeued: dead-lettered where the queue names an exchange
        // for it, dropped otherwise.
        self.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false })
            .await
            .map(drop)
            .map_err(|e| self.error("rejecting", e))
    }
}

async fn requeue(delivery: &lapin::message::Delivery) -> lapin::Result<bool> {
    delivery
        .acker
        .nack(BasicNackOptions {
            multiple: false,
            requeue: true,
        })
        .await
}
