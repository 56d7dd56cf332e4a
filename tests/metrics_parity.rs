//! Parity of our BLEU, chrF, chrF++, ROUGE-1/2/L and Porter stemmer with sacrebleu 2.4.3,
//! rouge-score 0.1.2 and NLTK, on vectors made once by
//! tests/fixtures/metrics/make_fixtures.py (empty candidates and references, punctuation,
//! unicode, numbers, one and many references, corpus level). Tolerance 1e-9.

use nlg_judge::metrics::bleu::tokenize_13a;
use nlg_judge::metrics::rouge::{rouge, RougeType};
use nlg_judge::metrics::{
    corpus_bleu, corpus_chrf, porter, score_lexical, sentence_bleu, sentence_chrf, Aggregation,
    ChrfConfig, LexicalMetric, LexicalOptions,
};
use serde_json::Value;

const TOLERANCE: f64 = 1e-9;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics/vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn close(ours: f64, theirs: &Value, what: &str) {
    let theirs = theirs.as_f64().unwrap();
    assert!(
        (ours - theirs).abs() <= TOLERANCE,
        "{what}: ours {ours}, reference {theirs}"
    );
}

#[test]
fn tokenizer_13a_matches_sacrebleu() {
    for row in vectors()["sentences"].as_array().unwrap() {
        let texts: Vec<String> = std::iter::once(row["hypothesis"].as_str().unwrap().to_string())
            .chain(strings(&row["references"]))
            .collect();
        for (text, expected) in texts.iter().zip(strings(&row["tokens_13a"])) {
            let ours = tokenize_13a(text.trim_end_matches(nlg_judge::metrics::text::is_py_space));
            assert_eq!(ours, expected, "13a of {text:?}");
        }
    }
}

#[test]
fn sentence_bleu_and_chrf_match_sacrebleu() {
    for row in vectors()["sentences"].as_array().unwrap() {
        let hyp = row["hypothesis"].as_str().unwrap();
        let refs = strings(&row["references"]);
        let what = |m: &str| format!("{m} of {hyp:?} vs {refs:?}");
        close(
            sentence_bleu(hyp, &refs),
            &row["bleu_multi"],
            &what("multi-ref BLEU"),
        );
        close(
            sentence_chrf(hyp, &refs, ChrfConfig::CHRF),
            &row["chrf_multi"],
            &what("multi-ref chrF"),
        );
        close(
            sentence_chrf(hyp, &refs, ChrfConfig::CHRF_PLUS_PLUS),
            &row["chrfpp_multi"],
            &what("multi-ref chrF++"),
        );
        for (reference, per) in refs.iter().zip(row["per_reference"].as_array().unwrap()) {
            close(
                sentence_bleu(hyp, &[reference]),
                &per["bleu"],
                &what("BLEU"),
            );
            close(
                sentence_chrf(hyp, &[reference], ChrfConfig::CHRF),
                &per["chrf"],
                &what("chrF"),
            );
            close(
                sentence_chrf(hyp, &[reference], ChrfConfig::CHRF_PLUS_PLUS),
                &per["chrfpp"],
                &what("chrF++"),
            );
        }
    }
}

#[test]
fn rouge_matches_rouge_score_with_and_without_stemmer() {
    let kinds = [
        ("rouge1", RougeType::Rouge1, LexicalMetric::Rouge1),
        ("rouge2", RougeType::Rouge2, LexicalMetric::Rouge2),
        ("rougeL", RougeType::RougeL, LexicalMetric::RougeL),
    ];
    for row in vectors()["sentences"].as_array().unwrap() {
        let hyp = row["hypothesis"].as_str().unwrap();
        let refs = strings(&row["references"]);
        for (variant, stemmer) in [("plain", false), ("stemmed", true)] {
            for (name, kind, metric) in kinds {
                for (reference, per) in refs.iter().zip(row["per_reference"].as_array().unwrap()) {
                    let score = rouge(kind, reference, hyp, stemmer);
                    let expected = &per[variant][name];
                    let what = format!("{name} {variant} of {hyp:?} vs {reference:?}");
                    close(score.precision, &expected[0], &what);
                    close(score.recall, &expected[1], &what);
                    close(score.fmeasure, &expected[2], &what);
                }
                let options = LexicalOptions {
                    aggregation: Aggregation::Native,
                    stemmer,
                };
                close(
                    score_lexical(metric, hyp, &refs, options).unwrap(),
                    &row[format!("rouge_multi_{variant}")][name],
                    &format!("{name} {variant} score_multi of {hyp:?}"),
                );
            }
        }
    }
}

#[test]
fn corpus_bleu_and_chrf_match_sacrebleu() {
    let v = vectors();
    let corpus = &v["corpus"];
    let hyps = strings(&corpus["hypotheses"]);
    let refs: Vec<Vec<String>> = corpus["references"]
        .as_array()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    let first: Vec<Vec<String>> = refs.iter().map(|r| vec![r[0].clone()]).collect();
    close(
        corpus_bleu(&hyps, &refs),
        &corpus["bleu_multi"],
        "corpus BLEU, all refs",
    );
    close(
        corpus_bleu(&hyps, &first),
        &corpus["bleu_first"],
        "corpus BLEU, first ref",
    );
    close(
        corpus_chrf(&hyps, &refs, ChrfConfig::CHRF),
        &corpus["chrf_multi"],
        "corpus chrF, all refs",
    );
    close(
        corpus_chrf(&hyps, &first, ChrfConfig::CHRF),
        &corpus["chrf_first"],
        "corpus chrF, first ref",
    );
    close(
        corpus_chrf(&hyps, &first, ChrfConfig::CHRF_PLUS_PLUS),
        &corpus["chrfpp_first"],
        "corpus chrF++, first ref",
    );
}

#[test]
fn porter_stemmer_matches_nltk() {
    for pair in vectors()["porter"].as_array().unwrap() {
        let word = pair[0].as_str().unwrap();
        assert_eq!(
            porter::stem(word),
            pair[1].as_str().unwrap(),
            "stem of {word}"
        );
    }
}
