//! Evaluation of a [`TokenTrie`] with a llama-family decoder.
//!
//! Each node's tokens are computed once, attending to the keys/values of the nodes above
//! it, which are kept as a chain of per-node cache segments (never copied into one long
//! cache). Nodes are taken depth-first from a stack of ready nodes (whose parents are
//! done), as many as the token budget allows, so that a batch holds siblings and, when
//! sibling sets are small, cousins: each set of siblings forms one group of a
//! [`LlamaModel::forward_groups`] call. A node's segment lives only while some node below
//! it still waits. Only the queried positions go through the output head, and only for
//! the queried token ids plus one full-vocabulary log-sum-exp per position.

use std::collections::BTreeMap;
use std::rc::Rc;

use anyhow::{bail, Context, Result};

use super::trie::TokenTrie;
use crate::arch::llama::{ForwardOutput, LlamaModel, RowGroup};
use crate::arch::KvCache;

/// How much work one forward pass may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBudget {
    /// Tokens of one forward pass; a longer single node is computed in pieces.
    pub max_batch_tokens: usize,
    /// Sequences (trie nodes) of one forward pass.
    pub max_batch_rows: usize,
}

impl Default for BatchBudget {
    fn default() -> Self {
        Self {
            max_batch_tokens: 2048,
            max_batch_rows: 64,
        }
    }
}

/// What an evaluation computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalStats {
    /// Real tokens run through the model (padding excluded).
    pub tokens: usize,
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
        self.forward_calls += other.forward_calls;
        self.scored_positions += other.scored_positions;
        self.peak_cache_bytes = self.peak_cache_bytes.max(other.peak_cache_bytes);
    }
}

/// The keys/values of one trie node, linked to its parent's: a path from the root.
struct PathNode {
    own: Vec<KvCache>,
    parent: Option<Rc<PathNode>>,
    bytes: usize,
}

impl PathNode {
    /// The cache segments from the root down to this node.
    fn segments(self: &Rc<Self>) -> Vec<&KvCache> {
        let mut chain = Vec::new();
        let mut current = Some(self);
        while let Some(node) = current {
            chain.push(node);
            current = node.parent.as_ref();
        }
        chain
            .into_iter()
            .rev()
            .flat_map(|node| node.own.iter())
            .collect()
    }
}

/// A node whose parent is done: it can run on `path` (its parent's path).
struct Ready {
    node: usize,
    path: Option<Rc<PathNode>>,
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
        if budget.max_batch_tokens == 0 || budget.max_batch_rows == 0 {
            bail!("the batch budget must allow at least one token and one sequence");
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
        let mut stack: Vec<Ready> = trie
            .node(trie.root())
            .children
            .iter()
            .rev()
            .map(|&node| Ready { node, path: None })
            .collect();
        while let Some(top) = stack.last() {
            if trie.node(top.node).tokens.len() > self.budget.max_batch_tokens {
                let ready = stack.pop().context("stack top")?;
                self.long_run(&mut walk, ready, &mut stack)?;
                continue;
            }
            let batch = self.take_batch(trie, &mut stack);
            self.batch(&mut walk, batch, &mut stack)?;
        }
        Ok(walk.stats)
    }

    /// Pop ready nodes depth-first while they fit the budget (at least one).
    fn take_batch(&self, trie: &TokenTrie, stack: &mut Vec<Ready>) -> Vec<Ready> {
        let mut batch = Vec::new();
        let mut tokens = 0;
        while let Some(top) = stack.last() {
            let len = trie.node(top.node).tokens.len();
            if !batch.is_empty()
                && (tokens + len > self.budget.max_batch_tokens
                    || len > self.budget.max_batch_tokens
                    || batch.len() == self.budget.max_batch_rows)
            {
                break;
            }
            tokens += len;
            batch.extend(stack.pop());
        }
        batch
    }

    /// One forward pass over `batch`, grouped by parent path; children of its nodes are
    /// pushed onto `stack`.
    fn batch(&self, walk: &mut Walk, batch: Vec<Ready>, stack: &mut Vec<Ready>) -> Result<()> {
        let trie = walk.trie;
        // Group consecutive nodes that share a parent path (siblings come out together).
        let mut groups: Vec<(Option<Rc<PathNode>>, Vec<usize>)> = Vec::new();
        for ready in batch {
            match groups.last_mut() {
                Some((path, nodes)) if same_path(path, &ready.path) => nodes.push(ready.node),
                _ => groups.push((ready.path, vec![ready.node])),
            }
        }
        let keep_kv = groups
            .iter()
            .flat_map(|(_, nodes)| nodes)
            .any(|&n| !trie.node(n).children.is_empty());
        let outputs = {
            let row_groups: Vec<RowGroup> = groups
                .iter()
                .map(|(path, nodes)| RowGroup {
                    prefix: path.as_ref().map(|p| p.segments()).unwrap_or_default(),
                    rows: nodes
                        .iter()
                        .map(|&n| trie.node(n).tokens.as_slice())
                        .collect(),
                })
                .collect();
            self.model.forward_groups(&row_groups, keep_kv)?
        };
        walk.stats.forward_calls += 1;
        let mut positions = Vec::new();
        for ((_, nodes), out) in groups.iter().zip(&outputs) {
            for (row, &n) in nodes.iter().enumerate() {
                let node = trie.node(n);
                walk.stats.tokens += node.tokens.len();
                for &(offset, query) in &node.queries {
                    positions.push((out.row_starts[row] + offset, query));
                }
            }
        }
        if let Some(first) = outputs.first() {
            self.score(walk, first, &positions)?;
        }
        // Children go on the stack so that the first child of the first node is on top.
        let mut pushes = Vec::new();
        for ((path, nodes), out) in groups.into_iter().zip(outputs) {
            for (row, n) in nodes.into_iter().enumerate() {
                let node = trie.node(n);
                if node.children.is_empty() {
                    continue;
                }
                let kv = out.kv.as_ref().context("forward pass kept no cache")?;
                let own = kv.row(row, node.tokens.len())?;
                let child_path = link(vec![own], path.clone());
                pushes.push((n, child_path));
            }
        }
        for (n, child_path) in pushes.into_iter().rev() {
            for &child in trie.node(n).children.iter().rev() {
                stack.push(Ready {
                    node: child,
                    path: Some(child_path.clone()),
                });
            }
        }
        walk.live_cache_bytes = live_bytes(stack);
        walk.stats.peak_cache_bytes = walk.stats.peak_cache_bytes.max(walk.live_cache_bytes);
        Ok(())
    }

    /// A node longer than the budget, computed alone in consecutive pieces.
    fn long_run(&self, walk: &mut Walk, ready: Ready, stack: &mut Vec<Ready>) -> Result<()> {
        let trie = walk.trie;
        let node = trie.node(ready.node);
        let piece_len = self.budget.max_batch_tokens;
        let pieces = node.tokens.len().div_ceil(piece_len);
        let mut own: Vec<KvCache> = Vec::with_capacity(pieces);
        for piece in 0..pieces {
            let start = piece * piece_len;
            let end = (start + piece_len).min(node.tokens.len());
            let last = piece + 1 == pieces;
            let keep_kv = !last || !node.children.is_empty();
            let mut prefix: Vec<&KvCache> = ready
                .path
                .as_ref()
                .map(|p| p.segments())
                .unwrap_or_default();
            prefix.extend(own.iter());
            let group = RowGroup {
                prefix,
                rows: vec![&node.tokens[start..end]],
            };
            let mut out = self.model.forward_groups(&[group], keep_kv)?.remove(0);
            walk.stats.forward_calls += 1;
            walk.stats.tokens += end - start;
            let positions: Vec<(usize, usize)> = node
                .queries
                .iter()
                .filter(|(offset, _)| (start..end).contains(offset))
                .map(|&(offset, query)| (offset - start, query))
                .collect();
            self.score(walk, &out, &positions)?;
            if let Some(kv) = out.kv.take() {
                own.push(kv);
            }
        }
        if !node.children.is_empty() {
            let path = link(own, ready.path);
            for &child in node.children.iter().rev() {
                stack.push(Ready {
                    node: child,
                    path: Some(path.clone()),
                });
            }
        }
        Ok(())
    }

    /// Log-probabilities of the queried targets at `(packed position, query)` pairs.
    fn score(
        &self,
        walk: &mut Walk,
        out: &ForwardOutput,
        positions: &[(usize, usize)],
    ) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        // One output-head row per distinct position, however many queries read it.
        let mut by_position: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &(at, query) in positions {
            by_position.entry(at).or_default().push(query);
        }
        let at: Vec<u32> = by_position.keys().map(|&p| p as u32).collect();
        let mut ids: Vec<u32> = positions.iter().map(|&(_, q)| walk.targets[q]).collect();
        ids.sort_unstable();
        ids.dedup();
        let index = candle_core::Tensor::from_vec(at, by_position.len(), out.hidden.device())?;
        let selected = out.hidden.index_select(&index, 0)?;
        let normaliser: Vec<f32> = self.model.log_normaliser(&selected)?.to_vec1()?;
        let logits: Vec<Vec<f32>> = self.model.token_logits(&selected, &ids)?.to_vec2()?;
        walk.stats.scored_positions += by_position.len();
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

/// A node's own cache segments hung below its parent's path.
fn link(own: Vec<KvCache>, parent: Option<Rc<PathNode>>) -> Rc<PathNode> {
    let bytes = own.iter().map(KvCache::memory_bytes).sum();
    Rc::new(PathNode { own, parent, bytes })
}

fn same_path(a: &Option<Rc<PathNode>>, b: &Option<Rc<PathNode>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Rc::ptr_eq(a, b),
        _ => false,
    }
}

/// Bytes of the distinct path segments the waiting nodes still need.
fn live_bytes(stack: &[Ready]) -> usize {
    let mut seen: Vec<*const PathNode> = Vec::new();
    let mut total = 0;
    for ready in stack {
        let mut current = ready.path.as_ref();
        while let Some(node) = current {
            let pointer = Rc::as_ptr(node);
            if seen.contains(&pointer) {
                break;
            }
            seen.push(pointer);
            total += node.bytes;
            current = node.parent.as_ref();
        }
    }
    total
}
