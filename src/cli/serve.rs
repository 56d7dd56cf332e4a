//! `nlg-judge serve`: the metrics service and the OpenAI-compatible routes (see
//! [`crate::server`]), with its exposure checked before the model loads (no service
//! reachable from other machines without a token, unless asked), TLS from PEM files, and
//! the token file reloaded on SIGHUP.

use std::net::ToSocketAddrs as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;

use super::cache_args::CacheArgs;
use super::input_error;
use super::model_args::ModelArgs;
use crate::judge::geval::steps::DEFAULT_MAX_TOKENS;
use crate::server::auth::SHORT_TOKEN_CHARS;
use crate::server::{
    exposure, serve, shutdown_signal, tls, Limits, ServerConfig, Tokens, WorkerConfig, WorkerStats,
    DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_GRACE, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CANDIDATES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_QUEUED_PER_TOKEN, DEFAULT_PREFIX_CACHE_BYTES,
};

/// Arguments of `nlg-judge serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Address to listen on (port 0: any free port, printed at start). An address other
    /// than loopback needs --token-file (or --allow-no-token).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,

    /// File of the bearer tokens every /v1 request must present
    /// (`Authorization: Bearer <token>`): one `name:token` per line, `#` comments; a line
    /// without `name:` is the token `default`. The log and /healthz name the token of each
    /// request. Reloaded on SIGHUP (a bad file keeps the tokens in force).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Serve without a token on an address other than loopback (refused otherwise):
    /// anyone who can reach the port may use the service. Warned at start and in /healthz.
    #[arg(long)]
    pub allow_no_token: bool,

    /// Serve HTTPS only, with this PEM certificate chain (the server's certificate first).
    /// Reloaded with --tls-key on SIGHUP (a renewed certificate is presented from the next
    /// connection on; files that do not load keep the one in use).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Most candidates in one /v1/compare request (more: 422).
    #[arg(long, default_value_t = DEFAULT_MAX_CANDIDATES)]
    pub max_candidates: usize,

    /// Most tokens the model may write for G-Eval's evaluation steps.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_step_tokens: usize,

    /// Most requests waiting for the model worker; more are answered 503 with
    /// `Retry-After` instead of queueing without bound.
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,

    /// Most requests one token may have waiting for the model worker or being served;
    /// more from that token are answered 503 with `Retry-After`, so that one client's
    /// flood leaves the queue to the others.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_QUEUED_PER_TOKEN)]
    pub max_queued_per_token: usize,

    /// Most connections served at once; more are answered 503 and closed (memory stays
    /// below about this times the body limit).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// Seconds a request head may take to arrive (idle keep-alive connections are closed
    /// after it too).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_HEADER_TIMEOUT.as_secs_f64())]
    pub header_timeout: f64,

    /// Seconds a request body may take to arrive (else 408).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_BODY_TIMEOUT.as_secs_f64())]
    pub body_timeout: f64,

    /// On SIGTERM or Ctrl-C: seconds to finish the requests in progress (new connections
    /// are refused, idle keep-alive ones closed at once, requests already arriving given
    /// --drain-grace) before closing what is left and exiting.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_DRAIN_TIMEOUT.as_secs_f64())]
    pub drain_timeout: f64,

    /// On SIGTERM or Ctrl-C: seconds a request already arriving (its head or body begun,
    /// or a new connection not sending yet) may take to finish arriving; it is then
    /// served and its connection closed. A head still incomplete after it is closed, a
    /// body answered 503. At most the header timeout (heads) and the drain timeout.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_DRAIN_GRACE.as_secs_f64())]
    pub drain_grace: f64,

    /// Most queued requests the model worker serves together in one round.
    #[arg(long, default_value_t = WorkerConfig::default().max_round)]
    pub max_round: usize,

    /// Memory bound of the prefix cache of the OpenAI-compatible routes (MiB): the keys,
    /// values and hidden states of recent prompts, kept so that a prompt starting like
    /// an earlier one skips what is cached; least recently used prefixes go first. 0
    /// keeps none.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_PREFIX_CACHE_BYTES >> 20)]
    pub prefix_cache_mib: usize,

    #[command(flatten)]
    pub cache: CacheArgs,
}

/// What the addresses, the token file and the TLS files give, checked before the model
/// loads (each fault exits 2).
struct Exposure {
    tokens: Option<Tokens>,
    tls: Option<(Arc<rustls::ServerConfig>, Arc<tls::Certificate>)>,
    warnings: Vec<String>,
}

fn check_exposure(args: &ServeArgs) -> Result<Exposure> {
    let addrs: Vec<_> = args
        .addr
        .to_socket_addrs()
        .with_context(|| format!("--addr {}: not an address to listen on", args.addr))
        .map_err(input_error)?
        .collect();
    let tokens = args
        .token_file
        .as_deref()
        .map(Tokens::from_file)
        .transpose()
        .map_err(input_error)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::reloadable(cert, key).map_err(input_error)?),
        _ => None,
    };
    let warnings = exposure(&addrs, tokens.is_some(), tls.is_some(), args.allow_no_token)
        .map_err(|refusal| input_error(refusal.into()))?;
    if args.max_queued_per_token == 0 {
        return Err(input_error(anyhow::anyhow!(
            "--max-queued-per-token must be at least 1"
        )));
    }
    Ok(Exposure {
        tokens,
        tls,
        warnings,
    })
}

/// Reload the token file and the TLS certificate on each SIGHUP, saying what came of
/// each; what does not load leaves the one in use as it was.
#[cfg(unix)]
fn reload_on_hangup(
    tokens: Option<Tokens>,
    certificate: Option<Arc<tls::Certificate>>,
) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(tokens) = &tokens {
                let path = tokens.path().map(Path::display);
                match tokens.reload() {
                    Ok(set) => eprintln!(
                        "SIGHUP: token file {} reloaded: {} tokens ({})",
                        path.map(|p| p.to_string()).unwrap_or_default(),
                        set.len(),
                        set.names().join(", ")
                    ),
                    Err(error) => eprintln!("SIGHUP: error: {error:#}"),
                }
            }
            if let Some(certificate) = &certificate {
                match certificate.reload() {
                    Ok(()) => eprintln!(
                        "SIGHUP: TLS certificate {} reloaded: presented from the next connection on",
                        certificate.cert_path().display()
                    ),
                    Err(error) => eprintln!("SIGHUP: error: {error:#}"),
                }
            }
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn reload_on_hangup(_: Option<Tokens>, _: Option<Arc<tls::Certificate>>) -> Result<()> {
    Ok(())
}

pub fn run(args: ServeArgs) -> Result<()> {
    let Exposure {
        tokens,
        tls,
        warnings,
    } = check_exposure(&args)?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(tokens) = &tokens {
        let set = tokens.current();
        let short = set.short_names();
        if !short.is_empty() {
            eprintln!(
                "warning: tokens shorter than {SHORT_TOKEN_CHARS} characters are easy to guess: {} (e.g. `openssl rand -hex 32` makes a good one)",
                short.join(", ")
            );
        }
    }
    let cache = args.cache.open_or_memory()?;
    let scorer = args.model.load()?;
    let (tls, certificate) = match tls {
        Some((config, certificate)) => (Some(config), Some(certificate)),
        None => (None, None),
    };
    let config = ServerConfig {
        tokens,
        tls,
        warnings,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_candidates: args.max_candidates,
            max_queue: args.max_queue,
            max_queued_per_token: args.max_queued_per_token,
            max_connections: args.max_connections,
            header_timeout: seconds("--header-timeout", args.header_timeout)?,
            body_timeout: seconds("--body-timeout", args.body_timeout)?,
            drain_timeout: seconds("--drain-timeout", args.drain_timeout)?,
            drain_grace: seconds("--drain-grace", args.drain_grace)?,
        },
        worker: WorkerConfig {
            steps_max_tokens: args.max_step_tokens,
            max_round: args.max_round,
            prefix_cache_bytes: args.prefix_cache_mib << 20,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let address = listener.local_addr()?;
        let reloadable_tokens = config.tokens.clone().filter(|t| t.path().is_some());
        if reloadable_tokens.is_some() || certificate.is_some() {
            reload_on_hangup(reloadable_tokens, certificate)?;
        }
        let auth = match &config.tokens {
            Some(tokens) => {
                let set = tokens.current();
                format!(
                    "bearer token required: {} ({}), SIGHUP reloads them",
                    set.len(),
                    set.names().join(", ")
                )
            }
            None => "no token".to_string(),
        };
        eprintln!(
            "serving {} on {}://{address} ({auth}); Ctrl-C or SIGTERM stops",
            scorer.info().name,
            if config.tls.is_some() {
                "https"
            } else {
                "http"
            },
        );
        serve(
            listener,
            scorer,
            cache,
            config,
            Arc::new(WorkerStats::default()),
            shutdown_signal(),
        )
        .await
    })?;
    eprintln!(
        "stopped: {} connections open at the signal ({} of them taken from the accept queue then; {} with a request in progress; {} awaited for a request arriving, {} of them new and silent: {} completed and served, {} closed unfinished), {} cut at the drain timeout, drained in {:.2} s",
        report.connections,
        report.from_backlog,
        report.busy,
        report.awaited,
        report.awaited_silent,
        report.completed,
        report.unfinished,
        report.cut,
        report.elapsed.as_secs_f64()
    );
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

fn seconds(flag: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} must be a positive number of seconds, not {value}"))
}
