//! Grouping prompts into padded batches: sorted by length so that each batch pads
//! little, and cut so that a batch's padded size (rows x longest) stays within a token
//! budget.

/// Indices of `lengths` grouped into batches: ascending length, each batch holding as
/// many items as fit in `budget` padded tokens (an item longer than the budget gets a
/// batch of its own).
pub fn plan_batches(lengths: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    // Stable: equal lengths keep request order.
    order.sort_by_key(|&i| lengths[i]);
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for index in order {
        // Sorted ascending, so this item is the batch's longest.
        let padded = (current.len() + 1) * lengths[index];
        if !current.is_empty() && padded > budget {
            batches.push(std::mem::take(&mut current));
        }
        current.push(index);
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
        let batches = plan_batches(&lengths, 60);
        assert_eq!(batches, vec![vec![1, 3, 2], vec![0], vec![4]]);
        for batch in &batches {
            let longest = batch.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(batch.len() == 1 || batch.len() * longest <= 60);
        }
    }

    #[test]
    fn an_item_longer_than_the_budget_is_alone() {
        assert_eq!(plan_batches(&[5, 100, 5], 20), vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn every_item_is_planned_once() {
        let lengths: Vec<usize> = (0..37).map(|i| (i * 17) % 23 + 1).collect();
        let mut seen: Vec<usize> = plan_batches(&lengths, 40).concat();
        seen.sort();
        assert_eq!(seen, (0..37).collect::<Vec<_>>());
        assert!(plan_batches(&[], 10).is_empty());
    }
}
