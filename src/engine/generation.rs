//! The one generation route: everything that generates text reaches a model through
//! [`Scorer::generate_each`].
//!
//! Rubric feedback (absolute and relative), G-Eval's evaluation steps, DHP's model edits,
//! Para-Ref's paraphrases and the OpenAI routes all hand a scorer the whole set of their
//! generations in one call, as [`CompletionRequest`]s, and receive each result through a
//! [`GenerationSink`] as soon as it is finished (so a caller can store it at once: a run
//! stopped midway loses only the generations in flight). A local decoder runs the call
//! as one batch: all prompts in one prefix trie, every unfinished row stepping in the
//! same pass, finished rows replaced by waiting ones; an engine behind `--backend` gets
//! the requests concurrently.
//!
//! A judge that writes before it scores (a feedback, then the verdict after a marker)
//! asks for the verdict as a *follow-up*: when a generation ends, the sink may answer a
//! [`LabelRequest`] whose prompt continues the generation's own tokens (prompt, feedback,
//! marker). A decoder reads it by extending the row's keys and values from where the two
//! token sequences part, with no second prefill of the prompt; other scorers answer it as
//! an ordinary label request.
//!
//! The conveniences of [`Generate`] (one generation, a batch in order, completions in
//! order) are thin wrappers over the same entry point.

use anyhow::{Context, Result};

use super::completion::{CompletionRequest, CompletionResult, TokenLogprob, TokenPiece};
use super::decoder::prefix_cache::PrefixCache;
use super::request::{FinishReason, Generation, GenerationRequest, LabelRequest, LabelResult};
use super::scorer::Scorer;

/// Receives the results of [`Scorer::generate_each`], each as soon as it is known.
pub trait GenerationSink {
    /// Request `index` is finished (generated, or only scored when it asked for no
    /// tokens). Answer a label request to read right after it, or `None`. `scorer` is the
    /// scorer doing the work, for tokenising the follow-up. An error stops the call.
    fn generated(
        &mut self,
        index: usize,
        result: CompletionResult,
        scorer: &dyn Scorer,
    ) -> Result<Option<LabelRequest>>;

    /// The answer to the follow-up of request `index`. An error stops the call.
    fn labelled(&mut self, index: usize, result: LabelResult) -> Result<()> {
        let _ = (index, result);
        Ok(())
    }
}

/// A sink that keeps every result in request order and asks no follow-up.
pub struct Collect {
    pub results: Vec<Option<CompletionResult>>,
}

impl Collect {
    pub fn new(count: usize) -> Self {
        Self {
            results: vec![None; count],
        }
    }

    /// The results in request order; an error names the first one missing.
    pub fn into_results(self) -> Result<Vec<CompletionResult>> {
        self.results
            .into_iter()
            .enumerate()
            .map(|(index, result)| result.with_context(|| format!("no result for request {index}")))
            .collect()
    }
}

impl GenerationSink for Collect {
    fn generated(
        &mut self,
        index: usize,
        result: CompletionResult,
        _scorer: &dyn Scorer,
    ) -> Result<Option<LabelRequest>> {
        let slot = self
            .results
            .get_mut(index)
            .with_context(|| format!("a scorer answered request {index}, which was not asked"))?;
        *slot = Some(result);
        Ok(None)
    }
}

/// A sink handing each result to a closure, asking no follow-up.
pub struct EachResult<'a>(pub &'a mut dyn FnMut(usize, CompletionResult) -> Result<()>);

impl GenerationSink for EachResult<'_> {
    fn generated(
        &mut self,
        index: usize,
        result: CompletionResult,
        _scorer: &dyn Scorer,
    ) -> Result<Option<LabelRequest>> {
        (self.0)(index, result)?;
        Ok(None)
    }
}

/// The completion request of a plain generation (no log-probabilities asked).
pub fn completion_of(request: &GenerationRequest) -> CompletionRequest {
    CompletionRequest {
        prompt: request.prompt.clone(),
        prompt_logprobs: false,
        logprobs: false,
        top_logprobs: 0,
        max_tokens: request.max_tokens,
        sampling: request.sampling,
        stop: request.stop.clone(),
        allowed_tokens: None,
    }
}

/// The generation a completion made: its text, the generated tokens that are text (the
/// end-of-sequence token that ended it left out), and why it ended.
pub fn generation_of(result: &CompletionResult) -> Generation {
    let mut tokens: Vec<u32> = result.generated.iter().map(|t| t.token.id).collect();
    if result.finish == FinishReason::EndOfSequence {
        tokens.pop();
    }
    Generation {
        text: result.text.clone(),
        tokens,
        finish: result.finish,
    }
}

/// A generated or prompt token without log-probabilities.
pub fn unscored(id: u32, bytes: Vec<u8>) -> TokenLogprob {
    TokenLogprob {
        token: TokenPiece { id, bytes },
        logprob: None,
        top: Vec::new(),
    }
}

/// Conveniences over [`Scorer::generate_each`]; every scorer has them.
pub trait Generate {
    /// One generation.
    fn generate(&mut self, request: &GenerationRequest) -> Result<Generation>;

    /// Generations of all `requests` in one call; results in request order.
    fn generate_batch(&mut self, requests: &[GenerationRequest]) -> Result<Vec<Generation>>;

    /// Completions in one call, as the OpenAI routes ask them: a prompt and the tokens it
    /// may generate must fit the context window together. Results in request order.
    fn complete(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
    ) -> Result<Vec<CompletionResult>>;
}

impl<S: Scorer + ?Sized> Generate for S {
    fn generate(&mut self, request: &GenerationRequest) -> Result<Generation> {
        let mut all = self.generate_batch(std::slice::from_ref(request))?;
        all.pop().context("a generation got no answer")
    }

    fn generate_batch(&mut self, requests: &[GenerationRequest]) -> Result<Vec<Generation>> {
        let completions: Vec<CompletionRequest> = requests.iter().map(completion_of).collect();
        let mut sink = Collect::new(requests.len());
        self.generate_each(&completions, &mut PrefixCache::new(0), &mut sink)?;
        Ok(sink.into_results()?.iter().map(generation_of).collect())
    }

    fn complete(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
    ) -> Result<Vec<CompletionResult>> {
        if let Some(window) = self.length_limit() {
            for (index, request) in requests.iter().enumerate() {
                if request.max_tokens == 0 {
                    continue;
                }
                let prompt = self
                    .encode_prompt(&request.prompt)
                    .with_context(|| format!("completion {index}"))?
                    .input
                    .len();
                if prompt + request.max_tokens > window {
                    crate::bad_request!(
                        "completion {index}: {prompt} prompt tokens and {} to generate exceed the \
                         model's context window of {window} tokens",
                        request.max_tokens
                    );
                }
            }
        }
        let mut sink = Collect::new(requests.len());
        self.generate_each(requests, prefix_cache, &mut sink)?;
        sink.into_results()
    }
}

/// [`Scorer::generate_each`] for scorers that generate one request at a time
/// (`generate_one(index)`, e.g. T5's encoder-decoder or the scripted mock): each result
/// goes to the sink as it is made, and the follow-ups asked are answered together, as
/// one label call, at the end.
pub fn one_at_a_time<S: Scorer>(
    scorer: &mut S,
    count: usize,
    generate_one: &mut dyn FnMut(&mut S, usize) -> Result<CompletionResult>,
    sink: &mut dyn GenerationSink,
) -> Result<()> {
    let mut follow_ups: Vec<(usize, LabelRequest)> = Vec::new();
    for index in 0..count {
        let result = generate_one(scorer, index)?;
        if let Some(request) = sink.generated(index, result, &*scorer)? {
            follow_ups.push((index, request));
        }
    }
    answer_follow_ups(scorer, follow_ups, sink)
}

/// Answer follow-up label requests as one label call, each result to the sink.
pub fn answer_follow_ups(
    scorer: &mut dyn Scorer,
    follow_ups: Vec<(usize, LabelRequest)>,
    sink: &mut dyn GenerationSink,
) -> Result<()> {
    if follow_ups.is_empty() {
        return Ok(());
    }
    let (indices, requests): (Vec<usize>, Vec<LabelRequest>) = follow_ups.into_iter().unzip();
    scorer.label_logprobs_each(&requests, &mut |k, result| {
        sink.labelled(indices[k], result)
    })
}
