//! chrF and chrF++ exactly as sacrebleu 2.x's `CHRF`: character n-grams of orders 1-6
//! over the text with whitespace removed, plus (chrF++) word n-grams of orders 1-2 over
//! words with one leading or trailing punctuation mark split off; per order precision and
//! recall, averaged over the orders both sides have n-grams of (the "effective order"),
//! then an F-beta with beta 2. Against several references the one with the best score is
//! kept. Scores are on sacrebleu's 0-100 scale.

use std::collections::HashMap;

use super::text::py_split;

/// sacrebleu's defaults.
pub const CHAR_ORDER: usize = 6;
pub const BETA: f64 = 2.0;

/// Which chrF variant: word order 0 (chrF) or 2 (chrF++).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChrfConfig {
    pub char_order: usize,
    pub word_order: usize,
    pub beta: f64,
}

impl ChrfConfig {
    pub const CHRF: ChrfConfig = ChrfConfig {
        char_order: CHAR_ORDER,
        word_order: 0,
        beta: BETA,
    };
    pub const CHRF_PLUS_PLUS: ChrfConfig = ChrfConfig {
        char_order: CHAR_ORDER,
        word_order: 2,
        beta: BETA,
    };

    fn orders(&self) -> usize {
        self.char_order + self.word_order
    }
}

/// Per order `(hypothesis n-grams, reference n-grams, matches)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChrfStats(pub Vec<[usize; 3]>);

impl ChrfStats {
    /// Sum `other` into `self` (corpus statistics).
    pub fn add(&mut self, other: &ChrfStats) {
        if self.0.is_empty() {
            self.0 = vec![[0; 3]; other.0.len()];
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            for k in 0..3 {
                mine[k] += theirs[k];
            }
        }
    }
}

type Counts = HashMap<String, usize>;

/// sacrebleu's punctuation set for chrF++ words.
fn is_chrf_punct(c: char) -> bool {
    c.is_ascii_punctuation()
}

/// Words with one trailing (else one leading) punctuation mark split off.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in py_split(text) {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() == 1 {
            out.push(word.to_string());
        } else if is_chrf_punct(chars[chars.len() - 1]) {
            out.push(chars[..chars.len() - 1].iter().collect());
            out.push(chars[chars.len() - 1].to_string());
        } else if is_chrf_punct(chars[0]) {
            out.push(chars[0].to_string());
            out.push(chars[1..].iter().collect());
        } else {
            out.push(word.to_string());
        }
    }
    out
}

fn char_ngrams(text: &str, n: usize) -> Counts {
    let chars: Vec<char> = py_split(text).flat_map(str::chars).collect();
    let mut counts = Counts::new();
    for window in chars.windows(n) {
        *counts.entry(window.iter().collect()).or_insert(0) += 1;
    }
    counts
}

fn word_ngrams(words: &[String], n: usize) -> Counts {
    let mut counts = Counts::new();
    for window in words.windows(n) {
        *counts.entry(window.join("\u{0}")).or_insert(0) += 1;
    }
    counts
}

/// Counts of every order: characters 1..=char_order, then words 1..=word_order.
fn all_ngrams(text: &str, config: &ChrfConfig) -> Vec<Counts> {
    let mut all: Vec<Counts> = (1..=config.char_order)
        .map(|n| char_ngrams(text, n))
        .collect();
    if config.word_order > 0 {
        let words = words(text);
        all.extend((1..=config.word_order).map(|n| word_ngrams(&words, n)));
    }
    all
}

fn match_stats(hyp: &Counts, reference: &Counts) -> [usize; 3] {
    let mut matches = 0;
    let mut hyp_count = 0;
    for (gram, &count) in hyp {
        hyp_count += count;
        if let Some(&r) = reference.get(gram) {
            matches += count.min(r);
        }
    }
    let ref_count = reference.values().sum();
    [
        if reference.is_empty() { 0 } else { hyp_count },
        ref_count,
        matches,
    ]
}

/// The chrF score (0-100) of statistics, with sacrebleu's effective-order averaging.
pub fn chrf_from_stats(stats: &ChrfStats, config: &ChrfConfig) -> f64 {
    let factor = config.beta * config.beta;
    let mut avg_prec = 0.0f64;
    let mut avg_rec = 0.0f64;
    let mut effective = 0usize;
    for &[n_hyp, n_ref, n_match] in &stats.0 {
        if n_hyp > 0 && n_ref > 0 {
            avg_prec += n_match as f64 / n_hyp as f64;
            avg_rec += n_match as f64 / n_ref as f64;
            effective += 1;
        }
    }
    if effective == 0 {
        return 0.0;
    }
    avg_prec /= effective as f64;
    avg_rec /= effective as f64;
    if avg_prec + avg_rec == 0.0 {
        return 0.0;
    }
    let mut score = (1.0 + factor) * avg_prec * avg_rec;
    score /= factor * avg_prec + avg_rec;
    100.0 * score
}

/// The references of one segment, counted once.
#[derive(Debug, Clone)]
pub struct ChrfReferences {
    config: ChrfConfig,
    references: Vec<Vec<Counts>>,
}

impl ChrfReferences {
    pub fn new<S: AsRef<str>>(references: &[S], config: ChrfConfig) -> Self {
        Self {
            references: references
                .iter()
                .map(|r| all_ngrams(r.as_ref(), &config))
                .collect(),
            config,
        }
    }

    /// Statistics of `hypothesis` against the reference it scores best with (the first
    /// of equals). No references: empty statistics.
    pub fn stats(&self, hypothesis: &str) -> ChrfStats {
        let hyp = all_ngrams(hypothesis, &self.config);
        let mut best = ChrfStats(Vec::new());
        let mut best_score = -1.0;
        for reference in &self.references {
            let stats = ChrfStats(
                hyp.iter()
                    .zip(reference)
                    .map(|(h, r)| match_stats(h, r))
                    .collect(),
            );
            let score = chrf_from_stats(&stats, &self.config);
            if score > best_score {
                best_score = score;
                best = stats;
            }
        }
        best
    }

    pub fn config(&self) -> &ChrfConfig {
        &self.config
    }
}

/// Sentence chrF (or chrF++) of one hypothesis against one or more references.
pub fn sentence_chrf<S: AsRef<str>>(hypothesis: &str, references: &[S], config: ChrfConfig) -> f64 {
    let stats = ChrfReferences::new(references, config).stats(hypothesis);
    chrf_from_stats(&stats, &config)
}

/// Corpus chrF: statistics summed over segments.
pub fn corpus_chrf<S: AsRef<str>>(
    hypotheses: &[S],
    references: &[Vec<S>],
    config: ChrfConfig,
) -> f64 {
    let mut total = ChrfStats(vec![[0; 3]; config.orders()]);
    for (hypothesis, refs) in hypotheses.iter().zip(references) {
        total.add(&ChrfReferences::new(refs, config).stats(hypothesis.as_ref()));
    }
    chrf_from_stats(&total, &config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_text_scores_100() {
        let text = "A quick test, with punctuation.";
        assert!((sentence_chrf(text, &[text], ChrfConfig::CHRF) - 100.0).abs() < 1e-12);
        assert!((sentence_chrf(text, &[text], ChrfConfig::CHRF_PLUS_PLUS) - 100.0).abs() < 1e-12);
    }

    #[test]
    fn punctuation_is_split_from_one_end_only() {
        assert_eq!(words("(hi) x. ,y !"), ["(hi", ")", "x", ".", ",", "y", "!"]);
    }
}
