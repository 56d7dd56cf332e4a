//! `nlg_judge.Jury`'s Rust side: the judges' results (each from its own `Judge`, the
//! single-judge routes) combined by the library's `judge::jury`, with the command line's
//! outputs of a jury run: the `--output` lines, the diagnostics sidecar, the table.

use anyhow::{anyhow, Result};
use pyo3::prelude::*;

use nlg_judge::cli::jury::{format_jury, jury_diagnostics, write_jury_scores};
use nlg_judge::data::Context;
use nlg_judge::judge::diagnostics::{both_orders, Diagnostics};
use nlg_judge::judge::jury::{
    combine_comparisons, combine_scores, require_every_candidate, JuryResult, JuryWeights,
};
use nlg_judge::judge::pairwise::{CompareResult, Design};
use nlg_judge::judge::ScoreRun;

use crate::convert::choice;
use crate::errors::{input, OrPy};
use crate::results::{human_key, report, utf8, NativeCompareResult, NativeScoreResult};

/// How the judges weigh: `weights` given (one per judge), else equal, or from agreement.
fn weights_of(weights: Option<Vec<f64>>, agreement: bool) -> Result<JuryWeights> {
    Ok(match (weights, agreement) {
        (Some(_), true) => {
            return Err(input(anyhow!(
                "weights: give a list of weights or \"agreement\", not both"
            )))
        }
        (Some(given), false) => JuryWeights::Given(given),
        (None, true) => JuryWeights::FromAgreement,
        (None, false) => JuryWeights::Equal,
    })
}

/// Whether `weights` (or agreement weights) can weigh `judges` judges, before any judge
/// runs: the library's check, in Python's words.
#[pyfunction]
#[pyo3(signature = (judges, weights, agreement))]
pub fn check_jury_weights(
    judges: usize,
    weights: Option<Vec<f64>>,
    agreement: bool,
) -> PyResult<()> {
    (|| -> Result<()> {
        weights_of(weights, agreement)?
            .check(judges, "weights=\"agreement\"")
            .map_err(input)
    })()
    .or_py()
}

/// A jury's comparisons combined (as `compare --model A --model B`): each judge's bias
/// corrected first where `design` lacks both orders of its pairs.
#[pyfunction]
#[pyo3(signature = (names, results, weights, agreement, design))]
pub fn jury_compare(
    names: Vec<String>,
    results: Vec<PyRef<'_, NativeCompareResult>>,
    weights: Option<Vec<f64>>,
    agreement: bool,
    design: &str,
) -> PyResult<NativeJuryResult> {
    (|| -> Result<NativeJuryResult> {
        let design = choice::<Design>("design", design)?;
        for (name, result) in names.iter().zip(&results) {
            require_every_candidate(name, &result.set_aside)?;
        }
        let refs: Vec<&CompareResult> = results.iter().map(|r| &r.result).collect();
        let jury = combine_comparisons(
            &names,
            &refs,
            &weights_of(weights, agreement)?,
            !both_orders(design),
        )
        .map_err(input)?;
        let first = results.first().ok_or_else(|| input(anyhow!("no judges")))?;
        Ok(NativeJuryResult {
            jury,
            contexts: first.contexts.clone(),
            diagnostics: results
                .iter()
                .map(|r| r.result.diagnostics.clone())
                .collect(),
            human_key: results.iter().find_map(|r| r.result.human_key.clone()),
        })
    })()
    .or_py()
}

/// A jury's absolute scores combined (as `score --model A --model B`): each judge's
/// scores standardised over the run, then their weighted mean.
#[pyfunction]
#[pyo3(signature = (names, results, weights, agreement))]
pub fn jury_scores(
    names: Vec<String>,
    results: Vec<PyRef<'_, NativeScoreResult>>,
    weights: Option<Vec<f64>>,
    agreement: bool,
) -> PyResult<NativeJuryResult> {
    (|| -> Result<NativeJuryResult> {
        let runs: Vec<&ScoreRun> = results.iter().map(|r| &r.run).collect();
        let jury =
            combine_scores(&names, &runs, &weights_of(weights, agreement)?).map_err(input)?;
        let first = results.first().ok_or_else(|| input(anyhow!("no judges")))?;
        Ok(NativeJuryResult {
            jury,
            contexts: first.contexts.clone(),
            diagnostics: results.iter().map(|r| r.run.diagnostics.clone()).collect(),
            human_key: None,
        })
    })()
    .or_py()
}

/// The Rust side of `nlg_judge.JuryResult`.
#[pyclass(module = "nlg_judge._native", frozen)]
pub struct NativeJuryResult {
    jury: JuryResult,
    /// The judges' input (the same for every judge).
    contexts: Vec<Context>,
    /// Each judge's diagnostics, in the jury's order.
    diagnostics: Vec<Diagnostics>,
    /// The human key the judges found for the attribute (comparisons).
    human_key: Option<String>,
}

#[pymethods]
impl NativeJuryResult {
    /// The jury as JSON: judges (name, weight), contexts (scores, ranks, each judge's
    /// scores), agreement (Spearman, and Cohen's kappa for comparisons).
    fn to_json(&self) -> PyResult<String> {
        crate::convert::to_json(&self.jury).or_py()
    }

    /// What the jury's `--output` holds.
    fn scores_jsonl(&self) -> PyResult<String> {
        let mut bytes = Vec::new();
        write_jury_scores(&self.jury, &self.contexts, &mut bytes).or_py()?;
        utf8(bytes).or_py()
    }

    /// What the jury's `OUT.diagnostics.json` holds (each judge's diagnostics, the weights
    /// and the agreement), as JSON.
    fn diagnostics_json(&self) -> PyResult<String> {
        Ok(jury_diagnostics(&self.jury, &self.diagnostics)
            .or_py()?
            .to_string())
    }

    /// The table the command prints for a jury.
    fn table(&self) -> String {
        format_jury(&self.jury, &self.contexts, &self.diagnostics)
    }

    /// Meta-evaluation of the jury's scores (or judge `judge`'s, by index) against the
    /// human scores `key` (default: the one the judges found, else `wanted`).
    #[pyo3(signature = (key, wanted, judge, level, skip, bootstrap, seed, ci))]
    #[allow(clippy::too_many_arguments)]
    fn correlate(
        &self,
        py: Python<'_>,
        key: Option<String>,
        wanted: Option<String>,
        judge: Option<usize>,
        level: String,
        skip: String,
        bootstrap: Option<usize>,
        seed: u64,
        ci: f64,
    ) -> PyResult<(String, String)> {
        let key = match (key, &self.human_key, wanted) {
            (Some(asked), _, _) => human_key(&self.contexts, &asked).or_py()?,
            (None, Some(found), _) => found.clone(),
            (None, None, Some(wanted)) => human_key(&self.contexts, &wanted).or_py()?,
            (None, None, None) => {
                return Err(input(anyhow!(
                    "human_key: name the human scores to correlate with"
                )))
                .or_py()
            }
        };
        if judge.is_some_and(|j| j >= self.jury.judges.len()) {
            return Err(input(anyhow!("judge: no judge {judge:?}"))).or_py();
        }
        let items = self.jury.correlation_items(&self.contexts, &key, judge);
        report(py, &items, &level, &skip, bootstrap, seed, ci)
    }
}
