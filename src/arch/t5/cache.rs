//! The decoder's key/value cache, owned by the caller.
//!
//! Cross-attention keys and values are computed once from the encoder output; the
//! self-attention keys and values grow with every decoded token. Rows can be selected or
//! repeated ([`DecoderCache::select_rows`]) so that continuations which share a decoder
//! prefix (label words, generation) reuse its work instead of recomputing it.

use anyhow::{ensure, Context, Result};
use candle_core::Tensor;

/// Keys and values (rows, heads, len, d_kv) of one attention layer.
type KeysValues = (Tensor, Tensor);

#[derive(Debug, Clone)]
pub struct DecoderCache {
    /// Per decoder layer: the encoder output projected to keys and values.
    cross: Vec<KeysValues>,
    /// (rows, 1, 1, encoder_len): masks the encoder's padding.
    cross_bias: Tensor,
    /// Per decoder layer: keys and values of the decoded positions so far.
    past: Vec<Option<KeysValues>>,
    /// (rows, len): 0 for decoded tokens, masked for decoder padding.
    key_bias: Option<Tensor>,
    len: usize,
}

impl DecoderCache {
    pub(crate) fn new(cross: Vec<KeysValues>, cross_bias: Tensor) -> Result<Self> {
        let layers = cross.len();
        Ok(Self {
            cross,
            cross_bias,
            past: vec![None; layers],
            key_bias: None,
            len: 0,
        })
    }

    /// Number of rows (sequences decoded side by side).
    pub fn rows(&self) -> usize {
        self.cross_bias.dims().first().copied().unwrap_or(0)
    }

    /// Number of decoder positions held (padding included).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A cache whose row `i` is this cache's row `rows[i]` (rows may repeat): to fork a
    /// decoded prefix into several continuations, or to drop finished rows.
    pub fn select_rows(&self, rows: &[u32]) -> Result<Self> {
        ensure!(!rows.is_empty(), "no rows selected from the decoder cache");
        if let Some(&bad) = rows.iter().find(|&&r| r as usize >= self.rows()) {
            anyhow::bail!(
                "row {bad} selected from a decoder cache of {} rows",
                self.rows()
            );
        }
        let index = Tensor::from_slice(rows, rows.len(), self.cross_bias.device())?;
        let pick = |t: &Tensor| -> Result<Tensor> {
            t.index_select(&index, 0)
                .context("selecting decoder cache rows")
        };
        let pick_pair = |(k, v): &KeysValues| -> Result<KeysValues> { Ok((pick(k)?, pick(v)?)) };
        Ok(Self {
            cross: self.cross.iter().map(pick_pair).collect::<Result<_>>()?,
            cross_bias: pick(&self.cross_bias)?,
            past: self
                .past
                .iter()
                .map(|layer| layer.as_ref().map(pick_pair).transpose())
                .collect::<Result<_>>()?,
            key_bias: self.key_bias.as_ref().map(pick).transpose()?,
            len: self.len,
        })
    }

    pub(crate) fn cross(&self, layer: usize) -> (&Tensor, &Tensor) {
        let (k, v) = &self.cross[layer];
        (k, v)
    }

    pub(crate) fn cross_bias(&self) -> &Tensor {
        &self.cross_bias
    }

    /// The key bias (rows, len + new) with `new` (rows, new) appended; not stored yet.
    pub(crate) fn key_bias_with(&self, new: &Tensor) -> Result<Tensor> {
        Ok(match &self.key_bias {
            Some(past) => Tensor::cat(&[past, new], 1)?,
            None => new.clone(),
        })
    }

    /// Layer `layer`'s past keys and values with `keys`/`values` appended; not stored yet.
    pub(crate) fn with_past(
        &self,
        layer: usize,
        keys: Tensor,
        values: Tensor,
    ) -> Result<KeysValues> {
        Ok(match &self.past[layer] {
            Some((past_k, past_v)) => (
                Tensor::cat(&[past_k, &keys], 2)?,
                Tensor::cat(&[past_v, &values], 2)?,
            ),
            None => (keys, values),
        })
    }

    /// Store the result of a successful decoder pass over `added` positions.
    pub(crate) fn commit(
        &mut self,
        past: Vec<KeysValues>,
        key_bias: Tensor,
        added: usize,
    ) -> Result<()> {
        ensure!(
            past.len() == self.past.len(),
            "decoder pass produced {} layers for a cache of {}",
            past.len(),
            self.past.len()
        );
        self.past = past.into_iter().map(Some).collect();
        self.key_bias = Some(key_bias);
        self.len += added;
        Ok(())
    }
}
