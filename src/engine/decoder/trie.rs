//! A radix trie over token sequences, for evaluating many prompts that share prefixes.
//!
//! Every prompt (plus its label tokens) is inserted as a token sequence with *queries*:
//! positions whose next-token distribution someone asked for. The trie is built on token
//! ids, so shared prefixes are found exactly whatever the text looked like: no assumption
//! about where text segments start or how they tokenise. Chains of single children are
//! merged, so each node holds a run of tokens that is computed once for all sequences
//! through it.

use std::collections::BTreeMap;

/// One position whose next token is scored: the hidden state after `tokens[..=position]`
/// of the sequence it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryAt {
    /// Index into the sequence's tokens (the query reads the state after this token).
    pub position: usize,
    /// Caller's identifier for the query.
    pub query: usize,
}

/// A node: a run of tokens, its children, and the queries that read its positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrieNode {
    /// The node's own tokens (not the path from the root).
    pub tokens: Vec<u32>,
    /// Number of tokens on the path before this node (its first position).
    pub start: usize,
    /// Children, in ascending order of their first token.
    pub children: Vec<usize>,
    /// `(offset within tokens, query)` pairs, in insertion order.
    pub queries: Vec<(usize, usize)>,
}

/// The trie; node 0 is the empty root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenTrie {
    nodes: Vec<TrieNode>,
}

/// Construction-time node: one token each, children keyed by token.
#[derive(Default)]
struct RawNode {
    token: u32,
    children: BTreeMap<u32, usize>,
    queries: Vec<usize>,
    /// A node must end after this token (see [`TokenTrie::build_with_cuts`]).
    cut_after: bool,
}

impl TokenTrie {
    /// Build the trie of `sequences`, each with its queries. A query's position must lie
    /// inside its sequence.
    pub fn build(sequences: &[(Vec<u32>, Vec<QueryAt>)]) -> anyhow::Result<Self> {
        Self::build_with_cuts(sequences, &[])
    }

    /// [`Self::build`], with a node ending after the first `cuts[i]` tokens of sequence
    /// `i` (0 or missing: no cut), so that the trie's nodes never straddle that depth:
    /// e.g. where a cached prefix ends.
    pub fn build_with_cuts(
        sequences: &[(Vec<u32>, Vec<QueryAt>)],
        cuts: &[usize],
    ) -> anyhow::Result<Self> {
        let mut raw = vec![RawNode::default()];
        for (index, (tokens, queries)) in sequences.iter().enumerate() {
            let mut path = Vec::with_capacity(tokens.len());
            let mut current = 0usize;
            for &token in tokens {
                current = match raw[current].children.get(&token) {
                    Some(&child) => child,
                    None => {
                        raw.push(RawNode {
                            token,
                            ..RawNode::default()
                        });
                        let child = raw.len() - 1;
                        raw[current].children.insert(token, child);
                        child
                    }
                };
                path.push(current);
            }
            if let Some(&cut) = cuts.get(index) {
                if cut > 0 {
                    let node = path.get(cut - 1).ok_or_else(|| {
                        anyhow::anyhow!(
                            "cut after {cut} tokens is outside sequence {index} of {} tokens",
                            tokens.len()
                        )
                    })?;
                    raw[*node].cut_after = true;
                }
            }
            for query in queries {
                let node = path.get(query.position).ok_or_else(|| {
                    anyhow::anyhow!(
                        "query at position {} is outside sequence {index} of {} tokens",
                        query.position,
                        tokens.len()
                    )
                })?;
                raw[*node].queries.push(query.query);
            }
        }
        let mut trie = TokenTrie {
            nodes: vec![TrieNode {
                tokens: vec![],
                start: 0,
                children: vec![],
                queries: vec![],
            }],
        };
        let root_children: Vec<usize> = raw[0].children.values().copied().collect();
        let mut stack: Vec<(usize, usize, usize)> = root_children
            .into_iter()
            .rev()
            .map(|child| (child, 0, 0))
            .collect();
        while let Some((first_raw, parent, start)) = stack.pop() {
            // Follow the chain of single children from `first_raw`.
            let mut tokens = Vec::new();
            let mut queries = Vec::new();
            let mut current = first_raw;
            loop {
                let node = &raw[current];
                queries.extend(node.queries.iter().map(|&q| (tokens.len(), q)));
                tokens.push(node.token);
                if node.children.len() == 1 && !node.cut_after {
                    current = *node.children.values().next().expect("one child");
                } else {
                    break;
                }
            }
            let id = trie.nodes.len();
            let length = tokens.len();
            trie.nodes.push(TrieNode {
                tokens,
                start,
                children: vec![],
                queries,
            });
            trie.nodes[parent].children.push(id);
            for &child in raw[current].children.values().rev() {
                stack.push((child, id, start + length));
            }
        }
        Ok(trie)
    }

    pub fn root(&self) -> usize {
        0
    }

    pub fn node(&self, id: usize) -> &TrieNode {
        &self.nodes[id]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// Tokens the trie holds: the tokens a tree evaluation computes.
    pub fn total_tokens(&self) -> usize {
        self.nodes.iter().map(|n| n.tokens.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(position: usize, query: usize) -> QueryAt {
        QueryAt { position, query }
    }

    #[test]
    fn shared_prefixes_become_one_node() -> anyhow::Result<()> {
        let trie = TokenTrie::build(&[
            (vec![1, 2, 3, 4], vec![q(3, 0)]),
            (vec![1, 2, 3, 5, 6], vec![q(4, 1)]),
            (vec![1, 2, 7], vec![q(2, 2), q(1, 3)]),
        ])?;
        let root = trie.node(trie.root());
        assert_eq!(root.children.len(), 1);
        let shared = trie.node(root.children[0]);
        assert_eq!((shared.tokens.clone(), shared.start), (vec![1, 2], 0));
        assert_eq!(shared.queries, vec![(1, 3)]);
        let kids: Vec<Vec<u32>> = shared
            .children
            .iter()
            .map(|&c| trie.node(c).tokens.clone())
            .collect();
        assert_eq!(kids, vec![vec![3], vec![7]]);
        let three = trie.node(shared.children[0]);
        assert_eq!(three.start, 2);
        type Leaf = (Vec<u32>, usize, Vec<(usize, usize)>);
        let leaves: Vec<Leaf> = three
            .children
            .iter()
            .map(|&c| {
                let n = trie.node(c);
                (n.tokens.clone(), n.start, n.queries.clone())
            })
            .collect();
        assert_eq!(
            leaves,
            vec![(vec![4], 3, vec![(0, 0)]), (vec![5, 6], 3, vec![(1, 1)])]
        );
        assert_eq!(trie.total_tokens(), 2 + 1 + 1 + 1 + 2);
        Ok(())
    }

    #[test]
    fn identical_sequences_share_every_node_and_keep_all_queries() -> anyhow::Result<()> {
        let trie = TokenTrie::build(&[
            (vec![9, 8, 7], vec![q(2, 0)]),
            (vec![9, 8, 7], vec![q(2, 1)]),
        ])?;
        assert_eq!(trie.len(), 2);
        assert_eq!(trie.node(1).queries, vec![(2, 0), (2, 1)]);
        Ok(())
    }

    #[test]
    fn a_sequence_that_is_a_prefix_of_another_reads_inside_a_node() -> anyhow::Result<()> {
        let trie =
            TokenTrie::build(&[(vec![1, 2, 3], vec![q(2, 0)]), (vec![1, 2], vec![q(1, 1)])])?;
        assert_eq!(trie.len(), 2);
        assert_eq!(trie.node(1).queries, vec![(1, 1), (2, 0)]);
        Ok(())
    }

    #[test]
    fn cuts_end_nodes_where_asked() -> anyhow::Result<()> {
        let sequences = [
            (vec![1, 2, 3, 4], vec![q(3, 0)]),
            (vec![1, 2, 3, 5], vec![]),
        ];
        let trie = TokenTrie::build_with_cuts(&sequences, &[2, 0])?;
        let first = trie.node(trie.node(trie.root()).children[0]);
        assert_eq!(first.tokens, vec![1, 2]);
        let middle = trie.node(first.children[0]);
        assert_eq!((middle.tokens.clone(), middle.start), (vec![3], 2));
        assert_eq!(middle.children.len(), 2);
        // A cut at the end of a sequence, or none, changes nothing.
        assert_eq!(
            TokenTrie::build_with_cuts(&sequences, &[4, 4])?,
            TokenTrie::build(&sequences)?
        );
        assert!(TokenTrie::build_with_cuts(&sequences, &[5]).is_err());
        Ok(())
    }

    #[test]
    fn a_query_outside_its_sequence_is_an_error() {
        assert!(TokenTrie::build(&[(vec![1, 2], vec![q(2, 0)])]).is_err());
    }

    #[test]
    fn disjoint_sequences_share_nothing() -> anyhow::Result<()> {
        let trie = TokenTrie::build(&[(vec![1, 2], vec![]), (vec![3, 4], vec![])])?;
        assert_eq!(trie.node(0).children.len(), 2);
        assert_eq!(trie.total_tokens(), 4);
        Ok(())
    }
}
