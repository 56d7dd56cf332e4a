//! Random typographical errors, the operations of the Python `typo` package the DHP
//! paper used (its `StrErrer`): swap two adjacent characters, drop a character, add a
//! character typed with a neighbouring key, replace a letter by a neighbouring key on a
//! QWERTY keyboard, drop a space, add a space inside a word, repeat a character, replace
//! a character by its Unicode neighbour. Our own implementation: each call applies one
//! operation chosen at random among those that apply to the text.

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

/// One typo operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypoOp {
    SwapAdjacent,
    MissingChar,
    ExtraChar,
    NearbyKey,
    SkippedSpace,
    RandomSpace,
    RepeatedChar,
    UnicodeNeighbour,
}

pub const ALL_OPS: [TypoOp; 8] = [
    TypoOp::SwapAdjacent,
    TypoOp::MissingChar,
    TypoOp::ExtraChar,
    TypoOp::NearbyKey,
    TypoOp::SkippedSpace,
    TypoOp::RandomSpace,
    TypoOp::RepeatedChar,
    TypoOp::UnicodeNeighbour,
];

const QWERTY_ROWS: [&str; 4] = ["1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm"];

/// Keys next to `c` on a QWERTY keyboard (left and right, and the touching keys of the
/// staggered rows above and below), in `c`'s case; empty for characters off the letter/digit block.
pub fn nearby_keys(c: char) -> Vec<char> {
    let lower = c.to_ascii_lowercase();
    let Some((row, col)) = QWERTY_ROWS
        .iter()
        .enumerate()
        .find_map(|(r, keys)| keys.find(lower).map(|col| (r, col)))
    else {
        return Vec::new();
    };
    // Rows are staggered: the row above sits half a key to the left, so its neighbours
    // are the same column and the next; the row below, the previous column and the same.
    let mut places: Vec<(usize, i64)> = vec![(row, col as i64 - 1), (row, col as i64 + 1)];
    if row > 0 {
        places.extend([(row - 1, col as i64), (row - 1, col as i64 + 1)]);
    }
    if row + 1 < QWERTY_ROWS.len() {
        places.extend([(row + 1, col as i64 - 1), (row + 1, col as i64)]);
    }
    let mut out = Vec::new();
    for (r, cc) in places {
        let keys: Vec<char> = QWERTY_ROWS[r].chars().collect();
        if cc < 0 || cc as usize >= keys.len() {
            continue;
        }
        let key = keys[cc as usize];
        out.push(if c.is_ascii_uppercase() {
            key.to_ascii_uppercase()
        } else {
            key
        });
    }
    out
}

/// Positions where `op` can act on `chars`.
fn sites(op: TypoOp, chars: &[char]) -> Vec<usize> {
    let n = chars.len();
    let positions = 0..n;
    match op {
        TypoOp::SwapAdjacent => (0..n.saturating_sub(1))
            .filter(|&i| {
                chars[i] != chars[i + 1]
                    && !chars[i].is_whitespace()
                    && !chars[i + 1].is_whitespace()
            })
            .collect(),
        TypoOp::MissingChar | TypoOp::RepeatedChar => {
            positions.filter(|&i| !chars[i].is_whitespace()).collect()
        }
        TypoOp::ExtraChar | TypoOp::NearbyKey => positions
            .filter(|&i| !nearby_keys(chars[i]).is_empty())
            .collect(),
        TypoOp::SkippedSpace => positions.filter(|&i| chars[i] == ' ').collect(),
        // between two letters of a word
        TypoOp::RandomSpace => (1..n)
            .filter(|&i| chars[i - 1].is_alphanumeric() && chars[i].is_alphanumeric())
            .collect(),
        TypoOp::UnicodeNeighbour => positions
            .filter(|&i| chars[i].is_alphanumeric() && unicode_neighbour(chars[i]).is_some())
            .collect(),
    }
}

/// The next code point after `c`, or the previous one, that is a letter or digit.
fn unicode_neighbour(c: char) -> Option<char> {
    char::from_u32(c as u32 + 1)
        .filter(|n| n.is_alphanumeric())
        .or_else(|| {
            (c as u32)
                .checked_sub(1)
                .and_then(char::from_u32)
                .filter(|n| n.is_alphanumeric())
        })
}

/// Apply `op` at site `at` (a position from [`sites`]).
fn apply(op: TypoOp, chars: &mut Vec<char>, at: usize, rng: &mut StdRng) {
    match op {
        TypoOp::SwapAdjacent => chars.swap(at, at + 1),
        TypoOp::MissingChar | TypoOp::SkippedSpace => {
            chars.remove(at);
        }
        TypoOp::ExtraChar => {
            let keys = nearby_keys(chars[at]);
            let key = keys[rng.gen_range(0..keys.len())];
            let before = rng.gen_bool(0.5);
            chars.insert(if before { at } else { at + 1 }, key);
        }
        TypoOp::NearbyKey => {
            let keys = nearby_keys(chars[at]);
            chars[at] = keys[rng.gen_range(0..keys.len())];
        }
        TypoOp::RandomSpace => chars.insert(at, ' '),
        TypoOp::RepeatedChar => chars.insert(at, chars[at]),
        TypoOp::UnicodeNeighbour => {
            if let Some(n) = unicode_neighbour(chars[at]) {
                chars[at] = n;
            }
        }
    }
}

/// Add one typo to `text`: an operation chosen at random among those that apply.
pub fn add_typo(text: &str, rng: &mut StdRng) -> Result<(String, TypoOp)> {
    let mut chars: Vec<char> = text.chars().collect();
    let applicable: Vec<(TypoOp, Vec<usize>)> = ALL_OPS
        .iter()
        .map(|&op| (op, sites(op, &chars)))
        .filter(|(_, sites)| !sites.is_empty())
        .collect();
    let Some((op, places)) = applicable.choose(rng) else {
        bail!("no typo applies to the text");
    };
    let at = places[rng.gen_range(0..places.len())];
    apply(*op, &mut chars, at, rng);
    Ok((chars.into_iter().collect(), *op))
}

/// Add `k` typos one after another; returns the text and the operations applied.
pub fn add_typos(text: &str, k: usize, rng: &mut StdRng) -> Result<(String, Vec<TypoOp>)> {
    if text.trim().is_empty() {
        bail!("empty text");
    }
    let mut current = text.to_string();
    let mut ops = Vec::with_capacity(k);
    for _ in 0..k {
        let (next, op) = add_typo(&current, rng)?;
        current = next;
        ops.push(op);
    }
    Ok((current, ops))
}

/// Apply one given operation (for tests and for users who want a single kind).
pub fn add_typo_of(op: TypoOp, text: &str, rng: &mut StdRng) -> Result<String> {
    let mut chars: Vec<char> = text.chars().collect();
    let places = sites(op, &chars);
    if places.is_empty() {
        bail!("typo {op:?} does not apply to the text");
    }
    let at = places[rng.gen_range(0..places.len())];
    apply(op, &mut chars, at, rng);
    Ok(chars.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const TEXT: &str = "The quick brown fox jumps over the lazy dog near Paris.";

    fn rng(seed: u64) -> StdRng {
        StdRng::seed_from_u64(seed)
    }

    #[test]
    fn nearby_keys_follow_the_keyboard_and_keep_case() {
        let mut keys = nearby_keys('s');
        keys.sort();
        assert_eq!(keys, vec!['a', 'd', 'e', 'w', 'x', 'z']);
        let mut keys = nearby_keys('q');
        keys.sort();
        assert_eq!(keys, vec!['1', '2', 'a', 'w']);
        assert!(nearby_keys('G').contains(&'H'));
        assert!(nearby_keys('.').is_empty());
    }

    #[test]
    fn each_operation_changes_the_text_as_it_says() {
        let len = TEXT.chars().count();
        let count = |s: &str| s.chars().count();
        for seed in 0..20 {
            let mut r = rng(seed);
            let swapped = add_typo_of(TypoOp::SwapAdjacent, TEXT, &mut r).unwrap();
            assert_eq!(count(&swapped), len);
            assert_ne!(swapped, TEXT);
            let mut a: Vec<char> = swapped.chars().collect();
            let mut b: Vec<char> = TEXT.chars().collect();
            a.sort();
            b.sort();
            assert_eq!(a, b);
            assert_eq!(
                count(&add_typo_of(TypoOp::MissingChar, TEXT, &mut r).unwrap()),
                len - 1
            );
            assert_eq!(
                count(&add_typo_of(TypoOp::ExtraChar, TEXT, &mut r).unwrap()),
                len + 1
            );
            assert_eq!(
                count(&add_typo_of(TypoOp::RepeatedChar, TEXT, &mut r).unwrap()),
                len + 1
            );
            let spaces = |s: &str| s.matches(' ').count();
            let skipped = add_typo_of(TypoOp::SkippedSpace, TEXT, &mut r).unwrap();
            assert_eq!(spaces(&skipped), spaces(TEXT) - 1);
            let spaced = add_typo_of(TypoOp::RandomSpace, TEXT, &mut r).unwrap();
            assert_eq!(spaces(&spaced), spaces(TEXT) + 1);
            for op in [TypoOp::NearbyKey, TypoOp::UnicodeNeighbour] {
                let changed = add_typo_of(op, TEXT, &mut r).unwrap();
                let differing = changed
                    .chars()
                    .zip(TEXT.chars())
                    .filter(|(x, y)| x != y)
                    .count();
                assert_eq!((count(&changed), differing), (len, 1), "{op:?}");
            }
        }
    }

    #[test]
    fn k_typos_apply_k_operations_deterministically() {
        let (a, ops) = add_typos(TEXT, 10, &mut rng(7)).unwrap();
        let (b, _) = add_typos(TEXT, 10, &mut rng(7)).unwrap();
        assert_eq!(ops.len(), 10);
        assert_eq!(a, b);
        assert_ne!(a, TEXT);
        // over many seeds every operation is used
        let mut seen = std::collections::HashSet::new();
        for seed in 0..50 {
            seen.extend(add_typos(TEXT, 5, &mut rng(seed)).unwrap().1);
        }
        assert_eq!(seen.len(), ALL_OPS.len());
    }

    #[test]
    fn empty_text_is_an_error() {
        assert!(add_typos("  ", 3, &mut rng(1)).is_err());
        assert!(add_typo_of(TypoOp::SkippedSpace, "word", &mut rng(1)).is_err());
    }
}
