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
//!
//! Completions ([`TreeEvaluator::evaluate_distributions`]) ask for whole next-token
//! distributions instead: the queried positions' full-vocabulary logits go to the caller.
//! Their tries may start from nodes computed before (a prefix cache's keys, values and
//! final hidden states), and every node they compute is handed to the caller to keep.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use anyhow::{bail, Context, Result};

use super::level_plan::LevelPlan;
use super::trie::TokenTrie;
use candle_core::{DType, Tensor};

use crate::arch::llama::{KvCache, LevelArena, LevelRow, LlamaModel, PassCount, RowGroup};

/// How a trie is cut into forward passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Plan {
    /// Ready nodes depth-first, siblings grouped, each group reading its ancestors'
    /// copied segments ([`TreeEvaluator::plan`]); the CPU's fast path.
    #[default]
    DepthFirst,
    /// Every node of one depth together, one packed sequence per pass reading its
    /// ancestors by reference from a key/value arena ([`LevelPlan`]). Label queries
    /// only: completions (full distributions, prefix caches) keep the depth-first plan.
    Levels,
}

impl Plan {
    /// The name `bench pairwise --plan` and its JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Plan::DepthFirst => "depth-first",
            Plan::Levels => "levels",
        }
    }
}

/// How much work one forward pass may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBudget {
    /// Tokens of one forward pass; a longer single node is computed in pieces.
    pub max_batch_tokens: usize,
    /// Sequences (trie nodes) of one forward pass.
    pub max_batch_rows: usize,
    /// Bytes of keys and values the level plan keeps for the prefixes later passes read;
    /// a run that needs more goes in waves (see [`super::level_plan`]).
    pub max_arena_bytes: usize,
}

/// Default of [`BatchBudget::max_arena_bytes`]: 4 GiB, some 32k positions of an 8B
/// Llama-3 in bf16 (128 KB each) or 90k of SmolLM2 in f32 (46 KB each).
pub const DEFAULT_MAX_ARENA_BYTES: usize = 4 << 30;

impl Default for BatchBudget {
    fn default() -> Self {
        Self {
            max_batch_tokens: 2048,
            max_batch_rows: 64,
            max_arena_bytes: DEFAULT_MAX_ARENA_BYTES,
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
    /// Query-key pairs of attention, per layer: each token counts the positions it
    /// attends to (its prefix and itself; sliding windows not subtracted).
    pub attended_keys: u64,
    /// Largest key/value cache memory held at once (bytes).
    pub peak_cache_bytes: usize,
    /// Tensor operations of the busiest layer in the busiest pass (counted by the level
    /// plan's pass; 0 where nothing counted them).
    pub ops_per_layer_pass_max: usize,
    /// Host-to-device and device-to-host tensor transfers (counted by the level plan).
    pub uploads: usize,
    pub downloads: usize,
}

impl EvalStats {
    pub fn add(&mut self, other: &EvalStats) {
        self.tokens += other.tokens;
        self.forward_calls += other.forward_calls;
        self.scored_positions += other.scored_positions;
        self.attended_keys += other.attended_keys;
        self.peak_cache_bytes = self.peak_cache_bytes.max(other.peak_cache_bytes);
        self.ops_per_layer_pass_max = self
            .ops_per_layer_pass_max
            .max(other.ops_per_layer_pass_max);
        self.uploads += other.uploads;
        self.downloads += other.downloads;
    }
}

/// Query-key pairs of `tokens` new positions after `prefix_len` cached ones (causal:
/// token `t` sees the prefix and tokens `0..=t`).
fn attended_keys(prefix_len: usize, tokens: usize) -> u64 {
    let (prefix_len, tokens) = (prefix_len as u64, tokens as u64);
    tokens * prefix_len + tokens * (tokens + 1) / 2
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

    /// Positions cached from the root down to this node.
    fn len(self: &Rc<Self>) -> usize {
        self.segments().iter().map(|kv| kv.len()).sum()
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
    plan: Plan,
}

/// A trie node computed before the evaluation (kept by a prefix cache): its keys/values
/// in pieces, in order, and its positions' final hidden states `(tokens, hidden)`.
#[derive(Debug, Clone)]
pub struct Precomputed {
    pub own: Vec<KvCache>,
    pub hidden: Tensor,
}

/// Receives every node an evaluation computes: the node, its keys/values in pieces (in
/// order) and its positions' final hidden states `(tokens, hidden)`.
pub type NodeSink<'a> = &'a mut dyn FnMut(usize, &[KvCache], &Tensor) -> Result<()>;

/// What the queries ask.
enum Head<'a> {
    /// Query `q`: `log P(targets[q] | path)`, answered through `on_logprob(q, logprob)`.
    Targets {
        targets: &'a [u32],
        on_logprob: &'a mut dyn FnMut(usize, f64) -> Result<()>,
    },
    /// Every query: the full-vocabulary logits at its position, through `on_row(q, row)`.
    Rows {
        on_row: &'a mut dyn FnMut(usize, &[f32]) -> Result<()>,
    },
}

/// The running state of one evaluation.
struct Walk<'a> {
    trie: &'a TokenTrie,
    head: Head<'a>,
    on_node: Option<NodeSink<'a>>,
    stats: EvalStats,
    /// The path of every computed node that needed children still wait on.
    paths: HashMap<usize, (Rc<PathNode>, usize)>,
}

impl<'m> TreeEvaluator<'m> {
    pub fn new(model: &'m LlamaModel, budget: BatchBudget) -> Result<Self> {
        if budget.max_batch_tokens == 0 || budget.max_batch_rows == 0 {
            bail!("the batch budget must allow at least one token and one sequence");
        }
        Ok(Self {
            model,
            budget,
            plan: Plan::DepthFirst,
        })
    }

    /// The same evaluator with another plan for label queries.
    pub fn with_plan(mut self, plan: Plan) -> Self {
        self.plan = plan;
        self
    }

    /// The forward passes that evaluate the whole trie, in order: nodes are taken
    /// depth-first from a stack of ready nodes (whose parents come in earlier batches),
    /// as many as the budget allows. The plan depends only on the trie and the budget.
    pub fn plan(&self, trie: &TokenTrie) -> Vec<PlannedBatch> {
        self.plan_from(trie, &|_| false)
    }

    /// [`Self::plan`] where the nodes `precomputed` says are done need no pass: the
    /// first ready nodes are the children of the root and of those nodes, depth-first.
    fn plan_from(
        &self,
        trie: &TokenTrie,
        precomputed: &dyn Fn(usize) -> bool,
    ) -> Vec<PlannedBatch> {
        let mut ready = Vec::new();
        let mut expand: Vec<usize> = trie
            .node(trie.root())
            .children
            .iter()
            .rev()
            .copied()
            .collect();
        while let Some(node) = expand.pop() {
            if precomputed(node) {
                expand.extend(trie.node(node).children.iter().rev());
            } else {
                ready.push(node);
            }
        }
        let mut stack: Vec<usize> = ready.into_iter().rev().collect();
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
        let head = Head::Targets {
            targets,
            on_logprob,
        };
        match self.plan {
            Plan::DepthFirst => self.run(trie, head, pending, &HashMap::new(), None),
            Plan::Levels => self.run_levels(trie, head, pending),
        }
    }

    /// [`Self::evaluate`] by the level plan: the passes that lead to a pending query,
    /// each one [`LlamaModel::forward_level`] call, its queries scored from its hidden
    /// states.
    fn run_levels<'a>(
        &self,
        trie: &'a TokenTrie,
        head: Head<'a>,
        pending: Option<&[bool]>,
    ) -> Result<EvalStats> {
        let per_position = self.model.level_arena_bytes_per_position().max(1);
        let bound = self.budget.max_arena_bytes / per_position;
        let plan = LevelPlan::bounded(trie, self.budget, bound)?;
        let runs = plan.needed(pending);
        // Scratch for the tokens of a pass that nobody reads (the fused pass writes all).
        let unread = plan
            .passes
            .iter()
            .map(|pass| {
                pass.pieces
                    .iter()
                    .filter(|piece| piece.arena.is_none())
                    .map(|piece| piece.node_tokens.len())
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0);
        let mut arena = LevelArena::new(self.model, plan.arena_len).with_scratch(unread);
        let mut walk = Walk {
            trie,
            head,
            on_node: None,
            stats: EvalStats::default(),
            paths: HashMap::new(),
        };
        let mut count = PassCount::default();
        for (pass, _) in plan.passes.iter().zip(&runs).filter(|(_, &run)| run) {
            let rows: Vec<LevelRow> = pass
                .pieces
                .iter()
                .map(|piece| LevelRow {
                    tokens: &trie.node(piece.node).tokens[piece.node_tokens.clone()],
                    position: piece.position,
                    segments: &piece.segments,
                    arena: piece.arena.clone(),
                })
                .collect();
            let hidden = self
                .model
                .forward_level(&rows, &mut arena, &mut count)
                .with_context(|| format!("level pass at depth {}", pass.depth))?;
            let stats = &mut walk.stats;
            stats.forward_calls += 1;
            stats.tokens += pass.tokens;
            stats.ops_per_layer_pass_max = stats.ops_per_layer_pass_max.max(count.per_layer_max());
            stats.uploads += count.uploads;
            for piece in &pass.pieces {
                stats.attended_keys += attended_keys(piece.position, piece.node_tokens.len());
            }
            stats.peak_cache_bytes = stats.peak_cache_bytes.max(arena.memory_bytes());
            let positions: Vec<(usize, usize)> = pass
                .pieces
                .iter()
                .flat_map(|piece| piece.queries.iter().copied())
                .collect();
            // Scoring uploads the selected rows' index and the ids, and downloads the
            // logits and normalisers.
            if !positions.is_empty() {
                walk.stats.uploads += 2;
                walk.stats.downloads += 2;
            }
            self.score(&mut walk, &hidden, &positions)?;
        }
        Ok(walk.stats)
    }

    /// Evaluate the queries of `trie` as whole distributions: each query's position's
    /// full-vocabulary logits go to `on_row(query, logits)`. Nodes in `precomputed`
    /// (whose parents must be precomputed too) are not computed again: their keys and
    /// values serve their children and their hidden states answer their queries. Every
    /// node computed goes to `on_node` (parents before children).
    pub fn evaluate_distributions<'a>(
        &self,
        trie: &'a TokenTrie,
        precomputed: &HashMap<usize, Precomputed>,
        on_row: &'a mut dyn FnMut(usize, &[f32]) -> Result<()>,
        on_node: Option<NodeSink<'a>>,
    ) -> Result<EvalStats> {
        self.run(trie, Head::Rows { on_row }, None, precomputed, on_node)
    }

    fn run<'a>(
        &self,
        trie: &'a TokenTrie,
        head: Head<'a>,
        pending: Option<&[bool]>,
        precomputed: &HashMap<usize, Precomputed>,
        on_node: Option<NodeSink<'a>>,
    ) -> Result<EvalStats> {
        let dtype = self.model.activation_dtype();
        if dtype != DType::F32 {
            bail!(
                "this model computes in {dtype:?}, which only the level plan runs (label \
                 scoring: compare, score, labels); generation and depth-first passes need \
                 --precision f32"
            );
        }
        let plan = self.plan_from(trie, &|node| precomputed.contains_key(&node));
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
                        if batch_of[parent] != usize::MAX {
                            runs[batch_of[parent]] = true;
                        }
                    }
                }
            }
        }
        let waiting = |node: usize| {
            trie.node(node)
                .children
                .iter()
                .filter(|&&child| batch_of[child] != usize::MAX && runs[batch_of[child]])
                .count()
        };
        let mut walk = Walk {
            trie,
            head,
            on_node,
            stats: EvalStats::default(),
            paths: HashMap::new(),
        };
        self.seed(&mut walk, precomputed, &parents, &waiting)?;
        for (batch, _) in plan.iter().zip(&runs).filter(|(_, &run)| run) {
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

    /// Give the precomputed nodes their paths (parents first: trie ids are in depth-first
    /// order) and answer their queries from their hidden states.
    fn seed(
        &self,
        walk: &mut Walk,
        precomputed: &HashMap<usize, Precomputed>,
        parents: &[Option<usize>],
        waiting: &dyn Fn(usize) -> usize,
    ) -> Result<()> {
        let mut nodes: Vec<usize> = precomputed.keys().copied().collect();
        nodes.sort_unstable();
        let mut seeded: HashMap<usize, Rc<PathNode>> = HashMap::new();
        for node in nodes {
            let done = &precomputed[&node];
            let expected = walk.trie.node(node).tokens.len();
            let held: usize = done.own.iter().map(KvCache::len).sum();
            if held != expected || done.hidden.dim(0)? != expected {
                bail!(
                    "precomputed trie node {node} holds {held} positions and {} hidden states for {expected} tokens",
                    done.hidden.dim(0)?
                );
            }
            let parent = match parents[node] {
                None => None,
                Some(parent) => Some(seeded.get(&parent).cloned().with_context(|| {
                    format!("precomputed trie node {node} has a parent that is not")
                })?),
            };
            let path = Rc::new(PathNode {
                own: done.own.clone(),
                parent,
            });
            let children = waiting(node);
            if children > 0 {
                walk.paths.insert(node, (path.clone(), children));
            }
            seeded.insert(node, path);
            let queries = &walk.trie.node(node).queries;
            let positions: Vec<(usize, usize)> = queries.clone();
            self.score(walk, &done.hidden, &positions)?;
        }
        Ok(())
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
        let keep_kv = walk.on_node.is_some() || nodes.iter().any(|&n| waiting(n) > 0);
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
                    tile_keys: false,
                })
                .collect();
            self.model.forward_groups(&row_groups, keep_kv)?
        };
        walk.stats.forward_calls += 1;
        let mut positions = Vec::new();
        for (((_, members), out), path) in groups.iter().zip(&outputs).zip(&paths) {
            let prefix_len = path.as_ref().map_or(0, |p| p.len());
            for (row, &n) in members.iter().enumerate() {
                let node = trie.node(n);
                walk.stats.tokens += node.tokens.len();
                walk.stats.attended_keys += attended_keys(prefix_len, node.tokens.len());
                for &(offset, query) in &node.queries {
                    positions.push((out.row_starts[row] + offset, query));
                }
            }
        }
        if let Some(first) = outputs.first() {
            self.score(walk, &first.hidden, &positions)?;
        }
        for (((_, members), out), path) in groups.iter().zip(&outputs).zip(paths) {
            for (row, &n) in members.iter().enumerate() {
                let children = waiting(n);
                if children == 0 && walk.on_node.is_none() {
                    continue;
                }
                let len = trie.node(n).tokens.len();
                let kv = out.kv.as_ref().context("forward pass kept no cache")?;
                let own = kv.row(row, len)?;
                if let Some(on_node) = walk.on_node.as_mut() {
                    let hidden = out.hidden.narrow(0, out.row_starts[row], len)?.copy()?;
                    on_node(n, std::slice::from_ref(&own), &hidden)?;
                }
                if children == 0 {
                    continue;
                }
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
        let mut hidden: Vec<Tensor> = Vec::new();
        for piece in 0..pieces {
            let start = piece * piece_len;
            let end = (start + piece_len).min(node.tokens.len());
            let keep_kv = piece + 1 < pieces || children > 0 || walk.on_node.is_some();
            let mut prefix: Vec<&KvCache> = path.as_ref().map(|p| p.segments()).unwrap_or_default();
            prefix.extend(own.iter());
            let group = RowGroup {
                prefix,
                rows: vec![&node.tokens[start..end]],
                tile_keys: false,
            };
            let mut out = self.model.forward_groups(&[group], keep_kv)?.remove(0);
            walk.stats.forward_calls += 1;
            walk.stats.tokens += end - start;
            let prefix_len =
                path.as_ref().map_or(0, |p| p.len()) + own.iter().map(|kv| kv.len()).sum::<usize>();
            walk.stats.attended_keys += attended_keys(prefix_len, end - start);
            let positions: Vec<(usize, usize)> = node
                .queries
                .iter()
                .filter(|(offset, _)| (start..end).contains(offset))
                .map(|&(offset, query)| (offset - start, query))
                .collect();
            self.score(walk, &out.hidden, &positions)?;
            if let Some(kv) = out.kv.take() {
                own.push(kv);
            }
            if walk.on_node.is_some() {
                hidden.push(out.hidden.copy()?);
            }
        }
        if let Some(on_node) = walk.on_node.as_mut() {
            on_node(node_id, &own, &Tensor::cat(&hidden, 0)?)?;
        }
        if children > 0 {
            let node_path = Rc::new(PathNode { own, parent: path });
            walk.paths.insert(node_id, (node_path, children));
        }
        Ok(())
    }

    /// Answer the queries at `(row of hidden, query)` pairs: the targets' log-probabilities,
    /// or the full rows of logits.
    fn score(&self, walk: &mut Walk, hidden: &Tensor, positions: &[(usize, usize)]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        // One output-head row per distinct position, however many queries read it.
        let mut by_position: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &(at, query) in positions {
            by_position.entry(at).or_default().push(query);
        }
        let at: Vec<u32> = by_position.keys().map(|&p| p as u32).collect();
        let index = Tensor::from_vec(at, by_position.len(), hidden.device())?;
        let selected = hidden.index_select(&index, 0)?;
        walk.stats.scored_positions += by_position.len();
        match &mut walk.head {
            Head::Targets {
                targets,
                on_logprob,
            } => {
                let mut ids: Vec<u32> = positions.iter().map(|&(_, q)| targets[q]).collect();
                ids.sort_unstable();
                ids.dedup();
                let normaliser: Vec<f32> = self.model.log_normaliser(&selected)?.to_vec1()?;
                let logits: Vec<Vec<f32>> = self.model.token_logits(&selected, &ids)?.to_vec2()?;
                for (row, queries) in by_position.values().enumerate() {
                    for &query in queries {
                        let column = ids
                            .binary_search(&targets[query])
                            .ok()
                            .context("target id missing from the gathered head rows")?;
                        let logprob = f64::from(logits[row][column]) - f64::from(normaliser[row]);
                        on_logprob(query, logprob)?;
                    }
                }
            }
            Head::Rows { on_row } => {
                let logits: Vec<Vec<f32>> = self.model.full_logits(&selected)?.to_vec2()?;
                for (row, queries) in by_position.values().enumerate() {
                    for &query in queries {
                        on_row(query, &logits[row])?;
                    }
                }
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
