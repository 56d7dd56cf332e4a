//! Input checks shared by every statistic, so that bad input fails the same way
//! everywhere: paired series of equal length, enough points, finite values (the error
//! names the series and the index of the first offending value).

use std::cmp::Ordering;

use anyhow::{bail, Result};

/// Fails on the first value that is NaN or infinite, naming `series[index]`.
pub fn check_finite(series: &str, values: &[f64]) -> Result<()> {
    if let Some((index, value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        bail!("{series}[{index}] is {value}; statistics need finite numbers");
    }
    Ok(())
}

/// Checks a paired sample: equal lengths, at least `min_len` pairs, all values finite.
pub fn check_paired(
    (x_name, x): (&str, &[f64]),
    (y_name, y): (&str, &[f64]),
    min_len: usize,
) -> Result<()> {
    if x.len() != y.len() {
        bail!(
            "length mismatch: {x_name} has {} values, {y_name} has {}",
            x.len(),
            y.len()
        );
    }
    if x.len() < min_len {
        bail!("need at least {min_len} pairs of values, got {}", x.len());
    }
    check_finite(x_name, x)?;
    check_finite(y_name, y)
}

/// True when every value equals the first (an empty or one-value series is constant).
pub fn is_constant(values: &[f64]) -> bool {
    values.windows(2).all(|pair| pair[0] == pair[1])
}

/// Numeric order for values already checked finite; -0.0 and 0.0 compare equal, as
/// they do under `==`, so tie runs found after sorting are the `==` ties.
pub(crate) fn cmp_finite(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_is_rejected_with_its_index() {
        let error = check_finite("human", &[1.0, 2.0, f64::NAN]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "human[2] is NaN; statistics need finite numbers"
        );
    }

    #[test]
    fn infinity_is_rejected() {
        let error = check_finite("x", &[f64::NEG_INFINITY]).unwrap_err();
        assert!(error.to_string().contains("x[0] is -inf"), "{error}");
    }

    #[test]
    fn paired_checks_lengths_before_values() {
        let error = check_paired(("x", &[1.0, f64::NAN]), ("y", &[1.0]), 2).unwrap_err();
        assert_eq!(
            error.to_string(),
            "length mismatch: x has 2 values, y has 1"
        );
    }

    #[test]
    fn paired_needs_enough_values() {
        let error = check_paired(("x", &[1.0]), ("y", &[1.0]), 2).unwrap_err();
        assert_eq!(error.to_string(), "need at least 2 pairs of values, got 1");
    }

    #[test]
    fn negative_zero_equals_zero() {
        assert!(is_constant(&[0.0, -0.0, 0.0]));
        assert_eq!(cmp_finite(-0.0, 0.0), Ordering::Equal);
        assert!(!is_constant(&[1.0, 1.0, 1.5]));
    }
}
