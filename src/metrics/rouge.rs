//! ROUGE-1, ROUGE-2 and ROUGE-L F-measures exactly as Google's `rouge-score` computes
//! them: its tokeniser (lower-case, every run of characters outside [a-z0-9] a
//! separator, optionally the Porter stemmer on tokens longer than three letters), clipped
//! n-gram overlap, and the longest common subsequence for ROUGE-L (summary-level
//! ROUGE-Lsum is not offered). Scores are in [0, 1] as rouge-score gives them.

use std::collections::HashMap;

use super::porter;

/// The ROUGE variants offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RougeType {
    Rouge1,
    Rouge2,
    RougeL,
}

/// Precision, recall and F-measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RougeScore {
    pub precision: f64,
    pub recall: f64,
    pub fmeasure: f64,
}

impl RougeScore {
    fn new(precision: f64, recall: f64) -> Self {
        let fmeasure = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        Self {
            precision,
            recall,
            fmeasure,
        }
    }
}

/// rouge-score's tokeniser.
pub fn tokenize(text: &str, stemmer: bool) -> Vec<String> {
    let lower = text.to_lowercase();
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|token| !token.is_empty())
        .map(|token| {
            if stemmer && token.len() > 3 {
                porter::stem(token)
            } else {
                token.to_string()
            }
        })
        .filter(|token| {
            !token.is_empty()
                && token
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
        .collect()
}

fn ngram_counts(tokens: &[String], n: usize) -> HashMap<&[String], usize> {
    let mut counts = HashMap::new();
    for window in tokens.windows(n) {
        *counts.entry(window).or_insert(0) += 1;
    }
    counts
}

fn score_ngrams(target: &[String], prediction: &[String], n: usize) -> RougeScore {
    let target_counts = ngram_counts(target, n);
    let prediction_counts = ngram_counts(prediction, n);
    let overlap: usize = target_counts
        .iter()
        .map(|(gram, &count)| count.min(prediction_counts.get(gram).copied().unwrap_or(0)))
        .sum();
    let target_total: usize = target_counts.values().sum();
    let prediction_total: usize = prediction_counts.values().sum();
    RougeScore::new(
        overlap as f64 / prediction_total.max(1) as f64,
        overlap as f64 / target_total.max(1) as f64,
    )
}

fn lcs_length(a: &[String], b: &[String]) -> usize {
    let mut previous = vec![0usize; b.len() + 1];
    let mut current = vec![0usize; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            current[j + 1] = if x == y {
                previous[j] + 1
            } else {
                current[j].max(previous[j + 1])
            };
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

fn score_lcs(target: &[String], prediction: &[String]) -> RougeScore {
    if target.is_empty() || prediction.is_empty() {
        return RougeScore::new(0.0, 0.0);
    }
    let lcs = lcs_length(target, prediction) as f64;
    RougeScore::new(lcs / prediction.len() as f64, lcs / target.len() as f64)
}

/// ROUGE of tokenised texts.
pub fn rouge_tokens(kind: RougeType, target: &[String], prediction: &[String]) -> RougeScore {
    match kind {
        RougeType::Rouge1 => score_ngrams(target, prediction, 1),
        RougeType::Rouge2 => score_ngrams(target, prediction, 2),
        RougeType::RougeL => score_lcs(target, prediction),
    }
}

/// ROUGE of `prediction` against one `target` (rouge-score's `RougeScorer.score`).
pub fn rouge(kind: RougeType, target: &str, prediction: &str, stemmer: bool) -> RougeScore {
    rouge_tokens(
        kind,
        &tokenize(target, stemmer),
        &tokenize(prediction, stemmer),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokeniser_keeps_ascii_letters_and_digits_only() {
        assert_eq!(
            tokenize("The cat's 3 hats—café!", false),
            ["the", "cat", "s", "3", "hats", "caf"]
        );
        assert_eq!(tokenize("Running dogs", true), ["run", "dog"]);
    }

    #[test]
    fn lcs_of_a_known_pair() {
        let score = rouge(RougeType::RougeL, "a b c d e", "a x c e", false);
        assert_eq!(score.precision, 3.0 / 4.0);
        assert_eq!(score.recall, 3.0 / 5.0);
    }
}
