//! One-sided Wilcoxon signed-rank test, "original scores are greater than perturbed
//! scores", for DHP discernment. It reproduces
//! `scipy.stats.wilcoxon(original, perturbed, alternative="greater")` with its defaults
//! (zero_method="wilcox": zero differences dropped; no continuity correction;
//! method="auto"), scipy 1.17:
//!
//! - more than 50 pairs: normal approximation with the tie correction;
//! - otherwise, no ties and no zero differences: the exact null distribution;
//! - otherwise, at most 13 pairs: the exact permutation distribution of the statistic
//!   over all sign flips (what scipy's permutation test enumerates at that size);
//! - otherwise: the normal approximation.

use anyhow::Result;
use serde::Serialize;

use super::input::check_paired;
use super::ranks::ranks_and_ties;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WilcoxonMethod {
    /// Exact null distribution (distinct ranks 1..n).
    Exact,
    /// Exact distribution over all sign flips of the observed (tied) ranks.
    ExactPermutation,
    /// Normal approximation with tie correction.
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WilcoxonResult {
    /// R+, the sum of the ranks of |d| over positive differences d = original - perturbed.
    pub statistic: f64,
    /// P(R+ >= observed) under the null hypothesis. 1 when every difference is zero
    /// (no evidence either way; scipy gives 1 up to 13 pairs and NaN beyond).
    pub p_value: f64,
    pub method: WilcoxonMethod,
    /// Pairs with a non-zero difference (those the test uses).
    pub n_nonzero: usize,
    /// The standardised statistic, for [`WilcoxonMethod::Normal`].
    pub z: Option<f64>,
}

/// Largest sample scipy's "auto" method treats exactly.
const EXACT_MAX_PAIRS: usize = 50;
/// Largest sample with ties or zeros that scipy's "auto" method enumerates exactly.
const PERMUTATION_MAX_PAIRS: usize = 13;

/// Tests whether `original` tends to score higher than `perturbed` (paired, at least
/// one pair, finite values).
pub fn wilcoxon_greater(original: &[f64], perturbed: &[f64]) -> Result<WilcoxonResult> {
    check_paired(("original", original), ("perturbed", perturbed), 1)?;
    let n_pairs = original.len();
    let differences: Vec<f64> = original
        .iter()
        .zip(perturbed)
        .map(|(a, b)| a - b)
        .filter(|d| *d != 0.0)
        .collect();
    let n_nonzero = differences.len();
    let has_zeros = n_nonzero < n_pairs;

    let magnitudes: Vec<f64> = differences.iter().map(|d| d.abs()).collect();
    let (ranks, tie_sizes) = ranks_and_ties(&magnitudes);
    let has_ties = tie_sizes.iter().any(|&size| size > 1);
    let statistic: f64 = differences
        .iter()
        .zip(&ranks)
        .filter(|(d, _)| **d > 0.0)
        .map(|(_, rank)| rank)
        .sum();

    let method = if n_pairs > EXACT_MAX_PAIRS {
        WilcoxonMethod::Normal
    } else if !has_ties && !has_zeros {
        WilcoxonMethod::Exact
    } else if n_pairs <= PERMUTATION_MAX_PAIRS {
        WilcoxonMethod::ExactPermutation
    } else {
        WilcoxonMethod::Normal
    };

    let mut result = WilcoxonResult {
        statistic,
        p_value: 1.0,
        method,
        n_nonzero,
        z: None,
    };
    if n_nonzero == 0 {
        return Ok(result);
    }
    match method {
        WilcoxonMethod::Exact | WilcoxonMethod::ExactPermutation => {
            result.p_value = sign_flip_upper_tail(&ranks, statistic);
        }
        WilcoxonMethod::Normal => {
            let n = n_nonzero as f64;
            let mean = n * (n + 1.0) / 4.0;
            let tie_term: f64 = tie_sizes
                .iter()
                .map(|&t| {
                    let t = t as f64;
                    t * t * t - t
                })
                .sum();
            let sd = ((n * (n + 1.0) * (2.0 * n + 1.0) - tie_term / 2.0) / 24.0).sqrt();
            let z = (statistic - mean) / sd;
            result.z = Some(z);
            result.p_value = standard_normal_upper_tail(z);
        }
    }
    Ok(result)
}

/// P(sum of a random subset of `ranks` >= `observed`), every subset (sign pattern)
/// equally likely. Ranks are multiples of 1/2, so doubled ranks are integers and the
/// distribution is counted exactly by dynamic programming over subset sums.
fn sign_flip_upper_tail(ranks: &[f64], observed: f64) -> f64 {
    let doubled: Vec<usize> = ranks.iter().map(|r| (2.0 * r).round() as usize).collect();
    let total: usize = doubled.iter().sum();
    // ways[s]: number of subsets whose doubled ranks sum to s (as f64: 2^n can
    // exceed u64 for long inputs, and the ratio is all we need).
    let mut ways = vec![0.0f64; total + 1];
    ways[0] = 1.0;
    let mut reach = 0;
    for &rank in &doubled {
        for sum in (0..=reach).rev() {
            if ways[sum] != 0.0 {
                ways[sum + rank] += ways[sum];
            }
        }
        reach += rank;
    }
    let threshold = (2.0 * observed).round() as usize;
    let upper: f64 = ways[threshold.min(total + 1)..].iter().sum();
    let all: f64 = ways.iter().sum();
    upper / all
}

/// P(Z >= z) for a standard normal Z, accurate in the far tail.
fn standard_normal_upper_tail(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    /// Relative agreement with scipy (summation order differs).
    const TOLERANCE: f64 = 1e-12;

    // Expected values: scipy 1.17.1,
    // stats.wilcoxon(x, y, alternative="greater") -> (statistic, pvalue),
    // printed by tests/reference/stats_reference.py, which also prints the p-values of
    // method="exact" and method="asymptotic" to show which one "auto" took.

    #[test]
    fn exact_distribution_without_ties_or_zeros() {
        let x = [17.0, 10.0, 20.0, 15.0, 5.0, 17.0, 23.0, 9.0, 15.0, 19.0];
        let y = [10.0, 12.0, 9.0, 11.0, 10.0, 8.0, 10.0, 12.0, 9.0, 11.0];
        let result = wilcoxon_greater(&x, &y).unwrap();
        assert_eq!(result.method, WilcoxonMethod::Exact);
        assert_eq!(result.statistic, 48.0);
        assert_relative_eq!(result.p_value, 0.0185546875, max_relative = TOLERANCE);
    }

    #[test]
    fn small_sample_with_ties_and_a_zero_enumerates_sign_flips() {
        let x = [3.0, 4.0, 2.0, 5.0, 3.0, 4.0, 1.0, 2.0];
        let y = [2.0, 3.0, 2.0, 3.0, 4.0, 2.0, 2.0, 1.0];
        let result = wilcoxon_greater(&x, &y).unwrap();
        assert_eq!(result.method, WilcoxonMethod::ExactPermutation);
        assert_eq!((result.statistic, result.n_nonzero), (22.0, 7));
        // scipy: 0.125 (method="exact" would give 0.109375, "asymptotic" 0.0799)
        assert_relative_eq!(result.p_value, 0.125, max_relative = TOLERANCE);
    }

    #[test]
    fn normal_approximation_with_ties_and_zeros() {
        let x = [
            5.0, 4.0, 4.0, 5.0, 3.0, 4.0, 5.0, 2.0, 1.0, 2.0, 2.0, 5.0, 5.0, 1.0, 3.0, 5.0, 1.0,
            4.0, 1.0, 3.0, 5.0, 2.0, 2.0, 2.0, 4.0, 2.0, 5.0, 3.0, 3.0, 3.0,
        ];
        let y = [
            4.0, 3.0, 3.0, 3.0, 1.0, 2.0, 4.0, 1.0, 1.0, 1.0, 2.0, 5.0, 3.0, 2.0, 1.0, 4.0, 2.0,
            5.0, 1.0, 4.0, 5.0, 1.0, 1.0, 2.0, 2.0, 1.0, 3.0, 2.0, 3.0, 2.0,
        ];
        let result = wilcoxon_greater(&x, &y).unwrap();
        assert_eq!(result.method, WilcoxonMethod::Normal);
        assert_eq!(result.statistic, 242.0);
        assert_relative_eq!(
            result.p_value,
            0.0004714916614230323,
            max_relative = TOLERANCE
        );
    }

    #[test]
    fn normal_approximation_above_fifty_pairs() {
        let x = [
            -1.330136, -0.277753, -0.778519, -0.608837, 1.260899, -0.607535, 0.167478, 1.08439,
            -0.3836, 0.088298, 0.310464, 0.263782, -1.025056, 0.27614, 1.558823, -1.347145,
            1.059383, 0.319354, -0.44147, 2.200417, 0.96226, -0.999289, 0.274516, 0.77669,
            0.011218, 0.88291, 0.133483, 0.867248, 1.638523, -0.475662, 0.403139, -0.263308,
            0.327268, -0.987195, -0.379302, 0.003804, 1.098764, 1.345222, -1.123528, -0.594642,
            0.846903, -1.79242, -0.26317, 0.102713, 1.457015, 0.889404, -0.127213, -0.168576,
            -0.050195, 1.723529, -0.228025, -0.10368, 0.552589, 0.07923, 0.002716, -0.914067,
            0.188479, -0.243581, 1.366128, 0.853089,
        ];
        let y = [
            -0.024144, 0.668381, -0.33987, 1.052126, -0.0054, 0.583382, -1.290893, 0.34668,
            -1.688204, -2.035329, -0.304477, -0.899928, 0.164053, 2.244757, -0.831723, -0.623944,
            0.205404, 0.493013, -0.176406, -0.20593, 0.702463, 0.519908, -1.033676, -0.079181,
            0.035287, -1.054485, 0.259839, -0.857956, 0.972067, 0.192746, 0.089306, -0.591028,
            -0.11861, -1.997746, -1.131407, 0.36284, -2.128567, 0.846609, -1.746096, 0.756739,
            -0.845497, 0.778991, 0.130951, -1.536835, 1.249149, 1.441707, -0.065805, -0.273916,
            -0.159867, -0.975152, 1.098587, -0.542892, -0.05119, -0.793296, -0.626073, -1.277725,
            1.257069, -0.154088, 0.965922, 0.013325,
        ];
        let result = wilcoxon_greater(&x, &y).unwrap();
        assert_eq!(result.method, WilcoxonMethod::Normal);
        assert_eq!(result.statistic, 1185.0);
        assert_relative_eq!(
            result.p_value,
            0.02342615740970495,
            max_relative = TOLERANCE
        );
    }

    #[test]
    fn all_differences_zero_gives_p_one() {
        let result = wilcoxon_greater(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((result.p_value, result.n_nonzero), (1.0, 0));
    }

    #[test]
    fn errors_name_the_series() {
        let error = wilcoxon_greater(&[1.0, 2.0], &[1.0]).unwrap_err();
        assert!(error
            .to_string()
            .contains("original has 2 values, perturbed has 1"));
        let error = wilcoxon_greater(&[1.0, 2.0], &[1.0, f64::NAN]).unwrap_err();
        assert!(error.to_string().contains("perturbed[1] is NaN"));
        assert!(wilcoxon_greater(&[], &[]).is_err());
    }
}
