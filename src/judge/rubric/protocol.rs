//! The rubric-grading formats: the prompt each judge model was trained on, the marker
//! after which it writes its score, and the requests that ask it.
//!
//! - **prometheus** (Prometheus 2's absolute grading, `prompts.py` of
//!   prometheus-eval/prometheus-eval): the system message `ABS_SYSTEM_PROMPT`, and the user
//!   text `###Task Description:` ... `###The instruction to evaluate:`,
//!   `###Response to evaluate:`, `###Reference Answer (Score 5):` (with a reference),
//!   `###Score Rubrics:` (`[criterion]` and `Score k: description`), `###Feedback: `. The
//!   model writes `feedback [RESULT] N`. Trained on 1-5 only: other scales are refused.
//! - **flow-judge** (Flow-Judge v0.1, `prompt_formatter.py` of flowaicom/flow-judge): the
//!   user text `# GOAL` ... `<inputs>` (one `<tag>` block per input; the template without
//!   inputs when there are none) ... `<output>`, `<evaluation_criteria>`,
//!   `<scoring_rubric>` (`- Score k: description`) and the instructions; the model writes
//!   `<feedback>...</feedback>` then `<score>N</score>`.
//! - **plain** (ours, for any instruct model): the sections below, the model's answer
//!   opened with `Feedback:`, then a last line `Score: N`.
//!
//! ```text
//! You will grade one summary on a single criterion, using the score rubric below.
//!
//! Task: <the rubric's instruction>                  (when it has one)
//!
//! Source Text:                                      (when there is a context)
//! <context>
//!
//! Reference Summary (score 5):                      (with --reference)
//! <reference>
//!
//! Summary:
//! <candidate>
//!
//! Criterion (Coherence): <criterion>
//!
//! Score rubric:
//! Score 1: <description>
//! ...
//! Score 5: <description>
//!
//! Write a short feedback on the summary judged by the rubric alone, then a last line
//! "Score: N", where N is a whole number from 1 to 5.
//! ```
//!
//! The published texts are reproduced byte for byte (typos included: "a evaluation
//! criteria", "criterion,decide"); `tests/fixtures/rubric/` holds them as the authors'
//! templates render them, with the repository, path and commit of each.

use anyhow::{ensure, Result};

use super::{Rubric, DEFAULT_SCALE};
use crate::engine::{
    GenerationRequest, Label, LabelRequest, Prompt, RubricProtocol, Sampling, Scorer, TextPrompt,
};
use crate::judge::scale::score_label_tokens_after;

/// What a protocol's answer looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolFormat {
    /// After this the model writes its score; the score is read right after it.
    pub marker: &'static str,
    /// Written between the marker and a score: nothing after `[RESULT] ` (which ends in
    /// the space) and `<score>` (`<score>1</score>`), a space after `Score:`.
    pub separator: &'static str,
    /// Opens the model's answer when it writes a feedback.
    pub opening: &'static str,
    /// Where the feedback generation may stop (after the score).
    pub stop: &'static [&'static str],
}

/// The answer format of `protocol`.
pub fn format(protocol: RubricProtocol) -> ProtocolFormat {
    match protocol {
        RubricProtocol::Prometheus => ProtocolFormat {
            marker: "[RESULT] ",
            separator: "",
            opening: "",
            stop: &[],
        },
        RubricProtocol::FlowJudge => ProtocolFormat {
            marker: "<score>",
            separator: "",
            opening: "",
            stop: &["</score>"],
        },
        RubricProtocol::Plain => ProtocolFormat {
            marker: "Score:",
            separator: " ",
            opening: "Feedback:",
            stop: &[],
        },
    }
}

/// What is graded: the output, with its context and reference answer where there are any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RubricInput<'a> {
    pub context: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub output: &'a str,
}

/// A rendered rubric prompt: the system message (Prometheus') and the user text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RubricPrompt {
    pub system: Option<String>,
    pub user: String,
}

/// The prompt of `protocol` grading `input` on `rubric`.
pub fn render(
    protocol: RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
) -> Result<RubricPrompt> {
    Ok(match protocol {
        RubricProtocol::Prometheus => prometheus(rubric, input)?,
        RubricProtocol::FlowJudge => RubricPrompt {
            system: None,
            user: flow_judge(rubric, input),
        },
        RubricProtocol::Plain => RubricPrompt {
            system: None,
            user: plain(rubric, input),
        },
    })
}

/// Prometheus 2's system message for absolute grading.
pub const PROMETHEUS_SYSTEM: &str = "You are a fair judge assistant tasked with providing \
clear, objective feedback based on specific criteria, ensuring each assessment reflects the \
absolute standards set for performance.";

/// The task description's first line, with and without a reference answer.
const PROMETHEUS_GIVEN_WITH_REFERENCE: &str = "An instruction (might include an Input inside \
it), a response to evaluate, a reference answer that gets a score of 5, and a score rubric \
representing a evaluation criteria are given.";
const PROMETHEUS_GIVEN: &str = "An instruction (might include an Input inside it), a response \
to evaluate, and a score rubric representing a evaluation criteria are given.";

/// The task description's numbered rules.
const PROMETHEUS_RULES: &str = "1. Write a detailed feedback that assess the quality of the \
response strictly based on the given score rubric, not evaluating in general.
2. After writing a feedback, write a score that is an integer between 1 and 5. You should \
refer to the score rubric.
3. The output format should look as follows: \"(write a feedback for criteria) [RESULT] (an \
integer number between 1 and 5)\"
4. Please do not generate any other opening, closing, and explanations.";

/// Prometheus' "instruction to evaluate": the rubric's instruction, a blank line and the
/// context (the "Input inside it"), whichever there are.
fn prometheus_instruction(rubric: &Rubric, input: &RubricInput) -> String {
    [rubric.instruction.as_deref(), input.context]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn prometheus(rubric: &Rubric, input: &RubricInput) -> Result<RubricPrompt> {
    ensure!(
        rubric.scale == DEFAULT_SCALE,
        "the prometheus protocol grades on 1-5 only (Prometheus 2 was trained so), and the \
         rubric {} has the scale {}: use --protocol plain or flow-judge, or a 1-5 rubric",
        rubric.name,
        rubric.scale
    );
    let given = if input.reference.is_some() {
        PROMETHEUS_GIVEN_WITH_REFERENCE
    } else {
        PROMETHEUS_GIVEN
    };
    let mut user = format!(
        "###Task Description:\n{given}\n{PROMETHEUS_RULES}\n\n###The instruction to evaluate:\n\
         {}\n\n###Response to evaluate:\n{}\n\n",
        prometheus_instruction(rubric, input),
        input.output
    );
    if let Some(reference) = input.reference {
        user.push_str(&format!("###Reference Answer (Score 5):\n{reference}\n\n"));
    }
    let levels: Vec<String> = rubric
        .levels()
        .map(|(score, description)| format!("Score {score}: {description}"))
        .collect();
    user.push_str(&format!(
        "###Score Rubrics:\n[{}]\n{}\n\n###Feedback: ",
        rubric.criterion,
        levels.join("\n")
    ));
    Ok(RubricPrompt {
        system: Some(PROMETHEUS_SYSTEM.to_string()),
        user,
    })
}

/// Flow-Judge's opening paragraphs, with inputs and without.
const FLOW_GOAL: &str = "# GOAL\nYour job is to evaluate a task carried out by an AI system \
powered by a large language model.\n\n";
const FLOW_PROVIDED_WITH_INPUTS: &str = "You will be provided with the inputs and output of the \
task, as well as the evaluation criteria and scoring rubric.";
const FLOW_PROVIDED: &str = "You will be provided the output of the task, as well as the \
evaluation criteria and scoring rubric.";
const FLOW_TASK: &str = " Your task is to evaluate the output of the AI system based on the \
evaluation criteria and scoring rubric provided.\n\n";

/// Flow-Judge's instructions: the first, the second (with inputs and without), the rest.
const FLOW_INSTRUCTIONS_START: &str = "# INSTRUCTIONS FOR THE EVALUATION\n1. Understand the task \
and criteria: Familiarize yourself with the task to be evaluated. Review the evaluation \
criteria and scoring rubric to understand the different levels of performance and the \
descriptions for each score.\n";
const FLOW_REVIEW_WITH_INPUTS: &str = "2. Review the inputs and output: Look at the inputs \
provided for the task. Examine the output generated from completing the task.\n";
const FLOW_REVIEW: &str = "2. Review the output: Examine the output generated from completing \
the task.\n";
const FLOW_INSTRUCTIONS_END: &str = "3. Compare output to score descriptions: Compare the \
output against the criteria and score descriptions in the scoring rubric. For each \
criterion,decide which description best matches the output.
4. After comparing the output to the score descriptions, pay attention to the small details \
that might impact the final score that you assign. Sometimes a small difference can dictate \
the final score.
5. Write verbal feedback justifying your evaluation that includes a detailed rationale, \
referring to specific aspects of the output and comparing them to the rubric.
6. Assign a final score based on the scoring rubric.

## FORMAT FOR THE EVALUATION
- Write the verbal feedback inside <feedback> tags without any additional surrounding text.
- Write the numeric score inside <score> tags, without any additional surrounding text and \
always after the feedback.

Please accurately evaluate the task. Strictly adhere to the evaluation criteria and rubric.";

/// Flow-Judge's variable blocks: `<tag>\nvalue\n</tag>`, the tag the name in lower case
/// with spaces as underscores, one block per line.
fn flow_vars(vars: &[(&str, &str)]) -> String {
    vars.iter()
        .map(|(name, value)| {
            let tag = name.to_lowercase().replace(' ', "_");
            format!("<{tag}>\n{value}\n</{tag}>")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn flow_judge(rubric: &Rubric, input: &RubricInput) -> String {
    let inputs: Vec<(&str, &str)> = [
        ("instruction", rubric.instruction.as_deref()),
        (rubric.sections.source.as_str(), input.context),
        (rubric.sections.reference.as_str(), input.reference),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|v| (name, v)))
    .collect();
    let with_inputs = !inputs.is_empty();
    let mut text = FLOW_GOAL.to_string();
    text.push_str(if with_inputs {
        FLOW_PROVIDED_WITH_INPUTS
    } else {
        FLOW_PROVIDED
    });
    text.push_str(FLOW_TASK);
    if with_inputs {
        text.push_str(&format!(
            "# INPUT\nBelow are the inputs required for performing the task:\n<inputs>\n{}\n\
             </inputs>\n\n",
            flow_vars(&inputs)
        ));
    }
    let levels: Vec<String> = rubric
        .levels()
        .map(|(score, description)| format!("- Score {score}: {description}"))
        .collect();
    text.push_str(&format!(
        "# OUTPUT\nBelow is the output of the task:\n<output>\n{}\n</output>\n\n\
         # EVALUATION CRITERIA AND SCORING RUBRIC\nHere are the evaluation criteria and the \
         rubric that you need to use for evaluating the task:\n<evaluation_criteria>\n{}\n\
         </evaluation_criteria>\n\n<scoring_rubric>\n{}\n</scoring_rubric>\n\n",
        flow_vars(&[(rubric.sections.output.as_str(), input.output)]),
        rubric.criterion,
        levels.join("\n")
    ));
    text.push_str(FLOW_INSTRUCTIONS_START);
    text.push_str(if with_inputs {
        FLOW_REVIEW_WITH_INPUTS
    } else {
        FLOW_REVIEW
    });
    text.push_str(FLOW_INSTRUCTIONS_END);
    text
}

/// Our plain format (see the module header).
fn plain(rubric: &Rubric, input: &RubricInput) -> String {
    let sections = &rubric.sections;
    let noun = sections.output.to_lowercase();
    let (low, high) = (rubric.scale.low(), rubric.scale.high());
    let mut blocks = vec![format!(
        "You will grade one {noun} on a single criterion, using the score rubric below."
    )];
    if let Some(instruction) = &rubric.instruction {
        blocks.push(format!("Task: {instruction}"));
    }
    if let Some(context) = input.context {
        blocks.push(format!("{}:\n{context}", sections.source));
    }
    if let Some(reference) = input.reference {
        blocks.push(format!(
            "{} (score {high}):\n{reference}",
            sections.reference
        ));
    }
    blocks.push(format!("{}:\n{}", sections.output, input.output));
    blocks.push(format!("Criterion ({}): {}", rubric.name, rubric.criterion));
    let levels: Vec<String> = rubric
        .levels()
        .map(|(score, description)| format!("Score {score}: {description}"))
        .collect();
    blocks.push(format!("Score rubric:\n{}", levels.join("\n")));
    blocks.push(format!(
        "Write a short feedback on the {noun} judged by the rubric alone, then a last line \
         \"Score: N\", where N is a whole number from {low} to {high}."
    ));
    blocks.join("\n\n")
}

/// The prompt with the model's answer so far (`answer`, after the assistant turn's
/// opening for chat models), as the model reads it.
pub fn prompt(
    scorer: &dyn Scorer,
    protocol: RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
    answer: &str,
) -> Result<(TextPrompt, bool)> {
    let rendered = render(protocol, rubric, input)?;
    let text = TextPrompt {
        system: rendered.system,
        user: rendered.user,
        answer_prefix: answer.to_string(),
    };
    Ok((text, scorer.info().conventions.chat))
}

fn wrap(text: TextPrompt, chat: bool) -> Prompt {
    if chat {
        Prompt::chat(text)
    } else {
        Prompt::plain(text)
    }
}

/// The greedy generation of the model's feedback (and score), at most `max_tokens`.
pub fn feedback_request(
    scorer: &dyn Scorer,
    protocol: RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
    max_tokens: usize,
) -> Result<GenerationRequest> {
    let format = format(protocol);
    let (text, chat) = prompt(scorer, protocol, rubric, input, format.opening)?;
    Ok(GenerationRequest {
        prompt: wrap(text, chat),
        max_tokens,
        sampling: Sampling::Greedy,
        stop: format.stop.iter().map(|s| s.to_string()).collect(),
    })
}

/// The label request reading the score after `answer` (which ends with the marker): one
/// label per score of the rubric's scale, written as the protocol writes it.
pub fn score_request(
    scorer: &dyn Scorer,
    protocol: RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
    answer: &str,
) -> Result<LabelRequest> {
    let (answer, written_before) = reading_point(answer, format(protocol).separator);
    let (text, chat) = prompt(scorer, protocol, rubric, input, &answer)?;
    let labels = score_label_tokens_after(scorer, &text, chat, rubric.scale, &written_before)?;
    Ok(LabelRequest {
        prompt: wrap(text, chat),
        labels: labels.into_iter().map(Label::Tokens).collect(),
    })
}

/// Where a result is read after `answer` (which ends with the marker): the answer up to
/// the marker's last visible character, and what the model writes before the result
/// there (the marker's trailing blanks, then `separator`). A marker that ends in a blank
/// (`[RESULT] `) gives its blank to the result, so that `[RESULT] A` is read as the model
/// writes it: the tokenisers of Llama, Mistral and GPT-2 attach a space to the word after
/// it (`▁A`, `ĠA`), and a prompt that ends in a lone space token is one the model never
/// saw before a result.
pub fn reading_point(answer: &str, separator: &str) -> (String, String) {
    let kept = answer.trim_end();
    (
        kept.to_string(),
        format!("{}{separator}", &answer[kept.len()..]),
    )
}

/// The answer read right after the prompt without a feedback (`--no-feedback`): the
/// marker alone.
pub fn direct_answer(protocol: RubricProtocol) -> &'static str {
    format(protocol).marker
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Task;

    fn input<'a>(context: Option<&'a str>, reference: Option<&'a str>) -> RubricInput<'a> {
        RubricInput {
            context,
            reference,
            output: "OUT",
        }
    }

    #[test]
    fn plain_prompts_show_what_there_is_in_order() {
        let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
        let text = plain(&rubric, &input(Some("ART"), Some("GOLD")));
        let order = [
            "You will grade one summary on a single criterion",
            "\n\nTask: Summarize the following news article.",
            "\n\nSource Text:\nART",
            "\n\nReference Summary (score 5):\nGOLD",
            "\n\nSummary:\nOUT",
            "\n\nCriterion (Coherence): Does the summary",
            "\n\nScore rubric:\nScore 1: ",
            "\nScore 5: ",
            "then a last line \"Score: N\", where N is a whole number from 1 to 5.",
        ];
        assert_eq!(crate::judge::assert_in_order(&text, &order), text.len());
        let bare = plain(&rubric, &input(None, None));
        assert!(!bare.contains("Source Text") && !bare.contains("Reference"));
    }

    #[test]
    fn prometheus_refuses_other_scales_and_names_the_way_out() {
        let mut rubric = Rubric::builtin("fluency", Task::Summary).unwrap();
        rubric.scale = crate::judge::ScoreScale::new(1, 3).unwrap();
        rubric.descriptions.truncate(3);
        let error = render(RubricProtocol::Prometheus, &rubric, &input(None, None))
            .unwrap_err()
            .to_string();
        assert!(error.contains("1-5 only") && error.contains("--protocol plain"));
        // The other formats list the rubric's own scores.
        let flow = render(RubricProtocol::FlowJudge, &rubric, &input(None, None)).unwrap();
        assert!(flow.user.contains("\n- Score 3: ") && !flow.user.contains("- Score 4"));
        assert!(plain(&rubric, &input(None, None)).contains("from 1 to 3."));
    }

    #[test]
    fn every_marker_ends_the_direct_answer() {
        for protocol in RubricProtocol::ALL {
            let format = format(protocol);
            assert_eq!(direct_answer(protocol), format.marker);
            assert!(format.opening.is_empty() || protocol == RubricProtocol::Plain);
        }
    }
}
