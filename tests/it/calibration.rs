//! The benchmark's calibration of a model's own products (`bench::calibration`) on the
//! tiny llama 3 fixture (tests/fixtures/archs): the products it times are the model's
//! block shapes from its configuration, their FLOPs add up to a block's share of
//! `matmul_flops_per_token`, and it takes the path the forward pass takes (buffers, or
//! tensors when the model attends with candle's operations), at every precision.

use std::path::Path;

use anyhow::Result;
use candle_core::Device;
use nlg_judge::arch::{llama, Precision};
use nlg_judge::bench::calibration::calibrate_model_shapes;
use nlg_judge::bench::pairwise::matmul_flops_per_token;

fn model() -> Result<llama::LlamaModel> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs/llama3");
    llama::from_safetensors(
        &dir.join("config.json"),
        &[dir.join("model.safetensors")],
        &Device::Cpu,
    )
}

#[test]
fn calibration_times_the_blocks_own_shapes() -> Result<()> {
    let rows = 7;
    for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
        let model = model()?.with_precision(precision)?;
        let c = model.config().clone();
        let (q, kv) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        for (model, on_buffers) in [
            (model.clone(), true),
            (model.with_candle_attention(), false),
        ] {
            let calibration = calibrate_model_shapes(&model, rows, 2)?;
            assert_eq!(calibration.rows, rows);
            assert_eq!(calibration.on_buffers, on_buffers, "{precision:?}");
            let shapes: Vec<(&str, usize, usize)> = calibration
                .products
                .iter()
                .map(|p| (p.name.as_str(), p.out_features, p.in_features))
                .collect();
            let h = c.hidden_size;
            let i = c.intermediate_size;
            assert_eq!(
                shapes,
                [
                    ("qkv", q + 2 * kv, h),
                    ("o", h, q),
                    ("gate_up", 2 * i, h),
                    ("down", h, i)
                ],
                "{precision:?}"
            );
            let flops: f64 = calibration.products.iter().map(|p| p.flops).sum();
            let expected = matmul_flops_per_token(&c) / c.num_layers as f64 * rows as f64;
            assert!(
                (flops - expected).abs() < 1e-6 * expected,
                "{flops} vs {expected}"
            );
            for product in &calibration.products {
                assert!(product.seconds > 0.0 && product.gflops.is_finite());
                assert!(product.gflops > 0.0);
            }
            assert!(calibration.gflops > 0.0 && calibration.gflops.is_finite());
        }
    }
    Ok(())
}

#[test]
fn calibration_refuses_a_layer_the_model_lacks() -> Result<()> {
    let model = model()?;
    let layers = model.config().num_layers;
    assert!(model.layer_projections(layers).is_err());
    assert_eq!(model.layer_projections(layers - 1)?.len(), 4);
    Ok(())
}
