//! Our llama-family model code on real checkpoints: parity with Hugging Face
//! transformers, batch invariance, prefix reuse, and clear errors on bad files.

use crate::common;

use anyhow::Result;
use candle_core::{Device, IndexOp};
use nlg_judge::arch::llama::{self, LlamaModel};
use nlg_judge::arch::WeightPolicy;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    token_ids: Vec<u32>,
    top_ids: Vec<u32>,
    top_logits: Vec<f32>,
}

fn last_logits(model: &LlamaModel, ids: &[u32]) -> Result<Vec<f32>> {
    let out = model.forward(&[ids], None, false)?;
    let hidden = out.positions(&[(0, ids.len() - 1)])?;
    Ok(model.full_logits(&hidden)?.i(0)?.to_vec1()?)
}

/// Compare with the top-20 last-position logits transformers computed from the same
/// GGUF (tests/fixtures/hf_llama/make_reference.py). Both sides dequantise to the same
/// f32 weights; what differs is only the order of floating-point accumulation (torch's
/// and gemm's matrix-product blocking, softmax and RMSNorm reductions) through the
/// layers. Measured here: 4e-5 (SmolLM2) and 2e-5 (Qwen2.5) on logits of magnitude
/// 10-30. We allow 1e-3: 25x headroom for other CPUs' kernels, far below the gaps
/// between competing tokens that would change a judgement. Where two top-20 ids swap,
/// their logits must be within that tolerance of each other.
fn check_against_transformers(model: &LlamaModel, fixture: &str) -> Result<f32> {
    let reference: Reference = serde_json::from_str(fixture)?;
    let mut worst = 0f32;
    for case in &reference.cases {
        let logits = last_logits(model, &case.token_ids)?;
        for (&id, &expected) in case.top_ids.iter().zip(&case.top_logits) {
            let diff = (logits[id as usize] - expected).abs();
            worst = worst.max(diff);
        }
        let mut ours: Vec<u32> = (0..logits.len() as u32).collect();
        ours.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        for (rank, (&a, &b)) in ours.iter().zip(&case.top_ids).take(20).enumerate() {
            if a != b {
                let gap = (logits[a as usize] - logits[b as usize]).abs();
                assert!(
                    gap < 1e-3,
                    "top-{rank} id differs: ours {a}, transformers {b} (gap {gap})"
                );
            }
        }
    }
    assert!(worst < 1e-3, "largest logit difference {worst}");
    Ok(worst)
}

#[test]
fn smollm2_matches_transformers() -> Result<()> {
    let worst = check_against_transformers(
        common::smollm2(),
        include_str!("../fixtures/hf_llama/smollm2_135m_q4_1.json"),
    )?;
    eprintln!("SmolLM2: largest |logit - transformers| = {worst:e}");
    Ok(())
}

#[test]
fn qwen2_matches_transformers() -> Result<()> {
    let model = llama::from_gguf(
        &common::gguf_path("qwen2.5-coder-0.5b-instruct"),
        WeightPolicy::F32,
        &Device::Cpu,
    )?;
    assert_eq!(model.config().variant, llama::LlamaVariant::Qwen2);
    let worst = check_against_transformers(
        &model,
        include_str!("../fixtures/hf_llama/qwen2.5_coder_0.5b_q4_k_m.json"),
    )?;
    eprintln!("Qwen2.5: largest |logit - transformers| = {worst:e}");
    Ok(())
}

/// Eight prompts of different lengths: token ids spread over the vocabulary.
fn prompts() -> Vec<Vec<u32>> {
    (0..8)
        .map(|i| {
            (0..(20 + 13 * i))
                .map(|t| ((t * 131 + i * 977 + 7) % 49000) as u32)
                .collect()
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_padded_batch_gives_the_same_label_logits_as_one_at_a_time() -> Result<()> {
    let model = common::smollm2();
    let prompts = prompts();
    let rows: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let batch = model.forward(&rows, None, false)?;
    let last: Vec<(usize, usize)> = prompts
        .iter()
        .enumerate()
        .map(|(r, p)| (r, p.len() - 1))
        .collect();
    let hidden = batch.positions(&last)?;
    let labels = [330u32, 389];
    let batched = model.token_logits(&hidden, &labels)?;
    let batched_norm = model.log_normaliser(&hidden)?.to_vec1::<f32>()?;
    for (row, prompt) in prompts.iter().enumerate() {
        let single = model.forward(&[prompt], None, false)?;
        let h = single.positions(&[(0, prompt.len() - 1)])?;
        let alone: Vec<f32> = model.token_logits(&h, &labels)?.i(0)?.to_vec1()?;
        let together: Vec<f32> = batched.i(row)?.to_vec1()?;
        let norm = model.log_normaliser(&h)?.to_vec1::<f32>()?[0];
        let logprob = |l: &[f32], n: f32| l.iter().map(|x| x - n).collect::<Vec<_>>();
        let d = max_abs_diff(
            &logprob(&alone, norm),
            &logprob(&together, batched_norm[row]),
        );
        assert!(d < 1e-4, "row {row}: label log-probs differ by {d}");
    }
    Ok(())
}

#[test]
fn suffixes_over_a_cached_prefix_equal_the_full_prompts() -> Result<()> {
    let model = common::smollm2();
    let prefix: Vec<u32> = (0..57).map(|t| (t * 211 + 5) % 49000).collect();
    let suffixes: Vec<Vec<u32>> = (0..4)
        .map(|i| {
            (0..(3 + 9 * i))
                .map(|t| ((t * 17 + i * 1001 + 3) % 49000) as u32)
                .collect()
        })
        .collect();
    let cached = model
        .forward(&[&prefix], None, true)?
        .kv
        .expect("cache kept");
    assert_eq!(cached.len(), prefix.len());
    let rows: Vec<&[u32]> = suffixes.iter().map(Vec::as_slice).collect();
    let out = model.forward(&rows, Some(&cached), false)?;
    for (row, suffix) in suffixes.iter().enumerate() {
        let h = out.positions(&[(row, suffix.len() - 1)])?;
        let over_prefix: Vec<f32> = model.full_logits(&h)?.i(0)?.to_vec1()?;
        let full: Vec<u32> = prefix.iter().chain(suffix).copied().collect();
        let d = max_abs_diff(&over_prefix, &last_logits(model, &full)?);
        assert!(d < 1e-4, "suffix {row}: logits differ by {d}");
    }
    Ok(())
}

#[test]
fn the_label_only_head_equals_the_full_head() -> Result<()> {
    let model = common::smollm2();
    let ids = &prompts()[3];
    let out = model.forward(&[ids], None, false)?;
    let h = out.positions(&[(0, ids.len() - 1)])?;
    let full: Vec<f32> = model.full_logits(&h)?.i(0)?.to_vec1()?;
    let chosen = [0u32, 330, 389, 49151];
    let gathered: Vec<f32> = model.token_logits(&h, &chosen)?.i(0)?.to_vec1()?;
    for (&id, &value) in chosen.iter().zip(&gathered) {
        assert!((full[id as usize] - value).abs() < 1e-5, "id {id}");
    }
    let max = full.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + full
            .iter()
            .map(|&x| (x as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let ours = model.log_normaliser(&h)?.to_vec1::<f32>()?[0] as f64;
    assert!((lse - ours).abs() < 1e-4, "log-sum-exp {ours} vs {lse}");
    Ok(())
}

#[test]
fn a_sequence_longer_than_the_context_window_is_refused() {
    let model = common::smollm2();
    let window = model.config().context_length;
    let ids = vec![1u32; window + 1];
    let err = model.forward(&[&ids], None, false).unwrap_err().to_string();
    assert!(err.contains("context window"), "{err}");
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused() {
    let model = common::smollm2();
    let err = model
        .forward(&[&[5, 49152]], None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

#[test]
fn missing_and_truncated_files_are_clear_errors() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("absent.gguf");
    let err = format!(
        "{:#}",
        llama::from_gguf(&missing, WeightPolicy::F32, &Device::Cpu).unwrap_err()
    );
    assert!(err.contains("absent.gguf"), "{err}");

    let original = std::fs::read(common::gguf_path("smollm2-135m-instruct"))?;
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &original[..original.len() / 2])?;
    let err = format!(
        "{:#}",
        llama::from_gguf(&truncated, WeightPolicy::F32, &Device::Cpu).unwrap_err()
    );
    assert!(
        err.contains("truncated") && err.contains("truncated.gguf"),
        "{err}"
    );

    let header_only = dir.path().join("header.gguf");
    std::fs::write(&header_only, &original[..1000])?;
    let err = format!(
        "{:#}",
        llama::from_gguf(&header_only, WeightPolicy::F32, &Device::Cpu).unwrap_err()
    );
    assert!(err.contains("header.gguf"), "{err}");
    Ok(())
}

#[test]
fn an_unknown_architecture_is_named() -> Result<()> {
    // Rewrite general.architecture in a copy of the GGUF: same length, other name.
    let mut bytes = std::fs::read(common::gguf_path("smollm2-135m-instruct"))?;
    let key = b"general.architecture";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("key present");
    // After the key: u32 value type (8 = string), u64 length (5), then "llama".
    let value = at + key.len() + 4 + 8;
    assert_eq!(&bytes[value..value + 5], b"llama");
    bytes[value..value + 5].copy_from_slice(b"gpt99");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("renamed.gguf");
    std::fs::write(&path, bytes)?;
    let err = format!(
        "{:#}",
        llama::from_gguf(&path, WeightPolicy::F32, &Device::Cpu).unwrap_err()
    );
    assert!(
        err.contains("unknown architecture 'gpt99'") && err.contains("renamed.gguf"),
        "{err}"
    );
    Ok(())
}
