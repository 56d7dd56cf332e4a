//! Relative rubric grading: two responses to one input, put to the judge in its own
//! pairwise format; the judge writes a feedback comparing them, then which is better, and
//! P(A) is read as the model's distribution over `A` and `B` at the position right after
//! the result marker (as absolute grading reads the score). `compare --rubric` runs it;
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

use super::protocol::{reading_point, ProtocolFormat, RubricPrompt};
use super::reading::{read_answer, Reading};
use super::run::ProtocolSource;
use super::{Rubric, RubricProtocol};
use crate::data::Context;
use crate::engine::{
    generate_cached_all, plan_label, GeneratedCounts, Generation, GenerationReader,
    GenerationRequest, Label, LabelRequest, PlannedLabel, Prompt, ResultCache, Sampling, Scorer,
    TextPrompt,
};
use crate::judge::scale::text_label_tokens_after;
use crate::judge::scoring::required_reference;
use crate::progress::Progress;

/// Kind of the pairwise feedback generations in the result cache.
pub const FEEDBACK_CACHE_KIND: &str = "rubric-relative-feedback";

/// Version of the relative prompts and their reading (part of the label cache identity).
const TEMPLATE_VERSION: &str = "rubric-relative/v2";

/// The two choices, in the order the comparison reads them (first shown as A).
pub const CHOICES: [&str; 2] = ["A", "B"];

/// Prometheus 2's system message for relative grading.
pub const PROMETHEUS_RELATIVE_SYSTEM: &str = "You are a fair judge assistant assigned to \
deliver insightful feedback that compares individual performances, highlighting how each \
stands relative to others within the same cohort.";

const PROMETHEUS_GIVEN_WITH_REFERENCE: &str = "An instruction (might include an Input inside \
it), two responses to evaluate (denoted as Response A and Response B), a reference answer, and \
an evaluation criteria are given.";
const PROMETHEUS_GIVEN: &str = "An instruction (might include an Input inside it), two \
responses to evaluate (denoted as Response A and Response B), and an evaluation criteria are \
given.";
const PROMETHEUS_RULES: &str = "1. Write a detailed feedback that assess the quality of the \
two responses strictly based on the given evaluation criteria, not evaluating in general.
2. Make comparisons between Response A, Response B, and the Reference Answer. Instead of \
examining Response A and Response B separately, go straight to the point and mention about \
the commonalities and differences between them.
3. After writing the feedback, indicate the better response, either \"A\" or \"B\".
4. The output format should look as follows: \"Feedback: (write a feedback for criteria) \
[RESULT] (Either \"A\" or \"B\")\"
5. Please do not generate any other opening, closing, and explanations.";

/// What two responses are compared on: the context and reference answer where there are
/// any, and the responses shown as A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairInput<'a> {
    pub context: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub a: &'a str,
    pub b: &'a str,
}

/// The answer format of `protocol` in relative grading; Flow-Judge has none.
pub fn relative_format(protocol: RubricProtocol) -> Result<ProtocolFormat> {
    Ok(match protocol {
        RubricProtocol::Prometheus => ProtocolFormat {
            marker: "[RESULT] ",
            separator: "",
            opening: "",
            stop: &[],
        },
        RubricProtocol::Plain => ProtocolFormat {
            marker: "Better:",
            separator: " ",
            opening: "Feedback:",
            stop: &[],
        },
        RubricProtocol::FlowJudge => bail!(
            "the flow-judge protocol has no relative grading (Flow-Judge v0.1 grades one \
             output at a time): compare with --protocol prometheus or plain, or grade each \
             candidate with `score --method rubric`"
        ),
    })
}

/// The relative-grading prompt of `protocol` comparing `input`'s responses on `rubric`.
pub fn render_relative(
    protocol: RubricProtocol,
    rubric: &Rubric,
    input: &PairInput,
) -> Result<RubricPrompt> {
    relative_format(protocol)?;
    Ok(match protocol {
        RubricProtocol::Prometheus => RubricPrompt {
            system: Some(PROMETHEUS_RELATIVE_SYSTEM.to_string()),
            user: prometheus(rubric, input),
        },
        _ => RubricPrompt {
            system: None,
            user: plain(rubric, input),
        },
    })
}

fn prometheus(rubric: &Rubric, input: &PairInput) -> String {
    let given = if input.reference.is_some() {
        PROMETHEUS_GIVEN_WITH_REFERENCE
    } else {
        PROMETHEUS_GIVEN
    };
    let instruction = [rubric.instruction.as_deref(), input.context]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut user = format!(
        "###Task Description:\n{given}\n{PROMETHEUS_RULES}\n\n###Instruction:\n{instruction}\n\n\
         ###Response A:\n{}\n\n###Response B:\n{}\n\n",
        input.a, input.b
    );
    if let Some(reference) = input.reference {
        user.push_str(&format!("###Reference Answer:\n{reference}\n\n"));
    }
    user.push_str(&format!(
        "###Score Rubric:\n[{}]\n\n###Feedback: ",
        rubric.criterion
    ));
    user
}

fn plain(rubric: &Rubric, input: &PairInput) -> String {
    let sections = &rubric.sections;
    let item = &sections.output;
    let plural = plural_of(&item.to_lowercase());
    let mut blocks = vec![format!(
        "You will compare two {plural} on a single criterion."
    )];
    if let Some(instruction) = &rubric.instruction {
        blocks.push(format!("Task: {instruction}"));
    }
    if let Some(context) = input.context {
        blocks.push(format!("{}:\n{context}", sections.source));
    }
    if let Some(reference) = input.reference {
        blocks.push(format!("{}:\n{reference}", sections.reference));
    }
    blocks.push(format!("{item} A:\n{}", input.a));
    blocks.push(format!("{item} B:\n{}", input.b));
    blocks.push(format!("Criterion ({}): {}", rubric.name, rubric.criterion));
    blocks.push(format!(
        "Write a short feedback comparing the two {plural} on this criterion alone, then a \
         last line \"Better: A\" or \"Better: B\"."
    ));
    blocks.join("\n\n")
}

/// "summaries", "responses", "texts", "stories".
fn plural_of(noun: &str) -> String {
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
        _ if noun.ends_with('s') || noun.ends_with("sh") || noun.ends_with("ch") => {
            format!("{noun}es")
        }
        _ => format!("{noun}s"),
    }
}

/// Read what the model `generated` after the opening of a relative feedback: `kept` when
/// the marker is followed by `A` or `B` (quotes, brackets and blanks aside).
pub fn read_choice(
    protocol: RubricProtocol,
    generated: &str,
    finish: crate::engine::FinishReason,
) -> Result<Reading> {
    let format = relative_format(protocol)?;
    Ok(read_answer(protocol, format, generated, finish, |after| {
        let after = after.trim_start_matches(|c: char| c.is_whitespace() || "\"'([".contains(c));
        let mut chars = after.chars();
        matches!(chars.next(), Some('A' | 'B')) && !chars.next().is_some_and(char::is_alphanumeric)
    }))
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
        let (protocol, protocol_source) =
            match (requested, scorer.info().conventions.rubric_protocol) {
                (Some(protocol), _) => (protocol, ProtocolSource::Requested),
                (None, Some(protocol)) => (protocol, ProtocolSource::Card),
                (None, None) => (RubricProtocol::Plain, ProtocolSource::Default),
            };
        relative_format(protocol)?;
        if let Some(tokens) = feedback_tokens {
            ensure!(tokens > 0, "a feedback needs at least one token");
        }
        Ok(Self {
            rubric,
            protocol,
            protocol_source,
            feedback_tokens,
            reference,
            readings: BTreeMap::new(),
        })
    }

    /// The label cache's name for these prompts.
    pub fn template_id(&self) -> String {
        format!(
            "{TEMPLATE_VERSION}/{}/{}",
            self.protocol,
            if self.feedback_tokens.is_some() {
                "feedback"
            } else {
                "direct"
            }
        )
    }

    /// The marker after which the choice is read.
    pub fn marker(&self) -> &'static str {
        relative_format(self.protocol)
            .map(|f| f.marker)
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
        let rendered = render_relative(self.protocol, &self.rubric, input)?;
        Ok(TextPrompt {
            system: rendered.system,
            user: rendered.user,
            answer_prefix: answer.to_string(),
        })
    }

    /// The greedy generation of the feedback on `pair` of `context`.
    pub fn feedback_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        pair: (usize, usize),
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let format = relative_format(self.protocol)?;
        let text = self.text_prompt(&self.input(context, pair)?, format.opening)?;
        Ok(GenerationRequest {
            prompt: wrap(text, scorer.info().conventions.chat),
            max_tokens,
            sampling: Sampling::Greedy,
            stop: format.stop.iter().map(|s| s.to_string()).collect(),
        })
    }

    /// The label request reading P(A) against P(B) on `pair` of `context`: after its
    /// feedback and the marker, or right after the prompt and the marker without feedback.
    pub fn choice_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        pair: (usize, usize),
    ) -> Result<LabelRequest> {
        let format = relative_format(self.protocol)?;
        let answer = match self.feedback_tokens {
            None => format.marker.to_string(),
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
        let (answer, written_before) = reading_point(&answer, format.separator);
        let text = self.text_prompt(&self.input(context, pair)?, &answer)?;
        let labels = text_label_tokens_after(scorer, &text, chat, &CHOICES, &written_before)?;
        Ok(LabelRequest {
            prompt: wrap(text, chat),
            labels: labels.into_iter().map(Label::Tokens).collect(),
        })
    }
}

fn wrap(text: TextPrompt, chat: bool) -> Prompt {
    if chat {
        Prompt::chat(text)
    } else {
        Prompt::plain(text)
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
         choice of A or B read after `{}` as its feedback ends",
        grading.protocol,
        grading.protocol_source.describe(),
        grading.marker()
    ));
    let mut at = Vec::with_capacity(total);
    let mut requests = Vec::with_capacity(total);
    for (c, (context, pairs)) in contexts.iter().zip(pairs).enumerate() {
        for &pair in pairs {
            let key = pair_key(context, pair);
            let request = grading
                .feedback_request(scorer, context, pair, max_tokens)
                .with_context(|| format!("context `{}`: `{}` vs `{}`", key.0, key.1, key.2))?;
            at.push((c, pair));
            requests.push(request);
        }
    }
    let bar = progress.task(total as u64, "pairwise feedbacks written (generation)");
    let template = grading.template_id();
    let mut reader = PairFeedbackReader {
        contexts,
        at: &at,
        grading,
        template,
        bar: &bar,
    };
    generate_cached_all(scorer, cache, FEEDBACK_CACHE_KIND, &requests, &mut reader)
        .context("writing the pairwise feedbacks")
}

/// Reads each pairwise feedback as it arrives and asks its choice right after it.
struct PairFeedbackReader<'a> {
    contexts: &'a [Context],
    at: &'a [(usize, (usize, usize))],
    grading: &'a mut RelativeGrading,
    template: String,
    bar: &'a crate::progress::ProgressTask,
}

impl GenerationReader for PairFeedbackReader<'_> {
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>> {
        let (c, pair) = self.at[index];
        let context = &self.contexts[c];
        let key = pair_key(context, pair);
        let at = || format!("context `{}`: `{}` vs `{}`", key.0, key.1, key.2);
        let reading = read_choice(self.grading.protocol, &generation.text, generation.finish)
            .with_context(at)?;
        self.grading.readings.insert(key.clone(), reading);
        let request = self
            .grading
            .choice_request(scorer, context, pair)
            .and_then(|request| plan_label(scorer, &self.template, request, None))
            .with_context(at)?;
        if cached {
            self.bar.found_in_cache(1);
        } else {
            self.bar.step(1)?;
        }
        Ok(Some(request))
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
        let text = render_relative(RubricProtocol::Plain, &rubric, &input(Some("GOLD")))
            .unwrap()
            .user;
        let order = [
            "You will compare two summaries on a single criterion.",
            "\n\nSource Text:\nART",
            "\n\nReference Summary:\nGOLD",
            "\n\nSummary A:\nONE",
            "\n\nSummary B:\nTWO",
            "\n\nCriterion (Coherence): ",
            "then a last line \"Better: A\" or \"Better: B\".",
        ];
        let mut at = 0;
        for part in order {
            let found = text[at..]
                .find(part)
                .unwrap_or_else(|| panic!("{part:?} in {text}"));
            at += found + part.len();
        }
    }

    #[test]
    fn flow_judge_has_no_relative_format() {
        let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
        let error = render_relative(RubricProtocol::FlowJudge, &rubric, &input(None))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no relative grading"), "{error}");
    }

    #[test]
    fn a_choice_is_kept_only_as_a_lone_a_or_b_after_one_marker() {
        use super::super::FormatOutcome::*;
        let read = |text: &str, finish| {
            read_choice(RubricProtocol::Prometheus, text, finish)
                .unwrap()
                .format
        };
        assert_eq!(read("A is clearer. [RESULT] A", FinishReason::Stop), Kept);
        assert_eq!(read("fine [RESULT] \"B\"", FinishReason::Stop), Kept);
        assert_eq!(read("fine [RESULT] Both", FinishReason::Stop), NoScore);
        assert_eq!(
            read("x [RESULT] A [RESULT] B", FinishReason::Stop),
            Repeated
        );
        assert_eq!(read("no marker at all", FinishReason::Stop), Missing);
        assert_eq!(read("no marker at all", FinishReason::MaxTokens), Cut);
        let reading =
            read_choice(RubricProtocol::Prometheus, "B wins.", FinishReason::Stop).unwrap();
        assert_eq!(reading.answer, "B wins. [RESULT] ");
        assert_eq!(reading.feedback, "B wins.");
        let plain = read_choice(
            RubricProtocol::Plain,
            " B reads better.",
            FinishReason::Stop,
        )
        .unwrap();
        assert_eq!(plain.answer, "Feedback: B reads better.\nBetter:");
    }

    #[test]
    fn plurals_of_the_output_nouns() {
        assert_eq!(plural_of("summary"), "summaries");
        assert_eq!(plural_of("response"), "responses");
        assert_eq!(plural_of("story"), "stories");
        assert_eq!(plural_of("essay"), "essays");
        assert_eq!(plural_of("text"), "texts");
    }
}
