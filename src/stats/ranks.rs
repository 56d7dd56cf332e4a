//! Ranks with ties averaged (the "average" method), the basis of Spearman's rho and of
//! the Wilcoxon signed-rank statistic.

use anyhow::Result;

use super::input::{check_finite, cmp_finite};

/// Ranks 1..=n of `values`; tied values all get the mean of the ranks they span
/// (as `scipy.stats.rankdata(values, method="average")`). Non-finite values are an
/// error naming their index.
pub fn average_ranks(values: &[f64]) -> Result<Vec<f64>> {
    check_finite("values", values)?;
    Ok(ranks_and_ties(values).0)
}

/// Average ranks and the sizes of the tie groups (runs of equal values, including
/// runs of one), for values already checked finite.
pub(crate) fn ranks_and_ties(values: &[f64]) -> (Vec<f64>, Vec<usize>) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| cmp_finite(values[a], values[b]));

    let mut ranks = vec![0.0; values.len()];
    let mut tie_sizes = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        // Positions start..end hold ranks start+1 ..= end; their mean:
        let shared_rank = (start + 1 + end) as f64 / 2.0;
        for &index in &order[start..end] {
            ranks[index] = shared_rank;
        }
        tie_sizes.push(end - start);
        start = end;
    }
    (ranks, tie_sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_get_average_ranks() {
        // scipy 1.17.1: stats.rankdata([3,1,4,1,5,9,2,6,5,3,5])
        let expected = [4.5, 1.5, 6.0, 1.5, 8.0, 11.0, 3.0, 10.0, 8.0, 4.5, 8.0];
        let ranks = average_ranks(&[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0])
            .expect("finite input");
        assert_eq!(ranks, expected);
    }

    #[test]
    fn tie_sizes_cover_every_value() {
        let (_, ties) = ranks_and_ties(&[2.0, 1.0, 2.0, 3.0, 2.0]);
        assert_eq!(ties, vec![1, 3, 1]);
    }

    #[test]
    fn nan_is_rejected() {
        let error = average_ranks(&[1.0, f64::NAN]).unwrap_err();
        assert!(error.to_string().contains("values[1] is NaN"), "{error}");
    }
}
