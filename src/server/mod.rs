//! The metrics service: G-Eval, prompt scoring, rubric grading and pairwise comparison
//! over HTTP.
//!
//! - [`api`]: request and response bodies and their checks;
//! - [`http`]: routes, handlers, authentication and logging middleware;
//! - [`auth`]: the bearer tokens, one per user, reloadable;
//! - [`callers`]: who made each request, and the per-token bound on queued requests;
//! - [`tls`]: TLS from PEM files (rustls);
//! - [`worker`]: the one thread that owns the model and serves queued jobs together;
//! - [`listen`]: the connection loop every route goes through (timeouts, connection
//!   bound, drain).
//!
//! [`exposure`] decides whether an address may be served with the given protection: a
//! service reachable from other machines needs a token (or an explicit acceptance of the
//! risk), and without TLS its tokens and texts travel in clear (a warning).
//!
//! [`serve`] runs the service on a bound listener until its shutdown future completes,
//! then drains: new connections are refused, idle keep-alive ones closed, requests
//! already arriving (and new connections) given a short grace to arrive, requests in progress finished within the drain timeout,
//! and the worker thread ends.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /v1/geval` | `output`, `criteria` (built-in name, or `{name, criterion, introduction?, scale?}`), `context?`, `expected_output?`, `task?`, `steps?`, `scale?` (`[1, 5]`) | `score`, `argmax`, `probabilities` (normalised), `raw_probabilities`, `label_mass`, `steps` |
//! | `POST /v1/score` | `output`, `attribute`, `context?`, `task?`, `scale?` (`[1, 10]`) | as G-Eval, without `steps` |
//! | `POST /v1/score` with `"method": "rubric"` | `output`, `rubric` (built-in name, or `{criterion, descriptions, name?, scale?, instruction?, sections?}`), `context?`, `reference?`, `task?`, `protocol?` (`prometheus`, `flow-judge`, `plain`; default the model card's), `feedback?` (default true), `max_feedback_tokens?` | as prompt scoring, with `feedback`, `format` (`kept`, `no-score`, `repeated`, `missing`, `cut`) and `rubric` (`name`, `protocol`, `protocol_source`, `feedback`); the diagnostics' `format` check |
//! | `POST /v1/compare` | `context`, `candidates` (texts or `{id, text}`), `attribute` (or `rubric`), `task?`, `template?` (`c1`, `c2`), `rank?`; relative rubric grading (`compare --rubric`'s route): `rubric`, `protocol?`, `feedback?`, `max_feedback_tokens?`, `reference?` | `candidates` (`id`, `score`, `rank`, a whole rank as an integer), `set_aside` (candidates too long for the model: `id`, `tokens`, `limit`, `reason`), `comparisons`; with a rubric `rubric` and `feedbacks` |
//! | `GET /v1/models` | | the loaded model (with its rubric protocol), the built-in criteria and rubrics |
//! | `GET /healthz` | | `status`, `warnings`, `tls`, `auth` (tokens, reloads), queue and worker counters; `per_token` counters to a caller presenting a token (no token needed otherwise) |
//!
//! The OpenAI-compatible routes (`/v1/completions`, `/v1/chat/completions`, the model
//! list `/v1/models` shown above, tokenizer routes) are [`openai`]'s, with errors in
//! OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`).
//!
//! Errors answer `{"error": message}`: 400 malformed or invalid body (the message names
//! the field, line and column), 401 missing or wrong bearer token, 413 body over the
//! limit (stated, with its flag), 408 body not received within the body timeout, 422 too many candidates or a
//! request the model cannot score (e.g. longer than its context window), 500 the model
//! failed (a panic in the model code included: that request fails, the worker goes on),
//! 503 with `Retry-After` when the queue, the token's share of it, or the connection
//! bound is full or the service is draining. A compare request whose candidates do not
//! all fit the model is ranked without those that do not (named in `set_aside` and the
//! diagnostics' `too_long` check), as on the command line; 422 when fewer than two fit.

pub mod api;
pub mod auth;
pub mod callers;
pub mod http;
pub mod listen;
pub mod openai;
pub mod tls;
pub mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};

pub use auth::{TokenSet, Tokens};
pub use callers::DEFAULT_MAX_QUEUED_PER_TOKEN;
pub use http::{
    Limits, DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_GRACE, DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUE,
};
pub use listen::DrainReport;
pub use worker::{WorkerConfig, WorkerStats, DEFAULT_PREFIX_CACHE_BYTES};

use crate::engine::{ResultCache, Scorer};

/// Default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Default bound on the candidates of one compare request (N(N-1) comparisons).
pub const DEFAULT_MAX_CANDIDATES: usize = 16;

/// Settings of the service.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// The tokens every `/v1` request must present; `None`: an open service.
    pub tokens: Option<Tokens>,
    /// Serve over TLS alone ([`tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Warnings about the exposure ([`exposure`]), shown by `/healthz`.
    pub warnings: Vec<String>,
    pub limits: Limits,
    pub worker: WorkerConfig,
}

/// Why [`exposure`] refuses an address.
#[derive(Debug, thiserror::Error)]
#[error("refusing to serve {addr} without a token: an address other than loopback lets anyone who can reach the port use the model and send it texts. Give `--token-file FILE` (one `name:token` per line), or accept the risk with `--allow-no-token`")]
pub struct OpenServiceRefused {
    pub addr: String,
}

/// Whether the service may listen on `addrs` (what the address resolves to), and the
/// warnings it starts with. Refused: an address that is not loopback without tokens,
/// unless `allow_no_token`. Warned: an open service (with `allow_no_token`), and tokens
/// and texts in clear on an address that is not loopback (no TLS).
pub fn exposure(
    addrs: &[SocketAddr],
    tokens: bool,
    tls: bool,
    allow_no_token: bool,
) -> std::result::Result<Vec<String>, OpenServiceRefused> {
    let outside = addrs.iter().find(|addr| !addr.ip().is_loopback());
    let mut warnings = Vec::new();
    match outside {
        None => {
            if !tokens && allow_no_token {
                warnings.push(
                    "no bearer token (--allow-no-token): any program on this machine may use the service"
                        .to_string(),
                );
            }
        }
        Some(addr) => {
            if !tokens {
                if !allow_no_token {
                    return Err(OpenServiceRefused {
                        addr: addr.to_string(),
                    });
                }
                warnings.push(format!(
                    "no bearer token (--allow-no-token) on {addr}, not loopback: anyone who can reach the port may use the model and send it texts"
                ));
            }
            if !tls {
                warnings.push(format!(
                    "plain HTTP on {addr}, not loopback: {} texts travel in clear. Serve over TLS (--tls-cert FILE --tls-key FILE), or on loopback behind a reverse proxy that terminates TLS",
                    if tokens { "bearer tokens and" } else { "the" }
                ));
            }
        }
    }
    Ok(warnings)
}

/// The routes with their model worker, ready for a connection loop: what [`serve`]
/// runs, and a way to drive the routes in-process (`tower::ServiceExt::oneshot`).
pub struct App {
    pub router: axum::Router,
    /// The model worker; it ends once the router (every clone) is dropped.
    pub worker: std::thread::JoinHandle<()>,
    /// Starts the drain of the router's handlers.
    pub switch: listen::DrainSwitch,
    pub limits: Limits,
}

/// Start the model worker and build the routes.
pub fn app(
    scorer: Box<dyn Scorer>,
    cache: ResultCache,
    config: ServerConfig,
    stats: Arc<WorkerStats>,
) -> Result<App> {
    let model = Arc::new(scorer.info().clone());
    let openai = Arc::new(openai::Backend::new(scorer.as_ref()));
    let (jobs, worker) = worker::spawn(scorer, cache, config.worker, stats.clone())?;
    let limits = config.limits;
    let (switch, drain) = listen::DrainSwitch::new(listen::body_grace(&limits));
    let state = http::AppState {
        jobs,
        stats,
        model,
        tokens: config.tokens,
        callers: Arc::new(callers::Callers::new(limits.max_queued_per_token)),
        warnings: Arc::new(config.warnings),
        tls: config.tls.is_some(),
        limits,
        openai,
        drain,
    };
    Ok(App {
        router: http::router(state),
        worker,
        switch,
        limits,
    })
}

/// How long the end of the service waits for the model worker's last call after the
/// drain; past it the worker is left to the process's exit.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve on `listener` with `scorer` until `shutdown` completes, then drain (see the
/// module header) and stop the worker. `stats` (shared with the caller) counts the
/// worker's jobs and rounds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    scorer: Box<dyn Scorer>,
    cache: ResultCache,
    config: ServerConfig,
    stats: Arc<WorkerStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<DrainReport> {
    let tls = config.tls.clone().map(tls::TlsAcceptor::from);
    let App {
        router,
        worker,
        switch,
        limits,
    } = app(scorer, cache, config, stats)?;
    let report = listen::run(listener, router, tls, limits, switch, shutdown).await;
    tracing::info!(
        connections = report.connections,
        from_backlog = report.from_backlog,
        busy = report.busy,
        awaited = report.awaited,
        awaited_silent = report.awaited_silent,
        completed = report.completed,
        unfinished = report.unfinished,
        cut = report.cut,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "drained"
    );
    // The router and every job sender are gone: the worker ends after its last round.
    // Joined from a thread of its own, so that neither this task nor the runtime's
    // shutdown waits for a call that does not end.
    let (joined, join) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("nlg-judge-join".to_string())
        .spawn(move || {
            let _ = joined.send(worker.join().is_ok());
        })
        .context("cannot start a thread to wait for the model worker")?;
    match tokio::time::timeout(WORKER_STOP_TIMEOUT, join).await {
        Ok(Ok(true)) => {}
        Ok(_) => return Err(anyhow!("the model worker panicked")),
        Err(_) => tracing::warn!("the model worker is still in a call; leaving it to the exit"),
    }
    Ok(report)
}

/// Completes on Ctrl-C or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        _ = terminate => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(text: &str) -> Vec<SocketAddr> {
        vec![text.parse().unwrap()]
    }

    #[test]
    fn only_loopback_may_be_open_and_clear_text_off_loopback_is_warned() {
        for loopback in ["127.0.0.1:8080", "[::1]:8080"] {
            assert!(exposure(&addrs(loopback), false, false, false)
                .unwrap()
                .is_empty());
            assert!(exposure(&addrs(loopback), true, false, false)
                .unwrap()
                .is_empty());
        }
        for outside in ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080"] {
            let refusal = exposure(&addrs(outside), false, true, false)
                .unwrap_err()
                .to_string();
            assert!(
                refusal.contains("--token-file") && refusal.contains("--allow-no-token"),
                "{refusal}"
            );
            let open = exposure(&addrs(outside), false, true, true).unwrap();
            assert_eq!(open.len(), 1, "{open:?}");
            assert!(open[0].contains("--allow-no-token"), "{open:?}");
            let clear = exposure(&addrs(outside), true, false, false).unwrap();
            assert_eq!(clear.len(), 1, "{clear:?}");
            assert!(
                clear[0].contains("in clear") && clear[0].contains("--tls-cert"),
                "{clear:?}"
            );
            assert!(exposure(&addrs(outside), true, true, false)
                .unwrap()
                .is_empty());
        }
        // A name that resolves to loopback and another address counts as outside.
        let mixed = [addrs("127.0.0.1:1")[0], addrs("192.168.0.2:1")[0]];
        assert!(exposure(&mixed, false, false, false).is_err());
        // Asked for on loopback, the open service is still said to be open.
        let warned = exposure(&addrs("127.0.0.1:1"), false, false, true).unwrap();
        assert_eq!(warned.len(), 1);
    }
}
