//! One Kafka message as a [`Delivery`]: settled by moving its partition's
//! position (`offsets.rs`), put off in memory, copied by producing it to
//! another topic. Each verb acts only while the partition is still held
//! under the assignment the message was given out in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_core::text::escaped;
use rdkafka::Message;
use rdkafka::message::{Header, Headers, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureRecord;

use super::offsets::Partition;
use super::{PutOff, Shared};
use crate::broker::{Delivery, SourceError};

/// How long a copy waits for the cluster to hold it.
const PRODUCE_WAIT: Duration = Duration::from_secs(10);

/// How long a refused message whose copy failed is put off.
const RETRY_COPY: Duration = Duration::from_secs(1);

/// A copy that failed: why, and the cluster's code for it when it gave
/// one.
struct CopyFailed {
    error: SourceError,
    code: Option<rdkafka::types::RDKafkaErrorCode>,
}

/// Whether a copy's failure is the cluster refusing that copy for good
/// (its size, a topic that does not exist, the right to write there, a
/// producer failed for good): trying again would fail again, and the
/// message would hold its partition back for ever.
fn refused_for_good(e: &CopyFailed) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        e.code,
        Some(
            Code::MessageSizeTooLarge
                | Code::InvalidMessageSize
                | Code::InvalidMessage
                | Code::InvalidRecord
                | Code::MessageBatchTooLarge
                | Code::InvalidTopic
                | Code::TopicAuthorizationFailed
                | Code::ClusterAuthorizationFailed
                | Code::PolicyViolation
                | Code::UnknownTopicOrPartition
                | Code::UnknownTopic
                | Code::Fatal
        )
    )
}

pub(super) struct KafkaDelivery {
    shared: Arc<Shared>,
    partition: Partition,
    serial: u64,
    message: OwnedMessage,
    delivered: u64,
}

impl KafkaDelivery {
    pub(super) fn new(
        shared: Arc<Shared>,
        partition: Partition,
        serial: u64,
        message: OwnedMessage,
        delivered: u64,
    ) -> Self {
        KafkaDelivery {
            shared,
            partition,
            serial,
            message,
            delivered,
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(format!("{what} {}", self.describe()), e)
    }

    fn revoked(&self, what: &str) -> SourceError {
        self.error(
            what,
            "its partition was revoked (a rebalance gave it to another member of the group, \
             which reads it again from the committed position and is answered from the store): \
             left to its new owner",
        )
    }

    fn held(&self) -> bool {
        self.shared.offsets().holds(&self.partition, self.serial)
    }

    /// Produces a copy of the message (its key, body and headers, with
    /// `extra` added) to `to`, once the cluster holds it.
    async fn copy_to(&self, to: &str, extra: &[(&str, String)]) -> Result<(), CopyFailed> {
        let what = format!("copying to {to}");
        if !self.held() {
            return Err(CopyFailed {
                error: self.revoked(&what),
                code: None,
            });
        }
        let mut headers = OwnedHeaders::new();
        if let Some(own) = self.message.headers() {
            for header in own.iter() {
                headers = headers.insert(Header {
                    key: header.key,
                    value: header.value,
                });
            }
        }
        for (key, value) in extra {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(to).payload(self.body()).headers(headers);
        if let Some(key) = self.message.key() {
            record = record.key(key);
        }
        self.shared
            .producer
            .send(record, PRODUCE_WAIT)
            .await
            .map(drop)
            .map_err(|(e, _)| CopyFailed {
                code: e.rdkafka_error_code(),
                error: self.error(&what, e),
            })
    }

    fn put_off(&self, delay: Duration, what: &str) -> Result<(), SourceError> {
        let mut put_off = self.shared.put_off();
        if !self.held() {
            return Err(self.revoked(what));
        }
        put_off.push_back(PutOff {
            due: Instant::now() + delay,
            partition: self.partition.clone(),
            serial: self.serial,
            message: self.message.clone(),
            delivered: self.delivered,
        });
        Ok(())
    }

    fn settle(&self, what: &str) -> Result<(), SourceError> {
        let offset = self.message.offset();
        match self
            .shared
            .offsets()
            .settle(&self.partition, self.serial, offset)
        {
            true => Ok(()),
            false => Err(self.revoked(what)),
        }
    }
}

#[async_trait]
impl Delivery for KafkaDelivery {
    fn body(&self) -> &[u8] {
        self.message.payload().unwrap_or_default()
    }

    fn describe(&self) -> String {
        format!(
            "{} partition {} offset {}",
            escaped(&self.partition.0),
            self.partition.1,
            self.message.offset()
        )
    }

    fn delivered(&self) -> u64 {
        self.delivered
    }

    async fn ack(&self) -> Result<(), SourceError> {
        self.settle("acknowledging")
    }

    /// Kept here and given out again when due, holding its partition's
    /// position back meanwhile.
    async fn nack(&self, delay: Duration) -> Result<(), SourceError> {
        self.put_off(delay, "putting off")
    }

    /// Copied to the dead-letter topic first, when there is one. A copy
    /// the cluster refuses for good (too large for the topic, not allowed)
    /// is not tried again: the position moves past the message anyway,
    /// and the warning names it. A copy that fails otherwise (the cluster
    /// away) puts the message off, to be refused and copied again.
    async fn term(&self) -> Result<(), SourceError> {
        if let Some(dead) = &self.shared.dead_letter {
            let copied = self
                .copy_to(dead, &[("idem-delivery", self.describe())])
                .await;
            if let Err(failed) = copied {
                if !self.held() {
                    return Err(failed.error);
                }
                let for_good = refused_for_good(&failed);
                let SourceError { context, detail } = failed.error;
                if for_good {
                    self.settle("refusing")?;
                    return Err(SourceError::new(
                        context,
                        format!("{detail}; not copied, and past it all the same"),
                    ));
                }
                self.put_off(RETRY_COPY, "putting off")?;
                return Err(SourceError::new(
                    context,
                    format!("{detail}; put off, to be copied when it comes back"),
                ));
            }
        }
        self.settle("refusing")
    }

    async fn forward(&self, to: &str, headers: &[(&str, String)]) -> Result<(), SourceError> {
        self.copy_to(to, headers)
            .await
            .map_err(|failed| failed.error)
    }
}
