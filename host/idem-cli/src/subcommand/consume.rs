//! `idem consume`: exactly-once effects for the messages of a broker
//! (NATS JetStream today). Each message is an operation in idem's
//! operation JSON, run through the policy and the store exactly as `idem
//! run` runs a line, by a command per message or by long-lived workers
//! (`--worker`); a delivery is acknowledged only once its end is recorded
//! (the library: `idem::consume`). SIGTERM or SIGINT stops fetching; what
//! runs finishes, is recorded and acknowledged.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use idem::consume::{ConsumeOptions, MessageSource, consume, nats::JetStreamSource};
use idem::engine::Engine;
use idem::job::{Effect, JobEvent, Summary};

use super::serve::shutdown_signal;
use crate::exit::{self, Failure};
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::store_args::{StoreArgs, runtime};
use crate::user_command::UserCommand;
use crate::worker::WorkerPool;

/// `idem consume`'s flags.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The broker: `nats://HOST:PORT` (NATS with JetStream).
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// The JetStream stream to read (it must exist).
    #[arg(long, value_name = "NAME")]
    pub stream: String,
    /// The durable pull consumer to read through; created (explicit
    /// acknowledgement) when it does not exist. Consumers sharing one name
    /// share its messages.
    #[arg(long, value_name = "NAME")]
    pub consumer: String,
    /// Only the subjects matching this filter (when the consumer is
    /// created).
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// How long a delivery not acknowledged waits before the broker gives
    /// it to another consumer (when the consumer is created), e.g. `30s`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "30s")]
    pub ack_wait: Duration,
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
    if !(args.from.starts_with("nats://") || args.from.starts_with("tls://")) {
        return Err(Failure::input(format!(
            "--from {}: not a broker idem reads; expected nats://HOST:PORT",
            args.from
        )));
    }
    let policy = args.policy.load()?;
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let engine = Arc::new(Engine::new(policy, store, args.run.engine_options()));
        let mut source = JetStreamSource::connect(
            &args.from,
            &args.stream,
            &args.consumer,
            args.subject.as_deref(),
            args.ack_wait,
        )
        .await
        .map_err(|e| Failure::input(e.to_string()))?;
        let options = ConsumeOptions {
            concurrency: args.concurrency,
            outage_budget: args.run.store_outage,
            stop_after: args.max_messages,
            stop_when_idle: args.stop_when_idle,
            ..ConsumeOptions::default()
        };
        let summary = if args.worker {
            let pool = WorkerPool::new(
                args.command.clone(),
                args.concurrency,
                args.run.permanent_exit_codes.clone(),
            );
            let summary = consume_with(&engine, &mut source, pool.clone(), options).await;
            for complaint in pool.shutdown().await {
                eprintln!("idem: {complaint}");
            }
            summary
        } else {
            let command = UserCommand {
                argv: args.command.clone(),
                forward_stdout: false,
                held_stdout: None,
                op_on_stdin: true,
                permanent_exit_codes: args.run.permanent_exit_codes.clone(),
            };
            consume_with(&engine, &mut source, command, options).await
        };
        engine.flush_log().await;
        print_summary(&summary, &args);
        Ok(if summary.outage.is_some() {
            exit::STORE_UNAVAILABLE
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
) -> Summary {
    let observer = Arc::new(|event: JobEvent<'_>| match event {
        JobEvent::Ended {
            note: Some(note), ..
        } => eprintln!("idem: {note}"),
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

fn print_summary(summary: &Summary, args: &ConsumeArgs) {
    if args.json {
        println!("{}", serde_json::to_string(summary).unwrap_or_default());
        return;
    }
    let waiting = summary.unknown + summary.sent_to_review;
    if waiting > 0 {
        println!(
            "{waiting} record{} wait for a person: idem review --store {}",
            if waiting == 1 { "" } else { "s" },
            args.store.shown()
        );
    }
    println!(
        "deliveries: executed {}, replayed {}, in progress (put off) {}, conflicts {}, rejected {}, sent to review {}, failed {}, fenced {}, unknown {}, not operations {}",
        summary.executed,
        summary.replayed,
        summary.in_progress,
        summary.conflicts,
        summary.rejected,
        summary.sent_to_review,
        summary.failed,
        summary.fenced,
        summary.unknown,
        summary.skipped
    );
    if let Some(outage) = &summary.outage {
        println!("stopped: {}", outage.error);
    }
}
