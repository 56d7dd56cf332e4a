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
//! | `positional_bias` | share of comparisons the first candidate wins at p > 0.5 | outside [0.3, 0.7] | `--debias threshold`, `--rank poe`, both orders |
//! | `order_consistency` | share of pairs whose two orders agree | below 0.5 | `--rank poe`, a larger model |
//! | `ties` | share of candidates tied with another of their context | above 0.5 | `--rank poe` or `bradley-terry`, `--debias threshold`, a larger model |
//! | `tie_rate` (judges that may answer a tie) | share of comparisons whose most likely answer is the tie (mean P(tie) and how the ranking counted ties in the message) | above 0.5 | `--rank poe` (P(A) against P(B)), a protocol without a tie, a larger model |
//! | `label_mass` | mean probability on the answer labels (min in the message) | below 0.5 | a larger model, `--show-prompt` |
//! | `steps` (G-Eval) | most times one sentence of the evaluation steps repeats | above 2, or under 8 letters | `--steps FILE`, a larger model |
//! | `too_long` (compare) | candidates left out because no comparison of theirs fits the model | above 0 | shorter texts, a model with a longer window |
//! | `prior_slope` (compare with absolute scores as experts) | the run's one fitted slope from the absolute scores onto the comparisons | below 0 (held at 0 unless 2 standard errors below) | more comparisons; check the score file |
//! | `format` (rubric grading with feedback) | share of feedbacks with the result marker once, then a score of the scale | below 0.8 | `--max-feedback-tokens` (when cut), `--no-feedback`, a larger model |
//!
//! A remedy names only what would change this run's result, in the words of whoever
//! reads it ([`Audience`]: a flag on the command line, a request field of the service, a
//! keyword in Python), never a choice already in effect; and a check is `ok` only where
//! the run's result is actually corrected (a positional bias under `--debias threshold`
//! for decisions, or under Product of Experts over both orders, where a constant bias
//! cancels; PoE ignores a threshold there, so the threshold is not offered).
//!
//! Pure functions over results; the front ends show the [`Diagnostics`] (terminal block,
//! `--output`'s `.diagnostics.json` sidecar, the HTML report, Python, the service).

use std::collections::HashMap;

use serde::Serialize;

use super::pairwise::{CompareOptions, CompareResult, Debias, Design};
use super::rubric::protocol::Choices;
use super::rubric::FormatCounts;
use super::scoring::{ResolvedMethod, ScoreRun};
use crate::rank::hybrid::SIGN_EVIDENCE;
use crate::rank::{ranks_from_scores, RankMethod, SlopeFit};

/// Positional bias warns when the first position wins more than this share of the
/// comparisons, or less than one minus it.
pub const POSITIONAL_BIAS_LIMIT: f64 = 0.7;
/// Order consistency warns below this share (a coin agrees with itself half the time; a
/// judge that always answers "A" never does).
pub const CONSISTENCY_MIN: f64 = 0.5;
/// Ties warn when more than this share of the candidates share their score with another
/// candidate of their context.
pub const TIES_MAX: f64 = 0.5;
/// The tie rate warns when the tie is the judge's most likely answer in more than this
/// share of the comparisons (it then says little about which candidate is better).
pub const TIE_RATE_MAX: f64 = 0.5;
/// Label mass warns when the answer labels receive less than this probability on average.
pub const LABEL_MASS_MIN: f64 = 0.5;
/// G-Eval steps are degenerate when one sentence appears more than this many times.
pub const STEP_REPEATS_MAX: usize = 2;
/// G-Eval steps with fewer letters than this are degenerate (nearly empty).
pub const STEPS_MIN_LETTERS: usize = 8;
/// A rubric judge's format warns when fewer than this share of its feedbacks end with the
/// result marker once and a score of the scale (a judge model trained on its format keeps
/// to it nearly always).
pub const FORMAT_KEPT_MIN: f64 = 0.8;

/// Who reads the remedies: each names what that reader can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Audience {
    /// Command-line flags (`--rank poe`).
    #[default]
    CommandLine,
    /// The service's request fields (`"rank": "poe"`).
    Service,
    /// The Python package's keywords (`rank="poe"`).
    Python,
}

/// Something a user can change about a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Decide at the run's balanced threshold.
    DebiasThreshold,
    /// Rank by Product of Experts.
    RankPoe,
    /// Rank by Product of Experts or Bradley-Terry (the probabilities, not decisions).
    RankProbabilities,
    /// Compare each pair in both orders.
    BothOrders,
    /// Another, larger model.
    LargerModel,
    /// Look at the prompt the model reads.
    ShowPrompt,
    /// Give the G-Eval steps.
    StepsFile,
    /// Compare the candidates pairwise instead of scoring them.
    ComparePairwise,
    /// Shorten the texts.
    Shorten,
    /// A model with a longer context window.
    LongerModel,
    /// Read the rubric score right after the prompt, without a feedback.
    NoFeedback,
    /// Give the feedback more tokens.
    MoreFeedbackTokens,
    /// Compare more pairs per context.
    MoreComparisons,
    /// Keep less room for the feedback.
    FewerFeedbackTokens,
    /// Rank by Product of Experts, which reads P(A) against P(B) and leaves the tie out.
    RankPoeWithoutTies,
    /// A judge protocol without a tie label.
    ProtocolWithoutTie,
}

impl Action {
    /// The action in `audience`'s words; `None` where that reader cannot take it.
    fn phrase(self, audience: Audience) -> Option<&'static str> {
        use Audience::*;
        Some(match (self, audience) {
            (Action::DebiasThreshold, CommandLine) => {
                "--debias threshold (decide at the run's balanced threshold)"
            }
            (Action::DebiasThreshold, Service) => {
                "\"debias\": \"threshold\" (decide at the request's balanced threshold)"
            }
            (Action::DebiasThreshold, Python) => {
                "debias=\"threshold\" (decide at the run's balanced threshold)"
            }
            (Action::RankPoe, CommandLine) => "--rank poe (reads both orders' probabilities)",
            (Action::RankPoe, Service) => "\"rank\": \"poe\" (reads both orders' probabilities)",
            (Action::RankPoe, Python) => "rank=\"poe\" (reads both orders' probabilities)",
            (Action::RankProbabilities, CommandLine) => {
                "--rank poe or --rank bradley-terry (read the probabilities)"
            }
            (Action::RankProbabilities, Service) => {
                "\"rank\": \"poe\" or \"bradley-terry\" (read the probabilities)"
            }
            (Action::RankProbabilities, Python) => {
                "rank=\"poe\" or rank=\"bradley-terry\" (read the probabilities)"
            }
            (Action::BothOrders, CommandLine) => {
                "--design full or symmetric (both orders of each pair, so that a constant bias \
                 cancels)"
            }
            (Action::BothOrders, Python) => {
                "design=\"full\" or \"symmetric\" (both orders of each pair, so that a \
                 constant bias cancels)"
            }
            (Action::BothOrders, Service) => return None,
            (Action::LargerModel, CommandLine) => "a larger model (--model)",
            (Action::LargerModel, Service) => "a larger model (serve one with --model)",
            (Action::LargerModel, Python) => "a larger model (Judge(model=...))",
            (Action::MoreComparisons, CommandLine) => {
                "more comparisons per context (--comparisons N, or --design full)"
            }
            (Action::MoreComparisons, Service) => {
                "more comparisons per context (field \"comparisons\", or \"design\": \"full\")"
            }
            (Action::MoreComparisons, Python) => {
                "more comparisons per context (comparisons=N, or design=\"full\")"
            }
            (Action::ShowPrompt, CommandLine) => "--show-prompt (to check the prompt)",
            (Action::ShowPrompt, _) => return None,
            (Action::StepsFile, CommandLine) => "evaluation steps of your own (--steps FILE)",
            (Action::StepsFile, Service) => "evaluation steps of your own (field \"steps\")",
            (Action::StepsFile, Python) => "evaluation steps of your own (steps=...)",
            (Action::ComparePairwise, CommandLine) => "pairwise comparison (nlg-judge compare)",
            (Action::ComparePairwise, Service) => "pairwise comparison (/v1/compare)",
            (Action::ComparePairwise, Python) => "pairwise comparison (Judge.compare)",
            (Action::Shorten, _) => "shorter texts",
            (Action::LongerModel, CommandLine) => "a model with a longer context window (--model)",
            (Action::LongerModel, Service) => {
                "a model with a longer context window (serve one with --model)"
            }
            (Action::LongerModel, Python) => {
                "a model with a longer context window (Judge(model=...))"
            }
            (Action::NoFeedback, CommandLine) => {
                "--no-feedback (read the score right after the rubric prompt)"
            }
            (Action::MoreFeedbackTokens, CommandLine) => {
                "a larger --max-feedback-tokens (room to finish the feedback)"
            }
            (Action::NoFeedback, Service) => {
                "\"feedback\": false (read the score right after the rubric prompt)"
            }
            (Action::NoFeedback, Python) => {
                "feedback=False (read the score right after the rubric prompt)"
            }
            (Action::MoreFeedbackTokens, Service) => {
                "a larger \"max_feedback_tokens\" (room to finish the feedback)"
            }
            (Action::MoreFeedbackTokens, Python) => {
                "a larger max_feedback_tokens= (room to finish the feedback)"
            }
            (Action::FewerFeedbackTokens, CommandLine) => {
                "a smaller --max-feedback-tokens (less room kept for the feedback)"
            }
            // Relative grading (the only user of this one) is the command line's only.
            (Action::FewerFeedbackTokens, Service | Python) => return None,
            (Action::RankPoeWithoutTies, CommandLine) => {
                "--rank poe (reads P(A) against P(B), the tie left out)"
            }
            (Action::RankPoeWithoutTies, Service) => {
                "\"rank\": \"poe\" (reads P(A) against P(B), the tie left out)"
            }
            (Action::RankPoeWithoutTies, Python) => {
                "rank=\"poe\" (reads P(A) against P(B), the tie left out)"
            }
            (Action::ProtocolWithoutTie, CommandLine) => {
                "a protocol without a tie label (--protocol)"
            }
            (Action::ProtocolWithoutTie, Service) => {
                "a protocol without a tie label (field \"protocol\")"
            }
            (Action::ProtocolWithoutTie, Python) => "a protocol without a tie label (protocol=...)",
        })
    }
}

/// The choice of ranking `method` (as `--rank` names it: `win-ratio`) in `audience`'s
/// words: `--rank win-ratio`, `"rank": "win-ratio"`, `rank="win-ratio"`.
pub fn rank_choice(method: &str, audience: Audience) -> String {
    match audience {
        Audience::CommandLine => format!("--rank {method}"),
        Audience::Service => format!("\"rank\": \"{method}\""),
        Audience::Python => format!("rank=\"{method}\""),
    }
}

/// `why`, then the actions `audience` can take, joined: "why: use A, or B".
fn remedy(why: &str, actions: &[Action], audience: Audience) -> String {
    let phrases: Vec<&str> = actions.iter().filter_map(|a| a.phrase(audience)).collect();
    match phrases.as_slice() {
        [] => why.to_string(),
        [one] => format!("{why}: use {one}"),
        [rest @ .., last] => format!("{why}: use {}, or {last}", rest.join(", ")),
    }
}

/// Whether a check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
}

/// Which side of the threshold warns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// `positional_bias`, `order_consistency`, `ties`, `tie_rate`, `label_mass`, `steps`,
    /// `format`, ...
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
    /// How many units `value` is over (decided comparisons, pairs, candidates, answers;
    /// 1 for the steps, the count itself for `too_long`): the weights that combine the
    /// checks of a sharded run's shards ([`combine_shards`]).
    pub count: usize,
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
            count: 1,
        }
    }

    /// The check, its value over `count` units.
    fn over(mut self, count: usize) -> Self {
        self.count = count;
        self
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

    /// Add a check (counted among the warnings when it warns).
    pub fn push(&mut self, check: Check) {
        if check.is_warning() {
            self.warnings += 1;
        }
        self.checks.push(check);
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

/// What a compare run chose that decides which remedies can change its result: the
/// ranking in effect (after any fallback), the debiasing, whether each pair is compared
/// in both orders, and who reads the remedies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunChoices {
    pub rank: RankMethod,
    pub debias: Debias,
    pub both_orders: bool,
    pub audience: Audience,
}

impl RunChoices {
    /// Whether a constant positional bias cancels in the ranking: Product of Experts
    /// fits logit differences, and a constant added to every logit cancels between a
    /// pair's two orders (the threshold's reweighting is such a constant).
    fn ranking_cancels_bias(self) -> bool {
        self.rank == RankMethod::Poe && self.both_orders
    }
}

/// Positional bias from the share of comparisons the first candidate won at p > 0.5 and
/// the mean p(A), under the run's `choices`: corrected (ok) where the run's ranking
/// removes it, else a warning whose remedy names only what would change the result.
pub fn positional_bias(
    first_wins: f64,
    mean_p_a: f64,
    comparisons: usize,
    choices: RunChoices,
) -> Check {
    let mut actions = Vec::new();
    if choices.debias == Debias::None && !choices.ranking_cancels_bias() {
        actions.push(Action::DebiasThreshold);
    }
    if choices.rank != RankMethod::Poe && choices.both_orders {
        actions.push(Action::RankPoe);
    }
    if !choices.both_orders {
        actions.push(Action::BothOrders);
    }
    let mut check = Check::new(
        "positional_bias",
        first_wins,
        POSITIONAL_BIAS_LIMIT,
        WarnWhen::Outside,
        format!(
            "the first candidate won {first_wins:.3} of {comparisons} decided comparisons \
             (mean P(A) {mean_p_a:.3}; 0.5 is unbiased)"
        ),
        &remedy("the judge prefers a position", &actions, choices.audience),
    )
    .over(comparisons);
    if check.is_warning() {
        let corrected = if choices.ranking_cancels_bias() {
            Some("; cancelled in the ranking (Product of Experts over both orders)")
        } else if choices.debias == Debias::Threshold {
            Some(match choices.audience {
                Audience::CommandLine => "; corrected by --debias threshold",
                Audience::Service => "; corrected by \"debias\": \"threshold\"",
                Audience::Python => "; corrected by debias=\"threshold\"",
            })
        } else {
            None
        };
        if let Some(note) = corrected {
            check.status = Status::Ok;
            check.remedy = None;
            check.message.push_str(note);
        }
    }
    check
}

/// Order consistency: the share of pairs compared in both orders whose decisions agree.
/// A property of the judge: no ranking corrects it; Product of Experts (where not in
/// effect) at least reads both orders' probabilities.
pub fn order_consistency(agree: f64, pairs: usize, choices: RunChoices) -> Check {
    let mut actions = Vec::new();
    if choices.rank != RankMethod::Poe {
        actions.push(Action::RankPoe);
    }
    actions.push(Action::LargerModel);
    Check::new(
        "order_consistency",
        agree,
        CONSISTENCY_MIN,
        WarnWhen::Below,
        format!("both orders agreed on {agree:.3} of {pairs} pairs"),
        &remedy(
            "the answers follow the order more than the texts",
            &actions,
            choices.audience,
        ),
    )
    .over(pairs)
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
    Some(
        Check::new(
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
        )
        .over(candidates),
    )
}

/// The judge's ties (a protocol with a tie label): the share of the `comparisons` whose
/// most likely answer is the tie (`decided` of them), the mean P(tie) and how the
/// ranking in effect (`rank`) counted the ties, in the message.
pub fn tie_rate(
    decided: usize,
    comparisons: usize,
    mean_tie: f64,
    rank: RankMethod,
    audience: Audience,
) -> Check {
    let share = if comparisons == 0 {
        0.0
    } else {
        decided as f64 / comparisons as f64
    };
    let mut actions = Vec::new();
    if rank != RankMethod::Poe {
        actions.push(Action::RankPoeWithoutTies);
    }
    actions.extend([Action::ProtocolWithoutTie, Action::LargerModel]);
    Check::new(
        "tie_rate",
        share,
        TIE_RATE_MAX,
        WarnWhen::Above,
        format!(
            "the tie was the most likely answer in {decided} of {comparisons} comparisons \
             (mean P(tie) {mean_tie:.3}); {}",
            rank.ties_note()
        ),
        &remedy(
            "the judge calls most comparisons a tie, which says little about which is better",
            &actions,
            audience,
        ),
    )
    .over(comparisons)
}

/// Coverage: candidates that are in no comparison of their context (a sparse design's
/// budget did not reach them). Every ranking puts them at its neutral value, in the middle
/// of their context, from no evidence; any such candidate warns. `None` where no context
/// has two candidates. `contexts`: each context's number of candidates and its compared
/// pairs (candidate indices).
pub fn uncompared(contexts: &[(usize, Vec<(usize, usize)>)], audience: Audience) -> Option<Check> {
    let (mut missing, mut candidates, mut with_missing) = (0usize, 0usize, 0usize);
    for (size, pairs) in contexts.iter().filter(|(size, _)| *size >= 2) {
        let mut seen = vec![false; *size];
        for &(first, second) in pairs {
            seen[first] = true;
            seen[second] = true;
        }
        let here = seen.iter().filter(|s| !**s).count();
        missing += here;
        candidates += seen.len();
        with_missing += usize::from(here > 0);
    }
    if candidates == 0 {
        return None;
    }
    Some(
        Check::new(
            "uncompared",
            missing as f64 / candidates as f64,
            0.0,
            WarnWhen::Above,
            format!(
                "{missing} of {candidates} candidates are in no comparison (in {with_missing} \
                 context{}); they sit at the middle of their context's ranking",
                if with_missing == 1 { "" } else { "s" }
            ),
            &remedy(
                "the design's budget did not reach every candidate",
                &[Action::MoreComparisons],
                audience,
            ),
        )
        .over(candidates),
    )
}

/// Label mass: the mean (and in the message the least) probability the answer labels
/// received.
pub fn label_mass(masses: &[f64], labels: &str, audience: Audience) -> Option<Check> {
    if masses.is_empty() {
        return None;
    }
    let mean = masses.iter().sum::<f64>() / masses.len() as f64;
    let min = masses.iter().copied().fold(f64::INFINITY, f64::min);
    Some(
        Check::new(
            "label_mass",
            mean,
            LABEL_MASS_MIN,
            WarnWhen::Below,
            format!(
                "the {labels} received {mean:.3} of the probability on average (least {min:.3}) \
             over {} answers",
                masses.len()
            ),
            &remedy(
                "the model mostly wants to answer something else",
                &[Action::ShowPrompt, Action::LargerModel],
                audience,
            ),
        )
        .over(masses.len()),
    )
}

/// Candidates left out of a run because their comparisons exceed the model's window
/// (`judge::pairwise::fit`): a warning naming the first few, `None` when there are none.
pub fn too_long(aside: &[super::pairwise::fit::SetAside], audience: Audience) -> Option<Check> {
    const NAMED: usize = 3;
    if aside.is_empty() {
        return None;
    }
    let mut named: Vec<String> = aside.iter().take(NAMED).map(|s| s.describe()).collect();
    if aside.len() > NAMED {
        named.push(format!("and {} more", aside.len() - NAMED));
    }
    Some(
        Check::new(
            "too_long",
            aside.len() as f64,
            0.0,
            WarnWhen::Above,
            format!(
                "{} candidate{} not ranked (left out of the output): {}",
                aside.len(),
                if aside.len() == 1 { "" } else { "s" },
                named.join("; ")
            ),
            &remedy(
                "they do not fit the model with any other candidate",
                &if aside.iter().any(|s| s.feedback_tokens.is_some()) {
                    vec![
                        Action::FewerFeedbackTokens,
                        Action::NoFeedback,
                        Action::Shorten,
                        Action::LongerModel,
                    ]
                } else {
                    vec![Action::Shorten, Action::LongerModel]
                },
                audience,
            ),
        )
        .over(aside.len()),
    )
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
pub fn steps(text: &str, audience: Audience) -> Check {
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
        check.remedy = Some(remedy(
            "the evaluation steps say little",
            &[Action::StepsFile, Action::LargerModel],
            audience,
        ));
    }
    check
}

/// The format of a rubric judge's feedbacks: the share that wrote `marker` once and then
/// a result (a score of the scale; with relative grading's `choices`, one of them, named
/// as the protocol writes them: "A or B", "Response 1, Response 2 or Tie"), the other
/// outcomes counted in the message.
pub fn rubric_format(
    counts: &FormatCounts,
    marker: &str,
    choices: Option<&Choices>,
    audience: Audience,
) -> Option<Check> {
    let total = counts.total();
    if total == 0 {
        return None;
    }
    let mut actions = Vec::new();
    if counts.cut > 0 {
        actions.push(Action::MoreFeedbackTokens);
    }
    actions.extend([Action::NoFeedback, Action::LargerModel]);
    let (result, missing) = match choices {
        Some(choices) => {
            let named = choices.named();
            (named.clone(), format!("without {named}"))
        }
        None => (
            "a score of the scale".to_string(),
            "without a score".to_string(),
        ),
    };
    Some(
        Check::new(
            "format",
            counts.kept_share(),
            FORMAT_KEPT_MIN,
            WarnWhen::Below,
            format!(
                "{} of {total} feedbacks kept to the format (`{}` once, then {result}); the \
                 marker {missing} {}, repeated {}, never written {}, cut at the token limit {} \
                 (the marker appended where missing)",
                counts.kept,
                marker.trim_end(),
                counts.no_score,
                counts.repeated,
                counts.missing,
                counts.cut
            ) + &unclosed(counts.unclosed_reasoning),
            &remedy(
                "the judge does not keep to its rubric format (its result is still read after \
                 the marker)",
                &actions,
                audience,
            ),
        )
        .over(total),
    )
}

/// The format check's words on reasonings a thinking judge left open.
fn unclosed(count: usize) -> String {
    match count {
        0 => String::new(),
        _ => format!(
            "; {count} reasoning(s) left open at the reasoning budget, closed before the \
             verdict was read"
        ),
    }
}

/// The remedy for ties under the run's `choices`.
fn ties_remedy(choices: RunChoices, constant_judge: bool) -> String {
    if constant_judge {
        // Every ranking of equal probabilities ties: only another judge helps.
        return remedy(
            "the judge gave every comparison the same probability, which no ranking separates",
            &[Action::LargerModel],
            choices.audience,
        );
    }
    match choices.rank {
        RankMethod::WinRatio => {
            let mut actions = vec![Action::RankProbabilities];
            if choices.debias == Debias::None {
                actions.push(Action::DebiasThreshold);
            }
            remedy(
                "the decisions cannot separate the candidates",
                &actions,
                choices.audience,
            )
        }
        _ => remedy(
            "the judge does not separate the candidates",
            &[Action::LargerModel],
            choices.audience,
        ),
    }
}

/// Whether a design compares pairs in both orders (so that a constant positional bias
/// cancels in a probability-based ranking).
pub fn both_orders(design: Design) -> bool {
    matches!(design, Design::Full | Design::Symmetric)
}

/// The diagnostics of a compare run (its rank in effect, debias and design choices name
/// the remedies).
pub fn for_compare(result: &CompareResult, options: &CompareOptions) -> Diagnostics {
    let choices = RunChoices {
        rank: result.rank,
        debias: options.debias,
        both_orders: both_orders(options.design),
        audience: options.audience,
    };
    let comparisons: Vec<_> = result
        .contexts
        .iter()
        .flat_map(|c| &c.comparisons)
        .collect();
    let mut checks = Vec::new();
    if !comparisons.is_empty() {
        let mean_p =
            comparisons.iter().map(|c| c.a_over_b()).sum::<f64>() / comparisons.len() as f64;
        // Decided comparisons only: a judge answering 0.5 everywhere has no position bias.
        let wins = comparisons.iter().filter(|c| c.a_over_b() > 0.5).count();
        let losses = comparisons.iter().filter(|c| c.a_over_b() < 0.5).count();
        let share = if wins + losses == 0 {
            0.5
        } else {
            wins as f64 / (wins + losses) as f64
        };
        checks.push(positional_bias(share, mean_p, wins + losses, choices));
    }
    if let Some(agree) = result.consistency.value() {
        checks.push(order_consistency(agree, result.consistency.total, choices));
    }
    let scores: Vec<&[f64]> = result
        .contexts
        .iter()
        .map(|c| c.scores.as_slice())
        .collect();
    let constant_judge = comparisons.windows(2).all(|pair| {
        pair[0].p_a.to_bits() == pair[1].p_a.to_bits()
            && pair[0].p_tie.map(f64::to_bits) == pair[1].p_tie.map(f64::to_bits)
    });
    checks.extend(ties(&scores, &ties_remedy(choices, constant_judge)));
    if options.prior.is_none() {
        let coverage: Vec<(usize, Vec<(usize, usize)>)> = result
            .contexts
            .iter()
            .map(|c| {
                let pairs = c.comparisons.iter().map(|k| (k.first, k.second)).collect();
                (c.candidate_ids.len(), pairs)
            })
            .collect();
        checks.extend(uncompared(&coverage, choices.audience));
    }
    let ties: Vec<f64> = comparisons.iter().filter_map(|c| c.p_tie).collect();
    if !ties.is_empty() {
        let decided = comparisons.iter().filter(|c| c.tie_decided()).count();
        let mean = ties.iter().sum::<f64>() / ties.len() as f64;
        checks.push(tie_rate(
            decided,
            ties.len(),
            mean,
            result.rank,
            choices.audience,
        ));
    }
    let masses: Vec<f64> = comparisons.iter().map(|c| c.label_mass).collect();
    let labels = if ties.is_empty() {
        "labels A and B"
    } else {
        "labels A, B and tie"
    };
    checks.extend(label_mass(&masses, labels, choices.audience));
    if let Some(fit) = &result.prior {
        checks.push(prior_slope(fit, choices.audience));
    }
    Diagnostics::new(checks)
}

/// With absolute scores as experts: the run's one slope from them onto the comparisons
/// ([`crate::rank::hybrid`]). Warns when the fitted slope is negative: held at 0 where
/// the comparisons do not support its sign (the absolute scores then place no
/// candidate), kept where they do (the absolute scores order the candidates against
/// the comparisons). The message names the pairs behind the slope.
pub fn prior_slope(fit: &SlopeFit, audience: Audience) -> Check {
    let behind = format!(
        "fitted from {} compared pair{} ({} comparison{}) whose absolute scores differ, in {} \
         context{}",
        fit.pairs,
        if fit.pairs == 1 { "" } else { "s" },
        fit.comparisons,
        if fit.comparisons == 1 { "" } else { "s" },
        fit.contexts,
        if fit.contexts == 1 { "" } else { "s" },
    );
    let numbers = format!(
        "{:.3} logits per standard deviation (standard error {:.3})",
        fit.fitted, fit.standard_error
    );
    let (message, why) = if fit.held {
        (
            format!(
                "the absolute scores' one slope, {behind}, is {numbers}: negative, but less \
                 than {SIGN_EVIDENCE} standard errors below 0, so the comparisons do not show \
                 that the scores order the candidates against them; held at 0, so the \
                 absolute scores place no candidate and only the comparisons order the \
                 candidates they reach"
            ),
            remedy(
                "too few comparisons to tell how the absolute scores line up with them",
                &[Action::MoreComparisons],
                audience,
            ),
        )
    } else if fit.fitted < 0.0 {
        (
            format!(
                "the absolute scores' one slope, {behind}, is {numbers}: negative beyond \
                 {SIGN_EVIDENCE} standard errors, so the absolute scores order the \
                 candidates against the comparisons"
            ),
            "check that a higher absolute score means a better candidate in the score file, \
             or rank by the comparisons alone"
                .to_string(),
        )
    } else {
        (
            format!("the absolute scores' one slope, {behind}, is {numbers}"),
            String::new(),
        )
    };
    Check::new(
        "prior_slope",
        fit.fitted,
        0.0,
        WarnWhen::Below,
        message,
        &why,
    )
    .over(fit.pairs)
}

/// The diagnostics of a scoring run: label mass and ties for prompt scoring, G-Eval and
/// rubric grading, the evaluation steps for G-Eval, the format for rubric grading with
/// feedback (GPTScore has none of these).
pub fn for_scores(run: &ScoreRun, audience: Audience) -> Diagnostics {
    let mut checks = Vec::new();
    if let ResolvedMethod::Geval { steps: s, .. } = &run.method {
        checks.push(steps(&s.text, audience));
    }
    if let ResolvedMethod::Rubric(rubric) = &run.method {
        let mut counts = FormatCounts::of(run.candidates.iter().filter_map(|c| c.format));
        counts.unclosed_reasoning = run.candidates.iter().filter(|c| c.reasoning_cut).count();
        checks.extend(rubric_format(&counts, rubric.marker(), None, audience));
    }
    if !matches!(run.method, ResolvedMethod::Gptscore { .. }) {
        let masses: Vec<f64> = run
            .candidates
            .iter()
            .filter_map(|c| c.distribution.as_ref().map(|d| d.mass))
            .collect();
        checks.extend(label_mass(&masses, "score labels", audience));
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
            &remedy(
                "the judge gives the candidates the same score",
                &[Action::LargerModel, Action::ComparePairwise],
                audience,
            ),
        ));
    }
    Diagnostics::new(checks)
}

/// The diagnostics of a sharded run from its shards' `OUT.diagnostics.json` files
/// (`(file name, JSON)` each), for `merge`: each check's value as the mean of the
/// shards' values weighted by their `count` (the steps: the most; `too_long`: the sum),
/// its status from the combined value (a check every shard found corrected stays `ok`),
/// the remedy of a shard that warned (shards share the run's choices), and every shard's
/// diagnostics as they were, under `shards`.
pub fn combine_shards(shards: &[(String, serde_json::Value)]) -> anyhow::Result<serde_json::Value> {
    use serde_json::{json, Value};
    let mut names: Vec<String> = Vec::new();
    for (_, diagnostics) in shards {
        for check in diagnostics["checks"].as_array().into_iter().flatten() {
            if let Some(name) = check["name"].as_str() {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    let mut checks = Vec::new();
    for name in &names {
        let found: Vec<(&str, &Value)> = shards
            .iter()
            .flat_map(|(file, d)| {
                d["checks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["name"] == name.as_str())
                    .map(move |c| (file.as_str(), c))
            })
            .collect();
        let first = found[0].1;
        let number = |c: &Value, key: &str| {
            c[key]
                .as_f64()
                .ok_or_else(|| anyhow::anyhow!("check `{name}`: no number `{key}`"))
        };
        let mut weighted = 0.0;
        let (mut count, mut most) = (0.0, f64::NEG_INFINITY);
        for (file, check) in &found {
            let value = number(check, "value").map_err(|e| e.context(file.to_string()))?;
            let weight = check["count"].as_f64().unwrap_or(1.0);
            weighted += value * weight;
            count += weight;
            most = most.max(value);
        }
        let value = match name.as_str() {
            "steps" => most,
            "too_long" => weighted,
            _ if count > 0.0 => weighted / count,
            _ => 0.0,
        };
        let threshold = number(first, "threshold")?;
        let warn_when: WarnWhen = serde_json::from_value(first["warn_when"].clone())
            .map_err(|e| anyhow::anyhow!("check `{name}`: warn_when: {e}"))?;
        let corrected_everywhere = found.iter().all(|(_, c)| c["status"] == "ok")
            && found
                .iter()
                .any(|(_, c)| warn_when.warns(c["value"].as_f64().unwrap_or(0.0), threshold));
        let warns = !corrected_everywhere
            && (warn_when.warns(value, threshold)
                || found
                    .iter()
                    .any(|(_, c)| c["status"] == "warn" && name == "steps"));
        let mut check = json!({
            "name": name,
            "value": value,
            "threshold": threshold,
            "warn_when": first["warn_when"],
            "status": if warns { "warn" } else { "ok" },
            "count": count as u64,
            "message": format!(
                "{value:.3} over {} (combined from {} of {} shards; each shard's own message is \
                 under `shards`){}",
                count as u64,
                found.len(),
                shards.len(),
                if corrected_everywhere { "; corrected in every shard" } else { "" }
            ),
        });
        if warns {
            if let Some(remedy) = found.iter().find_map(|(_, c)| c["remedy"].as_str()) {
                check["remedy"] = json!(remedy);
            }
        }
        checks.push(check);
    }
    let warnings = checks.iter().filter(|c| c["status"] == "warn").count();
    let adjusted: Vec<&str> = shards
        .iter()
        .filter_map(|(_, d)| d["adjusted"].as_str())
        .collect();
    let mut combined = json!({
        "warnings": warnings,
        "checks": checks,
        "shards": shards
            .iter()
            .map(|(file, d)| json!({"file": file, "diagnostics": d}))
            .collect::<Vec<_>>(),
    });
    if let Some(first) = adjusted.first() {
        combined["adjusted"] = json!(if adjusted.len() == shards.len() {
            first.to_string()
        } else {
            format!("in {} of {} shards: {first}", adjusted.len(), shards.len())
        });
    }
    Ok(combined)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shards combine by count-weighted means; a check warns on the combined value, a
    /// check corrected in every shard stays ok, and each shard's own file is kept.
    #[test]
    fn shards_combine_by_their_counts() {
        let shard = |bias: f64, decided: usize, mass: f64, answers: usize| {
            let diagnostics = Diagnostics::new(vec![
                positional_bias(bias, 0.6, decided, plain()),
                label_mass(&vec![mass; answers], "labels", Audience::CommandLine).unwrap(),
            ]);
            serde_json::to_value(&diagnostics).unwrap()
        };
        let combined = combine_shards(&[
            ("a.jsonl".into(), shard(0.9, 30, 0.4, 30)),
            ("b.jsonl".into(), shard(0.5, 90, 0.8, 90)),
        ])
        .unwrap();
        let check = |name: &str| {
            combined["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap()
                .clone()
        };
        // (0.9 * 30 + 0.5 * 90) / 120 = 0.6: within the band, though shard a warned.
        let bias = check("positional_bias");
        assert!((bias["value"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(bias["status"], "ok");
        assert_eq!(bias["count"], 120);
        // (0.4 * 30 + 0.8 * 90) / 120 = 0.7.
        let mass = check("label_mass");
        assert!((mass["value"].as_f64().unwrap() - 0.7).abs() < 1e-12);
        assert_eq!(combined["warnings"], 0);
        assert_eq!(combined["shards"].as_array().unwrap().len(), 2);

        // Both shards biased: the combined check warns, with the shards' remedy.
        let combined = combine_shards(&[
            ("a.jsonl".into(), shard(0.9, 30, 0.8, 30)),
            ("b.jsonl".into(), shard(0.8, 90, 0.8, 90)),
        ])
        .unwrap();
        let bias = &combined["checks"][0];
        assert_eq!(bias["status"], "warn");
        assert!(bias["remedy"]
            .as_str()
            .unwrap()
            .contains("--debias threshold"));
        // Corrected in every shard (the threshold): ok, and said.
        let corrected = RunChoices {
            debias: Debias::Threshold,
            ..plain()
        };
        let shard = serde_json::to_value(Diagnostics::new(vec![positional_bias(
            0.9, 0.7, 50, corrected,
        )]))
        .unwrap();
        let combined = combine_shards(&[("a".into(), shard.clone()), ("b".into(), shard)]).unwrap();
        assert_eq!(combined["checks"][0]["status"], "ok");
        assert!(combined["checks"][0]["message"]
            .as_str()
            .unwrap()
            .ends_with("corrected in every shard"));
    }

    /// Win ratio over both orders, no debiasing, on the command line: the default run
    /// before any fallback.
    fn plain() -> RunChoices {
        RunChoices {
            rank: RankMethod::WinRatio,
            debias: Debias::None,
            both_orders: true,
            audience: Audience::CommandLine,
        }
    }

    #[test]
    fn positional_bias_warns_outside_the_band_unless_corrected() {
        let biased = positional_bias(0.92, 0.78, 240, plain());
        assert_eq!(biased.status, Status::Warn);
        let remedy = biased.remedy.as_deref().unwrap();
        assert!(
            remedy.contains("--debias threshold") && remedy.contains("--rank poe"),
            "{remedy}"
        );
        assert!(
            biased.message.contains("0.920 of 240 decided"),
            "{}",
            biased.message
        );
        assert_eq!(positional_bias(0.25, 0.3, 10, plain()).status, Status::Warn);
        assert_eq!(positional_bias(0.7, 0.6, 10, plain()).status, Status::Ok);
        assert_eq!(positional_bias(0.3, 0.4, 10, plain()).status, Status::Ok);
        let threshold = RunChoices {
            debias: Debias::Threshold,
            ..plain()
        };
        let corrected = positional_bias(0.92, 0.78, 240, threshold);
        assert_eq!(corrected.status, Status::Ok);
        assert!(corrected.remedy.is_none());
        assert!(corrected
            .message
            .ends_with("corrected by --debias threshold"));
        let poe = RunChoices {
            rank: RankMethod::Poe,
            ..plain()
        };
        let cancelled = positional_bias(0.92, 0.78, 240, poe);
        assert_eq!(cancelled.status, Status::Ok);
        assert!(cancelled.message.contains("cancelled in the ranking"));
        // Product of Experts over one order only: the bias stays; the threshold or both
        // orders would change the result, PoE is already in effect.
        let one_order = RunChoices {
            both_orders: false,
            ..poe
        };
        let check = positional_bias(0.92, 0.78, 240, one_order);
        let remedy = check.remedy.as_deref().unwrap();
        assert!(check.is_warning());
        assert!(remedy.contains("--debias threshold") && remedy.contains("--design full"));
        assert!(!remedy.contains("--rank"), "{remedy}");
    }

    /// No remedy names a choice already in effect, for any combination of rank,
    /// debiasing and design, in any audience's words.
    #[test]
    fn a_remedy_never_names_a_choice_in_effect() {
        let ranks = [
            RankMethod::WinRatio,
            RankMethod::Soft,
            RankMethod::BradleyTerry,
            RankMethod::Poe,
        ];
        for rank in ranks {
            for debias in [Debias::None, Debias::Threshold] {
                for both_orders in [true, false] {
                    for audience in [Audience::CommandLine, Audience::Service, Audience::Python] {
                        let choices = RunChoices {
                            rank,
                            debias,
                            both_orders,
                            audience,
                        };
                        let remedies: Vec<String> = [
                            positional_bias(0.95, 0.9, 100, choices).remedy,
                            order_consistency(0.1, 50, choices).remedy,
                            Some(ties_remedy(choices, false)),
                        ]
                        .into_iter()
                        .flatten()
                        .collect();
                        for remedy in remedies {
                            let said = |words: [&str; 3]| {
                                let word = match audience {
                                    Audience::CommandLine => words[0],
                                    Audience::Service => words[1],
                                    Audience::Python => words[2],
                                };
                                remedy.contains(word)
                            };
                            let case = format!("{choices:?}: {remedy}");
                            if rank == RankMethod::Poe {
                                assert!(
                                    !said(["--rank poe", "\"rank\": \"poe\"", "rank=\"poe\""]),
                                    "{case}"
                                );
                            }
                            if debias == Debias::Threshold {
                                assert!(!said(["--debias", "\"debias\"", "debias="]), "{case}");
                            }
                            if both_orders {
                                assert!(!said(["--design", "\"design\"", "design="]), "{case}");
                            }
                            if audience != Audience::CommandLine {
                                assert!(!remedy.contains("--rank"), "{case}");
                                assert!(!remedy.contains("--debias"), "{case}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn consistency_warns_below_one_half() {
        let check = order_consistency(0.1, 120, plain());
        assert!(check.is_warning());
        assert!(check.remedy.as_deref().unwrap().contains("--rank poe"));
        assert!(!order_consistency(0.5, 120, plain()).is_warning());
        let poe = RunChoices {
            rank: RankMethod::Poe,
            ..plain()
        };
        let remedy = order_consistency(0.1, 120, poe).remedy.unwrap();
        assert_eq!(
            remedy,
            "the answers follow the order more than the texts: use a larger model (--model)"
        );
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
    fn a_constant_judge_is_offered_another_judge_not_another_ranking() {
        for audience in [Audience::CommandLine, Audience::Service, Audience::Python] {
            for rank in [RankMethod::WinRatio, RankMethod::Poe] {
                let choices = RunChoices {
                    rank,
                    audience,
                    ..plain()
                };
                let remedy = ties_remedy(choices, true);
                assert!(remedy.contains("same probability"), "{remedy}");
                assert!(remedy.contains("larger model"), "{remedy}");
                assert!(
                    !remedy.contains("poe") && !remedy.contains("bt"),
                    "{remedy}"
                );
            }
        }
        // A judge that does separate keeps the ranking remedy under the win ratio.
        assert!(ties_remedy(plain(), false).contains("--rank poe"));
    }

    #[test]
    fn candidates_in_no_comparison_warn_and_are_counted() {
        let contexts = vec![
            (4, vec![(0, 1), (1, 0), (2, 1)]),
            (3, vec![(0, 1), (1, 2)]),
            (1, vec![]),
        ];
        let check = uncompared(&contexts, Audience::CommandLine).unwrap();
        assert!(check.is_warning());
        assert!((check.value - 1.0 / 7.0).abs() < 1e-12);
        assert!(
            check
                .message
                .contains("1 of 7 candidates are in no comparison (in 1 context)"),
            "{}",
            check.message
        );
        assert!(check.remedy.as_deref().unwrap().contains("--comparisons N"));
        let python = uncompared(&contexts, Audience::Python).unwrap();
        assert!(python.remedy.as_deref().unwrap().contains("comparisons=N"));
        let full = vec![(3, vec![(0, 1), (1, 2)])];
        assert!(!uncompared(&full, Audience::CommandLine)
            .unwrap()
            .is_warning());
        assert!(uncompared(&[(1, vec![])], Audience::CommandLine).is_none());
    }

    #[test]
    fn label_mass_warns_below_one_half_and_names_the_least() {
        let check = label_mass(&[0.05, 0.18, 0.1], "score labels", Audience::CommandLine).unwrap();
        assert!(check.is_warning());
        assert!((check.value - 0.11).abs() < 1e-12);
        assert!(check.message.contains("least 0.050"), "{}", check.message);
        let cli = Audience::CommandLine;
        assert!(!label_mass(&[0.8, 0.6], "labels", cli).unwrap().is_warning());
        assert!(label_mass(&[], "labels", cli).is_none());
        let served = label_mass(&[0.1], "labels", Audience::Service).unwrap();
        assert_eq!(
            served.remedy.as_deref(),
            Some("the model mostly wants to answer something else: use a larger model (serve one with --model)")
        );
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
        let check = steps(repeated, Audience::CommandLine);
        assert!(check.is_warning());
        assert!(check.remedy.as_deref().unwrap().contains("--steps FILE"));
        assert!(steps_problem("1.").unwrap().contains("nearly empty"));
        assert!(steps("1. Ok.", Audience::CommandLine).is_warning());
        let good = "1. Read the article.\n2. Read the summary.\n3. Rate the coherence.";
        assert_eq!(steps_problem(good), None);
        let check = steps(good, Audience::CommandLine);
        assert!(!check.is_warning() && check.value == 1.0);
        // Twice is allowed.
        assert_eq!(
            steps_problem("1. Read it all.\n2. Read it all.\n3. Score it."),
            None
        );
    }

    #[test]
    fn the_format_check_counts_every_outcome_and_offers_tokens_only_when_cut() {
        use crate::judge::rubric::FormatOutcome::*;
        let counts = FormatCounts::of([Kept, Kept, Kept, Missing, Cut]);
        let check = rubric_format(&counts, "[RESULT] ", None, Audience::CommandLine).unwrap();
        assert!((check.value - 0.6).abs() < 1e-12);
        assert!(check.is_warning());
        assert!(
            check
                .message
                .starts_with("3 of 5 feedbacks kept to the format (`[RESULT]` once")
                && check
                    .message
                    .contains("never written 1, cut at the token limit 1"),
            "{}",
            check.message
        );
        // Issue 60: absolute grading's result is a score, relative grading's A or B.
        assert!(
            check.message.contains(
                "(`[RESULT]` once, then a score of the scale); the marker without a score 0"
            ) && !check.message.contains("A or B"),
            "{}",
            check.message
        );
        let choices = |a: &str, b: &str, tie: Option<&str>| Choices {
            a: a.into(),
            b: b.into(),
            tie: tie.map(str::to_string),
        };
        let relative = |choices: &Choices| {
            rubric_format(&counts, "[RESULT] ", Some(choices), Audience::CommandLine)
                .unwrap()
                .message
        };
        let plain = relative(&choices("A", "B", None));
        assert!(
            plain.contains("once, then A or B); the marker without A or B 0")
                && !plain.contains("score"),
            "{plain}"
        );
        // A protocol's own labels, its tie among them, as the judge must write them.
        let tied = relative(&choices("Response 1", "Response 2", Some("Tie")));
        assert!(
            tied.contains(
                "once, then Response 1, Response 2 or Tie); the marker without Response 1, \
                 Response 2 or Tie 0"
            ),
            "{tied}"
        );
        let j1 = relative(&choices("[[A]]", "[[B]]", None));
        assert!(j1.contains("once, then [[A]] or [[B]]);"), "{j1}");
        let remedy = check.remedy.unwrap();
        assert!(
            remedy.contains("--max-feedback-tokens") && remedy.contains("--no-feedback"),
            "{remedy}"
        );
        let uncut = FormatCounts::of([Kept, Missing, Repeated, NoScore]);
        let remedy = rubric_format(&uncut, "Score:", None, Audience::CommandLine)
            .unwrap()
            .remedy
            .unwrap();
        assert!(!remedy.contains("--max-feedback-tokens"), "{remedy}");
        let fine = FormatCounts::of([Kept; 9].into_iter().chain([Missing]));
        assert!(!rubric_format(&fine, "Score:", None, Audience::CommandLine)
            .unwrap()
            .is_warning());
        // The service and Python name their own fields and keywords.
        let served = rubric_format(&counts, "Score:", None, Audience::Service).unwrap();
        let remedy = served.remedy.unwrap();
        assert!(
            remedy.contains("a larger \"max_feedback_tokens\"")
                && remedy.contains("\"feedback\": false")
                && !remedy.contains("--max-feedback-tokens"),
            "{remedy}"
        );
        let python = rubric_format(&counts, "Score:", None, Audience::Python).unwrap();
        let remedy = python.remedy.unwrap();
        assert!(
            remedy.contains("max_feedback_tokens=") && remedy.contains("feedback=False"),
            "{remedy}"
        );
        assert!(rubric_format(
            &FormatCounts::default(),
            "Score:",
            None,
            Audience::CommandLine
        )
        .is_none());
    }

    #[test]
    fn the_block_puts_warnings_first_with_their_remedies() {
        let mut diagnostics = Diagnostics::new(vec![
            order_consistency(0.9, 10, plain()),
            positional_bias(1.0, 0.8, 10, plain()),
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
