//! Paraphrasing references with a local LM: n paraphrases per reference from the basic or
//! the diverse prompts, nucleus sampling (temperature 1.0, top_p 0.9 as in the paper) from
//! a seed per (paraphrase, attempt), requests run in batches through
//! [`Scorer::generate_batch`], every raw generation cached by (model fingerprint, prompt
//! tokens, sampling settings, seed, token limit) so that a killed run resumes where it
//! stopped and a rerun is identical. An answer that cleans to nothing is retried with the
//! next seed a bounded number of times, then counted as failed.

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

use super::clean::clean_paraphrase;
use super::input::{reference_id, ParaphraseRow};
use super::prompts::PromptSet;
use crate::engine::cache::prompt_hash;
use crate::engine::generation::{completion_of, generation_of, EachResult};
use crate::engine::{
    CompletionRequest, CompletionResult, Generation, GenerationRequest, PrefixCache, Prompt,
    ResultCache, Sampling, Scorer, TextPrompt,
};

/// Cache kind of raw paraphrase generations.
const CACHE_KIND: &str = "generation";

/// Seeds of later attempts are this far apart, so that they never meet a first attempt.
const ATTEMPT_STRIDE: u64 = 1_000_003;

/// How paraphrases are made.
#[derive(Debug, Clone, PartialEq)]
pub struct ParaphraseOptions {
    /// Paraphrases per reference.
    pub n: usize,
    pub prompts: PromptSet,
    pub seed: u64,
    pub temperature: f64,
    pub top_p: f64,
    /// Further attempts for an answer that cleans to nothing.
    pub max_retries: usize,
    /// Requests per call to the model.
    pub batch_size: usize,
    /// Longest answer in tokens (also bounded by 1.5 times the reference's length plus 24:
    /// a paraphrase is about as long as its reference, and a small model that rambles on
    /// would otherwise spend most of the time on text that cleaning drops).
    pub max_tokens: usize,
    /// Send the prompt through the model's chat template.
    pub chat: bool,
}

impl Default for ParaphraseOptions {
    fn default() -> Self {
        Self {
            n: 10,
            prompts: PromptSet::Diverse,
            seed: 0,
            temperature: 1.0,
            top_p: 0.9,
            max_retries: 3,
            batch_size: 16,
            max_tokens: 256,
            chat: true,
        }
    }
}

/// What a paraphrasing run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ParaphraseReport {
    pub references: usize,
    pub requested: usize,
    pub failed: usize,
    /// Answers rejected by cleaning (each retried or counted as failed).
    pub rejected: usize,
    /// Generations computed now, and read from the cache.
    pub generated: usize,
    pub cached: usize,
    /// Tokens generated now, and the seconds spent generating them.
    pub new_tokens: usize,
    pub generation_seconds: f64,
}

use serde::Serialize;

impl ParaphraseReport {
    pub fn tokens_per_second(&self) -> f64 {
        if self.generation_seconds > 0.0 {
            self.new_tokens as f64 / self.generation_seconds
        } else {
            0.0
        }
    }
}

/// The seed of paraphrase `k`'s attempt `attempt`.
pub fn seed_for(base: u64, k: usize, attempt: usize) -> u64 {
    base.wrapping_add(k as u64)
        .wrapping_add((attempt as u64).wrapping_mul(ATTEMPT_STRIDE))
}

/// The cache key of a generation request (its prompt already tokenised).
fn cache_key(scorer: &dyn Scorer, request: &GenerationRequest) -> Result<String> {
    let tokens = scorer.encode_prompt(&request.prompt)?;
    let mut hasher = Sha256::new();
    hasher.update(prompt_hash(&tokens).as_bytes());
    hasher.update(serde_json::to_string(&request.sampling)?.as_bytes());
    hasher.update((request.max_tokens as u64).to_le_bytes());
    for stop in &request.stop {
        hasher.update((stop.len() as u64).to_le_bytes());
        hasher.update(stop.as_bytes());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// One paraphrase to make.
#[derive(Debug, Clone, Copy)]
struct Job {
    reference: usize,
    k: usize,
    attempt: usize,
}

/// Paraphrase every reference `options.n` times. Rows come back in reference order;
/// `progress(done, total)` is called after every batch.
pub fn paraphrase_references(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    references: &[String],
    options: &ParaphraseOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Vec<ParaphraseRow>, ParaphraseReport)> {
    if options.n == 0 {
        bail!("the number of paraphrases must be at least 1");
    }
    if let Some(i) = references.iter().position(|r| r.trim().is_empty()) {
        bail!("reference {i} is empty");
    }
    let model = scorer.info().fingerprint.clone();
    let limits: Vec<usize> = references
        .iter()
        .map(|r| {
            let tokens = scorer
                .encode_prompt(&Prompt::plain(TextPrompt::user(r.as_str())))?
                .input
                .len();
            Ok(options.max_tokens.min(tokens * 3 / 2 + 24))
        })
        .collect::<Result<_>>()?;
    let mut slots: Vec<Vec<Option<String>>> = vec![vec![None; options.n]; references.len()];
    let mut report = ParaphraseReport {
        references: references.len(),
        requested: references.len() * options.n,
        ..ParaphraseReport::default()
    };
    let mut pending: Vec<Job> = (0..references.len())
        .flat_map(|reference| {
            (0..options.n).map(move |k| Job {
                reference,
                k,
                attempt: 0,
            })
        })
        .collect();
    let mut settled = 0;
    while !pending.is_empty() {
        let mut retry = Vec::new();
        for batch in pending.chunks(options.batch_size.max(1)) {
            let requests: Vec<GenerationRequest> = batch
                .iter()
                .map(|job| {
                    let text = options.prompts.prompt(job.k, &references[job.reference]);
                    let user = TextPrompt::user(text);
                    GenerationRequest {
                        prompt: if options.chat {
                            Prompt::chat(user)
                        } else {
                            Prompt::plain(user)
                        },
                        max_tokens: limits[job.reference],
                        sampling: Sampling::TopP {
                            temperature: options.temperature,
                            top_p: options.top_p,
                            seed: seed_for(options.seed, job.k, job.attempt),
                        },
                        stop: Vec::new(),
                    }
                })
                .collect();
            let generations = generate_cached(scorer, cache, &model, &requests, &mut report)?;
            for (job, generation) in batch.iter().zip(generations) {
                match clean_paraphrase(&generation.text) {
                    Some(text) => {
                        slots[job.reference][job.k] = Some(text);
                        settled += 1;
                    }
                    None => {
                        report.rejected += 1;
                        if job.attempt < options.max_retries {
                            retry.push(Job {
                                attempt: job.attempt + 1,
                                ..*job
                            });
                        } else {
                            report.failed += 1;
                            settled += 1;
                        }
                    }
                }
            }
            progress(settled, report.requested);
        }
        pending = retry;
    }
    let rows = references
        .iter()
        .zip(slots)
        .map(|(reference, slots)| {
            let failed = slots.iter().filter(|s| s.is_none()).count();
            ParaphraseRow {
                reference_id: reference_id(reference),
                reference: reference.clone(),
                paraphrases: slots.into_iter().flatten().collect(),
                failed,
            }
        })
        .collect();
    Ok((rows, report))
}

/// Generations of `requests`: from the cache where present, the rest in one batch (each
/// stored as soon as the batch returns).
fn generate_cached(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    model: &str,
    requests: &[GenerationRequest],
    report: &mut ParaphraseReport,
) -> Result<Vec<Generation>> {
    let mut keys = Vec::with_capacity(requests.len());
    let mut found: Vec<Option<Generation>> = Vec::with_capacity(requests.len());
    for request in requests {
        let key = cache_key(scorer, request)?;
        let hit = match cache {
            Some(cache) => match cache.get_text(model, CACHE_KIND, &key)? {
                Some(text) => Some(
                    serde_json::from_str::<Generation>(&text)
                        .context("a cached generation is unreadable")?,
                ),
                None => None,
            },
            None => None,
        };
        keys.push(key);
        found.push(hit);
    }
    let missing: Vec<usize> = (0..requests.len())
        .filter(|&i| found[i].is_none())
        .collect();
    report.cached += requests.len() - missing.len();
    if !missing.is_empty() {
        // One call for the batch; each paraphrase stored the moment it is finished, so a
        // run stopped midway keeps every finished one.
        let subset: Vec<CompletionRequest> = missing
            .iter()
            .map(|&i| completion_of(&requests[i]))
            .collect();
        let start = Instant::now();
        let mut store = |k: usize, result: CompletionResult| -> Result<()> {
            let i = missing[k];
            let generation = generation_of(&result);
            report.generated += 1;
            report.new_tokens += generation.tokens.len();
            if let Some(cache) = cache {
                cache.put_text(
                    model,
                    CACHE_KIND,
                    &keys[i],
                    &serde_json::to_string(&generation)?,
                )?;
            }
            found[i] = Some(generation);
            Ok(())
        };
        let outcome = scorer.generate_each(
            &subset,
            &mut PrefixCache::new(0),
            &mut EachResult(&mut store),
        );
        report.generation_seconds += start.elapsed().as_secs_f64();
        outcome?;
    }
    found
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.with_context(|| format!("no generation for request {i}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_never_reuse_a_first_seed() {
        let firsts: Vec<u64> = (0..1000).map(|k| seed_for(5, k, 0)).collect();
        for k in 0..1000 {
            for attempt in 1..4 {
                assert!(!firsts.contains(&seed_for(5, k, attempt)));
            }
        }
    }
}
