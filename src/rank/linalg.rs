//! A dense symmetric positive-definite solver (Cholesky), enough for the small normal
//! equations of Bradley-Terry and the Product-of-Experts fit (one row per candidate).

use anyhow::{bail, Result};

/// Solve `a x = b` for symmetric positive-definite `a` (row-major, `n x n`).
pub(crate) fn solve_spd(a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
    let n = b.len();
    debug_assert_eq!(a.len(), n * n);
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = a[i * n + j];
            for k in 0..j {
                sum -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    bail!("matrix is not positive definite (pivot {i}: {sum})");
                }
                l[i * n + i] = sum.sqrt();
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        let mut sum = b[i];
        for k in 0..i {
            sum -= l[i * n + k] * y[k];
        }
        y[i] = sum / l[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let mut sum = y[i];
        for k in i + 1..n {
            sum -= l[k * n + i] * x[k];
        }
        x[i] = sum / l[i * n + i];
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_known_system() {
        // a = [[4, 2, 0], [2, 5, 1], [0, 1, 3]], x = [1, -2, 3] -> b = a x.
        let a = [4.0, 2.0, 0.0, 2.0, 5.0, 1.0, 0.0, 1.0, 3.0];
        let b = [0.0, -5.0, 7.0];
        let x = solve_spd(&a, &b).unwrap();
        for (got, want) in x.iter().zip([1.0, -2.0, 3.0]) {
            assert!((got - want).abs() < 1e-12, "{x:?}");
        }
    }

    #[test]
    fn rejects_an_indefinite_matrix() {
        assert!(solve_spd(&[1.0, 2.0, 2.0, 1.0], &[1.0, 1.0]).is_err());
    }
}
