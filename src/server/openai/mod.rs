//! The OpenAI-compatible routes of the service, on the same port, token and limits as
//! the metrics API, so that tools speaking the OpenAI API (the `openai` package,
//! lm-evaluation-harness's `local-completions`, deepeval's G-Eval) run against the local
//! model with exact log-probabilities.
//!
//! | route | what it answers |
//! |---|---|
//! | `POST /v1/completions` | `prompt` (text, token ids, or a list of either), `max_tokens` (default 16; 0: score only), `echo`, `logprobs` (0-20 alternatives), `temperature`, `top_p`, `seed`, `n`, `stop`, `stream` |
//! | `POST /v1/chat/completions` | `messages` through the model's chat template, `logprobs`, `top_logprobs` (0-20), `max_tokens` / `max_completion_tokens` (default: the room left in the context window), sampling as above |
//! | `GET /v1/models` | OpenAI's model list (`object`, `data`) beside the metrics API's `models` (with each one's `rubric_protocol`), `criteria` and `rubrics` (this route's errors, 401 included, have OpenAI's shape) |
//! | `GET /v1/models/{id}` | the model object, or 404 |
//! | `POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info` | vLLM's tokenizer routes, for lm-evaluation-harness |
//!
//! Requests go to the model worker, which serves every completion of a round in one
//! engine call: their prompts share one prefix trie, and a bounded prefix cache keeps
//! recent prefixes between rounds. Log-probabilities are the model's own (softmax of its
//! logits, whatever the sampling temperature); they do not depend on what else was in the
//! round or the cache beyond float rounding. `usage.prompt_tokens_details.cached_tokens`
//! and the `nlg-judge-cached-prompt-tokens` header count the prompt tokens computed
//! for other requests (earlier ones, through the cache, or others of the same round).
//! `stream: true` answers with server-sent events once the whole answer is ready.
//! Errors have OpenAI's shape (see [`error`]).

pub mod body;
pub mod error;
pub mod reply;
pub mod tokenize;
pub mod worker;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use self::body::{ChatBody, CompletionBody};
use self::error::OpenAiError;
use self::reply::{Meta, Usage};
use super::callers::Caller;
use super::http::{as_caller, authenticate, body_bytes, buffer_body, submit, AppState};
use super::worker::Job;
use crate::engine::{ModelInfo, Scorer};
use crate::judge::geval::Criteria;
use crate::judge::rubric::Rubric;
use crate::runtime::TextTokenizer;

/// Header with the number of prompt tokens computed for other requests.
pub const CACHED_TOKENS_HEADER: &str = "nlg-judge-cached-prompt-tokens";

/// What the OpenAI routes keep beside the service's state.
#[derive(Debug, Clone)]
pub struct Backend {
    /// A copy of the model's tokeniser, for the tokenizer routes.
    pub tokenizer: Option<TextTokenizer>,
    /// When the service started (the models' `created`).
    pub created: u64,
}

impl Backend {
    pub fn new(scorer: &dyn Scorer) -> Self {
        Self {
            tokenizer: scorer.text_tokenizer().cloned(),
            created: now(),
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `path` is one of these routes (their errors come in OpenAI's shape).
pub fn is_openai_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/completions"
            | "/v1/chat/completions"
            | "/v1/models"
            | "/tokenize"
            | "/detokenize"
            | "/tokenizer_info"
    ) || path.starts_with("/v1/models/")
}

/// The routes, behind the bearer token when one is configured.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/tokenizer_info", get(tokenize::tokenizer_info))
        .route_layer(middleware::from_fn_with_state(state.clone(), read_body))
        .route_layer(middleware::from_fn_with_state(state, require_token))
}

/// The whole body read first, as on the metrics routes, with errors in OpenAI's shape.
async fn read_body(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match buffer_body(&state, request).await {
        Ok(request) => next.run(request).await,
        Err(error) => OpenAiError::from(error).into_response(),
    }
}

/// The metrics routes' token check ([`authenticate`]), with errors in OpenAI's shape.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state, &request) {
        Ok(caller) => as_caller(caller, request, next).await,
        Err(error) => OpenAiError::from(error).into_response(),
    }
}

/// The model object of OpenAI's model list.
pub fn model_object(model: &ModelInfo, created: u64) -> Value {
    json!({
        "id": model.name,
        "object": "model",
        "created": created,
        "owned_by": "nlg-judge",
        "context_window": model.context_window,
        // The weights' hash (and precision): a client's cache tells served weights apart.
        "fingerprint": model.fingerprint,
    })
}

/// OpenAI's model list (`object`, `data`) beside the metrics API's own fields (the
/// loaded model's details with its rubric protocol, the built-in G-Eval criteria and
/// rubrics), so that one answer serves both kinds of client.
async fn models(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let criteria: Vec<Value> = Criteria::builtins()
        .map_err(|e| OpenAiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?
        .iter()
        .map(|c| {
            json!({
                "task": c.task.map(|t| t.name()),
                "name": c.name.to_lowercase(),
                "aliases": c.aliases,
                "scale": c.scale,
            })
        })
        .collect();
    let rubrics: Vec<Value> = Rubric::builtins()
        .map_err(|e| OpenAiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?
        .iter()
        .map(|(group, r)| {
            json!({
                "name": format!("{group}/{}", r.name.to_lowercase()),
                "aliases": r.aliases,
                "criterion": r.criterion,
                "scale": r.scale,
            })
        })
        .collect();
    let model = &state.model;
    Ok(Json(json!({
        "object": "list",
        "data": [model_object(model, state.openai.created)],
        "models": [{
            "name": model.name,
            "architecture": model.architecture,
            "kind": model.kind,
            "fingerprint": model.fingerprint,
            "context_window": model.context_window,
            // The rubric format `/v1/score` uses without a `protocol` field.
            "rubric_protocol": model.conventions.rubric_protocol.as_deref().unwrap_or("plain"),
        }],
        "criteria": criteria,
        "rubrics": rubrics,
    })))
}

async fn model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    body::check_model(&id, &state.model.name)?;
    Ok(Json(model_object(&state.model, state.openai.created)))
}

fn meta(state: &AppState, prefix: &str) -> Meta {
    let fingerprint: String = state.model.fingerprint.chars().take(12).collect();
    Meta {
        id: format!("{prefix}-{:032x}", rand::random::<u128>()),
        created: now(),
        model: state.model.name.clone(),
        system_fingerprint: format!("fp_{fingerprint}"),
    }
}

/// The answer as JSON, or as server-sent events (`events`, when streaming).
fn respond(answer: impl serde::Serialize, usage: Usage, events: Option<String>) -> Response {
    let mut response = match events {
        Some(events) => {
            let mut response = Response::new(Body::from(events));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        None => Json(answer).into_response(),
    };
    response
        .headers_mut()
        .insert(CACHED_TOKENS_HEADER, HeaderValue::from(usage.cached_tokens));
    response
}

async fn completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let body: CompletionBody = body::parse(&body_bytes(body)?)?;
    let job = body::completion_job(body, &state.model.name)?;
    let requests = job.requests.clone();
    let results = submit(&state, &caller, |reply| Job::Complete { requests, reply }).await?;
    let (answer, usage) = reply::completion(&job, &results, &meta(&state, "cmpl"));
    let events = job
        .stream
        .then(|| reply::completion_events(&answer, job.include_usage));
    Ok(respond(answer, usage, events))
}

async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let body: ChatBody = body::parse(&body_bytes(body)?)?;
    let job = body::chat_job(body, &state.model.name)?;
    let requests = job.requests.clone();
    let results = submit(&state, &caller, |reply| Job::Complete { requests, reply }).await?;
    let (answer, usage) = reply::chat(&job, &results, &meta(&state, "chatcmpl"));
    let events = job
        .stream
        .then(|| reply::chat_events(&answer, job.include_usage));
    Ok(respond(answer, usage, events))
}
