//! vLLM's tokenizer routes (`POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info`),
//! which lm-evaluation-harness's `local-completions` looks for to tokenise with the
//! served model's own tokeniser instead of fetching one from the model hub. They run on
//! the HTTP side with a copy of the tokeniser, never waiting for the model.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{check_model, parse};
use super::error::OpenAiError;
use crate::runtime::TextTokenizer;
use crate::server::http::{body_bytes, AppState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeBody {
    model: Option<String>,
    prompt: String,
    add_special_tokens: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeBody {
    model: Option<String>,
    tokens: Vec<u32>,
}

fn tokenizer(state: &AppState) -> Result<&TextTokenizer, OpenAiError> {
    state.openai.tokenizer.as_ref().ok_or_else(|| {
        OpenAiError::new(
            StatusCode::NOT_FOUND,
            format!("model `{}` has no tokenizer to expose", state.model.name),
        )
    })
}

fn check(state: &AppState, model: Option<&str>) -> Result<(), OpenAiError> {
    model.map_or(Ok(()), |m| check_model(m, &state.model.name))
}

fn failed(error: anyhow::Error) -> OpenAiError {
    OpenAiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("{error:#}"))
}

pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, OpenAiError> {
    let body: TokenizeBody = parse(&body_bytes(body)?)?;
    check(&state, body.model.as_deref())?;
    let tokenizer = tokenizer(&state)?;
    let tokens = if body.add_special_tokens.unwrap_or(true) {
        tokenizer.encode_prompt(&body.prompt)
    } else {
        tokenizer.encode(&body.prompt)
    }
    .map_err(failed)?;
    Ok(Json(json!({
        "count": tokens.len(),
        "max_model_len": state.model.context_window,
        "tokens": tokens,
        "token_strs": null,
    })))
}

pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, OpenAiError> {
    let body: DetokenizeBody = parse(&body_bytes(body)?)?;
    check(&state, body.model.as_deref())?;
    let tokenizer = tokenizer(&state)?;
    for &id in &body.tokens {
        tokenizer
            .check_id(id)
            .map_err(|e| OpenAiError::invalid("tokens", format!("{e:#}")))?;
    }
    let prompt = tokenizer.decode(&body.tokens, false).map_err(failed)?;
    Ok(Json(json!({ "prompt": prompt })))
}

pub async fn tokenizer_info(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let tokenizer = tokenizer(&state)?;
    let special = tokenizer.special();
    let text = |id: Option<u32>| id.and_then(|id| tokenizer.inner().id_to_token(id));
    Ok(Json(json!({
        "tokenizer_class": "nlg-judge",
        "eos_token": text(special.eos),
        "bos_token": text(special.bos),
        "pad_token": text(special.pad),
        "add_bos_token": special.add_bos,
        "model_max_length": state.model.context_window,
        "vocab_size": tokenizer.vocab_size(),
    })))
}
