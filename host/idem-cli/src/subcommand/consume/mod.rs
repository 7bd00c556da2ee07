//! `idem consume`: exactly-once effects for the messages of a broker
//! (NATS JetStream, RabbitMQ, Redis Streams or Kafka). Each message is an operation in idem's
//! operation JSON, run through the policy and the store exactly as `idem
//! run` runs a line, by a command per message or by long-lived workers
//! (`--worker`); a delivery is acknowledged only once its end is recorded
//! (the library: `idem::consume`). SIGTERM or SIGINT stops fetching; what
//! runs finishes, is recorded and acknowledged.
//!
//! Exit status: 0; 69 when the store (or the broker) stayed unavailable
//! past `--store-outage`; 76 when deposed (`--shard`); 2 when no message
//! could run (the command cannot start, the policy is not registered, the
//! store failed for good: the summary says why); 1 when `--stop-when-idle`
//! left deliveries of its consumer unacknowledged (named on stderr).
//! A message refused for good is not a failure of the consumer: it is
//! terminated, named on stderr and counted (`refused`).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use idem::broker::MessageSource;
use idem::consume::{ConsumeOptions, consume};
use idem::engine::Engine;
use idem::job::{Effect, End, JobError, JobEvent, Summary};
use idem_core::text::escaped;
use idem_serve::MetricsExport;

use super::run::print_waiting;
use super::serve::shutdown_signal;
use crate::command_effect::CommandEffect;
use crate::exit::{self, Failure};
use crate::policy_args::PolicyArgs;
use crate::run_flags::{PartitionFlags, RunFlags};
use crate::shown::tell;
use crate::store_args::{StoreArgs, runtime};
use broker::Broker;

mod broker;

/// `idem consume`'s flags.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The broker: `nats://HOST:PORT` (NATS with JetStream; --stream and
    /// --consumer), `amqp://USER:PASS@HOST:PORT/VHOST` (RabbitMQ; --queue)
    /// `redis://[USER:PASS@]HOST:PORT[/DB]` (Redis Streams; --stream and
    /// --consumer) or `kafka://HOST:PORT[,HOST:PORT…]` (Kafka; --topic and
    /// --consumer).
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// JetStream: the stream to read (it must exist). Redis: the stream
    /// (created with the group when it does not exist).
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// Kafka: the topic to read (the group starts at its beginning when it
    /// has committed nothing).
    #[arg(long, value_name = "NAME")]
    pub topic: Option<String>,
    /// JetStream: the durable pull consumer to read through; created
    /// (explicit acknowledgement) when it does not exist. Redis: the
    /// consumer group, created at the start of the stream when it does not
    /// exist (each process reads as a consumer of its own within it).
    /// Kafka: the consumer group. Consumers sharing one name share its
    /// messages.
    #[arg(long, value_name = "NAME")]
    pub consumer: Option<String>,
    /// JetStream: only the subjects matching this filter (when the consumer
    /// is created).
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// JetStream: how long a delivery not acknowledged waits before the
    /// broker gives it to another consumer (when the consumer is created),
    /// e.g. `30s`. Redis: how long an entry stays pending before another
    /// consumer of the group takes it over (`XAUTOCLAIM`); a running effect
    /// keeps its entry by resetting that every third of it. Kafka: the
    /// session timeout, after which a consumer not heard from (crashed,
    /// paused) loses its partitions to the others; a live consumer keeps
    /// them however long an effect runs.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "30s")]
    pub ack_wait: Duration,
    /// Redis: the entry field that holds the operation JSON (an entry
    /// without it is refused).
    #[arg(long, value_name = "NAME")]
    pub operation_field: Option<String>,
    /// Redis: copy each entry refused for good to this stream (with the
    /// field `idem-delivery` naming where it came from) before
    /// acknowledging it. Kafka: produce each message refused for good to
    /// this topic (with the header `idem-delivery`) before committing past
    /// it.
    #[arg(long, value_name = "STREAM|TOPIC")]
    pub dead_letter: Option<String>,
    /// RabbitMQ: the queue to consume (it must exist). Consumers of one
    /// queue share its messages.
    #[arg(long, value_name = "NAME")]
    pub queue: Option<String>,
    /// RabbitMQ: how many deliveries may be unacknowledged at once
    /// (default: twice --concurrency). Deliveries put off count until
    /// they go back.
    #[arg(long, value_name = "N")]
    pub prefetch: Option<u16>,
    /// Forward a message whose lapsed claim the policy sends to review to
    /// this subject (NATS; a stream must capture it), queue (RabbitMQ; it
    /// must exist), stream (Redis) or topic (Kafka) before acknowledging it, with headers naming its record
    /// (idem-namespace, idem-key), why (idem-reason) and where it came from
    /// (idem-delivery). Without it the message is acknowledged; its record
    /// waits in `idem review` either way.
    #[arg(long, value_name = "SUBJECT|QUEUE|STREAM|TOPIC")]
    pub review_to: Option<String>,
    /// How many messages' effects run at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub concurrency: usize,
    /// Stop after settling N deliveries.
    #[arg(long, value_name = "N")]
    pub max_messages: Option<u64>,
    /// Stop once no message has come for this long (e.g. `5s`): drain a
    /// queue and exit, as a batch job would.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub stop_when_idle: Option<Duration>,
    #[command(flatten)]
    pub run: RunFlags,
    #[command(flatten)]
    pub partition: PartitionFlags,
    /// Serve the consumer's metrics at http://ADDR/metrics while it runs,
    /// in Prometheus's text format (e.g. `127.0.0.1:9464`): the engine's
    /// and the store's, the review queue, and how deliveries ended
    /// (`idem_consume_deliveries_total{end}`). No token: bind it where only
    /// your Prometheus reaches.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Start CMD once per --concurrency slot and feed it one operation per
    /// line (the worker protocol: docs/reference/worker-protocol.md),
    /// instead of starting CMD for each message.
    #[arg(long)]
    pub worker: bool,
    /// The command run for each message; it reads the operation on stdin
    /// (with --worker: the worker, fed every operation).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs `idem consume`.
pub fn run(args: ConsumeArgs) -> Result<u8, Failure> {
    if args.concurrency == 0 {
        return Err(Failure::input("--concurrency must be at least 1"));
    }
    if args.ack_wait.is_zero() {
        return Err(Failure::input("--ack-wait must be more than 0"));
    }
    if args
        .review_to
        .as_deref()
        .is_some_and(|to| to.trim().is_empty())
    {
        return Err(Failure::input(
            "--review-to needs a subject or a queue name",
        ));
    }
    let broker = Broker::of(&args)?;
    let policy = args.policy.load()?;
    args.run
        .check(&policy.limits().operation)
        .map_err(Failure::input)?;
    // The group defaults to the policy's namespace and the durable
    // consumer, apart from `idem run --shard`'s (a job of another shard
    // count would depose the consumers).
    let group = format!(
        "{}/consume/{}/{}",
        policy.info().namespace,
        args.stream.as_deref().unwrap_or_default(),
        args.consumer.as_deref().unwrap_or_default()
    );
    let ownership = args.partition.ownership(&group).map_err(Failure::input)?;
    let metrics = match args.metrics {
        Some(_) => Some(MetricsExport::install().map_err(Failure::input)?),
        None => None,
    };
    runtime()?.block_on(async {
        // A store still starting (a PostgreSQL restart) is waited for, as
        // `idem run` waits for it; past the budget, 69 and nothing read.
        let store = match args.store.open_riding_out(args.run.store_outage).await? {
            Ok(store) => store,
            Err(code) => return Ok(code),
        };
        let namespace = policy.info().namespace.clone();
        let engine = Arc::new(Engine::new(policy, store, args.run.engine_options()));
        if let (Some(export), Some(addr)) = (metrics, args.metrics) {
            serve_metrics(export, addr, engine.store().clone(), namespace).await?;
        }
        let mut source = broker
            .connect(&args)
            .await
            .map_err(|e| Failure::input(e.to_string()))?;
        let source = &mut *source;
        let options = ConsumeOptions {
            concurrency: args.concurrency,
            outage_budget: args.run.store_outage,
            stop_after: args.max_messages,
            stop_when_idle: args.stop_when_idle,
            review_to: args.review_to.clone(),
            ownership,
            run: args.run.run_context(),
            ..ConsumeOptions::default()
        };
        let effect = CommandEffect::new(
            &args.command,
            args.worker,
            args.concurrency,
            &args.run.permanent_exit_codes,
        );
        let summary = consume_with(&engine, source, effect.clone(), options).await;
        effect.shutdown().await;
        // Only joining the ownership group fails so, before any fetch.
        let summary = summary.map_err(Failure::input)?;
        engine.flush_log().await;
        print_summary(&summary, &args);
        Ok(if summary.outage.is_some() {
            exit::STORE_UNAVAILABLE
        } else if summary.deposed {
            exit::DEPOSED
        } else if summary.stopped.is_some() {
            exit::BAD_INPUT
        } else if summary.unacknowledged > 0 {
            exit::INCOMPLETE
        } else {
            exit::SUCCESS
        })
    })
}

async fn consume_with<E: Effect>(
    engine: &Arc<Engine>,
    source: &mut dyn MessageSource,
    effect: E,
    options: ConsumeOptions,
) -> Result<Summary, JobError> {
    // Counted whether or not a recorder is installed (without one, a
    // counter costs an atomic load).
    for end in End::ALL {
        metrics::counter!(DELIVERIES, "end" => end.summary_field()).absolute(0);
    }
    let observer = Arc::new(|event: JobEvent<'_>| match event {
        JobEvent::Ended { end, note } => {
            metrics::counter!(DELIVERIES, "end" => end.summary_field()).increment(1);
            if let Some(note) = note {
                eprintln!("idem: {note}");
            }
        }
        JobEvent::Warning(text) => eprintln!("idem: {text}"),
        _ => {}
    });
    consume(
        engine.clone(),
        source,
        Arc::new(effect),
        options,
        shutdown_signal(),
        observer,
    )
    .await
}

/// The counter of deliveries by how they ended.
const DELIVERIES: &str = "idem_consume_deliveries_total";

/// `--metrics ADDR`: binds now (a taken address stops the consumer before
/// it fetches anything) and serves until the process ends.
async fn serve_metrics(
    export: MetricsExport,
    addr: std::net::SocketAddr,
    store: idem::store::Store,
    namespace: String,
) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::input(format!("--metrics {addr}: cannot listen: {e}")))?;
    // The address bound (port 0 picks one), for whoever started us.
    if let Ok(bound) = listener.local_addr() {
        tell!("idem: metrics at http://{bound}/metrics");
    }
    tokio::spawn(async move {
        let never = std::future::pending::<()>();
        if let Err(e) = export.serve_alone(listener, store, namespace, never).await {
            tell!("idem: --metrics stopped serving: {e}");
        }
    });
    Ok(())
}

fn print_summary(summary: &Summary, args: &ConsumeArgs) {
    if args.json {
        println!("{}", serde_json::to_string(summary).unwrap_or_default());
        return;
    }
    print_waiting(summary, "of these deliveries", &args.store);
    println!(
        "deliveries: executed {}, replayed {}, in progress (put off) {}, conflicts {}, rejected {}, sent to review {}, failed {}, fenced {}, unknown {}, refused {}",
        summary.executed,
        summary.replayed,
        summary.in_progress,
        summary.conflicts,
        summary.rejected,
        summary.sent_to_review,
        summary.failed,
        summary.fenced,
        summary.unknown,
        summary.refused
    );
    if summary.policy_failed + summary.not_run > 0 {
        println!(
            "policy failed: {}, not run: {}",
            summary.policy_failed, summary.not_run
        );
    }
    if summary.not_owned + summary.stale_epoch > 0 {
        println!(
            "other members' (put off): {}, refused for a stale ownership epoch: {}",
            summary.not_owned, summary.stale_epoch
        );
    }
    if let Some(outage) = &summary.outage {
        println!("stopped: {}", escaped(&outage.error));
    }
    if let Some(why) = &summary.stopped {
        println!("stopped: {}", escaped(why));
    }
    if summary.unacknowledged > 0 {
        println!(
            "stopped when idle with {} deliveries unacknowledged",
            summary.unacknowledged
        );
    }
}
