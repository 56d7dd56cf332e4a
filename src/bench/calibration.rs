//! How fast this machine runs the model's own matrix products: one decoder block's
//! projections (the loaded model's layers, at its precision and instruction path, on the
//! same threads), timed alone on random activations of a chosen number of rows. The
//! benchmark's effective GFLOP/s divided by this figure says how far the whole forward
//! pass (attention, norms, the head, batching and bookkeeping included) is from what its
//! products alone reach on this machine at that shape.

use std::time::Instant;

use anyhow::{Context as _, Result};
use candle_core::Tensor;
use nlg_judge_kernels::gemm::Store;
use serde::Serialize;

use crate::arch::llama::LlamaModel;
use crate::arch::Linear;

/// One product of a block.
#[derive(Debug, Clone, Serialize)]
pub struct ProductTiming {
    /// `qkv`, `o`, `gate_up`, `down` (fused projections), or `q`, `k`, `v`, `gate`, `up`.
    pub name: String,
    pub out_features: usize,
    pub in_features: usize,
    /// How the weight is held (`Linear::storage`: `f32`, `bf16`, `int8`, `q4k`, ...).
    pub weights: String,
    /// `2 x rows x out x in`.
    pub flops: f64,
    /// Best time of the repeats.
    pub seconds: f64,
    pub gflops: f64,
}

/// One block's products timed at `rows` rows.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeCalibration {
    /// Rows (tokens) of every product.
    pub rows: usize,
    /// Whether the products ran as the buffer path runs them (`forward_into`) rather
    /// than through tensors.
    pub on_buffers: bool,
    pub products: Vec<ProductTiming>,
    /// All products' FLOPs over the sum of their best times.
    pub gflops: f64,
}

/// FLOPs of `rows` rows through a layer: `2 x rows x out x in`.
pub fn product_flops(rows: usize, layer: &Linear) -> f64 {
    2.0 * rows as f64 * layer.out_features() as f64 * layer.in_features() as f64
}

/// Time block 0's products of `model` at `rows` rows: each after one warm-up, the best of
/// `repeats`, as the model's forward pass runs it (on buffers or through tensors).
pub fn calibrate_model_shapes(
    model: &LlamaModel,
    rows: usize,
    repeats: usize,
) -> Result<ShapeCalibration> {
    let rows = rows.max(1);
    let repeats = repeats.max(1);
    let on_buffers = model.runs_on_buffers();
    let mut products = Vec::new();
    for (name, layer) in model.layer_projections(0)? {
        let seconds = if on_buffers && layer.runs_on_slices() {
            time_on_slices(layer, rows, repeats)
        } else {
            time_on_tensors(layer, rows, repeats)
        }
        .with_context(|| format!("cannot time the {name} projection"))?;
        let flops = product_flops(rows, layer);
        products.push(ProductTiming {
            name: name.to_string(),
            out_features: layer.out_features(),
            in_features: layer.in_features(),
            weights: layer.storage(),
            flops,
            seconds,
            gflops: flops / seconds / 1e9,
        });
    }
    let flops: f64 = products.iter().map(|p| p.flops).sum();
    let seconds: f64 = products.iter().map(|p| p.seconds).sum();
    Ok(ShapeCalibration {
        rows,
        on_buffers,
        products,
        gflops: flops / seconds / 1e9,
    })
}

/// Activations in `[-1, 1)` from a fixed linear congruential sequence (the timing does
/// not depend on the values, but int8 quantisation and denormals would on zeros).
fn activations(len: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_u32;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn best_of(repeats: usize, mut run: impl FnMut() -> Result<()>) -> Result<f64> {
    run()?;
    let mut best = f64::INFINITY;
    for _ in 0..repeats {
        let start = Instant::now();
        run()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(best.max(1e-12))
}

fn time_on_slices(layer: &Linear, rows: usize, repeats: usize) -> Result<f64> {
    let x = activations(rows * layer.in_features());
    let mut out = vec![0f32; rows * layer.out_features()];
    best_of(repeats, || {
        layer.forward_into(&x, rows, &mut out, Store::Overwrite)
    })
}

fn time_on_tensors(layer: &Linear, rows: usize, repeats: usize) -> Result<f64> {
    let device = layer.device();
    let x = Tensor::from_vec(
        activations(rows * layer.in_features()),
        (rows, layer.in_features()),
        device,
    )?;
    best_of(repeats, || {
        let y = layer.forward(&x)?;
        y.device().synchronize()?;
        Ok(())
    })
}
