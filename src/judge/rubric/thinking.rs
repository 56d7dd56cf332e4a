//! Thinking judges: the reasoning a judge writes before its feedback and verdict
//! (`<think>...</think>`), generated first within its own budget, and closed by us where
//! the budget (or the model) left it open, so that what follows is generated, and the
//! verdict read, after a closed reasoning.
//!
//! A run with a protocol that has `[reasoning]` markers writes each answer in two rounds
//! through the one generation route: the reasoning (stopped at the closing marker, at most
//! `--max-reasoning-tokens`), then the feedback and verdict after it (at most
//! `--max-feedback-tokens`). Both rounds are cached like any generation, so a stopped run
//! resumes where it was. A model that writes no opening marker has not reasoned: what it
//! wrote is its whole answer, and no second round is asked. Thinking off (where the
//! protocol says how: Qwen3's empty `<think></think>`) opens the answer with the
//! protocol's `off` text and skips the reasoning round.

use super::protocol::{Form, Reasoning};
use super::reading::Reading;
use crate::engine::{
    generate_cached_all, FinishReason, Generation, GenerationReader, GenerationRequest,
    PlannedLabel, ResultCache, Scorer,
};
use crate::progress::ProgressTask;
use anyhow::Result;

/// Kind of the reasoning generations in the result cache.
pub const REASONING_CACHE_KIND: &str = "rubric-reasoning";

/// Default bound on a reasoning's tokens.
pub const DEFAULT_REASONING_TOKENS: usize = 1024;

/// How a run treats a thinking judge's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// Reason first, within this many tokens.
    On { budget: usize },
    /// Thinking off: the answer opens with the protocol's `off` text.
    Off,
}

impl Thinking {
    /// Whether a run of `protocol` with these feedbacks starts each answer with a
    /// reasoning round, and its budget: with a thinking judge, thinking on, and feedback.
    pub fn reasoning_budget(
        self,
        protocol: &super::RubricProtocol,
        feedback_tokens: Option<usize>,
    ) -> Option<usize> {
        match (protocol.reasoning(), self, feedback_tokens) {
            (Some(_), Thinking::On { budget }, Some(_)) => Some(budget),
            _ => None,
        }
    }
}

impl Default for Thinking {
    fn default() -> Self {
        Thinking::On {
            budget: DEFAULT_REASONING_TOKENS,
        }
    }
}

/// One answer's reasoning round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thought {
    /// What goes before the feedback round's generation, after the answer's opening: the
    /// generated reasoning with its closing marker (ours where the model left it open).
    /// Empty where the model did not reason.
    pub text: String,
    /// The whole answer where the model did not reason (no opening marker): no feedback
    /// round follows.
    pub whole: Option<Generation>,
    /// The model left the reasoning open (the budget cut it, or it stopped inside it):
    /// the closing marker is ours.
    pub closed_by_us: bool,
}

/// Make the reasoning of every request in `requests` (each already opened as its answer
/// will be, stopped at the closing marker, within `budget` tokens), in one engine call,
/// cached as each ends; one [`Thought`] per request.
pub fn reason(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    reasoning: &Reasoning,
    requests: &[GenerationRequest],
    budget: usize,
    bar: &ProgressTask,
) -> Result<Vec<Thought>> {
    let rounds: Vec<GenerationRequest> = requests
        .iter()
        .map(|request| GenerationRequest {
            max_tokens: budget,
            stop: vec![reasoning.close.clone()],
            ..request.clone()
        })
        .collect();
    let mut reader = Thoughts {
        reasoning,
        thoughts: vec![None; requests.len()],
        bar,
    };
    generate_cached_all(scorer, cache, REASONING_CACHE_KIND, &rounds, &mut reader)?;
    reader
        .thoughts
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.ok_or_else(|| anyhow::anyhow!("no reasoning for request {i}")))
        .collect()
}

/// What the reasoning round's `generation` leaves for the feedback round.
pub fn thought_of(reasoning: &Reasoning, generation: &Generation) -> Thought {
    let text = &generation.text;
    if !text.contains(reasoning.open.as_str()) {
        return Thought {
            text: String::new(),
            whole: Some(generation.clone()),
            closed_by_us: false,
        };
    }
    if generation.finish == FinishReason::Stop {
        // Cut before the closing marker the model wrote; the round stopped there, before
        // the blank the model writes after it (Qwen3's "\n\n"), which is added as when we
        // close a reasoning ourselves.
        return Thought {
            text: format!("{text}{}{}", reasoning.close, reasoning.after_close),
            whole: None,
            closed_by_us: false,
        };
    }
    Thought {
        text: format!(
            "{}\n{}{}",
            text.trim_end(),
            reasoning.close,
            reasoning.after_close
        ),
        whole: None,
        closed_by_us: true,
    }
}

struct Thoughts<'a> {
    reasoning: &'a Reasoning,
    thoughts: Vec<Option<Thought>>,
    bar: &'a ProgressTask,
}

impl GenerationReader for Thoughts<'_> {
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        _scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>> {
        self.thoughts[index] = Some(thought_of(self.reasoning, generation));
        if cached {
            self.bar.found_in_cache(1);
        } else {
            self.bar.step(1)?;
        }
        Ok(None)
    }
}

/// The reading of an answer whose generation `read_in` reads in a form: after `thought`'s
/// closed reasoning, in `form` (its answer prefixed with the reasoning); a whole answer
/// (the model did not reason) in `form` without its opening, which the model never saw.
pub fn after_thought(
    thought: &Thought,
    reasoning: Option<&Reasoning>,
    form: &Form,
    read_in: impl Fn(&Form) -> Reading,
) -> Reading {
    if thought.whole.is_some() {
        let bare = Form {
            opening: String::new(),
            ..form.clone()
        };
        return read_in(&bare);
    }
    let mut reading = read_in(form);
    if !thought.text.is_empty() {
        reading.answer = format!("{}{}", thought.text, reading.answer);
        reading.reasoning = reasoning_in(reasoning, &thought.text);
    }
    reading.reasoning_cut = thought.closed_by_us;
    reading
}

/// Where the reasoning ends in an answer's `text` (after the last closing marker), or 0.
pub fn after_reasoning(reasoning: Option<&Reasoning>, text: &str) -> usize {
    reasoning
        .and_then(|r| text.rfind(r.close.as_str()).map(|at| at + r.close.len()))
        .unwrap_or(0)
}

/// The reasoning in an answer's `text`, between its opening marker and the last closing
/// one, trimmed; `None` where there is none.
pub fn reasoning_in(reasoning: Option<&Reasoning>, text: &str) -> Option<String> {
    let reasoning = reasoning?;
    let start = text.find(reasoning.open.as_str())? + reasoning.open.len();
    let end = text
        .rfind(reasoning.close.as_str())
        .filter(|&end| end >= start)?;
    Some(text[start..end].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn think() -> Reasoning {
        Reasoning {
            open: "<think>".into(),
            close: "</think>".into(),
            after_close: "\n\n".into(),
            off: Some("<think>\n\n</think>\n\n".into()),
        }
    }

    fn generation(text: &str, finish: FinishReason) -> Generation {
        Generation {
            text: text.into(),
            tokens: vec![],
            finish,
        }
    }

    #[test]
    fn a_reasoning_is_closed_by_the_model_or_by_us() {
        let r = think();
        let closed = thought_of(&r, &generation("<think>\nA is better", FinishReason::Stop));
        assert_eq!(closed.text, "<think>\nA is better</think>\n\n");
        assert!(!closed.closed_by_us && closed.whole.is_none());
        let cut = thought_of(
            &r,
            &generation("<think>\nA is bet", FinishReason::MaxTokens),
        );
        assert_eq!(cut.text, "<think>\nA is bet\n</think>\n\n");
        assert!(cut.closed_by_us);
        let ended = thought_of(&r, &generation("<think>\nhm", FinishReason::EndOfSequence));
        assert!(ended.closed_by_us);
        // No opening marker: the model did not reason, and that was its whole answer.
        let direct = thought_of(
            &r,
            &generation("<score>4</score>", FinishReason::EndOfSequence),
        );
        assert_eq!(direct.text, "");
        assert_eq!(direct.whole.unwrap().text, "<score>4</score>");
    }

    #[test]
    fn the_reasoning_ends_at_its_last_closing_marker() {
        let r = think();
        let text = "<think>\nsay <score>5</score>?\n</think>\n\n<score>3</score>";
        let end = after_reasoning(Some(&r), text);
        assert_eq!(&text[end..], "\n\n<score>3</score>");
        assert_eq!(
            reasoning_in(Some(&r), text).as_deref(),
            Some("say <score>5</score>?")
        );
        assert_eq!(after_reasoning(None, text), 0);
        assert_eq!(reasoning_in(Some(&r), "<score>3</score>"), None);
    }
}
