//! Response bodies of the OpenAI routes, built from the engine's completion results: the
//! completions object (`logprobs` with `tokens`, `token_logprobs`, `top_logprobs`,
//! `text_offset`; the prompt's tokens first with `echo`), the chat completion object
//! (`logprobs.content`, each token with its bytes and alternatives), their streamed
//! chunks, and `usage`.
//!
//! `usage` counts each prompt once (not once per choice), and the tokens the model
//! generated, the end-of-sequence token included; `prompt_tokens_details.cached_tokens`
//! counts the prompt tokens computed for an earlier request (prefix cache) or for another
//! request served in the same round.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::body::{ChatJob, CompletionJob, PromptInput};
use crate::engine::{CompletionResult, FinishReason, TokenLogprob};

/// What every response names: its id, time and model.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
}

/// Token counts of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

impl Usage {
    /// Prompts counted once: the first choice of each prompt (`n` choices each).
    fn of(results: &[CompletionResult], n: usize) -> Self {
        let mut usage = Usage::default();
        for (k, result) in results.iter().enumerate() {
            if k % n == 0 {
                usage.prompt_tokens += result.prompt.len();
                usage.cached_tokens += result.cached_prompt_tokens;
            }
            usage.completion_tokens += result.generated.len();
        }
        usage
    }

    fn body(self) -> UsageBody {
        UsageBody {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            prompt_tokens_details: PromptDetails {
                cached_tokens: self.cached_tokens,
            },
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct UsageBody {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptDetails,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptDetails {
    pub cached_tokens: usize,
}

/// Alternatives as an object in the order given (most likely first); of two ids with
/// one text, the first (more likely) is listed.
#[derive(Debug, Clone, PartialEq)]
pub struct TopMap(Vec<(String, f64)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut map = serializer.serialize_map(None)?;
        for (token, logprob) in &self.0 {
            if seen.insert(token) {
                map.serialize_entry(token, logprob)?;
            }
        }
        map.end()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f64>>,
    pub top_logprobs: Vec<Option<TopMap>>,
    pub text_offset: Vec<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: &'static str,
}

/// The answer of `/v1/completions`.
#[derive(Debug, Clone, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: UsageBody,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatAlternative {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatToken {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatAlternative>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatToken>,
    pub refusal: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatMessageBody {
    pub role: &'static str,
    pub content: String,
    pub refusal: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageBody,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

/// The answer of `/v1/chat/completions`.
#[derive(Debug, Clone, Serialize)]
pub struct ChatResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageBody,
}

fn finish_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::EndOfSequence | FinishReason::Stop => "stop",
        FinishReason::MaxTokens => "length",
    }
}

/// The prompt as echoed: the text given, or the tokens' text.
fn prompt_text(input: &PromptInput, result: &CompletionResult) -> String {
    match input {
        PromptInput::Text(text) => text.clone(),
        PromptInput::Tokens(_) => {
            let bytes: Vec<u8> = result
                .prompt
                .iter()
                .flat_map(|t| t.token.bytes.iter().copied())
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// Characters a token starts or completes (UTF-8 bytes that begin a character).
fn char_starts(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| (b & 0xc0) != 0x80).count()
}

/// A completions choice's `logprobs` over `tokens`, text offsets counted from `offset`.
fn completion_logprobs<'a>(
    tokens: impl Iterator<Item = &'a TokenLogprob>,
    mut offset: usize,
    as_ids: bool,
) -> CompletionLogprobs {
    let name = |piece: &crate::engine::TokenPiece| match as_ids {
        true => format!("token_id:{}", piece.id),
        false => piece.text(),
    };
    let mut out = CompletionLogprobs {
        tokens: Vec::new(),
        token_logprobs: Vec::new(),
        top_logprobs: Vec::new(),
        text_offset: Vec::new(),
    };
    for token in tokens {
        out.tokens.push(name(&token.token));
        out.token_logprobs.push(token.logprob);
        out.top_logprobs.push(token.logprob.map(|_| {
            TopMap(
                token
                    .top
                    .iter()
                    .map(|a| (name(&a.token), a.logprob))
                    .collect(),
            )
        }));
        out.text_offset.push(offset);
        offset += char_starts(&token.token.bytes);
    }
    out
}

/// The `/v1/completions` answer and its usage.
pub fn completion(
    job: &CompletionJob,
    results: &[CompletionResult],
    meta: &Meta,
) -> (CompletionResponse, Usage) {
    let usage = Usage::of(results, job.n);
    let choices = results
        .iter()
        .enumerate()
        .map(|(k, result)| {
            let prompt = prompt_text(&job.prompts[k / job.n], result);
            let text = if job.echo {
                format!("{prompt}{}", result.text)
            } else {
                result.text.clone()
            };
            let logprobs = job.logprobs.map(|_| {
                if job.echo {
                    completion_logprobs(
                        result.prompt.iter().chain(&result.generated),
                        0,
                        job.tokens_as_ids,
                    )
                } else {
                    completion_logprobs(
                        result.generated.iter(),
                        prompt.chars().count(),
                        job.tokens_as_ids,
                    )
                }
            });
            CompletionChoice {
                index: k,
                text,
                logprobs,
                finish_reason: finish_reason(result.finish),
            }
        })
        .collect();
    let body = CompletionResponse {
        id: meta.id.clone(),
        object: "text_completion",
        created: meta.created,
        model: meta.model.clone(),
        system_fingerprint: meta.system_fingerprint.clone(),
        choices,
        usage: usage.body(),
    };
    (body, usage)
}

/// The message tokens of a chat result: the end-of-sequence token is not content.
fn content_tokens(result: &CompletionResult) -> &[TokenLogprob] {
    match result.finish {
        FinishReason::EndOfSequence => {
            &result.generated[..result.generated.len().saturating_sub(1)]
        }
        _ => &result.generated,
    }
}

fn chat_logprobs(result: &CompletionResult) -> ChatLogprobs {
    let content = content_tokens(result)
        .iter()
        .map(|token| ChatToken {
            token: token.token.text(),
            logprob: token.logprob.unwrap_or(f64::NAN),
            bytes: token.token.bytes.clone(),
            top_logprobs: token
                .top
                .iter()
                .map(|a| ChatAlternative {
                    token: a.token.text(),
                    logprob: a.logprob,
                    bytes: a.token.bytes.clone(),
                })
                .collect(),
        })
        .collect();
    ChatLogprobs {
        content,
        refusal: None,
    }
}

/// The `/v1/chat/completions` answer and its usage.
pub fn chat(job: &ChatJob, results: &[CompletionResult], meta: &Meta) -> (ChatResponse, Usage) {
    let usage = Usage::of(results, results.len().max(1));
    let choices = results
        .iter()
        .enumerate()
        .map(|(k, result)| ChatChoice {
            index: k,
            message: ChatMessageBody {
                role: "assistant",
                content: result.text.clone(),
                refusal: None,
            },
            logprobs: job.logprobs.then(|| chat_logprobs(result)),
            finish_reason: finish_reason(result.finish),
        })
        .collect();
    let body = ChatResponse {
        id: meta.id.clone(),
        object: "chat.completion",
        created: meta.created,
        model: meta.model.clone(),
        system_fingerprint: meta.system_fingerprint.clone(),
        choices,
        usage: usage.body(),
    };
    (body, usage)
}

/// One server-sent event of a streamed answer.
#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: &'a str,
    choices: Vec<C>,
    /// Present (null until the last chunk) when the client asked for usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<&'a UsageBody>>,
}

#[derive(Serialize)]
struct ChatDelta<'a> {
    index: usize,
    delta: Value,
    logprobs: Option<&'a ChatLogprobs>,
    finish_reason: Option<&'static str>,
}

/// One event: `choices` (and `usage`) under the answer's id, time and model.
#[allow(clippy::too_many_arguments)]
fn event<C: Serialize>(
    id: &str,
    created: u64,
    model: &str,
    system_fingerprint: &str,
    object: &'static str,
    choices: Vec<C>,
    usage: Option<Option<&UsageBody>>,
) -> String {
    let chunk = Chunk {
        id,
        object,
        created,
        model,
        system_fingerprint,
        choices,
        usage,
    };
    let json = serde_json::to_string(&chunk).unwrap_or_else(|e| {
        serde_json::json!({"error": {"message": e.to_string(), "type": "server_error"}}).to_string()
    });
    format!("data: {json}\n\n")
}

/// The answer of `/v1/completions` as server-sent events: one chunk per choice, the
/// usage chunk when asked, `[DONE]`. Generation is not incremental: the events come when
/// the whole answer is ready.
pub fn completion_events(answer: &CompletionResponse, include_usage: bool) -> String {
    let a = answer;
    let object = "text_completion";
    let mut events = String::new();
    for choice in &a.choices {
        let usage = include_usage.then_some(None);
        events.push_str(&event(
            &a.id,
            a.created,
            &a.model,
            &a.system_fingerprint,
            object,
            vec![choice],
            usage,
        ));
    }
    if include_usage {
        let none: Vec<&CompletionChoice> = Vec::new();
        let usage = Some(Some(&a.usage));
        events.push_str(&event(
            &a.id,
            a.created,
            &a.model,
            &a.system_fingerprint,
            object,
            none,
            usage,
        ));
    }
    events.push_str("data: [DONE]\n\n");
    events
}

/// The answer of `/v1/chat/completions` as server-sent events: each choice's message in
/// one delta, then its end, the usage chunk when asked, `[DONE]`.
pub fn chat_events(answer: &ChatResponse, include_usage: bool) -> String {
    let a = answer;
    let object = "chat.completion.chunk";
    let mut events = String::new();
    for choice in &a.choices {
        let content = ChatDelta {
            index: choice.index,
            delta: serde_json::json!({"role": "assistant", "content": choice.message.content}),
            logprobs: choice.logprobs.as_ref(),
            finish_reason: None,
        };
        let end = ChatDelta {
            index: choice.index,
            delta: serde_json::json!({}),
            logprobs: None,
            finish_reason: Some(choice.finish_reason),
        };
        for delta in [content, end] {
            let usage = include_usage.then_some(None);
            events.push_str(&event(
                &a.id,
                a.created,
                &a.model,
                &a.system_fingerprint,
                object,
                vec![delta],
                usage,
            ));
        }
    }
    if include_usage {
        let none: Vec<ChatDelta> = Vec::new();
        let usage = Some(Some(&a.usage));
        events.push_str(&event(
            &a.id,
            a.created,
            &a.model,
            &a.system_fingerprint,
            object,
            none,
            usage,
        ));
    }
    events.push_str("data: [DONE]\n\n");
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{ScoredToken, TokenPiece};
    use serde_json::json;

    fn token(id: u32, text: &str, logprob: Option<f64>) -> TokenLogprob {
        TokenLogprob {
            token: TokenPiece {
                id,
                bytes: text.as_bytes().to_vec(),
            },
            logprob,
            top: logprob
                .map(|lp| {
                    vec![ScoredToken {
                        token: TokenPiece {
                            id,
                            bytes: text.as_bytes().to_vec(),
                        },
                        logprob: lp,
                    }]
                })
                .unwrap_or_default(),
        }
    }

    #[test]
    fn echoed_completions_list_prompt_then_generated_tokens() {
        let result = CompletionResult {
            prompt: vec![token(1, "Hé", None), token(2, " you", Some(-1.5))],
            generated: vec![token(3, "!", Some(-0.5))],
            text: "!".into(),
            finish: FinishReason::MaxTokens,
            cached_prompt_tokens: 1,
        };
        let job = CompletionJob {
            prompts: vec![PromptInput::Tokens(vec![1, 2])],
            n: 1,
            logprobs: Some(1),
            echo: true,
            tokens_as_ids: false,
            stream: false,
            include_usage: false,
            requests: vec![],
        };
        let meta = Meta {
            id: "cmpl-1".into(),
            created: 0,
            model: "m".into(),
            system_fingerprint: "fp".into(),
        };
        let (body, usage) = completion(&job, std::slice::from_ref(&result), &meta);
        let events = completion_events(&body, true);
        let body = serde_json::to_value(&body).unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["text"], "Hé you!");
        assert_eq!(choice["logprobs"]["tokens"], json!(["Hé", " you", "!"]));
        assert_eq!(
            choice["logprobs"]["token_logprobs"],
            json!([null, -1.5, -0.5])
        );
        assert_eq!(choice["logprobs"]["top_logprobs"][0], Value::Null);
        assert_eq!(choice["logprobs"]["top_logprobs"][2], json!({"!": -0.5}));
        // Alternatives keep their order (most likely first), not the keys' order.
        let top = TopMap(vec![
            ("b".into(), -0.1),
            ("a".into(), -0.2),
            ("b".into(), -0.3),
        ]);
        assert_eq!(
            serde_json::to_string(&top).unwrap(),
            r#"{"b":-0.1,"a":-0.2}"#
        );
        assert_eq!(choice["logprobs"]["text_offset"], json!([0, 2, 6]));
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 2,
                completion_tokens: 1,
                cached_tokens: 1
            }
        );
        assert_eq!(body["usage"]["total_tokens"], 3);
        assert!(events.ends_with("data: [DONE]\n\n"));
        assert_eq!(events.matches("data: ").count(), 3);
    }

    #[test]
    fn chat_content_leaves_out_the_end_of_sequence_token() {
        let result = CompletionResult {
            prompt: vec![token(1, "x", None)],
            generated: vec![
                token(3, "4", Some(-0.1)),
                token(0, "<|im_end|>", Some(-0.2)),
            ],
            text: "4".into(),
            finish: FinishReason::EndOfSequence,
            cached_prompt_tokens: 0,
        };
        let logprobs = serde_json::to_value(chat_logprobs(&result)).unwrap();
        let content = &logprobs["content"];
        assert_eq!(content.as_array().unwrap().len(), 1);
        assert_eq!(content[0]["token"], "4");
        assert_eq!(content[0]["bytes"], json!([52]));
        assert_eq!(content[0]["top_logprobs"][0]["logprob"], -0.1);
    }
}
