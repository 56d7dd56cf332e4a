//! Our llama-family code on Hugging Face safetensors checkpoints (f32, f16, bf16; one file
//! or shards), against transformers: tiny random-weight llama and qwen2 models of the real
//! architectures (tests/fixtures/hf_llama_tiny/make_fixture.py). Tolerance 1e-4: both
//! sides compute in f32 from the same (rounded) weights; at this size the accumulation
//! error is ~1e-6.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::{Device, Tensor};
use nlg_judge::arch::llama::{self, LlamaModel, LlamaVariant};
use serde::Deserialize;

#[derive(Deserialize)]
struct Model {
    sequences: Vec<Vec<u32>>,
    logits: HashMap<String, Vec<Case>>,
}

#[derive(Deserialize)]
struct Case {
    positions: Vec<Vec<f32>>,
    last: Vec<f32>,
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_llama_tiny")
}

fn reference() -> Result<HashMap<String, Model>> {
    Ok(serde_json::from_str(&std::fs::read_to_string(
        fixture().join("reference.json"),
    )?)?)
}

fn all_logits(model: &LlamaModel, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
    let out = model.forward(&[ids], None, false)?;
    let positions: Vec<(usize, usize)> = (0..ids.len()).map(|t| (0, t)).collect();
    Ok(model.full_logits(&out.positions(&positions)?)?.to_vec2()?)
}

fn check(kind: &str, dtype: &str, weights: &[PathBuf]) -> Result<f32> {
    let reference = reference()?;
    let expected = &reference[kind];
    let model = llama::from_safetensors(
        &fixture().join(kind).join("config.json"),
        weights,
        &Device::Cpu,
    )?;
    let mut worst = 0f32;
    for (ids, case) in expected.sequences.iter().zip(&expected.logits[dtype]) {
        let ours = all_logits(&model, ids)?;
        for (t, row) in case.positions.iter().enumerate() {
            for (v, &value) in row.iter().enumerate() {
                worst = worst.max((ours[t][v] - value).abs());
            }
        }
        for (v, &value) in case.last.iter().enumerate() {
            worst = worst.max((ours[ids.len() - 1][v] - value).abs());
        }
    }
    assert!(
        worst < 1e-4,
        "{kind} {dtype}: largest logit difference {worst}"
    );
    Ok(worst)
}

#[test]
fn llama_and_qwen2_safetensors_match_transformers_in_every_dtype() -> Result<()> {
    for kind in ["llama", "qwen2"] {
        for dtype in ["f32", "f16", "bf16"] {
            let weights = vec![fixture()
                .join(kind)
                .join(format!("model.{dtype}.safetensors"))];
            let worst = check(kind, dtype, &weights)?;
            eprintln!("{kind} {dtype}: largest |logit - transformers| = {worst:e}");
        }
    }
    Ok(())
}

#[test]
fn the_variant_and_tied_head_come_from_the_config() -> Result<()> {
    let qwen = llama::LlamaConfig::from_json_file(&fixture().join("qwen2/config.json"))?;
    assert_eq!(qwen.variant, LlamaVariant::Qwen2);
    assert!(qwen.tie_embeddings);
    assert_eq!(qwen.rope_theta, 50000.0);
    let llama = llama::LlamaConfig::from_json_file(&fixture().join("llama/config.json"))?;
    assert_eq!(llama.variant, LlamaVariant::Llama);
    assert!(!llama.tie_embeddings && !llama.rope_interleaved);
    Ok(())
}

/// The f32 checkpoint split into two shards loads to bitwise the same model.
#[test]
fn sharded_weights_load_identically() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let single = fixture().join("llama/model.f32.safetensors");
    let tensors = candle_core::safetensors::load(&single, &Device::Cpu)?;
    let (first, second): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .partition(|(name, _)| name.contains("layers.0") || name.contains("embed"));
    let shards = [
        dir.path().join("part1.safetensors"),
        dir.path().join("part2.safetensors"),
    ];
    for (path, part) in shards.iter().zip([first, second]) {
        let map: HashMap<String, Tensor> = part.into_iter().collect();
        candle_core::safetensors::save(&map, path)?;
    }
    let config = fixture().join("llama/config.json");
    let whole = llama::from_safetensors(&config, &[single], &Device::Cpu)?;
    let split = llama::from_safetensors(&config, &shards, &Device::Cpu)?;
    let ids = [3u32, 14, 159, 26, 535];
    let a = all_logits(&whole, &ids)?;
    let b = all_logits(&split, &ids)?;
    assert_eq!(a, b);
    Ok(())
}

#[test]
fn a_missing_tensor_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut tensors = candle_core::safetensors::load(
        fixture().join("qwen2/model.f32.safetensors"),
        &Device::Cpu,
    )?;
    tensors.remove("model.layers.1.self_attn.k_proj.bias");
    let path = dir.path().join("broken.safetensors");
    candle_core::safetensors::save(&tensors, &path)?;
    let err = llama::from_safetensors(&fixture().join("qwen2/config.json"), &[path], &Device::Cpu)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(
        err.contains("model.layers.1.self_attn.k_proj.bias"),
        "{err}"
    );
    Ok(())
}
