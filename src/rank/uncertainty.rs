//! Scores with their uncertainty from debiased pair differences: what adaptive
//! comparison selection needs to know where the next comparison tells the most.
//!
//! Each unordered pair `{i, j}` compared in both orders gives one observation of the
//! score difference, `d_ij = (logit p(i, j) - logit p(j, i)) / 2`; a constant
//! first-position bias adds the same amount to both logits and cancels. The scores are
//! the least-squares fit `d_ij ~ s_i - s_j` (the Product-of-Experts Gaussian of
//! Liusie et al., 2024, on both orders at once), and under that Gaussian model
//! `Var(s_i - s_j) = sigma^2 R_ij`, where `R_ij` is the effective resistance between
//! `i` and `j` in the graph of compared pairs (each pair a unit conductance), read from
//! the Laplacian's pseudo-inverse `L+`. Candidates in different connected groups have
//! a resistance of about `1 / GROUND` (huge): nothing is known of their order.
//!
//! `sigma^2` is the residual variance of the fit with one pseudo-observation of prior
//! variance 1 (logit units) so that it is defined before there are more pairs than
//! free scores: `(RSS + 1) / (pairs - (n - 1) + 1)`.
//!
//! With absolute scores as experts ([`fit_pair_differences_with_prior`]) the fit is the
//! joint one of [`super::hybrid`] over `(s, b)`: each pair difference (the mean of two
//! comparisons) counts as two comparisons, so each absolute expert weighs `lambda / 2`
//! against one pair. The absolute experts pin the offset (no ground needed), the
//! covariance is read from the inverse of the `(n + 1) x (n + 1)` normal matrix (the
//! slope's uncertainty included), and `sigma^2` counts the absolute experts' weighted
//! residuals and observations too: `(RSS + 1) / (pairs - 1 + 1)` with `n + 1` unknowns.

use super::hybrid::standardise;
use super::linalg::solve_spd;
use super::poe::CLIP;
use super::Outcome;

use anyhow::{bail, Result};
use std::collections::HashMap;

/// Conductance of every candidate to the mean: pins the free offset of each connected
/// group without changing differences within one.
const GROUND: f64 = 1e-6;

/// A fit of pair differences and its uncertainty.
#[derive(Debug, Clone, PartialEq)]
pub struct PairFit {
    n: usize,
    /// Side of `inverse`: `n`, or `n + 1` with the absolute scores' slope.
    dim: usize,
    /// Least-squares scores (each connected group centred).
    pub scores: Vec<f64>,
    /// Residual variance of one pair observation (see the module header).
    pub sigma2: f64,
    /// `(L + J/n + GROUND I)^-1`, row-major: `L+` plus a constant on connected graphs;
    /// with absolute scores, the inverse of the joint normal matrix.
    inverse: Vec<f64>,
    /// Unordered pairs observed.
    pub pairs: usize,
}

impl PairFit {
    /// Effective resistance between `i` and `j` in the current graph of pairs.
    pub fn resistance(&self, i: usize, j: usize) -> f64 {
        let n = self.dim;
        (self.inverse[i * n + i] + self.inverse[j * n + j] - 2.0 * self.inverse[i * n + j]).max(0.0)
    }

    /// Standard deviation of `s_i - s_j`.
    pub fn difference_sd(&self, i: usize, j: usize) -> f64 {
        (self.sigma2 * self.resistance(i, j)).sqrt()
    }

    /// Standard deviation of `s_i` about the mean of all scores.
    pub fn score_sd(&self, i: usize) -> f64 {
        let (n, dim) = (self.n, self.dim);
        let row = &self.inverse[i * dim..i * dim + n];
        let row_mean = row.iter().sum::<f64>() / n as f64;
        let all_mean = (0..n)
            .map(|a| self.inverse[a * dim..a * dim + n].iter().sum::<f64>())
            .sum::<f64>()
            / (n * n) as f64;
        (self.sigma2 * (row[i] - 2.0 * row_mean + all_mean).max(0.0)).sqrt()
    }

    /// Probability that the fitted order of `i` and `j` is wrong, under the Gaussian
    /// model: `Phi(-|s_i - s_j| / sd(s_i - s_j))` (0.5 when nothing is known).
    pub fn flip_probability(&self, i: usize, j: usize) -> f64 {
        let sd = self.difference_sd(i, j);
        let gap = (self.scores[i] - self.scores[j]).abs();
        if sd <= 0.0 {
            return if gap > 0.0 { 0.0 } else { 0.5 };
        }
        0.5 * erfc(gap / (sd * std::f64::consts::SQRT_2))
    }

    /// The resistances as they would be after comparing `i` and `j` once more (a
    /// Sherman-Morrison update of the inverse); scores and `sigma2` stay.
    pub fn add_pair(&mut self, i: usize, j: usize) {
        let n = self.dim;
        // u = e_i - e_j; M^-1 u = column i - column j (M is symmetric).
        let w: Vec<f64> = (0..n)
            .map(|k| self.inverse[k * n + i] - self.inverse[k * n + j])
            .collect();
        let denominator = 1.0 + w[i] - w[j];
        for a in 0..n {
            for b in 0..n {
                self.inverse[a * n + b] -= w[a] * w[b] / denominator;
            }
        }
        self.pairs += 1;
    }
}

/// Debiased pair differences from ordered outcomes: one `(i, j, d_ij)` with `i < j` per
/// unordered pair seen in both orders (pairs seen in one order only are left out; a
/// pair seen more than once per order uses the mean of its logits).
pub fn pair_differences(outcomes: &[Outcome]) -> Vec<(usize, usize, f64)> {
    let mut sums: HashMap<(usize, usize), [(f64, usize); 2]> = HashMap::new();
    for o in outcomes {
        let p = o.p.clamp(CLIP, 1.0 - CLIP);
        let logit = (p / (1.0 - p)).ln();
        let (key, slot) = if o.first < o.second {
            ((o.first, o.second), 0)
        } else {
            ((o.second, o.first), 1)
        };
        let entry = sums.entry(key).or_insert([(0.0, 0); 2]);
        entry[slot].0 += logit;
        entry[slot].1 += 1;
    }
    let mut pairs: Vec<(usize, usize, f64)> = sums
        .into_iter()
        .filter(|(_, s)| s[0].1 > 0 && s[1].1 > 0)
        .map(|((i, j), s)| {
            let forward = s[0].0 / s[0].1 as f64;
            let backward = s[1].0 / s[1].1 as f64;
            (i, j, (forward - backward) / 2.0)
        })
        .collect();
    pairs.sort_by_key(|&(i, j, _)| (i, j));
    pairs
}

/// Fit `d_ij ~ s_i - s_j` over `n` candidates (see the module header).
pub fn fit_pair_differences(n: usize, pairs: &[(usize, usize, f64)]) -> Result<PairFit> {
    if n == 0 {
        bail!("no candidates to fit");
    }
    let mut matrix = vec![1.0 / n as f64; n * n];
    for i in 0..n {
        matrix[i * n + i] += GROUND;
    }
    let mut rhs = vec![0.0; n];
    for &(i, j, d) in pairs {
        if i >= n || j >= n || i == j {
            bail!("pair ({i}, {j}) is not a pair of distinct candidates among {n}");
        }
        if !d.is_finite() {
            bail!("pair ({i}, {j}): difference {d} is not finite");
        }
        matrix[i * n + i] += 1.0;
        matrix[j * n + j] += 1.0;
        matrix[i * n + j] -= 1.0;
        matrix[j * n + i] -= 1.0;
        rhs[i] += d;
        rhs[j] -= d;
    }
    let scores = solve_spd(&matrix, &rhs)?;
    let inverse = invert_spd(&matrix, n)?;
    let rss: f64 = pairs
        .iter()
        .map(|&(i, j, d)| (d - (scores[i] - scores[j])).powi(2))
        .sum();
    let dof = pairs.len() as f64 - (n as f64 - 1.0);
    let sigma2 = (rss + 1.0) / (dof.max(0.0) + 1.0);
    Ok(PairFit {
        n,
        dim: n,
        scores,
        sigma2,
        inverse,
        pairs: pairs.len(),
    })
}

/// The inverse of the symmetric positive-definite `dim x dim` matrix, column by column.
fn invert_spd(matrix: &[f64], dim: usize) -> Result<Vec<f64>> {
    let mut inverse = vec![0.0; dim * dim];
    let mut unit = vec![0.0; dim];
    for k in 0..dim {
        unit.iter_mut().for_each(|u| *u = 0.0);
        unit[k] = 1.0;
        let column = solve_spd(matrix, &unit)?;
        for (row, value) in column.into_iter().enumerate() {
            inverse[row * dim + k] = value;
        }
    }
    Ok(inverse)
}

/// Check the pairs of a fit over `n` candidates.
fn check_pairs(n: usize, pairs: &[(usize, usize, f64)]) -> Result<()> {
    for &(i, j, d) in pairs {
        if i >= n || j >= n || i == j {
            bail!("pair ({i}, {j}) is not a pair of distinct candidates among {n}");
        }
        if !d.is_finite() {
            bail!("pair ({i}, {j}): difference {d} is not finite");
        }
    }
    Ok(())
}

/// [`fit_pair_differences`] with one absolute score per candidate as an expert of weight
/// `lambda` (per comparison; see the module header): the joint fit of
/// [`super::hybrid`] on pair differences, with its uncertainty. `absolute` on any
/// scale; `None` gives [`fit_pair_differences`].
pub fn fit_pair_differences_with_prior(
    n: usize,
    pairs: &[(usize, usize, f64)],
    prior: Option<(&[f64], f64)>,
) -> Result<PairFit> {
    let Some((absolute, lambda)) = prior else {
        return fit_pair_differences(n, pairs);
    };
    super::hybrid::check_prior_weight(lambda)?;
    if n == 0 {
        bail!("no candidates to fit");
    }
    if absolute.len() != n {
        bail!("{} absolute scores for {n} candidates", absolute.len());
    }
    check_pairs(n, pairs)?;
    let z = standardise(absolute)?;
    // One pair difference is the mean of two comparisons.
    let weight = lambda / 2.0;
    let kappa = super::hybrid::SLOPE_PRIOR * weight * n as f64;
    let dim = n + 1;
    let mut matrix = vec![0.0; dim * dim];
    let mut rhs = vec![0.0; dim];
    for i in 0..n {
        matrix[i * dim + i] = weight;
        matrix[i * dim + n] = -weight * z[i];
        matrix[n * dim + i] = -weight * z[i];
    }
    matrix[n * dim + n] = weight * z.iter().map(|v| v * v).sum::<f64>() + kappa;
    rhs[n] = kappa;
    for &(i, j, d) in pairs {
        matrix[i * dim + i] += 1.0;
        matrix[j * dim + j] += 1.0;
        matrix[i * dim + j] -= 1.0;
        matrix[j * dim + i] -= 1.0;
        rhs[i] += d;
        rhs[j] -= d;
    }
    let mut solution = solve_spd(&matrix, &rhs)?;
    let slope = solution.pop().unwrap_or(1.0);
    let mean = solution.iter().sum::<f64>() / n as f64;
    let scores: Vec<f64> = solution.iter().map(|s| s - mean).collect();
    let inverse = invert_spd(&matrix, dim)?;
    let rss: f64 = pairs
        .iter()
        .map(|&(i, j, d)| (d - (scores[i] - scores[j])).powi(2))
        .sum::<f64>()
        + weight
            * scores
                .iter()
                .zip(&z)
                .map(|(s, z)| (s - slope * z).powi(2))
                .sum::<f64>();
    let dof = pairs.len() as f64 - 1.0;
    let sigma2 = (rss + 1.0) / (dof.max(0.0) + 1.0);
    Ok(PairFit {
        n,
        dim,
        scores,
        sigma2,
        inverse,
        pairs: pairs.len(),
    })
}

/// The complementary error function (W. J. Cody's rational approximation as in
/// Numerical Recipes' `erfcc`, relative error below 1.2e-7: enough to order pairs).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let value = t * poly.exp();
    if x >= 0.0 {
        value
    } else {
        2.0 - value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logistic(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    #[test]
    fn erfc_matches_known_values() {
        // Values from the definition (scipy.special.erfc).
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (2.0, 0.004_677_734_981_047_266),
            (-1.0, 1.842_700_792_949_715),
        ] {
            assert!((erfc(x) - want).abs() < 2e-7, "erfc({x}) = {}", erfc(x));
        }
    }

    #[test]
    fn a_constant_bias_cancels_in_the_differences() {
        let truth = [1.0, 0.2, -0.5, -0.7];
        let bias = 0.9;
        let mut outcomes = Vec::new();
        for i in 0..4 {
            for j in 0..4 {
                if i != j {
                    outcomes.push(Outcome::new(i, j, logistic(truth[i] - truth[j] + bias)));
                }
            }
        }
        let pairs = pair_differences(&outcomes);
        assert_eq!(pairs.len(), 6);
        let fit = fit_pair_differences(4, &pairs).unwrap();
        let mean = truth.iter().sum::<f64>() / 4.0;
        for (got, want) in fit.scores.iter().zip(truth) {
            assert!((got - (want - mean)).abs() < 1e-5, "{:?}", fit.scores);
        }
        // Exact data: only the prior pseudo-observation is left in sigma^2.
        assert!((fit.sigma2 - 1.0 / 4.0).abs() < 1e-6, "{}", fit.sigma2);
    }

    #[test]
    fn resistances_of_a_path_and_a_cycle() {
        // Path 0-1-2: resistances add in series; cycle 0-1-2-0: 1 parallel with 2.
        let path = fit_pair_differences(3, &[(0, 1, 0.0), (1, 2, 0.0)]).unwrap();
        assert!((path.resistance(0, 1) - 1.0).abs() < 1e-4);
        assert!((path.resistance(0, 2) - 2.0).abs() < 1e-4);
        let cycle = fit_pair_differences(3, &[(0, 1, 0.0), (1, 2, 0.0), (0, 2, 0.0)]).unwrap();
        assert!((cycle.resistance(0, 2) - 2.0 / 3.0).abs() < 1e-4);
        // The rank-one update gives the same resistances as a fresh fit.
        let mut updated = path.clone();
        updated.add_pair(0, 2);
        for (i, j) in [(0, 1), (0, 2), (1, 2)] {
            assert!(
                (updated.resistance(i, j) - cycle.resistance(i, j)).abs() < 1e-6,
                "({i}, {j})"
            );
        }
    }

    #[test]
    fn unconnected_candidates_are_maximally_uncertain() {
        let fit = fit_pair_differences(4, &[(0, 1, 3.0), (2, 3, -1.0)]).unwrap();
        assert!((fit.flip_probability(0, 2) - 0.5).abs() < 1e-3);
        assert!(fit.flip_probability(0, 1) < 0.2);
        assert!(fit.resistance(1, 3) > 1e5);
    }

    #[test]
    fn absolute_scores_place_every_candidate_and_updates_match_a_fresh_fit() {
        let absolute = [3.0, 9.0, 5.0, 1.0];
        let alone = fit_pair_differences_with_prior(4, &[], Some((&absolute, 1.0))).unwrap();
        let z = standardise(&absolute).unwrap();
        for (s, z) in alone.scores.iter().zip(&z) {
            assert!((s - z).abs() < 1e-6, "{:?}", alone.scores);
        }
        // Nothing compared: the scale is unknown, so no order is sure, the closest
        // absolute scores (0 and 2, then 0 and 3) least of all.
        assert!(alone.flip_probability(0, 2) > alone.flip_probability(1, 3));
        assert!(alone.flip_probability(0, 2) < 0.5);
        // The joint fit equals the hybrid fit on both orders of each pair (a pair
        // difference is two comparisons).
        let pairs = [(0, 1, -1.5), (1, 2, 0.8), (2, 3, 0.4)];
        let fit = fit_pair_differences_with_prior(4, &pairs, Some((&absolute, 0.7))).unwrap();
        let outcomes: Vec<Outcome> = pairs
            .iter()
            .flat_map(|&(i, j, d)| {
                [
                    Outcome::new(i, j, logistic(d)),
                    Outcome::new(j, i, logistic(-d)),
                ]
            })
            .collect();
        let hybrid = super::super::hybrid_scores(4, &outcomes, &absolute, 0.7).unwrap();
        for (a, b) in fit.scores.iter().zip(&hybrid) {
            assert!((a - b).abs() < 1e-9, "{:?} vs {hybrid:?}", fit.scores);
        }
        let mut updated = fit.clone();
        updated.add_pair(0, 3);
        let mut more = pairs.to_vec();
        more.push((0, 3, 0.0));
        let fresh = fit_pair_differences_with_prior(4, &more, Some((&absolute, 0.7))).unwrap();
        for (i, j) in [(0, 1), (0, 3), (1, 2), (2, 3)] {
            let (a, b) = (updated.resistance(i, j), fresh.resistance(i, j));
            assert!((a - b).abs() < 1e-6 * b.max(1.0), "({i}, {j}): {a} vs {b}");
        }
        assert!(fit_pair_differences_with_prior(4, &pairs, Some((&absolute[..3], 1.0))).is_err());
        assert!(fit_pair_differences_with_prior(4, &pairs, Some((&absolute, -1.0))).is_err());
    }

    #[test]
    fn one_sided_pairs_are_left_out_and_bad_pairs_refused() {
        let outcomes = [Outcome::new(0, 1, 0.7), Outcome::new(1, 2, 0.6)];
        assert!(pair_differences(&outcomes).is_empty());
        assert!(fit_pair_differences(2, &[(0, 2, 0.1)]).is_err());
        assert!(fit_pair_differences(2, &[(1, 1, 0.1)]).is_err());
        assert!(fit_pair_differences(2, &[(0, 1, f64::NAN)]).is_err());
    }
}
