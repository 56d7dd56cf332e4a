//! Correlation coefficients between two paired series: Pearson, Spearman (Pearson of
//! average ranks) and Kendall's tau-b (ties in either series).
//!
//! A coefficient is `None` when it is undefined, i.e. when either series is constant.
//! Callers decide what an undefined value means (the meta-evaluation skip rules do).

use anyhow::Result;
use serde::Serialize;

use super::input::{check_paired, cmp_finite, is_constant};
use super::ranks::ranks_and_ties;

/// The three coefficients, for iterating and naming them in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Coefficient {
    Pearson,
    Spearman,
    Kendall,
}

impl Coefficient {
    pub const ALL: [Coefficient; 3] = [
        Coefficient::Pearson,
        Coefficient::Spearman,
        Coefficient::Kendall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Coefficient::Pearson => "pearson",
            Coefficient::Spearman => "spearman",
            Coefficient::Kendall => "kendall",
        }
    }
}

/// Pearson, Spearman and Kendall tau-b of one paired sample; `None` = undefined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Correlations {
    pub pearson: Option<f64>,
    pub spearman: Option<f64>,
    pub kendall: Option<f64>,
}

impl Correlations {
    /// All three coefficients set to the same value (a skip rule's fixed score).
    pub fn all(value: f64) -> Self {
        Correlations {
            pearson: Some(value),
            spearman: Some(value),
            kendall: Some(value),
        }
    }

    pub fn get(&self, coefficient: Coefficient) -> Option<f64> {
        match coefficient {
            Coefficient::Pearson => self.pearson,
            Coefficient::Spearman => self.spearman,
            Coefficient::Kendall => self.kendall,
        }
    }

    fn set(&mut self, coefficient: Coefficient, value: Option<f64>) {
        match coefficient {
            Coefficient::Pearson => self.pearson = value,
            Coefficient::Spearman => self.spearman = value,
            Coefficient::Kendall => self.kendall = value,
        }
    }

    /// Builds the three coefficients from a function of the coefficient.
    pub fn from_fn(mut value: impl FnMut(Coefficient) -> Option<f64>) -> Self {
        let mut result = Correlations::default();
        for coefficient in Coefficient::ALL {
            result.set(coefficient, value(coefficient));
        }
        result
    }
}

/// All three coefficients of `x` against `y` (at least 2 pairs, finite values).
pub fn correlations(x: &[f64], y: &[f64]) -> Result<Correlations> {
    check_paired(("x", x), ("y", y), 2)?;
    Ok(correlations_checked(x, y))
}

/// Pearson's r. `None` when either series is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Result<Option<f64>> {
    check_paired(("x", x), ("y", y), 2)?;
    Ok(pearson_checked(x, y))
}

/// Spearman's rho: Pearson's r of the average ranks. `None` when either series is constant.
pub fn spearman(x: &[f64], y: &[f64]) -> Result<Option<f64>> {
    check_paired(("x", x), ("y", y), 2)?;
    Ok(spearman_checked(x, y))
}

/// Kendall's tau-b, exact, in O(n log n). `None` when either series is constant.
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> Result<Option<f64>> {
    check_paired(("x", x), ("y", y), 2)?;
    Ok(kendall_checked(x, y))
}

pub(crate) fn correlations_checked(x: &[f64], y: &[f64]) -> Correlations {
    Correlations {
        pearson: pearson_checked(x, y),
        spearman: spearman_checked(x, y),
        kendall: kendall_checked(x, y),
    }
}

fn pearson_checked(x: &[f64], y: &[f64]) -> Option<f64> {
    if is_constant(x) || is_constant(y) {
        return None;
    }
    let n = x.len() as f64;
    let mean_x = x.iter().sum::<f64>() / n;
    let mean_y = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        let (dx, dy) = (a - mean_x, b - mean_y);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    let scale = sxx.sqrt() * syy.sqrt();
    if scale == 0.0 {
        // Spread too small to represent: as undefined as a constant series.
        return None;
    }
    Some((sxy / scale).clamp(-1.0, 1.0))
}

fn spearman_checked(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson_checked(&ranks_and_ties(x).0, &ranks_and_ties(y).0)
}

/// Knight's algorithm: sort by (x, y); count pairs tied in x and tied in both; count
/// discordant pairs as the inversions of y in that order (merge sort); then count
/// pairs tied in y. With n0 = n(n-1)/2:
/// tau-b = (n0 - ties_x - ties_y + ties_xy - 2 * discordant) / sqrt((n0 - ties_x)(n0 - ties_y)).
fn kendall_checked(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cmp_finite(x[a], x[b]).then(cmp_finite(y[a], y[b])));

    let ties_x = tied_pairs(&order, |a, b| x[a] == x[b]);
    let ties_xy = tied_pairs(&order, |a, b| x[a] == x[b] && y[a] == y[b]);

    let mut ys: Vec<f64> = order.iter().map(|&i| y[i]).collect();
    let mut buffer = vec![0.0; n];
    let discordant = sort_counting_inversions(&mut ys, &mut buffer);
    let ties_y = tied_pairs(&(0..n).collect::<Vec<_>>(), |a, b| ys[a] == ys[b]);

    let all_pairs = (n as u64) * (n as u64 - 1) / 2;
    if all_pairs == ties_x || all_pairs == ties_y {
        return None;
    }
    let numerator =
        all_pairs as f64 - ties_x as f64 - ties_y as f64 + ties_xy as f64 - 2.0 * discordant as f64;
    let denominator = ((all_pairs - ties_x) as f64).sqrt() * ((all_pairs - ties_y) as f64).sqrt();
    Some((numerator / denominator).clamp(-1.0, 1.0))
}

/// Number of tied pairs: sum of t(t-1)/2 over the runs of `order` whose neighbours are `equal`.
fn tied_pairs(order: &[usize], equal: impl Fn(usize, usize) -> bool) -> u64 {
    let mut total = 0;
    let mut run = 1u64;
    for pair in order.windows(2) {
        if equal(pair[0], pair[1]) {
            run += 1;
        } else {
            total += run * (run - 1) / 2;
            run = 1;
        }
    }
    total + run * (run - 1) / 2
}

/// Sorts `values` ascending (stable merge sort) and returns the number of pairs
/// i < j with values[i] > values[j] strictly.
fn sort_counting_inversions(values: &mut [f64], buffer: &mut [f64]) -> u64 {
    let n = values.len();
    if n < 2 {
        return 0;
    }
    let middle = n / 2;
    let mut inversions = {
        let (left, right) = values.split_at_mut(middle);
        sort_counting_inversions(left, &mut buffer[..middle])
            + sort_counting_inversions(right, &mut buffer[middle..])
    };
    let (mut i, mut j) = (0, middle);
    for slot in buffer[..n].iter_mut() {
        let take_left = j == n || (i < middle && values[i] <= values[j]);
        if take_left {
            *slot = values[i];
            i += 1;
        } else {
            // values[j] is smaller than every value left in the first half.
            inversions += (middle - i) as u64;
            *slot = values[j];
            j += 1;
        }
    }
    values.copy_from_slice(&buffer[..n]);
    inversions
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    /// Agreement with scipy, up to floating-point summation order.
    const TOLERANCE: f64 = 1e-12;

    fn check(x: &[f64], y: &[f64], expected: [f64; 3]) {
        let got = correlations(x, y).expect("valid input");
        for (coefficient, want) in Coefficient::ALL.into_iter().zip(expected) {
            let value = got.get(coefficient).expect("defined");
            assert_abs_diff_eq!(value, want, epsilon = TOLERANCE);
        }
        assert_eq!(pearson(x, y).unwrap(), got.pearson);
        assert_eq!(spearman(x, y).unwrap(), got.spearman);
        assert_eq!(kendall_tau_b(x, y).unwrap(), got.kendall);
    }

    // Expected values: scipy 1.17.1, (stats.pearsonr(x, y).statistic,
    // stats.spearmanr(x, y).statistic, stats.kendalltau(x, y).statistic  # tau-b),
    // printed by tests/reference/stats_reference.py.

    #[test]
    fn without_ties() {
        check(
            &[1.0, 2.0, 3.0, 4.0, 5.0],
            &[2.0, 1.0, 4.0, 3.0, 5.0],
            [0.8, 0.7999999999999999, 0.6],
        );
    }

    #[test]
    fn with_ties_in_both_series() {
        check(
            &[1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0],
            &[1.0, 3.0, 2.0, 2.0, 3.0, 4.0, 4.0],
            [0.7893522173763263, 0.75013872191, 0.6859943405700354],
        );
    }

    #[test]
    fn real_values_with_ties() {
        check(
            &[0.31, 1.7, -2.2, 4.05, 0.31, 3.3, 2.0, -0.5],
            &[1.0, 2.5, 0.5, 3.0, 2.5, 2.5, 1.5, 0.0],
            [0.7919708571734116, 0.8222251619036417, 0.6928203230275509],
        );
    }

    #[test]
    fn two_points() {
        check(&[1.0, 2.0], &[3.0, 1.0], [-1.0, -0.9999999999999999, -1.0]);
    }

    #[test]
    fn constant_series_is_undefined() {
        let got = correlations(&[1.0, 2.0, 3.0], &[4.0, 4.0, 4.0]).unwrap();
        assert_eq!(got, Correlations::default());
        let got = correlations(&[2.5, 2.5], &[1.0, 3.0]).unwrap();
        assert_eq!(got, Correlations::default());
    }

    #[test]
    fn one_pair_is_an_error() {
        let error = correlations(&[1.0], &[2.0]).unwrap_err();
        assert!(error.to_string().contains("at least 2"), "{error}");
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let error = kendall_tau_b(&[1.0, 2.0, 3.0], &[2.0, 1.0]).unwrap_err();
        assert!(error.to_string().contains("length mismatch"), "{error}");
    }

    #[test]
    fn nan_is_rejected_naming_series_and_index() {
        let error = spearman(&[1.0, 2.0, 3.0], &[2.0, f64::NAN, 1.0]).unwrap_err();
        assert!(error.to_string().contains("y[1] is NaN"), "{error}");
        let error = pearson(&[f64::NAN, 2.0], &[2.0, 1.0]).unwrap_err();
        assert!(error.to_string().contains("x[0] is NaN"), "{error}");
    }

    /// tau-b straight from its definition, O(n^2), to check the merge-sort version.
    fn tau_b_by_pairs(x: &[f64], y: &[f64]) -> f64 {
        let (mut score, mut untied_x, mut untied_y) = (0.0, 0.0, 0.0);
        for i in 0..x.len() {
            for j in i + 1..x.len() {
                let dx = (x[i] - x[j]).signum() * f64::from(u8::from(x[i] != x[j]));
                let dy = (y[i] - y[j]).signum() * f64::from(u8::from(y[i] != y[j]));
                score += dx * dy;
                untied_x += dx.abs();
                untied_y += dy.abs();
            }
        }
        score / (untied_x * untied_y).sqrt()
    }

    #[test]
    fn merge_sort_kendall_matches_pair_counting_on_tied_data() {
        // Deterministic pseudo-random scores on a coarse grid, so that ties are frequent.
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % 7) as f64 - 3.0
        };
        for n in [2, 3, 10, 57, 200] {
            let x: Vec<f64> = (0..n).map(|_| next()).collect();
            let y: Vec<f64> = x
                .iter()
                .map(|v| if next() > 0.0 { *v } else { next() })
                .collect();
            let fast = kendall_tau_b(&x, &y).unwrap();
            if is_constant(&x) || is_constant(&y) {
                assert_eq!(fast, None);
            } else {
                assert_abs_diff_eq!(fast.unwrap(), tau_b_by_pairs(&x, &y), epsilon = 1e-12);
            }
        }
    }
}
