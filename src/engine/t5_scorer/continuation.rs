//! Continuation log-likelihoods: the decoder runs teacher-forced over start token, answer
//! prefix and continuation in one pass per batch (rows padded on the left), and each
//! continuation token's log-probability is read at the position before it.

use anyhow::Result;
use candle_core::{DType, Tensor};

use super::{plan_batches, Usage};
use crate::arch::t5::T5Model;
use crate::engine::request::ContinuationResult;

/// Positions whose full-vocabulary log-probabilities are computed at once (bounds the
/// (positions x vocabulary) logits matrix).
const POSITIONS_PER_HEAD_CALL: usize = 256;

/// One continuation request in token ids.
#[derive(Debug, Clone)]
pub(super) struct PreparedContinuation {
    pub encoder: Vec<u32>,
    pub prefix: Vec<u32>,
    /// The continuation's tokens (no eos).
    pub tokens: Vec<u32>,
}

/// Score every request; results in request order.
pub(super) fn score_all(
    model: &T5Model,
    prepared: &[PreparedContinuation],
    (max_batch_tokens, max_padding): (usize, f64),
    usage: &mut Usage,
) -> Result<Vec<ContinuationResult>> {
    let mut results: Vec<ContinuationResult> = prepared
        .iter()
        .map(|p| ContinuationResult {
            tokens: p.tokens.clone(),
            token_logprobs: Vec::new(),
        })
        .collect();
    // An empty continuation needs no model call.
    let scored: Vec<usize> = (0..prepared.len())
        .filter(|&i| !prepared[i].tokens.is_empty())
        .collect();
    let lengths: Vec<usize> = scored
        .iter()
        .map(|&i| {
            prepared[i].encoder.len() + 1 + prepared[i].prefix.len() + prepared[i].tokens.len()
        })
        .collect();
    for batch in plan_batches(&lengths, max_batch_tokens, max_padding) {
        let indices: Vec<usize> = batch.iter().map(|&b| scored[b]).collect();
        let items: Vec<&PreparedContinuation> = indices.iter().map(|&i| &prepared[i]).collect();
        let logprobs = score_batch(model, &items, usage)?;
        for (index, logprobs) in indices.into_iter().zip(logprobs) {
            results[index].token_logprobs = logprobs;
        }
    }
    Ok(results)
}

fn score_batch(
    model: &T5Model,
    items: &[&PreparedContinuation],
    usage: &mut Usage,
) -> Result<Vec<Vec<f64>>> {
    let encoder_inputs: Vec<Vec<u32>> = items.iter().map(|item| item.encoder.clone()).collect();
    usage.add_encoder_batch(&encoder_inputs);
    let encoder = model.encode(&encoder_inputs)?;
    let mut cache = model.start_decoder(&encoder)?;
    let start = model.config().decoder_start_token_id;
    let inputs: Vec<Vec<u32>> = items
        .iter()
        .map(|item| {
            let mut input = vec![start];
            input.extend(&item.prefix);
            input.extend(&item.tokens[..item.tokens.len() - 1]);
            input
        })
        .collect();
    usage.add_decoder_batch(&inputs);
    let hidden = model.decode_left_padded(&inputs, &mut cache)?;
    let (rows, width, d_model) = hidden.dims3()?;
    let flat = hidden.reshape((rows * width, d_model))?;

    // Row r's input is right-aligned: its position p sits at r*width + (width - len) + p,
    // and the token after input position p is predicted there.
    let mut positions = Vec::new();
    let mut targets = Vec::new();
    for (row, (item, input)) in items.iter().zip(&inputs).enumerate() {
        let first = row * width + (width - input.len()) + item.prefix.len();
        for (j, &token) in item.tokens.iter().enumerate() {
            positions.push((first + j) as u32);
            targets.push(token);
        }
    }
    let mut logprobs: Vec<f32> = Vec::with_capacity(targets.len());
    for (chunk, chunk_targets) in positions
        .chunks(POSITIONS_PER_HEAD_CALL)
        .zip(targets.chunks(POSITIONS_PER_HEAD_CALL))
    {
        let index = Tensor::from_slice(chunk, chunk.len(), flat.device())?;
        let at = flat.index_select(&index, 0)?;
        let values = model.target_logprobs(&at, chunk_targets)?;
        logprobs.extend(values.to_dtype(DType::F32)?.to_vec1::<f32>()?);
    }
    let mut rest = logprobs.as_slice();
    Ok(items
        .iter()
        .map(|item| {
            let (mine, others) = rest.split_at(item.tokens.len());
            rest = others;
            mine.iter().map(|&lp| lp as f64).collect()
        })
        .collect())
}
