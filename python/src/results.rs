//! The results of `compare` and `score` as the library returns them, with the command
//! line's outputs of them: the JSONL lines of `--output` (byte for byte), the comparison
//! lines of `--comparisons-out`, the ranked tables, the `--correlate` meta-evaluation.

use anyhow::{anyhow, Result};
use pyo3::prelude::*;
use serde_json::json;

use nlg_judge::cli::compare_table::format_tables;
use nlg_judge::data::{find_human_key_among, human_keys, Context};
use nlg_judge::judge::attribute::score_keys;
use nlg_judge::judge::pairwise::fit::{FittedRun, SetAside};
use nlg_judge::judge::pairwise::{write_comparisons, write_scores, CompareResult};
use nlg_judge::judge::rubric::FormatCounts;
use nlg_judge::judge::{write_run, ResolvedMethod, ScoreRun};
use nlg_judge::stats::Item;

use crate::errors::{input, OrPy};
use crate::functions::{correlate_items, CorrelateSettings};

/// The Rust side of `nlg_judge.CompareResult`.
#[pyclass(module = "nlg_judge._native", frozen)]
pub struct NativeCompareResult {
    pub(crate) result: CompareResult,
    /// The contexts ranked (the input less what was set aside).
    pub(crate) contexts: Vec<Context>,
    /// Candidates too long for the model, left out.
    pub(crate) set_aside: Vec<SetAside>,
    /// The human key asked for (default: the attribute's name).
    wanted: String,
}

impl NativeCompareResult {
    pub fn new(fitted: FittedRun, wanted: String) -> Self {
        Self {
            result: fitted.result,
            contexts: fitted.contexts,
            set_aside: fitted.set_aside,
            wanted,
        }
    }
}

pub(crate) fn utf8(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| anyhow!("output is not UTF-8: {e}"))
}

/// The human-score key for `wanted` in `contexts`, or an error listing the keys there are.
pub(crate) fn human_key(contexts: &[Context], wanted: &str) -> Result<String> {
    find_human_key_among(contexts, &score_keys(wanted))
        .map_err(input)?
        .ok_or_else(|| {
            let keys = human_keys(contexts);
            input(anyhow!(
                "no human score matches `{wanted}`; the human scores in the input are: {}",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                }
            ))
        })
}

/// The `correlate` report of `items` (its `--json` object and table).
#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    py: Python<'_>,
    items: &[Item],
    level: &str,
    skip: &str,
    bootstrap: Option<usize>,
    seed: u64,
    ci: f64,
) -> PyResult<(String, String)> {
    let settings = CorrelateSettings::new(level, skip, bootstrap, seed, ci).or_py()?;
    py.detach(|| correlate_items(items, &settings)).or_py()
}

#[pymethods]
impl NativeCompareResult {
    /// The whole result as JSON (contexts with comparisons, scores, ranks, rates), with
    /// the candidates set aside as too long for the model under `set_aside`.
    fn to_json(&self) -> PyResult<String> {
        let mut value = serde_json::to_value(&self.result)
            .map_err(anyhow::Error::from)
            .or_py()?;
        value["set_aside"] = json!(self.set_aside);
        Ok(value.to_string())
    }

    /// What `compare --output` writes.
    fn scores_jsonl(&self) -> PyResult<String> {
        let mut bytes = Vec::new();
        write_scores(&self.result, &self.contexts, &mut bytes).or_py()?;
        utf8(bytes).or_py()
    }

    /// What `compare --comparisons-out` writes.
    fn comparisons_jsonl(&self) -> PyResult<String> {
        let mut bytes = Vec::new();
        write_comparisons(&self.result, &mut bytes).or_py()?;
        utf8(bytes).or_py()
    }

    /// The ranked tables and bias summary `compare` prints.
    fn table(&self) -> String {
        format_tables(&self.result, &self.contexts)
    }

    /// The candidates' texts, system ids and human scores by context (for pandas).
    fn inputs(&self) -> PyResult<String> {
        let contexts: Vec<_> = self
            .contexts
            .iter()
            .map(|c| {
                json!({
                    "context_id": c.id,
                    "candidates": c.candidates.iter().map(|k| json!({
                        "candidate_id": k.id,
                        "text": k.text,
                        "system_id": k.system_id,
                        "scores": k.scores,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        Ok(serde_json::Value::Array(contexts).to_string())
    }

    /// Meta-evaluation of the scores (as the output file writes them) against the human
    /// scores `key` (default: the attribute's), as `--correlate` does.
    #[pyo3(signature = (key, level, skip, bootstrap, seed, ci))]
    #[allow(clippy::too_many_arguments)]
    fn correlate(
        &self,
        py: Python<'_>,
        key: Option<String>,
        level: String,
        skip: String,
        bootstrap: Option<usize>,
        seed: u64,
        ci: f64,
    ) -> PyResult<(String, String)> {
        let key = match (key, &self.result.human_key) {
            (Some(wanted), _) => human_key(&self.contexts, &wanted).or_py()?,
            (None, Some(found)) => found.clone(),
            (None, None) => human_key(&self.contexts, &self.wanted).or_py()?,
        };
        let items = self.result.correlation_items(&self.contexts, &key);
        report(py, &items, &level, &skip, bootstrap, seed, ci)
    }
}

/// The Rust side of `nlg_judge.ScoreResult`.
#[pyclass(module = "nlg_judge._native", frozen)]
pub struct NativeScoreResult {
    pub(crate) run: ScoreRun,
    pub(crate) contexts: Vec<Context>,
    /// The human key asked for (default: the attribute's name).
    wanted: String,
}

impl NativeScoreResult {
    pub fn new(run: ScoreRun, contexts: &[Context], wanted: String) -> Result<Self> {
        Ok(Self {
            run,
            contexts: contexts.to_vec(),
            wanted,
        })
    }
}

#[pymethods]
impl NativeScoreResult {
    /// The run as JSON: method, candidates (scores, distributions, human scores),
    /// computed, cached, and for G-Eval the criteria name, scale and steps.
    fn to_json(&self) -> PyResult<String> {
        let mut value = json!({
            "method": self.run.method.method().name(),
            "candidates": self.run.candidates,
            "computed": self.run.computed,
            "cached": self.run.cached,
            "diagnostics": self.run.diagnostics,
        });
        if let ResolvedMethod::Geval {
            criteria, steps, ..
        } = &self.run.method
        {
            value["criteria"] = json!(criteria.name);
            value["scale"] = json!([criteria.scale.low(), criteria.scale.high()]);
            value["steps"] = json!(steps.text);
        }
        if let Some(scale) = self.run.method.scale() {
            value["scale"] = json!([scale.low(), scale.high()]);
        }
        if let ResolvedMethod::Rubric(rubric) = &self.run.method {
            value["criteria"] = json!(rubric.rubric.name);
            value["rubric"] = json!({
                "name": rubric.rubric.name,
                "criterion": rubric.rubric.criterion,
                "protocol": rubric.protocol,
                "protocol_source": rubric.protocol_source.name(),
                "max_feedback_tokens": rubric.feedback_tokens,
            });
            if rubric.feedback_tokens.is_some() {
                let mut counts =
                    FormatCounts::of(self.run.candidates.iter().filter_map(|c| c.format));
                counts.unclosed_reasoning = self
                    .run
                    .candidates
                    .iter()
                    .filter(|c| c.reasoning_cut)
                    .count();
                value["format_counts"] = json!(counts);
            }
        }
        Ok(value.to_string())
    }

    /// What `score --output` writes.
    fn scores_jsonl(&self) -> PyResult<String> {
        let mut bytes = Vec::new();
        write_run(&self.run, &mut bytes).or_py()?;
        utf8(bytes).or_py()
    }

    /// Meta-evaluation of the scores against the human scores `key` (default: the one
    /// asked for in `score`, else the attribute's), as `--correlate` does.
    #[pyo3(signature = (key, level, skip, bootstrap, seed, ci))]
    #[allow(clippy::too_many_arguments)]
    fn correlate(
        &self,
        py: Python<'_>,
        key: Option<String>,
        level: String,
        skip: String,
        bootstrap: Option<usize>,
        seed: u64,
        ci: f64,
    ) -> PyResult<(String, String)> {
        let wanted = key.unwrap_or(self.wanted.clone());
        let key = human_key(&self.contexts, &wanted).or_py()?;
        let items: Vec<Item> = self.run.correlation_items(&key);
        report(py, &items, &level, &skip, bootstrap, seed, ci)
    }
}
