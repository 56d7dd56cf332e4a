//! [`T5Scorer`]: the [`Scorer`] for T5 / FlanT5 encoder-decoder checkpoints.
//!
//! A text prompt's user text (after the system text, if any, and a blank line) goes to the
//! encoder with eos appended; its `answer_prefix` ("Summary") is tokenised without eos
//! and follows the decoder start token; labels (" A"/" B") are scored after it by teacher
//! forcing. T5 has no chat template: `chat: true` is ignored (logged at debug level).
//!
//! Prompts are sorted by encoder length and cut into padded batches of at most
//! `max_batch_tokens` (rows x longest) with at most `max_padding` of them padding; labels that share tokens share decoder steps
//! (see `labels`).

mod batches;
mod continuation;
mod generation;
mod labels;

use anyhow::{ensure, Context, Result};

use super::completion::{CompletionRequest, CompletionResult, TokenLogprob};
use super::decoder::prefix_cache::PrefixCache;
use super::generation::{one_at_a_time, unscored, GenerationSink};
use super::request::{
    ContinuationRequest, ContinuationResult, FinishReason, Label, LabelRequest, LabelResult,
    LabelScore, Prompt, TokenPrompt,
};
use super::scorer::{ModelInfo, ModelKind, RenderedPrompt, Scorer};
use crate::arch::t5::T5Model;
use crate::runtime::TextTokenizer;

pub use batches::plan_batches;

/// Default padded-token budget of one encoder batch.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 4096;

/// Default cap on a batch's padding, as a fraction of its padded size.
pub const DEFAULT_MAX_PADDING: f64 = 0.1;

/// Work done so far, in tokens (for benchmarks and tests of batching and sharing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub encoder_batches: usize,
    /// Real encoder tokens.
    pub encoder_tokens: usize,
    /// Encoder positions computed, padding included.
    pub padded_encoder_tokens: usize,
    /// Decoder positions computed, padding included.
    pub decoder_tokens: usize,
}

impl Usage {
    fn add_encoder_batch(&mut self, rows: &[Vec<u32>]) {
        let longest = rows.iter().map(Vec::len).max().unwrap_or(0);
        self.encoder_batches += 1;
        self.encoder_tokens += rows.iter().map(Vec::len).sum::<usize>();
        self.padded_encoder_tokens += rows.len() * longest;
    }

    fn add_decoder_batch(&mut self, rows: &[Vec<u32>]) {
        let longest = rows.iter().map(Vec::len).max().unwrap_or(0);
        self.decoder_tokens += rows.len() * longest;
    }
}

/// A T5 model with its tokenizer, answering [`Scorer`] requests.
pub struct T5Scorer {
    model: T5Model,
    tokenizer: TextTokenizer,
    info: ModelInfo,
    max_batch_tokens: usize,
    max_padding: f64,
    usage: Usage,
}

impl T5Scorer {
    /// Assemble a scorer; the tokenizer's ids must fit the model's vocabulary.
    pub fn new(model: T5Model, tokenizer: TextTokenizer, info: ModelInfo) -> Result<Self> {
        let vocab = model.config().vocab_size;
        ensure!(
            tokenizer.vocab_size() <= vocab,
            "tokenizer has {} tokens but the model's vocabulary has {vocab} rows",
            tokenizer.vocab_size()
        );
        ensure!(
            info.kind == ModelKind::EncoderDecoder,
            "a T5 scorer's model info must say encoder-decoder"
        );
        Ok(Self {
            model,
            tokenizer,
            info,
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
            max_padding: DEFAULT_MAX_PADDING,
            usage: Usage::default(),
        })
    }

    /// Cap on a padded encoder batch, rows x longest prompt (at least one prompt per
    /// batch whatever its length). 1 scores prompts one at a time.
    pub fn with_max_batch_tokens(mut self, tokens: usize) -> Self {
        self.max_batch_tokens = tokens.max(1);
        self
    }

    /// Cap on a batch's padding as a fraction of its padded size (0: only prompts of
    /// equal length share a batch; 1: no cap).
    pub fn with_max_padding(mut self, fraction: f64) -> Self {
        self.max_padding = fraction.clamp(0.0, 1.0);
        self
    }

    pub fn model(&self) -> &T5Model {
        &self.model
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// Work done since construction.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    fn check_ids(&self, ids: &[u32], what: &str) -> Result<()> {
        let vocab = self.model.config().vocab_size;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            crate::bad_request!(
                "{what}: token id {bad} is outside the model's vocabulary ({vocab} rows)"
            );
        }
        Ok(())
    }

    fn prepare_labels(&self, request: &LabelRequest) -> Result<labels::PreparedLabels> {
        let prompt = self.encode_prompt(&request.prompt)?;
        let labels = request
            .labels
            .iter()
            .enumerate()
            .map(|(index, label)| {
                self.encode_label(label)
                    .with_context(|| format!("label {index}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(labels::PreparedLabels {
            encoder: prompt.input,
            prefix: prompt.decoder_prefix,
            labels,
        })
    }

    fn warn_if_long(&self, lengths: impl Iterator<Item = usize>) {
        let window = self.info.context_window;
        let long = lengths.filter(|&len| len > window).count();
        if long > 0 {
            tracing::warn!(
                "{long} prompt(s) longer than {window} tokens, the model's training length; \
                 T5's relative positions accept them but judgements may degrade"
            );
        }
    }
}

/// The encoder text of a prompt: the system text (if any), a blank line, the user text.
fn encoder_text(system: Option<&str>, user: &str) -> String {
    match system {
        Some(system) if !system.is_empty() => format!("{system}\n\n{user}"),
        _ => user.to_string(),
    }
}

impl Scorer for T5Scorer {
    fn length_limit(&self) -> Option<usize> {
        // Relative positions take any length (with a warning past the training length).
        None
    }

    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        Some(&self.tokenizer)
    }

    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        Ok(match prompt {
            Prompt::Text { text, .. } => RenderedPrompt {
                input: encoder_text(text.system.as_deref(), &text.user),
                decoder_prefix: text.answer_prefix.clone(),
            },
            Prompt::Tokens(tokens) => RenderedPrompt {
                input: self.tokenizer.decode(&tokens.input, false)?,
                decoder_prefix: self.tokenizer.decode(&tokens.decoder_prefix, false)?,
            },
        })
    }

    /// Batches are cut by length across the requests of a call: one call per context
    /// keeps a context's answers independent of the rest of the run.
    fn batches_across_contexts(&self) -> bool {
        false
    }

    fn encode_prompts(&self, prompts: &[&Prompt]) -> Vec<Result<TokenPrompt>> {
        use rayon::prelude::*;
        prompts
            .par_iter()
            .map(|prompt| self.encode_prompt(prompt))
            .collect()
    }

    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        match prompt {
            Prompt::Text { text, chat } => {
                if *chat {
                    tracing::debug!("T5 has no chat template: the prompt is used as plain text");
                }
                let input = self
                    .tokenizer
                    .encode_prompt(&encoder_text(text.system.as_deref(), &text.user))?;
                let decoder_prefix = self.tokenizer.encode(&text.answer_prefix)?;
                Ok(TokenPrompt {
                    input,
                    decoder_prefix,
                })
            }
            Prompt::Tokens(tokens) => {
                if tokens.input.is_empty() {
                    crate::bad_request!("token prompt has no encoder input");
                }
                self.check_ids(&tokens.input, "encoder input")?;
                self.check_ids(&tokens.decoder_prefix, "decoder prefix")?;
                Ok(tokens.clone())
            }
        }
    }

    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        let tokens = match label {
            Label::Text(text) => {
                let tokens = self.tokenizer.encode(text)?;
                if tokens.is_empty() {
                    crate::bad_request!("label {text:?} has no tokens");
                }
                tokens
            }
            Label::Tokens(tokens) => {
                if tokens.is_empty() {
                    crate::bad_request!("label has no tokens");
                }
                tokens.clone()
            }
        };
        self.check_ids(&tokens, "label")?;
        Ok(tokens)
    }

    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        self.label_logprobs_resume(requests, &vec![false; requests.len()], on_result)
    }

    /// Batches are planned over all requests; a batch runs when it holds a pending
    /// request, whole, so that its results are bitwise those of an uninterrupted call.
    fn label_logprobs_resume(
        &mut self,
        requests: &[LabelRequest],
        done: &[bool],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        ensure!(
            done.len() == requests.len(),
            "{} done flags for {} requests",
            done.len(),
            requests.len()
        );
        let mut prepared = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            let item = self
                .prepare_labels(request)
                .with_context(|| format!("label request {index}"))?;
            prepared.push(item);
        }
        let lengths: Vec<usize> = prepared.iter().map(|p| p.encoder.len()).collect();
        self.warn_if_long(lengths.iter().copied());
        for batch in plan_batches(&lengths, self.max_batch_tokens, self.max_padding) {
            if batch.iter().all(|&i| done[i]) {
                continue;
            }
            let items: Vec<&labels::PreparedLabels> = batch.iter().map(|&i| &prepared[i]).collect();
            let scores = labels::score_batch(&self.model, &items, &mut self.usage)?;
            for (&index, scores) in batch.iter().zip(scores) {
                if done[index] {
                    continue;
                }
                let item = &prepared[index];
                let result = LabelResult {
                    labels: item
                        .labels
                        .iter()
                        .zip(scores)
                        .map(|(tokens, logprob)| LabelScore {
                            tokens: tokens.clone(),
                            logprob,
                        })
                        .collect(),
                    prompt_tokens: item.encoder.len() + 1 + item.prefix.len(),
                };
                on_result(index, result)?;
            }
        }
        Ok(())
    }

    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>> {
        let mut prepared = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            let prompt = self
                .encode_prompt(&request.prompt)
                .with_context(|| format!("continuation request {index}"))?;
            let tokens = self
                .tokenizer
                .encode(&request.continuation)
                .with_context(|| format!("continuation request {index}"))?;
            prepared.push(continuation::PreparedContinuation {
                encoder: prompt.input,
                prefix: prompt.decoder_prefix,
                tokens,
            });
        }
        self.warn_if_long(prepared.iter().map(|p| p.encoder.len()));
        continuation::score_all(
            &self.model,
            &prepared,
            (self.max_batch_tokens, self.max_padding),
            &mut self.usage,
        )
    }

    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        _prefix_cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        if requests.iter().any(|r| r.prompt_logprobs || r.logprobs) {
            crate::bad_request!(
                "model '{}' ({}) gives no token log-probabilities for completions",
                self.info.name,
                self.info.architecture
            );
        }
        if requests.iter().any(|r| r.allowed_tokens.is_some()) {
            crate::bad_request!(
                "model '{}' ({}) does not restrict generation to allowed tokens",
                self.info.name,
                self.info.architecture
            );
        }
        let prompts = requests
            .iter()
            .map(|r| self.encode_prompt(&r.prompt))
            .collect::<Result<Vec<_>>>()?;
        self.warn_if_long(prompts.iter().map(|p| p.input.len()));
        one_at_a_time(
            self,
            requests.len(),
            &mut |scorer, index| {
                let prompt = &prompts[index];
                let generation = generation::generate(
                    &scorer.model,
                    &scorer.tokenizer,
                    prompt,
                    &requests[index],
                    &mut scorer.usage,
                )?;
                let mut generated: Vec<TokenLogprob> = generation
                    .tokens
                    .iter()
                    .map(|&id| unscored(id, Vec::new()))
                    .collect();
                if generation.finish == FinishReason::EndOfSequence {
                    generated.push(unscored(scorer.model.config().eos_token_id, Vec::new()));
                }
                Ok(CompletionResult {
                    prompt: prompt
                        .input
                        .iter()
                        .map(|&id| unscored(id, Vec::new()))
                        .collect(),
                    generated,
                    text: generation.text,
                    finish: generation.finish,
                    cached_prompt_tokens: 0,
                })
            },
            sink,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_text_precedes_the_user_text_after_a_blank_line() {
        assert_eq!(
            encoder_text(Some("Be brief."), "Hello"),
            "Be brief.\n\nHello"
        );
        assert_eq!(encoder_text(Some(""), "Hello"), "Hello");
        assert_eq!(encoder_text(None, "Hello"), "Hello");
    }

    #[test]
    fn usage_counts_padding() {
        let mut usage = Usage::default();
        usage.add_encoder_batch(&[vec![1, 2, 3], vec![1]]);
        usage.add_decoder_batch(&[vec![0, 5], vec![0]]);
        assert_eq!(
            usage,
            Usage {
                encoder_batches: 1,
                encoder_tokens: 4,
                padded_encoder_tokens: 6,
                decoder_tokens: 4
            }
        );
    }
}
