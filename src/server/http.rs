//! Routes, handlers and middleware of the metrics service.
//!
//! The body of every `/v1` request is read first, within the body timeout (408 when it
//! does not arrive in time, 413 over the limit, 503 when the service starts draining
//! meanwhile and the rest does not arrive within the drain's grace). Handlers then parse and check it (400 naming the field, line and column;
//! 422 for too many candidates), send a job to the model worker and wait for its reply;
//! when `max_queue` jobs already wait, or the request's token has `max_queued_per_token`
//! jobs waiting or being served ([`super::callers`]), the answer is 503 at once. Every
//! 503 carries `Retry-After`. `/healthz` never touches the worker, so it answers while the model is
//! busy: `ready` (200), or `draining` (503) once shutdown has begun. Every `/v1` route needs the bearer token when one is
//! configured (401 otherwise). The log records method, path, the token's name, body
//! size, status and time — never the token or the texts, which may be sensitive.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::oneshot;

use super::api::{
    compare_job, geval_task, parse_body, score_task, CompareBody, CompareRefusal, CompareResponse,
    GevalBody, PairFeedbackBody, RankedCandidate, ScoreBody, ScoreResponse, ScoreTask,
    SetAsideCandidate,
};
use super::auth::Tokens;
use super::callers::{Caller, Callers};
use super::worker::{ComparedRun, Job, LabelTask, Reply, WorkerStats};
use crate::engine::ErrorKind;
use crate::engine::ModelInfo;

/// Request and connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_candidates: usize,
    /// Most jobs waiting for the model worker (more: 503 with `Retry-After`).
    pub max_queue: usize,
    /// Most jobs one token may have waiting for the model worker or being served (more:
    /// 503 with `Retry-After` for that token).
    pub max_queued_per_token: usize,
    /// Most connections served at once (more: 503 and closed).
    pub max_connections: usize,
    /// A request head must arrive within this (idle keep-alive connections close after it).
    pub header_timeout: Duration,
    /// A request body must arrive within this (else 408).
    pub body_timeout: Duration,
    /// How long shutdown waits for requests in progress before closing their connections.
    pub drain_timeout: Duration,
    /// At shutdown, how long a request already arriving (its head or its body begun) may
    /// take to finish arriving; capped by the header timeout for heads and by the drain
    /// timeout ([`super::listen`]).
    pub drain_grace: Duration,
}

/// Default bound on the jobs waiting for the model worker.
pub const DEFAULT_MAX_QUEUE: usize = 256;
/// Default bound on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default time a request head may take.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a request body may take.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on the drain at shutdown (under Kubernetes' default 30 s grace period).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Default grace at shutdown for a request already arriving: a client that has begun
/// sending finishes within a few round trips; a half-open one holds the drain no longer.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(2);

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: super::DEFAULT_MAX_BODY_BYTES,
            max_candidates: super::DEFAULT_MAX_CANDIDATES,
            max_queue: DEFAULT_MAX_QUEUE,
            max_queued_per_token: super::callers::DEFAULT_MAX_QUEUED_PER_TOKEN,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            drain_grace: DEFAULT_DRAIN_GRACE,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub jobs: mpsc::Sender<Job>,
    pub stats: Arc<WorkerStats>,
    pub model: Arc<ModelInfo>,
    /// The tokens requests must present (`None`: an open service).
    pub tokens: Option<Tokens>,
    /// Each token name's counters and queue bound.
    pub callers: Arc<Callers>,
    /// Warnings about how the service is exposed, shown by `/healthz`.
    pub warnings: Arc<Vec<String>>,
    /// Whether connections are served over TLS.
    pub tls: bool,
    pub limits: Limits,
    /// What the OpenAI-compatible routes keep.
    pub openai: Arc<super::openai::Backend>,
    /// Whether shutdown has begun.
    pub drain: super::listen::Drain,
}

/// An error answer: `{"error": message}` with a status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn bad_request(error: &anyhow::Error) -> Self {
        Self::new(StatusCode::BAD_REQUEST, format!("{error:#}"))
    }

    /// Status and message (for answers in another shape).
    pub(crate) fn parts(self) -> (StatusCode, String) {
        (self.status, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The routes over `state`.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/geval", post(geval))
        .route("/v1/score", post(score))
        .route("/v1/compare", post(compare))
        .route_layer(middleware::from_fn_with_state(state.clone(), read_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(v1)
        .merge(super::openai::router(state.clone()))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn(retry_after))
        .layer(middleware::from_fn(method_not_allowed))
        .layer(middleware::from_fn(log_requests))
        .with_state(state)
}

/// Every 503 tells when to come back.
async fn retry_after(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if response.status() == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .entry(header::RETRY_AFTER)
            .or_insert(HeaderValue::from_static("1"));
    }
    response
}

/// A 405 names the method the route takes, in the route's error shape (axum's own 405
/// has an empty body).
async fn method_not_allowed(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED {
        return response;
    }
    // axum leaves the `Allow` header out here: the routes' methods, from their paths.
    let allow = response
        .headers()
        .get(header::ALLOW)
        .cloned()
        .unwrap_or_else(|| {
            let get = matches!(path.as_str(), "/healthz" | "/v1/models" | "/tokenizer_info")
                || path.starts_with("/v1/models/");
            HeaderValue::from_static(if get { "GET,HEAD" } else { "POST" })
        });
    let allowed = allow
        .to_str()
        .unwrap_or("another method")
        .replace(',', ", ");
    let message = format!("{path} does not take {method}: use {allowed}");
    let mut answer = if super::openai::is_openai_path(&path) {
        super::openai::error::OpenAiError::new(StatusCode::METHOD_NOT_ALLOWED, message)
            .into_response()
    } else {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, message).into_response()
    };
    answer.headers_mut().insert(header::ALLOW, allow);
    answer
}

/// Read the whole body before the handler runs (see [`buffer_body`]).
async fn read_body(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match buffer_body(&state, request).await {
        Ok(request) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The request with its whole body read within the body timeout and the size limit
/// (408, 413; 503 when the drain begins meanwhile and the rest does not arrive within the
/// grace), so that a client that stops sending holds nothing for long.
pub(crate) async fn buffer_body(state: &AppState, request: Request) -> Result<Request, ApiError> {
    let limit = state.limits.max_body_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(Some(limit)));
    }
    let (parts, body) = request.into_parts();
    let timeout = state.limits.body_timeout;
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit));
    let bytes = tokio::select! {
        read = read => match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(error)) => {
                let over = std::error::Error::source(&error)
                    .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
                return Err(if over {
                    too_large(Some(limit))
                } else {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read the request body: {error}"),
                    )
                });
            }
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {} s",
                        timeout.as_secs_f64()
                    ),
                ))
            }
        },
        () = state.drain.grace_over() => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the service is stopping; the request body had not fully arrived",
            ))
        }
    };
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// 413, stating the limit (when known here) and the flag that sets it.
fn too_large(limit: Option<usize>) -> ApiError {
    let limit = limit.map_or(String::new(), |n| format!(" ({n} bytes)"));
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than this service accepts{limit}; `nlg-judge serve --max-body-bytes` sets the limit"),
    )
}

/// Log method, path, the token's name, body size, status and time of every request
/// (never the token or the content).
async fn log_requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let body_bytes = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let response = next.run(request).await;
    let caller = response
        .extensions()
        .get::<Caller>()
        .map_or("-", Caller::label);
    tracing::info!(
        %method,
        path,
        caller,
        body_bytes,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

/// The caller of `request` by its token (401 without one of the tokens in force, when
/// the service has tokens), counted.
pub(crate) fn authenticate(state: &AppState, request: &Request) -> Result<Caller, ApiError> {
    let Some(tokens) = &state.tokens else {
        return Ok(Caller(None));
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if presented.is_none() {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token",
        ));
    }
    let name = tokens
        .identify(presented)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token"))?;
    state.callers.count_request(&name);
    Ok(Caller(Some(name)))
}

/// Run `request` as its caller: the caller goes into the request's extensions (for the
/// handlers' per-token bound) and the response's (for the log).
pub(crate) async fn as_caller(caller: Caller, mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(caller.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(caller);
    response
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state, &request) {
        Ok(caller) => as_caller(caller, request, next).await,
        Err(error) => error.into_response(),
    }
}

/// The body bytes, or the limit's (413) or transport's error.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return too_large(None);
        }
        ApiError::new(status, rejection.body_text())
    })
}

/// Send a job of `caller` to the worker and wait for its answer (503 at once when the
/// caller's token or the service has its most jobs queued).
pub(crate) async fn submit<T>(
    state: &AppState,
    caller: &Caller,
    job: impl FnOnce(Reply<T>) -> Job,
) -> Result<T, ApiError> {
    // Held until the answer (or the client's departure) ends this call.
    let _place = match &caller.0 {
        None => None,
        Some(name) => Some(state.callers.enter(name).map_err(|queued| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the token `{name}` has {queued} requests waiting or being served, the most one token may have (`nlg-judge serve --max-queued-per-token`); retry later"
                ),
            )
        })?),
    };
    let (reply, answer) = oneshot::channel();
    let waiting = state.stats.queued.fetch_add(1, Ordering::SeqCst);
    if waiting >= state.limits.max_queue {
        state.stats.queued.fetch_sub(1, Ordering::SeqCst);
        state.stats.refused.fetch_add(1, Ordering::SeqCst);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the service is at capacity ({waiting} requests waiting); retry later"),
        ));
    }
    if state.jobs.send(job(reply)).is_err() {
        state.stats.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model worker has stopped",
        ));
    }
    match answer.await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => Err(match failure.kind {
            ErrorKind::BadRequest => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("cannot score this request: {}", failure.message),
            ),
            ErrorKind::Model | ErrorKind::Files => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the model failed: {}", failure.message),
            ),
        }),
        // The worker drops a reply only when a panic escaped its round.
        Err(_) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the model worker failed before answering (see the service log)",
        )),
    }
}

async fn label_job(
    state: &AppState,
    caller: &Caller,
    task: LabelTask,
) -> Result<ScoreResponse, ApiError> {
    let answer = submit(state, caller, |reply| Job::Label { task, reply }).await?;
    Ok(ScoreResponse::new(&answer.distribution, answer.steps))
}

async fn geval(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: GevalBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    let (task, reading) = geval_task(body).map_err(|e| ApiError::bad_request(&e))?;
    let mut response = label_job(&state, &caller, task).await?;
    response.scale_source = Some(reading.scale_source);
    response.criteria_name = Some(reading.name);
    Ok(Json(response))
}

async fn score(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: ScoreBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    match score_task(body, &state.model).map_err(|e| ApiError::bad_request(&e))? {
        ScoreTask::Label(task) => Ok(Json(label_job(&state, &caller, task).await?)),
        ScoreTask::Rubric(task) => {
            let run = submit(&state, &caller, |reply| Job::Rubric { task, reply }).await?;
            ScoreResponse::of_rubric(&run)
                .map(Json)
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))
        }
    }
}

async fn compare(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CompareResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: CompareBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    let job = compare_job(body, state.limits.max_candidates, &state.model).map_err(|refusal| {
        match refusal {
            CompareRefusal::TooManyCandidates(message) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
            }
            CompareRefusal::Invalid(error) => ApiError::bad_request(&error),
        }
    })?;
    let ComparedRun { fitted, rubric } = submit(&state, &caller, |reply| Job::Compare {
        job: Box::new(job),
        reply,
    })
    .await?;
    let result = &fitted.result;
    let context = result.contexts.first().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the comparison returned no context",
        )
    })?;
    let candidates = context
        .candidate_ids
        .iter()
        .zip(&context.scores)
        .zip(&context.ranks)
        .map(|((id, &score), &rank)| RankedCandidate {
            id: id.clone(),
            score,
            rank,
        })
        .collect();
    let feedbacks: Vec<PairFeedbackBody> = context
        .comparisons
        .iter()
        .filter_map(|c| {
            let (a, b) = (
                &context.candidate_ids[c.first],
                &context.candidate_ids[c.second],
            );
            let key = (context.context_id.clone(), a.clone(), b.clone());
            result.feedbacks.get(&key).map(|reading| PairFeedbackBody {
                a: a.clone(),
                b: b.clone(),
                p_a: c.p_a,
                p_b: c.p_b,
                p_tie: c.p_tie,
                feedback: reading.feedback.clone(),
                format: reading.format.name(),
            })
        })
        .collect();
    Ok(Json(CompareResponse {
        candidates,
        set_aside: fitted
            .set_aside
            .iter()
            .map(SetAsideCandidate::from)
            .collect(),
        comparisons: context.comparisons.len(),
        rank: result.rank,
        diagnostics: result.diagnostics.clone(),
        rubric,
        feedbacks: (!feedbacks.is_empty()).then_some(feedbacks),
        ties: result.ties.clone(),
    }))
}

/// Status and counters. With tokens, a request presenting one of them also gets each
/// token name's counters (`per_token`) and the last reload's error; names and paths are
/// not shown to anyone else.
async fn healthz(State(state): State<AppState>, request: Request) -> Response {
    let stats = &state.stats;
    let draining = state.drain.is_draining();
    let status = if draining {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let mut body = json!({
        "status": if draining { "draining" } else { "ready" },
        "warnings": state.warnings.as_slice(),
        "tls": state.tls,
        "auth": state.tokens.as_ref().map(|tokens| tokens.status()),
        "max_queued_per_token": state.limits.max_queued_per_token,
        "model": state.model.name,
        "queued": WorkerStats::get(&stats.queued),
        "max_queue": state.limits.max_queue,
        "refused": WorkerStats::get(&stats.refused),
        "jobs": WorkerStats::get(&stats.jobs),
        "rounds": WorkerStats::get(&stats.rounds),
        "label_calls": WorkerStats::get(&stats.label_calls),
        "panics": WorkerStats::get(&stats.panics),
    });
    let authenticated = state.tokens.as_ref().is_some_and(|tokens| {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        tokens.identify(presented).is_some()
    });
    if authenticated {
        body["per_token"] = json!(state.callers.snapshot());
    } else if let Some(auth) = body["auth"].as_object_mut() {
        // The reload's error names the file's path: for callers with a token only.
        let failed = auth
            .remove("last_reload_error")
            .is_some_and(|error| !error.is_null());
        auth.insert("reload_failed".to_string(), json!(failed));
    }
    (status, Json(body)).into_response()
}
