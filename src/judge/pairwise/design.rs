//! Comparison designs: which ordered pairs (first, second) of N candidates are compared.
//!
//! - `full`: all N(N-1) ordered pairs;
//! - `random`: R ordered pairs drawn without replacement;
//! - `no-repeat`: R ordered pairs never containing both (i, j) and (j, i): R unordered
//!   pairs drawn without replacement, each shown in a random order (R <= N(N-1)/2);
//! - `symmetric`: R/2 unordered pairs, each shown in both orders (R even);
//! - `adaptive`: chosen in rounds from the results so far ([`super::adaptive`]), so not
//!   here: [`Design::pairs`] refuses it.
//!
//! Draws come from a `StdRng` seeded with the run's seed mixed with the context id, so a
//! context gets the same pairs whatever the other contexts are; pairs are returned sorted
//! (by first, then second). Reproducible for a given version of `rand`.

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Which pairs to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    /// All N(N-1) ordered pairs.
    Full,
    /// R ordered pairs drawn without replacement.
    Random,
    /// R ordered pairs, never both orders of a pair.
    NoRepeat,
    /// R/2 pairs, each in both orders (R even).
    Symmetric,
    /// Pairs chosen in rounds where the current fit is least sure of the order.
    Adaptive,
}

impl Design {
    /// The most comparisons this design allows for `n` candidates.
    pub fn max_comparisons(self, n: usize) -> usize {
        let ordered = n * n.saturating_sub(1);
        match self {
            Design::NoRepeat => ordered / 2,
            _ => ordered,
        }
    }

    /// Check the requested number of comparisons `r` for this design (before any
    /// context is seen): `full` takes none, the others need one, `symmetric` an even one.
    pub fn check_request(self, r: Option<usize>) -> Result<()> {
        match (self, r) {
            (Design::Full, Some(_)) => {
                bail!("--comparisons applies to the random, no-repeat and symmetric designs, not full")
            }
            (Design::Full, None) => Ok(()),
            // The budget is optional (a stop rule may end the run) and checked with the
            // round settings: `AdaptiveSettings::check`.
            (Design::Adaptive, _) => Ok(()),
            (_, None) => bail!("the {self:?} design needs a number of comparisons (--comparisons R)"),
            (_, Some(0)) => bail!("the number of comparisons must be at least 1"),
            (Design::Symmetric, Some(r)) if r % 2 == 1 => bail!(
                "the symmetric design compares each pair in both orders, so R must be even (got {r})"
            ),
            _ => Ok(()),
        }
    }

    /// The ordered pairs for `n` candidates, sorted.
    pub fn pairs(
        self,
        n: usize,
        r: Option<usize>,
        rng: &mut StdRng,
    ) -> Result<Vec<(usize, usize)>> {
        self.check_request(r)?;
        let r = r.unwrap_or_else(|| self.max_comparisons(n));
        if r > self.max_comparisons(n) {
            bail!(
                "{r} comparisons requested but the {self:?} design allows at most {} for {n} candidates",
                self.max_comparisons(n)
            );
        }
        let mut pairs = match self {
            Design::Full => ordered_pairs(n),
            Design::Random => {
                let all = ordered_pairs(n);
                sample(rng, all.len(), r)
                    .into_iter()
                    .map(|k| all[k])
                    .collect()
            }
            Design::NoRepeat => {
                let all = unordered_pairs(n);
                sample(rng, all.len(), r)
                    .into_iter()
                    .map(|k| {
                        let (i, j) = all[k];
                        if rng.gen_bool(0.5) {
                            (i, j)
                        } else {
                            (j, i)
                        }
                    })
                    .collect()
            }
            Design::Adaptive => {
                bail!("the adaptive design chooses its pairs in rounds from the results so far")
            }
            Design::Symmetric => {
                let all = unordered_pairs(n);
                sample(rng, all.len(), r / 2)
                    .into_iter()
                    .flat_map(|k| {
                        let (i, j) = all[k];
                        [(i, j), (j, i)]
                    })
                    .collect()
            }
        };
        pairs.sort_unstable();
        Ok(pairs)
    }
}

/// The generator for one context: `seed` mixed with a hash of the context id.
pub fn context_rng(seed: u64, context_id: &str) -> StdRng {
    let digest = Sha256::digest(context_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    StdRng::seed_from_u64(seed ^ u64::from_le_bytes(bytes))
}

fn ordered_pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
        .collect()
}

fn unordered_pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    const DESIGNS: [Design; 4] = [
        Design::Full,
        Design::Random,
        Design::NoRepeat,
        Design::Symmetric,
    ];

    /// Requested sizes for `n` candidates: a few inside the allowed range.
    fn sizes(design: Design, n: usize) -> Vec<Option<usize>> {
        let max = design.max_comparisons(n);
        match design {
            Design::Full => vec![None],
            Design::Symmetric => [2, max / 2 - max / 2 % 2, max]
                .into_iter()
                .filter(|&r| r >= 2)
                .map(Some)
                .collect(),
            _ => [1, max / 2, max]
                .into_iter()
                .filter(|&r| r >= 1)
                .map(Some)
                .collect(),
        }
    }

    #[test]
    fn counts_and_structure_for_two_to_sixteen_candidates() {
        for n in 2..=16 {
            for design in DESIGNS {
                for r in sizes(design, n) {
                    let mut rng = context_rng(11, "doc");
                    let pairs = design.pairs(n, r, &mut rng).unwrap();
                    let expected = r.unwrap_or(n * (n - 1));
                    assert_eq!(pairs.len(), expected, "{design:?} n={n} r={r:?}");
                    let set: HashSet<_> = pairs.iter().copied().collect();
                    assert_eq!(set.len(), pairs.len(), "duplicates: {design:?} n={n}");
                    assert!(pairs.iter().all(|&(i, j)| i != j && i < n && j < n));
                    assert!(pairs.windows(2).all(|w| w[0] < w[1]), "not sorted");
                    let reversed = pairs
                        .iter()
                        .filter(|&&(i, j)| set.contains(&(j, i)))
                        .count();
                    match design {
                        Design::Full | Design::Symmetric => assert_eq!(reversed, pairs.len()),
                        Design::NoRepeat => assert_eq!(reversed, 0),
                        Design::Random | Design::Adaptive => {}
                    }
                }
            }
        }
    }

    #[test]
    fn draws_are_reproducible_and_depend_on_seed_and_context() {
        let draw = |seed, id| {
            Design::Random
                .pairs(10, Some(20), &mut context_rng(seed, id))
                .unwrap()
        };
        assert_eq!(draw(1, "a"), draw(1, "a"));
        assert_ne!(draw(1, "a"), draw(2, "a"));
        assert_ne!(draw(1, "a"), draw(1, "b"));
    }

    #[test]
    fn no_repeat_uses_both_orientations() {
        let pairs = Design::NoRepeat
            .pairs(16, Some(120), &mut context_rng(0, "x"))
            .unwrap();
        let forward = pairs.iter().filter(|&&(i, j)| i < j).count();
        assert!(forward > 30 && forward < 90, "{forward} of 120 forward");
    }

    #[test]
    fn impossible_requests_are_clear_errors() {
        let mut rng = context_rng(0, "x");
        let error = Design::Random
            .pairs(4, Some(13), &mut rng)
            .unwrap_err()
            .to_string();
        assert!(error.contains("at most 12"), "{error}");
        let error = Design::NoRepeat
            .pairs(4, Some(7), &mut rng)
            .unwrap_err()
            .to_string();
        assert!(error.contains("at most 6"), "{error}");
        let error = Design::Symmetric
            .pairs(4, Some(5), &mut rng)
            .unwrap_err()
            .to_string();
        assert!(error.contains("even"), "{error}");
        assert!(Design::Symmetric.pairs(4, Some(14), &mut rng).is_err());
        assert!(Design::Random.pairs(4, None, &mut rng).is_err());
        assert!(Design::Random.pairs(4, Some(0), &mut rng).is_err());
        assert!(Design::Full.pairs(4, Some(12), &mut rng).is_err());
    }
}
