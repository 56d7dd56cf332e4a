//! A T5 checkpoint whose encoder and decoder embeddings are stored apart from
//! `shared.weight` (tests/fixtures/t5_untied, made by make_fixture.py with transformers
//! 5.x): each stack must read its own embedding, as transformers does.
//!
//! Tolerance: 1e-4 absolute on f32 encoder outputs and logits (same f32 weights on both
//! sides; the differences are summation order only).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::t5::{flat, floats, ids, max_abs_diff};
use candle_core::{Device, Tensor};
use nlg_judge::arch::t5::{T5Config, T5Model, WeightFiles};
use serde_json::Value;

const TOLERANCE: f32 = 1e-4;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/t5_untied")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(dir: &Path) -> T5Model {
    let config = T5Config::from_file(&dir.join("config.json")).unwrap();
    let files = WeightFiles::find(dir).unwrap();
    T5Model::from_files(&config, &files, &Device::Cpu).unwrap()
}

/// (encoder output, logits over the whole vocabulary at every decoder position).
fn run(model: &T5Model, r: &Value) -> (Vec<f32>, Vec<f32>) {
    let encoder = model.encode(&[ids(&r["encoder_ids"])]).unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    let hidden = model
        .decode_left_padded(&[ids(&r["decoder_ids"])], &mut cache)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let vocabulary: Vec<u32> = (0..96).collect();
    let logits = model.logits_for(&hidden, &vocabulary).unwrap();
    (flat(&encoder.hidden), flat(&logits))
}

#[test]
fn each_stack_reads_its_own_embedding_like_transformers() {
    let r = reference();
    let (encoder, logits) = run(&load(&fixture_dir()), &r);
    let encoder_diff = max_abs_diff(&encoder, &floats(&r["encoder_hidden"]));
    let logits_diff = max_abs_diff(&logits, &floats(&r["logits"]));
    eprintln!("encoder output differs by {encoder_diff:.2e}, logits by {logits_diff:.2e}");
    assert!(
        encoder_diff < TOLERANCE,
        "encoder output differs by {encoder_diff}"
    );
    assert!(logits_diff < TOLERANCE, "logits differ by {logits_diff}");
}

#[test]
fn without_the_stack_embeddings_the_shared_one_is_used() {
    // The same checkpoint with the stacks' own embeddings removed: both stacks now read
    // `shared.weight`, so the outputs move far from the reference (the fixture can tell
    // which matrix was read), and equal those of a checkpoint whose stack embeddings are
    // copies of the shared one.
    let r = reference();
    let tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(fixture_dir().join("model.safetensors"), &Device::Cpu)
            .unwrap();
    let shared = tensors["shared.weight"].clone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture_dir().join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let mut only_shared = tensors.clone();
    only_shared.remove("encoder.embed_tokens.weight");
    only_shared.remove("decoder.embed_tokens.weight");
    candle_core::safetensors::save(&only_shared, dir.path().join("model.safetensors")).unwrap();
    let (encoder, logits) = run(&load(dir.path()), &r);
    let moved = max_abs_diff(&encoder, &floats(&r["encoder_hidden"]));
    assert!(moved > 0.1, "encoder output moved only {moved}");

    let copies = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture_dir().join("config.json"),
        copies.path().join("config.json"),
    )
    .unwrap();
    let mut aliased = tensors;
    aliased.insert("encoder.embed_tokens.weight".into(), shared.clone());
    aliased.insert("decoder.embed_tokens.weight".into(), shared);
    candle_core::safetensors::save(&aliased, copies.path().join("model.safetensors")).unwrap();
    let (encoder_aliased, logits_aliased) = run(&load(copies.path()), &r);
    assert_eq!(encoder, encoder_aliased);
    assert_eq!(logits, logits_aliased);
}
