//! Caller-owned key/value caches for decoder self-attention.
//!
//! A model never keeps state between calls: the engine owns every cache, shares one
//! prefix's keys and values between many continuations, cuts a batch's caches into one
//! per row, and joins a parent's cache with a child's.

use std::sync::{Arc, OnceLock};

use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
use nlg_judge_kernels::attention::{tiled_keys_len, AttentionDims};

/// Keys and values of a run of positions, for every layer.
///
/// Each layer holds `(keys, values)` of shape `(rows, kv_heads, len, head_dim)`. A
/// one-row f32 cache on the CPU also keeps each layer's keys tiled for the attention
/// kernel ([`KvCache::tiled_keys`]), made the first time the kernel reads them: a
/// decoding row reads the same segments at every step.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    rows: usize,
    len: usize,
    /// Per layer, the keys tiled for the CPU attention kernel once made (shared by the
    /// clones of this cache, which hold the same tensors).
    tiled: Arc<[OnceLock<Vec<f32>>]>,
}

/// Shortest cache whose keys are worth tiling: a shorter one is transposed where it is
/// read (a decoding row's newest tokens, joined into longer blocks soon).
pub const MIN_TILED_POSITIONS: usize = 16;

/// Tiled keys for `layers` layers, none made yet.
fn untiled(layers: usize) -> Arc<[OnceLock<Vec<f32>>]> {
    (0..layers).map(|_| OnceLock::new()).collect()
}

impl KvCache {
    /// Wrap per-layer tensors, checking that their shapes agree.
    pub fn new(layers: Vec<(Tensor, Tensor)>) -> Result<Self> {
        let Some((k0, _)) = layers.first() else {
            bail!("a key/value cache needs at least one layer");
        };
        let (rows, _, len, _) = k0.dims4()?;
        for (index, (k, v)) in layers.iter().enumerate() {
            let (r, _, l, _) = k.dims4()?;
            if r != rows || l != len || k.dims() != v.dims() {
                bail!(
                    "key/value cache layer {index} has shape {:?}/{:?}, expected {rows} rows of {len} positions",
                    k.dims(),
                    v.dims()
                );
            }
        }
        let tiled = untiled(layers.len());
        Ok(Self {
            layers,
            rows,
            len,
            tiled,
        })
    }

    /// Number of sequences (1 for a cache shared by a whole batch).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// `(keys, values)` of one layer.
    pub fn layer(&self, index: usize) -> &(Tensor, Tensor) {
        &self.layers[index]
    }

    /// Bytes held by the keys and values, and by the tiled keys made of them so far.
    pub fn memory_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum::<usize>()
            + self
                .tiled
                .iter()
                .filter_map(OnceLock::get)
                .map(|tiled| tiled.len() * 4)
                .sum::<usize>()
    }

    /// The same keys and values with tiled keys of its own (none made yet): what a
    /// decoding row tiles then lives as long as the row's copy, not as long as the
    /// prefix cache's entry it came from.
    pub fn with_own_tiles(&self) -> KvCache {
        KvCache {
            layers: self.layers.clone(),
            rows: self.rows,
            len: self.len,
            tiled: untiled(self.layers.len()),
        }
    }

    /// Whether `other` is this cache or a clone of it (sharing its tiled keys).
    pub fn shares_tiles_with(&self, other: &KvCache) -> bool {
        Arc::ptr_eq(&self.tiled, &other.tiled)
    }

    /// The kernel's view of this cache's heads (its query heads do not matter here).
    fn kernel_dims(&self) -> Option<AttentionDims> {
        let (_, kv_heads, _, head_dim) = self.layers[0].0.dims4().ok()?;
        let dims = AttentionDims {
            heads: kv_heads,
            kv_heads,
            head_dim,
        };
        dims.supported().then_some(dims)
    }

    /// Whether the attention kernel keeps this cache's keys tiled: one row of at least
    /// [`MIN_TILED_POSITIONS`] f32 positions on the CPU, of a head width it takes.
    pub fn keeps_tiled_keys(&self) -> bool {
        let (k, _) = &self.layers[0];
        self.rows == 1
            && self.len >= MIN_TILED_POSITIONS
            && k.dtype() == DType::F32
            && k.device().is_cpu()
            && self.kernel_dims().is_some()
    }

    /// Floats of one layer's tiled keys ([`tiled_keys_len`]; 0 where none are kept).
    fn tiled_key_floats(&self) -> usize {
        match self.kernel_dims() {
            Some(dims) if self.keeps_tiled_keys() => tiled_keys_len(dims, self.len),
            _ => 0,
        }
    }

    /// One layer's keys tiled by `make` (from the keys tensor), made on the first call and
    /// kept while the cache (or a clone) lives; `None` where [`Self::keeps_tiled_keys`] is
    /// false.
    pub fn tiled_keys(
        &self,
        layer: usize,
        make: impl FnOnce(&Tensor) -> Result<Vec<f32>>,
    ) -> Result<Option<&[f32]>> {
        if !self.keeps_tiled_keys() {
            return Ok(None);
        }
        let lock = &self.tiled[layer];
        if let Some(tiled) = lock.get() {
            return Ok(Some(tiled));
        }
        let made = make(&self.layers[layer].0)?;
        if made.len() != self.tiled_key_floats() {
            bail!(
                "tiled keys of layer {layer} hold {} floats, expected {}",
                made.len(),
                self.tiled_key_floats()
            );
        }
        // Two threads may both make them; the first one kept is the one read.
        Ok(Some(lock.get_or_init(|| made)))
    }

    /// The first `len` positions of one row, as a one-row cache (copied, so the batch's
    /// cache can be dropped).
    pub fn row(&self, row: usize, len: usize) -> Result<KvCache> {
        if row >= self.rows || len > self.len {
            bail!(
                "cannot take row {row} x {len} positions from a cache of {} rows x {}",
                self.rows,
                self.len
            );
        }
        let layers = self
            .layers
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.narrow(0, row, 1)?.narrow(2, 0, len)?.contiguous()?,
                    v.narrow(0, row, 1)?.narrow(2, 0, len)?.contiguous()?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        KvCache::new(layers)
    }

    /// `self` followed by `next` along the positions (same rows).
    pub fn append(&self, next: &KvCache) -> Result<KvCache> {
        if self.rows != next.rows || self.layers.len() != next.layers.len() {
            bail!(
                "cannot join caches of {}x{} layers and {}x{} layers",
                self.rows,
                self.layers.len(),
                next.rows,
                next.layers.len()
            );
        }
        let layers = self
            .layers
            .iter()
            .zip(&next.layers)
            .map(|((k0, v0), (k1, v1))| {
                Ok((Tensor::cat(&[k0, k1], 2)?, Tensor::cat(&[v0, v1], 2)?))
            })
            .collect::<Result<Vec<_>>>()?;
        KvCache::new(layers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn cache(rows: usize, len: usize, start: f32) -> Result<KvCache> {
        let n = rows * 2 * len * 3;
        let data: Vec<f32> = (0..n).map(|i| start + i as f32).collect();
        let k = Tensor::from_vec(data, (rows, 2, len, 3), &Device::Cpu)?;
        let v = (k.clone() * -1.0)?;
        KvCache::new(vec![(k, v)])
    }

    #[test]
    fn a_row_cut_from_a_batch_equals_that_row() -> Result<()> {
        let batch = cache(3, 4, 0.0)?;
        let row = batch.row(1, 2)?;
        assert_eq!((row.rows(), row.len()), (1, 2));
        let expected = batch.layer(0).0.narrow(0, 1, 1)?.narrow(2, 0, 2)?;
        let diff = (row.layer(0).0.clone() - expected)?
            .abs()?
            .sum_all()?
            .to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        Ok(())
    }

    #[test]
    fn appending_concatenates_positions() -> Result<()> {
        let a = cache(1, 2, 0.0)?;
        let b = cache(1, 3, 100.0)?;
        let joined = a.append(&b)?;
        assert_eq!(joined.len(), 5);
        let tail = joined.layer(0).1.narrow(2, 2, 3)?;
        let diff = (tail - &b.layer(0).1)?
            .abs()?
            .sum_all()?
            .to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        Ok(())
    }

    #[test]
    fn mismatched_layers_are_rejected() -> Result<()> {
        let k = Tensor::zeros((1, 2, 3, 4), DType::F32, &Device::Cpu)?;
        let v = Tensor::zeros((1, 2, 2, 4), DType::F32, &Device::Cpu)?;
        assert!(KvCache::new(vec![(k, v)]).is_err());
        assert!(cache(2, 2, 0.0)?.append(&cache(1, 2, 0.0)?).is_err());
        Ok(())
    }
}
