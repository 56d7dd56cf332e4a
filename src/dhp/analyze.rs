//! DHP's statistical analysis: from per-item scores of originals and perturbed copies
//! to discernment scores.
//!
//! For each perturbation `i` and metric `m`, a one-sided Wilcoxon signed-rank test
//! (original greater than perturbed, paired by item; [`crate::stats::wilcoxon_greater`],
//! scipy's defaults) gives `p_im`. They are combined with the paper's formulas
//! `p_i = 1 / sum_m 1/p_im` and `p_i^EW = 1 / sum_m w_im/p_im` (weights normalised to sum
//! to 1 over the metrics), Wilson's harmonic mean p (`M / sum_m 1/p_im`) is reported for
//! reference, and `D_i = log_0.05(p_i)`. `D_avg` weights the three levels (C, W, S)
//! equally and the perturbations within a level equally; `D_min` is the smallest `D_i`.
//! Everything here is a pure function of its inputs.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::task::{Degree, Level};
use super::weights::Weights;
use crate::stats::{harmonic_mean_p, wilcoxon_greater};

/// The name original texts carry in score rows.
pub const ORIGINAL: &str = "original";

/// One score row: `{"item", "perturbation", "level", "metric", "score"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRow {
    pub item: String,
    /// A perturbation's name, or [`ORIGINAL`].
    pub perturbation: String,
    /// Absent for originals.
    pub level: Option<Level>,
    pub metric: String,
    pub score: f64,
}

/// Read score rows from JSONL text; `source` names the input in errors.
pub fn parse_score_rows(text: &str, source: &str) -> Result<Vec<ScoreRow>> {
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{source}:{}", index + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
        let field = |name: &str| {
            value
                .get(name)
                .with_context(|| format!("{}: missing field `{name}`", at()))
        };
        let item = match field("item")? {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => bail!("{}: `item` must be a string or a number, not {other}", at()),
        };
        let perturbation = field("perturbation")?
            .as_str()
            .with_context(|| format!("{}: `perturbation` must be a string", at()))?
            .to_string();
        let metric = field("metric")?
            .as_str()
            .with_context(|| format!("{}: `metric` must be a string", at()))?
            .to_string();
        let score = field("score")?
            .as_f64()
            .with_context(|| format!("{}: `score` must be a number", at()))?;
        if !score.is_finite() {
            bail!("{}: `score` is {score}", at());
        }
        let level = match value.get("level") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => {
                Some(Level::parse(s).with_context(|| format!("{}: field `level`", at()))?)
            }
            Some(other) => bail!(
                "{}: `level` must be \"C\", \"W\" or \"S\", not {other}",
                at()
            ),
        };
        if perturbation == ORIGINAL && level.is_some() {
            bail!("{}: an original row has no `level`", at());
        }
        if perturbation != ORIGINAL && level.is_none() {
            bail!("{}: perturbation `{perturbation}` needs a `level`", at());
        }
        rows.push(ScoreRow {
            item,
            perturbation,
            level,
            metric,
            score,
        });
    }
    Ok(rows)
}

/// One perturbation's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerturbationResult {
    pub name: String,
    pub level: Level,
    pub degree: Degree,
    /// Items paired with their original (the smallest count over the metrics).
    pub n: usize,
    /// Wilcoxon p-value per metric.
    pub p: BTreeMap<String, f64>,
    /// The paper's combination `1 / sum_m 1/p_m`.
    pub p_combined: f64,
    /// Wilson's harmonic mean p, `M / sum_m 1/p_m` (for reference).
    pub hmp: f64,
    /// Expert-weighted combination (absent without weights).
    pub p_ew: Option<f64>,
    #[serde(rename = "D")]
    pub d: f64,
    #[serde(rename = "D_ew")]
    pub d_ew: Option<f64>,
}

/// The whole analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub perturbations: Vec<PerturbationResult>,
    #[serde(rename = "D_avg")]
    pub d_avg: f64,
    #[serde(rename = "D_min")]
    pub d_min: f64,
    #[serde(rename = "D_ew_avg")]
    pub d_ew_avg: Option<f64>,
    #[serde(rename = "D_ew_min")]
    pub d_ew_min: Option<f64>,
}

/// `log_0.05(p)`: 1 at p = 0.05, higher is more discerning.
pub fn discernment(p: f64) -> f64 {
    // `+ 0.0` turns the -0 of p = 1 into 0
    p.ln() / 0.05f64.ln() + 0.0
}

/// The paper's combined p-value `1 / sum_m 1/p_m` (0 when any p is 0).
pub fn combined_p(p_values: &[f64]) -> Result<f64> {
    let hmp = harmonic_mean_p(p_values, None)?;
    Ok(hmp / p_values.len() as f64)
}

/// The level-balanced mean of `values` (one per perturbation, with its level): each level
/// present counts equally, the perturbations within a level equally.
pub fn level_balanced_mean(values: &[(Level, f64)]) -> Option<f64> {
    let mut by_level: BTreeMap<Level, Vec<f64>> = BTreeMap::new();
    for &(level, value) in values {
        by_level.entry(level).or_default().push(value);
    }
    if by_level.is_empty() {
        return None;
    }
    let level_means: Vec<f64> = by_level
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .collect();
    Some(level_means.iter().sum::<f64>() / level_means.len() as f64)
}

/// Scores by (item, metric).
type ScoreTable<'a> = BTreeMap<(&'a str, &'a str), f64>;

/// Analyse score rows; `weights` (expert weights) give the EW variants.
pub fn analyze(rows: &[ScoreRow], weights: Option<&Weights>) -> Result<Analysis> {
    // original[(item, metric)] = score; perturbed[name] = (level, its scores)
    let mut original: ScoreTable = BTreeMap::new();
    let mut perturbed: BTreeMap<&str, (Level, ScoreTable)> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    let mut metrics: BTreeSet<&str> = BTreeSet::new();
    for row in rows {
        metrics.insert(&row.metric);
        let key = (row.item.as_str(), row.metric.as_str());
        let table = if row.perturbation == ORIGINAL {
            &mut original
        } else {
            let level = row
                .level
                .with_context(|| format!("perturbation `{}` has no level", row.perturbation))?;
            let entry = perturbed
                .entry(&row.perturbation)
                .or_insert_with(|| (level, BTreeMap::new()));
            if entry.0 != level {
                bail!(
                    "perturbation `{}` is given level {} and level {}",
                    row.perturbation,
                    entry.0,
                    level
                );
            }
            if !order.contains(&row.perturbation.as_str()) {
                order.push(&row.perturbation);
            }
            &mut entry.1
        };
        if table.insert(key, row.score).is_some() {
            bail!(
                "two scores for item `{}`, `{}`, metric `{}`",
                row.item,
                row.perturbation,
                row.metric
            );
        }
    }
    if original.is_empty() {
        bail!("no scores of originals (rows with \"perturbation\": \"original\")");
    }
    if perturbed.is_empty() {
        bail!("no scores of perturbed texts");
    }
    if let Some(weights) = weights {
        weights.check_metrics(&metrics)?;
    }

    let mut results = Vec::with_capacity(order.len());
    for name in order {
        let (level, scores) = &perturbed[name];
        let mut p = BTreeMap::new();
        let mut n = usize::MAX;
        for &metric in &metrics {
            let mut x = Vec::new();
            let mut y = Vec::new();
            for (&(item, m), &score) in scores {
                if m != metric {
                    continue;
                }
                if let Some(&base) = original.get(&(item, m)) {
                    x.push(base);
                    y.push(score);
                }
            }
            if x.is_empty() {
                bail!("perturbation `{name}`, metric `{metric}`: no item has both an original and a perturbed score");
            }
            n = n.min(x.len());
            let test = wilcoxon_greater(&x, &y)
                .with_context(|| format!("perturbation `{name}`, metric `{metric}`"))?;
            p.insert(metric.to_string(), test.p_value);
        }
        let p_values: Vec<f64> = p.values().copied().collect();
        let p_combined = combined_p(&p_values)?;
        let hmp = harmonic_mean_p(&p_values, None)?;
        let p_ew = match weights {
            Some(weights) => {
                let w = weights.for_perturbation(name, p.keys().map(String::as_str))?;
                Some(
                    harmonic_mean_p(&p_values, Some(&w))
                        .with_context(|| format!("expert weights of `{name}`"))?,
                )
            }
            None => None,
        };
        results.push(PerturbationResult {
            name: name.to_string(),
            level: *level,
            degree: Degree::of_name(name),
            n,
            p,
            p_combined,
            hmp,
            p_ew,
            d: discernment(p_combined),
            d_ew: p_ew.map(discernment),
        });
    }
    let d: Vec<(Level, f64)> = results.iter().map(|r| (r.level, r.d)).collect();
    let d_ew: Option<Vec<(Level, f64)>> = results
        .iter()
        .map(|r| r.d_ew.map(|d| (r.level, d)))
        .collect();
    let min = |v: &[(Level, f64)]| v.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    Ok(Analysis {
        d_avg: level_balanced_mean(&d).context("no perturbations")?,
        d_min: min(&d),
        d_ew_avg: d_ew.as_deref().and_then(level_balanced_mean),
        d_ew_min: d_ew.as_deref().map(min),
        perturbations: results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        item: &str,
        perturbation: &str,
        level: Option<Level>,
        metric: &str,
        score: f64,
    ) -> ScoreRow {
        ScoreRow {
            item: item.into(),
            perturbation: perturbation.into(),
            level,
            metric: metric.into(),
            score,
        }
    }

    #[test]
    fn discernment_is_one_at_five_percent() {
        assert!((discernment(0.05) - 1.0).abs() < 1e-15);
        assert!((discernment(0.0025) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn levels_count_equally() {
        // C: 1, 3 (mean 2); W: 5; S absent -> (2 + 5) / 2
        let values = [(Level::C, 1.0), (Level::C, 3.0), (Level::W, 5.0)];
        assert_eq!(level_balanced_mean(&values), Some(3.5));
        assert_eq!(level_balanced_mean(&[]), None);
    }

    #[test]
    fn rows_parse_with_numeric_items_and_named_errors() {
        let text = "{\"item\": 3, \"perturbation\": \"original\", \"metric\": \"fluency\", \"score\": 4.5}\n\n\
                    {\"item\": \"3\", \"perturbation\": \"typos-minor\", \"level\": \"C\", \"metric\": \"fluency\", \"score\": 2}\n";
        let rows = parse_score_rows(text, "s.jsonl").unwrap();
        assert_eq!(rows[0].item, "3");
        assert_eq!(rows[1].level, Some(Level::C));
        let error = parse_score_rows(
            "{\"item\": 1, \"perturbation\": \"x\", \"metric\": \"f\", \"score\": 1}",
            "s.jsonl",
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("s.jsonl:1: perturbation `x` needs a `level`"),
            "{error:#}"
        );
        let error = parse_score_rows("{\"item\": 1, \"perturbation\": \"x\", \"level\": \"Q\", \"metric\": \"f\", \"score\": 1}", "s.jsonl")
            .unwrap_err();
        assert!(format!("{error:#}").contains("s.jsonl:1"), "{error:#}");
    }

    #[test]
    fn duplicate_and_unpaired_rows_are_errors() {
        let rows = vec![
            row("1", ORIGINAL, None, "f", 1.0),
            row("1", ORIGINAL, None, "f", 2.0),
        ];
        assert!(analyze(&rows, None)
            .unwrap_err()
            .to_string()
            .contains("two scores"));
        let rows = vec![
            row("1", ORIGINAL, None, "f", 1.0),
            row("2", "typos-minor", Some(Level::C), "f", 2.0),
        ];
        let error = analyze(&rows, None).unwrap_err().to_string();
        assert!(error.contains("no item has both"), "{error}");
    }

    #[test]
    fn unpaired_items_are_left_out_of_n() {
        let mut rows = Vec::new();
        for i in 0..6 {
            rows.push(row(&i.to_string(), ORIGINAL, None, "f", 5.0 + i as f64));
        }
        // item 5 failed to perturb: no row
        for i in 0..5 {
            rows.push(row(
                &i.to_string(),
                "typos-minor",
                Some(Level::C),
                "f",
                1.0 + i as f64 * 0.5,
            ));
        }
        let analysis = analyze(&rows, None).unwrap();
        let result = &analysis.perturbations[0];
        assert_eq!(result.n, 5);
        // all 5 differences positive and distinct: exact p = 1/32
        assert!((result.p["f"] - 1.0 / 32.0).abs() < 1e-15);
        assert_eq!(result.degree, Degree::Minor);
    }
}
