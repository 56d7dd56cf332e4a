//! The [`Scorer`] for llama-family decoders.
//!
//! Text prompts go through the chat template and the tokeniser; every label request
//! becomes token sequences with queries (one per label token, teacher-forced), and all
//! sequences of a call are evaluated as one prefix trie (or, for baselines, one prompt at
//! a time). Generation runs a prefill and then one token at a time over a caller-owned
//! cache; batched generation advances many requests together, each row with its own
//! cache, so that the per-token layers run over all rows at once.

mod complete;
pub mod level_plan;
pub(crate) mod pieces;
pub mod prefix_cache;
pub mod tree_eval;
pub mod trie;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::Tensor;

use crate::arch::llama::{KvCache, LlamaModel, RowGroup};
use crate::engine::completion::{ChatMessage, CompletionRequest, CompletionResult};
use crate::engine::request::{
    ContinuationRequest, ContinuationResult, FinishReason, Generation, GenerationRequest, Label,
    LabelRequest, LabelResult, LabelScore, Prompt, TokenPrompt,
};
use crate::engine::sampling::TokenSampler;
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
        let mut stop_ids: Vec<u32> = tokenizer.special().eos.into_iter().collect();
        for tag in ["<|im_end|>", "<|endoftext|>", "</s>"] {
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

    /// Logits of the next token after `ids` (prefill in budget-sized pieces), with the
    /// cache of all of `ids`.
    fn prefill(&self, ids: &[u32]) -> Result<(Vec<f32>, KvCache)> {
        let piece = self.settings.budget.max_batch_tokens.max(1);
        let mut cache: Option<KvCache> = None;
        let mut last_hidden = None;
        for chunk in ids.chunks(piece) {
            let mut out = self.model.forward(&[chunk], cache.as_ref(), true)?;
            last_hidden = Some(out.last(0)?);
            let kv = out.kv.take().context("forward pass returned no cache")?;
            cache = Some(match cache {
                Some(c) => c.append(&kv)?,
                None => kv,
            });
        }
        let hidden = last_hidden.context("empty prompt")?;
        let logits = self.model.full_logits(&hidden)?.squeeze(0)?.to_vec1()?;
        Ok((logits, cache.context("empty prompt")?))
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

    fn generate(&mut self, request: &GenerationRequest) -> Result<Generation> {
        let prompt = self.prompt_ids(&request.prompt)?;
        let window = self.model.config().context_length;
        if prompt.len() >= window {
            bail!(
                "prompt of {} tokens leaves no room in the context window of {window}",
                prompt.len()
            );
        }
        let mut sampler = TokenSampler::new(&request.sampling)?;
        let (mut logits, mut cache) = self.prefill(&prompt)?;
        let mut tokens: Vec<u32> = Vec::new();
        let mut finish = FinishReason::MaxTokens;
        let mut text = String::new();
        while tokens.len() < request.max_tokens && prompt.len() + tokens.len() < window {
            let next = sampler.next(&logits)?;
            if self.stop_ids.contains(&next) {
                finish = FinishReason::EndOfSequence;
                break;
            }
            tokens.push(next);
            text = self.tokenizer.decode(&tokens, true)?;
            if let Some(cut) = first_stop(&text, &request.stop) {
                text.truncate(cut);
                finish = FinishReason::Stop;
                break;
            }
            if tokens.len() == request.max_tokens {
                break;
            }
            let out = self.model.forward(&[&[next]], Some(&cache), true)?;
            cache = cache.append(&out.kv.context("forward pass returned no cache")?)?;
            logits = self.model.full_logits(&out.hidden)?.squeeze(0)?.to_vec1()?;
        }
        Ok(Generation {
            text,
            tokens,
            finish,
        })
    }

    fn generate_batch(&mut self, requests: &[GenerationRequest]) -> Result<Vec<Generation>> {
        let window = self.model.config().context_length;
        let rows_per_pass = self.settings.budget.max_batch_rows.max(1);
        let mut rows = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            let prompt = self
                .prompt_ids(&request.prompt)
                .with_context(|| format!("generation request {index}"))?;
            if prompt.len() >= window {
                bail!(
                    "generation request {index}: prompt of {} tokens leaves no room in the context window of {window}",
                    prompt.len()
                );
            }
            rows.push(BatchRow {
                sampler: TokenSampler::new(&request.sampling)?,
                prompt,
                cache: None,
                logits: Vec::new(),
                tokens: Vec::new(),
                text: String::new(),
                finish: None,
            });
        }
        // Prefill: prompts side by side, in passes of at most `rows_per_pass` rows.
        let indices: Vec<usize> = (0..rows.len()).collect();
        for pass in indices.chunks(rows_per_pass) {
            let groups: Vec<RowGroup> = pass
                .iter()
                .map(|&i| RowGroup {
                    prefix: Vec::new(),
                    rows: vec![rows[i].prompt.as_slice()],
                })
                .collect();
            let outputs = self.model.forward_groups(&groups, true)?;
            let mut last = Vec::with_capacity(pass.len());
            for output in &outputs {
                last.push(output.last(0)?);
            }
            let logits = self
                .model
                .full_logits(&Tensor::cat(&last, 0)?)?
                .to_vec2::<f32>()?;
            for ((&i, mut output), row_logits) in pass.iter().zip(outputs).zip(logits) {
                rows[i].cache = Some(output.kv.take().context("forward pass returned no cache")?);
                rows[i].logits = row_logits;
            }
        }
        loop {
            // Sample each unfinished row's next token.
            let mut stepping = Vec::new();
            for (row, request) in rows.iter_mut().zip(requests) {
                if row.finish.is_some() {
                    continue;
                }
                if row.tokens.len() >= request.max_tokens
                    || row.prompt.len() + row.tokens.len() >= window
                {
                    row.finish = Some(FinishReason::MaxTokens);
                    continue;
                }
                let next = row.sampler.next(&row.logits)?;
                if self.stop_ids.contains(&next) {
                    row.finish = Some(FinishReason::EndOfSequence);
                    continue;
                }
                row.tokens.push(next);
                row.text = self.tokenizer.decode(&row.tokens, true)?;
                if let Some(cut) = first_stop(&row.text, &request.stop) {
                    row.text.truncate(cut);
                    row.finish = Some(FinishReason::Stop);
                    continue;
                }
                if row.tokens.len() == request.max_tokens {
                    row.finish = Some(FinishReason::MaxTokens);
                    continue;
                }
                stepping.push(next);
            }
            let active: Vec<usize> = (0..rows.len())
                .filter(|&i| rows[i].finish.is_none())
                .collect();
            if active.is_empty() {
                break;
            }
            for (pass, tokens) in active
                .chunks(rows_per_pass)
                .zip(stepping.chunks(rows_per_pass))
            {
                let singles: Vec<[u32; 1]> = tokens.iter().map(|&t| [t]).collect();
                let groups: Vec<RowGroup> = pass
                    .iter()
                    .zip(&singles)
                    .map(|(&i, token)| {
                        Ok(RowGroup {
                            prefix: vec![rows[i].cache.as_ref().context("row without a cache")?],
                            rows: vec![token.as_slice()],
                        })
                    })
                    .collect::<Result<_>>()?;
                let outputs = self.model.forward_groups(&groups, true)?;
                drop(groups);
                let mut last = Vec::with_capacity(pass.len());
                for output in &outputs {
                    last.push(output.last(0)?);
                }
                let logits = self
                    .model
                    .full_logits(&Tensor::cat(&last, 0)?)?
                    .to_vec2::<f32>()?;
                for ((&i, mut output), row_logits) in pass.iter().zip(outputs).zip(logits) {
                    let new = output.kv.take().context("forward pass returned no cache")?;
                    let cache = rows[i].cache.take().context("row without a cache")?;
                    rows[i].cache = Some(cache.append(&new)?);
                    rows[i].logits = row_logits;
                }
            }
        }
        Ok(rows
            .into_iter()
            .map(|row| Generation {
                text: row.text,
                tokens: row.tokens,
                finish: row.finish.unwrap_or(FinishReason::MaxTokens),
            })
            .collect())
    }

    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        Some(&self.tokenizer)
    }

    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        crate::engine::templating::conversation_prompt(&self.chat, &self.info.name, messages)
    }

    fn complete(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
    ) -> Result<Vec<CompletionResult>> {
        self.complete_all(requests, prefix_cache)
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

/// One request of a batched generation.
struct BatchRow {
    sampler: TokenSampler,
    prompt: Vec<u32>,
    cache: Option<KvCache>,
    /// Logits of the next token.
    logits: Vec<f32>,
    tokens: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
}
