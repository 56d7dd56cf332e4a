//! G-Eval criteria given as one free-text string, as metrics services pass them
//! (`"Coherence (1-5): evaluate the logical flow and connection between sentences."`),
//! with an optional task prompt (the introduction).
//!
//! The string is the criterion text as written. Its scale comes from a `(1-5)`-style range
//! in the text, else from the caller's scale, else 1-5; where it came from is reported
//! ([`ScaleSource`]) so that a service can say which scale it used. The form line's name
//! is the text before the range or the first colon ("Coherence"), else "Score".

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::criteria::Criteria;
use crate::judge::attribute::Task;
use crate::judge::scale::ScoreScale;

/// Introduction of criteria given without a task prompt.
pub const DEFAULT_INTRODUCTION: &str = "You will be given one output to rate, with the input it \
was produced for and the expected output where there are any. Rate the output on the single \
quality described below.";

/// The default scale of free-text criteria that name none.
pub const DEFAULT_FREE_TEXT_SCALE: (i64, i64) = (1, 5);

/// A name longer than this (in characters) is not a name but a sentence.
const MAX_NAME_CHARS: usize = 40;

/// Where the scale of free-text criteria came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleSource {
    /// A `(low-high)` range in the criteria text.
    CriteriaText,
    /// The caller's scale (`scale` field, `--scale`).
    Requested,
    /// Neither: 1-5.
    Default,
}

impl ScaleSource {
    pub fn describe(self) -> &'static str {
        match self {
            ScaleSource::CriteriaText => "the range in the criteria text",
            ScaleSource::Requested => "the requested scale",
            ScaleSource::Default => "the default 1-5",
        }
    }
}

/// A `(low-high)` range in `text`: its byte span and the two numbers. Accepts `-`, `–`
/// and `to` between the numbers and spaces around them; negative numbers are not ranges.
fn find_range(text: &str) -> Option<(usize, usize, i64, i64)> {
    let mut search = 0;
    while let Some(offset) = text[search..].find('(') {
        let open = search + offset;
        search = open + 1;
        let close = open + text[open..].find(')')?;
        let inner = text[open + 1..close].trim();
        let parts: Option<(&str, &str)> = inner
            .split_once('-')
            .or_else(|| inner.split_once('–'))
            .or_else(|| inner.split_once(" to "));
        let Some((low, high)) = parts else { continue };
        let (low, high) = (low.trim(), high.trim());
        let is_number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !is_number(low) || !is_number(high) {
            continue;
        }
        let (Ok(low), Ok(high)) = (low.parse::<i64>(), high.parse::<i64>()) else {
            continue;
        };
        return Some((open, close + 1, low, high));
    }
    None
}

/// The form-line name of free-text criteria.
fn name_of(text: &str, range_start: Option<usize>) -> String {
    let colon = text.find(':');
    let end = match (range_start, colon) {
        (Some(r), Some(c)) => r.min(c),
        (Some(r), None) => r,
        (None, Some(c)) => c,
        (None, None) => return "Score".to_string(),
    };
    let name = text[..end].trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        "Score".to_string()
    } else {
        name.to_string()
    }
}

/// Criteria from one free-text string. `task_prompt` is the introduction (default: a
/// generic one); `requested` the caller's scale, used when the text names none. A range
/// in the text that is no usable scale (`(5-1)`, `(1-1000)`) is an error naming it.
pub fn criteria_from_text(
    text: &str,
    task_prompt: Option<&str>,
    requested: Option<ScoreScale>,
    task: Option<Task>,
) -> Result<(Criteria, ScaleSource)> {
    let text = text.trim();
    if text.is_empty() {
        bail!("the criteria text is empty");
    }
    let range = find_range(text);
    let (scale, source) = match range {
        Some((start, end, low, high)) => {
            let scale = ScoreScale::new(low, high).with_context(|| {
                format!(
                    "the criteria text gives the scale {}, which is not usable",
                    &text[start..end]
                )
            })?;
            (scale, ScaleSource::CriteriaText)
        }
        None => match requested {
            Some(scale) => (scale, ScaleSource::Requested),
            None => {
                let (low, high) = DEFAULT_FREE_TEXT_SCALE;
                (ScoreScale::new(low, high)?, ScaleSource::Default)
            }
        },
    };
    let introduction = task_prompt
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_INTRODUCTION);
    let name = name_of(text, range.map(|(start, ..)| start));
    let criteria = Criteria::new(&name, scale, task, introduction, text)?;
    Ok((criteria, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str =
        "Coherence (1-5): evaluate the logical flow and connection between sentences.";

    #[test]
    fn the_services_example_gives_name_scale_and_text() {
        let (c, source) = criteria_from_text(EXAMPLE, None, None, None).unwrap();
        assert_eq!(c.name, "Coherence");
        assert_eq!(c.scale, ScoreScale::new(1, 5).unwrap());
        assert_eq!(source, ScaleSource::CriteriaText);
        assert_eq!(c.criterion, EXAMPLE);
        assert_eq!(c.introduction, DEFAULT_INTRODUCTION);
    }

    #[test]
    fn the_text_range_wins_over_the_requested_scale() {
        let requested = ScoreScale::new(0, 10).unwrap();
        let text = "Helpfulness (1 to 3): does the answer help?";
        let (c, source) =
            criteria_from_text(text, Some("Rate it."), Some(requested), None).unwrap();
        assert_eq!(c.scale, ScoreScale::new(1, 3).unwrap());
        assert_eq!(source, ScaleSource::CriteriaText);
        assert_eq!(c.introduction, "Rate it.");
        assert_eq!(c.name, "Helpfulness");
    }

    #[test]
    fn without_a_range_the_requested_scale_then_the_default() {
        let text = "Tone: is the reply polite (and friendly)?";
        let requested = ScoreScale::new(0, 4).unwrap();
        let (c, source) = criteria_from_text(text, None, Some(requested), None).unwrap();
        assert_eq!((c.scale, source), (requested, ScaleSource::Requested));
        assert_eq!(c.name, "Tone");
        let (c, source) = criteria_from_text(text, None, None, None).unwrap();
        assert_eq!(
            (c.scale, source),
            (ScoreScale::new(1, 5).unwrap(), ScaleSource::Default)
        );
        // No colon and no range: a generic form-line name.
        let (c, _) =
            criteria_from_text("is the reply polite and correct", None, None, None).unwrap();
        assert_eq!(c.name, "Score");
    }

    #[test]
    fn a_range_that_is_no_scale_is_a_named_error() {
        for text in [
            "Coherence (5-1): flow",
            "Coherence (3-3): flow",
            "Detail (1-1000): depth",
        ] {
            let error = criteria_from_text(text, None, None, None).unwrap_err();
            let message = format!("{error:#}");
            assert!(message.contains("not usable"), "{message}");
            assert!(message.contains(&text[text.find('(').unwrap()..text.find(')').unwrap() + 1]));
        }
        assert!(criteria_from_text("  ", None, None, None).is_err());
    }

    #[test]
    fn negative_or_textual_parentheses_are_not_ranges() {
        assert_eq!(find_range("Score (a-b) and (x)"), None);
        assert_eq!(find_range("Range (-1-5)"), None);
        assert_eq!(
            find_range("Fluency (well-formed) (1–3)").map(|r| (r.2, r.3)),
            Some((1, 3))
        );
    }
}
