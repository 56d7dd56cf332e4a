//! The harmonic-mean p-value, DHP's way of combining the per-metric Wilcoxon
//! p-values: `p = 1 / sum_j (w_j / p_j)` with weights normalised to sum to 1
//! (equal weights without expert weighting, giving `L / sum_j 1/p_j`).

use anyhow::{bail, ensure, Result};

/// Combines `p_values` (each in [0, 1]) with optional non-negative `weights`
/// (normalised here; equal weights when `None`). A zero p-value with positive weight
/// makes the combined value 0; a zero-weight term does not count.
pub fn harmonic_mean_p(p_values: &[f64], weights: Option<&[f64]>) -> Result<f64> {
    ensure!(!p_values.is_empty(), "no p-values to combine");
    for (index, &p) in p_values.iter().enumerate() {
        if !(0.0..=1.0).contains(&p) {
            bail!("p-value {index} is {p}; p-values lie in [0, 1]");
        }
    }
    let equal = vec![1.0; p_values.len()];
    let weights = match weights {
        Some(weights) => {
            ensure!(
                weights.len() == p_values.len(),
                "length mismatch: {} p-values, {} weights",
                p_values.len(),
                weights.len()
            );
            for (index, &w) in weights.iter().enumerate() {
                if !(w.is_finite() && w >= 0.0) {
                    bail!("weight {index} is {w}; weights are finite and non-negative");
                }
            }
            weights
        }
        None => &equal,
    };
    let total_weight: f64 = weights.iter().sum();
    ensure!(total_weight > 0.0, "the weights sum to 0");

    let mut inverse = 0.0;
    for (&p, &w) in p_values.iter().zip(weights) {
        if w == 0.0 {
            continue;
        }
        if p == 0.0 {
            return Ok(0.0);
        }
        inverse += (w / total_weight) / p;
    }
    Ok(1.0 / inverse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    const P: [f64; 4] = [0.01, 0.2, 0.04, 0.5];

    #[test]
    fn unweighted_matches_scipy_hmean() {
        // scipy 1.17.1: stats.hmean([0.01, 0.2, 0.04, 0.5])
        let p = harmonic_mean_p(&P, None).unwrap();
        assert_relative_eq!(p, 0.030303030303030304, max_relative = 1e-14);
    }

    #[test]
    fn weighted_matches_scipy_hmean_and_ignores_weight_scale() {
        // scipy 1.17.1: stats.hmean([0.01, 0.2, 0.04, 0.5], weights=[3, 1, 2, 2])
        let expected = 0.022284122562674095;
        let p = harmonic_mean_p(&P, Some(&[3.0, 1.0, 2.0, 2.0])).unwrap();
        assert_relative_eq!(p, expected, max_relative = 1e-14);
        let p = harmonic_mean_p(&P, Some(&[0.375, 0.125, 0.25, 0.25])).unwrap();
        assert_relative_eq!(p, expected, max_relative = 1e-14);
    }

    #[test]
    fn zero_p_value_and_zero_weight() {
        assert_eq!(harmonic_mean_p(&[0.0, 0.3], None).unwrap(), 0.0);
        let p = harmonic_mean_p(&[0.0, 0.3], Some(&[0.0, 1.0])).unwrap();
        assert_relative_eq!(p, 0.3, max_relative = 1e-15);
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(harmonic_mean_p(&[], None).is_err());
        let error = harmonic_mean_p(&[0.1, 1.5], None).unwrap_err();
        assert!(error.to_string().contains("p-value 1 is 1.5"), "{error}");
        let error = harmonic_mean_p(&[0.1, f64::NAN], None).unwrap_err();
        assert!(error.to_string().contains("p-value 1 is NaN"), "{error}");
        assert!(harmonic_mean_p(&P, Some(&[1.0, 1.0])).is_err());
        assert!(harmonic_mean_p(&P, Some(&[1.0, -1.0, 1.0, 1.0])).is_err());
        assert!(harmonic_mean_p(&P, Some(&[0.0; 4])).is_err());
    }
}
