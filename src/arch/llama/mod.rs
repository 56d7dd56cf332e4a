//! Our llama-family decoder (llama, qwen2): batched, padded, prefix-aware.
//!
//! Unlike candle-transformers' models, this one keeps no state: the caller passes a
//! key/value cache for an already-computed prefix and gets back the keys and values of
//! the new positions. A forward pass takes several right-padded sequences at once, all
//! continuing the same prefix, and returns the final hidden states of every position;
//! the caller turns only the positions it needs into logits, and only for the token ids
//! it needs ([`LlamaModel::token_logits`]), or into a full-vocabulary log-sum-exp.

mod config;
mod load;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};

pub use config::{LlamaConfig, LlamaVariant};
pub use load::{from_gguf, from_safetensors, read_gguf_header};

use super::kv::KvCache;
use super::linear::Linear;

/// Attention projections, fused into one matrix product when the weights are dense.
#[derive(Debug, Clone)]
enum QkvProjection {
    Fused(Linear),
    Separate { q: Linear, k: Linear, v: Linear },
}

/// Gate and up projections of the feed-forward block, fused when dense.
#[derive(Debug, Clone)]
enum GateUpProjection {
    Fused(Linear),
    Separate { gate: Linear, up: Linear },
}

/// One transformer block.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    attn_norm: Tensor,
    qkv: QkvProjection,
    o: Linear,
    mlp_norm: Tensor,
    gate_up: GateUpProjection,
    down: Linear,
}

impl DecoderLayer {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: &LlamaConfig,
        attn_norm: Tensor,
        q: Linear,
        k: Linear,
        v: Linear,
        o: Linear,
        mlp_norm: Tensor,
        gate: Linear,
        up: Linear,
        down: Linear,
    ) -> Result<Self> {
        let q_out = config.num_heads * config.head_dim;
        let kv_out = config.num_kv_heads * config.head_dim;
        let expected = [
            ("query", &q, q_out, config.hidden_size),
            ("key", &k, kv_out, config.hidden_size),
            ("value", &v, kv_out, config.hidden_size),
            ("output", &o, config.hidden_size, q_out),
            ("gate", &gate, config.intermediate_size, config.hidden_size),
            ("up", &up, config.intermediate_size, config.hidden_size),
            ("down", &down, config.hidden_size, config.intermediate_size),
        ];
        for (name, layer, out, inp) in expected {
            if layer.out_features() != out || layer.in_features() != inp {
                bail!(
                    "{name} projection is {}x{}, expected {out}x{inp}",
                    layer.out_features(),
                    layer.in_features()
                );
            }
        }
        let qkv = match Linear::fuse(&[&q, &k, &v])? {
            Some(fused) => QkvProjection::Fused(fused),
            None => QkvProjection::Separate { q, k, v },
        };
        let gate_up = match Linear::fuse(&[&gate, &up])? {
            Some(fused) => GateUpProjection::Fused(fused),
            None => GateUpProjection::Separate { gate, up },
        };
        Ok(Self {
            attn_norm: attn_norm.to_dtype(DType::F32)?,
            qkv,
            o,
            mlp_norm: mlp_norm.to_dtype(DType::F32)?,
            gate_up,
            down,
        })
    }
}

/// Hidden states of a forward pass, and the keys/values of its positions.
#[derive(Debug)]
pub struct ForwardOutput {
    /// Final-normalised hidden states, `(rows, max_len, hidden)`; positions past a row's
    /// length hold padding garbage.
    pub hidden: Tensor,
    /// Keys/values of the new positions, `rows` x `max_len` (when asked for).
    pub kv: Option<KvCache>,
}

/// A llama-family decoder with its weights.
#[derive(Debug, Clone)]
pub struct LlamaModel {
    config: LlamaConfig,
    device: Device,
    embedding: Tensor,
    layers: Vec<DecoderLayer>,
    final_norm: Tensor,
    head: Linear,
    /// The head as a dense `(vocab, hidden)` matrix, for gathering label rows.
    head_rows: Tensor,
    rope_cos: Tensor,
    rope_sin: Tensor,
}

impl LlamaModel {
    pub(crate) fn new(
        config: LlamaConfig,
        embedding: Tensor,
        layers: Vec<DecoderLayer>,
        final_norm: Tensor,
        head: Linear,
        device: &Device,
    ) -> Result<Self> {
        let embedding = embedding.to_dtype(DType::F32)?;
        let (vocab, hidden) = embedding.dims2()?;
        if vocab != config.vocab_size || hidden != config.hidden_size {
            bail!(
                "token embedding is {vocab}x{hidden}, expected {}x{}",
                config.vocab_size,
                config.hidden_size
            );
        }
        if head.in_features() != config.hidden_size {
            bail!(
                "output head reads {} features, expected {}",
                head.in_features(),
                config.hidden_size
            );
        }
        let head_rows = head.dense_weight()?;
        let (rope_cos, rope_sin) = rope_tables(
            config.head_dim,
            config.rope_theta,
            config.context_length,
            device,
        )?;
        Ok(Self {
            final_norm: final_norm.to_dtype(DType::F32)?,
            device: device.clone(),
            config,
            embedding,
            layers,
            head,
            head_rows,
            rope_cos,
            rope_sin,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Run `rows` (token ids, lengths may differ; right-padded internally) after the
    /// shared `prefix` (a one-row cache, or `None`). Every row continues the same prefix,
    /// so row `r`'s token `t` sits at position `prefix.len() + t`. With `keep_kv` the
    /// keys/values of the new positions come back for the caller to reuse.
    pub fn forward(
        &self,
        rows: &[&[u32]],
        prefix: Option<&KvCache>,
        keep_kv: bool,
    ) -> Result<ForwardOutput> {
        let batch = rows.len();
        let lengths: Vec<usize> = rows.iter().map(|r| r.len()).collect();
        let max_len = lengths.iter().copied().max().unwrap_or(0);
        if batch == 0 || lengths.contains(&0) {
            bail!("every sequence of a forward pass needs at least one token");
        }
        let prefix_len = prefix.map(KvCache::len).unwrap_or(0);
        if let Some(p) = prefix {
            if p.rows() != 1 || p.num_layers() != self.layers.len() {
                bail!(
                    "a shared prefix cache must have one row and {} layers, got {} rows and {} layers",
                    self.layers.len(),
                    p.rows(),
                    p.num_layers()
                );
            }
        }
        let total = prefix_len + max_len;
        if total > self.config.context_length {
            bail!(
                "a sequence of {total} tokens exceeds the model's context window of {} tokens",
                self.config.context_length
            );
        }
        let vocab = self.config.vocab_size as u32;
        let mut ids = Vec::with_capacity(batch * max_len);
        for row in rows {
            if let Some(&bad) = row.iter().find(|&&id| id >= vocab) {
                bail!("token id {bad} is outside the vocabulary of {vocab} tokens");
            }
            ids.extend_from_slice(row);
            ids.extend(std::iter::repeat(0).take(max_len - row.len()));
        }
        let ids = Tensor::from_vec(ids, batch * max_len, &self.device)?;
        let mut x = self.embedding.index_select(&ids, 0)?.reshape((
            batch,
            max_len,
            self.config.hidden_size,
        ))?;
        let mask = attention_mask(&lengths, prefix_len, max_len, &self.device)?;
        let cos = self.rope_cos.narrow(0, prefix_len, max_len)?;
        let sin = self.rope_sin.narrow(0, prefix_len, max_len)?;
        let mut new_kv = Vec::with_capacity(if keep_kv { self.layers.len() } else { 0 });
        for (index, layer) in self.layers.iter().enumerate() {
            let prefix_kv = prefix.map(|p| p.layer(index));
            let (attended, kv) = self
                .attention(layer, &x, prefix_kv, &mask, &cos, &sin)
                .with_context(|| format!("attention of layer {index}"))?;
            x = (x + attended)?;
            x = (&x + self.feed_forward(layer, &x)?)?;
            if keep_kv {
                new_kv.push(kv);
            }
        }
        let hidden =
            candle_nn::ops::rms_norm(&x, &self.final_norm, self.config.rms_norm_eps as f32)?;
        let kv = if keep_kv {
            Some(KvCache::new(new_kv)?)
        } else {
            None
        };
        Ok(ForwardOutput { hidden, kv })
    }

    fn attention(
        &self,
        layer: &DecoderLayer,
        x: &Tensor,
        prefix: Option<&(Tensor, Tensor)>,
        mask: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, (Tensor, Tensor))> {
        let c = &self.config;
        let (batch, len, _) = x.dims3()?;
        let normed = candle_nn::ops::rms_norm(x, &layer.attn_norm, c.rms_norm_eps as f32)?;
        let q_width = c.num_heads * c.head_dim;
        let kv_width = c.num_kv_heads * c.head_dim;
        let (q, k, v) = match &layer.qkv {
            QkvProjection::Fused(qkv) => {
                let all = qkv.forward(&normed)?;
                (
                    all.narrow(2, 0, q_width)?,
                    all.narrow(2, q_width, kv_width)?,
                    all.narrow(2, q_width + kv_width, kv_width)?,
                )
            }
            QkvProjection::Separate { q, k, v } => (
                q.forward(&normed)?,
                k.forward(&normed)?,
                v.forward(&normed)?,
            ),
        };
        let heads = |t: Tensor, n: usize| -> Result<Tensor> {
            Ok(t.reshape((batch, len, n, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = self.rotate(&heads(q, c.num_heads)?, cos, sin)?;
        let k = self.rotate(&heads(k, c.num_kv_heads)?, cos, sin)?;
        let v = heads(v, c.num_kv_heads)?;

        let (keys, values) = match prefix {
            None => (k.clone(), v.clone()),
            Some((pk, pv)) => {
                let (_, heads_kv, plen, dim) = pk.dims4()?;
                let shape = (batch, heads_kv, plen, dim);
                (
                    Tensor::cat(&[&pk.broadcast_as(shape)?, &k], 2)?.contiguous()?,
                    Tensor::cat(&[&pv.broadcast_as(shape)?, &v], 2)?.contiguous()?,
                )
            }
        };
        let keys_len = keys.dim(2)?;
        // Group the query heads by the key/value head they share: (B, Hkv, G*T, D).
        let group = c.group_size();
        let q = q.reshape((batch, c.num_kv_heads, group * len, c.head_dim))?;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let scores = (q.matmul(&keys.t()?)? * scale)?
            .reshape((batch, c.num_kv_heads, group, len, keys_len))?
            .broadcast_add(mask)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?.reshape((
            batch,
            c.num_kv_heads,
            group * len,
            keys_len,
        ))?;
        let attended = weights
            .matmul(&values)?
            .reshape((batch, c.num_heads, len, c.head_dim))?
            .transpose(1, 2)?
            .reshape((batch, len, q_width))?;
        Ok((layer.o.forward(&attended)?, (k, v)))
    }

    fn rotate(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        Ok(if self.config.rope_interleaved {
            candle_nn::rotary_emb::rope_i(x, cos, sin)?
        } else {
            candle_nn::rotary_emb::rope(x, cos, sin)?
        })
    }

    fn feed_forward(&self, layer: &DecoderLayer, x: &Tensor) -> Result<Tensor> {
        let normed = candle_nn::ops::rms_norm(x, &layer.mlp_norm, self.config.rms_norm_eps as f32)?;
        let width = self.config.intermediate_size;
        let (gate, up) = match &layer.gate_up {
            GateUpProjection::Fused(both) => {
                let both = both.forward(&normed)?;
                (
                    both.narrow(D::Minus1, 0, width)?,
                    both.narrow(D::Minus1, width, width)?,
                )
            }
            GateUpProjection::Separate { gate, up } => {
                (gate.forward(&normed)?, up.forward(&normed)?)
            }
        };
        let activated = (candle_nn::ops::silu(&gate)? * up)?;
        layer.down.forward(&activated)
    }

    /// Hidden states of chosen positions: `(row, position)` pairs into a
    /// `(rows, len, hidden)` tensor, gathered into `(n, hidden)`.
    pub fn select_positions(hidden: &Tensor, positions: &[(usize, usize)]) -> Result<Tensor> {
        let (rows, len, width) = hidden.dims3()?;
        let mut flat = Vec::with_capacity(positions.len());
        for &(row, pos) in positions {
            if row >= rows || pos >= len {
                bail!("position ({row}, {pos}) is outside a {rows}x{len} batch");
            }
            flat.push((row * len + pos) as u32);
        }
        let index = Tensor::from_vec(flat, positions.len(), hidden.device())?;
        Ok(hidden
            .reshape((rows * len, width))?
            .index_select(&index, 0)?)
    }

    /// Logits of the given token ids only: `(n, hidden)` -> `(n, ids.len())`, a gather of
    /// rows of the output matrix instead of the full vocabulary head.
    pub fn token_logits(&self, hidden: &Tensor, ids: &[u32]) -> Result<Tensor> {
        let vocab = self.config.vocab_size as u32;
        if let Some(&bad) = ids.iter().find(|&&id| id >= vocab) {
            bail!("token id {bad} is outside the vocabulary of {vocab} tokens");
        }
        let index = Tensor::new(ids, &self.device)?;
        let rows = self.head_rows.index_select(&index, 0)?;
        Ok(hidden.matmul(&rows.t()?)?)
    }

    /// Logits over the whole vocabulary: `(n, hidden)` -> `(n, vocab)`.
    pub fn full_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        self.head.forward(hidden)
    }

    /// `log sum_v exp(logit_v)` over the whole vocabulary, per row: `(n, hidden)` -> `(n)`.
    /// Subtract it from [`Self::token_logits`] to get log-probabilities.
    pub fn log_normaliser(&self, hidden: &Tensor) -> Result<Tensor> {
        let logits = self.full_logits(hidden)?;
        let max = logits.max_keepdim(D::Minus1)?;
        let sum = logits.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?;
        Ok((sum.log()? + max)?.squeeze(D::Minus1)?)
    }
}

/// Additive attention mask `(B, 1, 1, T, P + T)`: every row sees the whole shared prefix,
/// then its own positions causally, never its padding.
fn attention_mask(
    lengths: &[usize],
    prefix_len: usize,
    max_len: usize,
    device: &Device,
) -> Result<Tensor> {
    let keys = prefix_len + max_len;
    let mut mask = vec![0f32; lengths.len() * max_len * keys];
    for (row, &length) in lengths.iter().enumerate() {
        for query in 0..max_len {
            let base = (row * max_len + query) * keys;
            for key in 0..max_len {
                if key > query || key >= length {
                    mask[base + prefix_len + key] = f32::NEG_INFINITY;
                }
            }
        }
    }
    Ok(Tensor::from_vec(
        mask,
        (lengths.len(), 1, 1, max_len, keys),
        device,
    )?)
}

/// Cosine and sine tables `(positions, head_dim / 2)` for rotary embeddings.
fn rope_tables(
    head_dim: usize,
    theta: f64,
    positions: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for pos in 0..positions {
        for i in 0..half {
            let inv_freq = 1.0 / theta.powf((2 * i) as f64 / head_dim as f64);
            let angle = pos as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    Ok((
        Tensor::from_vec(cos, (positions, half), device)?,
        Tensor::from_vec(sin, (positions, half), device)?,
    ))
}
