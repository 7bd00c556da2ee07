//! Which broker `--from` names, with the flags that broker reads checked
//! (a flag of another broker is refused, naming it), and its source
//! connected.

use idem::broker::amqp::AmqpSource;
use idem::broker::kafka::KafkaSource;
use idem::broker::redis::RedisStreamSource;
use idem::broker::{MessageSource, SourceError, nats::JetStreamSource};

use super::ConsumeArgs;
use crate::exit::Failure;

/// The broker `--from` names, its own flags checked.
pub(super) enum Broker {
    JetStream { stream: String, consumer: String },
    Rabbit { queue: String, prefetch: u16 },
    Redis { stream: String, group: String },
    Kafka { topic: String, group: String },
}

impl Broker {
    pub(super) fn of(args: &ConsumeArgs) -> Result<Broker, Failure> {
        let scheme = args.from.split_once("://").map(|(s, _)| s);
        let jetstream = [("--subject", args.subject.is_some())];
        let streams = [
            ("--stream", args.stream.is_some()),
            ("--consumer", args.consumer.is_some()),
        ];
        let rabbit = [
            ("--queue", args.queue.is_some()),
            ("--prefetch", args.prefetch.is_some()),
        ];
        let redis = [
            ("--operation-field", args.operation_field.is_some()),
            ("--dead-letter", args.dead_letter.is_some()),
        ];
        let kafka = [("--topic", args.topic.is_some())];
        let refuse = |flags: &[(&str, bool)], broker: &str| match flags
            .iter()
            .find(|(_, given)| *given)
        {
            Some((flag, _)) => Err(Failure::input(format!("{flag} is not a flag for {broker}"))),
            None => Ok(()),
        };
        match scheme {
            Some("nats" | "tls") => {
                refuse(&rabbit, "NATS (--from nats://…)")?;
                refuse(&redis, "NATS (--from nats://…)")?;
                refuse(&kafka, "NATS (--from nats://…)")?;
                let (Some(stream), Some(consumer)) = (&args.stream, &args.consumer) else {
                    return Err(Failure::input(
                        "reading NATS JetStream needs --stream and --consumer",
                    ));
                };
                Ok(Broker::JetStream {
                    stream: stream.clone(),
                    consumer: consumer.clone(),
                })
            }
            Some("amqp") => {
                refuse(&jetstream, "RabbitMQ (--from amqp://…)")?;
                refuse(&streams, "RabbitMQ (--from amqp://…)")?;
                refuse(&redis, "RabbitMQ (--from amqp://…)")?;
                refuse(&kafka, "RabbitMQ (--from amqp://…)")?;
                let Some(queue) = &args.queue else {
                    return Err(Failure::input("reading RabbitMQ needs --queue"));
                };
                // Measured: a message put back on a shared queue comes back
                // to the consumer that returned it, so another member's
                // message never reaches its owner.
                if args.partition.shard.is_some() || args.partition.members.is_some() {
                    return Err(Failure::input(
                        "--shard and --members are for NATS: RabbitMQ hands a message put back \
                         on a queue to the consumer that returned it, so it would never reach its \
                         owner. Give each shard a queue of its own instead",
                    ));
                }
                let twice = u16::try_from(args.concurrency.saturating_mul(2)).unwrap_or(u16::MAX);
                let prefetch = args.prefetch.unwrap_or(twice);
                if prefetch == 0 {
                    return Err(Failure::input("--prefetch must be at least 1"));
                }
                Ok(Broker::Rabbit {
                    queue: queue.clone(),
                    prefetch,
                })
            }
            Some("redis") => {
                refuse(&jetstream, "Redis (--from redis://…)")?;
                refuse(&rabbit, "Redis (--from redis://…)")?;
                refuse(&kafka, "Redis (--from redis://…)")?;
                let (Some(stream), Some(group)) = (&args.stream, &args.consumer) else {
                    return Err(Failure::input(
                        "reading Redis Streams needs --stream and --consumer (the group)",
                    ));
                };
                // An entry put off stays pending with the consumer that put
                // it off, which reads it again: another member's would
                // never reach its owner.
                if args.partition.shard.is_some() || args.partition.members.is_some() {
                    return Err(Failure::input(
                        "--shard and --members are for NATS: a Redis entry put off comes back to \
                         the consumer that put it off, so it would never reach its owner. Give \
                         each shard a stream of its own instead",
                    ));
                }
                if args.operation_field.as_deref().is_some_and(str::is_empty) {
                    return Err(Failure::input("--operation-field needs a field name"));
                }
                Ok(Broker::Redis {
                    stream: stream.clone(),
                    group: group.clone(),
                })
            }
            Some("kafka") => {
                let on = "Kafka (--from kafka://…)";
                refuse(&jetstream, on)?;
                refuse(&rabbit, on)?;
                refuse(&[("--stream", args.stream.is_some())], on)?;
                refuse(&[("--operation-field", args.operation_field.is_some())], on)?;
                let (Some(topic), Some(group)) = (&args.topic, &args.consumer) else {
                    return Err(Failure::input(
                        "reading Kafka needs --topic and --consumer (the consumer group)",
                    ));
                };
                // Kafka's group assignment partitions the topic already:
                // each partition has one member at a time.
                if args.partition.shard.is_some() || args.partition.members.is_some() {
                    return Err(Failure::input(
                        "--shard and --members are for NATS: a Kafka consumer group gives each \
                         partition to one member already, and a message put off is held by the \
                         member that read it. Run more consumers of the group instead",
                    ));
                }
                Ok(Broker::Kafka {
                    topic: topic.clone(),
                    group: group.clone(),
                })
            }
            Some(tls @ ("amqps" | "rediss")) => Err(Failure::input(format!(
                "--from {}: {tls}:// (TLS) is not supported yet; use {}:// on a trusted network",
                args.from,
                tls.trim_end_matches('s')
            ))),
            _ => Err(Failure::input(format!(
                "--from {}: not a broker idem reads; expected nats://HOST:PORT, amqp://HOST:PORT, redis://HOST:PORT or kafka://HOST:PORT",
                args.from
            ))),
        }
    }

    pub(super) async fn connect(
        &self,
        args: &ConsumeArgs,
    ) -> Result<Box<dyn MessageSource>, SourceError> {
        Ok(match self {
            Broker::JetStream { stream, consumer } => Box::new(
                JetStreamSource::connect(
                    &args.from,
                    stream,
                    consumer,
                    args.subject.as_deref(),
                    args.ack_wait,
                )
                .await?
                .read_ahead(args.concurrency),
            ),
            Broker::Rabbit { queue, prefetch } => {
                Box::new(AmqpSource::connect(&args.from, queue, *prefetch).await?)
            }
            Broker::Redis { stream, group } => Box::new(
                RedisStreamSource::connect(
                    &args.from,
                    stream,
                    group,
                    args.operation_field
                        .as_deref()
                        .unwrap_or(idem::broker::redis::DEFAULT_FIELD),
                    args.ack_wait,
                    args.dead_letter.as_deref(),
                )
                .await?,
            ),
            Broker::Kafka { topic, group } => Box::new(
                KafkaSource::connect(
                    &args.from,
                    topic,
                    group,
                    args.ack_wait,
                    args.dead_letter.as_deref(),
                )
                .await?,
            ),
        })
    }
}
