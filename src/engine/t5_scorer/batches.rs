//! Grouping prompts into padded batches: sorted by length so that each batch pads
//! little, and cut so that a batch's padded size (rows x longest) stays within a token
//! budget and its padding within a fraction of that size.
//!
//! On a CPU a single long prompt already makes the matrix products efficient, so a
//! batch saves little there and padding costs in full: the padding cap keeps batching
//! from ever doing much more work than prompts one at a time.

/// Indices of `lengths` grouped into batches, in ascending length. A batch grows while
/// its padded size (rows x longest) stays within `budget` and its padding within
/// `max_padding` (a fraction) of the padded size; an item longer than the budget gets a
/// batch of its own.
pub fn plan_batches(lengths: &[usize], budget: usize, max_padding: f64) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    // Stable: equal lengths keep request order.
    order.sort_by_key(|&i| lengths[i]);
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut real = 0usize;
    for index in order {
        // Sorted ascending, so this item is the batch's longest.
        let longest = lengths[index];
        let padded = (current.len() + 1) * longest;
        let padding = padded - (real + longest);
        let too_big = padded > budget;
        let too_padded = padding as f64 > max_padding * padded as f64;
        if !current.is_empty() && (too_big || too_padded) {
            batches.push(std::mem::take(&mut current));
            real = 0;
        }
        current.push(index);
        real += longest;
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_sorted_by_length_and_respect_the_budget() {
        let lengths = [30, 10, 20, 10, 50];
        let batches = plan_batches(&lengths, 60, 1.0);
        assert_eq!(batches, vec![vec![1, 3, 2], vec![0], vec![4]]);
        for batch in &batches {
            let longest = batch.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(batch.len() == 1 || batch.len() * longest <= 60);
        }
    }

    #[test]
    fn padding_is_capped_as_a_fraction_of_the_batch() {
        // 10, 10, 11: padding 2 of 33 (6%) is allowed at 10%; adding 20 would pad 29 of 80.
        let lengths = [10, 11, 10, 20, 21];
        assert_eq!(
            plan_batches(&lengths, 1000, 0.1),
            vec![vec![0, 2, 1], vec![3, 4]]
        );
        // With no padding allowed only equal lengths share a batch.
        assert_eq!(
            plan_batches(&lengths, 1000, 0.0),
            vec![vec![0, 2], vec![1], vec![3], vec![4]]
        );
    }

    #[test]
    fn an_item_longer_than_the_budget_is_alone() {
        assert_eq!(
            plan_batches(&[5, 100, 5], 20, 1.0),
            vec![vec![0, 2], vec![1]]
        );
    }

    #[test]
    fn every_item_is_planned_once() {
        let lengths: Vec<usize> = (0..37).map(|i| (i * 17) % 23 + 1).collect();
        let mut seen: Vec<usize> = plan_batches(&lengths, 40, 0.2).concat();
        seen.sort();
        assert_eq!(seen, (0..37).collect::<Vec<_>>());
        assert!(plan_batches(&[], 10, 0.1).is_empty());
    }
}
