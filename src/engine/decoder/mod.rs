//! The [`Scorer`] for llama-family decoders.
//!
//! Text prompts go through the chat template and the tokeniser; every label request
//! becomes token sequences with queries (one per label token, teacher-forced), and all
//! sequences of a call are evaluated as one prefix trie (or, for baselines, one prompt at
//! a time). Generation is the engine's one generation route (`generate.rs`): prompts
//! through the prefix trie, all unfinished rows stepping in one pass, follow-up label
//! reads continuing a row's own keys and values.

mod generate;
pub use generate::GenerationStats;
pub mod level_plan;
pub(crate) mod pieces;
pub mod prefix_cache;
pub mod tree_eval;
pub mod trie;

use anyhow::{anyhow, bail, Context, Result};

use crate::arch::llama::LlamaModel;
use crate::engine::completion::{ChatMessage, CompletionRequest};
use crate::engine::generation::GenerationSink;
use crate::engine::request::{
    ContinuationRequest, ContinuationResult, Label, LabelRequest, LabelResult, LabelScore, Prompt,
    TokenPrompt,
};
use crate::engine::scorer::{ModelInfo, RenderedPrompt, Scorer};
use crate::runtime::{ChatTemplate, TextTokenizer};
use prefix_cache::PrefixCache;
use tree_eval::{BatchBudget, EvalStats, Plan, TreeEvaluator};
use trie::{QueryAt, TokenTrie};

/// How label requests are evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// All prompts of a call in one prefix trie: shared prefixes computed once.
    #[default]
    Tree,
    /// Every prompt on its own (labels of one prompt still share it): the baseline.
    Naive,
}

/// Engine settings of a decoder scorer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderSettings {
    pub strategy: Strategy,
    pub budget: BatchBudget,
}

/// A llama-family model behind the [`Scorer`] interface.
pub struct DecoderScorer {
    model: LlamaModel,
    tokenizer: TextTokenizer,
    chat: ChatTemplate,
    info: ModelInfo,
    settings: DecoderSettings,
    /// How label queries' tries are cut into passes (completions stay depth-first).
    plan: Plan,
    stop_ids: Vec<u32>,
    stats: EvalStats,
    generation_stats: GenerationStats,
}

/// Token sequences of one request with the query (request, label, token) of each label
/// token.
struct Expanded {
    sequences: Vec<(Vec<u32>, Vec<QueryAt>)>,
    /// Per query: (request, label, target token).
    queries: Vec<(usize, usize, u32)>,
    /// Per request: label token ids.
    labels: Vec<Vec<Vec<u32>>>,
    prompt_lengths: Vec<usize>,
}

impl DecoderScorer {
    pub fn new(
        model: LlamaModel,
        tokenizer: TextTokenizer,
        chat: ChatTemplate,
        info: ModelInfo,
        settings: DecoderSettings,
    ) -> Result<Self> {
        let vocab = model.config().vocab_size;
        if tokenizer.vocab_size() > vocab {
            bail!(
                "the tokeniser has {} tokens but the model only {vocab}",
                tokenizer.vocab_size()
            );
        }
        // The end-of-text token, the chat template's end of a turn (which a checkpoint's
        // tokenizer may not call its eos: Phi-3.5's `<|end|>`), and the usual ends.
        let mut stop_ids: Vec<u32> = tokenizer.special().eos.into_iter().collect();
        for tag in chat
            .turn_end()
            .into_iter()
            .chain(["<|im_end|>", "<|endoftext|>", "</s>"])
        {
            if let Some(id) = tokenizer.token_id(tag) {
                stop_ids.push(id);
            }
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let model_computes_in_f32 = model.activation_dtype() == candle_core::DType::F32;
        Ok(Self {
            model,
            tokenizer,
            chat,
            info,
            settings,
            // bf16/f16 activations (a GPU's `--precision bf16`) run by the level plan only.
            plan: if model_computes_in_f32 {
                Plan::default()
            } else {
                Plan::Levels
            },
            stop_ids,
            stats: EvalStats::default(),
            generation_stats: GenerationStats::default(),
        })
    }

    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    pub fn settings(&self) -> DecoderSettings {
        self.settings
    }

    pub fn set_settings(&mut self, settings: DecoderSettings) {
        self.settings = settings;
    }

    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Cut label queries' tries by `plan` from now on.
    pub fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    /// Work done by label and continuation scoring since the last reset.
    pub fn stats(&self) -> EvalStats {
        self.stats
    }

    pub fn reset_stats(&mut self) {
        self.stats = EvalStats::default();
        self.generation_stats = GenerationStats::default();
    }

    /// What the generation route did since the last reset.
    pub fn generation_stats(&self) -> GenerationStats {
        self.generation_stats
    }

    fn render_text(&self, prompt: &Prompt) -> Result<String> {
        crate::engine::templating::render_text(&self.chat, &self.tokenizer, &self.info.name, prompt)
    }

    fn prompt_ids(&self, prompt: &Prompt) -> Result<Vec<u32>> {
        let tokens = self.encode_prompt(prompt)?;
        if tokens.input.is_empty() {
            crate::bad_request!("empty prompt");
        }
        Ok(tokens.input)
    }

    fn check_length(&self, index: usize, length: usize) -> Result<()> {
        let window = self.model.config().context_length;
        if length > window {
            crate::bad_request!(
                "request {index}: prompt and label need {length} tokens, more than the model's context window of {window}"
            );
        }
        Ok(())
    }

    fn expand(&self, requests: &[(Vec<u32>, Vec<Vec<u32>>)]) -> Result<Expanded> {
        let mut out = Expanded {
            sequences: Vec::new(),
            queries: Vec::new(),
            labels: Vec::new(),
            prompt_lengths: Vec::new(),
        };
        for (index, (prompt, labels)) in requests.iter().enumerate() {
            for (label_index, label) in labels.iter().enumerate() {
                self.check_length(index, prompt.len() + label.len())?;
                let mut tokens = prompt.clone();
                tokens.extend_from_slice(&label[..label.len() - 1]);
                let queries = label
                    .iter()
                    .enumerate()
                    .map(|(t, &target)| {
                        out.queries.push((index, label_index, target));
                        QueryAt {
                            position: prompt.len() - 1 + t,
                            query: out.queries.len() - 1,
                        }
                    })
                    .collect();
                out.sequences.push((tokens, queries));
            }
            out.labels.push(labels.clone());
            out.prompt_lengths.push(prompt.len());
        }
        Ok(out)
    }

    /// Evaluate tokenised requests, reporting each finished request's per-label
    /// log-probabilities; requests marked `done` are not reported, and are computed only
    /// where the evaluation plan of all requests needs them (see
    /// [`TreeEvaluator::evaluate`]).
    fn evaluate(
        &mut self,
        requests: &[(Vec<u32>, Vec<Vec<u32>>)],
        done: &[bool],
        on_done: &mut dyn FnMut(usize, Vec<Vec<f64>>) -> Result<()>,
    ) -> Result<()> {
        let groups: Vec<Vec<usize>> = match self.settings.strategy {
            Strategy::Tree => vec![(0..requests.len()).collect()],
            Strategy::Naive => (0..requests.len())
                .filter(|&i| !done[i])
                .map(|i| vec![i])
                .collect(),
        };
        let evaluator = TreeEvaluator::new(&self.model, self.settings.budget)?.with_plan(self.plan);
        for group in groups {
            let subset: Vec<(Vec<u32>, Vec<Vec<u32>>)> =
                group.iter().map(|&i| requests[i].clone()).collect();
            let expanded = self.expand(&subset)?;
            let trie = TokenTrie::build(&expanded.sequences)?;
            let targets: Vec<u32> = expanded.queries.iter().map(|q| q.2).collect();
            let mut token_logprobs: Vec<Vec<Vec<f64>>> = expanded
                .labels
                .iter()
                .map(|labels| labels.iter().map(|l| Vec::with_capacity(l.len())).collect())
                .collect();
            let mut remaining: Vec<usize> = expanded
                .labels
                .iter()
                .map(|labels| labels.iter().map(Vec::len).sum())
                .collect();
            let pending: Vec<bool> = expanded
                .queries
                .iter()
                .map(|&(request, _, _)| !done[group[request]])
                .collect();
            // Queries of one label arrive in position order (parents before children).
            let stats =
                evaluator.evaluate(&trie, &targets, Some(&pending), &mut |query, logprob| {
                    let (request, label, _) = expanded.queries[query];
                    if !pending[query] {
                        return Ok(());
                    }
                    token_logprobs[request][label].push(logprob);
                    remaining[request] -= 1;
                    if remaining[request] == 0 {
                        on_done(group[request], std::mem::take(&mut token_logprobs[request]))?;
                    }
                    Ok(())
                })?;
            tracing::debug!(
                requests = group.len(),
                trie_tokens = trie.total_tokens(),
                tokens = stats.tokens,
                forward_calls = stats.forward_calls,
                scored_positions = stats.scored_positions,
                peak_cache_mib = stats.peak_cache_bytes >> 20,
                "evaluated label requests"
            );
            self.stats.add(&stats);
        }
        Ok(())
    }
}

impl Scorer for DecoderScorer {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        if let Prompt::Tokens(t) = prompt {
            if !t.decoder_prefix.is_empty() {
                bail!("decoder-only models take no decoder prefix");
            }
        }
        Ok(RenderedPrompt {
            input: self.render_text(prompt)?,
            decoder_prefix: String::new(),
        })
    }

    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        crate::engine::templating::encode_prompt(
            &self.chat,
            &self.tokenizer,
            &self.info.name,
            prompt,
        )
    }

    /// Only the level plan, which is built for passes across contexts (the GPU's);
    /// depth-first, each context's answers are the same bits whatever else the run holds.
    fn batches_across_contexts(&self) -> bool {
        self.plan == Plan::Levels
    }

    fn encode_prompts(&self, prompts: &[&Prompt]) -> Vec<Result<TokenPrompt>> {
        crate::engine::templating::encode_prompts(
            &self.chat,
            &self.tokenizer,
            &self.info.name,
            prompts,
        )
    }

    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        crate::engine::templating::encode_label(&self.tokenizer, label)
    }

    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        self.label_logprobs_resume(requests, &vec![false; requests.len()], on_result)
    }

    fn label_logprobs_resume(
        &mut self,
        requests: &[LabelRequest],
        done: &[bool],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        if done.len() != requests.len() {
            bail!("{} done flags for {} requests", done.len(), requests.len());
        }
        let tokenised = requests
            .iter()
            .enumerate()
            .map(|(index, request)| {
                if request.labels.is_empty() {
                    crate::bad_request!("request {index} has no labels");
                }
                let prompt = self
                    .prompt_ids(&request.prompt)
                    .with_context(|| format!("request {index}"))?;
                let labels = request
                    .labels
                    .iter()
                    .map(|l| self.encode_label(l))
                    .collect::<Result<Vec<_>>>()
                    .with_context(|| format!("request {index}"))?;
                Ok((prompt, labels))
            })
            .collect::<Result<Vec<_>>>()?;
        let shapes = tokenised.clone();
        self.evaluate(&tokenised, done, &mut |index, per_label| {
            let (prompt, labels) = &shapes[index];
            let result = LabelResult {
                labels: labels
                    .iter()
                    .zip(per_label)
                    .map(|(tokens, logprobs)| LabelScore {
                        tokens: tokens.clone(),
                        logprob: logprobs.iter().sum(),
                    })
                    .collect(),
                prompt_tokens: prompt.len(),
            };
            on_result(index, result)
        })
    }

    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>> {
        let tokenised = requests
            .iter()
            .enumerate()
            .map(|(index, request)| {
                let prompt = self
                    .prompt_ids(&request.prompt)
                    .with_context(|| format!("request {index}"))?;
                let continuation = self.tokenizer.encode(&request.continuation)?;
                if continuation.is_empty() {
                    crate::bad_request!("request {index}: empty continuation");
                }
                Ok((prompt, vec![continuation]))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut results: Vec<Option<ContinuationResult>> = vec![None; requests.len()];
        self.evaluate(
            &tokenised,
            &vec![false; requests.len()],
            &mut |index, mut per_label| {
                results[index] = Some(ContinuationResult {
                    tokens: tokenised[index].1[0].clone(),
                    token_logprobs: per_label.remove(0),
                });
                Ok(())
            },
        )?;
        results
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.ok_or_else(|| anyhow!("no result for continuation {i}")))
            .collect()
    }

    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        Some(&self.tokenizer)
    }

    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        crate::engine::templating::conversation_prompt(&self.chat, &self.info.name, messages)
    }

    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        self.generate_all(requests, prefix_cache, sink)
    }
}

/// Where the first of the (non-empty) stop strings starts in `text`, if one occurs.
fn first_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
}
