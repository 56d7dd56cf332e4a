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
//! | the marker more than once | `repeated` | its text up to the first marker |
//! | no marker, and stopped on its own | `missing` | its whole text, then the marker |
//! | no marker, and was cut at the token limit | `cut` | its whole text, then the marker |
//!
//! Where the marker is appended, it follows the feedback as the protocol writes it: after
//! a space (`... [RESULT] `), on a new line (`Score:`), or after the closed feedback tag
//! (`</feedback>\n<score>`).

use serde::{Deserialize, Serialize};

use super::protocol::{format, ProtocolFormat};
use crate::engine::{FinishReason, RubricProtocol};
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
    /// The feedback for people: the text before the marker, trimmed (Flow-Judge's
    /// `<feedback>` tags taken off).
    pub feedback: String,
    /// The model's answer up to and including the marker (the answer's opening, its text,
    /// the marker where it wrote none): the score is read right after it.
    pub answer: String,
    pub format: FormatOutcome,
}

/// Read what the model `generated` after the protocol's opening, ended by `finish`.
pub fn read(
    protocol: RubricProtocol,
    scale: ScoreScale,
    generated: &str,
    finish: FinishReason,
) -> Reading {
    read_answer(protocol, format(protocol), generated, finish, |after| {
        leading_score(after).is_some_and(|s| s >= scale.low() && s <= scale.high())
    })
}

/// [`read`] for an answer in `format` (absolute or relative grading's), where `is_result`
/// says whether the text after the marker starts with a result of the scale.
pub fn read_answer(
    protocol: RubricProtocol,
    format: ProtocolFormat,
    generated: &str,
    finish: FinishReason,
    is_result: impl Fn(&str) -> bool,
) -> Reading {
    let marker = format.marker;
    let first = generated.find(marker);
    let (before, answer, outcome) = match first {
        Some(at) => {
            let before = &generated[..at];
            let after = &generated[at + marker.len()..];
            let outcome = if after.contains(marker) {
                FormatOutcome::Repeated
            } else if is_result(after) {
                FormatOutcome::Kept
            } else {
                FormatOutcome::NoScore
            };
            (
                before,
                format!("{}{before}{marker}", format.opening),
                outcome,
            )
        }
        None => {
            let text = generated.trim_end();
            let outcome = if finish == FinishReason::MaxTokens {
                FormatOutcome::Cut
            } else {
                FormatOutcome::Missing
            };
            let joiner = joiner(protocol, text);
            (
                generated,
                format!("{}{text}{joiner}{marker}", format.opening),
                outcome,
            )
        }
    };
    Reading {
        feedback: shown_feedback(protocol, before),
        answer,
        format: outcome,
    }
}

/// What goes between a feedback without a marker and the appended marker.
fn joiner(protocol: RubricProtocol, text: &str) -> &'static str {
    if text.trim().is_empty() {
        return if protocol == RubricProtocol::Plain {
            " "
        } else {
            ""
        };
    }
    match protocol {
        RubricProtocol::Prometheus => " ",
        RubricProtocol::Plain => "\n",
        RubricProtocol::FlowJudge => {
            let opened = text.rfind("<feedback>");
            let closed = text.rfind("</feedback>");
            match (opened, closed) {
                (Some(open), Some(close)) if close > open => "\n",
                (Some(_), _) => "\n</feedback>\n",
                (None, _) => "\n",
            }
        }
    }
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
fn shown_feedback(protocol: RubricProtocol, text: &str) -> String {
    let text = text.trim();
    if protocol != RubricProtocol::FlowJudge {
        return text.to_string();
    }
    let text = text.strip_prefix("<feedback>").unwrap_or(text);
    let text = text.trim_end();
    let text = text.strip_suffix("</feedback>").unwrap_or(text);
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

    fn prometheus(text: &str, finish: FinishReason) -> Reading {
        read(RubricProtocol::Prometheus, SCALE, text, finish)
    }

    #[test]
    fn prometheus_feedback_is_cut_at_its_first_marker() {
        let kept = prometheus("Good work. [RESULT] 4", FinishReason::EndOfSequence);
        assert_eq!(kept.format, FormatOutcome::Kept);
        assert_eq!(kept.answer, "Good work. [RESULT] ");
        assert_eq!(kept.feedback, "Good work.");
        let twice = prometheus(
            "Fine. [RESULT] 3\nOn reflection [RESULT] 4",
            FinishReason::EndOfSequence,
        );
        assert_eq!(twice.format, FormatOutcome::Repeated);
        assert_eq!(twice.answer, "Fine. [RESULT] ");
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
        let plain = |text: &str| read(RubricProtocol::Plain, SCALE, text, FinishReason::Stop);
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
        let flow = |text: &str, finish| read(RubricProtocol::FlowJudge, SCALE, text, finish);
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
