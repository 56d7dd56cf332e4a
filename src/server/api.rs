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
use crate::judge::geval::Criteria;
use crate::judge::pairwise::{CompareOptions, PairwiseTemplate};
use crate::judge::{absolute, Attribute, ScoreDistribution, ScoreScale, Task};
use crate::rank::RankMethod;

/// Introduction of user criteria given without one.
pub const DEFAULT_INTRODUCTION: &str = "You will be given one output to rate, with the input it \
was produced for and the expected output where there are any. Rate the output on the single \
quality described below.";

/// Parse a JSON body into `T`; the error names the field path, line and column.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            anyhow::anyhow!("malformed JSON body: {inner}")
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
    /// The output to rate.
    pub output: String,
    /// The expected output (reference-based rating).
    pub expected_output: Option<String>,
    /// The input the output was produced for.
    pub context: Option<String>,
    /// A built-in criterion name, or an object with `name`, `criterion`, and optionally
    /// `introduction` and `scale`.
    pub criteria: Value,
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

/// `POST /v1/score`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreBody {
    pub output: String,
    pub context: Option<String>,
    pub attribute: String,
    pub task: Option<Task>,
    pub scale: Option<ScoreScale>,
}

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
    pub attribute: String,
    pub task: Option<Task>,
    /// `c1` (default) or `c2`.
    pub template: Option<String>,
    /// How comparisons become scores (default win-ratio).
    pub rank: Option<RankMethod>,
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
}

impl ScoreResponse {
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
        Self {
            score: distribution.expectation,
            argmax: distribution.argmax,
            probabilities: pairs(&distribution.normalised),
            raw_probabilities: pairs(&distribution.raw),
            label_mass: distribution.mass,
            steps,
        }
    }
}

/// One candidate in the answer of `/v1/compare`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedCandidate {
    pub id: String,
    pub score: f64,
    pub rank: f64,
}

/// The answer of `/v1/compare`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareResponse {
    /// In request order.
    pub candidates: Vec<RankedCandidate>,
    pub comparisons: usize,
}

fn non_empty(field: &str, text: &str) -> Result<()> {
    if text.trim().is_empty() {
        bail!("field `{field}` is empty");
    }
    Ok(())
}

/// The criteria of a G-Eval request.
fn criteria_of(body: &GevalBody) -> Result<Criteria> {
    let task = body.task.unwrap_or(Task::Summary);
    let criteria = match &body.criteria {
        Value::String(name) => Criteria::builtin(task, name).context("field `criteria`")?,
        Value::Object(_) => {
            let custom: CustomCriteria = serde_path_to_error::deserialize(body.criteria.clone())
                .map_err(|e| anyhow::anyhow!("invalid field `criteria.{}`: {}", e.path(), e.inner()))?;
            let scale = match custom.scale {
                Some(scale) => scale,
                None => ScoreScale::new(1, 5)?,
            };
            Criteria::new(
                &custom.name,
                scale,
                body.task,
                custom.introduction.as_deref().unwrap_or(DEFAULT_INTRODUCTION),
                &custom.criterion,
            )
            .context("field `criteria`")?
        }
        _ => bail!(
            "field `criteria`: expected a built-in criterion name or an object with `name` and `criterion`"
        ),
    };
    Ok(match body.scale {
        Some(scale) => criteria.with_scale(scale),
        None => criteria,
    })
}

/// The worker task of a G-Eval request.
pub fn geval_task(body: GevalBody) -> Result<LabelTask> {
    non_empty("output", &body.output)?;
    if let Some(steps) = &body.steps {
        non_empty("steps", steps)?;
    }
    let criteria = criteria_of(&body)?;
    Ok(LabelTask::Geval {
        criteria,
        steps: body.steps,
        source: body.context.filter(|c| !c.trim().is_empty()),
        reference: body.expected_output,
        output: body.output,
    })
}

/// The worker task of a prompt-scoring request.
pub fn score_task(body: ScoreBody) -> Result<LabelTask> {
    non_empty("output", &body.output)?;
    let attribute = Attribute::named(&body.attribute).context("field `attribute`")?;
    Ok(LabelTask::Score {
        task: body.task.unwrap_or(Task::Summary),
        attribute,
        scale: body.scale.unwrap_or(absolute::DEFAULT_SCALE),
        context: body.context.unwrap_or_default(),
        output: body.output,
    })
}

/// Why a compare request was refused: the candidate count is over the limit (422), or
/// anything else (400).
#[derive(Debug)]
pub enum CompareRefusal {
    TooManyCandidates(String),
    Invalid(anyhow::Error),
}

/// The context and options of a compare request with at most `max_candidates`
/// candidates.
pub fn compare_job(
    body: CompareBody,
    max_candidates: usize,
) -> std::result::Result<(Context, CompareOptions), CompareRefusal> {
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
    let attribute = Attribute::named(&body.attribute)
        .context("field `attribute`")
        .map_err(invalid)?;
    let template_name = body.template.as_deref().unwrap_or("c1");
    // Only the built-in templates: a request must not name files on the server.
    let template = match template_name {
        "c1" | "c2" => PairwiseTemplate::builtin(template_name, task).map_err(invalid)?,
        other => {
            return Err(invalid(anyhow::anyhow!(
                "field `template`: `{other}` is not a built-in template (c1, c2)"
            )))
        }
    };
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
            reference: None,
            scores: Default::default(),
            system_id: None,
        });
    }
    let context = Context {
        id: "request".to_string(),
        text: body.context,
        candidates,
    };
    let mut options = CompareOptions::new(task, attribute, template);
    if let Some(rank) = body.rank {
        options.rank = rank;
    }
    Ok((context, options))
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
        let LabelTask::Geval { criteria, .. } = geval_task(body).unwrap() else {
            panic!("a G-Eval task")
        };
        assert_eq!(criteria.name, "Coherence");
        assert_eq!(criteria.scale, ScoreScale::new(1, 3).unwrap());

        let body: GevalBody = parse_body(
            br#"{"output": "x", "criteria": {"name": "Correctness", "criterion": "Is it right?"}, "scale": [0, 10]}"#,
        )
        .unwrap();
        let LabelTask::Geval { criteria, .. } = geval_task(body).unwrap() else {
            panic!("a G-Eval task")
        };
        assert_eq!(criteria.introduction, DEFAULT_INTRODUCTION);
        assert_eq!(criteria.scale.scores().len(), 11);

        let body: GevalBody = parse_body(br#"{"output": "x", "criteria": {"name": "C"}}"#).unwrap();
        let error = format!("{:#}", geval_task(body).unwrap_err());
        assert!(
            error.contains("criteria") && error.contains("criterion"),
            "{error}"
        );
        let body: GevalBody = parse_body(br#"{"output": "x", "criteria": 3}"#).unwrap();
        assert!(geval_task(body).is_err());
        let body: GevalBody = parse_body(br#"{"output": " ", "criteria": "coherence"}"#).unwrap();
        assert!(geval_task(body)
            .unwrap_err()
            .to_string()
            .contains("`output`"));
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
        let (context, options) =
            compare_job(body(r#"["a", {"id": "x", "text": "b"}]"#, ""), 3).unwrap();
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
