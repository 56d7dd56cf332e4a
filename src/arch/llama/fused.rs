//! Fused CPU kernels: the decoders' masked attention softmax and the output head's
//! log-sum-exp, each one pass with a vectorised exponential instead of several
//! full-size temporaries. Other devices use candle's own operations.
//!
//! Masked softmax.
//! Attention scores arrive as `(batch, kv_heads, group, queries, keys)` where the keys are
//! a shared prefix of `prefix_len` positions followed by the batch's own (right-padded)
//! positions. Row `b`'s query `t` may see the whole prefix and its own keys up to `t`
//! (with a sliding window `w`, only the last `w` of those: keys less than `w` positions
//! behind it); queries past a row's length are padding and get all-zero weights. Scores
//! may be soft-capped (`c * tanh(s / c)`, Gemma 2) after scaling and before the mask. Doing the scaling,
//! the causal/padding mask and the softmax in one pass, with a vectorised exponential,
//! avoids three full-size temporaries per layer (scale, mask, softmax), which dominated
//! the cost of attending over long prefixes. Other devices use candle's own operations.

use anyhow::{bail, Result};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

/// What the attention softmax applies besides the causal and padding mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionMask {
    /// Shared prefix positions before the rows' own.
    pub prefix_len: usize,
    /// Scores are multiplied by this first.
    pub scale: f64,
    /// Keys at least this many positions behind a query are hidden from it.
    pub window: Option<usize>,
    /// Scaled scores pass through `c * tanh(s / c)`.
    pub softcap: Option<f64>,
}

/// `softmax(scale * scores)` under the causal and padding mask described above.
pub fn masked_softmax(scores: &Tensor, lengths: &[usize], mask: &AttentionMask) -> Result<Tensor> {
    let prefix_len = mask.prefix_len;
    let (batch, _, _, queries, keys) = scores.dims5()?;
    if batch != lengths.len() || keys != prefix_len + queries {
        bail!(
            "attention scores {:?} do not match {} rows after a {prefix_len}-position prefix",
            scores.dims(),
            lengths.len()
        );
    }
    if scores.device().is_cpu() && scores.dtype() == DType::F32 {
        let op = CausalSoftmax {
            lengths: lengths.to_vec(),
            prefix_len,
            scale: mask.scale as f32,
            window: mask.window,
            softcap: mask.softcap.map(|c| c as f32),
        };
        return Ok(scores.contiguous()?.apply_op1_no_bwd(&op)?);
    }
    let additive = additive_mask(lengths, prefix_len, queries, mask.window, scores.device())?;
    masked_softmax_with(scores, &additive, mask)
}

/// [`masked_softmax`] with candle's operations and the mask already built by
/// [`additive_mask`] (on a GPU, built once and reused by every layer).
pub fn masked_softmax_with(
    scores: &Tensor,
    additive: &Tensor,
    mask: &AttentionMask,
) -> Result<Tensor> {
    let mut scaled = (scores * mask.scale)?;
    if let Some(cap) = mask.softcap {
        scaled = ((scaled / cap)?.tanh()? * cap)?;
    }
    let masked = scaled.broadcast_add(additive)?;
    Ok(candle_nn::ops::softmax_last_dim(&masked)?)
}

/// The mask as an additive tensor `(B, 1, 1, T, P + T)`: 0 where a query may look,
/// -inf elsewhere (padded queries see key 0 only, to stay finite; their output is unused).
pub fn additive_mask(
    lengths: &[usize],
    prefix_len: usize,
    queries: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Tensor> {
    let keys = prefix_len + queries;
    let mut mask = vec![0f32; lengths.len() * queries * keys];
    for (row, &length) in lengths.iter().enumerate() {
        for query in 0..queries {
            let base = (row * queries + query) * keys;
            let (first, visible) = visible_keys(query, length, prefix_len, window);
            let (first, visible) = if visible == 0 {
                (0, 1)
            } else {
                (first, visible)
            };
            for (key, value) in mask[base..base + keys].iter_mut().enumerate() {
                if key < first || key >= visible {
                    *value = f32::NEG_INFINITY;
                }
            }
        }
    }
    Ok(Tensor::from_vec(
        mask,
        (lengths.len(), 1, 1, queries, keys),
        device,
    )?)
}

/// `log sum_j exp(x[i, j])` of every row of a 2-D tensor: `(n, v)` -> `(n)`.
pub fn log_sum_exp_rows(x: &Tensor) -> Result<Tensor> {
    let (rows, _) = x.dims2()?;
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        return Ok(x
            .contiguous()?
            .apply_op1_no_bwd(&LogSumExp)?
            .reshape(rows)?);
    }
    let max = x.max_keepdim(1)?;
    let sum = x.broadcast_sub(&max)?.exp()?.sum_keepdim(1)?;
    Ok((sum.log()? + max)?.squeeze(1)?)
}

struct LogSumExp;

impl CustomOp1 for LogSumExp {
    fn name(&self) -> &'static str {
        "log-sum-exp"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("log-sum-exp expects f32 values");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("log-sum-exp expects a contiguous tensor");
        };
        let (rows, columns) = layout.shape().dims2()?;
        let values = &data[start..end];
        let out: Vec<f32> = values
            .par_chunks(columns)
            .map(|row| {
                let (max, sum) = max_and_exp_sum(row);
                max + sum.ln()
            })
            .collect();
        Ok((CpuStorage::F32(out), Shape::from(rows)))
    }
}

/// The maximum of `row` and `sum exp(x - max)`, choosing the widest instructions.
fn max_and_exp_sum(row: &[f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { max_and_exp_sum_avx2(row) };
        }
    }
    max_and_exp_sum_portable(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_and_exp_sum_avx2(row: &[f32]) -> (f32, f32) {
    max_and_exp_sum_portable(row)
}

#[inline(always)]
fn max_and_exp_sum_portable(row: &[f32]) -> (f32, f32) {
    let max = lane_max(row);
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            sums[lane] += exp_non_positive(chunk[lane] - max);
        }
    }
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&x| exp_non_positive(x - max))
        .sum();
    (max, sums.iter().sum::<f32>() + tail)
}

/// Independent lanes for reductions, so that the compiler can keep them in one vector
/// register (a single running max or sum would force sequential order).
const LANES: usize = 8;

#[inline(always)]
fn lane_max(values: &[f32]) -> f32 {
    let mut maxes = [f32::NEG_INFINITY; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            maxes[lane] = if chunk[lane] > maxes[lane] {
                chunk[lane]
            } else {
                maxes[lane]
            };
        }
    }
    let mut max = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    for lane in maxes {
        max = if lane > max { lane } else { max };
    }
    max
}

/// The keys `first..end` query `t` of a row of `length` tokens may see (`(0, 0)`: a
/// padded query).
fn visible_keys(
    t: usize,
    length: usize,
    prefix_len: usize,
    window: Option<usize>,
) -> (usize, usize) {
    if t < length {
        let end = prefix_len + t + 1;
        (window.map_or(0, |w| end.saturating_sub(w)), end)
    } else {
        (0, 0)
    }
}

struct CausalSoftmax {
    lengths: Vec<usize>,
    prefix_len: usize,
    scale: f32,
    window: Option<usize>,
    softcap: Option<f32>,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("causal-softmax expects f32 scores");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("causal-softmax expects contiguous scores");
        };
        let input = &data[start..end];
        let dims = layout.dims();
        let (queries, keys) = (dims[3], dims[4]);
        let per_row = dims[1] * dims[2] * queries;
        let mut output = vec![0f32; input.len()];
        output
            .par_chunks_mut(keys)
            .zip(input.par_chunks(keys))
            .enumerate()
            .for_each(|(index, (out, scores))| {
                let row = index / per_row;
                let t = index % queries;
                let (first, end) = visible_keys(t, self.lengths[row], self.prefix_len, self.window);
                if end == 0 {
                    return;
                }
                let (scores, out) = (&scores[first..end], &mut out[first..end]);
                match self.softcap {
                    None => softmax_into(scores, out, self.scale),
                    Some(cap) => {
                        let capped: Vec<f32> = scores
                            .iter()
                            .map(|&x| cap * ((x * self.scale) / cap).tanh())
                            .collect();
                        softmax_into(&capped, out, 1.0);
                    }
                }
            });
        Ok((CpuStorage::F32(output), layout.shape().clone()))
    }
}

/// `out = softmax(scale * scores)`, choosing the widest instructions the CPU has.
fn softmax_into(scores: &[f32], out: &mut [f32], scale: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { softmax_avx2(scores, out, scale) };
            return;
        }
    }
    softmax_portable(scores, out, scale);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(scores: &[f32], out: &mut [f32], scale: f32) {
    softmax_portable(scores, out, scale)
}

#[inline(always)]
fn softmax_portable(scores: &[f32], out: &mut [f32], scale: f32) {
    let max = lane_max(scores);
    let shift = max * scale;
    for (o, &x) in out.iter_mut().zip(scores) {
        *o = exp_non_positive(x * scale - shift);
    }
    let mut sums = [0f32; LANES];
    let mut chunks = out.chunks_exact(LANES);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            sums[lane] += chunk[lane];
        }
    }
    let sum: f32 = sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    let inverse = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inverse;
    }
}

/// `exp(x)` for `x <= 0`, branch-free so that loops over it vectorise: range reduction
/// to `x = n ln2 + r`, `|r| <= ln2 / 2`, then a degree-7 polynomial for `exp(r)`
/// (coefficients of the classic single-precision minimax fit), scaled by `2^n` through
/// the exponent bits. Relative error about 1e-7; inputs below -87 give ~0.
#[inline(always)]
fn exp_non_positive(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.max(-87.0);
    let n = (x * LOG2_E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let bits = ((n as i32 + 127) as u32) << 23;
    e * f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_exponential_is_accurate() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            let exact = (x as f64).exp();
            let ours = exp_non_positive(x) as f64;
            worst = worst.max(((ours - exact) / exact).abs());
            x += 0.0137;
        }
        assert!(worst < 3e-7, "largest relative error {worst}");
        assert_eq!(exp_non_positive(0.0), 1.0);
        assert!(exp_non_positive(-1000.0) < 1e-37);
    }

    /// The fused CPU kernel equals scaling, masking and softmax done with plain tensors.
    #[test]
    fn fused_kernel_matches_the_tensor_formulation() -> Result<()> {
        let device = Device::Cpu;
        let (batch, heads, group, queries, prefix) = (3, 2, 2, 5, 4);
        let keys = prefix + queries;
        let n = batch * heads * group * queries * keys;
        let data: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 23) as f32 * 0.37 - 4.0)
            .collect();
        let scores = Tensor::from_vec(data, (batch, heads, group, queries, keys), &device)?;
        let lengths = [5, 2, 3];
        for (window, softcap) in [(None, None), (Some(3), None), (Some(6), Some(0.5))] {
            let mask = AttentionMask {
                prefix_len: prefix,
                scale: 0.125,
                window,
                softcap,
            };
            let fused = masked_softmax(&scores, &lengths, &mask)?;
            let additive = additive_mask(&lengths, prefix, queries, window, &device)?;
            let mut scaled = (&scores * 0.125)?;
            if let Some(cap) = softcap {
                scaled = ((scaled / cap)?.tanh()? * cap)?;
            }
            let plain = candle_nn::ops::softmax_last_dim(&scaled.broadcast_add(&additive)?)?;
            let fused: Vec<f32> = fused.flatten_all()?.to_vec1()?;
            let plain: Vec<f32> = plain.flatten_all()?.to_vec1()?;
            for (index, (a, b)) in fused.iter().zip(&plain).enumerate() {
                let t = (index / keys) % queries;
                let key = index % keys;
                let row = index / (heads * group * queries * keys);
                if t < lengths[row] {
                    assert!((a - b).abs() < 1e-6, "element {index}: {a} vs {b}");
                    if let Some(w) = window {
                        if prefix + t >= key + w {
                            assert_eq!(*a, 0.0, "key {key} is outside query {t}'s window");
                        }
                    }
                } else {
                    assert_eq!(*a, 0.0, "padded query {index} must get zero weights");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn log_sum_exp_matches_the_tensor_formulation() -> Result<()> {
        let device = Device::Cpu;
        let data: Vec<f32> = (0..3 * 1001)
            .map(|i| ((i * 37) % 101) as f32 * 0.3 - 15.0)
            .collect();
        let x = Tensor::from_vec(data, (3, 1001), &device)?;
        let fused: Vec<f32> = log_sum_exp_rows(&x)?.to_vec1()?;
        let max = x.max_keepdim(1)?;
        let plain = (x.broadcast_sub(&max)?.exp()?.sum_keepdim(1)?.log()? + max)?;
        let plain: Vec<f32> = plain.squeeze(1)?.to_vec1()?;
        for (a, b) in fused.iter().zip(&plain) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        Ok(())
    }

    #[test]
    fn mismatched_shapes_are_refused() -> Result<()> {
        let scores = Tensor::zeros((2, 1, 1, 3, 5), DType::F32, &Device::Cpu)?;
        let mask = |prefix_len| AttentionMask {
            prefix_len,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        assert!(masked_softmax(&scores, &[3], &mask(2)).is_err());
        assert!(masked_softmax(&scores, &[3, 3], &mask(1)).is_err());
        Ok(())
    }
}
