//! The metrics service: G-Eval, prompt scoring and pairwise comparison over HTTP.
//!
//! - [`api`]: request and response bodies and their checks;
//! - [`http`]: routes, handlers, authentication and logging middleware;
//! - [`auth`]: the optional bearer token;
//! - [`worker`]: the one thread that owns the model and serves queued jobs together.
//!
//! [`serve`] runs the service on a bound listener until its shutdown future completes;
//! requests in flight are finished first, then the worker thread ends.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /v1/geval` | `output`, `criteria` (built-in name, or `{name, criterion, introduction?, scale?}`), `context?`, `expected_output?`, `task?`, `steps?`, `scale?` (`[1, 5]`) | `score`, `argmax`, `probabilities` (normalised), `raw_probabilities`, `label_mass`, `steps` |
//! | `POST /v1/score` | `output`, `attribute`, `context?`, `task?`, `scale?` (`[1, 10]`) | as G-Eval, without `steps` |
//! | `POST /v1/compare` | `context`, `candidates` (texts or `{id, text}`), `attribute`, `task?`, `template?` (`c1`, `c2`), `rank?` | `candidates` (`id`, `score`, `rank`), `comparisons` |
//! | `GET /v1/models` | | the loaded model, the built-in criteria |
//! | `GET /healthz` | | `status`, queue and worker counters (no token needed) |
//!
//! The OpenAI-compatible routes (`/v1/completions`, `/v1/chat/completions`, the model
//! list `/v1/models` shown above, tokenizer routes) are [`openai`]'s, with errors in
//! OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`).
//!
//! Errors answer `{"error": message}`: 400 malformed or invalid body (the message names
//! the field, line and column), 401 missing or wrong bearer token, 413 body over the
//! limit, 422 too many candidates or a request the model cannot score (e.g. longer than
//! its context window), 503 the worker has stopped.

pub mod api;
pub mod auth;
pub mod http;
pub mod openai;
pub mod worker;

use std::future::Future;
use std::sync::Arc;

use anyhow::{anyhow, Context as _, Result};

pub use auth::BearerToken;
pub use http::Limits;
pub use worker::{WorkerConfig, WorkerStats, DEFAULT_PREFIX_CACHE_BYTES};

use crate::engine::{ResultCache, Scorer};

/// Default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Default bound on the candidates of one compare request (N(N-1) comparisons).
pub const DEFAULT_MAX_CANDIDATES: usize = 16;

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub token: Option<BearerToken>,
    pub limits: Limits,
    pub worker: WorkerConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            token: None,
            limits: Limits {
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                max_candidates: DEFAULT_MAX_CANDIDATES,
            },
            worker: WorkerConfig::default(),
        }
    }
}

/// Serve on `listener` with `scorer` until `shutdown` completes, then finish the
/// requests in flight and stop the worker. `stats` (shared with the caller) counts the
/// worker's jobs and rounds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    scorer: Box<dyn Scorer>,
    cache: ResultCache,
    config: ServerConfig,
    stats: Arc<WorkerStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let model = Arc::new(scorer.info().clone());
    let openai = Arc::new(openai::Backend::new(scorer.as_ref()));
    let (jobs, worker) = worker::spawn(scorer, cache, config.worker, stats.clone())?;
    let state = http::AppState {
        jobs,
        stats,
        model,
        token: config.token,
        limits: config.limits,
        openai,
    };
    axum::serve(listener, http::router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .context("the HTTP server failed")?;
    // The router and every job sender are gone: the worker ends after its last round.
    tokio::task::spawn_blocking(move || worker.join())
        .await
        .context("cannot wait for the model worker")?
        .map_err(|_| anyhow!("the model worker panicked"))?;
    Ok(())
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
