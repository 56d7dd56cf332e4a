//! Completion requests: what an OpenAI-style client asks of a model in one call.
//!
//! A completion reads a prompt and may (1) score the prompt's own tokens, each given the
//! ones before it, with the most likely alternatives at every position (`echo` with
//! `logprobs` in the OpenAI API, how lm-evaluation-harness asks for log-likelihoods), and
//! (2) generate text, reporting each generated token's log-probability and alternatives
//! (how deepeval's G-Eval reads a score's distribution). Both need the full-vocabulary
//! distribution at the positions involved, unlike label requests, which read a few token
//! ids only. Scorers answer many completions in one call so that prompts sharing a
//! prefix share its computation, and keep recent prefixes in a caller-owned
//! [`super::PrefixCache`] between calls.
//!
//! Log-probabilities are those of the model's own distribution (natural log, softmax of
//! the raw logits), whatever sampling temperature chooses the tokens.

use serde::{Deserialize, Serialize};

use super::request::{FinishReason, Prompt, Sampling};

/// Most alternatives a completion may ask for at each position.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One completion: score the prompt, generate after it, or both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    /// Score every prompt token after the first (log-prob given the tokens before it).
    pub prompt_logprobs: bool,
    /// Report the generated tokens' log-probabilities.
    pub logprobs: bool,
    /// Most likely alternatives reported at each scored position (prompt and generated),
    /// at most [`MAX_TOP_LOGPROBS`].
    pub top_logprobs: usize,
    /// Tokens to generate (0: score the prompt only).
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Generation stops when the text contains one of these (the text is cut before it).
    pub stop: Vec<String>,
    /// Generate only these tokens (vLLM's `allowed_token_ids`); log-probabilities stay
    /// those of the whole vocabulary's distribution. `None`: any token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tokens: Option<Vec<u32>>,
}

impl CompletionRequest {
    /// A greedy generation of at most `max_tokens` tokens, no log-probs asked.
    pub fn generate(prompt: Prompt, max_tokens: usize) -> Self {
        Self {
            prompt,
            prompt_logprobs: false,
            logprobs: false,
            top_logprobs: 0,
            max_tokens,
            sampling: Sampling::Greedy,
            stop: Vec::new(),
            allowed_tokens: None,
        }
    }

    /// Score the prompt's tokens with `top` alternatives each; generate nothing.
    pub fn score_prompt(prompt: Prompt, top: usize) -> Self {
        Self {
            prompt_logprobs: true,
            top_logprobs: top,
            ..Self::generate(prompt, 0)
        }
    }
}

/// A token, as the tokeniser's bytes (a token may hold part of a UTF-8 character).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenPiece {
    pub id: u32,
    pub bytes: Vec<u8>,
}

impl TokenPiece {
    /// The token as text: its bytes when they are UTF-8, else `bytes:\xNN...` as the
    /// OpenAI API writes partial characters.
    pub fn text(&self) -> String {
        match std::str::from_utf8(&self.bytes) {
            Ok(text) => text.to_string(),
            Err(_) => {
                let mut text = String::from("bytes:");
                for byte in &self.bytes {
                    text.push_str(&format!("\\x{byte:02x}"));
                }
                text
            }
        }
    }
}

/// A token with its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredToken {
    pub token: TokenPiece,
    pub logprob: f64,
}

/// One position of a completion: the token there, its log-probability given what came
/// before (`None` for a prompt's first token, which has no context), and the most likely
/// tokens at that position, most likely first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: TokenPiece,
    pub logprob: Option<f64>,
    pub top: Vec<ScoredToken>,
}

/// The answer to a [`CompletionRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResult {
    /// The prompt's tokens, each with its log-probability when the prompt was scored
    /// (else logprob `None` and no alternatives).
    pub prompt: Vec<TokenLogprob>,
    /// Generated tokens with their log-probabilities (when asked), the end-of-sequence
    /// token included when it ended the generation (its text is not part of `text`).
    pub generated: Vec<TokenLogprob>,
    /// Generated text (special tokens left out), cut before a stop string.
    pub text: String,
    /// Why generation ended (`MaxTokens` when nothing was asked to be generated).
    pub finish: FinishReason,
    /// Prompt tokens whose keys and values this request did not compute itself: they came
    /// from the prefix cache (an earlier call) or from another request of the same call
    /// that reached them first.
    pub cached_prompt_tokens: usize,
}

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    System,
    User,
    Assistant,
}

/// One message of a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: ChatRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_characters_are_written_as_bytes() {
        let piece = |bytes: &[u8]| TokenPiece {
            id: 0,
            bytes: bytes.to_vec(),
        };
        assert_eq!(piece(b" cat").text(), " cat");
        assert_eq!(piece("é".as_bytes()).text(), "é");
        assert_eq!(piece(&[0xe2, 0x80]).text(), "bytes:\\xe2\\x80");
    }
}
