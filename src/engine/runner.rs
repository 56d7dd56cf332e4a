//! The cached request runner: the one place where methods' requests meet the result
//! cache and the scorer.
//!
//! Label requests go in two steps. **Plan**: each request is tokenised once (prompt and
//! labels; the request then carries the token ids, so the scorer never tokenises it
//! again) and keyed by the model's fingerprint, the method's template identity and those
//! ids ([`plan_label`], [`LabelPlan::push`]); results already in the cache are taken
//! ([`LabelPlan::lookup`]). **Fill** ([`LabelPlan::fill`]): requests with equal keys are
//! asked once; the scorer sees every distinct request, those already known marked done,
//! so that it computes the missing ones exactly as an uninterrupted run would (same
//! batches, bitwise the same results); each result is stored in the cache as it arrives
//! (a killed run loses only what was in flight) and fanned out to every slot with its key.
//!
//! Generation requests are cached whole ([`generate_cached_all`]): keyed by the model's
//! fingerprint, the prompt's token ids, the token budget, stop strings and the sampling
//! settings (seed included), so a seeded sample is drawn once and reused. A run's
//! missing generations go to the scorer in one call, each stored as it is finished, with
//! the label read a method asks after each (a judge's verdict after its feedback) read
//! from the generation's own state and stored too.
//!
//! Methods (pairwise comparison, absolute scoring, the service's jobs, and new ones such
//! as DHP scoring, paraphrase generation or adaptive comparison rounds) build requests
//! and read results; they never talk to the cache or batch requests themselves.

use std::collections::HashMap;

use anyhow::{Context as _, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::cache::{prompt_hash, CacheKey, ResultCache};
use super::cache_writer::CacheWriter;
use super::completion::{CompletionRequest, CompletionResult};
use super::decoder::prefix_cache::PrefixCache;
use super::generation::{completion_of, generation_of, GenerationSink};
use super::request::{
    Generation, GenerationRequest, Label, LabelRequest, LabelResult, Prompt, TokenPrompt,
};
use super::scorer::Scorer;

/// A label request tokenised and keyed, ready for a [`LabelPlan`].
#[derive(Debug, Clone)]
pub struct PlannedLabel {
    /// The request with its prompt and labels as token ids.
    pub request: LabelRequest,
    pub key: CacheKey,
}

/// Tokenise `request` once and key it under `template` (the method's identity, e.g.
/// `pairwise/c1`). Labels are encoded here unless `labels` gives their ids already (a
/// method asking the same labels of many prompts encodes them once).
pub fn plan_label(
    scorer: &dyn Scorer,
    template: &str,
    request: LabelRequest,
    labels: Option<&[Vec<u32>]>,
) -> Result<PlannedLabel> {
    plan_labels(scorer, template, vec![request], labels)
        .pop()
        .context("planning one request gave no plan")?
}

/// A request with its prompt's and labels' token ids, before its key is hashed.
type Encoded = (LabelRequest, TokenPrompt, Vec<Vec<u32>>);

/// [`plan_label`] for every request, in order: the prompts tokenised together
/// ([`Scorer::encode_prompts`], on every core where the scorer tokenises here) and
/// their keys hashed in parallel. Each request's plan or error is its own.
pub fn plan_labels(
    scorer: &dyn Scorer,
    template: &str,
    requests: Vec<LabelRequest>,
    labels: Option<&[Vec<u32>]>,
) -> Vec<Result<PlannedLabel>> {
    use rayon::prelude::*;
    let prompts: Vec<&Prompt> = requests.iter().map(|request| &request.prompt).collect();
    let tokens = scorer.encode_prompts(&prompts);
    let encoded: Vec<Result<Encoded>> = requests
        .into_iter()
        .zip(tokens)
        .map(|(request, tokens)| {
            let tokens = tokens.context("cannot encode the prompt")?;
            let labels = match labels {
                Some(ids) => ids.to_vec(),
                None => request
                    .labels
                    .iter()
                    .map(|label| {
                        scorer
                            .encode_label(label)
                            .with_context(|| format!("cannot encode label {label:?}"))
                    })
                    .collect::<Result<Vec<_>>>()?,
            };
            Ok((request, tokens, labels))
        })
        .collect();
    let fingerprint = scorer.info().fingerprint.as_str();
    encoded
        .into_par_iter()
        .map(|encoded| {
            let (mut request, tokens, labels) = encoded?;
            let key = CacheKey::new(fingerprint, template, &tokens, labels);
            request.prompt = Prompt::Tokens(tokens);
            request.labels = key.labels.iter().cloned().map(Label::Tokens).collect();
            Ok(PlannedLabel { request, key })
        })
        .collect()
}

/// Planned label requests and their results so far (from the cache or the scorer).
#[derive(Debug, Clone, Default)]
pub struct LabelPlan {
    requests: Vec<LabelRequest>,
    keys: Vec<CacheKey>,
    results: Vec<Option<LabelResult>>,
}

impl LabelPlan {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a planned request; returns its index.
    pub fn push(&mut self, planned: PlannedLabel) -> usize {
        self.requests.push(planned.request);
        self.keys.push(planned.key);
        self.results.push(None);
        self.requests.len() - 1
    }

    /// Move every request of `other` (with its key and result so far) to the end.
    pub fn append(&mut self, other: LabelPlan) {
        self.requests.extend(other.requests);
        self.keys.extend(other.keys);
        self.results.extend(other.results);
    }

    pub fn len(&self) -> usize {
        self.requests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    pub fn requests(&self) -> &[LabelRequest] {
        &self.requests
    }

    pub fn keys(&self) -> &[CacheKey] {
        &self.keys
    }

    /// The results so far, in plan order (`None`: not known yet).
    pub fn results(&self) -> &[Option<LabelResult>] {
        &self.results
    }

    /// Requests still without a result.
    pub fn missing(&self) -> usize {
        self.results.iter().filter(|r| r.is_none()).count()
    }

    /// Take the results the cache holds; returns how many requests it answered.
    pub fn lookup(&mut self, cache: Option<&ResultCache>) -> Result<usize> {
        let Some(cache) = cache else {
            return Ok(0);
        };
        let mut found = 0;
        for (key, slot) in self.keys.iter().zip(&mut self.results) {
            if slot.is_none() {
                *slot = cache.get(key)?;
                found += usize::from(slot.is_some());
            }
        }
        Ok(found)
    }

    /// Compute the missing results with one scorer call: equal keys asked once, known
    /// results passed as done (so batches are those of an uninterrupted run), each result
    /// handed to `cache`'s writer as it arrives (stored off this thread, a pass's burst in
    /// one transaction, all of it before this returns) and copied to every slot with its
    /// key; `on_result(index)` runs once per slot filled (an error from it, e.g.
    /// [`crate::progress::Interrupted`], stops the call there). Returns the number of
    /// distinct requests computed.
    pub fn fill(
        &mut self,
        scorer: &mut dyn Scorer,
        cache: Option<&ResultCache>,
        on_result: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<usize> {
        let mut unique: Vec<usize> = Vec::new();
        let mut copies: HashMap<&CacheKey, Vec<usize>> = HashMap::new();
        for (index, key) in self.keys.iter().enumerate() {
            let slots = copies.entry(key).or_default();
            if slots.is_empty() {
                unique.push(index);
            }
            slots.push(index);
        }
        let done: Vec<bool> = unique.iter().map(|&i| self.results[i].is_some()).collect();
        let missing = done.iter().filter(|&&d| !d).count();
        if missing == 0 {
            return Ok(0);
        }
        let requests: Vec<LabelRequest> =
            unique.iter().map(|&i| self.requests[i].clone()).collect();
        let results = &mut self.results;
        let keys = &self.keys;
        let mut writer = cache
            .map(|cache| CacheWriter::new(cache, missing))
            .transpose()?;
        let scored = scorer.label_logprobs_resume(&requests, &done, &mut |k, result| {
            let index = *unique
                .get(k)
                .with_context(|| format!("scorer answered request {k} of {}", unique.len()))?;
            let key = &keys[index];
            if let Some(writer) = writer.as_mut() {
                writer.put(key, &result)?;
            }
            for &slot in &copies[key] {
                if results[slot].is_none() {
                    results[slot] = Some(result.clone());
                    on_result(slot)?;
                }
            }
            Ok(())
        });
        // Everything handed to the writer is stored before the call's outcome is known,
        // also when it failed (a resumed run needs no result twice).
        let stored = writer.map(CacheWriter::finish).transpose();
        scored?;
        stored?;
        Ok(missing)
    }

    /// Take the first `count` requests off the front, with their keys and results.
    fn split_front(&mut self, count: usize) -> LabelPlan {
        let count = count.min(self.len());
        LabelPlan {
            requests: self.requests.drain(..count).collect(),
            keys: self.keys.drain(..count).collect(),
            results: self.results.drain(..count).collect(),
        }
    }

    /// Every result, in plan order; an error names the first request without one.
    pub fn into_results(self) -> Result<Vec<LabelResult>> {
        self.results
            .into_iter()
            .enumerate()
            .map(|(index, result)| result.with_context(|| format!("no result for request {index}")))
            .collect()
    }

    /// The results so far, in plan order.
    pub fn into_partial_results(self) -> Vec<Option<LabelResult>> {
        self.results
    }
}

/// [`LabelPlan::fill`] for the plans of a run's contexts. Where the scorer batches
/// across contexts ([`Scorer::batches_across_contexts`]: the level plan, an engine) the
/// plans are joined in order into one call, so the scorer builds one prefix trie for the
/// whole run and cuts its passes across contexts (as a GPU wants them, and an engine's
/// concurrency); the results go back to the plan each request came from, also when the
/// call fails midway (what was computed stays, as it stays in the cache). Otherwise
/// each plan is its own call, in order. `on_result(index)` counts across the plans.
/// Returns the distinct requests computed.
pub fn fill_together<'a>(
    plans: impl IntoIterator<Item = &'a mut LabelPlan>,
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    on_result: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<usize> {
    let mut plans: Vec<&mut LabelPlan> = plans.into_iter().collect();
    if !scorer.batches_across_contexts() {
        let mut computed = 0;
        let mut offset = 0;
        for plan in plans {
            let length = plan.len();
            computed += plan.fill(scorer, cache, &mut |index| on_result(offset + index))?;
            offset += length;
        }
        return Ok(computed);
    }
    let lengths: Vec<usize> = plans.iter().map(|plan| plan.len()).collect();
    let mut joined = LabelPlan::new();
    for plan in &mut plans {
        joined.append(std::mem::take(*plan));
    }
    let outcome = joined.fill(scorer, cache, on_result);
    for (plan, length) in plans.into_iter().zip(lengths) {
        *plan = joined.split_front(length);
    }
    outcome
}

/// What determines a generation besides the model: hashed into its cache key.
#[derive(Serialize)]
struct GenerationIdentity<'a> {
    prompt: String,
    max_tokens: usize,
    stop: &'a [String],
    sampling: &'a super::request::Sampling,
}

/// Cache kind of generations made by method `kind` (e.g. `pararef`).
fn generation_kind(kind: &str) -> String {
    format!("generation/{kind}")
}

/// What a method makes of each generation of [`generate_cached_all`].
pub trait GenerationReader {
    /// Generation `index` is known (`cached`: read back from the result cache). Answer
    /// the label read that follows it (a judge's verdict after its feedback), planned,
    /// or `None`. Its prompt should continue the generation's prompt and text: a decoder
    /// then reads it from the generation's own keys and values.
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>>;

    /// The label read after generation `index` (`cached`: from the result cache).
    fn label(&mut self, index: usize, result: LabelResult, cached: bool) -> Result<()> {
        let _ = (index, result, cached);
        Ok(())
    }
}

/// A reader that only keeps the generations, in request order.
struct KeepGenerations(Vec<Option<(Generation, bool)>>);

impl GenerationReader for KeepGenerations {
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        _scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>> {
        self.0[index] = Some((generation.clone(), cached));
        Ok(None)
    }
}

/// How many generations and label reads [`generate_cached_all`] computed now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GeneratedCounts {
    pub generations: usize,
    pub labels: usize,
}

/// The cache key of a generation: model fingerprint aside, its prompt's tokens, budget,
/// stop strings and sampling settings (seed included). Whatever batch it is made in.
fn generation_key(tokens: &TokenPrompt, request: &GenerationRequest) -> Result<String> {
    let identity = GenerationIdentity {
        prompt: prompt_hash(tokens),
        max_tokens: request.max_tokens,
        stop: &request.stop,
        sampling: &request.sampling,
    };
    Ok(hex::encode(Sha256::digest(serde_json::to_vec(&identity)?)))
}

/// Generate for every request of method `kind`, or read the generation the cache holds
/// for the same model, prompt tokens, budget, stop strings and sampling settings; and
/// the label read the reader asks after each. The missing generations go to the scorer
/// in one call ([`Scorer::generate_each`]: one batch, prompts sharing prefixes), each
/// stored in the cache the moment it is finished, its label read taken from the cache
/// or read from the generation's own state and stored as it arrives; label reads after
/// cached generations that the cache lacks are filled together at the end. A run
/// stopped midway keeps everything finished.
pub fn generate_cached_all(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    kind: &str,
    requests: &[GenerationRequest],
    reader: &mut dyn GenerationReader,
) -> Result<GeneratedCounts> {
    let prompts: Vec<&Prompt> = requests.iter().map(|r| &r.prompt).collect();
    let tokens = scorer.encode_prompts(&prompts);
    let fingerprint = scorer.info().fingerprint.clone();
    let kind = generation_kind(kind);
    let mut keys = Vec::with_capacity(requests.len());
    let mut missing = Vec::new();
    let mut pending = LabelPlan::new();
    let mut pending_of = Vec::new();
    let mut counts = GeneratedCounts::default();
    for (index, (request, tokens)) in requests.iter().zip(tokens).enumerate() {
        let tokens = tokens.with_context(|| format!("cannot encode generation prompt {index}"))?;
        let key = generation_key(&tokens, request)?;
        let hit = match cache {
            Some(cache) => cache.get_text(&fingerprint, &kind, &key)?,
            None => None,
        };
        match hit {
            Some(text) => {
                let generation: Generation = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "result cache {}: unreadable {kind} entry",
                        cache.map(ResultCache::location).unwrap_or_default()
                    )
                })?;
                if let Some(planned) = reader.generation(index, &generation, true, scorer)? {
                    match cache.map(|c| c.get(&planned.key)).transpose()?.flatten() {
                        Some(result) => reader.label(index, result, true)?,
                        None => {
                            pending.push(planned);
                            pending_of.push(index);
                        }
                    }
                }
            }
            None => missing.push((index, tokens)),
        }
        keys.push(key);
    }

    if !missing.is_empty() {
        let completions: Vec<CompletionRequest> = missing
            .iter()
            .map(|(index, tokens)| {
                completion_of(&GenerationRequest {
                    prompt: Prompt::Tokens(tokens.clone()),
                    ..requests[*index].clone()
                })
            })
            .collect();
        struct Sink<'a> {
            missing: &'a [(usize, TokenPrompt)],
            keys: &'a [String],
            cache: Option<&'a ResultCache>,
            fingerprint: &'a str,
            kind: &'a str,
            reader: &'a mut dyn GenerationReader,
            label_keys: HashMap<usize, CacheKey>,
            counts: &'a mut GeneratedCounts,
        }
        impl GenerationSink for Sink<'_> {
            fn generated(
                &mut self,
                k: usize,
                result: CompletionResult,
                scorer: &dyn Scorer,
            ) -> Result<Option<LabelRequest>> {
                let index = self.missing[k].0;
                let generation = generation_of(&result);
                if let Some(cache) = self.cache {
                    cache.put_text(
                        self.fingerprint,
                        self.kind,
                        &self.keys[index],
                        &serde_json::to_string(&generation)?,
                    )?;
                }
                self.counts.generations += 1;
                let Some(planned) = self.reader.generation(index, &generation, false, scorer)?
                else {
                    return Ok(None);
                };
                if let Some(result) = self
                    .cache
                    .map(|c| c.get(&planned.key))
                    .transpose()?
                    .flatten()
                {
                    self.reader.label(index, result, true)?;
                    return Ok(None);
                }
                self.label_keys.insert(k, planned.key);
                Ok(Some(planned.request))
            }

            fn labelled(&mut self, k: usize, result: LabelResult) -> Result<()> {
                let index = self.missing[k].0;
                let key = self
                    .label_keys
                    .remove(&k)
                    .context("a label read nobody asked for")?;
                if let Some(cache) = self.cache {
                    cache.put(&key, &result)?;
                }
                self.counts.labels += 1;
                self.reader.label(index, result, false)
            }
        }
        let mut sink = Sink {
            missing: &missing,
            keys: &keys,
            cache,
            fingerprint: &fingerprint,
            kind: &kind,
            reader: &mut *reader,
            label_keys: HashMap::new(),
            counts: &mut counts,
        };
        scorer.generate_each(&completions, &mut PrefixCache::new(0), &mut sink)?;
    }

    if !pending.is_empty() {
        counts.labels += pending.fill(scorer, cache, &mut |_| Ok(()))?;
        for (result, index) in pending.into_results()?.into_iter().zip(pending_of) {
            reader.label(index, result, false)?;
        }
    }
    Ok(counts)
}

/// [`generate_cached_all`] for one request, without a label read: the generation and
/// whether it came from the cache.
pub fn generate_cached(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    kind: &str,
    request: &GenerationRequest,
) -> Result<(Generation, bool)> {
    let mut kept = KeepGenerations(vec![None]);
    generate_cached_all(
        scorer,
        cache,
        kind,
        std::slice::from_ref(request),
        &mut kept,
    )?;
    kept.0
        .pop()
        .flatten()
        .context("the generation got no answer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::request::{Sampling, TextPrompt};
    use crate::engine::MockScorer;

    fn request(text: &str) -> LabelRequest {
        LabelRequest {
            prompt: Prompt::plain(TextPrompt::user(text)),
            labels: vec![" A".into(), " B".into()],
        }
    }

    fn plan(scorer: &MockScorer, texts: &[&str]) -> LabelPlan {
        let mut plan = LabelPlan::new();
        for text in texts {
            plan.push(plan_label(scorer, "test/t", request(text), None).unwrap());
        }
        plan
    }

    #[test]
    fn planned_requests_carry_token_ids_and_equal_prompts_share_a_key() {
        let scorer = MockScorer::new();
        let plan = plan(&scorer, &["one", "two", "one"]);
        assert!(plan
            .requests()
            .iter()
            .all(|r| matches!(r.prompt, Prompt::Tokens(_))
                && r.labels.iter().all(|l| matches!(l, Label::Tokens(_)))));
        assert_eq!(plan.keys()[0], plan.keys()[2]);
        assert_ne!(plan.keys()[0], plan.keys()[1]);
    }

    #[test]
    fn fill_asks_each_key_once_fans_out_and_caches() {
        let mut scorer = MockScorer::new();
        let cache = ResultCache::in_memory().unwrap();
        let mut first = plan(&scorer, &["one", "two", "one"]);
        let mut filled = Vec::new();
        let computed = first
            .fill(&mut scorer, Some(&cache), &mut |i| {
                filled.push(i);
                Ok(())
            })
            .unwrap();
        assert_eq!(computed, 2);
        filled.sort_unstable();
        assert_eq!(filled, [0, 1, 2]);
        let results = first.into_results().unwrap();
        assert_eq!(results[0], results[2]);

        // A second plan over the same prompts is answered by the cache alone.
        let mut second = plan(&scorer, &["two", "one"]);
        assert_eq!(second.lookup(Some(&cache)).unwrap(), 2);
        assert_eq!(second.missing(), 0);
        assert_eq!(
            second
                .fill(&mut scorer, Some(&cache), &mut |_| Ok(()))
                .unwrap(),
            0
        );
        assert_eq!(second.into_results().unwrap()[1], results[0]);
    }

    #[test]
    fn plans_filled_together_make_one_scorer_call_and_get_their_own_results() {
        let mut scorer = MockScorer::new();
        let calls = scorer.calls();
        let cache = ResultCache::in_memory().unwrap();
        // "two" is in both plans and already cached by the third: asked at most once.
        let mut cached = plan(&scorer, &["two"]);
        cached
            .fill(&mut scorer, Some(&cache), &mut |_| Ok(()))
            .unwrap();
        let before = (calls.label_calls(), calls.labels());
        let mut plans = vec![
            plan(&scorer, &["one", "two"]),
            plan(&scorer, &["three"]),
            plan(&scorer, &["two", "four", "one"]),
        ];
        for p in &mut plans {
            p.lookup(Some(&cache)).unwrap();
        }
        let mut filled = 0;
        let computed = fill_together(&mut plans, &mut scorer, Some(&cache), &mut |_| {
            filled += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls.label_calls() - before.0, 1, "one scorer call");
        assert_eq!(computed, 3, "one, three and four; two was cached");
        assert_eq!(calls.labels() - before.1, 3);
        assert_eq!(filled, 4, "every slot not known before is counted");
        let lengths: Vec<usize> = plans.iter().map(LabelPlan::len).collect();
        assert_eq!(lengths, [2, 1, 3]);
        // Each plan's results are those of its own prompts, as one plan alone gets them.
        let results: Vec<Vec<LabelResult>> = plans
            .into_iter()
            .map(|p| p.into_results().unwrap())
            .collect();
        let alone = |text: &str| {
            let mut own = plan(&MockScorer::new(), &[text]);
            own.fill(&mut MockScorer::new(), None, &mut |_| Ok(()))
                .unwrap();
            own.into_results().unwrap().remove(0)
        };
        assert_eq!(results[0], [alone("one"), alone("two")]);
        assert_eq!(results[1], [alone("three")]);
        assert_eq!(results[2], [alone("two"), alone("four"), alone("one")]);
    }

    #[test]
    fn plans_filled_together_keep_what_was_computed_when_the_call_stops() {
        let mut scorer = MockScorer::new();
        let mut plans = vec![plan(&scorer, &["one", "two"]), plan(&scorer, &["three"])];
        let mut answered = 0;
        let stopped = fill_together(&mut plans, &mut scorer, None, &mut |_| {
            answered += 1;
            if answered == 2 {
                anyhow::bail!("interrupted");
            }
            Ok(())
        });
        assert!(stopped.is_err());
        assert_eq!(
            plans[0].missing(),
            0,
            "both answers of the first plan are kept"
        );
        assert_eq!((plans[1].len(), plans[1].missing()), (1, 1));
    }

    #[test]
    fn generations_are_cached_by_sampling_settings() {
        let mut scorer = MockScorer::new();
        let cache = ResultCache::in_memory().unwrap();
        let mut request = GenerationRequest {
            prompt: Prompt::plain(TextPrompt::user("write")),
            max_tokens: 4,
            sampling: Sampling::Greedy,
            stop: vec![],
        };
        let (first, cached) = generate_cached(&mut scorer, Some(&cache), "t", &request).unwrap();
        assert!(!cached);
        let (again, cached) = generate_cached(&mut scorer, Some(&cache), "t", &request).unwrap();
        assert!(cached);
        assert_eq!(again, first);
        request.sampling = Sampling::TopP {
            temperature: 1.0,
            top_p: 0.9,
            seed: 7,
        };
        let (_, cached) = generate_cached(&mut scorer, Some(&cache), "t", &request).unwrap();
        assert!(!cached, "other sampling settings are another generation");
        let (_, cached) = generate_cached(&mut scorer, Some(&cache), "u", &request).unwrap();
        assert!(!cached, "another method's generations are kept apart");
    }

    /// Asks `Score:` after each generation, under `template`, and records what arrives.
    struct AskScore {
        template: &'static str,
        generations: Vec<(usize, bool)>,
        labels: Vec<(usize, bool, LabelResult)>,
    }

    impl GenerationReader for AskScore {
        fn generation(
            &mut self,
            index: usize,
            generation: &Generation,
            cached: bool,
            scorer: &dyn Scorer,
        ) -> Result<Option<PlannedLabel>> {
            self.generations.push((index, cached));
            let request = LabelRequest {
                prompt: Prompt::plain(TextPrompt::user(format!("{} Score:", generation.text))),
                labels: vec![" 1".into(), " 2".into()],
            };
            plan_label(scorer, self.template, request, None).map(Some)
        }

        fn label(&mut self, index: usize, result: LabelResult, cached: bool) -> Result<()> {
            self.labels.push((index, cached, result));
            Ok(())
        }
    }

    #[test]
    fn generations_and_their_label_reads_are_cached_and_read_back() {
        let mut scorer = MockScorer::new()
            .with_generation(|prompt| Ok(format!("about {}", prompt.len())))
            .with_labels(|text, labels| {
                Ok(labels
                    .iter()
                    .map(|l| -((text.len() + l.len()) as f64) / 10.0)
                    .collect())
            });
        let calls = scorer.calls();
        let cache = ResultCache::in_memory().unwrap();
        let requests: Vec<GenerationRequest> = ["one", "three"]
            .iter()
            .map(|text| GenerationRequest {
                prompt: Prompt::plain(TextPrompt::user(*text)),
                max_tokens: 20,
                sampling: Sampling::Greedy,
                stop: vec![],
            })
            .collect();
        let reader = |template| AskScore {
            template,
            generations: Vec::new(),
            labels: Vec::new(),
        };

        let mut first = reader("t/score");
        let counts =
            generate_cached_all(&mut scorer, Some(&cache), "k", &requests, &mut first).unwrap();
        assert_eq!(
            counts,
            GeneratedCounts {
                generations: 2,
                labels: 2
            }
        );
        assert!(first.generations.iter().all(|&(_, cached)| !cached));
        assert_eq!(first.labels.len(), 2);
        // The label read after "about 8" (the mock renders "one" as 8 bytes of prompt).
        let (index, cached, result) = &first.labels[0];
        assert!(!cached);
        let prompt = scorer.render(&requests[*index].prompt).unwrap().input;
        let text = format!("about {} Score:", prompt.len());
        assert_eq!(result.labels[0].logprob, -((text.len() + 2) as f64) / 10.0);

        // Everything again from the cache: nothing generated, nothing read.
        let generated_before = calls.generations.load(std::sync::atomic::Ordering::SeqCst);
        let mut second = reader("t/score");
        let counts =
            generate_cached_all(&mut scorer, Some(&cache), "k", &requests, &mut second).unwrap();
        assert_eq!(counts, GeneratedCounts::default());
        assert!(second.generations.iter().all(|&(_, cached)| cached));
        assert!(second.labels.iter().all(|(_, cached, _)| *cached));
        assert_eq!(
            calls.generations.load(std::sync::atomic::Ordering::SeqCst),
            generated_before
        );

        // Cached generations whose label reads the cache lacks: the reads alone are made.
        let mut third = reader("t/other");
        let counts =
            generate_cached_all(&mut scorer, Some(&cache), "k", &requests, &mut third).unwrap();
        assert_eq!(
            counts,
            GeneratedCounts {
                generations: 0,
                labels: 2
            }
        );
        let mut by_index: Vec<_> = third.labels.iter().map(|(i, c, r)| (*i, *c, r)).collect();
        by_index.sort_by_key(|(i, _, _)| *i);
        let mut first_by_index: Vec<_> = first.labels.iter().collect();
        first_by_index.sort_by_key(|(i, _, _)| *i);
        for ((_, cached, r), (_, _, f)) in by_index.iter().zip(first_by_index) {
            assert!(!cached);
            assert_eq!(*r, f, "the same read, under another template");
        }
    }
}
