//! Request bodies of the OpenAI routes and their checks, turning a request into the
//! engine's completion requests (one per choice).
//!
//! Fields the OpenAI API defines are accepted; those with no meaning here are accepted
//! at their neutral value (`presence_penalty: 0`, `logit_bias: {}`, `best_of` equal to
//! `n`) and refused otherwise, naming the field. Unknown fields are refused, as OpenAI
//! does. Everything that needs no model is checked here, before queueing.

use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::error::OpenAiError;
use crate::engine::{
    ChatMessage, ChatRole, CompletionRequest, Prompt, Sampling, TextPrompt, TokenPrompt,
    MAX_TOP_LOGPROBS,
};

/// Most choices (prompts x `n`) one request may ask for.
pub const MAX_CHOICES: usize = 256;

/// OpenAI's default `max_tokens` for completions.
pub const DEFAULT_COMPLETION_TOKENS: usize = 16;

/// Parse a JSON body; errors name the field (`param`), line and column.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, OpenAiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            OpenAiError::new(
                StatusCode::BAD_REQUEST,
                format!("malformed JSON body: {inner}"),
            )
        } else {
            OpenAiError::invalid(path.clone(), format!("invalid field `{path}`: {inner}"))
        }
    })?;
    deserializer.end().map_err(|e| {
        OpenAiError::new(StatusCode::BAD_REQUEST, format!("malformed JSON body: {e}"))
    })?;
    Ok(value)
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionBody {
    pub model: String,
    pub prompt: Value,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub n: Option<u64>,
    pub best_of: Option<u64>,
    pub stream: Option<bool>,
    pub stream_options: Option<Value>,
    pub logprobs: Option<u64>,
    pub echo: Option<bool>,
    pub stop: Option<Value>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    pub user: Option<String>,
    pub suffix: Option<String>,
    /// vLLM's extension: tokens in `logprobs` named `token_id:{id}` instead of by text,
    /// so that a client can tell apart tokens of one text (the remote backend asks).
    pub return_tokens_as_token_ids: Option<bool>,
    /// vLLM's extension: generate only these tokens; log-probs stay the model's own.
    pub allowed_token_ids: Option<Vec<u32>>,
}

/// One message of `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    pub role: String,
    pub content: Option<Value>,
    pub name: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    pub model: String,
    pub messages: Vec<MessageBody>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub n: Option<u64>,
    pub stream: Option<bool>,
    pub stream_options: Option<Value>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u64>,
    pub stop: Option<Value>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    pub user: Option<String>,
    pub response_format: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub metadata: Option<Value>,
    pub store: Option<bool>,
    pub service_tier: Option<String>,
    /// vLLM's extension, as in completions.
    pub allowed_token_ids: Option<Vec<u32>>,
}

/// A prompt of a completion request as given.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// A completion for the worker: the engine request, its chat messages when it is a chat
/// (rendered by the worker, which holds the model's template), and whether `max_tokens`
/// is to be the room left in the context window (a chat that sets none).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRequest {
    pub request: CompletionRequest,
    pub chat: Option<Vec<ChatMessage>>,
    pub fill_window: bool,
}

/// A checked completions request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionJob {
    pub prompts: Vec<PromptInput>,
    /// Choices per prompt.
    pub n: usize,
    /// `logprobs`: alternatives per position (`None`: no log-probs).
    pub logprobs: Option<usize>,
    pub echo: bool,
    /// Name tokens `token_id:{id}` in `logprobs` (`return_tokens_as_token_ids`).
    pub tokens_as_ids: bool,
    pub stream: bool,
    /// Streaming: end with a chunk that carries `usage`.
    pub include_usage: bool,
    /// One per choice: prompt `k / n`, choice `k % n`.
    pub requests: Vec<JobRequest>,
}

/// A checked chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatJob {
    pub logprobs: bool,
    pub stream: bool,
    pub include_usage: bool,
    pub requests: Vec<JobRequest>,
}

/// The model a request names must be the one served.
pub fn check_model(asked: &str, served: &str) -> Result<(), OpenAiError> {
    if asked == served {
        Ok(())
    } else {
        Err(OpenAiError::unknown_model(asked, served))
    }
}

fn prompts_of(value: &Value) -> Result<Vec<PromptInput>, OpenAiError> {
    let bad = || {
        OpenAiError::invalid(
            "prompt",
            "field `prompt`: expected a string, a list of strings, a list of token ids, or a list of lists of token ids",
        )
    };
    let token = |v: &Value| v.as_u64().and_then(|id| u32::try_from(id).ok());
    let tokens = |items: &[Value]| items.iter().map(token).collect::<Option<Vec<u32>>>();
    let prompts = match value {
        Value::String(text) => vec![PromptInput::Text(text.clone())],
        Value::Array(items) if items.is_empty() => {
            return Err(OpenAiError::invalid(
                "prompt",
                "field `prompt` is an empty list",
            ))
        }
        Value::Array(items) => match &items[0] {
            Value::String(_) => items
                .iter()
                .map(|v| v.as_str().map(|t| PromptInput::Text(t.to_string())))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?,
            Value::Number(_) => vec![PromptInput::Tokens(tokens(items).ok_or_else(bad)?)],
            Value::Array(_) => items
                .iter()
                .map(|v| {
                    v.as_array()
                        .and_then(|ids| tokens(ids))
                        .map(PromptInput::Tokens)
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?,
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    for (index, prompt) in prompts.iter().enumerate() {
        let empty = match prompt {
            PromptInput::Text(text) => text.is_empty(),
            PromptInput::Tokens(ids) => ids.is_empty(),
        };
        if empty {
            return Err(OpenAiError::invalid(
                "prompt",
                format!("prompt {index} is empty: a completion needs at least one prompt token"),
            ));
        }
    }
    Ok(prompts)
}

fn stop_of(value: Option<&Value>) -> Result<Vec<String>, OpenAiError> {
    let bad = || {
        OpenAiError::invalid(
            "stop",
            "field `stop`: expected a string or a list of strings",
        )
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![text.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad),
        Some(_) => Err(bad()),
    }
    .map(|stops| stops.into_iter().filter(|s| !s.is_empty()).collect())
}

/// Sampling settings shared by both routes.
struct SamplingFields {
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<i64>,
    n: Option<u64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    logit_bias: Option<serde_json::Map<String, Value>>,
}

impl SamplingFields {
    /// The sampling of choice `k` (each choice its own seed), and `n`.
    fn read(self) -> Result<(Vec<Sampling>, usize), OpenAiError> {
        for (name, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if value.is_some_and(|v| v != 0.0) {
                return Err(OpenAiError::invalid(
                    name,
                    format!("field `{name}`: only 0 is supported (no penalties)"),
                ));
            }
        }
        if self.logit_bias.is_some_and(|bias| !bias.is_empty()) {
            return Err(OpenAiError::invalid(
                "logit_bias",
                "field `logit_bias`: biases are not supported",
            ));
        }
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(OpenAiError::invalid(
                "temperature",
                format!("field `temperature`: {temperature} is not in [0, 2]"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(OpenAiError::invalid(
                "top_p",
                format!("field `top_p`: {top_p} is not in (0, 1]"),
            ));
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > MAX_CHOICES as u64 {
            return Err(OpenAiError::invalid(
                "n",
                format!("field `n`: {n} is not in [1, {MAX_CHOICES}]"),
            ));
        }
        let n = n as usize;
        // Without a seed, each request draws its own, as OpenAI's sampling does.
        let seed = self.seed.map_or_else(rand::random::<u64>, |s| s as u64);
        let samplings = (0..n as u64)
            .map(|k| {
                if temperature == 0.0 {
                    Sampling::Greedy
                } else {
                    Sampling::TopP {
                        temperature,
                        top_p,
                        seed: seed.wrapping_add(k),
                    }
                }
            })
            .collect();
        Ok((samplings, n))
    }
}

fn include_usage(options: Option<&Value>) -> bool {
    options
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn max_tokens_of(field: &str, value: Option<u64>) -> Result<Option<usize>, OpenAiError> {
    value
        .map(|v| {
            usize::try_from(v).map_err(|_| {
                OpenAiError::invalid(field, format!("field `{field}`: {v} is too large"))
            })
        })
        .transpose()
}

/// Check a completions body.
pub fn completion_job(body: CompletionBody, served: &str) -> Result<CompletionJob, OpenAiError> {
    check_model(&body.model, served)?;
    if body.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(OpenAiError::invalid(
            "suffix",
            "field `suffix` is not supported",
        ));
    }
    let prompts = prompts_of(&body.prompt)?;
    let stop = stop_of(body.stop.as_ref())?;
    let (samplings, n) = SamplingFields {
        temperature: body.temperature,
        top_p: body.top_p,
        seed: body.seed,
        n: body.n,
        presence_penalty: body.presence_penalty,
        frequency_penalty: body.frequency_penalty,
        logit_bias: body.logit_bias,
    }
    .read()?;
    if let Some(best_of) = body.best_of {
        if best_of != n as u64 {
            return Err(OpenAiError::invalid(
                "best_of",
                "field `best_of`: only equal to `n` is supported",
            ));
        }
    }
    if prompts.len() * n > MAX_CHOICES {
        return Err(OpenAiError::invalid(
            "prompt",
            format!(
                "{} prompts x {n} choices: at most {MAX_CHOICES} choices per request",
                prompts.len()
            ),
        ));
    }
    let logprobs = match body.logprobs {
        Some(k) if k > MAX_TOP_LOGPROBS as u64 => {
            return Err(OpenAiError::invalid(
                "logprobs",
                format!("field `logprobs`: {k} is more than {MAX_TOP_LOGPROBS}"),
            ))
        }
        other => other.map(|k| k as usize),
    };
    let echo = body.echo.unwrap_or(false);
    let max_tokens =
        max_tokens_of("max_tokens", body.max_tokens)?.unwrap_or(DEFAULT_COMPLETION_TOKENS);
    let allowed_tokens = allowed_of(body.allowed_token_ids)?;
    let mut requests = Vec::with_capacity(prompts.len() * n);
    for prompt in &prompts {
        let prompt = match prompt {
            PromptInput::Text(text) => Prompt::plain(TextPrompt::user(text.clone())),
            PromptInput::Tokens(ids) => Prompt::Tokens(TokenPrompt {
                input: ids.clone(),
                decoder_prefix: Vec::new(),
            }),
        };
        for sampling in &samplings {
            requests.push(JobRequest {
                request: CompletionRequest {
                    prompt: prompt.clone(),
                    prompt_logprobs: echo && logprobs.is_some(),
                    logprobs: logprobs.is_some(),
                    top_logprobs: logprobs.unwrap_or(0),
                    max_tokens,
                    sampling: *sampling,
                    stop: stop.clone(),
                    allowed_tokens: allowed_tokens.clone(),
                },
                chat: None,
                fill_window: false,
            });
        }
    }
    Ok(CompletionJob {
        prompts,
        n,
        logprobs,
        echo,
        tokens_as_ids: body.return_tokens_as_token_ids.unwrap_or(false),
        stream: body.stream.unwrap_or(false),
        include_usage: include_usage(body.stream_options.as_ref()),
        requests,
    })
}

fn content_of(index: usize, content: Option<&Value>) -> Result<String, OpenAiError> {
    let param = format!("messages[{index}].content");
    match content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (k, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(piece))) => text.push_str(piece),
                    _ => {
                        return Err(OpenAiError::invalid(
                            param,
                            format!(
                                "field `messages[{index}].content[{k}]`: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(OpenAiError::invalid(
            param.clone(),
            format!("field `{param}`: expected a string or a list of text parts"),
        )),
    }
}

/// `allowed_token_ids`: a non-empty list (ids past the vocabulary are refused by the
/// model, which knows its size).
fn allowed_of(ids: Option<Vec<u32>>) -> Result<Option<Vec<u32>>, OpenAiError> {
    match ids {
        Some(ids) if ids.is_empty() => Err(OpenAiError::invalid(
            "allowed_token_ids",
            "field `allowed_token_ids` is empty: nothing could be generated",
        )),
        other => Ok(other),
    }
}

/// Check a chat body.
pub fn chat_job(body: ChatBody, served: &str) -> Result<ChatJob, OpenAiError> {
    check_model(&body.model, served)?;
    for (name, present) in [
        ("tools", body.tools.as_ref().is_some_and(|t| !t.is_null())),
        (
            "tool_choice",
            body.tool_choice
                .as_ref()
                .is_some_and(|t| !t.is_null() && t != "none"),
        ),
    ] {
        if present {
            return Err(OpenAiError::invalid(
                name,
                format!("field `{name}`: tools are not supported"),
            ));
        }
    }
    if let Some(format) = &body.response_format {
        if format.get("type").and_then(Value::as_str) != Some("text") {
            return Err(OpenAiError::invalid(
                "response_format",
                "field `response_format`: only {\"type\": \"text\"} is supported (no constrained decoding)",
            ));
        }
    }
    if body.messages.is_empty() {
        return Err(OpenAiError::invalid(
            "messages",
            "field `messages` is empty",
        ));
    }
    let mut messages = Vec::with_capacity(body.messages.len());
    for (index, message) in body.messages.iter().enumerate() {
        let role = match message.role.as_str() {
            "system" | "developer" => ChatRole::System,
            "user" => ChatRole::User,
            "assistant" => ChatRole::Assistant,
            other => {
                return Err(OpenAiError::invalid(
                    format!("messages[{index}].role"),
                    format!(
                        "field `messages[{index}].role`: `{other}` is not supported (system, developer, user, assistant)"
                    ),
                ))
            }
        };
        messages.push(ChatMessage::new(
            role,
            content_of(index, message.content.as_ref())?,
        ));
    }
    let stop = stop_of(body.stop.as_ref())?;
    let (samplings, _) = SamplingFields {
        temperature: body.temperature,
        top_p: body.top_p,
        seed: body.seed,
        n: body.n,
        presence_penalty: body.presence_penalty,
        frequency_penalty: body.frequency_penalty,
        logit_bias: body.logit_bias,
    }
    .read()?;
    let logprobs = body.logprobs.unwrap_or(false);
    let top = body.top_logprobs.unwrap_or(0);
    if top > MAX_TOP_LOGPROBS as u64 {
        return Err(OpenAiError::invalid(
            "top_logprobs",
            format!("field `top_logprobs`: {top} is more than {MAX_TOP_LOGPROBS}"),
        ));
    }
    if top > 0 && !logprobs {
        return Err(OpenAiError::invalid(
            "top_logprobs",
            "field `top_logprobs` needs `logprobs: true`",
        ));
    }
    let max_tokens = match max_tokens_of("max_completion_tokens", body.max_completion_tokens)? {
        Some(max) => Some(max),
        None => max_tokens_of("max_tokens", body.max_tokens)?,
    };
    let allowed_tokens = allowed_of(body.allowed_token_ids)?;
    let requests = samplings
        .into_iter()
        .map(|sampling| JobRequest {
            request: CompletionRequest {
                // Rendered by the worker, which holds the chat template.
                prompt: Prompt::plain(TextPrompt::user(String::new())),
                prompt_logprobs: false,
                logprobs,
                top_logprobs: top as usize,
                max_tokens: max_tokens.unwrap_or(0),
                sampling,
                stop: stop.clone(),
                allowed_tokens: allowed_tokens.clone(),
            },
            chat: Some(messages.clone()),
            fill_window: max_tokens.is_none(),
        })
        .collect();
    Ok(ChatJob {
        logprobs,
        stream: body.stream.unwrap_or(false),
        include_usage: include_usage(body.stream_options.as_ref()),
        requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(json: &str) -> Result<CompletionJob, OpenAiError> {
        completion_job(parse(json.as_bytes())?, "m")
    }

    #[test]
    fn prompts_come_as_text_token_ids_or_lists_of_either() {
        let job = completion(r#"{"model": "m", "prompt": "Hi"}"#).unwrap();
        assert_eq!(job.prompts, vec![PromptInput::Text("Hi".into())]);
        assert_eq!(
            job.requests[0].request.max_tokens,
            DEFAULT_COMPLETION_TOKENS
        );
        let job = completion(
            r#"{"model": "m", "prompt": [[1, 2], [3]], "n": 2, "max_tokens": 0, "temperature": 0}"#,
        )
        .unwrap();
        assert_eq!(job.prompts.len(), 2);
        assert_eq!(job.requests.len(), 4);
        assert_eq!(job.requests[0].request.sampling, Sampling::Greedy);
        let job =
            completion(r#"{"model": "m", "prompt": [5, 6], "echo": true, "logprobs": 3}"#).unwrap();
        assert!(job.requests[0].request.prompt_logprobs);
        assert_eq!(job.requests[0].request.top_logprobs, 3);
        assert_eq!(job.requests[0].request.allowed_tokens, None);
        let job =
            completion(r#"{"model": "m", "prompt": [5], "allowed_token_ids": [7, 2]}"#).unwrap();
        assert_eq!(job.requests[0].request.allowed_tokens, Some(vec![7, 2]));
        for (json, param) in [
            (
                r#"{"model": "m", "prompt": "x", "allowed_token_ids": []}"#,
                "allowed_token_ids",
            ),
            (
                r#"{"model": "m", "prompt": "x", "allowed_token_ids": [-3]}"#,
                "allowed_token_ids",
            ),
            (r#"{"model": "m", "prompt": []}"#, "prompt"),
            (r#"{"model": "m", "prompt": [1, "a"]}"#, "prompt"),
            (r#"{"model": "m", "prompt": [-1]}"#, "prompt"),
            (r#"{"model": "m", "prompt": ""}"#, "prompt"),
            (
                r#"{"model": "m", "prompt": "x", "logprobs": 21}"#,
                "logprobs",
            ),
            (
                r#"{"model": "m", "prompt": "x", "temperature": 3}"#,
                "temperature",
            ),
            (r#"{"model": "m", "prompt": "x", "top_p": 0}"#, "top_p"),
            (
                r#"{"model": "m", "prompt": "x", "presence_penalty": 1}"#,
                "presence_penalty",
            ),
            (r#"{"model": "m", "prompt": "x", "stop": 3}"#, "stop"),
            (r#"{"model": "m", "prompt": "x", "colour": 3}"#, ""),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": -1}"#,
                "max_tokens",
            ),
        ] {
            let error = completion(json).unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST, "{json}");
            assert!(
                error
                    .param
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with(param),
                "{json}: {error:?}"
            );
        }
        let error = completion(r#"{"model": "other", "prompt": "x"}"#).unwrap_err();
        assert_eq!(error.status, axum::http::StatusCode::NOT_FOUND);
        assert_eq!(error.code, Some("model_not_found"));
    }

    #[test]
    fn chats_take_text_messages_and_log_prob_settings() {
        let chat = |json: &str| chat_job(parse(json.as_bytes())?, "m");
        let job = chat(
            r#"{"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                "logprobs": true, "top_logprobs": 20, "temperature": 0}"#,
        )
        .unwrap();
        let request = &job.requests[0];
        assert!(request.fill_window && request.request.logprobs);
        assert_eq!(request.request.top_logprobs, 20);
        let messages = request.chat.as_ref().unwrap();
        assert_eq!(messages[0], ChatMessage::new(ChatRole::System, "Be brief."));
        assert_eq!(messages[1], ChatMessage::new(ChatRole::User, "Hi"));
        let job = chat(r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5, "max_tokens": 9}"#).unwrap();
        assert_eq!(job.requests[0].request.max_tokens, 5);
        assert!(!job.requests[0].fill_window);
        assert_eq!(job.requests[0].request.allowed_tokens, None);
        let job = chat(r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "allowed_token_ids": [3]}"#).unwrap();
        assert_eq!(job.requests[0].request.allowed_tokens, Some(vec![3]));
        for (json, param) in [
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "allowed_token_ids": []}"#,
                "allowed_token_ids",
            ),
            (r#"{"model": "m", "messages": []}"#, "messages"),
            (
                r#"{"model": "m", "messages": [{"role": "tool", "content": "x"}]}"#,
                "messages[0].role",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                "messages[0].content",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#,
                "top_logprobs",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}"#,
                "tools",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}"#,
                "response_format",
            ),
        ] {
            let error = chat(json).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{json}: {error:?}");
        }
    }
}
