//! Reference-based text metrics, as pure functions: BLEU, chrF and chrF++ (numbers equal
//! to sacrebleu 2.x), ROUGE-1/2/L (equal to Google's rouge-score), and candidate scoring
//! against several references (the reference plus its paraphrases, for Para-Ref) with
//! max or mean aggregation, or each tool's own multi-reference rule.
//!
//! BERTScore, which needs an encoder model, lives in [`crate::engine`]'s neighbour
//! [`bertscore`]; its greedy matching is a pure function there too.

pub mod bertscore;
pub mod bleu;
pub mod chrf;
pub mod porter;
pub mod rouge;
pub mod text;

use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Result};

pub use bleu::{corpus_bleu, sentence_bleu};
pub use chrf::{corpus_chrf, sentence_chrf, ChrfConfig};
pub use rouge::{rouge, RougeType};

/// A lexical metric (no model needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LexicalMetric {
    Bleu,
    Chrf,
    ChrfPlusPlus,
    Rouge1,
    Rouge2,
    RougeL,
}

impl LexicalMetric {
    pub const ALL: [LexicalMetric; 6] = [
        LexicalMetric::Bleu,
        LexicalMetric::Chrf,
        LexicalMetric::ChrfPlusPlus,
        LexicalMetric::Rouge1,
        LexicalMetric::Rouge2,
        LexicalMetric::RougeL,
    ];

    /// The name used on the command line and in output rows.
    pub fn name(self) -> &'static str {
        match self {
            LexicalMetric::Bleu => "bleu",
            LexicalMetric::Chrf => "chrf",
            LexicalMetric::ChrfPlusPlus => "chrf++",
            LexicalMetric::Rouge1 => "rouge1",
            LexicalMetric::Rouge2 => "rouge2",
            LexicalMetric::RougeL => "rougeL",
        }
    }
}

impl fmt::Display for LexicalMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LexicalMetric {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<Self> {
        match LexicalMetric::ALL.into_iter().find(|m| m.name() == name) {
            Some(metric) => Ok(metric),
            None => bail!(
                "unknown metric '{name}' (known: {}, bertscore)",
                LexicalMetric::ALL.map(LexicalMetric::name).join(", ")
            ),
        }
    }
}

/// How a candidate's scores against several references become one score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aggregation {
    /// The best reference's score (Para-Ref's default).
    #[default]
    Max,
    /// The mean over references.
    Mean,
    /// The tool's own multi-reference rule: sacrebleu's pooled n-gram counts for BLEU,
    /// sacrebleu's best reference for chrF, rouge-score's `score_multi` (best F) for ROUGE.
    Native,
}

impl FromStr for Aggregation {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<Self> {
        match name {
            "max" => Ok(Aggregation::Max),
            "mean" => Ok(Aggregation::Mean),
            "native" => Ok(Aggregation::Native),
            _ => bail!("unknown aggregation '{name}' (known: max, mean, native)"),
        }
    }
}

/// Options of lexical scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LexicalOptions {
    pub aggregation: Aggregation,
    /// Porter stemmer for ROUGE (rouge-score's `use_stemmer`).
    pub stemmer: bool,
}

/// Max or mean of per-reference scores; `None` for no references.
pub fn aggregate(scores: &[f64], aggregation: Aggregation) -> Option<f64> {
    if scores.is_empty() {
        return None;
    }
    Some(match aggregation {
        Aggregation::Mean => scores.iter().sum::<f64>() / scores.len() as f64,
        // First of equal maxima, as numpy's argmax.
        Aggregation::Max | Aggregation::Native => scores
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, |best, s| if s > best { s } else { best }),
    })
}

/// One metric's score of `candidate` against `references` (at least one).
pub fn score_lexical<S: AsRef<str>>(
    metric: LexicalMetric,
    candidate: &str,
    references: &[S],
    options: LexicalOptions,
) -> Result<f64> {
    if references.is_empty() {
        bail!("{metric}: a candidate needs at least one reference");
    }
    if options.aggregation == Aggregation::Native {
        return Ok(match metric {
            LexicalMetric::Bleu => sentence_bleu(candidate, references),
            LexicalMetric::Chrf => sentence_chrf(candidate, references, ChrfConfig::CHRF),
            LexicalMetric::ChrfPlusPlus => {
                sentence_chrf(candidate, references, ChrfConfig::CHRF_PLUS_PLUS)
            }
            _ => per_reference_max(metric, candidate, references, options),
        });
    }
    let scores: Vec<f64> = references
        .iter()
        .map(|r| single(metric, candidate, r.as_ref(), options.stemmer))
        .collect();
    Ok(aggregate(&scores, options.aggregation).unwrap_or(0.0))
}

fn per_reference_max<S: AsRef<str>>(
    metric: LexicalMetric,
    candidate: &str,
    references: &[S],
    options: LexicalOptions,
) -> f64 {
    let scores: Vec<f64> = references
        .iter()
        .map(|r| single(metric, candidate, r.as_ref(), options.stemmer))
        .collect();
    aggregate(&scores, Aggregation::Max).unwrap_or(0.0)
}

/// One metric against one reference.
pub fn single(metric: LexicalMetric, candidate: &str, reference: &str, stemmer: bool) -> f64 {
    match metric {
        LexicalMetric::Bleu => sentence_bleu(candidate, &[reference]),
        LexicalMetric::Chrf => sentence_chrf(candidate, &[reference], ChrfConfig::CHRF),
        LexicalMetric::ChrfPlusPlus => {
            sentence_chrf(candidate, &[reference], ChrfConfig::CHRF_PLUS_PLUS)
        }
        LexicalMetric::Rouge1 => rouge(RougeType::Rouge1, reference, candidate, stemmer).fmeasure,
        LexicalMetric::Rouge2 => rouge(RougeType::Rouge2, reference, candidate, stemmer).fmeasure,
        LexicalMetric::RougeL => rouge(RougeType::RougeL, reference, candidate, stemmer).fmeasure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_and_mean_aggregate_per_reference_scores() {
        let refs = ["the cat sat", "a dog ran"];
        let first = single(LexicalMetric::Rouge1, "the cat ran", refs[0], false);
        let second = single(LexicalMetric::Rouge1, "the cat ran", refs[1], false);
        let options = |aggregation| LexicalOptions {
            aggregation,
            stemmer: false,
        };
        let max = score_lexical(
            LexicalMetric::Rouge1,
            "the cat ran",
            &refs,
            options(Aggregation::Max),
        );
        let mean = score_lexical(
            LexicalMetric::Rouge1,
            "the cat ran",
            &refs,
            options(Aggregation::Mean),
        );
        assert_eq!(max.unwrap(), first.max(second));
        assert_eq!(mean.unwrap(), (first + second) / 2.0);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_listed() {
        for metric in LexicalMetric::ALL {
            assert_eq!(metric.name().parse::<LexicalMetric>().unwrap(), metric);
        }
        let error = "bleurt".parse::<LexicalMetric>().unwrap_err().to_string();
        assert!(
            error.contains("bleurt") && error.contains("chrf++"),
            "{error}"
        );
    }

    #[test]
    fn no_reference_is_an_error() {
        let none: [&str; 0] = [];
        assert!(score_lexical(LexicalMetric::Bleu, "x", &none, LexicalOptions::default()).is_err());
    }
}
