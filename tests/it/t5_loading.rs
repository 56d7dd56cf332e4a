//! Loading T5 checkpoints: sharded and single-file weights, stored dtypes and embedding
//! aliases give bitwise-identical outputs; malformed checkpoints give errors that name
//! the file or tensor at fault.

use crate::common;

use std::collections::HashMap;

use crate::common::t5::{fixture_config_text, fixture_tensors, flat, model_dir_with};
use candle_core::{DType, Device, Tensor};
use nlg_judge::arch::t5::{T5Config, T5Model, WeightFiles, INDEX_FILE};

/// Encoder output and full decoder logits of a fixed two-prompt batch, flattened.
fn outputs_of(dir: &std::path::Path) -> Vec<f32> {
    let config = T5Config::from_file(&dir.join("config.json")).unwrap();
    let files = WeightFiles::find(dir).unwrap();
    let model = T5Model::from_files(&config, &files, &Device::Cpu).unwrap();
    let encoder = model
        .encode(&[vec![37, 1782, 19, 207, 1], vec![8, 1]])
        .unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    let hidden = model
        .decode_left_padded(&[vec![0, 20698], vec![0, 20698]], &mut cache)
        .unwrap();
    let mut out = flat(&encoder.hidden);
    out.extend(flat(&model.logits(&hidden).unwrap()));
    out
}

fn load_error(config: &str, tensors: &HashMap<String, Tensor>) -> String {
    let dir = model_dir_with(config, tensors);
    let config = T5Config::from_file(&dir.path().join("config.json")).unwrap();
    let files = WeightFiles::find(dir.path()).unwrap();
    let err = T5Model::from_files(&config, &files, &Device::Cpu).unwrap_err();
    format!("{err:#}")
}

#[test]
fn sharded_checkpoint_loads_bitwise_identically() {
    let single = outputs_of(&common::t5::fixture_dir());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), fixture_config_text()).unwrap();
    let (mut first, mut second) = (HashMap::new(), HashMap::new());
    let mut weight_map = serde_json::Map::new();
    for (name, tensor) in fixture_tensors() {
        let shard = if name.starts_with("encoder.") || name == "shared.weight" {
            first.insert(name.clone(), tensor);
            "model-00001-of-00002.safetensors"
        } else {
            second.insert(name.clone(), tensor);
            "model-00002-of-00002.safetensors"
        };
        weight_map.insert(name, shard.into());
    }
    candle_core::safetensors::save(&first, dir.path().join("model-00001-of-00002.safetensors"))
        .unwrap();
    candle_core::safetensors::save(&second, dir.path().join("model-00002-of-00002.safetensors"))
        .unwrap();
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();

    let files = WeightFiles::find(dir.path()).unwrap();
    assert_eq!(files.files.len(), 2);
    assert!(files.index.is_some());
    assert_eq!(outputs_of(dir.path()), single);

    // The fingerprint (as users' loads compute it) covers both shards: changing either
    // changes it.
    std::fs::copy(
        common::t5::t5_tokenizer_path(),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let fingerprint = || {
        let records = tempfile::tempdir().unwrap();
        let options = common::resolve_options_in(records.path());
        nlg_judge::runtime::resolve_model(dir.path().to_str().unwrap(), &options)
            .unwrap()
            .fingerprint
    };
    let before = fingerprint();
    let mut changed = second.clone();
    let norm = "decoder.final_layer_norm.weight".to_string();
    changed.insert(norm.clone(), (second[&norm].clone() * 2.0).unwrap());
    candle_core::safetensors::save(
        &changed,
        dir.path().join("model-00002-of-00002.safetensors"),
    )
    .unwrap();
    assert_ne!(fingerprint(), before);
}

#[test]
fn f32_storage_and_embedding_aliases_give_identical_outputs() {
    let reference = outputs_of(&common::t5::fixture_dir());
    // bf16 -> f32 is exact, so the f32 checkpoint holds the same values; the embedding
    // appears under the per-stack names instead of shared.weight.
    let mut tensors = HashMap::new();
    for (name, tensor) in fixture_tensors() {
        let tensor = tensor.to_dtype(DType::F32).unwrap();
        if name == "shared.weight" {
            tensors.insert("encoder.embed_tokens.weight".to_string(), tensor.clone());
            tensors.insert("decoder.embed_tokens.weight".to_string(), tensor);
        } else {
            tensors.insert(name, tensor);
        }
    }
    let dir = model_dir_with(&fixture_config_text(), &tensors);
    assert_eq!(outputs_of(dir.path()), reference);
}

#[test]
fn f16_storage_gives_the_same_outputs_within_rounding() {
    let reference = outputs_of(&common::t5::fixture_dir());
    // bf16 -> f16 keeps every bit of the fixture's normal-range values; only values
    // below f16's normal range (~6e-5) lose precision.
    let tensors: HashMap<String, Tensor> = fixture_tensors()
        .into_iter()
        .map(|(name, t)| (name, t.to_dtype(DType::F16).unwrap()))
        .collect();
    let dir = model_dir_with(&fixture_config_text(), &tensors);
    let ours = outputs_of(dir.path());
    let diff = common::t5::max_abs_diff(&ours, &reference);
    assert!(diff < 1e-4, "f16 checkpoint differs by {diff}");
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named() {
    let mut tensors = fixture_tensors();
    let name = "decoder.block.1.layer.1.EncDecAttention.k.weight";
    let transposed = tensors[name].t().unwrap().contiguous().unwrap();
    tensors.insert(name.to_string(), transposed);
    let err = load_error(&fixture_config_text(), &tensors);
    assert!(err.contains(name), "{err}");
    assert!(err.contains("shape"), "{err}");
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn a_missing_layer_tensor_is_named() {
    let mut tensors = fixture_tensors();
    let name = "encoder.block.1.layer.1.DenseReluDense.wi_1.weight";
    tensors.remove(name).unwrap();
    let err = load_error(&fixture_config_text(), &tensors);
    assert!(err.contains(name), "{err}");
}

#[test]
fn an_untied_config_without_lm_head_is_refused() {
    let mut tensors = fixture_tensors();
    tensors.remove("lm_head.weight").unwrap();
    let err = load_error(&fixture_config_text(), &tensors);
    assert!(
        err.contains("lm_head.weight") && err.contains("tie_word_embeddings"),
        "{err}"
    );
}

#[test]
fn a_checkpoint_without_any_embedding_is_refused() {
    let mut tensors = fixture_tensors();
    tensors.remove("shared.weight").unwrap();
    let err = load_error(&fixture_config_text(), &tensors);
    assert!(
        err.contains("shared.weight") && err.contains("embedding"),
        "{err}"
    );
}

#[test]
fn a_relu_config_over_gated_weights_is_refused() {
    // T5 v1.0 expects DenseReluDense.wi; the fixture has wi_0/wi_1.
    let config = fixture_config_text().replace("\"gated-gelu\"", "\"relu\"");
    let err = load_error(&config, &fixture_tensors());
    assert!(err.contains("DenseReluDense.wi.weight"), "{err}");
}

#[test]
fn a_missing_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = T5Config::from_file(&dir.path().join("config.json")).unwrap_err();
    assert!(format!("{err:#}").contains("config.json"), "{err:#}");
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused() {
    let dir = common::t5::fixture_dir();
    let config = T5Config::from_file(&dir.join("config.json")).unwrap();
    let model =
        T5Model::from_files(&config, &WeightFiles::find(&dir).unwrap(), &Device::Cpu).unwrap();
    let err = model.encode(&[vec![5, 40_000, 1]]).unwrap_err();
    assert!(err.to_string().contains("40000"), "{err}");
    let encoder = model.encode(&[vec![5, 1]]).unwrap();
    let hidden = model
        .decode_left_padded(&[vec![0]], &mut model.start_decoder(&encoder).unwrap())
        .unwrap();
    let err = model.logits_for(&hidden, &[32_128]).unwrap_err();
    assert!(err.to_string().contains("32128"), "{err}");
}
