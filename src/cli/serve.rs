//! `nlg-judge serve`: the metrics service and the OpenAI-compatible routes (see
//! [`crate::server`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;

use super::cache_args::CacheArgs;
use super::model_args::ModelArgs;
use crate::judge::geval::steps::DEFAULT_MAX_TOKENS;
use crate::server::{
    serve, shutdown_signal, BearerToken, Limits, ServerConfig, WorkerConfig, WorkerStats,
    DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_GRACE, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CANDIDATES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUE,
    DEFAULT_PREFIX_CACHE_BYTES,
};

/// Arguments of `nlg-judge serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,

    /// File holding the bearer token every /v1 request must present
    /// (`Authorization: Bearer <token>`); without it the service is open.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

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

pub fn run(args: ServeArgs) -> Result<()> {
    let token = args
        .token_file
        .as_deref()
        .map(BearerToken::from_file)
        .transpose()?;
    let cache = args.cache.open_or_memory()?;
    let scorer = args.model.load()?;
    let config = ServerConfig {
        token,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_candidates: args.max_candidates,
            max_queue: args.max_queue,
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
        eprintln!(
            "serving {} on http://{address} ({}); Ctrl-C or SIGTERM stops",
            scorer.info().name,
            if config.token.is_some() {
                "bearer token required"
            } else {
                "no token"
            }
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
