//! Completions on a llama-family decoder: all prompts of a call in one prefix trie,
//! starting from what the prefix cache holds, then generation for the prompts that ask
//! for it, side by side.
//!
//! 1. Each prompt's longest cached start is looked up; the trie is built with a node
//!    boundary where that start ends, so the nodes inside it are taken from the cache
//!    (keys and values for their children, hidden states for their queries) and never
//!    computed.
//! 2. The trie is evaluated with full-distribution queries: every position of a prompt
//!    whose tokens are scored, and the last position of a prompt that generates. Each
//!    computed node goes into the prefix cache, and is kept for generation when it lies on
//!    a generating prompt's path.
//! 3. Generation starts from each prompt's last distribution and runs one token per pass
//!    over all unfinished rows, each reading its prompt's cache segments where they lie.
//!
//! A position's answer depends only on the tokens before it: its trie node, batch and
//! cache state change which forward pass computes it, not what it computes beyond float
//! rounding (see the completion batch-invariance tests).

use std::collections::{HashMap, HashSet};

use anyhow::{bail, Context, Result};
use candle_core::Tensor;

use super::pieces::TokenPieces;
use super::prefix_cache::{slice_kv, CachedPrefix, PrefixCache};
use super::tree_eval::TreeEvaluator;
use super::trie::{QueryAt, TokenTrie};
use super::{first_stop, DecoderScorer};
use crate::arch::llama::{KvCache, RowGroup};
use crate::engine::completion::{
    CompletionRequest, CompletionResult, ScoredToken, TokenLogprob, MAX_TOP_LOGPROBS,
};
use crate::engine::request::FinishReason;
use crate::engine::sampling::TokenSampler;

/// A next-token distribution given as logits.
struct Distribution<'a> {
    logits: &'a [f32],
    log_normaliser: f64,
}

impl<'a> Distribution<'a> {
    fn new(logits: &'a [f32]) -> Self {
        let max = logits
            .iter()
            .copied()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| (f64::from(l) - f64::from(max)).exp())
            .sum();
        Self {
            logits,
            log_normaliser: f64::from(max) + sum.ln(),
        }
    }

    fn logprob(&self, id: u32) -> f64 {
        self.logits
            .get(id as usize)
            .map_or(f64::NEG_INFINITY, |&l| f64::from(l) - self.log_normaliser)
    }

    /// The `k` most likely ids, most likely first (equal logits: lower id first).
    fn top(&self, k: usize) -> Vec<u32> {
        if k == 0 {
            return Vec::new();
        }
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (id, &logit) in self.logits.iter().enumerate() {
            if logit.is_nan() || (best.len() == k && logit <= best[k - 1].0) {
                continue;
            }
            let at = best.partition_point(|&(l, _)| l >= logit);
            best.insert(at, (logit, id as u32));
            best.truncate(k);
        }
        best.into_iter().map(|(_, id)| id).collect()
    }

    fn scored(&self, id: u32, top: usize, pieces: &mut TokenPieces) -> TokenLogprob {
        TokenLogprob {
            token: pieces.piece(id),
            logprob: Some(self.logprob(id)),
            top: self
                .top(top)
                .into_iter()
                .map(|alternative| ScoredToken {
                    token: pieces.piece(alternative),
                    logprob: self.logprob(alternative),
                })
                .collect(),
        }
    }
}

/// What a distribution query is for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Score the prompt token after this position.
    PromptToken,
    /// The first generated token.
    Generate,
}

/// One generating request.
struct Row<'r> {
    request: &'r CompletionRequest,
    index: usize,
    prompt_len: usize,
    /// The prompt's keys/values, in pieces.
    prefix: Vec<KvCache>,
    /// Keys/values of the tokens generated and fed back so far.
    own: Option<KvCache>,
    logits: Vec<f32>,
    sampler: TokenSampler,
    /// Generated tokens that are text (not the end-of-sequence token).
    tokens: Vec<u32>,
    generated: Vec<TokenLogprob>,
    text: String,
    finish: Option<FinishReason>,
}

/// The trie nodes along `tokens` (the last one may hold more tokens than `tokens` has
/// left, when the sequence is a prefix of another).
fn node_path(trie: &TokenTrie, tokens: &[u32]) -> Result<Vec<usize>> {
    let mut path = Vec::new();
    let mut at = trie.root();
    let mut depth = 0;
    while depth < tokens.len() {
        let next = trie
            .node(at)
            .children
            .iter()
            .copied()
            .find(|&child| trie.node(child).tokens.first() == Some(&tokens[depth]))
            .context("a prompt is missing from its trie")?;
        path.push(next);
        depth += trie.node(next).tokens.len();
        at = next;
    }
    Ok(path)
}

/// The first `len` positions of key/value pieces.
fn truncate(pieces: &[KvCache], len: usize) -> Result<Vec<KvCache>> {
    let mut out = Vec::new();
    let mut left = len;
    for piece in pieces {
        if left == 0 {
            break;
        }
        let take = piece.len().min(left);
        out.push(slice_kv(piece, 0, take)?);
        left -= take;
    }
    if left > 0 {
        bail!("key/value pieces hold fewer than {len} positions");
    }
    Ok(out)
}

impl DecoderScorer {
    /// See [`crate::engine::Scorer::complete`].
    pub(super) fn complete_all(
        &mut self,
        requests: &[CompletionRequest],
        cache: &mut PrefixCache,
    ) -> Result<Vec<CompletionResult>> {
        cache.begin(&self.info.fingerprint);
        let window = self.model.config().context_length;
        let mut prompts = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            if request.top_logprobs > MAX_TOP_LOGPROBS {
                crate::bad_request!(
                    "completion {index}: {} alternatives asked, at most {MAX_TOP_LOGPROBS}",
                    request.top_logprobs
                );
            }
            let ids = self
                .prompt_ids(&request.prompt)
                .with_context(|| format!("completion {index}"))?;
            if ids.len() + request.max_tokens > window {
                crate::bad_request!(
                    "completion {index}: {} prompt tokens and {} to generate exceed the model's context window of {window} tokens",
                    ids.len(),
                    request.max_tokens
                );
            }
            prompts.push(ids);
        }

        // The prompts that need the model: scored or continued.
        let active: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].prompt_logprobs || requests[i].max_tokens > 0)
            .collect();
        let mut asks: Vec<(usize, usize, Ask)> = Vec::new();
        let mut sequences = Vec::with_capacity(active.len());
        for &i in &active {
            let len = prompts[i].len();
            let mut queries = Vec::new();
            let mut ask = |position: usize, what: Ask| {
                queries.push(QueryAt {
                    position,
                    query: asks.len(),
                });
                asks.push((i, position, what));
            };
            if requests[i].prompt_logprobs {
                for position in 0..len - 1 {
                    ask(position, Ask::PromptToken);
                }
            }
            if requests[i].max_tokens > 0 {
                ask(len - 1, Ask::Generate);
            }
            sequences.push((prompts[i].clone(), queries));
        }
        let prefixes: Vec<CachedPrefix> =
            sequences.iter().map(|(ids, _)| cache.lookup(ids)).collect();
        let cuts: Vec<usize> = prefixes.iter().map(CachedPrefix::len).collect();
        let trie = TokenTrie::build_with_cuts(&sequences, &cuts)?;
        let paths: Vec<Vec<usize>> = sequences
            .iter()
            .map(|(ids, _)| node_path(&trie, ids))
            .collect::<Result<_>>()?;

        // Nodes inside a cached start, and the first sequence through each node that
        // holds all of it (a prompt that is a prefix of another ends inside the other's
        // node).
        let mut precomputed = HashMap::new();
        let mut first_through = vec![usize::MAX; trie.len()];
        for (s, path) in paths.iter().enumerate() {
            for &node in path {
                let n = trie.node(node);
                let end = n.start + n.tokens.len();
                if first_through[node] == usize::MAX && sequences[s].0.len() >= end {
                    first_through[node] = s;
                }
                if end <= cuts[s] && !precomputed.contains_key(&node) {
                    precomputed.insert(node, cache.range(&prefixes[s], n.start, n.tokens.len())?);
                }
            }
        }
        let generating: HashSet<usize> = paths
            .iter()
            .zip(&active)
            .filter(|(_, &i)| requests[i].max_tokens > 0)
            .flat_map(|(path, _)| path.iter().copied())
            .collect();
        let mut kept: HashMap<usize, Vec<KvCache>> = precomputed
            .iter()
            .filter(|(node, _)| generating.contains(node))
            .map(|(&node, done)| (node, done.own.clone()))
            .collect();

        let mut pieces = TokenPieces::new(&self.tokenizer);
        let mut scored: Vec<Vec<Option<TokenLogprob>>> =
            prompts.iter().map(|ids| vec![None; ids.len()]).collect();
        let mut first_logits: Vec<Option<Vec<f32>>> = vec![None; requests.len()];
        let evaluator = TreeEvaluator::new(&self.model, self.settings.budget)?;
        let stats = {
            let mut on_row = |query: usize, row: &[f32]| -> Result<()> {
                let (i, position, what) = asks[query];
                match what {
                    Ask::PromptToken => {
                        let target = prompts[i][position + 1];
                        let top = requests[i].top_logprobs;
                        scored[i][position + 1] =
                            Some(Distribution::new(row).scored(target, top, &mut pieces));
                    }
                    Ask::Generate => first_logits[i] = Some(row.to_vec()),
                }
                Ok(())
            };
            let mut on_node = |node: usize, own: &[KvCache], hidden: &Tensor| -> Result<()> {
                let n = trie.node(node);
                let path = &sequences[first_through[node]].0[..n.start + n.tokens.len()];
                cache.insert(path, n.start, own, hidden)?;
                if generating.contains(&node) {
                    kept.insert(node, own.to_vec());
                }
                Ok(())
            };
            evaluator.evaluate_distributions(
                &trie,
                &precomputed,
                &mut on_row,
                Some(&mut on_node),
            )?
        };
        tracing::debug!(
            completions = requests.len(),
            trie_tokens = trie.total_tokens(),
            cached_tokens = cuts.iter().sum::<usize>(),
            tokens = stats.tokens,
            forward_calls = stats.forward_calls,
            cache_mib = cache.stats().bytes >> 20,
            "evaluated completion prompts"
        );
        self.stats.add(&stats);

        // Generation, from each generating prompt's cache segments.
        let mut rows = Vec::new();
        for (s, &i) in active.iter().enumerate() {
            let request = &requests[i];
            if request.max_tokens == 0 {
                continue;
            }
            let mut prefix = Vec::new();
            for &node in &paths[s] {
                let n = trie.node(node);
                let own = kept
                    .get(&node)
                    .with_context(|| format!("no keys/values kept for trie node {node}"))?;
                let inside = (prompts[i].len() - n.start).min(n.tokens.len());
                prefix.extend(truncate(own, inside)?);
            }
            rows.push(Row {
                request,
                index: i,
                prompt_len: prompts[i].len(),
                prefix,
                own: None,
                logits: first_logits[i]
                    .take()
                    .context("no distribution after a generating prompt")?,
                sampler: TokenSampler::new(&request.sampling)
                    .and_then(|s| s.allowing(request.allowed_tokens.as_deref()))
                    .with_context(|| format!("completion {i}"))?,
                tokens: Vec::new(),
                generated: Vec::new(),
                text: String::new(),
                finish: None,
            });
        }
        drop(kept);
        self.decode_rows(&mut rows, &mut pieces)?;

        let mut results: Vec<CompletionResult> = Vec::with_capacity(requests.len());
        for (i, ids) in prompts.iter().enumerate() {
            let prompt = ids
                .iter()
                .zip(std::mem::take(&mut scored[i]))
                .map(|(&id, scored)| {
                    scored.unwrap_or_else(|| TokenLogprob {
                        token: pieces.piece(id),
                        logprob: None,
                        top: Vec::new(),
                    })
                })
                .collect();
            results.push(CompletionResult {
                prompt,
                generated: Vec::new(),
                text: String::new(),
                finish: FinishReason::MaxTokens,
                cached_prompt_tokens: 0,
            });
        }
        for (s, &i) in active.iter().enumerate() {
            results[i].cached_prompt_tokens = paths[s]
                .iter()
                .filter(|&&node| precomputed.contains_key(&node) || first_through[node] != s)
                .map(|&node| {
                    let n = trie.node(node);
                    (prompts[i].len() - n.start).min(n.tokens.len())
                })
                .sum();
        }
        for row in rows {
            let result = &mut results[row.index];
            result.generated = row.generated;
            result.text = row.text;
            result.finish = row.finish.unwrap_or(FinishReason::MaxTokens);
        }
        Ok(results)
    }

    /// Generate for every row until each ends: sample from the row's distribution, record
    /// the token's log-probability, check the ends, and feed the tokens of the unfinished
    /// rows in passes of at most `max_batch_rows` rows.
    fn decode_rows(&self, rows: &mut [Row], pieces: &mut TokenPieces) -> Result<()> {
        let window = self.model.config().context_length;
        let rows_per_pass = self.settings.budget.max_batch_rows.max(1);
        loop {
            let mut stepping: Vec<(usize, u32)> = Vec::new();
            for (r, row) in rows.iter_mut().enumerate() {
                if row.finish.is_some() {
                    continue;
                }
                let request = row.request;
                if row.generated.len() >= request.max_tokens
                    || row.prompt_len + row.generated.len() >= window
                {
                    row.finish = Some(FinishReason::MaxTokens);
                    continue;
                }
                let next = row.sampler.next(&row.logits)?;
                let distribution = Distribution::new(&row.logits);
                row.generated
                    .push(distribution.scored(next, request.top_logprobs, pieces));
                if self.stop_ids.contains(&next) {
                    row.finish = Some(FinishReason::EndOfSequence);
                    continue;
                }
                row.tokens.push(next);
                if !request.stop.is_empty() {
                    row.text = self.tokenizer.decode(&row.tokens, true)?;
                    if let Some(cut) = first_stop(&row.text, &request.stop) {
                        row.text.truncate(cut);
                        row.finish = Some(FinishReason::Stop);
                        continue;
                    }
                }
                if row.generated.len() == request.max_tokens {
                    row.finish = Some(FinishReason::MaxTokens);
                    continue;
                }
                stepping.push((r, next));
            }
            if stepping.is_empty() {
                break;
            }
            for pass in stepping.chunks(rows_per_pass) {
                let singles: Vec<[u32; 1]> = pass.iter().map(|&(_, t)| [t]).collect();
                let groups: Vec<RowGroup> = pass
                    .iter()
                    .zip(&singles)
                    .map(|(&(r, _), token)| RowGroup {
                        prefix: rows[r].prefix.iter().chain(rows[r].own.iter()).collect(),
                        rows: vec![token.as_slice()],
                    })
                    .collect();
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
                for ((&(r, _), mut output), row_logits) in pass.iter().zip(outputs).zip(logits) {
                    let new = output.kv.take().context("forward pass returned no cache")?;
                    let row = &mut rows[r];
                    row.own = Some(match row.own.take() {
                        Some(own) => own.append(&new)?,
                        None => new,
                    });
                    row.logits = row_logits;
                }
            }
        }
        for row in rows.iter_mut() {
            if row.finish != Some(FinishReason::Stop) {
                row.text = self.tokenizer.decode(&row.tokens, true)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_normalise_and_rank_with_ties_by_id() {
        let logits = [1.0f32, 3.0, 3.0, -2.0, f32::NAN];
        let d = Distribution::new(&logits);
        let total: f64 = (0..4).map(|id| d.logprob(id).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert_eq!(d.top(3), vec![1, 2, 0]);
        assert_eq!(d.top(10), vec![1, 2, 0, 3]);
        assert!(d.top(0).is_empty());
        assert_eq!(d.logprob(99), f64::NEG_INFINITY);
    }
}
