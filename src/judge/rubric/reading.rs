//! Reading a judge's feedback: where its score is read, what feedback is kept, and
//! whether the model kept to its format.
//!
//! The score is never parsed from the text: it is read as the model's distribution over
//! the scale right after the result marker. So a model that breaks its format is not a
//! parse failure, only a count in the run's diagnostics:
//!
//! | the model wrote | outcome | the score is read after |
//! |---|---|---|
//! | the marker once, then a score of the scale | `kept` | its text up to the marker |
//! | the marker once, then no score of the scale | `no-score` | its text up to the marker |
//! | the marker more than once | `repeated` | its text up to the last marker |
//! | no marker, and stopped on its own | `missing` | its whole text, then the marker |
//! | no marker, and was cut at the token limit | `cut` | its whole text, then the marker |
//!
//! The verdict is the last one the model wrote: a feedback that quotes the marker (or a
//! score after it) in its middle and ends with its verdict is read at the end.
//!
//! Where the marker is appended, it follows the feedback as the protocol writes it (its
//! `joiner`): after a space (`... [RESULT] `), on a new line (`Score:`), or after the
//! closed feedback tag (`</feedback>\n<score>`).

use serde::{Deserialize, Serialize};

use super::protocol::{Form, Reasoning};
use super::thinking::{after_reasoning, reasoning_in};
use crate::engine::FinishReason;
use crate::judge::scale::ScoreScale;

/// Whether the model kept to its format (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FormatOutcome {
    Kept,
    NoScore,
    Repeated,
    Missing,
    Cut,
}

impl FormatOutcome {
    pub fn name(self) -> &'static str {
        match self {
            FormatOutcome::Kept => "kept",
            FormatOutcome::NoScore => "no-score",
            FormatOutcome::Repeated => "repeated",
            FormatOutcome::Missing => "missing",
            FormatOutcome::Cut => "cut",
        }
    }
}

/// What was made of one feedback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// The feedback for people: the text before the marker, trimmed (the protocol's
    /// feedback tags taken off).
    pub feedback: String,
    /// The model's answer up to and including the marker (the answer's opening, its text,
    /// the marker where it wrote none): the score is read right after it.
    pub answer: String,
    pub format: FormatOutcome,
    /// A thinking judge's reasoning (between its markers), trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The reasoning was left open (cut at its budget, or the model stopped inside it)
    /// and closed by us before the verdict was read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_cut: bool,
}

/// Read what the model `generated` after the absolute form's opening, ended by `finish`
/// (a thinking judge's reasoning first, where its protocol has `reasoning`).
pub fn read(
    form: &Form,
    reasoning: Option<&Reasoning>,
    scale: ScoreScale,
    generated: &str,
    finish: FinishReason,
) -> Reading {
    read_answer(form, reasoning, generated, finish, |after| {
        leading_score(after).is_some_and(|s| s >= scale.low() && s <= scale.high())
    })
}

/// [`read`] for an answer in `form` (absolute or relative grading's), where `is_result`
/// says whether the text after the marker starts with a result. Markers inside a
/// reasoning are not verdicts: the marker is looked for after the reasoning's end.
pub fn read_answer(
    form: &Form,
    reasoning: Option<&Reasoning>,
    generated: &str,
    finish: FinishReason,
    is_result: impl Fn(&str) -> bool,
) -> Reading {
    let marker = form.marker.as_str();
    let start = after_reasoning(reasoning, generated);
    let (before, answer, outcome) = match generated[start..].rfind(marker) {
        Some(at) => {
            let at = start + at;
            let before = &generated[..at];
            let after = &generated[at + marker.len()..];
            let outcome = if before[start..].contains(marker) {
                FormatOutcome::Repeated
            } else if is_result(after) {
                FormatOutcome::Kept
            } else {
                FormatOutcome::NoScore
            };
            (before, format!("{}{before}{marker}", form.opening), outcome)
        }
        None => {
            let text = generated.trim_end();
            let outcome = if finish == FinishReason::MaxTokens {
                FormatOutcome::Cut
            } else {
                FormatOutcome::Missing
            };
            let tail = &text[start.min(text.len())..];
            let joiner = match reasoning {
                // Nothing after a reasoning: the marker where the answer would go.
                Some(reasoning) if start > 0 && tail.trim().is_empty() => {
                    reasoning.after_close.clone()
                }
                _ => joiner(form, tail),
            };
            (
                generated,
                format!("{}{text}{joiner}{marker}", form.opening),
                outcome,
            )
        }
    };
    Reading {
        feedback: shown_feedback(form, &before[start.min(before.len())..]),
        answer,
        format: outcome,
        reasoning: reasoning_in(reasoning, before),
        reasoning_cut: false,
    }
}

/// What goes between a feedback without a marker and the appended marker: the form's
/// joiner, with the feedback's closing tag where the model left it open; after nothing, a
/// space after a written opening ("Feedback: Score:"), else nothing.
fn joiner(form: &Form, text: &str) -> String {
    if text.trim().is_empty() {
        return if form.opening.is_empty() { "" } else { " " }.to_string();
    }
    let joiner = form.joiner.as_str();
    if let Some([open, close]) = &form.feedback_tags {
        let opened = text.rfind(open.as_str());
        let closed = text.rfind(close.as_str());
        let left_open = match (opened, closed) {
            (Some(open), Some(close)) => close < open,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if left_open {
            return format!("{joiner}{close}{joiner}");
        }
    }
    joiner.to_string()
}

/// The integer the text starts with (after blanks), if any.
fn leading_score(text: &str) -> Option<i64> {
    let text = text.trim_start();
    let sign = usize::from(text.starts_with('-'));
    let digits = text[sign..]
        .chars()
        .take_while(char::is_ascii_digit)
        .count();
    if digits == 0 {
        return None;
    }
    text[..sign + digits].parse().ok()
}

/// The feedback as people read it.
fn shown_feedback(form: &Form, text: &str) -> String {
    let text = text.trim();
    let Some([open, close]) = &form.feedback_tags else {
        return text.to_string();
    };
    let text = text.strip_prefix(open.as_str()).unwrap_or(text);
    let text = text.trim_end();
    let text = text.strip_suffix(close.as_str()).unwrap_or(text);
    text.trim().to_string()
}

/// How often a run's judge kept to its format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FormatCounts {
    pub kept: usize,
    pub no_score: usize,
    pub repeated: usize,
    pub missing: usize,
    pub cut: usize,
    /// Thinking judges: reasonings left open and closed by us (counted apart from the
    /// outcomes above, which are about the verdict).
    #[serde(skip_serializing_if = "is_zero")]
    pub unclosed_reasoning: usize,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

impl FormatCounts {
    /// Count every outcome.
    pub fn of(outcomes: impl IntoIterator<Item = FormatOutcome>) -> Self {
        let mut counts = Self::default();
        for outcome in outcomes {
            let slot = match outcome {
                FormatOutcome::Kept => &mut counts.kept,
                FormatOutcome::NoScore => &mut counts.no_score,
                FormatOutcome::Repeated => &mut counts.repeated,
                FormatOutcome::Missing => &mut counts.missing,
                FormatOutcome::Cut => &mut counts.cut,
            };
            *slot += 1;
        }
        counts
    }

    pub fn total(&self) -> usize {
        self.kept + self.no_score + self.repeated + self.missing + self.cut
    }

    /// The share of feedbacks in the format (the marker once, then a score); 1 for none.
    pub fn kept_share(&self) -> f64 {
        match self.total() {
            0 => 1.0,
            total => self.kept as f64 / total as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE: ScoreScale = match ScoreScale::const_new(1, 5) {
        Some(scale) => scale,
        None => panic!("valid"),
    };

    use crate::judge::rubric::RubricProtocol;

    fn prometheus(text: &str, finish: FinishReason) -> Reading {
        read(
            RubricProtocol::prometheus().absolute().unwrap(),
            None,
            SCALE,
            text,
            finish,
        )
    }

    #[test]
    fn prometheus_feedback_is_read_at_its_last_marker() {
        let kept = prometheus("Good work. [RESULT] 4", FinishReason::EndOfSequence);
        assert_eq!(kept.format, FormatOutcome::Kept);
        assert_eq!(kept.answer, "Good work. [RESULT] ");
        assert_eq!(kept.feedback, "Good work.");
        let twice = prometheus(
            "Fine. [RESULT] 3\nOn reflection [RESULT] 4",
            FinishReason::EndOfSequence,
        );
        assert_eq!(twice.format, FormatOutcome::Repeated);
        assert_eq!(twice.answer, "Fine. [RESULT] 3\nOn reflection [RESULT] ");
        // A feedback that quotes the marker and a score in its middle is read at its end.
        let quoting = prometheus(
            "The rubric asks for \"[RESULT] 5\" only when flawless; this is not. [RESULT] 2",
            FinishReason::EndOfSequence,
        );
        assert_eq!(quoting.format, FormatOutcome::Repeated);
        assert!(quoting.answer.ends_with("this is not. [RESULT] "));
        assert!(quoting.feedback.ends_with("this is not."));
        let garbage = prometheus("Fine. [RESULT] excellent!", FinishReason::EndOfSequence);
        assert_eq!(garbage.format, FormatOutcome::NoScore);
        assert_eq!(garbage.answer, "Fine. [RESULT] ");
        let off_scale = prometheus("Fine. [RESULT] 9", FinishReason::EndOfSequence);
        assert_eq!(off_scale.format, FormatOutcome::NoScore);
    }

    #[test]
    fn a_missing_marker_is_appended_and_counted_apart_from_a_cut() {
        let missing = prometheus("It is fine overall.\n", FinishReason::EndOfSequence);
        assert_eq!(missing.format, FormatOutcome::Missing);
        assert_eq!(missing.answer, "It is fine overall. [RESULT] ");
        assert_eq!(missing.feedback, "It is fine overall.");
        let cut = prometheus("It is fine, but the sec", FinishReason::MaxTokens);
        assert_eq!(cut.format, FormatOutcome::Cut);
        assert_eq!(cut.answer, "It is fine, but the sec [RESULT] ");
        let empty = prometheus("", FinishReason::EndOfSequence);
        assert_eq!(empty.answer, "[RESULT] ");
        // A stop string is not the token limit.
        assert_eq!(
            prometheus("Fine.", FinishReason::Stop).format,
            FormatOutcome::Missing
        );
    }

    #[test]
    fn plain_answers_keep_their_opening_and_take_the_marker_on_a_new_line() {
        let form = RubricProtocol::plain().absolute().unwrap().clone();
        let plain = |text: &str| read(&form, None, SCALE, text, FinishReason::Stop);
        let kept = plain(" Clear and short.\nScore: 5");
        assert_eq!(kept.format, FormatOutcome::Kept);
        assert_eq!(kept.answer, "Feedback: Clear and short.\nScore:");
        let missing = plain(" Clear and short.");
        assert_eq!(missing.answer, "Feedback: Clear and short.\nScore:");
        assert_eq!(missing.feedback, "Clear and short.");
        assert_eq!(plain("").answer, "Feedback: Score:");
    }

    #[test]
    fn flow_judge_feedback_loses_its_tags_and_gets_them_closed() {
        let form = RubricProtocol::flow_judge().absolute().unwrap().clone();
        let flow = |text: &str, finish| read(&form, None, SCALE, text, finish);
        let kept = flow(
            "<feedback>\nGood.\n</feedback>\n<score>\n4\n",
            FinishReason::Stop,
        );
        assert_eq!(kept.format, FormatOutcome::Kept);
        assert_eq!(kept.answer, "<feedback>\nGood.\n</feedback>\n<score>");
        assert_eq!(kept.feedback, "Good.");
        let open = flow("<feedback>\nGood but lo", FinishReason::MaxTokens);
        assert_eq!(open.format, FormatOutcome::Cut);
        assert_eq!(open.answer, "<feedback>\nGood but lo\n</feedback>\n<score>");
        let closed = flow("<feedback>Good.</feedback>", FinishReason::EndOfSequence);
        assert_eq!(closed.answer, "<feedback>Good.</feedback>\n<score>");
        assert_eq!(closed.format, FormatOutcome::Missing);
    }

    #[test]
    fn a_thinking_judge_is_read_after_its_reasoning() {
        let form = crate::judge::rubric::protocol::Form {
            system: None,
            user: String::new(),
            opening: String::new(),
            marker: "<score>".into(),
            separator: String::new(),
            stop: vec!["</score>".into()],
            joiner: "\n".into(),
            feedback_tags: None,
            scale: None,
            choices: None,
            feedback: true,
        };
        let think = Reasoning {
            open: "<think>".into(),
            close: "</think>".into(),
            after_close: "\n\n".into(),
            off: None,
        };
        // A score quoted inside the reasoning is not the verdict.
        let text = "<think>\nIs it <score>5</score>? No.\n</think>\n\nFair.\n<score>3";
        let kept = read(&form, Some(&think), SCALE, text, FinishReason::Stop);
        assert_eq!(kept.format, FormatOutcome::Kept);
        assert_eq!(kept.feedback, "Fair.");
        assert_eq!(
            kept.reasoning.as_deref(),
            Some("Is it <score>5</score>? No.")
        );
        assert!(kept.answer.ends_with("</think>\n\nFair.\n<score>"));
        // No verdict after the reasoning: the marker is appended after it.
        let bare = read(
            &form,
            Some(&think),
            SCALE,
            "<think>\nhm\n</think>\n\n",
            FinishReason::EndOfSequence,
        );
        assert_eq!(bare.format, FormatOutcome::Missing);
        assert_eq!(bare.answer, "<think>\nhm\n</think>\n\n<score>");
        assert_eq!(bare.feedback, "");
    }

    #[test]
    fn counts_and_the_kept_share() {
        let counts = FormatCounts::of([
            FormatOutcome::Kept,
            FormatOutcome::Kept,
            FormatOutcome::Cut,
            FormatOutcome::Repeated,
        ]);
        assert_eq!((counts.kept, counts.cut, counts.repeated), (2, 1, 1));
        assert_eq!(counts.total(), 4);
        assert!((counts.kept_share() - 0.5).abs() < 1e-12);
        assert_eq!(FormatCounts::default().kept_share(), 1.0);
        assert_eq!(leading_score(" \n-2 x"), Some(-2));
        assert_eq!(leading_score("x2"), None);
    }
}
