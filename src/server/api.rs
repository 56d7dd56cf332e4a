//! The service's request and response bodies, and the checks that turn a request into a
//! job for the model worker.
//!
//! Bodies are parsed strictly (unknown fields are errors) with the path of the offending
//! field and its line and column in the message. Checks that need no model (known
//! attribute and criteria names, scales, candidate counts, templates) happen here, so
//! that bad requests are answered without queueing.

use std::collections::HashSet;

use anyhow::{bail, Context as _, Result};
use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::worker::LabelTask;
use crate::data::{Candidate, Context};
use crate::engine::ModelInfo;
use crate::judge::diagnostics::{self, label_mass, Audience, Diagnostics};
use crate::judge::geval::{criteria_from_text, Criteria, ScaleSource};
use crate::judge::pairwise::fit::SetAside;
use crate::judge::pairwise::{CompareOptions, CompareRequest, Debias};
use crate::judge::rubric::protocol::{render, RubricInput};
use crate::judge::rubric::run::DEFAULT_FEEDBACK_TOKENS;
use crate::judge::rubric::RubricProtocol;
use crate::judge::rubric::{FormatOutcome, Rubric};
use crate::judge::{
    absolute, Attribute, Nouns, ResolvedMethod, ScoreDistribution, ScoreRun, ScoreScale, Task,
};
use crate::progress::Progress;
use crate::rank::RankMethod;

pub use crate::judge::geval::free_text::DEFAULT_INTRODUCTION;

/// Parse a JSON body into `T`; the error names the field path, line and column.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    // Every body is an object: an array would otherwise be read field by field (serde
    // takes a struct's fields in order from a sequence) and refused as `invalid field
    // '[0]'`.
    if let Some(&first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        if first != b'{' {
            let value: Value = serde_json::from_slice(bytes)
                .map_err(|e| anyhow::anyhow!("malformed JSON body: {e}"))?;
            let kind = match value {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                Value::Null => "null",
                Value::Object(_) => "an object",
            };
            bail!("invalid body: the body must be a JSON object, not {kind}");
        }
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            anyhow::anyhow!("malformed JSON body: {inner}")
        } else if path == "." {
            // Well-formed JSON that is not the body asked for: a field missing (`{}`),
            // or not an object.
            if inner.to_string().starts_with("missing field") {
                anyhow::anyhow!("incomplete body: {inner}")
            } else {
                anyhow::anyhow!("invalid body: {inner}")
            }
        } else {
            anyhow::anyhow!("invalid field `{path}`: {inner}")
        }
    })?;
    deserializer
        .end()
        .map_err(|e| anyhow::anyhow!("malformed JSON body: {e}"))?;
    Ok(value)
}

/// `POST /v1/geval`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GevalBody {
    /// The output to rate (`candidate`, as in input files, is taken too).
    #[serde(alias = "candidate")]
    pub output: String,
    /// The expected output (reference-based rating).
    pub expected_output: Option<String>,
    /// The input the output was produced for.
    pub context: Option<String>,
    /// A built-in criterion name; or the criterion as free text (`"Coherence (1-5):
    /// evaluate the logical flow ..."`, its scale from the `(1-5)` range, else `scale`,
    /// else 1-5); or an object with `name`, `criterion`, and optionally `introduction`
    /// and `scale`.
    pub criteria: Value,
    /// The task introduction (the G-Eval example's TaskPrompt); replaces the criterion's
    /// own introduction.
    pub task_prompt: Option<String>,
    /// Task of a built-in criterion (default summary).
    pub task: Option<Task>,
    /// Evaluation steps to use instead of the model's own.
    pub steps: Option<String>,
    /// Score scale `[low, high]` (default: the criterion's).
    pub scale: Option<ScoreScale>,
}

/// User criteria inside a G-Eval request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomCriteria {
    pub name: String,
    pub criterion: String,
    pub introduction: Option<String>,
    pub scale: Option<ScoreScale>,
}

/// `POST /v1/score`: prompt scoring (`attribute`), or rubric grading (`method: "rubric"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreBody {
    /// The output to rate (`candidate`, as in input files, is taken too).
    #[serde(alias = "candidate")]
    pub output: String,
    pub context: Option<String>,
    /// `prompt` (the default) or `rubric`.
    pub method: Option<String>,
    /// Prompt scoring: the attribute the prompt names (needed).
    pub attribute: Option<String>,
    /// Refused when given: prompt scoring names the attribute itself (kept so that the
    /// refusal names the field rather than calling it unknown).
    pub adjective: Option<String>,
    pub task: Option<Task>,
    /// Prompt scoring's scale (default 1-10); a rubric's descriptions set its own.
    pub scale: Option<ScoreScale>,
    /// Rubric grading: a built-in rubric's name (`coherence`, `dialogue/engagingness`), or
    /// an object with `criterion` and `descriptions` (one per score, lowest first) and
    /// optionally `name`, `scale`, `instruction`, `sections`. Never a file.
    pub rubric: Option<Value>,
    /// Rubric grading: a built-in protocol's name (`prometheus`, `flow-judge`, `plain`,
    /// ...), or an object with a protocol file's fields (default: the served model's
    /// card's, else plain). Never a file.
    pub protocol: Option<RubricProtocol>,
    /// Rubric grading with a thinking judge: most tokens of its reasoning (default 1024,
    /// at most [`MAX_FEEDBACK_TOKENS`]).
    pub max_reasoning_tokens: Option<usize>,
    /// Rubric grading with a thinking judge: `false` switches thinking off where its
    /// protocol says how (default true).
    pub thinking: Option<bool>,
    /// Rubric grading: write a feedback before the score (default true).
    pub feedback: Option<bool>,
    /// Rubric grading: most tokens of the feedback (default 512, at most
    /// [`MAX_FEEDBACK_TOKENS`]).
    pub max_feedback_tokens: Option<usize>,
    /// Rubric grading: the reference answer, shown as the one that scores highest
    /// (`expected_output`, as `/v1/geval` names it, is taken too).
    #[serde(alias = "expected_output")]
    pub reference: Option<String>,
}

/// The most feedback tokens a rubric request may ask for (each request's generation holds
/// the model for the others).
pub const MAX_FEEDBACK_TOKENS: usize = 2048;

/// A candidate of a compare request: its text, or an object with an id and the text.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CandidateBody {
    Text(String),
    WithId { id: String, text: String },
}

/// `POST /v1/compare`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareBody {
    pub context: String,
    pub candidates: Vec<CandidateBody>,
    /// Needed, unless a `rubric` names it (its name, as `compare --rubric`).
    pub attribute: Option<String>,
    /// The comparative of an attribute that is not built in ("more empathetic").
    pub adjective: Option<String>,
    /// Or the whole question ("Which story shows more empathy").
    pub question: Option<String>,
    pub task: Option<Task>,
    /// The candidates' noun ("Story"); needed with task `custom`.
    pub item: Option<String>,
    /// The context's label ("Prompt"); needed with task `custom`.
    pub context_label: Option<String>,
    /// `c1` (default) or `c2`.
    pub template: Option<String>,
    /// How comparisons become scores: as `compare --rank` (default: win ratio, and
    /// Product of Experts where the judge's answers cannot be ranked by it; the
    /// diagnostics' `adjusted` says so).
    pub rank: Option<RankMethod>,
    /// `none` (default) or `threshold`: as `compare --debias`.
    pub debias: Option<Debias>,
    /// Relative rubric grading (`compare --rubric`): a built-in rubric's name, or an
    /// object with `criterion` and `descriptions` (as `/v1/score`'s). The judge writes a
    /// feedback comparing the two candidates, then P(A) is read after its result marker.
    pub rubric: Option<Value>,
    /// Relative rubric grading: a built-in protocol's name with a relative form
    /// (`prometheus`, `plain`, ...), or an object with a protocol file's fields (default:
    /// the served model's card's, else plain). Never a file.
    pub protocol: Option<RubricProtocol>,
    /// Relative rubric grading with a thinking judge: most tokens of its reasoning
    /// (default 1024, at most [`MAX_FEEDBACK_TOKENS`]).
    pub max_reasoning_tokens: Option<usize>,
    /// Relative rubric grading with a thinking judge: `false` switches thinking off where
    /// its protocol says how (default true).
    pub thinking: Option<bool>,
    /// Relative rubric grading: write a feedback before the choice (default true).
    pub feedback: Option<bool>,
    /// Relative rubric grading: most tokens of each feedback (default 512, at most
    /// [`MAX_FEEDBACK_TOKENS`]).
    pub max_feedback_tokens: Option<usize>,
    /// Relative rubric grading: the reference answer shown with every comparison.
    #[serde(alias = "expected_output")]
    pub reference: Option<String>,
}

/// Scores and their probabilities, serialised as an object in score order
/// (`{"1": 0.1, "2": 0.3, ...}`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreMap(pub Vec<(i64, f64)>);

impl Serialize for ScoreMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (score, p) in &self.0 {
            map.serialize_entry(&score.to_string(), p)?;
        }
        map.end()
    }
}

/// The answer of `/v1/geval` and `/v1/score`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreResponse {
    pub score: f64,
    pub argmax: i64,
    /// Normalised over the scale (sums to 1).
    pub probabilities: ScoreMap,
    /// As the model gives them (their sum is `label_mass`).
    pub raw_probabilities: ScoreMap,
    pub label_mass: f64,
    /// G-Eval only: the evaluation steps used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<String>,
    /// The score scale `[low, high]` the model rated on.
    pub scale: [i64; 2],
    /// G-Eval only: where the scale came from (`criteria_text`, `requested`, `default`,
    /// or `criteria` for a built-in or object criterion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_source: Option<&'static str>,
    /// G-Eval only: the criterion's name as the form line shows it (a string that is no
    /// built-in name is read as free text: its name is the text before the range or
    /// colon, else "Score").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub criteria_name: Option<String>,
    /// Rubric grading: the rubric and the protocol it was asked in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rubric: Option<RubricUsed>,
    /// Rubric grading with feedback: the model's feedback (the text before its result
    /// marker), as `score --output` writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Rubric grading with feedback: whether the model kept to its format (`kept`,
    /// `no-score`, `repeated`, `missing`, `cut`), as `score --output` writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<&'static str>,
    /// Rubric grading with a thinking judge: its reasoning (between its markers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Rubric grading with a thinking judge: the reasoning was cut at its budget and
    /// closed before the verdict was read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_cut: bool,
    /// Whether the judge was judging this answer: its label mass, for G-Eval the
    /// evaluation steps, for rubric grading the format (see `judge::diagnostics`).
    pub diagnostics: Diagnostics,
}

/// How a rubric request was graded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RubricUsed {
    /// The rubric's name (a built-in's, or the object's `name`).
    pub name: String,
    /// `prometheus`, `flow-judge` or `plain`.
    pub protocol: RubricProtocol,
    /// `requested`, `card` (the served model's) or `default` (plain).
    pub protocol_source: &'static str,
    /// Whether a feedback was written before the score.
    pub feedback: bool,
}

impl ScoreResponse {
    /// The answer of a rubric job: its one candidate's distribution, feedback and format,
    /// the rubric and protocol, and the run's diagnostics.
    pub fn of_rubric(run: &ScoreRun) -> Result<Self> {
        let ResolvedMethod::Rubric(method) = &run.method else {
            bail!("not a rubric run");
        };
        let graded = run
            .candidates
            .first()
            .context("the rubric run graded nothing")?;
        let distribution = graded
            .distribution
            .as_ref()
            .context("the rubric run gave no distribution")?;
        let mut response = Self::new(distribution, None);
        response.rubric = Some(RubricUsed {
            name: method.rubric.name.clone(),
            protocol: method.protocol.clone(),
            protocol_source: method.protocol_source.name(),
            feedback: method.feedback_tokens.is_some(),
        });
        response.feedback = graded.feedback.clone();
        response.format = graded.format.map(FormatOutcome::name);
        response.reasoning = graded.reasoning.clone();
        response.reasoning_cut = graded.reasoning_cut;
        response.diagnostics = run.diagnostics.clone();
        Ok(response)
    }

    pub fn new(distribution: &ScoreDistribution, steps: Option<String>) -> Self {
        let pairs = |values: &[f64]| {
            ScoreMap(
                distribution
                    .scores
                    .iter()
                    .copied()
                    .zip(values.iter().copied())
                    .collect(),
            )
        };
        let mut checks: Vec<_> =
            label_mass(&[distribution.mass], "score labels", Audience::Service)
                .into_iter()
                .collect();
        if let Some(text) = &steps {
            checks.insert(0, diagnostics::steps(text, Audience::Service));
        }
        Self {
            diagnostics: Diagnostics::new(checks),
            score: distribution.expectation,
            argmax: distribution.argmax,
            probabilities: pairs(&distribution.normalised),
            raw_probabilities: pairs(&distribution.raw),
            label_mass: distribution.mass,
            steps,
            scale: [
                distribution.scores.first().copied().unwrap_or_default(),
                distribution.scores.last().copied().unwrap_or_default(),
            ],
            scale_source: None,
            criteria_name: None,
            rubric: None,
            feedback: None,
            format: None,
            reasoning: None,
            reasoning_cut: false,
        }
    }
}

/// One candidate in the answer of `/v1/compare`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedCandidate {
    pub id: String,
    pub score: f64,
    /// 1 = best; ties share the average rank. Written as `compare --output` writes it:
    /// `2`, or `2.5` for a tie.
    #[serde(serialize_with = "rank_number")]
    pub rank: f64,
}

/// A rank as the command line's output files write it: a whole rank as an integer.
fn rank_number<S: Serializer>(rank: &f64, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    if rank.fract() == 0.0 && rank.is_finite() && rank.abs() < 1e15 {
        serializer.serialize_i64(*rank as i64)
    } else {
        serializer.serialize_f64(*rank)
    }
}

/// The judge's feedback on one comparison of a relative rubric grading: `a` shown first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFeedbackBody {
    pub a: String,
    pub b: String,
    /// P(A better), read after the feedback and the marker (over A, B and the tie where
    /// the protocol has a tie label).
    pub p_a: f64,
    /// P(B) and P(tie) over the three answers, where the protocol has a tie label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_b: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_tie: Option<f64>,
    pub feedback: String,
    /// `kept`, `no-score`, `repeated`, `missing` or `cut`.
    pub format: &'static str,
}

/// A candidate of a compare request left out because it does not fit the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetAsideCandidate {
    pub id: String,
    /// Tokens its comparison with the shortest other candidate needs; `None` for one that
    /// fits but has no other candidate left to meet.
    pub tokens: Option<usize>,
    /// The model's window.
    pub limit: usize,
    /// Why, in words.
    pub reason: String,
}

impl From<&SetAside> for SetAsideCandidate {
    fn from(aside: &SetAside) -> Self {
        Self {
            id: aside.candidate_id.clone(),
            tokens: aside.tokens,
            limit: aside.limit,
            reason: aside.reason(),
        }
    }
}

/// The answer of `/v1/compare`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareResponse {
    /// The candidates ranked, in request order (without those set aside).
    pub candidates: Vec<RankedCandidate>,
    /// Candidates too long for the model, left out of the ranking as on the command line
    /// (the diagnostics' `too_long` check names them too); empty when all fit.
    pub set_aside: Vec<SetAsideCandidate>,
    pub comparisons: usize,
    /// The ranking the scores come from (`win-ratio`, `soft`, `bradley-terry`, `poe`):
    /// the one asked for, or the fallback the diagnostics' `adjusted` explains.
    pub rank: RankMethod,
    /// Whether the judge was judging: positional bias, order consistency, ties, label
    /// mass (see `judge::diagnostics`); with relative rubric grading, the format too.
    pub diagnostics: Diagnostics,
    /// Relative rubric grading: the rubric and protocol the comparisons were graded by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rubric: Option<RubricUsed>,
    /// Relative rubric grading with feedback: the judge's feedback on every comparison,
    /// in design order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedbacks: Option<Vec<PairFeedbackBody>>,
    /// A judge that may call a tie (a protocol with a tie label): how the ranking counted
    /// the ties (the diagnostics' `tie_rate` gives how often it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ties: Option<String>,
}

fn non_empty(field: &str, text: &str) -> Result<()> {
    if text.trim().is_empty() {
        bail!("field `{field}` is empty");
    }
    Ok(())
}

/// Where a G-Eval request's scale came from, as the response names it.
fn scale_source_name(source: Option<ScaleSource>, requested: bool) -> &'static str {
    match source {
        Some(ScaleSource::CriteriaText) => "criteria_text",
        Some(ScaleSource::Requested) => "requested",
        Some(ScaleSource::Default) => "default",
        None if requested => "requested",
        None => "criteria",
    }
}

/// The criteria of a G-Eval request, and where their scale came from.
fn criteria_of(body: &GevalBody) -> Result<(Criteria, &'static str)> {
    let task = body.task.unwrap_or(Task::Summary);
    let task_prompt = body.task_prompt.as_deref().filter(|p| !p.trim().is_empty());
    let (criteria, source) = match &body.criteria {
        Value::String(text) => match Criteria::builtin(task, text) {
            Ok(builtin) => (builtin, None),
            // Not a built-in name: the string is the criterion itself.
            Err(_) => {
                let (criteria, source) =
                    criteria_from_text(text, task_prompt, body.scale, body.task)
                        .context("field `criteria`")?;
                return Ok((criteria, scale_source_name(Some(source), false)));
            }
        },
        Value::Object(_) => {
            let custom: CustomCriteria = serde_path_to_error::deserialize(body.criteria.clone())
                .map_err(|e| {
                    anyhow::anyhow!("invalid field `criteria.{}`: {}", e.path(), e.inner())
                })?;
            let scale = match custom.scale {
                Some(scale) => scale,
                None => ScoreScale::new(1, 5)?,
            };
            let criteria = Criteria::new(
                &custom.name,
                scale,
                body.task,
                custom
                    .introduction
                    .as_deref()
                    .unwrap_or(DEFAULT_INTRODUCTION),
                &custom.criterion,
            )
            .context("field `criteria`")?;
            (criteria, None)
        }
        _ => bail!(
            "field `criteria`: expected a built-in criterion name, the criterion as text, or an \
             object with `name` and `criterion`"
        ),
    };
    let mut criteria = match body.scale {
        Some(scale) => criteria.with_scale(scale),
        None => criteria,
    };
    if let Some(prompt) = task_prompt {
        criteria.introduction = prompt.trim().to_string();
    }
    Ok((criteria, scale_source_name(source, body.scale.is_some())))
}

/// What a G-Eval answer says about how the request's criteria were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriteriaReading {
    pub name: String,
    pub scale_source: &'static str,
}

/// The worker task of a G-Eval request, and how its criteria were read (for the answer).
pub fn geval_task(body: GevalBody) -> Result<(LabelTask, CriteriaReading)> {
    non_empty("output", &body.output)?;
    if let Some(steps) = &body.steps {
        non_empty("steps", steps)?;
    }
    let (criteria, scale_source) = criteria_of(&body)?;
    let reading = CriteriaReading {
        name: criteria.name.clone(),
        scale_source,
    };
    Ok((
        LabelTask::Geval {
            criteria,
            steps: body.steps,
            source: body.context.filter(|c| !c.trim().is_empty()),
            reference: body.expected_output,
            output: body.output,
        },
        reading,
    ))
}

/// What a `/v1/score` request asks of the worker.
#[derive(Debug, Clone)]
pub enum ScoreTask {
    /// Prompt scoring (one label request).
    Label(LabelTask),
    /// Rubric grading (a feedback, then the score read after the marker).
    Rubric(RubricTask),
}

/// The worker task of a `/v1/score` request to the served model `model`: prompt scoring,
/// or rubric grading (`method: "rubric"`). Every field that does not apply to the method
/// is refused by name.
pub fn score_task(body: ScoreBody, model: &ModelInfo) -> Result<ScoreTask> {
    non_empty("output", &body.output)?;
    let method = body.method.as_deref().map(str::trim).unwrap_or("prompt");
    let rubric_fields = [
        ("rubric", body.rubric.is_some()),
        ("protocol", body.protocol.is_some()),
        ("feedback", body.feedback.is_some()),
        ("max_feedback_tokens", body.max_feedback_tokens.is_some()),
        ("max_reasoning_tokens", body.max_reasoning_tokens.is_some()),
        ("thinking", body.thinking.is_some()),
        ("reference", body.reference.is_some()),
    ];
    match method {
        "prompt" => {
            if let Some((field, _)) = rubric_fields.iter().find(|(_, given)| *given) {
                bail!("field `{field}` applies to `\"method\": \"rubric\"` only");
            }
            prompt_task(body).map(ScoreTask::Label)
        }
        "rubric" => rubric_task(body, model).map(ScoreTask::Rubric),
        "geval" => {
            bail!("field `method`: G-Eval has its own route, POST /v1/geval (`criteria`, `steps`)")
        }
        other => bail!("field `method`: `{other}` is not a method of /v1/score (prompt, rubric)"),
    }
}

/// Prompt scoring's task.
fn prompt_task(body: ScoreBody) -> Result<LabelTask> {
    // As `score --method prompt`: the prompt names the attribute itself, so any name
    // reads and an adjective, which it would not use, is refused.
    let Some(attribute) = body.attribute else {
        bail!("field `attribute` is needed for prompt scoring (or give `\"method\": \"rubric\"` and a `rubric`)");
    };
    if body.adjective.is_some() {
        bail!(
            "field `adjective` does not apply to prompt scoring: its prompt names the attribute \
             itself (\"... measures the summary's {}\")",
            attribute.trim()
        );
    }
    let attribute = Attribute::for_prompt_scoring(&attribute).context("field `attribute`")?;
    Ok(LabelTask::Score {
        task: body.task.unwrap_or(Task::Summary),
        attribute,
        scale: body.scale.unwrap_or(absolute::DEFAULT_SCALE),
        context: body.context.unwrap_or_default(),
        output: body.output,
    })
}

/// A rubric-grading job: what `score --method rubric` does for one candidate.
#[derive(Debug, Clone)]
pub struct RubricTask {
    pub rubric: Rubric,
    /// `None`: the served model's card's protocol, else plain.
    pub protocol: Option<RubricProtocol>,
    /// Most tokens of the feedback; `None`: no feedback.
    pub feedback_tokens: Option<usize>,
    /// A thinking judge's reasoning budget (`None`: the default) and thinking off.
    pub reasoning_tokens: Option<usize>,
    pub thinking_off: bool,
    pub context: Option<String>,
    pub reference: Option<String>,
    pub output: String,
}

/// The rubric of a request's `rubric` field: a built-in rubric's name (read by `task`'s
/// group), or an object with `criterion` and `descriptions`; never a file.
fn rubric_of(value: Value, task: Option<Task>) -> Result<Rubric> {
    match value {
        // Built-in names only: a request must not name files on the server.
        Value::String(name) => {
            let lower = name.trim().to_ascii_lowercase();
            if lower.ends_with(".toml") || lower.ends_with(".json") {
                bail!(
                    "field `rubric`: `{name}` names a file, and the service reads none: give a \
                     built-in rubric's name, or the rubric as an object with `criterion` and \
                     `descriptions`"
                );
            }
            Rubric::builtin(&name, task.unwrap_or(Task::Summary))
                .map_err(|e| anyhow::anyhow!("field `rubric`: {e:#}"))
        }
        value => Rubric::from_inline(value, task, "rubric"),
    }
}

/// A thinking judge's reasoning as a request's `max_reasoning_tokens` and `thinking`
/// fields ask it, checked against `protocol` as the worker will settle it.
fn thinking_of(
    protocol: &RubricProtocol,
    max: Option<usize>,
    thinking: Option<bool>,
) -> Result<(Option<usize>, bool)> {
    if let Some(n) = max {
        if n == 0 || n > MAX_FEEDBACK_TOKENS {
            bail!("field `max_reasoning_tokens`: {n} is not between 1 and {MAX_FEEDBACK_TOKENS}");
        }
    }
    let off = thinking == Some(false);
    crate::judge::rubric::run::settle_thinking(protocol, max, off).map_err(|e| {
        let field = if off {
            "thinking"
        } else {
            "max_reasoning_tokens"
        };
        anyhow::anyhow!("field `{field}`: {e:#}")
    })?;
    Ok((max, off))
}

/// The feedback bound of a request's `feedback` and `max_feedback_tokens` fields
/// (`None`: no feedback).
fn feedback_tokens_of(feedback: Option<bool>, max: Option<usize>) -> Result<Option<usize>> {
    Ok(match (feedback.unwrap_or(true), max) {
        (false, Some(_)) => bail!(
            "field `max_feedback_tokens` does not apply with `\"feedback\": false` (no feedback \
             is written)"
        ),
        (false, None) => None,
        (true, None) => Some(DEFAULT_FEEDBACK_TOKENS),
        (true, Some(n)) if n == 0 || n > MAX_FEEDBACK_TOKENS => {
            bail!("field `max_feedback_tokens`: {n} is not between 1 and {MAX_FEEDBACK_TOKENS}")
        }
        (true, Some(n)) => Some(n),
    })
}

/// Rubric grading's task, checked against the served model's protocol.
fn rubric_task(body: ScoreBody, model: &ModelInfo) -> Result<RubricTask> {
    let not_rubric = [
        (
            "attribute",
            body.attribute.is_some(),
            "the rubric names the criterion",
        ),
        (
            "adjective",
            body.adjective.is_some(),
            "the rubric names the criterion",
        ),
        (
            "scale",
            body.scale.is_some(),
            "the rubric's descriptions set its scale (its `scale` field in a rubric object)",
        ),
    ];
    if let Some((field, _, why)) = not_rubric.iter().find(|(_, given, _)| *given) {
        bail!("field `{field}` does not apply to rubric grading: {why}");
    }
    let task = body.task;
    let rubric = match body.rubric {
        None => bail!(
            "field `rubric` is needed for rubric grading: a built-in rubric's name or an object \
             with `criterion` and `descriptions`"
        ),
        Some(value) => rubric_of(value, task)?,
    };
    let feedback_tokens = feedback_tokens_of(body.feedback, body.max_feedback_tokens)?;
    if let Some(reference) = &body.reference {
        non_empty("reference", reference)?;
    }
    // The protocol is settled as the worker will settle it, so that a rubric it cannot
    // grade is refused here (400) rather than by the model.
    let protocol = requested_protocol(body.protocol.as_ref(), model)?;
    protocol.absolute().context("field `protocol`")?;
    let probe = RubricInput {
        context: None,
        reference: None,
        output: "",
    };
    if let Err(error) = render(&protocol, &rubric, &probe) {
        bail!(
            "field `rubric`: {error:#}; give `\"protocol\": \"plain\"` (any scale), or a rubric \
             on the protocol's scale"
        );
    }
    let (reasoning_tokens, thinking_off) =
        thinking_of(&protocol, body.max_reasoning_tokens, body.thinking)?;
    Ok(RubricTask {
        rubric,
        protocol: body.protocol,
        feedback_tokens,
        reasoning_tokens,
        thinking_off,
        context: body.context.filter(|c| !c.trim().is_empty()),
        reference: body.reference,
        output: body.output,
    })
}

/// The protocol a request settles on as the worker will: the one it gives, else the
/// served model's card's, else plain.
fn requested_protocol(given: Option<&RubricProtocol>, model: &ModelInfo) -> Result<RubricProtocol> {
    Ok(match (given, &model.conventions.rubric_protocol) {
        (Some(protocol), _) => protocol.clone(),
        (None, Some(name)) => RubricProtocol::named(name)?,
        (None, None) => RubricProtocol::plain(),
    })
}

/// Why a compare request was refused: the candidate count is over the limit (422), or
/// anything else (400).
#[derive(Debug)]
pub enum CompareRefusal {
    TooManyCandidates(String),
    Invalid(anyhow::Error),
}

/// Relative rubric grading as a compare request asks for it: settled by the worker with
/// the served model ([`crate::judge::rubric::relative::RelativeGrading::new`], as
/// `compare --rubric` settles it once the model is loaded).
#[derive(Debug, Clone)]
pub struct RelativeTask {
    pub rubric: Rubric,
    /// `None`: the served model's card's protocol, else plain.
    pub protocol: Option<RubricProtocol>,
    /// Most tokens of each feedback; `None`: no feedback.
    pub feedback_tokens: Option<usize>,
    /// A thinking judge's reasoning budget (`None`: the default) and thinking off.
    pub reasoning_tokens: Option<usize>,
    pub thinking_off: bool,
    /// Show the request's `reference` with every comparison.
    pub reference: bool,
}

/// A compare job: the context, the options, and relative rubric grading where asked.
pub struct CompareJob {
    pub context: Context,
    pub options: CompareOptions,
    pub relative: Option<RelativeTask>,
}

/// The context and options of a compare request with at most `max_candidates`
/// candidates; `model` is the served model (its card's protocol for a `rubric`).
pub fn compare_job(
    body: CompareBody,
    max_candidates: usize,
    model: &ModelInfo,
) -> std::result::Result<CompareJob, CompareRefusal> {
    let n = body.candidates.len();
    if n > max_candidates {
        return Err(CompareRefusal::TooManyCandidates(format!(
            "{n} candidates: this service compares at most {max_candidates} per request"
        )));
    }
    let invalid = CompareRefusal::Invalid;
    if n < 2 {
        return Err(invalid(anyhow::anyhow!(
            "field `candidates`: pairwise comparison needs at least 2 candidates, got {n}"
        )));
    }
    let task = body.task.unwrap_or(Task::Summary);
    let relative = relative_task(&body, model).map_err(invalid)?;
    // The checks and defaults of `compare`: one rule for both (the ranking's fallback
    // included).
    if relative.is_none() {
        let Some(attribute) = &body.attribute else {
            return Err(invalid(anyhow::anyhow!(
                "field `attribute` is needed (or a `rubric`, for relative rubric grading)"
            )));
        };
        Attribute::resolve(
            attribute,
            body.adjective.as_deref(),
            body.question.as_deref(),
        )
        .context("field `attribute` (an attribute of your own needs `adjective` or `question`)")
        .map_err(invalid)?;
    }
    Nouns::resolve(task, body.item.as_deref(), body.context_label.as_deref())
        .context("fields `item` and `context_label`")
        .map_err(invalid)?;
    let template_name = body.template.as_deref().unwrap_or("c1");
    // Only the built-in templates: a request must not name files on the server.
    if !matches!(template_name, "c1" | "c2") {
        return Err(invalid(anyhow::anyhow!(
            "field `template`: `{template_name}` is not a built-in template (c1, c2)"
        )));
    }
    let request = CompareRequest {
        adjective: body.adjective.clone(),
        question: body.question.clone(),
        template: template_name.to_string(),
        task,
        item: body.item.clone(),
        context_label: body.context_label.clone(),
        rank: body.rank,
        debias: body.debias.unwrap_or(Debias::None),
        ..CompareRequest::new(body.attribute.as_deref().unwrap_or_default())
    };
    let request = match &relative {
        Some(relative) => request
            .with_rubric(&relative.rubric, |field| format!("field `{field}`"))
            .map_err(invalid)?,
        None => request,
    };
    let mut options = request.options(Progress::none()).map_err(invalid)?;
    options.audience = Audience::Service;
    let mut seen = HashSet::new();
    let mut candidates = Vec::with_capacity(n);
    for (index, candidate) in body.candidates.into_iter().enumerate() {
        let (id, text) = match candidate {
            CandidateBody::Text(text) => (index.to_string(), text),
            CandidateBody::WithId { id, text } => (id, text),
        };
        if !seen.insert(id.clone()) {
            return Err(invalid(anyhow::anyhow!(
                "field `candidates[{index}]`: id `{id}` is used twice"
            )));
        }
        if text.trim().is_empty() {
            return Err(invalid(anyhow::anyhow!(
                "field `candidates[{index}]` is empty"
            )));
        }
        candidates.push(Candidate {
            id,
            text,
            reference: body.reference.clone(),
            scores: Default::default(),
            system_id: None,
            metadata: Default::default(),
            source: None,
        });
    }
    let context = Context {
        id: "request".to_string(),
        text: body.context,
        candidates,
    };
    Ok(CompareJob {
        context,
        options,
        relative,
    })
}

/// The relative rubric grading a compare request asks for (its `rubric`), checked
/// against the served model's protocol; the rubric's other fields without one are
/// refused.
fn relative_task(body: &CompareBody, model: &ModelInfo) -> Result<Option<RelativeTask>> {
    let Some(value) = body.rubric.clone() else {
        let rubric_only = [
            ("protocol", body.protocol.is_some()),
            ("feedback", body.feedback.is_some()),
            ("max_feedback_tokens", body.max_feedback_tokens.is_some()),
            ("max_reasoning_tokens", body.max_reasoning_tokens.is_some()),
            ("thinking", body.thinking.is_some()),
            ("reference", body.reference.is_some()),
        ];
        if let Some((field, _)) = rubric_only.iter().find(|(_, given)| *given) {
            bail!("field `{field}` applies to relative rubric grading (with a `rubric`) only");
        }
        return Ok(None);
    };
    let rubric = rubric_of(value, body.task)?;
    let feedback_tokens = feedback_tokens_of(body.feedback, body.max_feedback_tokens)?;
    if let Some(reference) = &body.reference {
        non_empty("reference", reference)?;
    }
    // The protocol as the worker will settle it, so that one without a pairwise format
    // is refused here (400) rather than by the model.
    let protocol = requested_protocol(body.protocol.as_ref(), model)?;
    protocol.relative().with_context(|| {
        format!(
            "field `protocol`: relative rubric grading in the {protocol} format{}",
            if body.protocol.is_none() {
                " (the served model's)"
            } else {
                ""
            }
        )
    })?;
    let (reasoning_tokens, thinking_off) =
        thinking_of(&protocol, body.max_reasoning_tokens, body.thinking)?;
    Ok(Some(RelativeTask {
        rubric,
        protocol: body.protocol.clone(),
        feedback_tokens,
        reasoning_tokens,
        thinking_off,
        reference: body.reference.is_some(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_the_field_line_and_column() {
        let error = parse_body::<GevalBody>(b"{\"output\": \"x\",\n \"criteria\": }")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("malformed JSON") && error.contains("line 2"),
            "{error}"
        );
        let error = parse_body::<GevalBody>(b"{\"criteria\": \"coherence\"}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`output`"), "{error}");
        let error = parse_body::<ScoreBody>(b"{}").unwrap_err().to_string();
        assert!(
            error.contains("incomplete body")
                && error.contains("missing field `output`")
                && !error.contains("malformed"),
            "{error}"
        );
        let error = parse_body::<ScoreBody>(b"\"text\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid body"), "{error}");
        // `candidate`, the input files' name, is the output too.
        let body: ScoreBody =
            parse_body(br#"{"candidate": "text", "attribute": "fluency"}"#).unwrap();
        assert_eq!(body.output, "text");
        let body: GevalBody =
            parse_body(br#"{"candidate": "t", "criteria": "coherence"}"#).unwrap();
        assert_eq!(body.output, "t");
        let error = parse_body::<GevalBody>(
            b"{\"output\": \"x\", \"criteria\": \"coherence\", \"scale\": [5, 1]}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("`scale`") && error.contains("low < high"),
            "{error}"
        );
        let error =
            parse_body::<GevalBody>(b"{\"output\": \"x\", \"criteria\": \"c\", \"colour\": 1}")
                .unwrap_err()
                .to_string();
        assert!(error.contains("colour"), "{error}");
        assert!(
            parse_body::<GevalBody>(b"{\"output\": \"x\", \"criteria\": \"c\"} trailing").is_err()
        );
    }

    #[test]
    fn criteria_by_name_or_object() {
        let body: GevalBody =
            parse_body(br#"{"output": "x", "criteria": "continuity", "task": "dialogue"}"#)
                .unwrap();
        let (LabelTask::Geval { criteria, .. }, source) = geval_task(body).unwrap() else {
            panic!("a G-Eval task")
        };
        assert_eq!(criteria.name, "Coherence");
        assert_eq!(criteria.scale, ScoreScale::new(1, 3).unwrap());
        assert_eq!(source.scale_source, "criteria");

        let body: GevalBody = parse_body(
            br#"{"output": "x", "criteria": {"name": "Correctness", "criterion": "Is it right?"}, "scale": [0, 10]}"#,
        )
        .unwrap();
        let (LabelTask::Geval { criteria, .. }, source) = geval_task(body).unwrap() else {
            panic!("a G-Eval task")
        };
        assert_eq!(criteria.introduction, DEFAULT_INTRODUCTION);
        assert_eq!(criteria.scale.scores().len(), 11);
        assert_eq!(source.scale_source, "requested");

        let body: GevalBody = parse_body(br#"{"output": "x", "criteria": {"name": "C"}}"#).unwrap();
        let error = format!("{:#}", geval_task(body).unwrap_err());
        assert!(
            error.contains("criteria") && error.contains("criterion"),
            "{error}"
        );
        let body: GevalBody = parse_body(br#"{"output": "x", "criteria": 3}"#).unwrap();
        assert!(geval_task(body).is_err());
        let body: GevalBody = parse_body(br#"{"output": "x", "criteria": "  "}"#).unwrap();
        assert!(format!("{:#}", geval_task(body).unwrap_err()).contains("`criteria`"));
        let body: GevalBody = parse_body(br#"{"output": " ", "criteria": "coherence"}"#).unwrap();
        assert!(geval_task(body)
            .unwrap_err()
            .to_string()
            .contains("`output`"));
    }

    /// The G-Eval metrics-service example: criteria as one free-text string, with a
    /// separate task prompt.
    #[test]
    fn criteria_as_free_text_with_a_task_prompt() {
        let geval = |json: &str| geval_task(parse_body::<GevalBody>(json.as_bytes()).unwrap());
        let (LabelTask::Geval { criteria, .. }, source) = geval(
            r#"{"output": "x", "task_prompt": "You will evaluate the quality of a generated text.",
                "criteria": "Coherence (1-5): evaluate the logical flow and connection between sentences."}"#,
        )
        .unwrap() else {
            panic!("a G-Eval task")
        };
        assert_eq!(criteria.name, "Coherence");
        assert_eq!(criteria.scale, ScoreScale::new(1, 5).unwrap());
        assert_eq!(source.scale_source, "criteria_text");
        assert_eq!(
            criteria.introduction,
            "You will evaluate the quality of a generated text."
        );
        assert!(criteria.criterion.starts_with("Coherence (1-5): evaluate"));

        // No range in the text: the request's scale, else 1-5.
        let (LabelTask::Geval { criteria, .. }, source) =
            geval(r#"{"output": "x", "criteria": "Politeness: is it polite?", "scale": [1, 3]}"#)
                .unwrap()
        else {
            panic!("a G-Eval task")
        };
        assert_eq!(
            (criteria.scale, source.scale_source),
            (ScoreScale::new(1, 3).unwrap(), "requested")
        );
        assert_eq!(criteria.introduction, DEFAULT_INTRODUCTION);
        let (LabelTask::Geval { criteria, .. }, source) =
            geval(r#"{"output": "x", "criteria": "Politeness: is it polite?"}"#).unwrap()
        else {
            panic!("a G-Eval task")
        };
        assert_eq!(
            (criteria.scale, source.scale_source),
            (ScoreScale::new(1, 5).unwrap(), "default")
        );

        // A range that is no scale is refused, naming the field and the range.
        let error = format!(
            "{:#}",
            geval(r#"{"output": "x", "criteria": "Coherence (5-1): flow"}"#).unwrap_err()
        );
        assert!(
            error.contains("`criteria`") && error.contains("(5-1)"),
            "{error}"
        );
        // A task prompt also replaces a built-in criterion's introduction.
        let (LabelTask::Geval { criteria, .. }, _) =
            geval(r#"{"output": "x", "criteria": "coherence", "task_prompt": "Rate it."}"#)
                .unwrap()
        else {
            panic!("a G-Eval task")
        };
        assert_eq!(
            (criteria.name.as_str(), criteria.introduction.as_str()),
            ("Coherence", "Rate it.")
        );
    }

    #[test]
    fn compare_requests_are_bounded_and_checked() {
        let body = |candidates: &str, extra: &str| -> CompareBody {
            parse_body(
                format!(r#"{{"context": "c", "attribute": "coherence", "candidates": {candidates}{extra}}}"#)
                    .as_bytes(),
            )
            .unwrap()
        };
        use crate::engine::Scorer as _;
        let model = crate::engine::MockScorer::new().info().clone();
        let compare_job = |body, n| compare_job(body, n, &model);
        let CompareJob {
            context, options, ..
        } = compare_job(body(r#"["a", {"id": "x", "text": "b"}]"#, ""), 3).unwrap();
        let ids: Vec<_> = context.candidates.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["0", "x"]);
        assert_eq!(options.rank, RankMethod::WinRatio);
        assert!(matches!(
            compare_job(body(r#"["a", "b", "c", "d"]"#, ""), 3),
            Err(CompareRefusal::TooManyCandidates(_))
        ));
        assert!(matches!(
            compare_job(body(r#"["a"]"#, ""), 3),
            Err(CompareRefusal::Invalid(_))
        ));
        assert!(matches!(
            compare_job(body(r#"["a", "b"]"#, r#", "template": "/etc/passwd""#), 3),
            Err(CompareRefusal::Invalid(_))
        ));
        assert!(matches!(
            compare_job(
                body(
                    r#"[{"id": "x", "text": "a"}, {"id": "x", "text": "b"}]"#,
                    ""
                ),
                3
            ),
            Err(CompareRefusal::Invalid(_))
        ));
        // Issue 60: relative rubric grading is the route `compare --rubric` runs; its
        // fields without a rubric, and what the rubric replaces, are refused.
        let refused = |extra: &str| match compare_job(body(r#"["a", "b"]"#, extra), 3) {
            Err(CompareRefusal::Invalid(error)) => format!("{error:#}"),
            _ => panic!("{extra} accepted"),
        };
        let job = compare_job(
            body(
                r#"["a", "b"]"#,
                r#", "rubric": "coherence", "reference": "r""#,
            ),
            3,
        )
        .unwrap();
        let relative = job.relative.expect("relative grading");
        assert_eq!(relative.rubric.name, "Coherence");
        assert_eq!(relative.feedback_tokens, Some(DEFAULT_FEEDBACK_TOKENS));
        assert!(relative.reference);
        assert_eq!(
            job.options.attribute.question(&job.options.nouns.item),
            relative.rubric.criterion.trim_end_matches('?')
        );
        assert!(job
            .context
            .candidates
            .iter()
            .all(|c| c.reference.as_deref() == Some("r")));
        assert!(refused(r#", "protocol": "plain""#).contains(
            "field `protocol` applies to relative rubric grading (with a `rubric`) only"
        ));
        assert!(
            refused(r#", "rubric": "coherence", "adjective": "clearer""#)
                .contains("field `adjective` does not apply with field `rubric`")
        );
        assert!(
            refused(r#", "rubric": "coherence", "protocol": "flow-judge""#)
                .contains("field `protocol`: relative rubric grading in the flow-judge format")
        );
        assert!(
            refused(r#", "rubric": "coherence", "feedback": false, "max_feedback_tokens": 5"#)
                .contains("does not apply with `\"feedback\": false`")
        );
        let no_attribute: CompareBody =
            parse_body(br#"{"context": "c", "candidates": ["a", "b"]}"#).unwrap();
        match compare_job(no_attribute, 3) {
            Err(CompareRefusal::Invalid(error)) => {
                assert!(format!("{error}").contains("field `attribute` is needed"))
            }
            _ => panic!("no attribute accepted"),
        }
        // A body that is not an object says so (it was read as fields by position).
        let error = parse_body::<CompareBody>(br#"["c", ["a", "b"], "coherence"]"#)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "invalid body: the body must be a JSON object, not an array"
        );
        // Ranks as the output files write them.
        let ranked = serde_json::to_string(&[
            RankedCandidate {
                id: "a".into(),
                score: 0.5,
                rank: 2.0,
            },
            RankedCandidate {
                id: "b".into(),
                score: 0.5,
                rank: 2.5,
            },
        ])
        .unwrap();
        assert_eq!(
            ranked,
            r#"[{"id":"a","score":0.5,"rank":2},{"id":"b","score":0.5,"rank":2.5}]"#
        );
    }

    #[test]
    fn score_maps_keep_score_order() {
        let map = ScoreMap(vec![(1, 0.5), (2, 0.25), (10, 0.25)]);
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            r#"{"1":0.5,"2":0.25,"10":0.25}"#
        );
    }
}
