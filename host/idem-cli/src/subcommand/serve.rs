//! `idem serve`: the sidecar for services not written in Rust — one policy
//! and one store behind a JSON API over HTTP (`idem_serve`). This face
//! only reads flags, the token and signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idem::engine::{Engine, EngineOptions};
use idem_serve::{
    ConnectionLimits, DEFAULT_BODY_LIMIT, MetricsExport, Sidecar, SidecarOptions, Token,
};

use crate::exit::{Failure, INCOMPLETE, SUCCESS};
use crate::policy_args::PolicyArgs;
use crate::run_flags::{parse_lease, parse_max_wait};
use crate::store_args::{StoreArgs, runtime};

/// The environment variable a token may come from.
const TOKEN_ENV: &str = "IDEM_SERVE_TOKEN";

/// `idem serve`'s flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Where to listen (port 0: any free port; the address is printed).
    /// Beyond loopback only with a token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7676")]
    pub listen: SocketAddr,
    /// A file holding the bearer token every call must carry [default:
    /// $IDEM_SERVE_TOKEN; neither: no authentication, loopback only].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Overrides the policy's lease for every claim, from 1s to 24h.
    #[arg(long, value_parser = parse_lease)]
    pub lease: Option<Duration>,
    /// The longest a `begin` waits for a live holder in all, whatever the
    /// policy's `wait` asks (the shorter of the two), e.g. `2s`; `0`: a
    /// duplicate is answered in progress at once [default: the policy's
    /// wait, at most 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_max_wait)]
    pub max_wait: Option<Duration>,
    /// The largest request body accepted, in bytes (413 past it).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_BODY_LIMIT)]
    pub body_limit: usize,
    /// How long a request's head may take from its first byte; the
    /// connection is closed past it.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "10s")]
    pub header_timeout: Duration,
    /// How long a connection may wait for its next request with nothing
    /// sent before it is closed.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "60s")]
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive after its head (408
    /// past it).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "30s")]
    pub body_timeout: Duration,
    /// Connections open at once; one more is answered 503 and closed
    /// [default: 1024, or the open-file limit less 64 when lower].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// On SIGTERM or SIGINT, how long the calls in flight get to finish;
    /// those still running then are cut, and idem serve exits 1.
    #[arg(long, value_name = "DURATION", value_parser = parse_drain, default_value = "10s")]
    pub drain_timeout: Duration,
    /// Also serve `GET /metrics`: the engine's and the store's metrics in
    /// Prometheus's text format, behind the same token as every call.
    #[arg(long)]
    pub metrics: bool,
    /// Also serve the review console at /console: the records waiting for
    /// review with their operations and timelines, the duplicates by
    /// cause, and a form to settle one. Signed in with the token (kept in
    /// a session cookie, never in a URL).
    #[arg(long)]
    pub console: bool,
    /// The console is reached over TLS, through a proxy in front of idem
    /// serve: its session cookie is marked Secure (never sent over plain
    /// HTTP).
    #[arg(long, requires = "console")]
    pub console_behind_tls: bool,
    /// A name idem serve answers to besides its listen address: NAME (any
    /// port) or NAME:PORT, e.g. the host a proxy in front of it forwards;
    /// repeatable. Without a token, a request naming any other host than
    /// these and the loopback ones is refused (421: DNS rebinding); with a
    /// token, the Host header is checked only when this is given.
    #[arg(long = "allow-host", value_name = "NAME", value_parser = parse_host_name)]
    pub allow_host: Vec<String>,
}

/// `--allow-host`: a host name or address, optionally with `:PORT`.
fn parse_host_name(text: &str) -> Result<String, String> {
    let (name, port) = match text.rsplit_once(':') {
        Some((name, port)) if !text.ends_with(']') => (name, Some(port)),
        _ => (text, None),
    };
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    if !name_ok || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(format!(
            "`{}` is not a host name, NAME or NAME:PORT (e.g. `idem.example.com` or `idem.internal:8443`)",
            idem::core::text::escaped(text)
        ));
    }
    Ok(text.to_ascii_lowercase())
}

/// A connection timeout: at least a millisecond, at most a day.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e} (e.g. `10s`)"))?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(86_400) {
        return Err(format!("`{text}` is out of bounds: from 1ms to 24h"));
    }
    Ok(d)
}

/// `--drain-timeout`: `0` cuts the calls in flight at once.
fn parse_drain(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_timeout(text)
}

/// Runs `idem serve` until SIGTERM or SIGINT, then lets the calls in flight
/// finish within `--drain-timeout`, writes the attempt log's queue and
/// exits 0 (1 when calls were cut at the deadline).
pub fn run(args: ServeArgs) -> Result<u8, Failure> {
    // Everything that can refuse the flags is checked before anything is
    // opened or bound.
    let token = token(&args)?;
    if token.is_none() && !args.listen.ip().is_loopback() {
        return Err(Failure::input(format!(
            "refusing to listen on {} without a token: anyone who reaches it could claim and complete operations. Give --token-file FILE or set ${TOKEN_ENV}, or listen on a loopback address (127.0.0.1)",
            args.listen
        )));
    }
    if args.body_limit == 0 {
        return Err(Failure::input("--body-limit must be at least 1 byte"));
    }
    let policy = args.policy.load()?;
    let metrics = if args.metrics {
        Some(MetricsExport::install().map_err(Failure::input)?)
    } else {
        None
    };
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let options = EngineOptions {
            lease: args.lease,
            max_wait: args.max_wait,
            ..EngineOptions::default()
        };
        let engine = Engine::new(policy, store, options);
        let authenticated = token.is_some();
        let sidecar = Sidecar::new(
            engine,
            SidecarOptions {
                token,
                body_limit: args.body_limit,
                limits: ConnectionLimits {
                    header: args.header_timeout,
                    idle: args.idle_timeout,
                    body: args.body_timeout,
                    max_connections: args
                        .max_connections
                        .map_or_else(idem_serve::default_max_connections, |n| n as usize),
                    drain: args.drain_timeout,
                },
                metrics,
                console: args.console,
                console_behind_tls: args.console_behind_tls,
                allowed_hosts: args.allow_host.clone(),
            },
        );
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| Failure::input(format!("cannot listen on {}: {e}", args.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Failure::input(format!("cannot read the bound address: {e}")))?;
        // On stdout, so a supervisor (or a test) binding port 0 learns the
        // port; flushed, since stdout may be a pipe.
        println!("idem serve: listening on http://{addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        eprintln!(
            "idem: serving {} on {}{}",
            args.policy.policy.display(),
            args.store.shown(),
            if authenticated {
                " (bearer token required)"
            } else {
                " (no token: loopback only)"
            }
        );
        let drained = sidecar.run(listener, shutdown_signal()).await;
        if drained.is_clean() {
            eprintln!("idem: stopped: calls in flight finished, attempt log written");
            Ok(SUCCESS)
        } else {
            eprintln!(
                "idem: stopped: {} call(s) still running at the drain deadline ({} ms) were cut without an answer (a begin's claim stays until its lease ends, a write may or may not have happened: a retry finds out); attempt log written",
                drained.cut,
                args.drain_timeout.as_millis()
            );
            Ok(INCOMPLETE)
        }
    })
}

/// The token from `--token-file`, else from the environment, else none.
fn token(args: &ServeArgs) -> Result<Option<Token>, Failure> {
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::input(format!("cannot read --token-file {}: {e}", path.display()))
        })?;
        warn_if_others_can_read(path);
        return Token::new(&text)
            .map(Some)
            .map_err(|e| Failure::input(format!("--token-file {}: {e}", path.display())));
    }
    match std::env::var(TOKEN_ENV) {
        Ok(text) => Token::new(&text)
            .map(Some)
            .map_err(|e| Failure::input(format!("${TOKEN_ENV}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(Failure::input(format!("${TOKEN_ENV}: {e}"))),
    }
}

/// A token file others can read is a token others have: say so.
fn warn_if_others_can_read(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "idem: warning: {} can be read by other users (mode {:o}); `chmod 600` it",
                path.display(),
                meta.permissions().mode() & 0o777
            );
        }
    }
}

/// Resolves at the first SIGTERM or SIGINT.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    eprintln!("idem: stopping: finishing the calls in flight");
}
