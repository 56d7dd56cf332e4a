//! The `Scorer`: the one interface every method talks to.
//!
//! A scorer owns a model (decoder-only or encoder-decoder, or a scripted mock) and answers
//! label, continuation and generation requests. Methods never see tensors or know which
//! architecture answers them; they read the model's conventions (answer prefix, label
//! words) from [`ModelInfo`].

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::runtime::TextTokenizer;
pub use crate::runtime::{Conventions, ModelKind};

use super::completion::{ChatMessage, ChatRole, CompletionRequest};
use super::decoder::prefix_cache::PrefixCache;
use super::request::{
    ContinuationRequest, ContinuationResult, Label, LabelRequest, LabelResult, Prompt, TextPrompt,
    TokenPrompt,
};

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

/// Counts of a served model's work: requests made, retried and failed, and the route
/// each label's log-probability took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub requests: u64,
    pub retries: u64,
    pub failures: u64,
    /// Labels read from the top-K alternatives.
    pub top_k: u64,
    /// Labels that needed the echo request.
    pub echo: u64,
    /// Labels outside the top-K given its bound (`--accept-top-k-only`).
    pub bounded: u64,
    /// Labels read from a generation restricted to them (`allowed_token_ids`).
    pub restricted: u64,
}

impl Usage {
    /// What was done after `earlier` (a snapshot of the same scorer): one call's part.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            requests: self.requests.saturating_sub(earlier.requests),
            retries: self.retries.saturating_sub(earlier.retries),
            failures: self.failures.saturating_sub(earlier.failures),
            top_k: self.top_k.saturating_sub(earlier.top_k),
            echo: self.echo.saturating_sub(earlier.echo),
            bounded: self.bounded.saturating_sub(earlier.bounded),
            restricted: self.restricted.saturating_sub(earlier.restricted),
        }
    }
}

/// The one interface methods use to query a model.
pub trait Scorer: Send {
    fn info(&self) -> &ModelInfo;

    /// The prompt as the model will read it (chat template applied).
    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt>;

    /// The prompt's token ids (chat template and tokeniser applied).
    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt>;

    /// The most tokens a prompt and its label may hold together, where the model refuses
    /// longer ones (a decoder's context window); `None` where it takes any length (T5's
    /// relative positions).
    fn length_limit(&self) -> Option<usize> {
        Some(self.info().context_window)
    }

    /// Whether one call may carry the requests of every context of a run (one prefix
    /// trie, passes cut across contexts). Batches can move a result's last bits (a
    /// matrix product's blocking follows its row count), so a scorer whose results must
    /// not depend on the other contexts of a run (the CPU's depth-first trie: a shard of
    /// a run then gives the bytes of the whole run) answers `false` and gets one call per
    /// context ([`crate::engine::runner::fill_together`]).
    fn batches_across_contexts(&self) -> bool {
        true
    }

    /// Where this scorer sends its notes from now on (the Python package gives each call
    /// its own channel). Scorers that note nothing ignore it.
    fn report_to(&mut self, _progress: crate::progress::Progress) {}

    /// The work so far of a scorer that talks to something outside this process (an
    /// engine's requests, retries and label routes); `None` for a model loaded here.
    fn usage(&self) -> Option<Usage> {
        None
    }

    /// One line on `usage` (all of [`Self::usage`], or the part of one call: see
    /// [`Usage::since`]), for the end of a call; `None` for a model loaded here.
    fn usage_line(&self, usage: &Usage) -> Option<String> {
        let _ = usage;
        None
    }

    /// [`Self::encode_prompt`] of every prompt, in order. Scorers that tokenise on this
    /// machine do it on every core: a run's prompts are tokenised before its first pass,
    /// and a GPU waits for them.
    fn encode_prompts(&self, prompts: &[&Prompt]) -> Vec<Result<TokenPrompt>> {
        prompts
            .iter()
            .map(|prompt| self.encode_prompt(prompt))
            .collect()
    }

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

    /// The one generating entry point (see [`crate::engine::generation`]): generate (and
    /// score, where asked) every request of `requests` in one call, handing each result to
    /// `sink` as soon as it is finished, in any order, and answering the follow-up label
    /// request the sink may ask after each. Prompts that start the same way are computed
    /// once where the scorer can share them; `prefix_cache` keeps recent prefixes between
    /// calls (the service's worker owns one; give `PrefixCache::new(0)` for none). A
    /// generation ends at the end-of-sequence token, a stop string (its text cut before
    /// it), `max_tokens`, or the context window.
    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
        sink: &mut dyn super::generation::GenerationSink,
    ) -> Result<()>;

    /// The model's tokeniser, when it has one to share (the service's tokenizer routes).
    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        None
    }

    /// The prompt of a chat conversation, through the model's chat template. The default
    /// takes an optional system message and one user message.
    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        let text = |system: Option<&str>, user: &str| {
            Prompt::chat(TextPrompt {
                system: system.map(str::to_string),
                user: user.to_string(),
                answer_prefix: String::new(),
            })
        };
        match messages {
            [user] if user.role == ChatRole::User => Ok(text(None, &user.content)),
            [system, user] if system.role == ChatRole::System && user.role == ChatRole::User => {
                Ok(text(Some(&system.content), &user.content))
            }
            _ => crate::bad_request!(
                "model '{}' takes a chat of one user message, optionally after a system message",
                self.info().name
            ),
        }
    }
}
