//! Our T5 against Hugging Face transformers (5.x, float32, eager attention) on the tiny
//! random-weight FlanT5-shaped fixture (tests/fixtures/t5, made by make_fixture.py).
//!
//! Tolerance: 1e-4 absolute on f32 hidden states, logits, log-sum-exps and log-probs
//! (both sides compute in f32 from the same bf16-rounded weights; the differences are
//! summation order only).

use crate::common;

use crate::common::t5::{flat, floats, ids, max_abs_diff, reference};
use candle_core::{DType, Device, Tensor};
use nlg_judge::arch::t5::{relative_position_bucket, T5Config, T5Model, WeightFiles};
use serde_json::Value;

const TOLERANCE: f32 = 1e-4;

fn load_fixture() -> T5Model {
    load_fixture_on(&Device::Cpu)
}

fn load_fixture_on(device: &Device) -> T5Model {
    let dir = common::t5::fixture_dir();
    let config = T5Config::from_file(&dir.join("config.json")).unwrap();
    let files = WeightFiles::find(&dir).unwrap();
    T5Model::from_files(&config, &files, device).unwrap()
}

/// Compare our hidden states (positions, d_model) with a reference record of probe
/// logits and log-sum-exps per position; returns the largest difference.
fn compare_logits(model: &T5Model, hidden: &Tensor, record: &Value, probes: &[u32]) -> f32 {
    let lse = flat(&model.log_normaliser(hidden).unwrap());
    let mut worst = max_abs_diff(&lse, &floats(&record["logsumexp"]));
    let ours = model.logits_for(hidden, probes).unwrap();
    let rows = record["probe_logits"].as_array().unwrap();
    assert_eq!(ours.dim(0).unwrap(), rows.len());
    for (i, row) in rows.iter().enumerate() {
        let diff = max_abs_diff(&flat(&ours.get(i).unwrap()), &floats(row));
        worst = worst.max(diff);
    }
    worst
}

#[test]
fn relative_position_buckets_match_transformers_in_both_directions() {
    let r = reference();
    let positions: Vec<i64> = r["buckets"]["relative_positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    for (mode, bidirectional) in [("bidirectional", true), ("unidirectional", false)] {
        let expected = ids(&r["buckets"][mode]);
        for (position, want) in positions.iter().zip(expected) {
            let got = relative_position_bucket(*position, bidirectional, 32, 128);
            assert_eq!(got as u32, want, "{mode} bucket of {position}");
        }
    }
}

#[test]
fn single_prompt_matches_transformers() {
    single_prompt_on(&Device::Cpu);
}

/// FlanT5 through candle's CUDA ops. Built only with `--features cuda` and run by
/// `scripts/gpu/run.sh` on a machine with a GPU: with this feature and no GPU it fails.
#[cfg(feature = "cuda")]
#[test]
fn single_prompt_on_the_gpu_matches_transformers() {
    single_prompt_on(&Device::new_cuda(0).expect("a CUDA device"));
}

fn single_prompt_on(device: &Device) {
    let r = reference();
    let model = load_fixture_on(device);
    let probes = ids(&r["probe_ids"]);
    let single = &r["single"];
    let encoder = model.encode(&[ids(&single["input_ids"])]).unwrap();
    let diff = max_abs_diff(&flat(&encoder.hidden), &floats(&single["encoder_hidden"]));
    eprintln!("encoder output differs by {diff:.2e}");
    assert!(diff < TOLERANCE, "encoder output differs by {diff}");

    let mut cache = model.start_decoder(&encoder).unwrap();
    let decoder_ids = ids(&single["decoder_input_ids"]);
    let hidden = model
        .decode_left_padded(&[decoder_ids], &mut cache)
        .unwrap();
    let diff = compare_logits(&model, &hidden.squeeze(0).unwrap(), single, &probes);
    eprintln!("decoder logits differ by {diff:.2e}");
    assert!(diff < TOLERANCE, "decoder logits differ by {diff}");
}

#[test]
fn padded_batch_with_masks_matches_transformers() {
    let r = reference();
    let model = load_fixture();
    let probes = ids(&r["probe_ids"]);
    let batch = &r["batch"];
    let rows: Vec<Vec<u32>> = batch["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let masks: Vec<Vec<u32>> = batch["attention_mask"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let (n, len) = (rows.len(), rows[0].len());
    let input = Tensor::from_vec(rows.concat(), (n, len), &Device::Cpu).unwrap();
    let mask = Tensor::from_vec(masks.concat(), (n, len), &Device::Cpu).unwrap();
    // The transformers-style padded batch and our own padding give the same batch.
    let encoder = model.encode_padded(&input, &mask).unwrap();
    let lengths: Vec<usize> = masks
        .iter()
        .map(|m| m.iter().sum::<u32>() as usize)
        .collect();
    assert!(
        lengths.iter().min() < lengths.iter().max(),
        "rows differ in length"
    );
    for (row, &length) in lengths.iter().enumerate() {
        let ours = encoder
            .hidden
            .get(row)
            .unwrap()
            .narrow(0, 0, length)
            .unwrap();
        let theirs = floats(&batch["encoder_hidden"][row]);
        let diff = max_abs_diff(&flat(&ours), &theirs);
        eprintln!("row {row}: encoder output differs by {diff:.2e}");
        assert!(
            diff < TOLERANCE,
            "row {row}: encoder output differs by {diff}"
        );
    }

    let mut cache = model.start_decoder(&encoder).unwrap();
    let decoder_ids = ids(&batch["decoder_input_ids"]);
    let hidden = model
        .decode_left_padded(&vec![decoder_ids; n], &mut cache)
        .unwrap();
    for row in 0..n {
        let diff = compare_logits(
            &model,
            &hidden.get(row).unwrap(),
            &batch["rows"][row],
            &probes,
        );
        eprintln!("row {row}: decoder logits differ by {diff:.2e}");
        assert!(
            diff < TOLERANCE,
            "row {row}: decoder logits differ by {diff}"
        );
    }
}

#[test]
fn two_token_label_logprobs_match_transformers() {
    let r = reference();
    let model = load_fixture();
    let record = &r["two_token_label"];
    let prompt = ids(&r["tokens"]["prompt_ids"][record["prompt"].as_u64().unwrap() as usize]);
    let label = ids(&record["label_ids"]);
    assert_eq!(label.len(), 2);
    let encoder = model.encode(&[prompt]).unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    // Teacher forcing: [start, first label token] predicts both label tokens.
    let hidden = model
        .decode_left_padded(&[vec![0, label[0]]], &mut cache)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let first = model.token_logprobs(&hidden.get(0).unwrap().unsqueeze(0).unwrap(), &label[..1]);
    let second = model.token_logprobs(&hidden.get(1).unwrap().unsqueeze(0).unwrap(), &label[1..]);
    let ours = [flat(&first.unwrap())[0], flat(&second.unwrap())[0]];
    let diff = max_abs_diff(&ours, &floats(&record["token_logprobs"]));
    eprintln!("label log-probs differ by {diff:.2e}");
    assert!(
        diff < TOLERANCE,
        "label log-probs differ by {diff}: {ours:?}"
    );
}

#[test]
fn decoding_token_by_token_through_the_cache_equals_one_pass() {
    let r = reference();
    let model = load_fixture();
    let single = &r["single"];
    let encoder = model.encode(&[ids(&single["input_ids"])]).unwrap();
    let decoder_ids = ids(&single["decoder_input_ids"]);

    let mut whole = model.start_decoder(&encoder).unwrap();
    let all_at_once = model
        .decode_left_padded(std::slice::from_ref(&decoder_ids), &mut whole)
        .unwrap();

    let mut stepwise = model.start_decoder(&encoder).unwrap();
    let mut worst = 0f32;
    for (position, &token) in decoder_ids.iter().enumerate() {
        let step = model
            .decode_left_padded(&[vec![token]], &mut stepwise)
            .unwrap();
        let expected = all_at_once.narrow(1, position, 1).unwrap();
        worst = worst.max(max_abs_diff(&flat(&step), &flat(&expected)));
    }
    assert_eq!(stepwise.len(), decoder_ids.len());
    // Same arithmetic in a different grouping: f32 rounding only.
    eprintln!("cached decoding differs by {worst:.2e}");
    assert!(worst < 1e-5, "cached decoding differs by {worst}");
}

#[test]
fn continuation_logprobs_reach_the_far_decoder_buckets_and_match_transformers() {
    let r = reference();
    let model = load_fixture();
    let record = &r["continuation"];
    let prompt = ids(&r["tokens"]["prompt_ids"][record["prompt"].as_u64().unwrap() as usize]);
    let prefix = ids(&r["tokens"]["Summary"]);
    let continuation = ids(&r["tokens"]["continuation_ids"]);
    assert!(
        prefix.len() + continuation.len() > 17,
        "past the 16 exact decoder buckets"
    );

    let encoder = model.encode(&[prompt]).unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    let mut input = vec![0];
    input.extend(&prefix);
    input.extend(&continuation[..continuation.len() - 1]);
    let hidden = model
        .decode_left_padded(&[input], &mut cache)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let mut ours = Vec::new();
    for (i, &token) in continuation.iter().enumerate() {
        let at = hidden.get(prefix.len() + i).unwrap().unsqueeze(0).unwrap();
        ours.push(flat(&model.token_logprobs(&at, &[token]).unwrap())[0]);
    }
    let diff = max_abs_diff(&ours, &floats(&record["token_logprobs"]));
    eprintln!("continuation log-probs differ by {diff:.2e}");
    assert!(diff < TOLERANCE, "continuation log-probs differ by {diff}");
}

#[test]
fn greedy_decoding_through_the_cache_reproduces_transformers_tokens() {
    let r = reference();
    let model = load_fixture();
    let record = &r["greedy"];
    let prompt = ids(&r["tokens"]["prompt_ids"][record["prompt"].as_u64().unwrap() as usize]);
    let expected = ids(&record["new_tokens"]);
    let encoder = model.encode(&[prompt]).unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    let mut next_input = vec![0];
    next_input.extend(ids(&r["tokens"]["Summary"]));
    let mut produced = Vec::new();
    while produced.len() < expected.len() {
        let hidden = model.decode_left_padded(&[next_input], &mut cache).unwrap();
        let last = hidden.get(0).unwrap();
        let last = last.get(last.dim(0).unwrap() - 1).unwrap();
        let logits = model.logits(&last).unwrap();
        let token = logits.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0];
        produced.push(token);
        next_input = vec![token];
    }
    assert_eq!(produced, expected);
}

#[test]
fn t5_v1_0_relu_with_tied_scaled_head_matches_transformers() {
    let r = reference();
    let probes = ids(&r["probe_ids"]);
    let (config_text, tensors) = common::t5::v1_0_variant();
    let dir = common::t5::model_dir_with(&config_text, &tensors);
    let config = T5Config::from_file(&dir.path().join("config.json")).unwrap();
    assert!(config.tie_word_embeddings && config.scale_decoder_outputs);
    let files = WeightFiles::find(dir.path()).unwrap();
    let model = T5Model::from_files(&config, &files, &Device::Cpu).unwrap();

    let record = &r["v1_0"];
    let encoder = model.encode(&[ids(&record["input_ids"])]).unwrap();
    let mut cache = model.start_decoder(&encoder).unwrap();
    let hidden = model
        .decode_left_padded(&[ids(&record["decoder_input_ids"])], &mut cache)
        .unwrap();
    let diff = compare_logits(&model, &hidden.squeeze(0).unwrap(), record, &probes);
    eprintln!("v1.0 logits differ by {diff:.2e}");
    assert!(diff < TOLERANCE, "v1.0 logits differ by {diff}");
}

#[test]
fn weights_stored_as_bf16_compute_in_f32() {
    let model = load_fixture();
    let encoder = model.encode(&[vec![100, 200, 1]]).unwrap();
    assert_eq!(encoder.hidden.dtype(), DType::F32);
}
