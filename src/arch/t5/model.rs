//! The T5 encoder-decoder: a bidirectional encoder over right-padded batches, a causal
//! decoder that runs over a caller-owned [`DecoderCache`], and an output head that can
//! score a few token ids (a gather of rows) or the whole vocabulary.

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::cache::DecoderCache;
use super::config::T5Config;
use super::layers::{
    causal_bias, key_padding_bias, log_sum_exp_last, Attention, FeedForward, RelativeBias, RmsNorm,
};
use super::weights::WeightFiles;

/// The shared token embedding, and each stack's own copy. Most checkpoints store only
/// `shared.weight` (the stacks' copies are aliases); fine-tunes saved untied and some
/// conversions store stack embeddings that differ from it. As transformers does, each
/// stack reads its own embedding when the checkpoint has one, and the shared one
/// otherwise; a checkpoint with no shared embedding falls back to a stack's copy.
const SHARED_EMBEDDING: &str = "shared.weight";
const ENCODER_EMBEDDING: &str = "encoder.embed_tokens.weight";
const DECODER_EMBEDDING: &str = "decoder.embed_tokens.weight";

/// The encoder's output for a batch, with what the decoder needs to attend to it.
#[derive(Debug, Clone)]
pub struct EncoderOutput {
    /// (batch, len, d_model); rows past a sequence's length are padding.
    pub hidden: Tensor,
    /// (batch, 1, 1, len): 0 for real tokens, masked for padding.
    pub(crate) key_bias: Tensor,
}

impl EncoderOutput {
    pub fn batch_size(&self) -> Result<usize> {
        Ok(self.hidden.dim(0)?)
    }
}

#[derive(Debug, Clone)]
struct EncoderLayer {
    attention_norm: RmsNorm,
    attention: Attention,
    feed_forward_norm: RmsNorm,
    feed_forward: FeedForward,
}

#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    self_norm: RmsNorm,
    pub(crate) self_attention: Attention,
    cross_norm: RmsNorm,
    pub(crate) cross_attention: Attention,
    feed_forward_norm: RmsNorm,
    feed_forward: FeedForward,
}

/// A loaded T5 model (weights in f32 for computation).
#[derive(Debug, Clone)]
pub struct T5Model {
    config: T5Config,
    /// (vocab, d_model): the encoder's and the decoder's token embeddings (the shared one
    /// unless the checkpoint stores a stack's own).
    encoder_embedding: Tensor,
    decoder_embedding: Tensor,
    encoder: Vec<EncoderLayer>,
    encoder_position: RelativeBias,
    encoder_norm: RmsNorm,
    pub(crate) decoder: Vec<DecoderLayer>,
    decoder_position: RelativeBias,
    decoder_norm: RmsNorm,
    /// (vocab, d_model): `lm_head.weight`, or the embedding when tied.
    head: Tensor,
    /// `d_model**-0.5` when the configuration scales the decoder output.
    head_scale: Option<f64>,
    device: Device,
}

impl T5Model {
    /// Load the weights `files` with `config`, computing in f32 on `device`.
    pub fn from_files(config: &T5Config, files: &WeightFiles, device: &Device) -> Result<Self> {
        let vb = files.var_builder(DType::F32, device)?;
        let names: Vec<String> = files
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        Self::load(&vb, config).with_context(|| format!("in weights {}", names.join(", ")))
    }

    /// Load from any variable builder (the tensors keep the builder's dtype).
    pub fn load(vb: &VarBuilder, config: &T5Config) -> Result<Self> {
        let (vocab, d) = (config.vocab_size, config.d_model);
        let stored = |name: &str| -> Result<Option<Tensor>> {
            if !vb.contains_tensor(name) {
                return Ok(None);
            }
            let tensor = vb
                .get((vocab, d), name)
                .with_context(|| format!("weight {name}"))?;
            Ok(Some(tensor))
        };
        let shared = stored(SHARED_EMBEDDING)?;
        let encoder_own = stored(ENCODER_EMBEDDING)?;
        let decoder_own = stored(DECODER_EMBEDDING)?;
        let embedding = shared
            .clone()
            .or_else(|| encoder_own.clone())
            .or_else(|| decoder_own.clone())
            .with_context(|| {
                format!(
                    "no token embedding: expected one of {SHARED_EMBEDDING}, \
                     {ENCODER_EMBEDDING}, {DECODER_EMBEDDING}"
                )
            })?;
        let encoder_embedding = encoder_own.unwrap_or_else(|| embedding.clone());
        let decoder_embedding = decoder_own.unwrap_or_else(|| embedding.clone());

        let encoder_vb = vb.pp("encoder");
        let encoder = (0..config.num_encoder_layers)
            .map(|i| load_encoder_layer(&encoder_vb.pp(format!("block.{i}.layer")), config))
            .collect::<Result<Vec<_>>>()?;
        let encoder_position = RelativeBias::load(
            &encoder_vb.pp("block.0.layer.0.SelfAttention"),
            config,
            true,
        )?;
        let encoder_norm = RmsNorm::load(&encoder_vb, "final_layer_norm", config)?;

        let decoder_vb = vb.pp("decoder");
        let decoder = (0..config.num_decoder_layers)
            .map(|i| load_decoder_layer(&decoder_vb.pp(format!("block.{i}.layer")), config))
            .collect::<Result<Vec<_>>>()?;
        let decoder_position = RelativeBias::load(
            &decoder_vb.pp("block.0.layer.0.SelfAttention"),
            config,
            false,
        )?;
        let decoder_norm = RmsNorm::load(&decoder_vb, "final_layer_norm", config)?;

        // A stored head wins, tied or not (transformers keeps a stored `lm_head.weight`
        // that differs from the embedding); a tied checkpoint may omit it.
        let head = if vb.contains_tensor("lm_head.weight") {
            vb.get((vocab, d), "lm_head.weight")
                .context("weight lm_head.weight")?
        } else if config.tie_word_embeddings {
            embedding.clone()
        } else {
            bail!("lm_head.weight is missing and config.json says tie_word_embeddings: false")
        };
        Ok(Self {
            config: config.clone(),
            encoder_embedding,
            decoder_embedding,
            encoder,
            encoder_position,
            encoder_norm,
            decoder,
            decoder_position,
            decoder_norm,
            head,
            head_scale: config.scale_decoder_outputs.then(|| (d as f64).powf(-0.5)),
            device: vb.device().clone(),
        })
    }

    pub fn config(&self) -> &T5Config {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Embeddings (batch, len, d_model) of token ids (batch, len) from `table`.
    fn embed(&self, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        let (batch, len) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let highest = flat.max(0)?.to_scalar::<u32>()?;
        ensure!(
            (highest as usize) < self.config.vocab_size,
            "token id {highest} is outside the model's vocabulary ({} rows)",
            self.config.vocab_size
        );
        Ok(table
            .index_select(&flat, 0)?
            .reshape((batch, len, self.config.d_model))?)
    }

    /// Encode sequences of different lengths, padded on the right into one batch.
    pub fn encode(&self, sequences: &[Vec<u32>]) -> Result<EncoderOutput> {
        let (ids, mask) = pad_batch(
            sequences,
            self.config.pad_token_id,
            Side::Right,
            &self.device,
        )
        .context("encoder batch")?;
        self.encode_padded(&ids, &mask)
    }

    /// Encode a padded batch: `ids` (batch, len) u32, `mask` (batch, len) 1 for tokens
    /// and 0 for padding (any dtype). Padding keys are hidden from every query.
    pub fn encode_padded(&self, ids: &Tensor, mask: &Tensor) -> Result<EncoderOutput> {
        let (batch, len) = ids.dims2()?;
        ensure!(
            mask.dims2()? == (batch, len),
            "encoder mask {:?} does not match ids {:?}",
            mask.dims(),
            ids.dims()
        );
        let key_bias = key_padding_bias(mask)?;
        let bias = self
            .encoder_position
            .bias(0, len, len)?
            .broadcast_add(&key_bias)?;
        let mut hidden = self.embed(&self.encoder_embedding, ids)?;
        for layer in &self.encoder {
            let normed = layer.attention_norm.forward(&hidden)?;
            let (keys, values) = layer.attention.keys_values(&normed)?;
            hidden = (hidden + layer.attention.attend(&normed, &keys, &values, &bias)?)?;
            let normed = layer.feed_forward_norm.forward(&hidden)?;
            hidden = (&hidden + layer.feed_forward.forward(&normed)?)?;
        }
        Ok(EncoderOutput {
            hidden: self.encoder_norm.forward(&hidden)?,
            key_bias,
        })
    }

    /// A decoder cache over `encoder`'s batch, one decoder row per encoder row: the
    /// cross-attention keys and values are computed here, once.
    pub fn start_decoder(&self, encoder: &EncoderOutput) -> Result<DecoderCache> {
        let cross = self
            .decoder
            .iter()
            .map(|layer| layer.cross_attention.keys_values(&encoder.hidden))
            .collect::<Result<Vec<_>>>()?;
        DecoderCache::new(cross, encoder.key_bias.clone())
    }

    /// Run the decoder over `tokens` (rows, len) u32 after what `cache` holds, appending
    /// their keys and values to it. `padding` (rows, len; 1 token, 0 padding) hides
    /// padding positions from later queries; with left padding a row's real tokens keep
    /// their relative distances, which is all T5's position bias sees. Returns the final
    /// hidden states (rows, len, d_model) for [`T5Model::logits`] and friends.
    pub fn decode(
        &self,
        tokens: &Tensor,
        padding: Option<&Tensor>,
        cache: &mut DecoderCache,
    ) -> Result<Tensor> {
        let (rows, len) = tokens.dims2()?;
        ensure!(len > 0, "decoder input is empty");
        ensure!(
            rows == cache.rows(),
            "decoder input has {rows} rows but the cache has {}",
            cache.rows()
        );
        let new_key_bias = match padding {
            Some(mask) => {
                ensure!(
                    mask.dims2()? == (rows, len),
                    "decoder padding mask {:?} does not match tokens {:?}",
                    mask.dims(),
                    tokens.dims()
                );
                key_padding_bias(mask)?.reshape((rows, len))?
            }
            None => Tensor::zeros((rows, len), DType::F32, &self.device)?,
        };
        let past = cache.len();
        let key_bias = cache.key_bias_with(&new_key_bias)?;
        let total = past + len;
        let self_bias = self
            .decoder_position
            .bias(past, len, total)?
            .broadcast_add(&causal_bias(len, total, &self.device)?)?
            .broadcast_add(&key_bias.reshape((rows, 1, 1, total))?)?;
        let cross_bias = cache.cross_bias().clone();

        let mut hidden = self.embed(&self.decoder_embedding, tokens)?;
        let mut grown = Vec::with_capacity(self.decoder.len());
        for (index, layer) in self.decoder.iter().enumerate() {
            let normed = layer.self_norm.forward(&hidden)?;
            let (keys, values) = layer.self_attention.keys_values(&normed)?;
            let (keys, values) = cache.with_past(index, keys, values)?;
            let attended = layer
                .self_attention
                .attend(&normed, &keys, &values, &self_bias)?;
            hidden = (&hidden + attended)?;
            grown.push((keys, values));

            let normed = layer.cross_norm.forward(&hidden)?;
            let (keys, values) = cache.cross(index);
            let attended = layer
                .cross_attention
                .attend(&normed, keys, values, &cross_bias)?;
            hidden = (&hidden + attended)?;

            let normed = layer.feed_forward_norm.forward(&hidden)?;
            hidden = (&hidden + layer.feed_forward.forward(&normed)?)?;
        }
        cache.commit(grown, key_bias, len)?;
        self.decoder_norm.forward(&hidden)
    }

    /// Run the decoder over sequences of different lengths, padded on the left so that
    /// every row ends at the same position. Returns hidden states (rows, longest,
    /// d_model); row `i`'s tokens are at the last `sequences[i].len()` positions.
    pub fn decode_left_padded(
        &self,
        sequences: &[Vec<u32>],
        cache: &mut DecoderCache,
    ) -> Result<Tensor> {
        let (ids, mask) = pad_batch(
            sequences,
            self.config.pad_token_id,
            Side::Left,
            &self.device,
        )
        .context("decoder batch")?;
        let all_real = sequences.iter().all(|s| s.len() == sequences[0].len());
        self.decode(&ids, (!all_real).then_some(&mask), cache)
    }

    fn head_input(&self, hidden: &Tensor) -> Result<Tensor> {
        let (rows, width) = (
            hidden.elem_count() / self.config.d_model,
            self.config.d_model,
        );
        let flat = hidden.reshape((rows, width))?;
        Ok(match self.head_scale {
            Some(scale) => (flat * scale)?,
            None => flat,
        })
    }

    /// Full-vocabulary logits (rows, vocab) of hidden states (..., d_model), flattened.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        Ok(self.head_input(hidden)?.matmul(&self.head.t()?)?)
    }

    /// Logits (rows, ids.len()) of only the token `ids`: a gather of head rows.
    pub fn logits_for(&self, hidden: &Tensor, ids: &[u32]) -> Result<Tensor> {
        ensure!(!ids.is_empty(), "no token ids to score");
        if let Some(&bad) = ids
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            bail!(
                "token id {bad} is outside the model's vocabulary ({} rows)",
                self.config.vocab_size
            );
        }
        let index = Tensor::from_slice(ids, ids.len(), &self.device)?;
        let rows = self.head.index_select(&index, 0)?;
        Ok(self.head_input(hidden)?.matmul(&rows.t()?)?)
    }

    /// `log sum_v exp(logit_v)` over the whole vocabulary, per row (rows,).
    pub fn log_normaliser(&self, hidden: &Tensor) -> Result<Tensor> {
        log_sum_exp_last(&self.logits(hidden)?)
    }

    /// Log-probability (rows,) of one target token per row: `targets[i]` at row `i`.
    pub fn target_logprobs(&self, hidden: &Tensor, targets: &[u32]) -> Result<Tensor> {
        let logits = self.logits(hidden)?;
        ensure!(
            logits.dim(0)? == targets.len(),
            "{} targets for {} hidden rows",
            targets.len(),
            logits.dim(0)?
        );
        if let Some(&bad) = targets
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            bail!(
                "token id {bad} is outside the model's vocabulary ({} rows)",
                self.config.vocab_size
            );
        }
        let index = Tensor::from_slice(targets, (targets.len(), 1), &self.device)?;
        let picked = logits.gather(&index, 1)?.squeeze(1)?;
        Ok((picked - log_sum_exp_last(&logits)?)?)
    }

    /// Log-probabilities (rows, ids.len()) of the token `ids`.
    pub fn token_logprobs(&self, hidden: &Tensor, ids: &[u32]) -> Result<Tensor> {
        let logits = self.logits_for(hidden, ids)?;
        let normaliser = self.log_normaliser(hidden)?.unsqueeze(1)?;
        Ok(logits.broadcast_sub(&normaliser)?)
    }
}

fn load_encoder_layer(vb: &VarBuilder, config: &T5Config) -> Result<EncoderLayer> {
    Ok(EncoderLayer {
        attention_norm: RmsNorm::load(&vb.pp("0"), "layer_norm", config)?,
        attention: Attention::load(&vb.pp("0.SelfAttention"), config)?,
        feed_forward_norm: RmsNorm::load(&vb.pp("1"), "layer_norm", config)?,
        feed_forward: FeedForward::load(&vb.pp("1.DenseReluDense"), config.feed_forward, config)?,
    })
}

fn load_decoder_layer(vb: &VarBuilder, config: &T5Config) -> Result<DecoderLayer> {
    Ok(DecoderLayer {
        self_norm: RmsNorm::load(&vb.pp("0"), "layer_norm", config)?,
        self_attention: Attention::load(&vb.pp("0.SelfAttention"), config)?,
        cross_norm: RmsNorm::load(&vb.pp("1"), "layer_norm", config)?,
        cross_attention: Attention::load(&vb.pp("1.EncDecAttention"), config)?,
        feed_forward_norm: RmsNorm::load(&vb.pp("2"), "layer_norm", config)?,
        feed_forward: FeedForward::load(&vb.pp("2.DenseReluDense"), config.feed_forward, config)?,
    })
}

/// Which end of a sequence padding goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

/// Pad `sequences` to the longest with `pad`: ids (batch, longest) u32 and a mask
/// (batch, longest) u8, 1 for tokens and 0 for padding.
pub fn pad_batch(
    sequences: &[Vec<u32>],
    pad: u32,
    side: Side,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    ensure!(!sequences.is_empty(), "empty batch");
    if let Some(empty) = sequences.iter().position(|s| s.is_empty()) {
        bail!("sequence {empty} of the batch is empty");
    }
    let longest = sequences.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(sequences.len() * longest);
    let mut mask = Vec::with_capacity(sequences.len() * longest);
    for sequence in sequences {
        let padding = longest - sequence.len();
        if side == Side::Left {
            ids.extend(std::iter::repeat_n(pad, padding));
            mask.extend(std::iter::repeat_n(0u8, padding));
        }
        ids.extend_from_slice(sequence);
        mask.extend(std::iter::repeat_n(1u8, sequence.len()));
        if side == Side::Right {
            ids.extend(std::iter::repeat_n(pad, padding));
            mask.extend(std::iter::repeat_n(0u8, padding));
        }
    }
    let shape = (sequences.len(), longest);
    Ok((
        Tensor::from_vec(ids, shape, device)?,
        Tensor::from_vec(mask, shape, device)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_goes_to_the_requested_side_with_a_matching_mask() {
        let seqs = vec![vec![5, 6, 7], vec![8]];
        let (ids, mask) = pad_batch(&seqs, 0, Side::Left, &Device::Cpu).unwrap();
        assert_eq!(ids.to_vec2::<u32>().unwrap(), [[5, 6, 7], [0, 0, 8]]);
        assert_eq!(mask.to_vec2::<u8>().unwrap(), [[1, 1, 1], [0, 0, 1]]);
        let (ids, mask) = pad_batch(&seqs, 0, Side::Right, &Device::Cpu).unwrap();
        assert_eq!(ids.to_vec2::<u32>().unwrap(), [[5, 6, 7], [8, 0, 0]]);
        assert_eq!(mask.to_vec2::<u8>().unwrap(), [[1, 1, 1], [1, 0, 0]]);
    }

    #[test]
    fn empty_sequences_are_refused() {
        let err = pad_batch(&[vec![1], vec![]], 0, Side::Right, &Device::Cpu).unwrap_err();
        assert!(err.to_string().contains("sequence 1"), "{err}");
        assert!(pad_batch(&[], 0, Side::Right, &Device::Cpu).is_err());
    }
}
