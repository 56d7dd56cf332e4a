//! Judge diagnostics: whether the judge was judging at all.
//!
//! A small model can answer every comparison with "A", spread its probability over
//! tokens that are not the labels, or write the same evaluation step over and over; the
//! scores it gives then look like results but say nothing about the texts. These checks
//! read a run's results (nothing is asked of the model) and say, for each, the value, the
//! threshold, whether it passed, and one line naming what to do about it:
//!
//! | check | value | warns when | remedy |
//! |---|---|---|---|
//! | `positional_bias` | share of comparisons the first candidate wins at p > 0.5 | outside [0.3, 0.7] | `--debias threshold`, `--rank poe` |
//! | `order_consistency` | share of pairs whose two orders agree | below 0.5 | `--rank poe`, a larger model |
//! | `ties` | share of candidates tied with another of their context | above 0.5 | `--rank poe`, `--debias threshold` |
//! | `label_mass` | mean probability on the answer labels (min in the message) | below 0.5 | a larger model, `--show-prompt` |
//! | `steps` (G-Eval) | most times one sentence of the evaluation steps repeats | above 2, or under 8 letters | `--steps FILE`, a larger model |
//!
//! Pure functions over results; the front ends show the [`Diagnostics`] (terminal block,
//! `--output`'s `.diagnostics.json` sidecar, the HTML report, Python, the service).

use std::collections::HashMap;

use serde::Serialize;

use super::pairwise::{CompareOptions, CompareResult, Debias, Design};
use super::scoring::{ResolvedMethod, ScoreRun};
use crate::rank::{ranks_from_scores, RankMethod};

/// Positional bias warns when the first position wins more than this share of the
/// comparisons, or less than one minus it.
pub const POSITIONAL_BIAS_LIMIT: f64 = 0.7;
/// Order consistency warns below this share (a coin agrees with itself half the time; a
/// judge that always answers "A" never does).
pub const CONSISTENCY_MIN: f64 = 0.5;
/// Ties warn when more than this share of the candidates share their score with another
/// candidate of their context.
pub const TIES_MAX: f64 = 0.5;
/// Label mass warns when the answer labels receive less than this probability on average.
pub const LABEL_MASS_MIN: f64 = 0.5;
/// G-Eval steps are degenerate when one sentence appears more than this many times.
pub const STEP_REPEATS_MAX: usize = 2;
/// G-Eval steps with fewer letters than this are degenerate (nearly empty).
pub const STEPS_MIN_LETTERS: usize = 8;

/// Whether a check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
}

/// Which side of the threshold warns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WarnWhen {
    Above,
    Below,
    /// Outside `[1 - threshold, threshold]`.
    Outside,
}

impl WarnWhen {
    fn warns(self, value: f64, threshold: f64) -> bool {
        match self {
            WarnWhen::Above => value > threshold,
            WarnWhen::Below => value < threshold,
            // Symmetric about 0.5, with room for rounding (0.3 is not below 1 - 0.7).
            WarnWhen::Outside => (value - 0.5).abs() > threshold - 0.5 + 1e-12,
        }
    }
}

/// One diagnostic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// `positional_bias`, `order_consistency`, `ties`, `label_mass` or `steps`.
    pub name: &'static str,
    pub value: f64,
    pub threshold: f64,
    pub warn_when: WarnWhen,
    pub status: Status,
    /// One line: what was measured, in words.
    pub message: String,
    /// One line: what to do (warnings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
}

impl Check {
    fn new(
        name: &'static str,
        value: f64,
        threshold: f64,
        warn_when: WarnWhen,
        message: String,
        remedy: &str,
    ) -> Self {
        let warn = warn_when.warns(value, threshold);
        Self {
            name,
            value,
            threshold,
            warn_when,
            status: if warn { Status::Warn } else { Status::Ok },
            message,
            remedy: warn.then(|| remedy.to_string()),
        }
    }

    pub fn is_warning(&self) -> bool {
        self.status == Status::Warn
    }
}

/// A run's diagnostics: the checks that apply to its method, and what the run changed on
/// their account.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Diagnostics {
    /// How many checks warn.
    pub warnings: usize,
    pub checks: Vec<Check>,
    /// A default the run replaced because of a check (e.g. the ranking method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjusted: Option<String>,
}

impl Diagnostics {
    pub fn new(checks: Vec<Check>) -> Self {
        Self {
            warnings: checks.iter().filter(|c| c.is_warning()).count(),
            checks,
            adjusted: None,
        }
    }

    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The terminal block: a heading, one line per check (warnings first, each followed
    /// by its remedy), and the adjusted default.
    pub fn text(&self) -> String {
        if self.checks.is_empty() && self.adjusted.is_none() {
            return String::new();
        }
        let mut text = format!(
            "judge diagnostics: {} warning{}\n",
            self.warnings,
            if self.warnings == 1 { "" } else { "s" }
        );
        let warnings = self.checks.iter().filter(|c| c.is_warning());
        for check in warnings {
            text.push_str(&format!("  WARNING {}: {}\n", check.name, check.message));
            if let Some(remedy) = &check.remedy {
                text.push_str(&format!("    remedy: {remedy}\n"));
            }
        }
        for check in self.checks.iter().filter(|c| !c.is_warning()) {
            text.push_str(&format!("  ok {}: {}\n", check.name, check.message));
        }
        if let Some(adjusted) = &self.adjusted {
            text.push_str(&format!("  note: {adjusted}\n"));
        }
        text
    }
}

/// Positional bias from the share of comparisons the first candidate won at p > 0.5 and
/// the mean p(A). `corrected`: the run decided at a balanced threshold, which removes it.
pub fn positional_bias(
    first_wins: f64,
    mean_p_a: f64,
    comparisons: usize,
    corrected: bool,
) -> Check {
    let mut check = Check::new(
        "positional_bias",
        first_wins,
        POSITIONAL_BIAS_LIMIT,
        WarnWhen::Outside,
        format!(
            "the first candidate won {first_wins:.3} of {comparisons} decided comparisons \
             (mean P(A) {mean_p_a:.3}; 0.5 is unbiased)"
        ),
        "the judge prefers a position: use --debias threshold (decide at the run's balanced \
         threshold) or --rank poe (cancels a constant bias over both orders)",
    );
    if corrected && check.is_warning() {
        check.status = Status::Ok;
        check.remedy = None;
        check.message.push_str("; corrected by --debias threshold");
    }
    check
}

/// Order consistency: the share of pairs compared in both orders whose decisions agree.
pub fn order_consistency(agree: f64, pairs: usize) -> Check {
    Check::new(
        "order_consistency",
        agree,
        CONSISTENCY_MIN,
        WarnWhen::Below,
        format!("both orders agreed on {agree:.3} of {pairs} pairs"),
        "the answers follow the order more than the texts: use --rank poe (reads both \
         orders' probabilities) or a larger model (--model)",
    )
}

/// Ties over contexts given each context's scores: the share of candidates sharing
/// their score with another candidate of their context, and the contexts where all tie.
pub fn ties(scores: &[&[f64]], remedy: &str) -> Option<Check> {
    let (mut tied, mut candidates, mut all_tied, mut contexts) = (0usize, 0usize, 0usize, 0usize);
    for scores in scores.iter().filter(|s| s.len() >= 2) {
        let ranks = ranks_from_scores(scores);
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for rank in &ranks {
            *counts.entry(rank.to_bits()).or_default() += 1;
        }
        let here = ranks.iter().filter(|r| counts[&r.to_bits()] > 1).count();
        tied += here;
        candidates += scores.len();
        contexts += 1;
        if counts.len() == 1 {
            all_tied += 1;
        }
    }
    if candidates == 0 {
        return None;
    }
    let share = tied as f64 / candidates as f64;
    Some(Check::new(
        "ties",
        share,
        TIES_MAX,
        WarnWhen::Above,
        format!(
            "{tied} of {candidates} candidates share their score with another; all tie in \
             {all_tied} of {contexts} context{}",
            if contexts == 1 { "" } else { "s" }
        ),
        remedy,
    ))
}

/// Label mass: the mean (and in the message the least) probability the answer labels
/// received.
pub fn label_mass(masses: &[f64], labels: &str) -> Option<Check> {
    if masses.is_empty() {
        return None;
    }
    let mean = masses.iter().sum::<f64>() / masses.len() as f64;
    let min = masses.iter().copied().fold(f64::INFINITY, f64::min);
    Some(Check::new(
        "label_mass",
        mean,
        LABEL_MASS_MIN,
        WarnWhen::Below,
        format!(
            "the {labels} received {mean:.3} of the probability on average (least {min:.3}) \
             over {} answers",
            masses.len()
        ),
        "the model mostly wants to answer something else: check the prompt with \
         --show-prompt, or use a larger instruction-tuned model (--model)",
    ))
}

/// What is wrong with a list of evaluation steps, if anything: nearly empty, or one
/// sentence repeated more than [`STEP_REPEATS_MAX`] times.
pub fn steps_problem(text: &str) -> Option<String> {
    let letters = text.chars().filter(|c| c.is_alphabetic()).count();
    if letters < STEPS_MIN_LETTERS {
        return Some(format!(
            "the steps are nearly empty ({letters} letters, fewer than {STEPS_MIN_LETTERS})"
        ));
    }
    let (sentence, count) = most_repeated_sentence(text)?;
    (count > STEP_REPEATS_MAX)
        .then(|| format!("one sentence is repeated {count} times: \"{sentence}\""))
}

/// The sentence of `text` that occurs most often (compared in lower case, list numbers
/// and punctuation dropped) and how often; `None` without sentences.
pub fn most_repeated_sentence(text: &str) -> Option<(String, usize)> {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    let mut order = 0;
    for piece in text.split(['\n', '.', '!', '?', ';']) {
        let words: Vec<String> = piece
            .split_whitespace()
            .map(|w| {
                w.chars()
                    .filter(|c| c.is_alphanumeric())
                    .flat_map(char::to_lowercase)
                    .collect::<String>()
            })
            .filter(|w| !w.is_empty())
            .collect();
        if !words.iter().any(|w| w.chars().any(char::is_alphabetic)) {
            continue;
        }
        let entry = counts.entry(words.join(" ")).or_insert((0, order));
        entry.0 += 1;
        order += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.1 .1.cmp(&a.1 .1)))
        .map(|(sentence, (count, _))| (sentence, count))
}

/// The check of G-Eval's evaluation steps: the most repeated sentence's count.
pub fn steps(text: &str) -> Check {
    let repeats = most_repeated_sentence(text).map_or(0, |(_, n)| n);
    let problem = steps_problem(text);
    let mut check = Check::new(
        "steps",
        repeats as f64,
        STEP_REPEATS_MAX as f64,
        WarnWhen::Above,
        match &problem {
            Some(problem) => format!("degenerate evaluation steps: {problem}"),
            None => {
                format!("no sentence of the evaluation steps repeats more than {repeats} time(s)")
            }
        },
        "",
    );
    if problem.is_some() {
        check.status = Status::Warn;
    }
    if check.is_warning() {
        check.remedy = Some(
            "write the evaluation steps yourself and pass --steps FILE, or use a larger model \
             (--model)"
                .to_string(),
        );
    }
    check
}

/// The remedy for ties under `rank`.
fn ties_remedy(rank: RankMethod) -> &'static str {
    match rank {
        RankMethod::WinRatio => {
            "the 0.5 decisions cannot separate the candidates: use --rank poe or --rank \
             bradley-terry (read the probabilities), or --debias threshold"
        }
        _ => "the judge does not separate the candidates: use a larger model (--model)",
    }
}

/// Whether a design compares pairs in both orders (so that a constant positional bias
/// cancels in a probability-based ranking).
pub fn both_orders(design: Design) -> bool {
    matches!(design, Design::Full | Design::Symmetric)
}

/// The diagnostics of a compare run (its rank and debias choices name the remedies).
pub fn for_compare(result: &CompareResult, options: &CompareOptions) -> Diagnostics {
    let comparisons: Vec<_> = result
        .contexts
        .iter()
        .flat_map(|c| &c.comparisons)
        .collect();
    let mut checks = Vec::new();
    if !comparisons.is_empty() {
        let mean_p = comparisons.iter().map(|c| c.p_a).sum::<f64>() / comparisons.len() as f64;
        // Decided comparisons only: a judge answering 0.5 everywhere has no position bias.
        let wins = comparisons.iter().filter(|c| c.p_a > 0.5).count();
        let losses = comparisons.iter().filter(|c| c.p_a < 0.5).count();
        let share = if wins + losses == 0 {
            0.5
        } else {
            wins as f64 / (wins + losses) as f64
        };
        checks.push(positional_bias(
            share,
            mean_p,
            wins + losses,
            options.debias == Debias::Threshold,
        ));
    }
    if let Some(agree) = result.consistency.value() {
        checks.push(order_consistency(agree, result.consistency.total));
    }
    let scores: Vec<&[f64]> = result
        .contexts
        .iter()
        .map(|c| c.scores.as_slice())
        .collect();
    checks.extend(ties(&scores, ties_remedy(result.rank)));
    let masses: Vec<f64> = comparisons.iter().map(|c| c.label_mass).collect();
    checks.extend(label_mass(&masses, "labels A and B"));
    Diagnostics::new(checks)
}

/// The diagnostics of a scoring run: label mass and ties for prompt scoring and G-Eval,
/// the evaluation steps for G-Eval (GPTScore has none of these).
pub fn for_scores(run: &ScoreRun) -> Diagnostics {
    let mut checks = Vec::new();
    if let ResolvedMethod::Geval { steps: s, .. } = &run.method {
        checks.push(steps(&s.text));
    }
    if !matches!(run.method, ResolvedMethod::Gptscore { .. }) {
        let masses: Vec<f64> = run
            .candidates
            .iter()
            .filter_map(|c| c.distribution.as_ref().map(|d| d.mass))
            .collect();
        checks.extend(label_mass(&masses, "score labels"));
        let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
        for candidate in &run.candidates {
            match groups.last_mut() {
                Some((id, scores)) if *id == candidate.context_id => scores.push(candidate.score),
                _ => groups.push((candidate.context_id.clone(), vec![candidate.score])),
            }
        }
        let scores: Vec<&[f64]> = groups.iter().map(|(_, s)| s.as_slice()).collect();
        checks.extend(ties(
            &scores,
            "the judge gives the candidates the same score: use a larger model (--model), \
             or compare them pairwise (nlg-judge compare)",
        ));
    }
    Diagnostics::new(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_bias_warns_outside_the_band_unless_corrected() {
        let biased = positional_bias(0.92, 0.78, 240, false);
        assert_eq!(biased.status, Status::Warn);
        assert!(biased
            .remedy
            .as_deref()
            .unwrap()
            .contains("--debias threshold"));
        assert!(
            biased.message.contains("0.920 of 240 decided"),
            "{}",
            biased.message
        );
        assert_eq!(positional_bias(0.25, 0.3, 10, false).status, Status::Warn);
        assert_eq!(positional_bias(0.7, 0.6, 10, false).status, Status::Ok);
        assert_eq!(positional_bias(0.3, 0.4, 10, false).status, Status::Ok);
        let corrected = positional_bias(0.92, 0.78, 240, true);
        assert_eq!(corrected.status, Status::Ok);
        assert!(corrected.remedy.is_none());
        assert!(corrected
            .message
            .ends_with("corrected by --debias threshold"));
    }

    #[test]
    fn consistency_warns_below_one_half() {
        let check = order_consistency(0.1, 120);
        assert!(check.is_warning());
        assert!(check.remedy.as_deref().unwrap().contains("--rank poe"));
        assert!(!order_consistency(0.5, 120).is_warning());
    }

    #[test]
    fn ties_count_candidates_and_whole_contexts() {
        let all = [0.5, 0.5, 0.5, 0.5];
        let some = [1.0, 0.5, 0.5, 0.0];
        let none = [3.0, 2.0, 1.0, 0.0];
        let check = ties(&[&all, &some, &none], "remedy").unwrap();
        assert!((check.value - 6.0 / 12.0).abs() < 1e-12);
        assert!(!check.is_warning(), "exactly at the threshold passes");
        assert!(
            check.message.contains("all tie in 1 of 3 contexts"),
            "{}",
            check.message
        );
        let check = ties(&[&all, &some], "remedy").unwrap();
        assert!(check.is_warning());
        assert_eq!(check.remedy.as_deref(), Some("remedy"));
        assert!(ties(&[&[1.0][..]], "remedy").is_none());
    }

    #[test]
    fn label_mass_warns_below_one_half_and_names_the_least() {
        let check = label_mass(&[0.05, 0.18, 0.1], "score labels").unwrap();
        assert!(check.is_warning());
        assert!((check.value - 0.11).abs() < 1e-12);
        assert!(check.message.contains("least 0.050"), "{}", check.message);
        assert!(!label_mass(&[0.8, 0.6], "labels").unwrap().is_warning());
        assert!(label_mass(&[], "labels").is_none());
    }

    #[test]
    fn repeated_or_empty_steps_are_degenerate() {
        let repeated = "1. Read the summary.\n2. Read the summary.\n3. Check the order.\n\
                        4. Read the summary!";
        assert_eq!(
            most_repeated_sentence(repeated),
            Some(("read the summary".to_string(), 3))
        );
        assert!(steps_problem(repeated)
            .unwrap()
            .contains("repeated 3 times"));
        let check = steps(repeated);
        assert!(check.is_warning());
        assert!(check.remedy.as_deref().unwrap().contains("--steps FILE"));
        assert!(steps_problem("1.").unwrap().contains("nearly empty"));
        assert!(steps("1. Ok.").is_warning());
        let good = "1. Read the article.\n2. Read the summary.\n3. Rate the coherence.";
        assert_eq!(steps_problem(good), None);
        let check = steps(good);
        assert!(!check.is_warning() && check.value == 1.0);
        // Twice is allowed.
        assert_eq!(
            steps_problem("1. Read it all.\n2. Read it all.\n3. Score it."),
            None
        );
    }

    #[test]
    fn the_block_puts_warnings_first_with_their_remedies() {
        let mut diagnostics = Diagnostics::new(vec![
            order_consistency(0.9, 10),
            positional_bias(1.0, 0.8, 10, false),
        ]);
        diagnostics.adjusted = Some("ranked by poe".into());
        assert_eq!(diagnostics.warnings, 1);
        let text = diagnostics.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "judge diagnostics: 1 warning");
        assert!(lines[1].starts_with("  WARNING positional_bias: "));
        assert!(lines[2].starts_with("    remedy: "));
        assert!(lines[3].starts_with("  ok order_consistency: "));
        assert_eq!(lines[4], "  note: ranked by poe");
        let json = serde_json::to_value(&diagnostics).unwrap();
        assert_eq!(json["checks"][1]["status"], "warn");
        assert_eq!(json["checks"][1]["warn_when"], "outside");
        assert!(json["checks"][0].get("remedy").is_none());
        assert_eq!(Diagnostics::default().text(), "");
    }
}
