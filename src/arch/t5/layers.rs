//! The building blocks of a T5 stack: bias-free linear maps (the shared [`Linear`]), the
//! RMS layer norm, the feed-forward block, multi-head attention without score scaling,
//! and the bucketed relative position bias.

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;

use super::config::{Activation, FeedForwardKind, T5Config};
use crate::arch::linear::Linear;

/// Added to the scores of keys a query must not see. Finite, so that a query row whose
/// keys are all hidden (a padding row) gives a harmless uniform average instead of NaN;
/// large enough that `exp` of it underflows to exactly zero next to any visible key.
pub const MASKED: f32 = -1e30;

/// A bias-free linear map (T5 has no biases) read from `<name>.weight`, as the shared
/// [`Linear`] every architecture uses.
fn load_linear(vb: &VarBuilder, name: &str, in_dim: usize, out_dim: usize) -> Result<Linear> {
    let weight = vb
        .get((out_dim, in_dim), &format!("{name}.weight"))
        .with_context(|| format!("weight {}", vb.prefix_for(name)))?;
    Linear::dense(weight, None).with_context(|| format!("weight {}", vb.prefix_for(name)))
}

/// A prefix-aware name, for error messages.
trait PrefixFor {
    fn prefix_for(&self, name: &str) -> String;
}

impl PrefixFor for VarBuilder<'_> {
    fn prefix_for(&self, name: &str) -> String {
        let prefix = self.prefix();
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        }
    }
}

/// T5's layer norm: scale by the root mean square, no centring, no bias.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    epsilon: f32,
}

impl RmsNorm {
    pub fn load(vb: &VarBuilder, name: &str, config: &T5Config) -> Result<Self> {
        let weight = vb
            .get(config.d_model, &format!("{name}.weight"))
            .with_context(|| format!("weight {}", vb.prefix_for(name)))?;
        Ok(Self {
            weight,
            epsilon: config.layer_norm_epsilon as f32,
        })
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm(
            &xs.contiguous()?,
            &self.weight,
            self.epsilon,
        )?)
    }
}

fn activate(activation: Activation, xs: &Tensor) -> Result<Tensor> {
    Ok(match activation {
        Activation::Relu => xs.relu()?,
        Activation::GeluTanh => xs.gelu()?,
        Activation::GeluErf => xs.gelu_erf()?,
        Activation::Silu => xs.silu()?,
    })
}

/// The feed-forward block: `wo(act(wi x))` or, gated, `wo(act(wi_0 x) * wi_1 x)`.
#[derive(Debug, Clone)]
pub struct FeedForward {
    input: Linear,
    gate: Option<Linear>,
    output: Linear,
    activation: Activation,
}

impl FeedForward {
    /// Load from `...DenseReluDense` (the name T5 keeps whatever the activation).
    pub fn load(vb: &VarBuilder, kind: FeedForwardKind, config: &T5Config) -> Result<Self> {
        let (d, f) = (config.d_model, config.d_ff);
        let (input, gate) = if kind.gated {
            (
                load_linear(vb, "wi_0", d, f)?,
                Some(load_linear(vb, "wi_1", d, f)?),
            )
        } else {
            (load_linear(vb, "wi", d, f)?, None)
        };
        Ok(Self {
            input,
            gate,
            output: load_linear(vb, "wo", f, d)?,
            activation: kind.activation,
        })
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let mut hidden = activate(self.activation, &self.input.forward(xs)?)?;
        if let Some(gate) = &self.gate {
            hidden = (hidden * gate.forward(xs)?)?;
        }
        self.output.forward(&hidden)
    }
}

/// Multi-head attention as T5 does it: no 1/sqrt(d) scaling (folded into the weights
/// at training), position information only through an additive bias.
#[derive(Debug, Clone)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    num_heads: usize,
    d_kv: usize,
}

impl Attention {
    pub fn load(vb: &VarBuilder, config: &T5Config) -> Result<Self> {
        let (d, inner) = (config.d_model, config.inner_dim());
        Ok(Self {
            q: load_linear(vb, "q", d, inner)?,
            k: load_linear(vb, "k", d, inner)?,
            v: load_linear(vb, "v", d, inner)?,
            o: load_linear(vb, "o", inner, d)?,
            num_heads: config.num_heads,
            d_kv: config.d_kv,
        })
    }

    /// (batch, len, d_model) -> (batch, heads, len, d_kv), contiguous.
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (batch, len, _) = xs.dims3()?;
        Ok(xs
            .reshape((batch, len, self.num_heads, self.d_kv))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    /// Keys and values of `xs` (batch, len, d_model), split into heads.
    pub fn keys_values(&self, xs: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((
            self.split_heads(&self.k.forward(xs)?)?,
            self.split_heads(&self.v.forward(xs)?)?,
        ))
    }

    /// Queries `xs` (batch, q_len, d_model) against `keys`/`values` (batch, heads,
    /// k_len, d_kv); `bias` broadcasts to (batch, heads, q_len, k_len).
    pub fn attend(
        &self,
        xs: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor> {
        let (batch, q_len, _) = xs.dims3()?;
        let queries = self.split_heads(&self.q.forward(xs)?)?;
        let scores = queries.matmul(&keys.t()?)?.broadcast_add(bias)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let mixed = weights.matmul(values)?.transpose(1, 2)?.reshape((
            batch,
            q_len,
            self.num_heads * self.d_kv,
        ))?;
        self.o.forward(&mixed)
    }
}

/// The bucket of a relative position `memory - query`, as Mesh TensorFlow defines it
/// (and transformers' `_relative_position_bucket`): exact buckets for small distances,
/// logarithmically wider ones up to `max_distance`, one last bucket beyond. In
/// bidirectional mode half of the buckets are for keys after the query; in
/// unidirectional mode keys after the query all fall in bucket 0 (they are masked).
pub fn relative_position_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut buckets = num_buckets;
    let mut offset = 0;
    let distance = if bidirectional {
        buckets /= 2;
        if relative_position > 0 {
            offset = buckets;
        }
        relative_position.unsigned_abs() as usize
    } else {
        (-relative_position.min(0)) as usize
    };
    let max_exact = buckets / 2;
    if distance < max_exact {
        return offset + distance;
    }
    // In f32 like the reference, so that bucket edges round the same way.
    let ratio = (distance as f32 / max_exact as f32).ln()
        / ((max_distance as f64 / max_exact as f64).ln() as f32);
    let large = max_exact + (ratio * (buckets - max_exact) as f32) as usize;
    offset + large.min(buckets - 1)
}

/// The learned position-bias table of a stack (held by its first layer, shared by all).
#[derive(Debug, Clone)]
pub struct RelativeBias {
    /// (num_buckets, num_heads)
    table: Tensor,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
}

impl RelativeBias {
    pub fn load(vb: &VarBuilder, config: &T5Config, bidirectional: bool) -> Result<Self> {
        let name = "relative_attention_bias";
        let table = vb
            .get(
                (config.relative_attention_num_buckets, config.num_heads),
                &format!("{name}.weight"),
            )
            .with_context(|| format!("weight {}", vb.prefix_for(name)))?;
        Ok(Self {
            table,
            bidirectional,
            num_buckets: config.relative_attention_num_buckets,
            max_distance: config.relative_attention_max_distance,
        })
    }

    /// Bias (1, heads, q_len, k_len) for queries at positions `q_start..q_start+q_len`
    /// over keys at `0..k_len`.
    pub fn bias(&self, q_start: usize, q_len: usize, k_len: usize) -> Result<Tensor> {
        let mut buckets = Vec::with_capacity(q_len * k_len);
        for query in q_start..q_start + q_len {
            for key in 0..k_len {
                buckets.push(relative_position_bucket(
                    key as i64 - query as i64,
                    self.bidirectional,
                    self.num_buckets,
                    self.max_distance,
                ) as u32);
            }
        }
        let device = self.table.device();
        let index = Tensor::from_vec(buckets, q_len * k_len, device)?;
        let heads = self.table.dim(1)?;
        Ok(self
            .table
            .index_select(&index, 0)?
            .reshape((q_len, k_len, heads))?
            .permute((2, 0, 1))?
            .unsqueeze(0)?
            .contiguous()?)
    }
}

/// Additive key bias (batch, 1, 1, len) from a 0/1 mask (batch, len): 0 where the key is
/// a real token, [`MASKED`] where it is padding.
pub fn key_padding_bias(mask: &Tensor) -> Result<Tensor> {
    let (batch, len) = mask.dims2()?;
    let real = mask.to_dtype(DType::F32)?;
    // real * 0 + (1 - real) * MASKED
    let bias = ((real.ones_like()? - &real)? * MASKED as f64)?;
    Ok(bias.reshape((batch, 1, 1, len))?)
}

/// Additive causal bias (1, 1, q_len, k_len) for queries at `k_len - q_len..k_len`.
pub fn causal_bias(q_len: usize, k_len: usize, device: &Device) -> Result<Tensor> {
    let past = k_len - q_len;
    let values: Vec<f32> = (0..q_len)
        .flat_map(|q| (0..k_len).map(move |k| if k > past + q { MASKED } else { 0.0 }))
        .collect();
    Ok(Tensor::from_vec(values, (1, 1, q_len, k_len), device)?)
}

/// Log-sum-exp over the last dimension, computed stably.
pub fn log_sum_exp_last(xs: &Tensor) -> Result<Tensor> {
    let max = xs.max_keepdim(D::Minus1)?;
    let shifted = xs.broadcast_sub(&max)?;
    Ok((shifted.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?.squeeze(D::Minus1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_distances_have_exact_buckets() {
        // Bidirectional, 32 buckets: 16 per side, 8 exact.
        assert_eq!(relative_position_bucket(0, true, 32, 128), 0);
        assert_eq!(relative_position_bucket(-3, true, 32, 128), 3);
        assert_eq!(relative_position_bucket(3, true, 32, 128), 16 + 3);
        // Unidirectional: 16 exact buckets for the past, the future collapses to 0.
        assert_eq!(relative_position_bucket(-15, false, 32, 128), 15);
        assert_eq!(relative_position_bucket(5, false, 32, 128), 0);
    }

    #[test]
    fn far_distances_share_the_last_bucket() {
        assert_eq!(relative_position_bucket(-1000, true, 32, 128), 15);
        assert_eq!(relative_position_bucket(1000, true, 32, 128), 31);
        assert_eq!(relative_position_bucket(-1000, false, 32, 128), 31);
    }

    #[test]
    fn causal_bias_hides_later_keys_only() {
        let bias = causal_bias(2, 4, &Device::Cpu).unwrap();
        let rows = bias.squeeze(0).unwrap().squeeze(0).unwrap();
        let rows: Vec<Vec<f32>> = rows.to_vec2().unwrap();
        assert_eq!(rows[0], vec![0.0, 0.0, 0.0, MASKED]);
        assert_eq!(rows[1], vec![0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn log_sum_exp_matches_the_definition() {
        let xs = Tensor::new(&[[1000f32, 1000.0], [0.0, (3f32).ln()]], &Device::Cpu).unwrap();
        let lse: Vec<f32> = log_sum_exp_last(&xs).unwrap().to_vec1().unwrap();
        assert!((lse[0] - (1000.0 + 2f32.ln())).abs() < 1e-3, "{lse:?}");
        assert!((lse[1] - 4f32.ln()).abs() < 1e-6, "{lse:?}");
    }
}
