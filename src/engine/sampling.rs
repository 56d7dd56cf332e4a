//! Choosing the next token from a row of logits: greedy, or nucleus (top-p) sampling at a
//! temperature from a seeded generator, so that generations are reproducible; optionally
//! among an allowed set of tokens only (vLLM's `allowed_token_ids`), which restricts the
//! choice but not the distribution a caller reports log-probabilities from.

use anyhow::{bail, ensure, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::request::Sampling;

/// Picks tokens one after another according to a [`Sampling`] rule.
#[derive(Debug, Clone)]
pub struct TokenSampler {
    rule: Rule,
    /// Sorted ids the choice is restricted to (`None`: the whole vocabulary).
    allowed: Option<Vec<u32>>,
}

#[derive(Debug, Clone)]
enum Rule {
    Greedy,
    TopP {
        temperature: f64,
        top_p: f64,
        rng: Box<StdRng>,
    },
}

impl TokenSampler {
    /// Check the rule's parameters: temperature finite and positive, `0 < top_p <= 1`.
    pub fn new(sampling: &Sampling) -> Result<Self> {
        let rule = match *sampling {
            Sampling::Greedy => Rule::Greedy,
            Sampling::TopP {
                temperature,
                top_p,
                seed,
            } => {
                ensure!(
                    temperature.is_finite() && temperature > 0.0,
                    "sampling temperature must be positive, got {temperature} (use greedy decoding for 0)"
                );
                ensure!(
                    top_p > 0.0 && top_p <= 1.0,
                    "top_p must be in (0, 1], got {top_p}"
                );
                Rule::TopP {
                    temperature,
                    top_p,
                    rng: Box::new(StdRng::seed_from_u64(seed)),
                }
            }
        };
        Ok(Self {
            rule,
            allowed: None,
        })
    }

    /// Restrict every choice to `allowed` (`None` leaves the vocabulary whole). An empty
    /// set is refused: nothing could be generated.
    pub fn allowing(mut self, allowed: Option<&[u32]>) -> Result<Self> {
        if let Some(ids) = allowed {
            if ids.is_empty() {
                crate::bad_request!("the set of allowed tokens is empty");
            }
            let mut ids = ids.to_vec();
            ids.sort_unstable();
            ids.dedup();
            self.allowed = Some(ids);
        }
        Ok(self)
    }

    /// The next token given the logits of every vocabulary entry.
    pub fn next(&mut self, logits: &[f32]) -> Result<u32> {
        let masked;
        let logits = match &self.allowed {
            None => logits,
            Some(ids) => {
                masked = only(logits, ids)?;
                &masked
            }
        };
        match &mut self.rule {
            Rule::Greedy => greedy(logits),
            Rule::TopP {
                temperature,
                top_p,
                rng,
            } => nucleus(logits, *temperature, *top_p, rng),
        }
    }
}

/// `logits` with every entry outside `allowed` made NaN (never chosen); an allowed id
/// outside the vocabulary is the request's fault.
fn only(logits: &[f32], allowed: &[u32]) -> Result<Vec<f32>> {
    let mut masked = vec![f32::NAN; logits.len()];
    for &id in allowed {
        match logits.get(id as usize) {
            Some(&logit) => masked[id as usize] = logit,
            None => crate::bad_request!(
                "allowed token id {id} is outside the vocabulary of {} tokens",
                logits.len()
            ),
        }
    }
    Ok(masked)
}

/// The most likely token; ties go to the lowest id. NaN logits are never chosen.
pub fn greedy(logits: &[f32]) -> Result<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (id, &logit) in logits.iter().enumerate() {
        if logit.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, top)| logit > top) {
            best = Some((id, logit));
        }
    }
    match best {
        Some((id, _)) => Ok(id as u32),
        None => bail!("no finite logits to choose a token from"),
    }
}

/// Sample from the smallest set of most likely tokens whose probability (at
/// `temperature`) reaches `top_p`, renormalised.
fn nucleus(logits: &[f32], temperature: f64, top_p: f64, rng: &mut StdRng) -> Result<u32> {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    ensure!(max.is_finite(), "no finite logits to sample a token from");
    let mut weighted: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .map(|(id, &l)| (id as u32, ((l as f64 - max as f64) / temperature).exp()))
        .collect();
    let total: f64 = weighted.iter().map(|(_, w)| w).sum();
    // Most likely first; equal weights in id order, so that the draw is reproducible.
    weighted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept = 0;
    let mut mass = 0.0;
    for (_, weight) in &weighted {
        kept += 1;
        mass += weight;
        if mass >= top_p * total {
            break;
        }
    }
    let mut draw = rng.gen::<f64>() * mass;
    for &(id, weight) in &weighted[..kept] {
        if draw < weight {
            return Ok(id);
        }
        draw -= weight;
    }
    // Rounding left the draw just past the last kept token.
    Ok(weighted[kept - 1].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ln(p: f64) -> f32 {
        p.ln() as f32
    }

    #[test]
    fn greedy_takes_the_lowest_id_among_ties_and_skips_nan() {
        assert_eq!(greedy(&[0.0, 2.0, 2.0, 1.0]).unwrap(), 1);
        assert_eq!(greedy(&[f32::NAN, -1.0, -3.0]).unwrap(), 1);
        assert!(greedy(&[f32::NAN]).is_err());
    }

    #[test]
    fn invalid_parameters_are_refused() {
        for (temperature, top_p) in [
            (0.0, 0.9),
            (-1.0, 0.9),
            (f64::NAN, 0.9),
            (1.0, 0.0),
            (1.0, 1.5),
        ] {
            let sampling = Sampling::TopP {
                temperature,
                top_p,
                seed: 1,
            };
            assert!(
                TokenSampler::new(&sampling).is_err(),
                "{temperature} {top_p}"
            );
        }
    }

    #[test]
    fn a_tiny_nucleus_is_greedy() {
        let mut sampler = TokenSampler::new(&Sampling::TopP {
            temperature: 1.0,
            top_p: 1e-9,
            seed: 7,
        })
        .unwrap();
        for _ in 0..20 {
            assert_eq!(sampler.next(&[ln(0.2), ln(0.5), ln(0.3)]).unwrap(), 1);
        }
    }

    #[test]
    fn the_nucleus_excludes_the_tail_and_keeps_relative_odds() {
        // p = (0.5, 0.3, 0.2), top_p 0.75: the nucleus is {0, 1} with odds 5:3.
        let mut sampler = TokenSampler::new(&Sampling::TopP {
            temperature: 1.0,
            top_p: 0.75,
            seed: 42,
        })
        .unwrap();
        let logits = [ln(0.5), ln(0.3), ln(0.2)];
        let mut counts = [0usize; 3];
        let draws = 20_000;
        for _ in 0..draws {
            counts[sampler.next(&logits).unwrap() as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        let share = counts[0] as f64 / draws as f64;
        // Expected 0.625; the binomial standard deviation is 0.0034.
        assert!((share - 0.625).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn a_low_temperature_sharpens_the_distribution() {
        // At temperature 0.25, p ∝ (0.5^4, 0.3^4, 0.2^4): token 0 has 0.864.
        let mut sampler = TokenSampler::new(&Sampling::TopP {
            temperature: 0.25,
            top_p: 1.0,
            seed: 3,
        })
        .unwrap();
        let logits = [ln(0.5), ln(0.3), ln(0.2)];
        let draws = 20_000;
        let zeros = (0..draws)
            .filter(|_| sampler.next(&logits).unwrap() == 0)
            .count();
        let expected = 0.5f64.powi(4) / (0.5f64.powi(4) + 0.3f64.powi(4) + 0.2f64.powi(4));
        assert!(
            (zeros as f64 / draws as f64 - expected).abs() < 0.02,
            "{zeros}"
        );
    }

    #[test]
    fn an_allowed_set_restricts_greedy_and_nucleus_choices() {
        let logits = [ln(0.5), ln(0.3), ln(0.15), ln(0.05)];
        let mut greedy = TokenSampler::new(&Sampling::Greedy)
            .unwrap()
            .allowing(Some(&[3, 2]))
            .unwrap();
        assert_eq!(greedy.next(&logits).unwrap(), 2);
        // Among {1, 3} the odds are 0.3 : 0.05, so token 1 has 6/7 of the draws.
        let mut nucleus = TokenSampler::new(&Sampling::TopP {
            temperature: 1.0,
            top_p: 1.0,
            seed: 5,
        })
        .unwrap()
        .allowing(Some(&[1, 3, 3]))
        .unwrap();
        let draws = 20_000;
        let mut counts = [0usize; 4];
        for _ in 0..draws {
            counts[nucleus.next(&logits).unwrap() as usize] += 1;
        }
        assert_eq!(counts[0] + counts[2], 0, "{counts:?}");
        // The binomial standard deviation is 0.0025.
        assert!(
            (counts[1] as f64 / draws as f64 - 6.0 / 7.0).abs() < 0.015,
            "{counts:?}"
        );
    }

    #[test]
    fn an_empty_or_foreign_allowed_set_is_the_requests_fault() {
        let empty = TokenSampler::new(&Sampling::Greedy)
            .unwrap()
            .allowing(Some(&[]));
        let error = empty.unwrap_err();
        assert_eq!(
            crate::engine::error_kind(&error),
            crate::engine::ErrorKind::BadRequest
        );
        let mut foreign = TokenSampler::new(&Sampling::Greedy)
            .unwrap()
            .allowing(Some(&[1, 9]))
            .unwrap();
        let error = foreign.next(&[0.0, 1.0, 2.0]).unwrap_err();
        assert_eq!(
            crate::engine::error_kind(&error),
            crate::engine::ErrorKind::BadRequest
        );
        assert!(error.to_string().contains("allowed token id 9"), "{error}");
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens() {
        let sampling = Sampling::TopP {
            temperature: 1.0,
            top_p: 0.9,
            seed: 11,
        };
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let run = || {
            let mut sampler = TokenSampler::new(&sampling).unwrap();
            (0..30)
                .map(|_| sampler.next(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        assert!(first.iter().any(|&t| t != first[0]), "draws vary");
    }
}
