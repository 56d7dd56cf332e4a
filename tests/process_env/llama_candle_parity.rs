//! Parity of our llama-family code with candle-transformers' quantized models (a second,
//! independent implementation) on the real GGUF checkpoints, with the same
//! dequantisation on both sides: candle's `CANDLE_DEQUANTIZE_ALL` makes its layers
//! dequantise to f32 exactly as our `WeightPolicy::F32` does. The `process_env` binary sets that
//! variable for itself only.

use anyhow::Result;

use crate::common;
use candle_core::{Device, IndexOp, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2};
use nlg_judge::arch::llama::{self, LlamaModel};
use nlg_judge::arch::WeightPolicy;

const TOLERANCE: f32 = 1e-3;

fn prompts() -> Vec<Vec<u32>> {
    vec![
        (0..12).map(|t| (t * 97 + 3) % 40000).collect(),
        (0..150).map(|t| (t * 131 + 11) % 40000).collect(),
        (0..333).map(|t| (t * 7919 + 5) % 40000).collect(),
    ]
}

fn ours_last_logits(model: &LlamaModel, ids: &[u32]) -> Result<Tensor> {
    let out = model.forward(&[ids], None, false)?;
    let h = out.positions(&[(0, ids.len() - 1)])?;
    Ok(model.full_logits(&h)?.i(0)?)
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.max(0)?.to_scalar::<f32>()?)
}

fn open(card: &str) -> Result<(std::fs::File, candle_core::quantized::gguf_file::Content)> {
    let path = common::gguf_path(card);
    let mut file = std::fs::File::open(&path)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    Ok((file, content))
}

#[test]
fn last_position_logits_match_candle_transformers() -> Result<()> {
    let _environment = crate::environment();
    // SAFETY: set before any candle layer reads it; the tests of this binary hold the
    // environment lock, so no other thread reads or writes variables meanwhile.
    unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    let device = Device::Cpu;

    let ours = common::smollm2();
    let (mut file, content) = open("smollm2-135m-instruct")?;
    let mut reference = quantized_llama::ModelWeights::from_gguf(content, &mut file, &device)?;
    for ids in prompts() {
        let theirs = reference
            .forward(&Tensor::new(ids.as_slice(), &device)?.unsqueeze(0)?, 0)?
            .i(0)?;
        let d = max_diff(&ours_last_logits(ours, &ids)?, &theirs)?;
        eprintln!("SmolLM2, {} tokens: largest difference {d:e}", ids.len());
        assert!(d < TOLERANCE, "SmolLM2 logits differ by {d}");
    }

    let card = "qwen2.5-coder-0.5b-instruct";
    let ours = llama::from_gguf(&common::gguf_path(card), WeightPolicy::F32, &device)?;
    let (mut file, content) = open(card)?;
    let mut reference = quantized_qwen2::ModelWeights::from_gguf(content, &mut file, &device)?;
    for ids in prompts() {
        let theirs = reference.forward(&Tensor::new(ids.as_slice(), &device)?.unsqueeze(0)?, 0)?;
        let theirs = theirs.flatten_all()?;
        let d = max_diff(&ours_last_logits(&ours, &ids)?, &theirs)?;
        eprintln!("Qwen2.5, {} tokens: largest difference {d:e}", ids.len());
        assert!(d < TOLERANCE, "Qwen2.5 logits differ by {d}");
    }
    Ok(())
}
