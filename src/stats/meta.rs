//! Meta-evaluation: how well a metric's predictions agree with human scores, at the
//! three published levels.
//!
//! - summary level: a correlation inside each group (document, dialogue context), then
//!   the mean over groups, under one of two published skip rules ([`SkipRule`]);
//! - system level: the correlation of per-system mean scores across systems;
//! - pooled (turn or sample level): one correlation over all items.

use std::collections::HashMap;

use anyhow::{bail, Result};
use serde::Serialize;

use super::correlation::{correlations_checked, Coefficient, Correlations};
use super::input::is_constant;

/// One scored item: the context it belongs to, the system that produced it, the
/// metric's prediction and the human score.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub group: String,
    pub system: String,
    pub pred: f64,
    pub human: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Summary,
    System,
    Pooled,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Summary => "summary",
            Level::System => "system",
            Level::Pooled => "pooled",
        }
    }
}

/// Which groups a summary-level correlation leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkipRule {
    /// Comparative-assessment authors: skip a group whose human scores are all equal;
    /// in a kept group, a constant prediction scores 0.
    Authors,
    /// G-Eval: skip a group when either the human scores or the predictions are constant.
    Geval,
}

impl SkipRule {
    pub fn name(self) -> &'static str {
        match self {
            SkipRule::Authors => "authors",
            SkipRule::Geval => "geval",
        }
    }
}

/// The outcome of one meta-evaluation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelResult {
    pub level: Level,
    /// `None` for a coefficient that is undefined (e.g. every group skipped, or
    /// constant system means).
    pub correlations: Correlations,
    /// Groups whose items entered the result (summary level: groups kept).
    pub n_groups: usize,
    /// Items that entered the result (summary level: items of the kept groups).
    pub n_items: usize,
    /// Summary level: groups left out by the skip rule; 0 at the other levels.
    pub n_groups_skipped: usize,
    /// System level: systems correlated; `None` at the other levels.
    pub n_systems: Option<usize>,
    /// Summary level: of the skipped groups, those holding a single item (nothing can
    /// vary within them); 0 at the other levels.
    #[serde(skip)]
    pub n_single_item_groups: usize,
}

/// Meta-evaluates `items` at `level` (`skip` applies to the summary level only).
pub fn meta_evaluate(items: &[Item], level: Level, skip: SkipRule) -> Result<LevelResult> {
    let table = Table::from_items(items)?;
    if let Some(problem) = table.too_few_units(level) {
        bail!("{} level: {problem}", level.name());
    }
    Ok(table.evaluate(level, skip))
}

/// Summary level: mean over groups of the within-group correlations.
pub fn summary_level(items: &[Item], skip: SkipRule) -> Result<LevelResult> {
    meta_evaluate(items, Level::Summary, skip)
}

/// System level: correlation of per-system mean prediction and mean human score.
pub fn system_level(items: &[Item]) -> Result<LevelResult> {
    meta_evaluate(items, Level::System, SkipRule::Authors)
}

/// Pooled (turn/sample) level: one correlation over all items.
pub fn pooled_level(items: &[Item]) -> Result<LevelResult> {
    meta_evaluate(items, Level::Pooled, SkipRule::Authors)
}

/// Items with group and system ids replaced by dense indices (in order of first
/// appearance), so that bootstrap resamples are cheap to build.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    pub group: Vec<usize>,
    pub system: Vec<usize>,
    pub pred: Vec<f64>,
    pub human: Vec<f64>,
    pub n_groups: usize,
    pub n_systems: usize,
}

impl Table {
    pub fn from_items(items: &[Item]) -> Result<Self> {
        if items.is_empty() {
            bail!("no items to meta-evaluate");
        }
        let mut groups = HashMap::new();
        let mut systems = HashMap::new();
        let mut table = Table::default();
        for (index, item) in items.iter().enumerate() {
            for (side, value) in [("prediction", item.pred), ("human score", item.human)] {
                if !value.is_finite() {
                    bail!(
                        "item {index} (group {:?}, system {:?}): {side} is {value}; \
                         statistics need finite numbers",
                        item.group,
                        item.system
                    );
                }
            }
            let next_group = groups.len();
            table
                .group
                .push(*groups.entry(item.group.as_str()).or_insert(next_group));
            let next_system = systems.len();
            table
                .system
                .push(*systems.entry(item.system.as_str()).or_insert(next_system));
            table.pred.push(item.pred);
            table.human.push(item.human);
        }
        table.n_groups = groups.len();
        table.n_systems = systems.len();
        Ok(table)
    }

    /// Why `level` cannot be computed on this table (fewer than two points to
    /// correlate), or `None` when it can.
    pub fn too_few_units(&self, level: Level) -> Option<String> {
        match level {
            Level::Summary => None,
            Level::System => {
                let present = self.systems_present();
                (present < 2).then(|| format!("needs at least 2 systems, found {present}"))
            }
            Level::Pooled => (self.pred.len() < 2)
                .then(|| format!("needs at least 2 items, found {}", self.pred.len())),
        }
    }

    fn systems_present(&self) -> usize {
        let mut seen = vec![false; self.n_systems];
        for &system in &self.system {
            seen[system] = true;
        }
        seen.into_iter().filter(|&present| present).count()
    }

    /// Computes `level`; the caller has checked [`Table::too_few_units`].
    pub fn evaluate(&self, level: Level, skip: SkipRule) -> LevelResult {
        match level {
            Level::Summary => self.summary(skip),
            Level::System => self.system_means(),
            Level::Pooled => LevelResult {
                level,
                correlations: correlations_checked(&self.pred, &self.human),
                n_groups: self.groups_present(),
                n_items: self.pred.len(),
                n_groups_skipped: 0,
                n_systems: None,
                n_single_item_groups: 0,
            },
        }
    }

    fn groups_present(&self) -> usize {
        let mut seen = vec![false; self.n_groups];
        for &group in &self.group {
            seen[group] = true;
        }
        seen.into_iter().filter(|&present| present).count()
    }

    fn summary(&self, skip: SkipRule) -> LevelResult {
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); self.n_groups];
        for (index, &group) in self.group.iter().enumerate() {
            members[group].push(index);
        }
        let mut per_group = Vec::new();
        let (mut n_items, mut n_skipped, mut n_single) = (0, 0, 0);
        for indices in members.iter().filter(|indices| !indices.is_empty()) {
            if indices.len() == 1 {
                n_single += 1;
            }
            let pred: Vec<f64> = indices.iter().map(|&i| self.pred[i]).collect();
            let human: Vec<f64> = indices.iter().map(|&i| self.human[i]).collect();
            let kept = match (skip, is_constant(&human), is_constant(&pred)) {
                (_, true, _) => None,
                (SkipRule::Geval, false, true) => None,
                (SkipRule::Authors, false, true) => Some(Correlations::all(0.0)),
                (_, false, false) => Some(correlations_checked(&pred, &human)),
            };
            match kept {
                Some(correlations) => {
                    per_group.push(correlations);
                    n_items += indices.len();
                }
                None => n_skipped += 1,
            }
        }
        let correlations = Correlations::from_fn(|coefficient: Coefficient| {
            let defined: Vec<f64> = per_group
                .iter()
                .filter_map(|c| c.get(coefficient))
                .collect();
            (!defined.is_empty()).then(|| defined.iter().sum::<f64>() / defined.len() as f64)
        });
        LevelResult {
            level: Level::Summary,
            correlations,
            n_groups: per_group.len(),
            n_items,
            n_groups_skipped: n_skipped,
            n_systems: None,
            n_single_item_groups: n_single,
        }
    }

    fn system_means(&self) -> LevelResult {
        let mut sums = vec![(0.0, 0.0, 0usize); self.n_systems];
        for ((&system, &pred), &human) in self.system.iter().zip(&self.pred).zip(&self.human) {
            let entry = &mut sums[system];
            entry.0 += pred;
            entry.1 += human;
            entry.2 += 1;
        }
        let (pred_means, human_means): (Vec<f64>, Vec<f64>) = sums
            .iter()
            .filter(|(_, _, count)| *count > 0)
            .map(|&(pred, human, count)| (pred / count as f64, human / count as f64))
            .unzip();
        LevelResult {
            level: Level::System,
            correlations: correlations_checked(&pred_means, &human_means),
            n_groups: self.groups_present(),
            n_items: self.pred.len(),
            n_groups_skipped: 0,
            n_systems: Some(pred_means.len()),
            n_single_item_groups: 0,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    const TOLERANCE: f64 = 1e-12;

    fn item(group: &str, system: &str, pred: f64, human: f64) -> Item {
        Item {
            group: group.into(),
            system: system.into(),
            pred,
            human,
        }
    }

    /// g1: human scores vary, prediction constant (the rules differ here);
    /// g2: human scores constant (both rules skip it); g3, g4: ordinary.
    pub(crate) fn constructed_items() -> Vec<Item> {
        vec![
            item("g1", "s1", 2.0, 1.0),
            item("g1", "s2", 2.0, 3.0),
            item("g1", "s3", 2.0, 2.0),
            item("g2", "s1", 1.0, 4.0),
            item("g2", "s2", 3.0, 4.0),
            item("g2", "s3", 2.0, 4.0),
            item("g3", "s1", 0.5, 1.0),
            item("g3", "s2", 0.9, 2.0),
            item("g3", "s3", 0.7, 3.0),
            item("g4", "s1", 3.0, 2.0),
            item("g4", "s2", 1.0, 5.0),
            item("g4", "s3", 2.5, 4.0),
        ]
    }

    fn assert_correlations(got: Correlations, expected: [f64; 3]) {
        for (coefficient, want) in Coefficient::ALL.into_iter().zip(expected) {
            let value = got.get(coefficient).expect("defined");
            assert_abs_diff_eq!(value, want, epsilon = TOLERANCE);
        }
    }

    // Expected values: scipy 1.17.1 / numpy 2.4.6 in tests/reference/stats_reference.py
    // (per-group stats.pearsonr / spearmanr / kendalltau, then np.mean; per-system
    // np.mean then the same coefficients; pooled coefficients over all items).

    #[test]
    fn summary_level_authors_rule_scores_constant_prediction_zero() {
        let result = summary_level(&constructed_items(), SkipRule::Authors).unwrap();
        assert_correlations(
            result.correlations,
            [
                -0.1303473704045435,
                -0.16666666666666666,
                -0.2222222222222222,
            ],
        );
        assert_eq!(
            (result.n_groups, result.n_items, result.n_groups_skipped),
            (3, 9, 1)
        );
    }

    #[test]
    fn summary_level_geval_rule_skips_constant_prediction() {
        let result = summary_level(&constructed_items(), SkipRule::Geval).unwrap();
        assert_correlations(
            result.correlations,
            [-0.19552105560681526, -0.25, -0.3333333333333333],
        );
        assert_eq!(
            (result.n_groups, result.n_items, result.n_groups_skipped),
            (2, 6, 2)
        );
    }

    #[test]
    fn system_level_correlates_system_means() {
        let result = system_level(&constructed_items()).unwrap();
        assert_correlations(
            result.correlations,
            [0.8267540335004899, 0.5, 0.33333333333333337],
        );
        assert_eq!(result.n_systems, Some(3));
        assert_eq!((result.n_groups, result.n_items), (4, 12));
    }

    #[test]
    fn pooled_level_uses_all_items() {
        let result = pooled_level(&constructed_items()).unwrap();
        assert_correlations(
            result.correlations,
            [
                0.10422408476979865,
                0.20404963376924382,
                0.15934820215421497,
            ],
        );
        assert_eq!((result.n_groups, result.n_items), (4, 12));
    }

    #[test]
    fn groups_need_not_be_contiguous() {
        let mut items = constructed_items();
        items.reverse();
        items.swap(0, 7);
        let shuffled = summary_level(&items, SkipRule::Authors).unwrap();
        let ordered = summary_level(&constructed_items(), SkipRule::Authors).unwrap();
        for coefficient in Coefficient::ALL {
            assert_abs_diff_eq!(
                shuffled.correlations.get(coefficient).unwrap(),
                ordered.correlations.get(coefficient).unwrap(),
                epsilon = TOLERANCE
            );
        }
    }

    #[test]
    fn all_groups_skipped_is_undefined_not_zero() {
        let items = vec![
            item("a", "s1", 1.0, 3.0),
            item("a", "s2", 2.0, 3.0),
            item("b", "s1", 1.0, 2.0),
        ];
        let result = summary_level(&items, SkipRule::Authors).unwrap();
        assert_eq!(result.correlations, Correlations::default());
        assert_eq!((result.n_groups, result.n_groups_skipped), (0, 2));
    }

    #[test]
    fn constant_system_means_are_undefined() {
        let items = vec![
            item("a", "s1", 1.0, 3.0),
            item("a", "s2", 2.0, 3.0),
            item("b", "s1", 2.0, 1.0),
            item("b", "s2", 1.0, 4.0),
        ];
        let result = system_level(&items).unwrap();
        assert_eq!(result.correlations.pearson, None);
    }

    #[test]
    fn one_system_is_an_error() {
        let items = vec![item("a", "s1", 1.0, 3.0), item("b", "s1", 2.0, 1.0)];
        let error = system_level(&items).unwrap_err();
        assert_eq!(
            error.to_string(),
            "system level: needs at least 2 systems, found 1"
        );
    }

    #[test]
    fn nan_item_is_rejected_naming_it() {
        let mut items = constructed_items();
        items[4].human = f64::NAN;
        let error = pooled_level(&items).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("item 4 (group \"g2\", system \"s2\"): human score is NaN"),
            "{error}"
        );
    }

    #[test]
    fn no_items_is_an_error() {
        assert!(summary_level(&[], SkipRule::Authors).is_err());
    }
}
