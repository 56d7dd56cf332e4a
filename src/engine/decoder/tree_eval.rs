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

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use anyhow::{bail, Context, Result};

use super::trie::TokenTrie;
use crate::arch::llama::{ForwardOutput, KvCache, LlamaModel, RowGroup};

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

/// One forward pass of the plan: trie nodes, siblings next to each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBatch {
    pub nodes: Vec<usize>,
    /// A single node longer than the token budget, computed in pieces.
    pub long: bool,
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
    /// The path of every computed node that needed children still wait on.
    paths: HashMap<usize, (Rc<PathNode>, usize)>,
}

impl<'m> TreeEvaluator<'m> {
    pub fn new(model: &'m LlamaModel, budget: BatchBudget) -> Result<Self> {
        if budget.max_batch_tokens == 0 || budget.max_batch_rows == 0 {
            bail!("the batch budget must allow at least one token and one sequence");
        }
        Ok(Self { model, budget })
    }

    /// The forward passes that evaluate the whole trie, in order: nodes are taken
    /// depth-first from a stack of ready nodes (whose parents come in earlier batches),
    /// as many as the budget allows. The plan depends only on the trie and the budget.
    pub fn plan(&self, trie: &TokenTrie) -> Vec<PlannedBatch> {
        let mut stack: Vec<usize> = trie
            .node(trie.root())
            .children
            .iter()
            .rev()
            .copied()
            .collect();
        let mut batches = Vec::new();
        while let Some(&top) = stack.last() {
            let long = trie.node(top).tokens.len() > self.budget.max_batch_tokens;
            let mut nodes = Vec::new();
            if long {
                nodes.extend(stack.pop());
            } else {
                let mut tokens = 0;
                while let Some(&next) = stack.last() {
                    let len = trie.node(next).tokens.len();
                    if !nodes.is_empty()
                        && (tokens + len > self.budget.max_batch_tokens
                            || len > self.budget.max_batch_tokens
                            || nodes.len() == self.budget.max_batch_rows)
                    {
                        break;
                    }
                    tokens += len;
                    nodes.extend(stack.pop());
                }
            }
            // Children go on the stack so that the first child of the first node is on top.
            for &node in nodes.iter().rev() {
                stack.extend(trie.node(node).children.iter().rev());
            }
            batches.push(PlannedBatch { nodes, long });
        }
        batches
    }

    /// Evaluate the queries of `trie`: query `q` asks for `log P(targets[q] | path)` and
    /// its answer goes to `on_logprob(q, logprob)` as soon as it is known. With
    /// `pending`, only the batches of the plan that lead to a pending query run (and
    /// queries of other nodes in those batches are answered too); every batch that runs
    /// is the same as in a full evaluation, so answers are bitwise the same whichever
    /// queries were pending.
    pub fn evaluate(
        &self,
        trie: &TokenTrie,
        targets: &[u32],
        pending: Option<&[bool]>,
        on_logprob: &mut dyn FnMut(usize, f64) -> Result<()>,
    ) -> Result<EvalStats> {
        let plan = self.plan(trie);
        let parents = parents(trie);
        let mut batch_of = vec![usize::MAX; trie.len()];
        for (index, batch) in plan.iter().enumerate() {
            for &node in &batch.nodes {
                batch_of[node] = index;
            }
        }
        // A batch runs if one of its nodes has a pending query, or if a running batch
        // holds one of its nodes' children. Parents come in earlier batches, so one
        // backward pass settles it.
        let mut runs = vec![false; plan.len()];
        for (index, batch) in plan.iter().enumerate() {
            runs[index] = batch.nodes.iter().any(|&node| {
                trie.node(node)
                    .queries
                    .iter()
                    .any(|&(_, q)| pending.is_none_or(|p| p[q]))
            });
        }
        for index in (0..plan.len()).rev() {
            if runs[index] {
                for &node in &plan[index].nodes {
                    if let Some(parent) = parents[node] {
                        runs[batch_of[parent]] = true;
                    }
                }
            }
        }
        let mut walk = Walk {
            trie,
            targets,
            on_logprob,
            stats: EvalStats::default(),
            paths: HashMap::new(),
        };
        for (batch, _) in plan.iter().zip(&runs).filter(|(_, &run)| run) {
            let waiting = |node: usize| {
                trie.node(node)
                    .children
                    .iter()
                    .filter(|&&child| runs[batch_of[child]])
                    .count()
            };
            if batch.long {
                self.long_run(&mut walk, batch.nodes[0], parents[batch.nodes[0]], &waiting)?;
            } else {
                self.batch(&mut walk, &batch.nodes, &parents, &waiting)?;
            }
            for &node in &batch.nodes {
                if let Some(parent) = parents[node] {
                    release(&mut walk.paths, parent);
                }
            }
            let live: usize = walk
                .paths
                .values()
                .map(|(p, _)| p.own.iter().map(KvCache::memory_bytes).sum::<usize>())
                .sum();
            walk.stats.peak_cache_bytes = walk.stats.peak_cache_bytes.max(live);
        }
        Ok(walk.stats)
    }

    /// The path a node runs on: its parent's (none for the root's children).
    fn path_of(walk: &Walk, parent: Option<usize>) -> Result<Option<Rc<PathNode>>> {
        match parent {
            None => Ok(None),
            Some(parent) => Ok(Some(
                walk.paths
                    .get(&parent)
                    .map(|(path, _)| path.clone())
                    .with_context(|| {
                        format!("trie node {parent} was not computed before its children")
                    })?,
            )),
        }
    }

    /// One forward pass over `nodes`, grouped by parent.
    fn batch(
        &self,
        walk: &mut Walk,
        nodes: &[usize],
        parents: &[Option<usize>],
        waiting: &dyn Fn(usize) -> usize,
    ) -> Result<()> {
        let trie = walk.trie;
        let mut groups: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
        for &node in nodes {
            match groups.last_mut() {
                Some((parent, members)) if *parent == parents[node] => members.push(node),
                _ => groups.push((parents[node], vec![node])),
            }
        }
        let keep_kv = nodes.iter().any(|&n| waiting(n) > 0);
        let paths = groups
            .iter()
            .map(|(parent, _)| Self::path_of(walk, *parent))
            .collect::<Result<Vec<_>>>()?;
        let outputs = {
            let row_groups: Vec<RowGroup> = groups
                .iter()
                .zip(&paths)
                .map(|((_, members), path)| RowGroup {
                    prefix: path.as_ref().map(|p| p.segments()).unwrap_or_default(),
                    rows: members
                        .iter()
                        .map(|&n| trie.node(n).tokens.as_slice())
                        .collect(),
                })
                .collect();
            self.model.forward_groups(&row_groups, keep_kv)?
        };
        walk.stats.forward_calls += 1;
        let mut positions = Vec::new();
        for ((_, members), out) in groups.iter().zip(&outputs) {
            for (row, &n) in members.iter().enumerate() {
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
        for (((_, members), out), path) in groups.iter().zip(&outputs).zip(paths) {
            for (row, &n) in members.iter().enumerate() {
                let children = waiting(n);
                if children == 0 {
                    continue;
                }
                let kv = out.kv.as_ref().context("forward pass kept no cache")?;
                let own = kv.row(row, trie.node(n).tokens.len())?;
                let node_path = Rc::new(PathNode {
                    own: vec![own],
                    parent: path.clone(),
                });
                walk.paths.insert(n, (node_path, children));
            }
        }
        Ok(())
    }

    /// A node longer than the budget, computed alone in consecutive pieces.
    fn long_run(
        &self,
        walk: &mut Walk,
        node_id: usize,
        parent: Option<usize>,
        waiting: &dyn Fn(usize) -> usize,
    ) -> Result<()> {
        let trie = walk.trie;
        let node = trie.node(node_id);
        let path = Self::path_of(walk, parent)?;
        let children = waiting(node_id);
        let piece_len = self.budget.max_batch_tokens;
        let pieces = node.tokens.len().div_ceil(piece_len);
        let mut own: Vec<KvCache> = Vec::with_capacity(pieces);
        for piece in 0..pieces {
            let start = piece * piece_len;
            let end = (start + piece_len).min(node.tokens.len());
            let keep_kv = piece + 1 < pieces || children > 0;
            let mut prefix: Vec<&KvCache> = path.as_ref().map(|p| p.segments()).unwrap_or_default();
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
        if children > 0 {
            let node_path = Rc::new(PathNode { own, parent: path });
            walk.paths.insert(node_id, (node_path, children));
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

/// Each node's parent (`None` for the root's children and the root).
fn parents(trie: &TokenTrie) -> Vec<Option<usize>> {
    let mut parents = vec![None; trie.len()];
    for id in 0..trie.len() {
        if id == trie.root() {
            continue;
        }
        for &child in &trie.node(id).children {
            parents[child] = Some(id);
        }
    }
    parents
}

/// One child of `parent` is done: drop the parent's path when none waits any more.
fn release(paths: &mut HashMap<usize, (Rc<PathNode>, usize)>, parent: usize) {
    if let Some((_, waiting)) = paths.get_mut(&parent) {
        *waiting -= 1;
        if *waiting == 0 {
            paths.remove(&parent);
        }
    }
}
