//! Brokers, as [`crate::consume`] reads them: the message-source port
//! (what a broker gives a consumer: deliveries, each to be acknowledged,
//! put off or terminated) and one client per broker behind a cargo
//! feature: `nats.rs` (feature `nats`) JetStream's, `amqp.rs` (feature
//! `amqp`) RabbitMQ's, `redis/` (feature `redis`) Redis Streams', `kafka/`
//! (feature `kafka`) Kafka's. A broker knows nothing of the engine or the run
//! loop, as a store knows nothing of wasm: the consumer maps an
//! operation's end onto [`Delivery`]'s verbs, and the next broker is one
//! more file here.

#[cfg(feature = "amqp")]
pub mod amqp;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "redis")]
pub mod redis;

use std::time::Duration;

use async_trait::async_trait;

/// How long a message another member owns is put off on a broker that
/// keeps it meanwhile (JetStream): the broker, not the consumer, chooses
/// who gets it next, so it may come back here; the delay bounds that churn
/// while its owner is away.
pub const NOT_OWNED_DELAY: Duration = Duration::from_secs(1);

/// A broker's failure: fetching, or acknowledging.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {detail}")]
pub struct SourceError {
    /// What was being done ("fetching from stream ORDERS").
    pub context: String,
    /// What the broker's client said.
    pub detail: String,
}

impl SourceError {
    /// An error of `context` carrying `detail`.
    pub fn new(context: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        SourceError {
            context: context.into(),
            detail: detail.to_string(),
        }
    }
}

/// One delivery of one message. The consumer settles every delivery it
/// takes exactly once: [`Delivery::ack`] once the operation's end is
/// recorded (or it was a duplicate), [`Delivery::nack`] to have it
/// delivered again later, [`Delivery::term`] for a message no delivery can
/// ever process (refused for good: not an operation, the policy's refusal,
/// a conflict).
#[async_trait]
pub trait Delivery: Send + Sync {
    /// The message body.
    fn body(&self) -> &[u8];

    /// Where it came from, for messages about it ("ORDERS #42"); what the
    /// publisher chose (a message id, a subject) escaped
    /// ([`idem_core::text::escaped`]).
    fn describe(&self) -> String;

    /// How many times the broker has delivered it (1 the first time).
    fn delivered(&self) -> u64;

    /// Done with it: the broker forgets it.
    async fn ack(&self) -> Result<(), SourceError>;

    /// Deliver it again after `delay`.
    async fn nack(&self, delay: Duration) -> Result<(), SourceError>;

    /// Never deliver it again, without it having been processed (RabbitMQ:
    /// rejected without requeue, so a dead-letter exchange gets it).
    async fn term(&self) -> Result<(), SourceError>;

    /// Publishes a copy of the message, with `headers` added to its own,
    /// to `to` (a subject on NATS, where a stream must capture it; a queue
    /// on RabbitMQ), and returns once the broker holds it. The delivery
    /// itself is still to be settled. Default: this broker cannot.
    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        let _ = headers;
        Err(SourceError::new(
            format!("forwarding {} to {to}", self.describe()),
            "this message source cannot forward messages",
        ))
    }

    /// Still working on it: the broker's redelivery timer starts again
    /// (a JetStream `+WPI`). Default: nothing to say.
    async fn in_progress(&self) -> Result<(), SourceError> {
        Ok(())
    }
}

/// A broker's messages, fetched in batches.
#[async_trait]
pub trait MessageSource: Send {
    /// Up to `max` deliveries, waiting up to `wait` for the first; empty
    /// when none came in time.
    async fn fetch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Box<dyn Delivery>>, SourceError>;

    /// What it reads from ("nats://127.0.0.1:4222 stream ORDERS consumer billing").
    fn describe(&self) -> String;

    /// How often a delivery whose effect is running is reported in
    /// progress ([`Delivery::in_progress`]), so that the broker does not
    /// give it to another consumer meanwhile; `None`: never (the broker
    /// has no timer, or no way to restart it). Default: never.
    fn progress_every(&self) -> Option<Duration> {
        None
    }

    /// The consumer stops: hand back at once what was fetched ahead and
    /// not yet given out (rather than leave it to the broker's redelivery
    /// timer). Default: nothing is held ahead.
    async fn give_back(&mut self) {}

    /// How long a message another member owns is put off (partitioned
    /// ownership), for the broker to deliver it elsewhere. Default:
    /// [`NOT_OWNED_DELAY`], on a broker that keeps it meanwhile.
    fn not_owned_delay(&self) -> Duration {
        NOT_OWNED_DELAY
    }

    /// Deliveries put off ([`Delivery::nack`]) that this process still
    /// holds, to hand back after their delay (a broker with no delayed
    /// redelivery of its own). A consumer that stops when idle waits for
    /// them to go back. Default: none.
    fn held(&self) -> usize {
        0
    }

    /// How many messages the broker holds unsettled under this consumer's
    /// name: given out (to this process, a peer, or one that crashed) and
    /// not acknowledged, or not yet delivered; a consumer that stops when
    /// idle waits for them, and a source may take the question as a sign
    /// that its own reading has stalled. `None`: the
    /// broker keeps no such count, because it gives a closed connection's
    /// deliveries back at once (RabbitMQ). Default: `None`.
    async fn unacknowledged(&mut self) -> Result<Option<u64>, SourceError> {
        Ok(None)
    }

    /// The longest a delivery given out and not settled stays away before
    /// the broker delivers it again (JetStream's ack wait): how long a
    /// consumer that stops when idle waits for [`MessageSource::unacknowledged`]
    /// deliveries. Default: zero.
    fn redelivery_wait(&self) -> Duration {
        Duration::ZERO
    }
}

/// `url` with any password replaced, for messages: a broker's URL may
/// carry its credentials (`amqp://user:pass@…`, `nats://user:pass@…`).
#[cfg(any(feature = "nats", feature = "amqp", feature = "redis"))]
fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            match user.split_once(':') {
                Some((name, _)) => format!("{}{name}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(all(test, any(feature = "nats", feature = "amqp", feature = "redis")))]
mod tests {
    use super::without_password;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            without_password("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            without_password("amqp://127.0.0.1:5672"),
            "amqp://127.0.0.1:5672"
        );
        assert_eq!(
            without_password("amqp://guest@host/v"),
            "amqp://guest@host/v"
        );
        assert_eq!(
            without_password("nats://billing:s3cret@10.0.0.7:4222"),
            "nats://billing:***@10.0.0.7:4222"
        );
    }
}
