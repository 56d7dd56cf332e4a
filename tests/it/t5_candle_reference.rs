//! Second reference: candle-transformers' own `t5` module on single, unpadded prompts.
//!
//! candle-transformers computes decoder position buckets with the bidirectional formula
//! and has no padding masks; both agree with ours (and transformers) for unpadded inputs
//! and decoder inputs shorter than 8 tokens, which is what is compared here. Its output
//! is the last decoder position's logits. Tolerance 1e-4 absolute (f32).

use crate::common;

use crate::common::t5::{flat, ids, max_abs_diff, reference};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::t5 as reference_t5;
use nlg_judge::arch::t5::{T5Config, T5Model, WeightFiles};

const TOLERANCE: f32 = 1e-4;

#[test]
fn single_prompts_match_candle_transformers() {
    let dir = common::t5::fixture_dir();
    let config_text = common::t5::fixture_config_text();
    let files = WeightFiles::find(&dir).unwrap();
    let ours = T5Model::from_files(
        &T5Config::from_json(&config_text).unwrap(),
        &files,
        &Device::Cpu,
    )
    .unwrap();
    let their_config: reference_t5::Config = serde_json::from_str(&config_text).unwrap();
    let vb = files.var_builder(DType::F32, &Device::Cpu).unwrap();
    let mut theirs = reference_t5::T5ForConditionalGeneration::load(vb, &their_config).unwrap();

    let r = reference();
    let summary = ids(&r["tokens"]["Summary"]);
    let label = ids(&r["tokens"][" A"]);
    for prompt in r["tokens"]["prompt_ids"].as_array().unwrap() {
        let prompt = ids(prompt);
        let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let their_encoding = theirs.encode(&input).unwrap();
        let our_encoding = ours.encode(std::slice::from_ref(&prompt)).unwrap();
        let diff = max_abs_diff(&flat(&our_encoding.hidden), &flat(&their_encoding));
        eprintln!("{} tokens: encoder differs by {diff:.2e}", prompt.len());
        assert!(diff < TOLERANCE, "encoder output differs by {diff}");

        let decoder_input = [vec![0], summary.clone(), label.clone()].concat();
        theirs.clear_kv_cache();
        let dec = Tensor::new(decoder_input.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let their_logits = theirs.decode(&dec, &their_encoding).unwrap();
        let mut cache = ours.start_decoder(&our_encoding).unwrap();
        let hidden = ours
            .decode_left_padded(std::slice::from_ref(&decoder_input), &mut cache)
            .unwrap();
        let last = hidden.narrow(1, decoder_input.len() - 1, 1).unwrap();
        let diff = max_abs_diff(&flat(&ours.logits(&last).unwrap()), &flat(&their_logits));
        eprintln!(
            "{} tokens: last-position logits differ by {diff:.2e}",
            prompt.len()
        );
        assert!(diff < TOLERANCE, "decoder logits differ by {diff}");
    }
}
