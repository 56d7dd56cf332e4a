//! The `Scorer`: the one interface every method talks to.
//!
//! A scorer owns a model (decoder-only or encoder-decoder, or a scripted mock) and answers
//! label, continuation and generation requests. Methods never see tensors or know which
//! architecture answers them; they read the model's conventions (answer prefix, label
//! words) from [`ModelInfo`].

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::request::{
    ContinuationRequest, ContinuationResult, Generation, GenerationRequest, Label, LabelRequest,
    LabelResult, Prompt, TokenPrompt,
};

/// Whether the model reads the prompt with a decoder only or an encoder and a decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    DecoderOnly,
    EncoderDecoder,
    /// An encoder that only embeds text (BERTScore's encoder); never behind a scorer.
    EncoderOnly,
}

/// How a model family is asked for a judgement (from the model card).
///
/// `{item}` in `answer_prefix` is replaced by the task's item noun ("Summary",
/// "Response", "Text").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conventions {
    /// Appended to the user prompt of a pairwise question (Llama-2-chat: "\n\nAnswer:").
    pub pairwise_suffix: String,
    /// Opens the answer of a pairwise question (FlanT5: "{item}"; Llama-2: " {item}").
    pub answer_prefix: String,
    /// The two label words scored right after the answer prefix.
    pub label_a: String,
    pub label_b: String,
    /// Appended to the user prompt of an absolute-scoring question (chat: "\n\nScore:").
    pub score_suffix: String,
    /// Whether prompts go through the chat template by default.
    pub chat: bool,
}

impl Default for Conventions {
    fn default() -> Self {
        Self {
            pairwise_suffix: String::new(),
            answer_prefix: "{item}".to_string(),
            label_a: " A".to_string(),
            label_b: " B".to_string(),
            score_suffix: String::new(),
            chat: false,
        }
    }
}

impl Conventions {
    /// The answer prefix with the item noun substituted.
    pub fn answer_prefix_for(&self, item: &str) -> String {
        self.answer_prefix.replace("{item}", item)
    }
}

/// What a method may know about the model behind a scorer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Card name, or the file or directory name for models loaded from a path.
    pub name: String,
    /// Architecture name as the weights declare it ("llama", "qwen2", "t5").
    pub architecture: String,
    pub kind: ModelKind,
    /// sha256 of the weights (hex): the result cache's key, so that results computed
    /// with other weights are never reused.
    pub fingerprint: String,
    /// Longest prompt + answer, in tokens, the model accepts.
    pub context_window: usize,
    pub conventions: Conventions,
}

/// A prompt after templating: what the model reads, shown by `--show-prompt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedPrompt {
    /// Text given to the (encoder or decoder-only) model, special tags included.
    pub input: String,
    /// Text the decoder starts from (encoder-decoder models only; empty otherwise).
    pub decoder_prefix: String,
}

/// The one interface methods use to query a model.
pub trait Scorer: Send {
    fn info(&self) -> &ModelInfo;

    /// The prompt as the model will read it (chat template applied).
    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt>;

    /// The prompt's token ids (chat template and tokeniser applied).
    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt>;

    /// A label's token ids; an empty label is an error.
    fn encode_label(&self, label: &Label) -> Result<Vec<u32>>;

    /// Score every request, handing each result to `on_result(request_index, result)` as
    /// soon as it is known (results may arrive in any order). An error from `on_result`
    /// stops the work and is returned.
    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()>;

    /// Score the requests not marked `done` (results handed to `on_result` with their
    /// index into `requests`), computing them exactly as a call with all `requests`
    /// would, so that a run resumed after an interruption gives bitwise the results of an
    /// uninterrupted one. The default scores the pending requests on their own, which is
    /// exact for scorers whose results do not depend on what else is in the call.
    fn label_logprobs_resume(
        &mut self,
        requests: &[LabelRequest],
        done: &[bool],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        if done.len() != requests.len() {
            anyhow::bail!("{} done flags for {} requests", done.len(), requests.len());
        }
        let pending: Vec<usize> = (0..requests.len()).filter(|&i| !done[i]).collect();
        let subset: Vec<LabelRequest> = pending.iter().map(|&i| requests[i].clone()).collect();
        self.label_logprobs_each(&subset, &mut |k, result| on_result(pending[k], result))
    }

    /// Score every request; results in request order.
    fn label_logprobs(&mut self, requests: &[LabelRequest]) -> Result<Vec<LabelResult>> {
        let mut slots: Vec<Option<LabelResult>> = vec![None; requests.len()];
        self.label_logprobs_each(requests, &mut |index, result| {
            slots[index] = Some(result);
            Ok(())
        })?;
        slots
            .into_iter()
            .enumerate()
            .map(|(index, slot)| {
                slot.ok_or_else(|| anyhow::anyhow!("scorer returned no result for request {index}"))
            })
            .collect()
    }

    /// Per-token log-likelihood of each continuation.
    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>>;

    /// Generate text.
    fn generate(&mut self, request: &GenerationRequest) -> Result<Generation>;

    /// Generate text for several requests; results in request order. Each request is
    /// sampled from its own seeded generator. The default runs them one at a time;
    /// scorers that can run rows side by side (each with its own cache) override it.
    fn generate_batch(&mut self, requests: &[GenerationRequest]) -> Result<Vec<Generation>> {
        requests.iter().map(|r| self.generate(r)).collect()
    }
}
