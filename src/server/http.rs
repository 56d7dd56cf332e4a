//! Routes, handlers and middleware of the metrics service.
//!
//! Handlers read the body as bytes (the body limit answers 413), parse and check it
//! (400 naming the field, line and column; 422 for too many candidates), send a job to
//! the model worker and wait for its reply. `/healthz` never touches the worker, so it
//! answers while the model is busy. Every `/v1` route needs the bearer token when one is
//! configured (401 otherwise). The log records method, path, body size, status and
//! time — never the texts, which may be sensitive.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::oneshot;

use super::api::{
    compare_job, geval_task, parse_body, score_task, CompareBody, CompareRefusal, CompareResponse,
    GevalBody, RankedCandidate, ScoreBody, ScoreResponse,
};
use super::auth::BearerToken;
use super::worker::{Job, LabelTask, Reply, WorkerStats};
use crate::engine::ErrorKind;
use crate::engine::ModelInfo;

/// Request limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_candidates: usize,
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub jobs: mpsc::Sender<Job>,
    pub stats: Arc<WorkerStats>,
    pub model: Arc<ModelInfo>,
    pub token: Option<BearerToken>,
    pub limits: Limits,
    /// What the OpenAI-compatible routes keep.
    pub openai: Arc<super::openai::Backend>,
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
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(v1)
        .merge(super::openai::router(state.clone()))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn(log_requests))
        .with_state(state)
}

/// Log method, path, body size, status and time of every request (never its content).
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
    tracing::info!(
        %method,
        path,
        body_bytes,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if presented.is_none() {
            return ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token").into_response();
        }
        if !token.accepts(presented) {
            return ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token").into_response();
        }
    }
    next.run(request).await
}

/// The body bytes, or the limit's (413) or transport's error.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "request body is larger than this service accepts".to_string()
        } else {
            rejection.body_text()
        };
        ApiError::new(status, message)
    })
}

/// Send a job to the worker and wait for its answer.
pub(crate) async fn submit<T>(
    state: &AppState,
    job: impl FnOnce(Reply<T>) -> Job,
) -> Result<T, ApiError> {
    let (reply, answer) = oneshot::channel();
    state
        .stats
        .queued
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if state.jobs.send(job(reply)).is_err() {
        state
            .stats
            .queued
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
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
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model worker stopped before answering",
        )),
    }
}

async fn label_job(state: &AppState, task: LabelTask) -> Result<ScoreResponse, ApiError> {
    let answer = submit(state, |reply| Job::Label { task, reply }).await?;
    Ok(ScoreResponse::new(&answer.distribution, answer.steps))
}

async fn geval(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: GevalBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    let (task, reading) = geval_task(body).map_err(|e| ApiError::bad_request(&e))?;
    let mut response = label_job(&state, task).await?;
    response.scale_source = Some(reading.scale_source);
    response.criteria_name = Some(reading.name);
    Ok(Json(response))
}

async fn score(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: ScoreBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    let task = score_task(body).map_err(|e| ApiError::bad_request(&e))?;
    Ok(Json(label_job(&state, task).await?))
}

async fn compare(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CompareResponse>, ApiError> {
    let bytes = body_bytes(body)?;
    let body: CompareBody = parse_body(&bytes).map_err(|e| ApiError::bad_request(&e))?;
    let (context, options) =
        compare_job(body, state.limits.max_candidates).map_err(|refusal| match refusal {
            CompareRefusal::TooManyCandidates(message) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
            }
            CompareRefusal::Invalid(error) => ApiError::bad_request(&error),
        })?;
    let result = submit(&state, |reply| Job::Compare {
        context,
        options,
        reply,
    })
    .await?;
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
    Ok(Json(CompareResponse {
        candidates,
        comparisons: context.comparisons.len(),
    }))
}

async fn healthz(State(state): State<AppState>) -> Json<serde_json::Value> {
    let stats = &state.stats;
    Json(json!({
        "status": "ok",
        "model": state.model.name,
        "queued": WorkerStats::get(&stats.queued),
        "jobs": WorkerStats::get(&stats.jobs),
        "rounds": WorkerStats::get(&stats.rounds),
        "label_calls": WorkerStats::get(&stats.label_calls),
    }))
}
