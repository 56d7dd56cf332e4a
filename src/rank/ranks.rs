//! Ranks from scores: 1 = best (highest score); tied scores share the average of the
//! ranks they span (scipy's `rankdata(-s, method="average")`), so ties never depend on
//! input order.

/// Fractional ranks, 1 = highest score, ties averaged. NaN scores rank last (tied).
pub fn ranks_from_scores(scores: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    let key = |i: usize| {
        if scores[i].is_nan() {
            f64::NEG_INFINITY
        } else {
            scores[i]
        }
    };
    order.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
    let mut ranks = vec![0.0; scores.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && key(order[end]) == key(order[start]) {
            end += 1;
        }
        // Positions start..end hold ranks start+1..=end; their mean:
        let shared = (start + 1 + end) as f64 / 2.0;
        for &index in &order[start..end] {
            ranks[index] = shared;
        }
        start = end;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_the_average_rank() {
        // scipy.stats.rankdata([-0.5, -0.9, -0.5, -0.1, -0.9]) = [3.5, 1.5, 3.5, 5, 1.5]
        assert_eq!(
            ranks_from_scores(&[0.5, 0.9, 0.5, 0.1, 0.9]),
            [3.5, 1.5, 3.5, 5.0, 1.5]
        );
        assert_eq!(ranks_from_scores(&[1.0, f64::NAN, 2.0]), [2.0, 3.0, 1.0]);
        assert!(ranks_from_scores(&[]).is_empty());
    }
}
