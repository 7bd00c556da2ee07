//! How much `idem::consume` costs over a bare consumer that only
//! acknowledges, on the machine's real brokers: the benchmark behind the
//! consumer figures in docs/benchmarks.md.
//!
//! ```text
//! cargo run --release -p idem-host --features nats,amqp,redis,kafka --example consume_throughput -- \
//!     POLICY.wasm [MESSAGES] [CONCURRENCY] [ROUNDS]
//! ```
//!
//! POLICY is the `billing-charge` component. For each broker (NATS
//! JetStream at `IDEM_BENCH_NATS_URL`, default `nats://127.0.0.1:4222`;
//! RabbitMQ at `IDEM_BENCH_AMQP_URL`, default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`; Redis Streams at
//! `IDEM_BENCH_REDIS_URL`, default `redis://127.0.0.1:6379`; Kafka at
//! `IDEM_BENCH_KAFKA_URL`, default `mock`: librdkafka's mock cluster of
//! three brokers in this process, as no Kafka is packaged here; any skipped
//! when set to `off`) and each round, MESSAGES distinct charges (default 10,000) are
//! published twice, to a place of their own each time: one copy read by a
//! bare consumer (fetch a batch of CONCURRENCY, default 8, acknowledge
//! them all at once), the other by `consume` (each message's key derived,
//! claimed and completed in a fresh SQLite store, an effect that does
//! nothing, then acknowledged; on JetStream through a standing pull of
//! CONCURRENCY messages, as `idem consume` reads, and again with a pull
//! request per fetch), interleaved. It prints each rate and their
//! ratio per round, and the median ratio. `IDEM_BENCH_STORE=memory` puts
//! idem's records in memory instead (where the time goes without the
//! disk); a `postgres://…` URL there uses PostgreSQL (its records are
//! told apart by each round's invoice ids).
//!
//! Beside each rate it prints what a message cost this process: CPU time
//! (user and system, every thread) and context switches (voluntary and
//! not), from `getrusage`. A rate moves with whatever else the machine
//! runs; those two move much less, so they compare builds on a busy machine
//! (the brokers' own CPU is not counted, but for Kafka's mock cluster,
//! which runs in this process on both sides).

use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use idem::broker::MessageSource;
use idem::broker::amqp::AmqpSource;
use idem::broker::kafka::KafkaSource;
use idem::broker::nats::JetStreamSource;
use idem::broker::redis::{DEFAULT_FIELD, RedisStreamSource};
use idem::consume::{ConsumeOptions, consume};
use idem::core::Operation;
use idem::engine::{Engine, EngineOptions, ExecContext};
use idem::job::{EffectOutcome, JobEvent};
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig};
use idem::store::{Outcome, StoreOptions};

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let policy = PathBuf::from(
        args.next()
            .ok_or("usage: consume_throughput POLICY.wasm [MESSAGES] [CONCURRENCY] [ROUNDS]")?,
    );
    let messages: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let concurrency: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let nats = std::env::var("IDEM_BENCH_NATS_URL").unwrap_or("nats://127.0.0.1:4222".into());
    let amqp = std::env::var("IDEM_BENCH_AMQP_URL")
        .unwrap_or("amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let redis = std::env::var("IDEM_BENCH_REDIS_URL").unwrap_or("redis://127.0.0.1:6379".into());
    let kafka = match std::env::var("IDEM_BENCH_KAFKA_URL").as_deref() {
        Ok("off") => "off".to_string(),
        Ok(url) if url != "mock" => url.to_string(),
        _ => kafka::mock_cluster()?,
    };
    println!(
        "{messages} messages, {concurrency} at once, {rounds} rounds, idem's store: {}",
        std::env::var("IDEM_BENCH_STORE").unwrap_or("sqlite (a fresh file per round)".into())
    );
    for (broker, url) in [
        ("NATS JetStream", nats),
        ("RabbitMQ", amqp),
        ("Redis Streams", redis),
        ("Kafka", kafka),
    ] {
        if url == "off" {
            continue;
        }
        let mut ratios = Vec::new();
        for round in 1..=rounds {
            let bare = {
                let place = Place::create(&url, "bare", messages).await?;
                let mut source = place.source(concurrency, false).await?;
                let (started, before) = (Instant::now(), Usage::now());
                bare_consumer(&mut *source, messages, concurrency).await?;
                let rate = messages as f64 / started.elapsed().as_secs_f64();
                let cost = Usage::now().per_message(before, messages);
                place.remove().await;
                (rate, cost)
            };
            let (bare, bare_cost) = bare;
            let (with_idem, idem_cost) =
                idem_round(&policy, &url, messages, concurrency, true).await?;
            let ratio = with_idem / bare;
            ratios.push(ratio);
            // On JetStream, idem without the standing pull too (a pull
            // request per fetch), as the consumer read before it had one.
            let per_fetch = if url.starts_with("nats") {
                let (rate, _) = idem_round(&policy, &url, messages, concurrency, false).await?;
                format!(
                    ", idem with a pull per fetch {rate:.0} msg/s (÷ bare {:.2})",
                    rate / bare
                )
            } else {
                String::new()
            };
            println!(
                "{broker} round {round}: bare {bare:.0} msg/s, idem {with_idem:.0} msg/s, idem ÷ bare {ratio:.2}{per_fetch}"
            );
            println!("  a message's cost: bare {bare_cost}; idem {idem_cost}");
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "{broker}: median idem ÷ bare {:.2}",
            ratios[ratios.len() / 2]
        );
    }
    Ok(())
}

/// One round of idem's consumer over a place of its own: messages/s, and
/// what a message cost this process.
async fn idem_round(
    policy: &LoadedPolicy,
    url: &str,
    messages: usize,
    concurrency: usize,
    read_ahead: bool,
) -> Result<(f64, Cost), Error> {
    let place = Place::create(url, "idem", messages).await?;
    let mut source = place.source(concurrency, read_ahead).await?;
    let dir = tempfile::tempdir()?;
    let (started, before) = (Instant::now(), Usage::now());
    let executed = idem_consumer(policy, &dir, &mut *source, messages, concurrency).await?;
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    let cost = Usage::now().per_message(before, messages);
    place.remove().await;
    if executed != messages as u64 {
        return Err(format!("idem executed {executed} of {messages}").into());
    }
    Ok((rate, cost))
}

/// This process's CPU time and context switches so far (every thread).
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    switches: i64,
}

/// What one message cost, between two [`Usage`]s.
struct Cost {
    cpu: Duration,
    switches: f64,
}

impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let micros = self.cpu.as_secs_f64() * 1e6;
        write!(f, "{micros:.0} µs CPU, {:.2} switches", self.switches)
    }
}

impl Usage {
    fn now() -> Usage {
        // SAFETY: getrusage fills the struct it is given; a zeroed rusage
        // is a valid value of that plain C struct.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Usage {
            cpu: time(usage.ru_utime) + time(usage.ru_stime),
            switches: usage.ru_nvcsw + usage.ru_nivcsw,
        }
    }

    fn per_message(self, before: Usage, messages: usize) -> Cost {
        let n = messages.max(1);
        Cost {
            cpu: self.cpu.saturating_sub(before.cpu) / n as u32,
            switches: (self.switches - before.switches) as f64 / n as f64,
        }
    }
}

/// Fetches batches and acknowledges each batch at once, until `messages`
/// are acknowledged.
async fn bare_consumer(
    source: &mut dyn MessageSource,
    messages: usize,
    batch: usize,
) -> Result<(), Error> {
    let mut acked = 0;
    while acked < messages {
        let deliveries = source.fetch(batch, Duration::from_secs(5)).await?;
        if deliveries.is_empty() {
            return Err(format!("only {acked} of {messages} came").into());
        }
        for done in join_all(deliveries.iter().map(|d| d.ack())).await {
            done?;
        }
        acked += deliveries.len();
    }
    Ok(())
}

/// `consume` with an effect that does nothing, until `messages` are
/// settled; how many were executed.
async fn idem_consumer(
    policy: &LoadedPolicy,
    dir: &tempfile::TempDir,
    source: &mut dyn MessageSource,
    messages: usize,
    concurrency: usize,
) -> Result<u64, Error> {
    let url = match std::env::var("IDEM_BENCH_STORE").as_deref() {
        Ok("memory") => "memory:".to_string(),
        Ok(url) if url.starts_with("postgres") => url.to_string(),
        _ => format!("sqlite:{}", dir.path().join("idem.db").display()),
    };
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    let engine = Arc::new(Engine::new(policy.clone(), store, EngineOptions::default()));
    let options = ConsumeOptions {
        concurrency,
        stop_after: Some(messages as u64),
        ..ConsumeOptions::default()
    };
    let effect = Arc::new(|_op: Operation, _ctx: ExecContext| async {
        EffectOutcome::Completed(Outcome::new(0, "done"))
    });
    let observer = Arc::new(|event: JobEvent<'_>| {
        if let JobEvent::Warning(text) = event {
            eprintln!("{text}");
        }
    });
    let summary = consume(
        engine.clone(),
        source,
        effect,
        options,
        std::future::pending(),
        observer,
    )
    .await?;
    engine.flush_log().await;
    Ok(summary.executed)
}

fn charge(n: usize, run: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{n}","billing_period":"2026-11","invoice_id":"{run}-{n}","amount":"100","currency":"EUR"}}}}"#
    )
}

/// A stream or a queue of its own, holding `messages` charges.
enum Place {
    Nats {
        url: String,
        context: async_nats::jetstream::Context,
        name: String,
    },
    Rabbit {
        url: String,
        channel: lapin::Channel,
        _connection: lapin::Connection,
        name: String,
    },
    Redis {
        url: String,
        connection: redis::aio::MultiplexedConnection,
        name: String,
    },
    Kafka {
        url: String,
        name: String,
    },
}

impl Place {
    async fn create(url: &str, what: &str, messages: usize) -> Result<Place, Error> {
        let name = format!(
            "bench_{what}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        );
        let bodies: Vec<String> = (0..messages).map(|n| charge(n, &name)).collect();
        if url.starts_with("nats://") {
            let context = async_nats::jetstream::new(async_nats::connect(url).await?);
            let subject = format!("bench.{name}");
            context
                .create_stream(async_nats::jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await?;
            for window in bodies.chunks(500) {
                let mut acks = Vec::new();
                for body in window {
                    acks.push(
                        context
                            .publish(subject.clone(), body.clone().into())
                            .await?,
                    );
                }
                for stored in join_all(acks.into_iter().map(IntoFuture::into_future)).await {
                    stored?;
                }
            }
            return Ok(Place::Nats {
                url: url.to_string(),
                context,
                name,
            });
        }
        if url.starts_with("kafka://") {
            kafka::publish(url, &name, &bodies)?;
            return Ok(Place::Kafka {
                url: url.to_string(),
                name,
            });
        }
        if url.starts_with("redis://") {
            let client = redis::Client::open(url)?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            for window in bodies.chunks(500) {
                let mut pipe = redis::pipe();
                for body in window {
                    pipe.cmd("XADD")
                        .arg(&name)
                        .arg("*")
                        .arg(DEFAULT_FIELD)
                        .arg(body)
                        .ignore();
                }
                pipe.query_async::<()>(&mut connection).await?;
            }
            return Ok(Place::Redis {
                url: url.to_string(),
                connection,
                name,
            });
        }
        use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
        let connection =
            lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        channel
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions::durable(),
                lapin::types::FieldTable::default(),
            )
            .await?;
        for window in bodies.chunks(500) {
            let mut confirms = Vec::new();
            for body in window {
                confirms.push(
                    channel
                        .basic_publish(
                            "".into(),
                            name.as_str().into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            lapin::BasicProperties::default().with_delivery_mode(2),
                        )
                        .await?,
                );
            }
            for confirmed in join_all(confirms).await {
                if !confirmed?.is_ack() {
                    return Err("the broker refused a message".into());
                }
            }
        }
        Ok(Place::Rabbit {
            url: url.to_string(),
            channel,
            _connection: connection,
            name,
        })
    }

    /// A source reading the place; on JetStream with a standing pull of
    /// `concurrency` messages when `read_ahead` (as `idem consume` reads).
    async fn source(
        &self,
        concurrency: usize,
        read_ahead: bool,
    ) -> Result<Box<dyn MessageSource>, Error> {
        Ok(match self {
            Place::Nats { url, name, .. } => {
                let source =
                    JetStreamSource::connect(url, name, "bench", None, Duration::from_secs(30))
                        .await?;
                Box::new(if read_ahead {
                    source.read_ahead(concurrency)
                } else {
                    source
                })
            }
            Place::Rabbit { url, name, .. } => {
                let prefetch = u16::try_from(concurrency * 2).unwrap_or(u16::MAX);
                Box::new(AmqpSource::connect(url, name, prefetch).await?)
            }
            Place::Redis { url, name, .. } => Box::new(
                RedisStreamSource::connect(
                    url,
                    name,
                    "bench",
                    DEFAULT_FIELD,
                    Duration::from_secs(30),
                    None,
                )
                .await?,
            ),
            Place::Kafka { url, name } => Box::new(
                KafkaSource::connect(url, name, name, Duration::from_secs(30), None).await?,
            ),
        })
    }

    async fn remove(self) {
        match self {
            Place::Nats { context, name, .. } => {
                let _ = context.delete_stream(&name).await;
            }
            Place::Rabbit { channel, name, .. } => {
                let _ = channel
                    .queue_delete(name.as_str().into(), Default::default())
                    .await;
            }
            Place::Redis {
                mut connection,
                name,
                ..
            } => {
                let _: Result<u64, _> = redis::cmd("DEL")
                    .arg(&name)
                    .query_async(&mut connection)
                    .await;
            }
            // A topic per round; the mock cluster goes with the process.
            Place::Kafka { .. } => {}
        }
    }
}

/// Kafka's side: librdkafka's mock cluster, and publishing to a topic.
mod kafka {
    use std::sync::OnceLock;
    use std::time::Duration;

    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    use super::Error;

    type Publisher = ThreadedProducer<DefaultProducerContext>;

    /// The mock cluster's host (it lives as long as this client) or a
    /// producer to a real cluster, by URL.
    static PUBLISHERS: OnceLock<std::sync::Mutex<Vec<(String, Publisher)>>> = OnceLock::new();

    fn publishers() -> std::sync::MutexGuard<'static, Vec<(String, Publisher)>> {
        PUBLISHERS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a mock cluster of three brokers: its `kafka://` URL.
    pub fn mock_cluster() -> Result<String, Error> {
        let host: Publisher = ClientConfig::new()
            .set("test.mock.num.brokers", "3")
            .create()?;
        let servers = host
            .client()
            .mock_cluster()
            .ok_or("no mock cluster")?
            .bootstrap_servers();
        // SAFETY: the mock cluster's handle is valid while `host` lives
        // (kept for the process's life below).
        unsafe {
            let handle =
                rdkafka::bindings::rd_kafka_handle_mock_cluster(host.client().native_ptr());
            rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(handle, 0);
        }
        let url = format!("kafka://{servers}");
        publishers().push((url.clone(), host));
        Ok(url)
    }

    /// Publishes `bodies` to `topic` (four partitions on the mock cluster)
    /// and waits until the cluster holds them.
    pub fn publish(url: &str, topic: &str, bodies: &[String]) -> Result<(), Error> {
        let mut publishers = publishers();
        if !publishers.iter().any(|(u, _)| u == url) {
            let servers = url.trim_start_matches("kafka://");
            let producer: Publisher = ClientConfig::new()
                .set("bootstrap.servers", servers)
                .create()?;
            publishers.push((url.to_string(), producer));
        }
        let (_, publisher) = publishers.iter().find(|(u, _)| u == url).expect("added");
        if let Some(mock) = publisher.client().mock_cluster() {
            mock.create_topic(topic, 4, 1)?;
        }
        for body in bodies {
            let mut record = BaseRecord::<(), _>::to(topic).payload(body);
            // A full queue empties as the cluster takes the messages.
            while let Err((_, back)) = publisher.send(record) {
                std::thread::sleep(Duration::from_millis(5));
                record = back;
            }
        }
        publisher.flush(Duration::from_secs(60))?;
        Ok(())
    }
}
