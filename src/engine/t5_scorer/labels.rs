//! Label log-probabilities for a batch of prompts by teacher forcing, walking each
//! prompt's label sequences as a tree: the decoder runs once over the shared prefix
//! (start token + answer prefix), then one step per tree level for the label tokens that
//! more tokens follow, forking the cache rows where labels branch. Labels " A"/" B" cost
//! no decoder step beyond the prefix; "Summary A"/"Summary B" share the "Summary" step.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, Result};
use candle_core::{DType, Tensor};

use super::Usage;
use crate::arch::t5::T5Model;

/// One label request in token ids.
#[derive(Debug, Clone)]
pub(super) struct PreparedLabels {
    /// Encoder input, eos included.
    pub encoder: Vec<u32>,
    /// Decoder tokens after the start token (the answer prefix).
    pub prefix: Vec<u32>,
    /// Label token sequences, none empty.
    pub labels: Vec<Vec<u32>>,
}

/// Hidden states at the last position of each row: (rows, len, d) -> (rows, d).
fn last_position(hidden: &Tensor) -> Result<Tensor> {
    let len = hidden.dim(1)?;
    Ok(hidden.narrow(1, len - 1, 1)?.squeeze(1)?)
}

/// The distinct tokens that follow `path` in `labels`.
fn next_tokens(labels: &[Vec<u32>], path: &[u32]) -> BTreeSet<u32> {
    labels
        .iter()
        .filter(|label| label.len() > path.len() && label.starts_with(path))
        .map(|label| label[path.len()])
        .collect()
}

/// `log P(label | prompt)` for every label of every item, in order.
pub(super) fn score_batch(
    model: &T5Model,
    items: &[&PreparedLabels],
    usage: &mut Usage,
) -> Result<Vec<Vec<f64>>> {
    let encoder_inputs: Vec<Vec<u32>> = items.iter().map(|item| item.encoder.clone()).collect();
    usage.add_encoder_batch(&encoder_inputs);
    let encoder = model.encode(&encoder_inputs)?;
    let mut cache = model.start_decoder(&encoder)?;
    let start = model.config().decoder_start_token_id;
    let prefixes: Vec<Vec<u32>> = items
        .iter()
        .map(|item| {
            std::iter::once(start)
                .chain(item.prefix.iter().copied())
                .collect()
        })
        .collect();
    usage.add_decoder_batch(&prefixes);
    let mut last = last_position(&model.decode_left_padded(&prefixes, &mut cache)?)?;

    // (item, label tokens so far) of each cache row, and log P(last token | earlier).
    let mut contexts: Vec<(usize, Vec<u32>)> = (0..items.len()).map(|i| (i, vec![])).collect();
    let mut step_logprobs: HashMap<(usize, Vec<u32>), f64> = HashMap::new();
    loop {
        let needed: Vec<BTreeSet<u32>> = contexts
            .iter()
            .map(|(item, path)| next_tokens(&items[*item].labels, path))
            .collect();
        let columns: Vec<u32> = needed
            .iter()
            .flatten()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if columns.is_empty() {
            break;
        }
        let column_of: HashMap<u32, usize> =
            columns.iter().enumerate().map(|(c, &t)| (t, c)).collect();
        let logprobs: Vec<Vec<f32>> = model
            .token_logprobs(&last, &columns)?
            .to_dtype(DType::F32)?
            .to_vec2()?;

        let mut children: Vec<(usize, Vec<u32>)> = Vec::new();
        let mut parent_rows: Vec<u32> = Vec::new();
        for (row, ((item, path), tokens)) in contexts.iter().zip(&needed).enumerate() {
            for &token in tokens {
                let mut child = path.clone();
                child.push(token);
                step_logprobs.insert(
                    (*item, child.clone()),
                    logprobs[row][column_of[&token]] as f64,
                );
                if !next_tokens(&items[*item].labels, &child).is_empty() {
                    children.push((*item, child));
                    parent_rows.push(row as u32);
                }
            }
        }
        if children.is_empty() {
            break;
        }
        cache = cache.select_rows(&parent_rows)?;
        let inputs: Vec<Vec<u32>> = children
            .iter()
            .map(|(_, path)| path[path.len() - 1..].to_vec())
            .collect();
        usage.add_decoder_batch(&inputs);
        last = last_position(&model.decode_left_padded(&inputs, &mut cache)?)?;
        contexts = children;
    }

    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            item.labels
                .iter()
                .map(|label| {
                    (1..=label.len())
                        .map(|end| {
                            step_logprobs
                                .get(&(index, label[..end].to_vec()))
                                .copied()
                                .context("label step was not scored")
                        })
                        .sum::<Result<f64>>()
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_tokens_are_the_distinct_continuations_of_a_path() {
        let labels = vec![vec![5, 1], vec![5, 2], vec![7], vec![5, 1, 9]];
        assert_eq!(next_tokens(&labels, &[]), BTreeSet::from([5, 7]));
        assert_eq!(next_tokens(&labels, &[5]), BTreeSet::from([1, 2]));
        assert_eq!(next_tokens(&labels, &[5, 1]), BTreeSet::from([9]));
        assert!(next_tokens(&labels, &[7]).is_empty());
    }
}
