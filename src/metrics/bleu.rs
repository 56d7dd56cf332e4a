//! BLEU exactly as sacrebleu 2.x computes it: the `13a` tokeniser (mteval-v13a), clipped
//! n-gram counts up to order 4 against one or many references (per n-gram the largest
//! count in any reference), the closest reference length (ties to the shorter) for the
//! brevity penalty, and `exp` smoothing. Sentence BLEU uses the effective order (orders
//! the hypothesis has no n-grams of are left out), corpus BLEU does not. Scores are on
//! sacrebleu's 0-100 scale.

use std::collections::HashMap;

use super::text::{py_rstrip, py_split};

/// Highest n-gram order.
pub const MAX_ORDER: usize = 4;

/// Sufficient statistics of one segment (summed over a corpus).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BleuStats {
    pub hyp_len: usize,
    pub ref_len: usize,
    pub correct: [usize; MAX_ORDER],
    pub total: [usize; MAX_ORDER],
}

impl std::ops::AddAssign for BleuStats {
    fn add_assign(&mut self, other: Self) {
        self.hyp_len += other.hyp_len;
        self.ref_len += other.ref_len;
        for n in 0..MAX_ORDER {
            self.correct[n] += other.correct[n];
            self.total[n] += other.total[n];
        }
    }
}

/// The `13a` tokeniser: mteval-v13a's rules (punctuation and symbols split off, periods
/// and commas split unless inside a number, a dash after a digit split), words joined by
/// single spaces.
pub fn tokenize_13a(line: &str) -> String {
    let mut line = line
        .replace("<skipped>", "")
        .replace("-\n", "")
        .replace('\n', " ");
    if line.contains('&') {
        line = line
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    let padded: Vec<char> = format!(" {line} ").chars().collect();
    // Rule 1: symbols and most ASCII punctuation become words of their own.
    let mut step: Vec<char> = Vec::with_capacity(padded.len() * 2);
    for &c in &padded {
        if is_13a_symbol(c) {
            step.extend([' ', c, ' ']);
        } else {
            step.push(c);
        }
    }
    let is_digit = |c: char| c.is_ascii_digit();
    let is_period_comma = |c: char| c == '.' || c == ',';
    // Rule 2: a period or comma after a non-digit: "x." -> "x . ".
    let step = substitute_pairs(
        &step,
        |a, b| !is_digit(a) && is_period_comma(b),
        |a, b| vec![a, ' ', b, ' '],
    );
    // Rule 3: a period or comma before a non-digit: ".x" -> " . x".
    let step = substitute_pairs(
        &step,
        |a, b| is_period_comma(a) && !is_digit(b),
        |a, b| vec![' ', a, ' ', b],
    );
    // Rule 4: a dash after a digit: "3-" -> "3 - ".
    let step = substitute_pairs(
        &step,
        |a, b| is_digit(a) && b == '-',
        |a, b| vec![a, ' ', b, ' '],
    );
    let text: String = step.into_iter().collect();
    py_split(&text).collect::<Vec<_>>().join(" ")
}

/// `[{-~[-` -&(-+:-@/]`: the characters rule 1 of 13a splits off.
fn is_13a_symbol(c: char) -> bool {
    matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/')
}

/// A regular-expression substitution of a two-character pattern, scanning left to right
/// without overlaps (as Python's `re.sub` does for such a pattern).
fn substitute_pairs(
    chars: &[char],
    matches: impl Fn(char, char) -> bool,
    replace: impl Fn(char, char) -> Vec<char>,
) -> Vec<char> {
    let mut out = Vec::with_capacity(chars.len() + chars.len() / 2);
    let mut i = 0;
    while i < chars.len() {
        if i + 1 < chars.len() && matches(chars[i], chars[i + 1]) {
            out.extend(replace(chars[i], chars[i + 1]));
            i += 2;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// sacrebleu's preprocessing of a segment: trailing whitespace removed, then `13a`.
fn preprocess(segment: &str) -> Vec<String> {
    tokenize_13a(py_rstrip(segment))
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

type Ngrams = HashMap<Vec<String>, usize>;

fn ngrams(tokens: &[String]) -> Ngrams {
    let mut counts = Ngrams::new();
    for n in 1..=MAX_ORDER {
        for window in tokens.windows(n) {
            *counts.entry(window.to_vec()).or_insert(0) += 1;
        }
    }
    counts
}

/// The references of one segment, tokenised and counted once.
#[derive(Debug, Clone)]
pub struct BleuReferences {
    /// Per n-gram, its largest count in any reference.
    max_counts: Ngrams,
    lengths: Vec<usize>,
}

impl BleuReferences {
    pub fn new<S: AsRef<str>>(references: &[S]) -> Self {
        let mut max_counts = Ngrams::new();
        let mut lengths = Vec::with_capacity(references.len());
        for reference in references {
            let tokens = preprocess(reference.as_ref());
            lengths.push(tokens.len());
            for (gram, count) in ngrams(&tokens) {
                let slot = max_counts.entry(gram).or_insert(0);
                *slot = (*slot).max(count);
            }
        }
        Self {
            max_counts,
            lengths,
        }
    }

    /// The statistics of `hypothesis` against these references.
    pub fn stats(&self, hypothesis: &str) -> BleuStats {
        let tokens = preprocess(hypothesis);
        let hyp_len = tokens.len();
        let mut stats = BleuStats {
            hyp_len,
            ref_len: closest_length(hyp_len, &self.lengths),
            ..BleuStats::default()
        };
        for (gram, count) in ngrams(&tokens) {
            let n = gram.len() - 1;
            stats.total[n] += count;
            if let Some(&reference) = self.max_counts.get(&gram) {
                stats.correct[n] += count.min(reference);
            }
        }
        stats
    }
}

/// The reference length closest to the hypothesis length; ties go to the shorter one.
/// No references: 0.
fn closest_length(hyp_len: usize, lengths: &[usize]) -> usize {
    let mut best: Option<(usize, usize)> = None;
    for &length in lengths {
        let diff = hyp_len.abs_diff(length);
        best = match best {
            Some((best_diff, best_len))
                if diff > best_diff || (diff == best_diff && length >= best_len) =>
            {
                Some((best_diff, best_len))
            }
            _ => Some((diff, length)),
        };
    }
    best.map_or(0, |(_, length)| length)
}

/// BLEU from statistics with `exp` smoothing (each order without a match gets precision
/// 100 / (2^k * total), k counting such orders); `effective_order` leaves out orders the
/// hypothesis has no n-grams of.
pub fn bleu_from_stats(stats: &BleuStats, effective_order: bool) -> f64 {
    let sys_len = stats.hyp_len as f64;
    let ref_len = stats.ref_len as f64;
    let brevity = if stats.hyp_len < stats.ref_len {
        if stats.hyp_len > 0 {
            (1.0 - ref_len / sys_len).exp()
        } else {
            0.0
        }
    } else {
        1.0
    };
    if stats.correct.iter().all(|&c| c == 0) {
        return 0.0;
    }
    let mut precisions = [0.0f64; MAX_ORDER];
    let mut smooth = 1.0f64;
    let mut order = MAX_ORDER;
    #[allow(clippy::needless_range_loop)] // n indexes three arrays in step
    for n in 0..MAX_ORDER {
        if stats.total[n] == 0 {
            break;
        }
        if effective_order {
            order = n + 1;
        }
        precisions[n] = if stats.correct[n] == 0 {
            smooth *= 2.0;
            100.0 / (smooth * stats.total[n] as f64)
        } else {
            100.0 * stats.correct[n] as f64 / stats.total[n] as f64
        };
    }
    // sacrebleu takes log(0) as -9999999999 (a score of 0 after exp).
    let log_sum = precisions[..order]
        .iter()
        .map(|&p| if p == 0.0 { -9_999_999_999.0 } else { p.ln() })
        .fold(0.0, |sum, log| sum + log);
    brevity * (log_sum / order as f64).exp()
}

/// Sentence BLEU (sacrebleu's `sentence_bleu`: exp smoothing, effective order) of one
/// hypothesis against one or more references.
pub fn sentence_bleu<S: AsRef<str>>(hypothesis: &str, references: &[S]) -> f64 {
    bleu_from_stats(&BleuReferences::new(references).stats(hypothesis), true)
}

/// Corpus BLEU (sacrebleu's `corpus_bleu` defaults): statistics summed over segments,
/// `references[i]` holding segment i's references.
pub fn corpus_bleu<S: AsRef<str>>(hypotheses: &[S], references: &[Vec<S>]) -> f64 {
    let mut total = BleuStats::default();
    for (hypothesis, refs) in hypotheses.iter().zip(references) {
        total += BleuReferences::new(refs).stats(hypothesis.as_ref());
    }
    bleu_from_stats(&total, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokeniser_splits_punctuation_but_not_numbers() {
        assert_eq!(
            tokenize_13a("Hello, world! It costs $3.50 (or 3-4 euros)."),
            "Hello , world ! It costs $ 3.50 ( or 3 - 4 euros ) ."
        );
        assert_eq!(tokenize_13a("a &amp; b"), "a & b");
    }

    #[test]
    fn identical_sentence_scores_100_and_disjoint_scores_0() {
        let text = "the cat sat on the mat";
        assert!((sentence_bleu(text, &[text]) - 100.0).abs() < 1e-12);
        assert_eq!(sentence_bleu("x y z", &["a b c"]), 0.0);
    }

    #[test]
    fn closest_reference_length_prefers_the_shorter_on_ties() {
        assert_eq!(closest_length(5, &[7, 3]), 3);
        assert_eq!(closest_length(5, &[6, 4, 9]), 4);
        assert_eq!(closest_length(5, &[]), 0);
    }
}
