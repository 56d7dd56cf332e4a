//! Depth-first evaluation of a [`TokenTrie`] with a llama-family decoder.
//!
//! Each node's tokens are computed once, over the keys/values of the path above it;
//! siblings run together as one padded batch; a node's cache lives only while its
//! subtree is evaluated. Only the queried positions go through the output head, and only
//! for the queried token ids plus one full-vocabulary log-sum-exp per position.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::trie::TokenTrie;
use crate::arch::llama::{ForwardOutput, LlamaModel};
use crate::arch::KvCache;

/// How much work one forward pass may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBudget {
    /// Rows x padded length of one batch; a longer single run is computed in pieces.
    pub max_batch_tokens: usize,
}

impl Default for BatchBudget {
    fn default() -> Self {
        Self {
            max_batch_tokens: 2048,
        }
    }
}

/// What an evaluation computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalStats {
    /// Real tokens run through the model (padding excluded).
    pub tokens: usize,
    /// Padded positions computed and thrown away.
    pub padding: usize,
    /// Forward passes.
    pub forward_calls: usize,
    /// Positions that went through the output head.
    pub scored_positions: usize,
    /// Largest key/value cache memory held at once (bytes).
    pub peak_cache_bytes: usize,
}

impl EvalStats {
    pub fn add(&mut self, other: &EvalStats) {
        self.tokens += other.tokens;
        self.padding += other.padding;
        self.forward_calls += other.forward_calls;
        self.scored_positions += other.scored_positions;
        self.peak_cache_bytes = self.peak_cache_bytes.max(other.peak_cache_bytes);
    }
}

/// Evaluates tries with one model.
pub struct TreeEvaluator<'m> {
    model: &'m LlamaModel,
    budget: BatchBudget,
}

/// The running state of one evaluation.
struct Walk<'a> {
    trie: &'a TokenTrie,
    targets: &'a [u32],
    on_logprob: &'a mut dyn FnMut(usize, f64) -> Result<()>,
    stats: EvalStats,
    live_cache_bytes: usize,
}

impl<'m> TreeEvaluator<'m> {
    pub fn new(model: &'m LlamaModel, budget: BatchBudget) -> Result<Self> {
        if budget.max_batch_tokens == 0 {
            bail!("the batch budget must allow at least one token");
        }
        Ok(Self { model, budget })
    }

    /// Evaluate every query of `trie`: query `q` asks for `log P(targets[q] | path)` and
    /// its answer goes to `on_logprob(q, logprob)` as soon as it is known.
    pub fn evaluate(
        &self,
        trie: &TokenTrie,
        targets: &[u32],
        on_logprob: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<EvalStats> {
        let mut walk = Walk {
            trie,
            targets,
            on_logprob,
            stats: EvalStats::default(),
            live_cache_bytes: 0,
        };
        self.children(&mut walk, trie.root(), None)?;
        Ok(walk.stats)
    }

    /// Evaluate the subtrees under `node`, whose path's keys/values are `prefix`.
    fn children(&self, walk: &mut Walk, node: usize, prefix: Option<&KvCache>) -> Result<()> {
        let trie = walk.trie;
        let mut kids = trie.node(node).children.clone();
        kids.sort_by_key(|&c| (trie.node(c).tokens.len(), c));
        for chunk in self.chunks(trie, &kids) {
            let own_caches = if chunk.len() == 1
                && trie.node(chunk[0]).tokens.len() > self.budget.max_batch_tokens
            {
                vec![(chunk[0], self.long_run(walk, chunk[0], prefix)?)]
            } else {
                self.batch(walk, &chunk, prefix)?
            };
            for (child, own) in own_caches {
                let Some(own) = own else { continue };
                let path = match prefix {
                    Some(p) => p.append(&own)?,
                    None => own,
                };
                walk.live_cache_bytes += path.memory_bytes();
                walk.stats.peak_cache_bytes =
                    walk.stats.peak_cache_bytes.max(walk.live_cache_bytes);
                self.children(walk, child, Some(&path))?;
                walk.live_cache_bytes -= path.memory_bytes();
            }
        }
        Ok(())
    }

    /// Split sorted siblings into batches within the budget.
    fn chunks(&self, trie: &TokenTrie, kids: &[usize]) -> Vec<Vec<usize>> {
        let mut chunks: Vec<Vec<usize>> = Vec::new();
        let mut current: Vec<usize> = Vec::new();
        for &kid in kids {
            let len = trie.node(kid).tokens.len();
            // Siblings are sorted by length, so `len` is the padded length if added.
            if !current.is_empty() && (current.len() + 1) * len > self.budget.max_batch_tokens {
                chunks.push(std::mem::take(&mut current));
            }
            current.push(kid);
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        chunks
    }

    /// One padded batch of sibling nodes. Returns, per node, its own keys/values when it
    /// has children to evaluate.
    fn batch(
        &self,
        walk: &mut Walk,
        nodes: &[usize],
        prefix: Option<&KvCache>,
    ) -> Result<Vec<(usize, Option<KvCache>)>> {
        let trie = walk.trie;
        let rows: Vec<&[u32]> = nodes
            .iter()
            .map(|&n| trie.node(n).tokens.as_slice())
            .collect();
        let keep_kv = nodes.iter().any(|&n| !trie.node(n).children.is_empty());
        let out = self.model.forward(&rows, prefix, keep_kv)?;
        let max_len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        walk.stats.forward_calls += 1;
        walk.stats.tokens += rows.iter().map(|r| r.len()).sum::<usize>();
        walk.stats.padding += rows.len() * max_len - rows.iter().map(|r| r.len()).sum::<usize>();
        let mut positions = Vec::new();
        for (row, &n) in nodes.iter().enumerate() {
            for &(offset, query) in &trie.node(n).queries {
                positions.push(((row, offset), query));
            }
        }
        self.score(walk, &out, &positions)?;
        nodes
            .iter()
            .enumerate()
            .map(|(row, &n)| {
                let node = trie.node(n);
                let own = match (&out.kv, node.children.is_empty()) {
                    (Some(kv), false) => Some(kv.row(row, node.tokens.len())?),
                    _ => None,
                };
                Ok((n, own))
            })
            .collect()
    }

    /// A node longer than the budget, computed in consecutive pieces.
    fn long_run(
        &self,
        walk: &mut Walk,
        node_id: usize,
        prefix: Option<&KvCache>,
    ) -> Result<Option<KvCache>> {
        let trie = walk.trie;
        let node = trie.node(node_id);
        let piece_len = self.budget.max_batch_tokens;
        let pieces = node.tokens.len().div_ceil(piece_len);
        let mut own: Option<KvCache> = None;
        for piece in 0..pieces {
            let start = piece * piece_len;
            let end = (start + piece_len).min(node.tokens.len());
            let last = piece + 1 == pieces;
            let keep_kv = !last || !node.children.is_empty();
            let path = match (prefix, &own) {
                (Some(p), Some(o)) => Some(p.append(o)?),
                (Some(p), None) => Some(p.clone()),
                (None, Some(o)) => Some(o.clone()),
                (None, None) => None,
            };
            let out = self
                .model
                .forward(&[&node.tokens[start..end]], path.as_ref(), keep_kv)?;
            walk.stats.forward_calls += 1;
            walk.stats.tokens += end - start;
            let positions: Vec<((usize, usize), usize)> = node
                .queries
                .iter()
                .filter(|(offset, _)| (start..end).contains(offset))
                .map(|&(offset, query)| ((0, offset - start), query))
                .collect();
            self.score(walk, &out, &positions)?;
            if let Some(kv) = out.kv {
                own = Some(match own {
                    Some(o) => o.append(&kv)?,
                    None => kv,
                });
            }
        }
        Ok(if node.children.is_empty() { None } else { own })
    }

    /// Log-probabilities of the queried targets at `((row, offset), query)` positions.
    fn score(
        &self,
        walk: &mut Walk,
        out: &ForwardOutput,
        positions: &[((usize, usize), usize)],
    ) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        // One output-head row per distinct position, however many queries read it.
        let mut by_position: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for &(at, query) in positions {
            by_position.entry(at).or_default().push(query);
        }
        let at: Vec<(usize, usize)> = by_position.keys().copied().collect();
        let mut ids: Vec<u32> = positions.iter().map(|&(_, q)| walk.targets[q]).collect();
        ids.sort_unstable();
        ids.dedup();
        let selected = out.positions(&at)?;
        let normaliser: Vec<f32> = self.model.log_normaliser(&selected)?.to_vec1()?;
        let logits: Vec<Vec<f32>> = self.model.token_logits(&selected, &ids)?.to_vec2()?;
        walk.stats.scored_positions += at.len();
        for (row, queries) in by_position.values().enumerate() {
            for &query in queries {
                let column = ids
                    .binary_search(&walk.targets[query])
                    .ok()
                    .context("target id missing from the gathered head rows")?;
                let logprob = f64::from(logits[row][column]) - f64::from(normaliser[row]);
                (walk.on_logprob)(query, logprob)?;
            }
        }
        Ok(())
    }
}
