//! Bootstrap confidence intervals for a meta-evaluation, resampling groups (documents,
//! contexts) with replacement, as the published meta-evaluations do. Percentile
//! intervals; reproducible for a seed (`rand::rngs::StdRng`).

use anyhow::{bail, ensure, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::correlation::Coefficient;
use super::input::{check_finite, cmp_finite};
use super::meta::{Item, Level, SkipRule, Table};

/// The fewest groups (contexts, documents) a bootstrap interval is given for. Below it
/// the resamples are too few and too alike for a percentile interval to mean its level:
/// with one group every resample is the data itself (an interval of width 0), with two
/// the interval only spans the two groups' own values, and a percentile interval of a
/// mean over n groups is too narrow by about sqrt((n-1)/n) and by the normal quantile
/// standing in for Student's (1.96 against 2.26 at n = 10, 2.78 at n = 5): a nominal
/// 95% interval covers about 90% at n = 10 and about 80% at n = 5. So below 10 no
/// interval is shown, and every front end says why (docs/results.md, "Intervals").
pub const MIN_BOOTSTRAP_GROUPS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BootstrapOptions {
    /// Number of resamples.
    pub resamples: usize,
    /// Confidence level in (0, 1), e.g. 0.95.
    pub confidence: f64,
    pub seed: u64,
}

/// A closed interval `[lower, upper]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub lower: f64,
    pub upper: f64,
}

impl Interval {
    pub fn contains(&self, value: f64) -> bool {
        self.lower <= value && value <= self.upper
    }
}

/// The interval of one coefficient.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CoefficientInterval {
    /// `None` when no resample gave a defined value.
    pub interval: Option<Interval>,
    /// Resamples where the coefficient was defined (the interval's sample size).
    pub n_defined: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BootstrapResult {
    pub confidence: f64,
    pub resamples: usize,
    pub seed: u64,
    /// Why no interval was computed ([`MIN_BOOTSTRAP_GROUPS`]); `None` when the
    /// intervals were.
    pub withheld: Option<String>,
    pub pearson: CoefficientInterval,
    pub spearman: CoefficientInterval,
    pub kendall: CoefficientInterval,
}

impl BootstrapResult {
    pub fn get(&self, coefficient: Coefficient) -> &CoefficientInterval {
        match coefficient {
            Coefficient::Pearson => &self.pearson,
            Coefficient::Spearman => &self.spearman,
            Coefficient::Kendall => &self.kendall,
        }
    }
}

/// Percentile bootstrap intervals for the coefficients of [`super::meta_evaluate`].
///
/// Each resample draws as many groups as there are, with replacement; a group drawn
/// twice counts as two groups. A resample where a coefficient is undefined (every
/// group skipped, constant means, fewer than two systems) leaves that coefficient out;
/// `n_defined` says how many remained. `on_resample` is called after each resample
/// (for progress reporting).
///
/// With fewer than [`MIN_BOOTSTRAP_GROUPS`] groups at `level`, nothing is resampled:
/// every interval is `None` and `withheld` says why.
pub fn bootstrap_ci(
    items: &[Item],
    level: Level,
    skip: SkipRule,
    options: &BootstrapOptions,
    on_resample: impl FnMut(),
) -> Result<BootstrapResult> {
    bootstrap_with_least(
        items,
        level,
        skip,
        options,
        MIN_BOOTSTRAP_GROUPS,
        on_resample,
    )
}

/// [`bootstrap_ci`] with `least` groups needed for an interval.
fn bootstrap_with_least(
    items: &[Item],
    level: Level,
    skip: SkipRule,
    options: &BootstrapOptions,
    least: usize,
    mut on_resample: impl FnMut(),
) -> Result<BootstrapResult> {
    ensure!(
        options.resamples >= 1,
        "bootstrap needs at least 1 resample"
    );
    check_confidence(options.confidence)?;
    let table = Table::from_items(items)?;
    let groups = table.evaluate(level, skip).n_groups;
    if groups < least {
        let none = CoefficientInterval {
            interval: None,
            n_defined: 0,
        };
        return Ok(BootstrapResult {
            confidence: options.confidence,
            resamples: options.resamples,
            seed: options.seed,
            withheld: Some(too_few_groups(groups)),
            pearson: none,
            spearman: none,
            kendall: none,
        });
    }

    let mut members: Vec<Vec<usize>> = vec![Vec::new(); table.n_groups];
    for (index, &group) in table.group.iter().enumerate() {
        members[group].push(index);
    }

    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut replicates: [Vec<f64>; 3] = Default::default();
    let mut resample = Table::default();
    for _ in 0..options.resamples {
        resample_groups(&table, &members, &mut rng, &mut resample);
        if resample.too_few_units(level).is_none() {
            let correlations = resample.evaluate(level, skip).correlations;
            for (values, coefficient) in replicates.iter_mut().zip(Coefficient::ALL) {
                values.extend(correlations.get(coefficient));
            }
        }
        on_resample();
    }

    let [pearson, spearman, kendall] = replicates.map(|values| CoefficientInterval {
        n_defined: values.len(),
        interval: percentile_interval(&values, options.confidence).ok(),
    });
    Ok(BootstrapResult {
        confidence: options.confidence,
        resamples: options.resamples,
        seed: options.seed,
        withheld: None,
        pearson,
        spearman,
        kendall,
    })
}

/// Why no interval is given for `groups` groups.
fn too_few_groups(groups: usize) -> String {
    let counted = match groups {
        0 => "no group (context) could be used".to_string(),
        1 => "one group (context) only".to_string(),
        n => format!("{n} groups (contexts) only"),
    };
    format!(
        "no interval: {counted}; a bootstrap over fewer than {MIN_BOOTSTRAP_GROUPS} cannot \
         give an interval that holds its confidence level"
    )
}

/// Fills `out` with the items of `members.len()` groups drawn with replacement; the
/// k-th draw becomes group k.
fn resample_groups(table: &Table, members: &[Vec<usize>], rng: &mut StdRng, out: &mut Table) {
    out.group.clear();
    out.system.clear();
    out.pred.clear();
    out.human.clear();
    for draw in 0..members.len() {
        let source = rng.gen_range(0..members.len());
        for &index in &members[source] {
            out.group.push(draw);
            out.system.push(table.system[index]);
            out.pred.push(table.pred[index]);
            out.human.push(table.human[index]);
        }
    }
    out.n_groups = members.len();
    out.n_systems = table.n_systems;
}

/// The central `confidence` interval of `values` by percentiles, interpolating
/// linearly between order statistics (numpy's default `np.percentile` method):
/// the q-quantile is at position q(n-1) of the sorted values.
pub fn percentile_interval(values: &[f64], confidence: f64) -> Result<Interval> {
    check_confidence(confidence)?;
    if values.is_empty() {
        bail!("no values to take percentiles of");
    }
    check_finite("values", values)?;
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| cmp_finite(*a, *b));
    let tail = (1.0 - confidence) / 2.0;
    Ok(Interval {
        lower: quantile_of_sorted(&sorted, tail),
        upper: quantile_of_sorted(&sorted, 1.0 - tail),
    })
}

fn quantile_of_sorted(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(sorted.len() - 1);
    let fraction = position - below as f64;
    sorted[below] + fraction * (sorted[above] - sorted[below])
}

fn check_confidence(confidence: f64) -> Result<()> {
    ensure!(
        confidence > 0.0 && confidence < 1.0,
        "confidence level must be strictly between 0 and 1, got {confidence}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::meta::{meta_evaluate, tests::constructed_items};
    use approx::assert_abs_diff_eq;

    #[test]
    fn percentiles_match_numpy_linear_interpolation() {
        let values = [0.42, 0.13, 0.88, 0.57, 0.29, 0.71, 0.05, 0.66, 0.35, 0.94];
        // numpy 2.4.6: np.percentile(values, [2.5, 97.5]) and [5, 95]
        let interval = percentile_interval(&values, 0.95).unwrap();
        assert_abs_diff_eq!(interval.lower, 0.068, epsilon = 1e-12);
        assert_abs_diff_eq!(interval.upper, 0.9265, epsilon = 1e-12);
        let interval = percentile_interval(&values, 0.90).unwrap();
        assert_abs_diff_eq!(interval.lower, 0.08600000000000001, epsilon = 1e-12);
        assert_abs_diff_eq!(interval.upper, 0.9129999999999999, epsilon = 1e-12);
    }

    #[test]
    fn percentile_of_one_value_is_that_value() {
        let interval = percentile_interval(&[0.3], 0.95).unwrap();
        assert_eq!((interval.lower, interval.upper), (0.3, 0.3));
    }

    #[test]
    fn bad_confidence_is_an_error() {
        assert!(percentile_interval(&[1.0, 2.0], 1.0).is_err());
        assert!(percentile_interval(&[1.0, 2.0], 0.0).is_err());
    }

    /// 30 groups of 6 items where the prediction follows the human score with noise, and
    /// systems differ slightly in quality.
    fn noisy_items() -> Vec<Item> {
        let mut state = 99u64;
        let mut noise = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        };
        let mut items = Vec::new();
        for group in 0..30 {
            for system in 0..6 {
                let human = ((group * 7 + system * 3) % 5) as f64 + 1.0 + 0.15 * system as f64;
                items.push(Item {
                    group: format!("d{group}"),
                    system: format!("m{system}"),
                    pred: human + 2.0 * noise(),
                    human,
                });
            }
        }
        items
    }

    fn options(seed: u64) -> BootstrapOptions {
        BootstrapOptions {
            resamples: 300,
            confidence: 0.95,
            seed,
        }
    }

    #[test]
    fn same_seed_same_interval_and_other_seed_differs() {
        let items = noisy_items();
        let run = |seed| {
            bootstrap_ci(
                &items,
                Level::Summary,
                SkipRule::Authors,
                &options(seed),
                || {},
            )
            .unwrap()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7).spearman, run(8).spearman);
    }

    #[test]
    fn interval_contains_point_estimate_at_every_level() {
        let items = noisy_items();
        for level in [Level::Summary, Level::System, Level::Pooled] {
            let point = meta_evaluate(&items, level, SkipRule::Authors).unwrap();
            let mut calls = 0;
            let ci =
                bootstrap_ci(&items, level, SkipRule::Authors, &options(1), || calls += 1).unwrap();
            assert_eq!(calls, 300);
            for coefficient in Coefficient::ALL {
                let estimate = point.correlations.get(coefficient).unwrap();
                let interval = ci.get(coefficient).interval.unwrap();
                assert!(
                    interval.contains(estimate) && interval.lower < interval.upper,
                    "{level:?} {coefficient:?}: {estimate} outside {interval:?}"
                );
            }
        }
    }

    /// Below the fewest groups, no interval and no resample, with the reason; at it, the
    /// intervals are computed.
    #[test]
    fn too_few_groups_give_no_interval_and_say_why() {
        let items = noisy_items();
        for (groups, expect) in [(1, "one group"), (2, "2 groups"), (9, "9 groups")] {
            let some: Vec<Item> = items
                .iter()
                .filter(|item| item.group[1..].parse::<usize>().unwrap() < groups)
                .cloned()
                .collect();
            for level in [Level::Summary, Level::System, Level::Pooled] {
                let mut calls = 0;
                let ci = bootstrap_ci(&some, level, SkipRule::Authors, &options(1), || calls += 1)
                    .unwrap();
                assert_eq!(calls, 0);
                let why = ci.withheld.as_deref().expect("withheld");
                assert!(
                    why.contains(expect) && why.contains("fewer than 10"),
                    "{why}"
                );
                assert!(Coefficient::ALL
                    .iter()
                    .all(|&c| ci.get(c).interval.is_none()));
            }
        }
        let ten: Vec<Item> = items
            .iter()
            .filter(|item| item.group[1..].parse::<usize>().unwrap() < MIN_BOOTSTRAP_GROUPS)
            .cloned()
            .collect();
        let ci = bootstrap_ci(&ten, Level::Summary, SkipRule::Authors, &options(1), || {}).unwrap();
        assert_eq!(ci.withheld, None);
        assert!(ci.spearman.interval.is_some());
    }

    #[test]
    fn resamples_with_every_group_skipped_are_left_out() {
        // Two of four groups are usable; a resample drawing only the others is undefined.
        let items = constructed_items();
        let ci = bootstrap_with_least(
            &items,
            Level::Summary,
            SkipRule::Geval,
            &options(3),
            1,
            || {},
        )
        .unwrap();
        let defined = ci.pearson.n_defined;
        assert!(defined < 300 && defined > 200, "n_defined = {defined}");
        assert_eq!(ci.kendall.n_defined, defined);
    }
}
