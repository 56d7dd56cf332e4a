//! `dhp analyze` against scipy: Wilcoxon p-values, combined p-values (paper's and
//! Wilson's), expert-weighted p-values and discernment scores on fixtures made once by
//! tests/fixtures/dhp/make_fixtures.py (scipy 1.17), covering exact, permutation and
//! normal-approximation p-values, ties, zero differences and n < 10.

use std::collections::BTreeMap;

use nlg_judge::dhp::{analyze, parse_score_rows, Weights};
use serde_json::Value;

/// Relative tolerance for p-values, absolute for discernment scores.
const TOLERANCE: f64 = 1e-9;

fn close_relative(actual: f64, expected: f64, what: &str) {
    let scale = expected.abs().max(f64::MIN_POSITIVE);
    assert!(
        (actual - expected).abs() <= TOLERANCE * scale,
        "{what}: {actual} vs scipy {expected}"
    );
}

fn close_absolute(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= TOLERANCE,
        "{what}: {actual} vs scipy {expected}"
    );
}

fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/dhp/analysis_cases.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    value["cases"].as_array().unwrap().clone()
}

#[test]
fn analysis_equals_scipy_on_every_fixture_case() {
    let cases = cases();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let rows: String = case["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{r}\n"))
            .collect();
        let rows = parse_score_rows(&rows, name).unwrap();
        let weights = Weights::parse(case["weights_toml"].as_str().unwrap(), name).unwrap();
        let analysis = analyze(&rows, Some(&weights)).unwrap();
        let expected = &case["expected"];
        let expected_list = expected["perturbations"].as_array().unwrap();
        assert_eq!(analysis.perturbations.len(), expected_list.len(), "{name}");
        for (actual, want) in analysis.perturbations.iter().zip(expected_list) {
            let what = format!("{name} / {}", actual.name);
            assert_eq!(actual.name, want["name"].as_str().unwrap(), "{what}");
            assert_eq!(actual.level.to_string(), want["level"].as_str().unwrap());
            assert_eq!(actual.n as u64, want["n"].as_u64().unwrap(), "{what}");
            let want_p: BTreeMap<String, f64> = serde_json::from_value(want["p"].clone()).unwrap();
            assert_eq!(
                actual.p.keys().collect::<Vec<_>>(),
                want_p.keys().collect::<Vec<_>>()
            );
            for (metric, p) in &want_p {
                close_relative(actual.p[metric], *p, &format!("{what} p[{metric}]"));
            }
            close_relative(
                actual.p_combined,
                want["p_combined"].as_f64().unwrap(),
                &what,
            );
            close_relative(actual.hmp, want["hmp"].as_f64().unwrap(), &what);
            close_relative(actual.p_ew.unwrap(), want["p_ew"].as_f64().unwrap(), &what);
            close_absolute(actual.d, want["D"].as_f64().unwrap(), &what);
            close_absolute(actual.d_ew.unwrap(), want["D_ew"].as_f64().unwrap(), &what);
        }
        close_absolute(analysis.d_avg, expected["D_avg"].as_f64().unwrap(), name);
        close_absolute(analysis.d_min, expected["D_min"].as_f64().unwrap(), name);
        close_absolute(
            analysis.d_ew_avg.unwrap(),
            expected["D_ew_avg"].as_f64().unwrap(),
            name,
        );
        close_absolute(
            analysis.d_ew_min.unwrap(),
            expected["D_ew_min"].as_f64().unwrap(),
            name,
        );
    }
}

#[test]
fn fixtures_cover_the_paths_of_scipys_auto_method() {
    // n < 10 without ties, n <= 13 with ties and zeros, 14..50 with ties, > 50.
    let sizes: Vec<u64> = cases()
        .iter()
        .map(|c| c["expected"]["perturbations"][0]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![8, 9, 30, 100]);
}

#[test]
fn weights_naming_an_unknown_metric_are_rejected() {
    let case = &cases()[0];
    let rows: String = case["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{r}\n"))
        .collect();
    let rows = parse_score_rows(&rows, "case").unwrap();
    let weights = Weights::parse("[typos]\nfluidity = 1\n", "mine.toml").unwrap();
    let error = analyze(&rows, Some(&weights)).unwrap_err().to_string();
    assert!(
        error.contains("mine.toml: [typos] names metric `fluidity`"),
        "{error}"
    );
}
