//! The level plan of a prefix trie: every node of one depth evaluated together.
//!
//! The depth-first plan of [`super::tree_eval`] runs a trie in many small passes (a
//! pass per sibling set, roughly), each broadcasting and concatenating its ancestors'
//! keys and values: cheap on a CPU, launch-bound on a GPU (issue 38). A level plan runs
//! the trie in as few passes as its depth allows: all nodes of depth 1 (for pairwise:
//! the contexts), then all of depth 2 (the first candidates), then depth 3 (the leaves),
//! each level cut into passes by a token and row budget. Every pass is one packed
//! sequence of its nodes' tokens; a node reads its ancestors' keys and values by
//! reference, as ranges of one per-layer key/value arena, and writes its own into the
//! arena where a later pass reads them.
//!
//! Level by level over a whole run keeps every shared prefix of the run in the arena at
//! once (for pairwise: every context and first candidate, ~190k positions for all of
//! SummEval; 24 GB of keys and values for an 8B model in bf16). An arena bound cuts the
//! trie into waves: groups of sibling subtrees planned level by level in turn, each group
//! as large as the bound allows beside its ancestors, which stay; a subtree larger than
//! the bound alone is entered (its root computed, then its children in waves).
//!
//! The plan is plain data and a function of the trie (and budget) alone: nodes are taken
//! in the trie's order (children in ascending order of their first token, which does not
//! depend on the order prompts were inserted), the arena is allocated first-fit in pass
//! order, so a resumed run computes the same passes and gets the same bits.

use std::ops::Range;

use anyhow::{bail, Result};

use super::tree_eval::BatchBudget;
use super::trie::TokenTrie;

/// One piece of a trie node computed in a pass: the whole node, or, for a node longer
/// than the token budget, one of its consecutive pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPiece {
    /// The trie node.
    pub node: usize,
    /// The node's tokens this piece computes (offsets into the node's tokens).
    pub node_tokens: Range<usize>,
    /// Where the piece's tokens sit in the pass's packed sequence.
    pub pass_tokens: Range<usize>,
    /// The arena ranges of everything before it, root first: the ancestors' pieces,
    /// then the node's own earlier pieces. Their lengths add up to `position`.
    pub segments: Vec<Range<usize>>,
    /// The rope position of the piece's first token (the positions before it).
    pub position: usize,
    /// Where the piece's keys and values go in the arena, when a later pass reads them.
    pub arena: Option<Range<usize>>,
    /// `(row of the pass's packed sequence, query)`: the positions that go through the
    /// output head, and for which caller's query.
    pub queries: Vec<(usize, usize)>,
}

/// One forward pass: pieces of one trie depth only, ordered by parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPass {
    /// Trie depth of every piece (1: the root's children).
    pub depth: usize,
    /// Tokens of the packed sequence.
    pub tokens: usize,
    pub pieces: Vec<PlannedPiece>,
}

/// The passes that evaluate a trie, in order, and the arena they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelPlan {
    pub passes: Vec<PlannedPass>,
    /// Positions the per-layer key/value arena must hold (its largest extent in use).
    pub arena_len: usize,
    /// Largest number of positions live in the arena at once (after a pass's writes,
    /// before its releases).
    pub arena_peak: usize,
}

/// A first-fit allocator of arena positions: deterministic, so equal tries get equal
/// arenas.
#[derive(Default)]
struct Arena {
    /// Free ranges, sorted and merged.
    free: Vec<Range<usize>>,
    /// End of the arena's extent.
    end: usize,
    live: usize,
}

impl Arena {
    fn allocate(&mut self, len: usize) -> Range<usize> {
        self.live += len;
        if let Some(index) = self.free.iter().position(|r| r.len() >= len) {
            let start = self.free[index].start;
            if self.free[index].len() == len {
                self.free.remove(index);
            } else {
                self.free[index].start += len;
            }
            return start..start + len;
        }
        // Grow, using a free range at the end if there is one.
        let start = match self.free.last() {
            Some(last) if last.end == self.end => {
                let start = last.start;
                self.free.pop();
                start
            }
            _ => self.end,
        };
        self.end = start + len;
        start..start + len
    }

    fn release(&mut self, range: Range<usize>) {
        self.live -= range.len();
        let index = self.free.partition_point(|r| r.start < range.start);
        self.free.insert(index, range);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(self.free.len());
        for r in self.free.drain(..) {
            match merged.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => merged.push(r),
            }
        }
        self.free = merged;
    }
}

/// A piece before its pass is fixed.
struct Draft {
    node: usize,
    node_tokens: Range<usize>,
    /// Index of the draft it continues (the parent's last piece, or its own previous
    /// piece); `None` at the root.
    after: Option<usize>,
    position: usize,
    pass: usize,
    /// Last pass that reads this piece's keys and values.
    last_reader: Option<usize>,
}

/// Sibling subtrees planned level by level together: after the nodes of earlier waves,
/// before those of later ones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wave {
    /// The roots' parent (computed in an earlier wave, or the trie's root).
    parent: usize,
    /// The roots' trie depth.
    depth: usize,
    /// Sibling nodes, in the trie's order.
    roots: Vec<usize>,
    /// Whether the roots' descendants come in this wave (else only the roots: their
    /// children follow in waves of their own).
    whole: bool,
}

/// Arena positions a node of `len` tokens keeps while its subtree runs.
fn own_kept(len: usize, has_children: bool, piece_len: usize) -> usize {
    match has_children {
        true => len,
        false => len.saturating_sub(1) / piece_len * piece_len,
    }
}

/// The trie cut into waves so that no wave keeps more than `bound` arena positions
/// beside its ancestors where that is possible: siblings are grouped in the trie's order
/// while their subtrees' kept positions fit what the bound leaves beside their
/// ancestors; a subtree that does not fit alone is entered (its root alone, then its
/// children cut the same way). One wave of the root's children when everything fits.
fn waves(trie: &TokenTrie, piece_len: usize, bound: usize) -> Vec<Wave> {
    // Positions a subtree keeps in the arena while it runs: every node with children is
    // read by them, and a leaf longer than a piece keeps its earlier pieces for its last.
    // Ids are depth-first (a parent before its children), so children are summed first
    // going backwards.
    let mut kept = vec![0usize; trie.len()];
    for id in (0..trie.len()).rev() {
        let node = trie.node(id);
        let own = own_kept(node.tokens.len(), !node.children.is_empty(), piece_len);
        kept[id] = own + node.children.iter().map(|&c| kept[c]).sum::<usize>();
    }
    struct Frame {
        parent: usize,
        depth: usize,
        /// What the bound leaves beside the parent's path.
        room: usize,
        next: usize,
        group: Vec<usize>,
        used: usize,
    }
    let mut out = Vec::new();
    let flush = |frame: &mut Frame, out: &mut Vec<Wave>| {
        if !frame.group.is_empty() {
            out.push(Wave {
                parent: frame.parent,
                depth: frame.depth,
                roots: std::mem::take(&mut frame.group),
                whole: true,
            });
        }
        frame.used = 0;
    };
    // An explicit stack: a trie can be deeper than the call stack allows.
    let mut stack = vec![Frame {
        parent: trie.root(),
        depth: 1,
        room: bound,
        next: 0,
        group: Vec::new(),
        used: 0,
    }];
    while let Some(frame) = stack.last_mut() {
        let children = &trie.node(frame.parent).children;
        let Some(&child) = children.get(frame.next) else {
            flush(frame, &mut out);
            stack.pop();
            continue;
        };
        frame.next += 1;
        if kept[child] <= frame.room {
            if frame.used + kept[child] > frame.room {
                flush(frame, &mut out);
            }
            frame.group.push(child);
            frame.used += kept[child];
            continue;
        }
        flush(frame, &mut out);
        out.push(Wave {
            parent: frame.parent,
            depth: frame.depth,
            roots: vec![child],
            whole: false,
        });
        let inner = Frame {
            parent: child,
            depth: frame.depth + 1,
            room: frame.room.saturating_sub(trie.node(child).tokens.len()),
            next: 0,
            group: Vec::new(),
            used: 0,
        };
        stack.push(inner);
    }
    out
}

impl LevelPlan {
    /// The level plan of `trie` under `budget`: depth by depth, each depth's nodes in the
    /// trie's order (grouped by parent), cut into passes of at most
    /// `budget.max_batch_tokens` tokens and `budget.max_batch_rows` pieces. A node longer
    /// than the token budget is computed in pieces of that many tokens, each piece in a
    /// later pass of the same depth than the one before it.
    pub fn new(trie: &TokenTrie, budget: BatchBudget) -> Result<Self> {
        Self::bounded(trie, budget, usize::MAX)
    }

    /// [`Self::new`] with the arena kept to `arena_bound` positions where the trie
    /// allows it: the trie in waves (see the module's header). The arena's live positions
    /// stay at most `arena_bound` or the longest path through nodes with children,
    /// whichever is larger; with everything within the bound, the plan is
    /// [`Self::new`]'s.
    pub fn bounded(trie: &TokenTrie, budget: BatchBudget, arena_bound: usize) -> Result<Self> {
        if budget.max_batch_tokens == 0 || budget.max_batch_rows == 0 {
            bail!("the batch budget must allow at least one token and one sequence");
        }
        let piece_len = budget.max_batch_tokens;
        let mut drafts: Vec<Draft> = Vec::new();
        let mut pass_depths: Vec<usize> = Vec::new();
        let mut pass_tokens: Vec<usize> = Vec::new();
        let mut pass_rows: Vec<usize> = Vec::new();
        // Each node's last draft, which its children continue.
        let mut last_draft: Vec<Option<usize>> = vec![None; trie.len()];
        for wave in waves(trie, piece_len, arena_bound) {
            // (node, the draft its parent ended with), depth by depth.
            let mut level: Vec<(usize, Option<usize>)> = wave
                .roots
                .iter()
                .map(|&c| (c, last_draft[wave.parent]))
                .collect();
            let mut depth = wave.depth - 1;
            while !level.is_empty() {
                depth += 1;
                // Round r computes every node's r-th piece; nodes whose pieces end drop out.
                let mut ends: Vec<Option<usize>> = vec![None; level.len()];
                let mut round = 0;
                loop {
                    let members: Vec<usize> = (0..level.len())
                        .filter(|&i| round * piece_len < trie.node(level[i].0).tokens.len())
                        .collect();
                    if members.is_empty() {
                        break;
                    }
                    let mut open = false;
                    for i in members {
                        let (node, parent_end) = level[i];
                        let len = trie.node(node).tokens.len();
                        let range = round * piece_len..((round + 1) * piece_len).min(len);
                        let after = if round == 0 { parent_end } else { ends[i] };
                        let position = trie.node(node).start + range.start;
                        let fits = open && {
                            let last = pass_tokens.len() - 1;
                            pass_tokens[last] + range.len() <= budget.max_batch_tokens
                                && pass_rows[last] < budget.max_batch_rows
                        };
                        if !fits {
                            pass_depths.push(depth);
                            pass_tokens.push(0);
                            pass_rows.push(0);
                            open = true;
                        }
                        let pass = pass_tokens.len() - 1;
                        pass_tokens[pass] += range.len();
                        pass_rows[pass] += 1;
                        drafts.push(Draft {
                            node,
                            node_tokens: range,
                            after,
                            position,
                            pass,
                            last_reader: None,
                        });
                        ends[i] = Some(drafts.len() - 1);
                    }
                    round += 1;
                }
                let mut next = Vec::new();
                for (i, &(node, _)) in level.iter().enumerate() {
                    last_draft[node] = ends[i];
                    if wave.whole {
                        next.extend(trie.node(node).children.iter().map(|&c| (c, ends[i])));
                    }
                }
                level = next;
            }
        }
        // Who reads whom: a piece reads the chain of pieces before it.
        for index in 0..drafts.len() {
            let pass = drafts[index].pass;
            let mut current = drafts[index].after;
            while let Some(before) = current {
                let reader = &mut drafts[before].last_reader;
                *reader = Some(reader.map_or(pass, |r| r.max(pass)));
                current = drafts[before].after;
            }
        }
        // The arena, pass by pass: allocate the pass's written pieces, then release what
        // no later pass reads.
        let mut arena = Arena::default();
        let mut ranges: Vec<Option<Range<usize>>> = vec![None; drafts.len()];
        let mut peak = 0;
        let mut by_pass: Vec<Vec<usize>> = vec![Vec::new(); pass_tokens.len()];
        let mut released_after: Vec<Vec<usize>> = vec![Vec::new(); pass_tokens.len()];
        for (index, draft) in drafts.iter().enumerate() {
            by_pass[draft.pass].push(index);
            if let Some(last) = draft.last_reader {
                released_after[last].push(index);
            }
        }
        for pass in 0..pass_tokens.len() {
            for &index in &by_pass[pass] {
                if drafts[index].last_reader.is_some() {
                    ranges[index] = Some(arena.allocate(drafts[index].node_tokens.len()));
                }
            }
            peak = peak.max(arena.live);
            for &index in &released_after[pass] {
                if let Some(range) = ranges[index].clone() {
                    arena.release(range);
                }
            }
        }
        let mut passes: Vec<PlannedPass> = pass_depths
            .iter()
            .zip(&pass_tokens)
            .map(|(&depth, &tokens)| PlannedPass {
                depth,
                tokens,
                pieces: Vec::new(),
            })
            .collect();
        for (index, draft) in drafts.iter().enumerate() {
            let mut segments = Vec::new();
            let mut current = draft.after;
            while let Some(before) = current {
                let range = ranges[before]
                    .clone()
                    .expect("a piece that is read has an arena range");
                segments.push(range);
                current = drafts[before].after;
            }
            segments.reverse();
            let pass = &mut passes[draft.pass];
            let first = pass.pieces.last().map_or(0, |p| p.pass_tokens.end);
            let pass_range = first..first + draft.node_tokens.len();
            let queries = trie
                .node(draft.node)
                .queries
                .iter()
                .filter(|(offset, _)| draft.node_tokens.contains(offset))
                .map(|&(offset, query)| (first + offset - draft.node_tokens.start, query))
                .collect();
            pass.pieces.push(PlannedPiece {
                node: draft.node,
                node_tokens: draft.node_tokens.clone(),
                pass_tokens: pass_range,
                segments,
                position: draft.position,
                arena: ranges[index].clone(),
                queries,
            });
        }
        Ok(Self {
            passes,
            arena_len: arena.end,
            arena_peak: peak,
        })
    }

    /// Passes that must run so that the queries `pending` marks are answered: those
    /// holding a piece with a pending query, and every pass holding a piece that one of
    /// them reads. A pass runs whole, as in a full evaluation, so answers do not depend
    /// on what was pending.
    pub fn needed(&self, pending: Option<&[bool]>) -> Vec<bool> {
        let Some(pending) = pending else {
            return vec![true; self.passes.len()];
        };
        let mut runs: Vec<bool> = self
            .passes
            .iter()
            .map(|pass| {
                pass.pieces
                    .iter()
                    .any(|p| p.queries.iter().any(|&(_, q)| pending[q]))
            })
            .collect();
        // Which pass writes each arena position last before a given pass: walk backwards,
        // marking the writers of every segment a running pass reads.
        for index in (0..self.passes.len()).rev() {
            if !runs[index] {
                continue;
            }
            for piece in &self.passes[index].pieces {
                for segment in &piece.segments {
                    if let Some(writer) = self.writer_before(index, segment) {
                        runs[writer] = true;
                    }
                }
            }
        }
        runs
    }

    /// The latest pass before `pass` that writes exactly `range` into the arena.
    fn writer_before(&self, pass: usize, range: &Range<usize>) -> Option<usize> {
        (0..pass).rev().find(|&p| {
            self.passes[p]
                .pieces
                .iter()
                .any(|piece| piece.arena.as_ref() == Some(range))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::decoder::trie::QueryAt;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};

    fn budget(tokens: usize, rows: usize) -> BatchBudget {
        BatchBudget {
            max_batch_tokens: tokens,
            max_batch_rows: rows,
            ..BatchBudget::default()
        }
    }

    /// Pairwise's shape: contexts, then first candidates, then second candidates, each
    /// prompt asking for its last position.
    fn pairwise(contexts: usize, candidates: usize) -> Vec<(Vec<u32>, Vec<QueryAt>)> {
        let mut sequences = Vec::new();
        for c in 0..contexts {
            for a in 0..candidates {
                for b in 0..candidates {
                    if a == b {
                        continue;
                    }
                    let mut tokens: Vec<u32> = (0..6).map(|t| 100 * c as u32 + t).collect();
                    tokens.extend([1000 + a as u32, 1001, 1002]);
                    tokens.extend([2000 + b as u32, 2001]);
                    let position = tokens.len() - 1;
                    let query = sequences.len();
                    sequences.push((tokens, vec![QueryAt { position, query }]));
                }
            }
        }
        sequences
    }

    #[test]
    fn pairwise_runs_in_three_levels() -> Result<()> {
        let trie = TokenTrie::build(&pairwise(2, 4))?;
        let plan = LevelPlan::new(&trie, budget(2048, 64))?;
        let depths: Vec<usize> = plan.passes.iter().map(|p| p.depth).collect();
        assert_eq!(depths, vec![1, 2, 3]);
        assert_eq!(plan.passes[0].pieces.len(), 2);
        assert_eq!(plan.passes[1].pieces.len(), 8);
        assert_eq!(plan.passes[2].pieces.len(), 24);
        // Contexts and first candidates stay until the leaves are done: 2 x 6 + 8 x 3.
        assert_eq!(plan.arena_peak, 12 + 24);
        assert_eq!(plan.arena_len, 36);
        // Every leaf answers its query at its last token.
        let queries: usize = plan.passes[2].pieces.iter().map(|p| p.queries.len()).sum();
        assert_eq!(queries, 24);
        Ok(())
    }

    /// The most arena positions a bounded plan may keep: the bound, or the longest path
    /// of kept positions (a path is kept whole while its leaves run, and a long leaf
    /// keeps its earlier pieces).
    fn arena_allowance(trie: &TokenTrie, piece_len: usize, bound: usize) -> usize {
        (1..trie.len())
            .map(|id| trie.node(id))
            .map(|node| {
                node.start + own_kept(node.tokens.len(), !node.children.is_empty(), piece_len)
            })
            .fold(bound, usize::max)
    }

    #[test]
    fn a_bounded_plan_runs_the_contexts_in_waves() -> Result<()> {
        // Four contexts of 6 tokens, each with four first candidates of 3 tokens: a
        // context's subtree keeps 6 + 4 x 3 = 18 positions while its leaves run.
        let trie = TokenTrie::build(&pairwise(4, 4))?;
        let whole = LevelPlan::new(&trie, budget(2048, 64))?;
        assert_eq!(whole.arena_peak, 4 * 18);
        assert_eq!(LevelPlan::bounded(&trie, budget(2048, 64), 4 * 18)?, whole);
        let plan = LevelPlan::bounded(&trie, budget(2048, 64), 40)?;
        check(&trie, &plan, budget(2048, 64));
        let depths: Vec<usize> = plan.passes.iter().map(|p| p.depth).collect();
        assert_eq!(depths, vec![1, 2, 3, 1, 2, 3]);
        assert_eq!(plan.arena_peak, 2 * 18);
        assert!(plan.arena_len <= 40, "{}", plan.arena_len);
        // The same nodes and queries, in twice the passes.
        let queries = |plan: &LevelPlan| -> Vec<usize> {
            let mut q: Vec<usize> = plan
                .passes
                .iter()
                .flat_map(|p| &p.pieces)
                .flat_map(|p| p.queries.iter().map(|&(_, q)| q))
                .collect();
            q.sort_unstable();
            q
        };
        assert_eq!(queries(&plan), queries(&whole));
        Ok(())
    }

    #[test]
    fn a_subtree_larger_than_the_bound_is_entered() -> Result<()> {
        // One context (6 tokens) whose subtree keeps 18: it is computed alone, then its
        // first candidates one at a time (3 of the 4 positions the bound leaves).
        let trie = TokenTrie::build(&pairwise(1, 4))?;
        let plan = LevelPlan::bounded(&trie, budget(2048, 64), 10)?;
        check(&trie, &plan, budget(2048, 64));
        let depths: Vec<usize> = plan.passes.iter().map(|p| p.depth).collect();
        assert_eq!(depths, vec![1, 2, 3, 2, 3, 2, 3, 2, 3]);
        assert_eq!(plan.arena_peak, 6 + 3);
        // A bound below the context itself: the path is the floor.
        let tight = LevelPlan::bounded(&trie, budget(2048, 64), 0)?;
        check(&trie, &tight, budget(2048, 64));
        assert_eq!(tight.arena_peak, 6 + 3);
        Ok(())
    }

    #[test]
    fn a_long_node_is_split_and_reads_its_earlier_pieces() -> Result<()> {
        let tokens: Vec<u32> = (0..10).collect();
        let trie = TokenTrie::build(&[(
            tokens,
            vec![QueryAt {
                position: 9,
                query: 0,
            }],
        )])?;
        let plan = LevelPlan::new(&trie, budget(4, 8))?;
        assert_eq!(plan.passes.len(), 3);
        let last = &plan.passes[2].pieces[0];
        assert_eq!(last.node_tokens, 8..10);
        assert_eq!(last.position, 8);
        assert_eq!(last.segments, vec![0..4, 4..8]);
        assert_eq!(last.queries, vec![(1, 0)]);
        assert_eq!(last.arena, None);
        Ok(())
    }

    #[test]
    fn only_the_passes_leading_to_pending_queries_run() -> Result<()> {
        let trie = TokenTrie::build(&pairwise(2, 3))?;
        let plan = LevelPlan::new(&trie, budget(6, 64))?;
        let mut pending = vec![false; 12];
        pending[11] = true;
        let runs = plan.needed(Some(&pending));
        // The last leaf pass, and the passes writing its context and first candidate.
        assert!(runs[plan.passes.len() - 1]);
        let ran: usize = runs.iter().filter(|&&r| r).count();
        assert!(ran < plan.passes.len(), "{runs:?}");
        for (index, pass) in plan.passes.iter().enumerate() {
            if !runs[index] {
                continue;
            }
            for piece in &pass.pieces {
                for segment in &piece.segments {
                    let writer = plan.writer_before(index, segment).expect("written");
                    assert!(runs[writer]);
                }
            }
        }
        Ok(())
    }

    fn sequences_strategy() -> impl Strategy<Value = Vec<(Vec<u32>, Vec<QueryAt>)>> {
        // Small alphabets make shared prefixes likely.
        proptest::collection::vec(proptest::collection::vec(0u32..3, 1..14), 1..12).prop_map(
            |seqs| {
                seqs.into_iter()
                    .enumerate()
                    .map(|(i, tokens)| {
                        let position = (i * 7) % tokens.len();
                        (tokens, vec![QueryAt { position, query: i }])
                    })
                    .collect()
            },
        )
    }

    /// A computed piece: its pass, its arena range and its node tokens.
    type Computed = (usize, Option<Range<usize>>, Range<usize>);

    /// The invariants every plan keeps, checked against the trie.
    fn check(trie: &TokenTrie, plan: &LevelPlan, budget: BatchBudget) {
        let mut parents = vec![None; trie.len()];
        let mut depth = vec![0usize; trie.len()];
        for id in 0..trie.len() {
            for &child in &trie.node(id).children {
                parents[child] = Some(id);
            }
        }
        for id in 1..trie.len() {
            // Trie ids are depth-first, so a parent's depth is known first.
            depth[id] = parents[id].map_or(1, |p| if p == 0 { 1 } else { depth[p] + 1 });
        }
        // (pass, arena range, node tokens) of every computed piece, by node.
        let mut done: Vec<Vec<Computed>> = vec![Vec::new(); trie.len()];
        let mut live: Vec<(Range<usize>, usize)> = Vec::new();
        for (index, pass) in plan.passes.iter().enumerate() {
            assert!(pass.tokens <= budget.max_batch_tokens);
            assert!(pass.pieces.len() <= budget.max_batch_rows);
            let mut end = 0;
            for piece in &pass.pieces {
                assert_eq!(depth[piece.node], pass.depth, "one depth per pass");
                assert_eq!(piece.pass_tokens.start, end);
                assert_eq!(piece.pass_tokens.len(), piece.node_tokens.len());
                end = piece.pass_tokens.end;
                // Segments: the ancestors' pieces root first, then the node's own.
                let mut chain = Vec::new();
                let mut ancestor = parents[piece.node].filter(|&p| p != 0);
                let mut path = Vec::new();
                while let Some(a) = ancestor {
                    path.push(a);
                    ancestor = parents[a].filter(|&p| p != 0);
                }
                for &a in path.iter().rev() {
                    assert_eq!(
                        done[a].iter().map(|d| d.2.len()).sum::<usize>(),
                        trie.node(a).tokens.len(),
                        "ancestor {a} complete before node {}",
                        piece.node
                    );
                    for (p, range, _) in &done[a] {
                        assert!(*p < index, "ancestor in an earlier pass");
                        chain.push(range.clone().expect("read pieces have ranges"));
                    }
                }
                for (p, range, tokens) in &done[piece.node] {
                    assert!(*p < index);
                    assert!(tokens.end <= piece.node_tokens.start);
                    chain.push(range.clone().expect("read pieces have ranges"));
                }
                assert_eq!(piece.segments, chain);
                let before: usize = chain.iter().map(|r| r.len()).sum();
                assert_eq!(piece.position, before);
                assert_eq!(
                    piece.position,
                    trie.node(piece.node).start + piece.node_tokens.start
                );
                // No segment read here was overwritten since it was written.
                for segment in &piece.segments {
                    assert!(live.iter().any(|(r, _)| r == segment));
                }
                for &(row, query) in &piece.queries {
                    assert!(piece.pass_tokens.contains(&row));
                    let offset = row - piece.pass_tokens.start + piece.node_tokens.start;
                    assert!(trie.node(piece.node).queries.contains(&(offset, query)));
                }
            }
            assert_eq!(end, pass.tokens);
            for piece in &pass.pieces {
                if let Some(range) = &piece.arena {
                    assert!(range.end <= plan.arena_len);
                    live.retain(|(r, _)| r.end <= range.start || r.start >= range.end);
                    live.push((range.clone(), index));
                }
                done[piece.node].push((index, piece.arena.clone(), piece.node_tokens.clone()));
            }
        }
        // Every token computed exactly once.
        for (id, pieces) in done.iter().enumerate().skip(1) {
            let mut next = 0;
            for (_, _, tokens) in pieces {
                assert_eq!(tokens.start, next);
                next = tokens.end;
            }
            assert_eq!(next, trie.node(id).tokens.len(), "node {id}");
        }
        let computed: usize = plan.passes.iter().map(|p| p.tokens).sum();
        assert_eq!(computed, trie.total_tokens());
        let queries: usize = plan
            .passes
            .iter()
            .flat_map(|p| &p.pieces)
            .map(|p| p.queries.len())
            .sum();
        let asked: usize = (0..trie.len()).map(|n| trie.node(n).queries.len()).sum();
        assert_eq!(queries, asked);
        assert!(plan.arena_peak <= plan.arena_len);
    }

    #[test]
    fn plans_keep_their_invariants_and_ignore_insertion_order() {
        let mut runner = TestRunner::new(Config {
            cases: 200,
            rng_seed: RngSeed::Fixed(38),
            ..Config::default()
        });
        let strategy = (sequences_strategy(), 1usize..8, 1usize..6, any::<u64>());
        runner
            .run(&strategy, |(sequences, tokens, rows, shuffle)| {
                let budget = budget(tokens, rows);
                let trie = TokenTrie::build(&sequences).expect("trie");
                let plan = LevelPlan::new(&trie, budget).expect("plan");
                check(&trie, &plan, budget);
                // Any arena bound: the same invariants, within the allowance.
                let bound = (shuffle % 24) as usize;
                let bounded = LevelPlan::bounded(&trie, budget, bound).expect("plan");
                check(&trie, &bounded, budget);
                let allowance = arena_allowance(&trie, tokens, bound);
                prop_assert!(bounded.arena_peak <= allowance);
                prop_assert!(
                    bounded.arena_len <= allowance,
                    "{} > {allowance}",
                    bounded.arena_len
                );
                // The same prompts in another order: the same plan, but for query order
                // inside a node.
                let mut shuffled = sequences.clone();
                let mut state = shuffle | 1;
                for i in (1..shuffled.len()).rev() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    shuffled.swap(i, (state % (i as u64 + 1)) as usize);
                }
                let other = LevelPlan::new(&TokenTrie::build(&shuffled).expect("trie"), budget)
                    .expect("plan");
                let strip = |plan: &LevelPlan| {
                    let mut plan = plan.clone();
                    for piece in plan.passes.iter_mut().flat_map(|p| p.pieces.iter_mut()) {
                        piece.queries.sort_unstable();
                    }
                    plan
                };
                prop_assert_eq!(strip(&plan), strip(&other));
                Ok(())
            })
            .expect("level plan properties");
    }
}
