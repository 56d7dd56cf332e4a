//! Request and result types of the scoring engine.
//!
//! Methods (pairwise, G-Eval, GPTScore) describe *what* they want scored with these plain
//! types; the engine decides *how* (templating, tokenisation, batching, prefix sharing).
//! Nothing here mentions tensors.

use serde::{Deserialize, Serialize};

/// A prompt as a method writes it, before the model's chat template and tokeniser.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TextPrompt {
    /// System message for chat models (`None`: the model card's default, if any).
    pub system: Option<String>,
    /// The user's message: the task text (context, candidates, question).
    pub user: String,
    /// Text that opens the model's answer: the assistant turn for chat models, the
    /// decoder input for encoder-decoder models, appended to `user` otherwise.
    /// Labels are scored right after it.
    pub answer_prefix: String,
}

impl TextPrompt {
    /// A prompt with no system message and no answer prefix.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            system: None,
            user: text.into(),
            answer_prefix: String::new(),
        }
    }

    /// The same prompt with `prefix` opening the answer.
    pub fn with_answer_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.answer_prefix = prefix.into();
        self
    }
}

/// A prompt already in token ids.
///
/// For decoder-only models `input` is the whole sequence the labels follow and
/// `decoder_prefix` must be empty. For encoder-decoder models `input` goes to the encoder
/// (with its end-of-sequence token already appended) and `decoder_prefix` follows the
/// decoder start token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenPrompt {
    pub input: Vec<u32>,
    pub decoder_prefix: Vec<u32>,
}

/// A prompt in either form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Prompt {
    /// Text, rendered with the model's chat template when `chat` is true.
    Text { text: TextPrompt, chat: bool },
    /// Token ids, used as they are.
    Tokens(TokenPrompt),
}

impl Prompt {
    /// A plain-text prompt without chat template.
    pub fn plain(text: TextPrompt) -> Self {
        Prompt::Text { text, chat: false }
    }

    /// A text prompt rendered with the model's chat template.
    pub fn chat(text: TextPrompt) -> Self {
        Prompt::Text { text, chat: true }
    }
}

/// One label (answer word) to score after a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Label {
    /// Text, tokenised without special tokens (" A", "Summary A", "10").
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
}

impl From<&str> for Label {
    fn from(text: &str) -> Self {
        Label::Text(text.to_string())
    }
}

/// Score each label after the prompt: `log P(label | prompt)`, multi-token labels by
/// teacher forcing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LabelRequest {
    pub prompt: Prompt,
    pub labels: Vec<Label>,
}

/// The log-probability of one label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelScore {
    /// The label's token ids as scored.
    pub tokens: Vec<u32>,
    /// `log P(label | prompt)`: the sum of the token log-probabilities (natural log).
    pub logprob: f64,
}

/// The answer to a [`LabelRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelResult {
    /// One score per requested label, in request order.
    pub labels: Vec<LabelScore>,
    /// Number of prompt tokens the model read (encoder + decoder prefix for T5).
    pub prompt_tokens: usize,
}

impl LabelResult {
    /// Total probability the labels received, `sum_k P(label_k | prompt)`: a diagnostic,
    /// a prompt whose labels get little mass is a broken prompt.
    pub fn label_mass(&self) -> f64 {
        self.labels.iter().map(|l| l.logprob.exp()).sum()
    }

    /// The labels' probabilities renormalised over the label set (softmax of the
    /// log-probs), computed stably.
    pub fn normalised(&self) -> Vec<f64> {
        let max = self
            .labels
            .iter()
            .map(|l| l.logprob)
            .fold(f64::NEG_INFINITY, f64::max);
        if !max.is_finite() {
            return vec![f64::NAN; self.labels.len()];
        }
        let exps: Vec<f64> = self
            .labels
            .iter()
            .map(|l| (l.logprob - max).exp())
            .collect();
        let total: f64 = exps.iter().sum();
        exps.into_iter().map(|e| e / total).collect()
    }
}

/// Score a continuation after a prompt token by token (GPTScore-style baselines).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContinuationRequest {
    pub prompt: Prompt,
    /// The text whose likelihood is measured; tokenised without special tokens.
    pub continuation: String,
}

/// The answer to a [`ContinuationRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContinuationResult {
    pub tokens: Vec<u32>,
    /// `log P(token_t | prompt, tokens_<t)` for each continuation token.
    pub token_logprobs: Vec<f64>,
}

impl ContinuationResult {
    pub fn total_logprob(&self) -> f64 {
        self.token_logprobs.iter().sum()
    }

    /// Mean token log-probability (GPTScore); `NaN` for an empty continuation.
    pub fn mean_logprob(&self) -> f64 {
        if self.token_logprobs.is_empty() {
            f64::NAN
        } else {
            self.total_logprob() / self.token_logprobs.len() as f64
        }
    }
}

/// How the next token is chosen during generation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Sampling {
    /// Always the most likely token (ties: the lowest id).
    Greedy,
    /// Nucleus sampling at `temperature`, restricted to the smallest set of tokens whose
    /// probability reaches `top_p`, from a random generator seeded with `seed`.
    TopP {
        temperature: f64,
        top_p: f64,
        seed: u64,
    },
}

/// Generate text after a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRequest {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Generation stops when the text ends with one of these (which is then removed).
    pub stop: Vec<String>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    EndOfSequence,
    Stop,
    MaxTokens,
}

/// The answer to a [`GenerationRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(logprobs: &[f64]) -> LabelResult {
        LabelResult {
            labels: logprobs
                .iter()
                .map(|&logprob| LabelScore {
                    tokens: vec![],
                    logprob,
                })
                .collect(),
            prompt_tokens: 1,
        }
    }

    #[test]
    fn normalised_probabilities_are_a_softmax_of_the_logprobs() {
        let r = result(&[(0.2f64).ln(), (0.6f64).ln()]);
        let p = r.normalised();
        assert!((p[0] - 0.25).abs() < 1e-12);
        assert!((p[1] - 0.75).abs() < 1e-12);
        assert!((r.label_mass() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn normalisation_is_stable_for_very_small_logprobs() {
        let r = result(&[-1000.0, -1000.0 - (3.0f64).ln()]);
        let p = r.normalised();
        assert!((p[0] - 0.75).abs() < 1e-12, "{p:?}");
        assert_eq!(r.label_mass(), 0.0);
    }

    #[test]
    fn mean_logprob_of_empty_continuation_is_nan() {
        let c = ContinuationResult {
            tokens: vec![],
            token_logprobs: vec![],
        };
        assert!(c.mean_logprob().is_nan());
    }
}
