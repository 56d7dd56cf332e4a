//! Relative rubric grading: two responses to one input, put to the judge in its own
//! pairwise format; the judge writes a feedback comparing them, then which is better, and
//! P(A) is read as the model's distribution over `A` and `B` at the position right after
//! the result marker (as absolute grading reads the score); a protocol with a tie label
//! reads the distribution over `A`, `B` and the tie (see `pairwise::run::Comparison`). `compare --rubric` runs it;
//! every ordered pair is one comparison of the design, so a full design of N candidates
//! costs N(N-1) feedback generations (`--no-feedback` reads the choice right after the
//! prompt and the marker instead, through the prefix trie).
//!
//! - **prometheus** (Prometheus 2's relative grading, `prompts.py` of
//!   prometheus-eval/prometheus-eval): the system message `REL_SYSTEM_PROMPT` and the user
//!   text `RELATIVE_PROMPT` (with a reference answer) or `RELATIVE_PROMPT_WO_REF`: the
//!   instruction, `###Response A:`, `###Response B:`, `###Reference Answer:`,
//!   `###Score Rubric:` holding the criterion alone (`[criterion]`, as the authors'
//!   `load_rubric` gives relative grading the rubric's first line), `###Feedback: `. The
//!   model writes `feedback [RESULT] A` (or `B`).
//! - **plain** (ours, for any instruct model): the sections below, the answer opened with
//!   `Feedback:` and a last line `Better: A` or `Better: B`.
//! - Flow-Judge v0.1 grades one output at a time and has no pairwise format: refused.
//!
//! ```text
//! You will compare two summaries on a single criterion.
//!
//! Task: <the rubric's instruction>                  (when it has one)
//!
//! Source Text:                                      (when there is a context)
//! <context>
//!
//! Reference Summary:                                (with --reference)
//! <reference>
//!
//! Summary A:
//! <first candidate>
//!
//! Summary B:
//! <second candidate>
//!
//! Criterion (Coherence): <criterion>
//!
//! Write a short feedback comparing the two summaries on this criterion alone, then a
//! last line "Better: A" or "Better: B".
//! ```

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Context as _, Result};

use super::protocol::{reading_point, wrap, Choices, Form, Reasoning, Start};
use super::reading::{read_answer, Reading};
use super::rounds::{write_answers, Answers, RoundNames};
use super::run::ProtocolSource;
use super::thinking::Thinking;
use super::{Rubric, RubricProtocol};
use crate::data::Context;
use crate::engine::{
    plan_label, GeneratedCounts, Generation, GenerationRequest, Label, LabelRequest, PlannedLabel,
    ResultCache, Sampling, Scorer, TextPrompt,
};
use crate::judge::scale::text_label_tokens_after;
use crate::judge::scoring::required_reference;
use crate::progress::Progress;

pub use super::protocol::{render_relative, PairInput};

/// Kind of the pairwise feedback generations in the result cache.
pub const FEEDBACK_CACHE_KIND: &str = "rubric-relative-feedback";

/// Version of the relative prompts and their reading (part of the label cache identity).
const TEMPLATE_VERSION: &str = "rubric-relative/v3";

/// Read what the model `generated` after the opening of a relative feedback in `form`:
/// `kept` when the last marker is followed by one of the form's choices (quotes, brackets
/// and blanks aside, unless the choice is written with its brackets: J1's `[[A]]`).
pub fn read_choice(
    form: &Form,
    reasoning: Option<&Reasoning>,
    generated: &str,
    finish: crate::engine::FinishReason,
) -> Reading {
    let labels: Vec<String> = form
        .choices
        .as_ref()
        .map(|c| c.labels().into_iter().map(str::to_string).collect())
        .unwrap_or_default();
    read_answer(form, reasoning, generated, finish, |after| {
        let blank = after.trim_start();
        let bare = blank.trim_start_matches(|c: char| c.is_whitespace() || "\"'([".contains(c));
        labels.iter().any(|label| {
            [blank, bare].into_iter().any(|after| {
                after.strip_prefix(label.as_str()).is_some_and(|rest| {
                    !label.ends_with(char::is_alphanumeric)
                        || !rest.starts_with(char::is_alphanumeric)
                })
            })
        })
    })
}

/// Relative grading with everything decided, and the feedbacks written so far.
#[derive(Debug, Clone, PartialEq)]
pub struct RelativeGrading {
    pub rubric: Rubric,
    pub protocol: RubricProtocol,
    pub protocol_source: ProtocolSource,
    /// Most tokens of a feedback; `None`: the choice is read right after the prompt and
    /// the marker.
    pub feedback_tokens: Option<usize>,
    /// Show the candidates' `reference` as the reference answer.
    pub reference: bool,
    /// A thinking judge's reasoning (protocols with `[reasoning]`; ignored by others).
    pub thinking: Thinking,
    /// Each ordered pair's feedback, read, by (context id, first id, second id): filled by
    /// [`write_feedbacks`] before the comparisons are asked.
    pub readings: BTreeMap<(String, String, String), Reading>,
}

impl RelativeGrading {
    /// Settle the protocol (the requested one, else the card's, else plain) and check that
    /// it has a relative format.
    pub fn new(
        scorer: &dyn Scorer,
        rubric: Rubric,
        requested: Option<RubricProtocol>,
        feedback_tokens: Option<usize>,
        reference: bool,
    ) -> Result<Self> {
        let (protocol, protocol_source) = super::run::settle_protocol(scorer, requested)?;
        // A judge trained to answer at once writes no feedback.
        let feedback_tokens =
            feedback_tokens.filter(|_| protocol.relative().is_ok_and(|f| f.feedback));
        protocol.relative()?;
        if let Some(tokens) = feedback_tokens {
            ensure!(tokens > 0, "a feedback needs at least one token");
        }
        Ok(Self {
            rubric,
            protocol,
            protocol_source,
            feedback_tokens,
            reference,
            thinking: Thinking::default(),
            readings: BTreeMap::new(),
        })
    }

    /// The same with a thinking judge's reasoning treated as
    /// [`super::run::settle_thinking`] says.
    pub fn with_thinking(mut self, budget: Option<usize>, off: bool) -> Result<Self> {
        self.thinking = super::run::settle_thinking(&self.protocol, budget, off)?;
        Ok(self)
    }

    /// The protocol's relative form as this run opens its answers.
    pub fn form(&self) -> Result<Form> {
        Ok(super::run::answer_form(
            &self.protocol,
            self.protocol.relative()?,
            self.thinking,
        ))
    }

    /// Whether feedbacks start with a reasoning round, and its budget.
    pub fn reasoning_budget(&self) -> Option<usize> {
        self.thinking
            .reasoning_budget(&self.protocol, self.feedback_tokens)
    }

    /// The label cache's name for these prompts.
    pub fn template_id(&self) -> String {
        format!(
            "{TEMPLATE_VERSION}/{}/{}",
            self.protocol.cache_name(),
            if self.feedback_tokens.is_some() {
                "feedback"
            } else {
                "direct"
            }
        )
    }

    /// The choices as a sentence names them ("A or B", "Response 1, Response 2 or Tie").
    pub fn choices_named(&self) -> String {
        self.protocol
            .relative()
            .ok()
            .and_then(|f| f.choices.as_ref())
            .map_or_else(|| "A or B".to_string(), Choices::named)
    }

    /// The marker after which the choice is read.
    pub fn marker(&self) -> &str {
        self.protocol
            .relative()
            .map(|f| f.marker.as_str())
            .unwrap_or("")
    }

    /// What is compared when candidate `first` is shown as A and `second` as B.
    pub fn input<'a>(
        &self,
        context: &'a Context,
        (first, second): (usize, usize),
    ) -> Result<PairInput<'a>> {
        let (a, b) = (&context.candidates[first], &context.candidates[second]);
        let reference = if self.reference {
            let (ra, rb) = (required_reference(a)?, required_reference(b)?);
            ensure!(
                ra == rb,
                "candidates `{}` and `{}` give different references; relative grading shows \
                 one reference answer per comparison",
                a.id,
                b.id
            );
            Some(ra)
        } else {
            None
        };
        Ok(PairInput {
            context: Some(context.text.as_str()).filter(|s| !s.trim().is_empty()),
            reference,
            a: &a.text,
            b: &b.text,
        })
    }

    fn text_prompt(&self, input: &PairInput, answer: &str) -> Result<TextPrompt> {
        let rendered = render_relative(&self.protocol, &self.rubric, input)?;
        Ok(TextPrompt {
            system: rendered.system,
            user: rendered.user,
            answer_prefix: answer.to_string(),
        })
    }

    /// The greedy generation of the answer on `pair` of `context` from `start` (its
    /// feedback, or a thinking judge's reasoning).
    pub fn feedback_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        pair: (usize, usize),
        start: Start,
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let form = self.form()?;
        let text = self.text_prompt(&self.input(context, pair)?, &start.answer(&form))?;
        Ok(GenerationRequest {
            prompt: wrap(text, scorer.info().conventions.chat),
            max_tokens,
            sampling: Sampling::Greedy,
            stop: form.stop.clone(),
        })
    }

    /// The label request reading P(A) against P(B) on `pair` of `context`: after its
    /// feedback and the marker, or right after the prompt and the marker without feedback.
    /// A form with a tie label reads three labels, A, B and the tie, in that order (a
    /// form without one reads A and B, as it always did).
    pub fn choice_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        pair: (usize, usize),
    ) -> Result<LabelRequest> {
        let form = self.form()?;
        let answer = match self.feedback_tokens {
            None => super::protocol::direct_answer(&self.protocol, &form),
            Some(_) => {
                let key = pair_key(context, pair);
                match self.readings.get(&key) {
                    Some(reading) => reading.answer.clone(),
                    None => bail!(
                        "no feedback was written for `{}` vs `{}` (relative grading writes \
                         the feedbacks before it reads the choices)",
                        key.1,
                        key.2
                    ),
                }
            }
        };
        let chat = scorer.info().conventions.chat;
        let (answer, written_before) = reading_point(&answer, &form.separator);
        let text = self.text_prompt(&self.input(context, pair)?, &answer)?;
        let choices = form
            .choices
            .as_ref()
            .context("a relative form has choices")?;
        let labels =
            text_label_tokens_after(scorer, &text, chat, &choices.labels(), &written_before)?;
        Ok(LabelRequest {
            prompt: wrap(text, chat),
            labels: labels.into_iter().map(Label::Tokens).collect(),
        })
    }
}

/// The key of `pair` of `context` in [`RelativeGrading::readings`].
pub fn pair_key(context: &Context, (first, second): (usize, usize)) -> (String, String, String) {
    (
        context.id.clone(),
        context.candidates[first].id.clone(),
        context.candidates[second].id.clone(),
    )
}

/// Write (or read back from the cache) the feedback of every ordered pair in `pairs` (one
/// list per context, in `contexts`' order) into `grading.readings`: all of them in one
/// engine call (one batch; pairs sharing their context and first response share that
/// computation), each cached as it ends, with its choice read right after its own
/// feedback and marker and stored in `cache` under the comparison's key (so the
/// comparisons that follow find it). Returns what was computed now.
pub fn write_feedbacks(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    pairs: &[Vec<(usize, usize)>],
    grading: &mut RelativeGrading,
    progress: &Progress,
    cache: Option<&ResultCache>,
) -> Result<GeneratedCounts> {
    let Some(max_tokens) = grading.feedback_tokens else {
        return Ok(GeneratedCounts::default());
    };
    let total: usize = pairs.iter().map(Vec::len).sum();
    progress.note(&format!(
        "relative rubric grading ({} format, {}): writing {total} feedback(s) in one batch \
         (pairs that share a context and a first response share their computation), each \
         choice of {} read after `{}` as its feedback ends",
        grading.protocol,
        grading.protocol_source.describe(),
        grading.choices_named(),
        grading.marker()
    ));
    let mut at = Vec::with_capacity(total);
    for (c, pairs) in pairs.iter().enumerate() {
        for &pair in pairs {
            at.push((c, pair));
        }
    }
    let budget = grading.reasoning_budget();
    let mut answers = PairFeedbacks {
        contexts,
        at: &at,
        form: grading.form()?,
        template: grading.template_id(),
        grading,
    };
    let names = RoundNames {
        reasonings: "pairwise reasonings written (generation)",
        feedbacks: "pairwise feedbacks written (generation)",
        cache_kind: FEEDBACK_CACHE_KIND,
        writing: "writing the pairwise feedbacks",
    };
    write_answers(
        scorer,
        cache,
        &mut answers,
        budget,
        max_tokens,
        &names,
        progress,
    )
}

/// A run's pairwise feedbacks, one per ordered pair, kept in the grading's readings, each
/// choice asked right after its feedback.
struct PairFeedbacks<'a> {
    contexts: &'a [Context],
    /// The pair (context, (first, second)) of each answer.
    at: &'a [(usize, (usize, usize))],
    /// The relative form as the run opens its answers.
    form: Form,
    template: String,
    grading: &'a mut RelativeGrading,
}

impl PairFeedbacks<'_> {
    /// The context and pair of answer `index`, and where errors about it say it is.
    fn place(&self, index: usize) -> (&Context, (usize, usize), String) {
        let (c, pair) = self.at[index];
        let context = &self.contexts[c];
        let key = pair_key(context, pair);
        let at = format!("context `{}`: `{}` vs `{}`", key.0, key.1, key.2);
        (context, pair, at)
    }
}

impl Answers for PairFeedbacks<'_> {
    fn count(&self) -> usize {
        self.at.len()
    }

    fn reasoning(&self) -> Option<&Reasoning> {
        self.grading.protocol.reasoning()
    }

    fn form(&self) -> &Form {
        &self.form
    }

    fn request(
        &self,
        scorer: &dyn Scorer,
        index: usize,
        start: Start,
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let (context, pair, at) = self.place(index);
        self.grading
            .feedback_request(scorer, context, pair, start, max_tokens)
            .context(at)
    }

    fn read(&self, form: &Form, generation: &Generation) -> Reading {
        read_choice(form, self.reasoning(), &generation.text, generation.finish)
    }

    fn keep(&mut self, index: usize, reading: Reading) {
        let (c, pair) = self.at[index];
        let key = pair_key(&self.contexts[c], pair);
        self.grading.readings.insert(key, reading);
    }

    fn verdict(&self, scorer: &dyn Scorer, index: usize) -> Result<PlannedLabel> {
        let (context, pair, at) = self.place(index);
        self.grading
            .choice_request(scorer, context, pair)
            .and_then(|request| plan_label(scorer, &self.template, request, None))
            .context(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FinishReason;
    use crate::judge::Task;

    fn input<'a>(reference: Option<&'a str>) -> PairInput<'a> {
        PairInput {
            context: Some("ART"),
            reference,
            a: "ONE",
            b: "TWO",
        }
    }

    #[test]
    fn plain_prompts_show_both_responses_in_order_and_the_criterion() {
        let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
        let text = render_relative(&RubricProtocol::plain(), &rubric, &input(Some("GOLD")))
            .unwrap()
            .user;
        let order = [
            "You will compare two summaries on a single criterion.",
            "\n\nTask: Summarize the following news article.",
            "\n\nSource Text:\nART",
            "\n\nReference Summary:\nGOLD",
            "\n\nSummary A:\nONE",
            "\n\nSummary B:\nTWO",
            "\n\nCriterion (Coherence): ",
            "then a last line \"Better: A\" or \"Better: B\".",
        ];
        assert_eq!(crate::judge::assert_in_order(&text, &order), text.len());
    }

    #[test]
    fn flow_judge_has_no_relative_format() {
        let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
        let error = render_relative(&RubricProtocol::flow_judge(), &rubric, &input(None))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no relative grading"), "{error}");
    }

    #[test]
    fn a_choice_is_kept_only_as_a_lone_label_after_the_last_marker() {
        use super::super::FormatOutcome::*;
        let prometheus = RubricProtocol::prometheus();
        let form = prometheus.relative().unwrap();
        let read = |text: &str, finish| read_choice(form, None, text, finish).format;
        assert_eq!(read("A is clearer. [RESULT] A", FinishReason::Stop), Kept);
        assert_eq!(read("fine [RESULT] \"B\"", FinishReason::Stop), Kept);
        assert_eq!(read("fine [RESULT] Both", FinishReason::Stop), NoScore);
        assert_eq!(
            read("x [RESULT] A [RESULT] B", FinishReason::Stop),
            Repeated
        );
        assert_eq!(read("no marker at all", FinishReason::Stop), Missing);
        assert_eq!(read("no marker at all", FinishReason::MaxTokens), Cut);
        let reading = read_choice(form, None, "B wins.", FinishReason::Stop);
        assert_eq!(reading.answer, "B wins. [RESULT] ");
        assert_eq!(reading.feedback, "B wins.");
        let twice = read_choice(
            form,
            None,
            "x [RESULT] A, or rather [RESULT] B",
            FinishReason::Stop,
        );
        assert_eq!(twice.answer, "x [RESULT] A, or rather [RESULT] ");
        // J1 writes its choice with its brackets, `<answer> [[A]] </answer>`.
        let j1 = RubricProtocol::named("j1").unwrap();
        let j1 = j1.relative().unwrap();
        let read = |text: &str| read_choice(j1, None, text, FinishReason::Stop).format;
        assert_eq!(read("<answer> [[A]] </answer>"), Kept);
        assert_eq!(read("<answer>[[B]]</answer>"), Kept);
        assert_eq!(read("<answer> [[C]] </answer>"), NoScore);
        assert_eq!(read("<answer> A </answer>"), NoScore);
        // Auto-J's choices are words, its tie one of them.
        let autoj = RubricProtocol::named("auto-j").unwrap();
        let autoj = autoj.relative().unwrap();
        let read = |text: &str| read_choice(autoj, None, text, FinishReason::Stop).format;
        assert_eq!(read("So, the final decision is Response 2."), Kept);
        assert_eq!(read("So, the final decision is Tie"), Kept);
        assert_eq!(read("So, the final decision is Response 12"), NoScore);
        let plain = RubricProtocol::plain();
        let plain = read_choice(
            plain.relative().unwrap(),
            None,
            " B reads better.",
            FinishReason::Stop,
        );
        assert_eq!(plain.answer, "Feedback: B reads better.\nBetter:");
    }
}
