//! [`RemoteScorer`]: a model served by another program (vLLM, SGLang, TGI, llama.cpp's
//! server, our own `serve`) behind the same [`Scorer`] interface as a model loaded here,
//! so every method, the result cache and the statistics work unchanged.
//!
//! Prompts are tokenised here, with the served model's own tokenizer and chat template
//! (a card or a checkpoint directory without weights), and sent as token ids, so the
//! engine reads exactly the tokens a local run would. A label's probability is exact:
//! - **top-K**: one request per prompt for the next position's K most likely tokens
//!   (`logprobs: K`, one generated token); a one-token label among them is read there;
//! - **restricted generation**: the other labels, where the engine takes vLLM's
//!   `allowed_token_ids`, token by token: one token generated after the prompt (and the
//!   label's tokens before it) with only the label's next token allowed, its
//!   log-probability read as the engine reports it, from the model's own distribution
//!   (vLLM's default `--logprobs-mode raw_logprobs`). It reuses the engine's prefix cache
//!   and computes one position, where an echo computes the distribution at every prompt
//!   position (35x the in-process time on vLLM's CPU build);
//! - **echo**: for the rest, the prompt with the label appended, echoed with each prompt
//!   token's log-probability (`echo: true`), the label's tokens summed.
//!
//! Which of them an engine gives is found on the first request (a restricted generation
//! is trusted only where it obeys and agrees with the echo or the top-K there; after
//! that, each restricted token's answer must agree with the whole distribution's top-K
//! the same reply lists, else that label goes by echo); an engine that gives neither is
//! refused, one that gives top-K alone only with `--accept-top-k-only` (a label
//! outside the K then gets the K-th log-probability, an upper bound, and the model's
//! name in every output says `[top-k only]`). Requests run in parallel up to a bound,
//! in token order so that prompts sharing a prefix reach the engine's prefix cache
//! together, and each result is handed on as it arrives (the result cache keeps it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};

use super::http::{CallError, Endpoint};
use super::replies::{self, Echoed, TokenKey};
use crate::engine::completion::{ChatMessage, CompletionRequest};
use crate::engine::decoder::prefix_cache::PrefixCache;
use crate::engine::generation::GenerationSink;
use crate::engine::request::{
    ContinuationRequest, ContinuationResult, Label, LabelRequest, LabelResult, LabelScore, Prompt,
    TokenPrompt,
};
use crate::engine::scorer::{ModelInfo, RenderedPrompt, Scorer, Usage};
use crate::engine::templating;
use crate::progress::Progress;
use crate::runtime::{ChatTemplate, TextTokenizer};

/// Largest difference between a label's log-probability by top-K and by echo on the
/// same engine (one engine's two batchings differ by ~1e-5 in f32; a misaligned echo by
/// far more).
const ROUTES_AGREE: f64 = 1e-3;

/// vLLM writes a log-probability of −∞ (a token a restricted distribution excludes) as
/// −9999 in JSON; alternatives at or below this are not of the model's own distribution.
const NO_PROBABILITY: f64 = -9000.0;

/// Whether a restricted generation's answer `lp` comes from the model's whole
/// distribution, judged from the same position's alternatives (`others`, the allowed
/// token left out) for a request of `k` of them: vLLM's default lists the whole
/// distribution's top-`k`, the generated token added where it is not among them. Then
/// either there are `k` others and `lp` lies below the least of them (the token is not
/// in the top-`k`), or `k - 1` others (it is). An engine reporting the restricted
/// distribution lists the allowed token alone, or others at −∞.
fn from_whole_distribution(lp: f64, others: &[f64], k: usize) -> bool {
    let others: Vec<f64> = others
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > NO_PROBABILITY)
        .collect();
    let least = others.iter().copied().reduce(f64::min);
    match least {
        Some(least) if others.len() >= k => lp <= least + ROUTES_AGREE,
        Some(_) => others.len() + 1 >= k,
        None => false,
    }
}

/// What the engine was found to give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routes {
    /// The next position's top-K log-probabilities.
    pub top_k: bool,
    /// The prompt's own tokens' log-probabilities (`echo`).
    pub echo: bool,
    /// Tokens named by id (`return_tokens_as_token_ids` accepted).
    pub ids: bool,
    /// A generation restricted to one token (`allowed_token_ids`) reports that token's
    /// log-probability in the model's own distribution.
    pub restricted: bool,
}

/// How labels were answered, over the scorer's life.
#[derive(Debug, Default)]
pub struct LabelCounts {
    /// Labels read from the top-K alternatives.
    pub top_k: AtomicU64,
    /// Labels that needed the echo request.
    pub echo: AtomicU64,
    /// Labels outside the top-K given its bound (`--accept-top-k-only`).
    pub bounded: AtomicU64,
    /// Labels read from a generation restricted to them (`allowed_token_ids`).
    pub restricted: AtomicU64,
}

/// The settings of the remote scorer beside its endpoint.
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Alternatives asked for at the next position.
    pub top_k: usize,
    /// Take top-K-only results (bounded labels) from an engine without echo.
    pub accept_top_k_only: bool,
}

/// A model served by an OpenAI-compatible engine.
pub struct RemoteScorer {
    pub(super) endpoint: Endpoint,
    pub(super) served_name: String,
    pub(super) tokenizer: TextTokenizer,
    chat: ChatTemplate,
    info: ModelInfo,
    pub(super) settings: RemoteSettings,
    /// Found on the first label request.
    pub(super) routes: Option<Routes>,
    counts: LabelCounts,
    /// The id each text decodes from, where one id alone does (`None`: several do);
    /// for engines that name tokens by text, a token is identified only where its text
    /// is one id's alone.
    text_owners: OnceLock<HashMap<String, Option<u32>>>,
    /// Whether the engine names tokens by id when asked (`return_tokens_as_token_ids`);
    /// found on the first request that needs it.
    pub(super) ids_named: Option<bool>,
    /// The engine takes prompts as text only (llama-cpp-python): each prompt's ids are
    /// decoded to text for it, and its echo is checked token by token against them.
    pub(super) text_prompts: bool,
    /// The engine answers a list of prompts in one echo request (until it refuses).
    echo_lists: std::sync::atomic::AtomicBool,
    progress: Progress,
}

impl RemoteScorer {
    pub(super) fn new(
        endpoint: Endpoint,
        served_name: String,
        tokenizer: TextTokenizer,
        chat: ChatTemplate,
        info: ModelInfo,
        settings: RemoteSettings,
        progress: Progress,
    ) -> Self {
        Self {
            endpoint,
            served_name,
            tokenizer,
            chat,
            info,
            settings,
            routes: None,
            counts: LabelCounts::default(),
            text_owners: OnceLock::new(),
            ids_named: None,
            text_prompts: false,
            echo_lists: std::sync::atomic::AtomicBool::new(true),
            progress,
        }
    }

    /// What the engine was found to give (after the first label request).
    pub fn routes(&self) -> Option<Routes> {
        self.routes
    }

    /// How the labels so far were answered.
    pub fn label_counts(&self) -> &LabelCounts {
        &self.counts
    }

    /// The requests made and the routes taken so far.
    pub fn usage_counts(&self) -> Usage {
        let counters = &self.endpoint.counters;
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Usage {
            requests: load(&counters.requests),
            retries: load(&counters.retries),
            failures: load(&counters.failures),
            top_k: load(&self.counts.top_k),
            echo: load(&self.counts.echo),
            bounded: load(&self.counts.bounded),
            restricted: load(&self.counts.restricted),
        }
    }

    /// One line on the requests made and the routes taken, for the end of a run.
    pub fn summary(&self) -> String {
        self.summary_of(&self.usage_counts())
    }

    /// [`Self::summary`] of given counts (a whole run's, or one call's).
    pub fn summary_of(&self, usage: &Usage) -> String {
        let route = match self.routes {
            None => "no labels scored".to_string(),
            Some(r) => format!(
                "labels by top-{} {}, {}by echo {}{}{}",
                self.settings.top_k,
                usage.top_k,
                match (r.restricted, usage.restricted) {
                    (false, 0) => String::new(),
                    (_, n) => format!("by allowed_token_ids {n}, "),
                },
                usage.echo,
                match usage.bounded {
                    0 => String::new(),
                    n => format!(", bounded (top-k only) {n}"),
                },
                match (r.top_k, r.echo) {
                    (true, true) => "",
                    (true, false) => " (the engine gives no echo log-probs)",
                    (false, _) => " (the engine gives no top-K log-probs)",
                }
            ),
        };
        format!(
            "backend {}: {} requests, {} retried, {} failed; {route}",
            self.endpoint.base(),
            usage.requests,
            usage.retries,
            usage.failures,
        )
    }

    fn render_text(&self, prompt: &Prompt) -> Result<String> {
        templating::render_text(&self.chat, &self.tokenizer, &self.info.name, prompt)
    }

    pub(super) fn prompt_ids(&self, prompt: &Prompt) -> Result<Vec<u32>> {
        let ids = self.encode_prompt(prompt)?.input;
        if ids.is_empty() {
            crate::bad_request!("empty prompt");
        }
        Ok(ids)
    }

    pub(super) fn completion(&self, body: Value) -> Result<Value> {
        self.endpoint.post("/completions", &body).map_err(|e| {
            self.endpoint
                .counters
                .failures
                .fetch_add(1, Ordering::Relaxed);
            self.refusal(e)
        })
    }

    /// A refused probe (a field or route the engine lacks, tried to find what it
    /// gives) is not a failed request.
    pub(super) fn forgive_probe(&self) {
        let failures = &self.endpoint.counters.failures;
        let _ = failures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// An engine's refusal as an error: a 4xx other than busy is the request's fault
    /// (e.g. a prompt longer than the engine's window), anything else the engine's.
    fn refusal(&self, error: CallError) -> anyhow::Error {
        match error.status() {
            Some(400 | 413 | 422) => crate::engine::EngineError::BadRequest(format!(
                "the engine refused a request of model '{}': {error}",
                self.served_name
            ))
            .into(),
            _ => anyhow!(error),
        }
    }

    /// The body of a completion request for `ids`.
    pub(super) fn body(&self, ids: &[u32], ids_named: bool, fields: Value) -> Result<Value> {
        let prompt = match self.text_prompts {
            true => json!(self.tokenizer.decode(ids, false)?),
            false => json!(ids),
        };
        let mut body = json!({
            "model": self.served_name,
            "prompt": prompt,
            "temperature": 0,
        });
        if ids_named {
            body["return_tokens_as_token_ids"] = json!(true);
        }
        if let (Value::Object(body), Value::Object(fields)) = (&mut body, fields) {
            body.extend(fields);
        }
        Ok(body)
    }

    /// The next position's alternatives after `ids`, or `None` where the engine gives
    /// none.
    fn top_k(&self, ids: &[u32], routes: Routes) -> Result<Option<Vec<(TokenKey, f64)>>> {
        let body = self.body(
            ids,
            routes.ids,
            json!({"max_tokens": 1, "logprobs": self.settings.top_k}),
        )?;
        Ok(replies::next_token_alternatives(&self.completion(body)?))
    }

    /// `log P(id | ids)` from one token generated with only `id` allowed (vLLM's
    /// `allowed_token_ids`), as the engine reports the generated token's log-probability;
    /// `None` where it generated another token (it ignores the field), reported none, or
    /// reported one its own top-K shows is not of the whole distribution (see
    /// [`from_whole_distribution`]), so that every token of every label is checked.
    fn restricted(&self, ids: &[u32], id: u32, routes: Routes) -> Result<Option<f64>> {
        let k = self.settings.top_k;
        let body = self.body(
            ids,
            routes.ids,
            json!({"max_tokens": 1, "logprobs": k, "allowed_token_ids": [id]}),
        )?;
        let answer = self.completion(body)?;
        let Some(generated) = replies::positions(&answer).and_then(|p| p.into_iter().next()) else {
            return Ok(None);
        };
        let is_id = |key: &TokenKey| match key {
            TokenKey::Id(got) => *got == id,
            TokenKey::Text(text) => self.owner_of(text) == Some(id),
        };
        if !is_id(&generated.token) {
            return Ok(None);
        }
        let others: Vec<f64> = generated
            .top
            .iter()
            .filter(|(key, _)| !is_id(key))
            .map(|(_, lp)| *lp)
            .collect();
        Ok(generated
            .logprob
            .filter(|&lp| from_whole_distribution(lp, &others, k)))
    }

    /// `log P(label | ids)` by restricted generations, one per token; the first token from
    /// `alternatives` (the next position's top-K) where it is listed there. `None` where
    /// one token's answer cannot be trusted ([`Self::restricted`]): the label then goes
    /// by echo.
    fn restricted_label(
        &self,
        ids: &[u32],
        label: &[u32],
        alternatives: Option<&[(TokenKey, f64)]>,
        routes: Routes,
    ) -> Result<Option<f64>> {
        let Some((&first, rest)) = label.split_first() else {
            return Ok(None);
        };
        let listed = alternatives.and_then(|a| self.find(a, first));
        let mut total = match listed {
            Some(lp) => lp,
            None => match self.restricted(ids, first, routes)? {
                Some(lp) => lp,
                None => return Ok(None),
            },
        };
        let mut prefix = ids.to_vec();
        prefix.push(first);
        for &id in rest {
            match self.restricted(&prefix, id, routes)? {
                Some(lp) => total += lp,
                None => return Ok(None),
            }
            prefix.push(id);
        }
        Ok(Some(total))
    }

    /// `log P(tokens | ids)` by echo, token by token; `None` where the engine echoes no
    /// log-probabilities.
    fn echo(&self, ids: &[u32], tokens: &[u32], routes: Routes) -> Result<Option<Vec<f64>>> {
        let mut sequence = ids.to_vec();
        sequence.extend_from_slice(tokens);
        let body = self.body(
            &sequence,
            routes.ids,
            json!({"max_tokens": 1, "logprobs": 1, "echo": true}),
        )?;
        let answer = self.completion(body)?;
        self.read_echo(ids, tokens, replies::echoed(&answer))
    }

    /// `log P(tokens | ids)` for several `tokens` after one prompt: one request with the
    /// list of sequences where the engine takes a list of prompts (an engine's batching
    /// and prefix cache then compute the shared prompt once), else one request each.
    fn echo_each(
        &self,
        ids: &[u32],
        labels: &[&[u32]],
        routes: Routes,
    ) -> Result<Vec<Option<Vec<f64>>>> {
        let batched =
            labels.len() > 1 && !self.text_prompts && self.echo_lists.load(Ordering::Relaxed);
        if batched {
            let sequences: Vec<Vec<u32>> =
                labels.iter().map(|label| [ids, label].concat()).collect();
            let mut body = self.body(
                ids,
                routes.ids,
                json!({"max_tokens": 1, "logprobs": 1, "echo": true}),
            )?;
            body["prompt"] = json!(sequences);
            match self.completion(body) {
                Ok(answer) => {
                    let found = replies::echoed_choices(&answer, labels.len());
                    if found.iter().all(Option::is_some) {
                        return found
                            .into_iter()
                            .zip(labels)
                            .map(|(echoed, label)| self.read_echo(ids, label, echoed))
                            .collect();
                    }
                    // Fewer answers than prompts: this engine reads one prompt a call.
                    self.echo_lists.store(false, Ordering::Relaxed);
                }
                Err(error)
                    if crate::engine::error_kind(&error)
                        == crate::engine::ErrorKind::BadRequest
                        || mentions(&error, "validation error") =>
                {
                    self.forgive_probe();
                    self.echo_lists.store(false, Ordering::Relaxed);
                }
                Err(error) => return Err(error),
            }
        }
        labels
            .iter()
            .map(|label| self.echo(ids, label, routes))
            .collect()
    }

    /// The log-probs of `tokens` (sent after `ids`) in an echo; `None` where the engine
    /// echoed no log-probabilities.
    fn read_echo(
        &self,
        ids: &[u32],
        tokens: &[u32],
        echoed: Option<Echoed>,
    ) -> Result<Option<Vec<f64>>> {
        let mut sequence = ids.to_vec();
        sequence.extend_from_slice(tokens);
        let Some(Echoed {
            tokens: echoed,
            logprobs,
        }) = echoed
        else {
            return Ok(None);
        };
        let by_id = echoed.iter().any(|t| matches!(t, TokenKey::Id(_)));
        let range = match by_id {
            true => {
                if logprobs.len() < sequence.len() {
                    return Ok(None);
                }
                for (at, (&sent, got)) in sequence.iter().zip(&echoed).enumerate().skip(1) {
                    if let TokenKey::Id(got) = got {
                        if *got != sent {
                            bail!(
                                "the engine read token {got} at position {at} where {sent} was \
                                 sent: it re-tokenises prompts, so its log-probabilities would \
                                 belong to other tokens"
                            );
                        }
                    }
                }
                ids.len()..sequence.len()
            }
            false if logprobs.len() != echoed.len() => return Ok(None),
            false => self.tail_by_text(&sequence, tokens.len(), &echoed)?,
        };
        logprobs[range]
            .iter()
            .enumerate()
            .map(|(k, lp)| {
                lp.ok_or_else(|| anyhow!("the engine gave no log-probability for label token {k}"))
            })
            .collect::<Result<Vec<f64>>>()
            .map(Some)
    }

    /// Where the last `count` tokens of `sequence` are in an echo that names tokens by
    /// text: the echoed texts are matched from the end (after the one generated token,
    /// or none), the token before them included, since engines leave positions out
    /// (llama-cpp-python drops every token whose id is its BOS id) or add them at the
    /// start. A tail that does not read as the tokens sent is an error naming them.
    fn tail_by_text(
        &self,
        sequence: &[u32],
        count: usize,
        echoed: &[TokenKey],
    ) -> Result<std::ops::Range<usize>> {
        let context = count + 1;
        let wanted: Vec<String> = sequence[sequence.len().saturating_sub(context)..]
            .iter()
            .map(|&id| self.tokenizer.decode(&[id], false))
            .collect::<Result<_>>()?;
        let matches = |end: usize| {
            end >= wanted.len()
                && echoed[end - wanted.len()..end].iter().zip(&wanted).all(
                    |(got, ours)| match got {
                        TokenKey::Text(got) => ours.contains('\u{fffd}') || got == ours,
                        TokenKey::Id(_) => false,
                    },
                )
        };
        for generated in [1, 0] {
            let Some(end) = echoed.len().checked_sub(generated) else {
                continue;
            };
            if matches(end) {
                return Ok(end - count..end);
            }
        }
        let last: Vec<&TokenKey> = echoed.iter().rev().take(context + 1).rev().collect();
        bail!(
            "the engine's echo does not end with the tokens sent: expected {wanted:?} before \
             the generated token, it ended with {last:?}; it tokenises the text differently, \
             so its log-probabilities would belong to other tokens"
        )
    }

    /// An engine given the prompt as text read it as the tokens sent: each echoed token's
    /// text is the local decoding of the id sent there (where that is whole characters).
    pub(super) fn check_echoed_texts(&self, sent: &[u32], echoed: &[TokenKey]) -> Result<()> {
        for (at, &id) in sent.iter().enumerate() {
            let Some(TokenKey::Text(got)) = echoed.get(at) else {
                continue;
            };
            let ours = self.tokenizer.decode(&[id], false)?;
            if !ours.contains('\u{fffd}') && *got != ours {
                bail!(
                    "the engine, given the prompt as text, read {got:?} at token {at} where \
                     the local tokenizer has {ours:?}: it tokenises the text differently, so \
                     its log-probabilities would belong to other tokens"
                );
            }
        }
        if echoed.len() < sent.len() {
            bail!(
                "the engine, given the prompt as text, echoed {} tokens for {} sent",
                echoed.len(),
                sent.len()
            );
        }
        Ok(())
    }

    /// The one token of the vocabulary that decodes to `text`, if only one does.
    pub(super) fn owner_of(&self, text: &str) -> Option<u32> {
        let owners = self.text_owners.get_or_init(|| {
            let mut owners: HashMap<String, Option<u32>> = HashMap::new();
            for id in 0..self.tokenizer.vocab_size() as u32 {
                if let Ok(text) = self.tokenizer.decode(&[id], false) {
                    owners
                        .entry(text)
                        .and_modify(|owner| *owner = None)
                        .or_insert(Some(id));
                }
            }
            owners
        });
        owners.get(text).copied().flatten()
    }

    /// A one-token label's log-prob among the alternatives, where it can be told apart.
    fn find(&self, alternatives: &[(TokenKey, f64)], id: u32) -> Option<f64> {
        let text = self.tokenizer.decode(&[id], false).ok();
        alternatives.iter().find_map(|(key, lp)| match key {
            TokenKey::Id(got) => (*got == id).then_some(*lp),
            TokenKey::Text(got) => {
                let text = text.as_deref()?;
                (got == text && self.owner_of(text) == Some(id)).then_some(*lp)
            }
        })
    }

    /// Score one prompt's labels with the routes found.
    fn score(&self, ids: &[u32], labels: &[Vec<u32>], routes: Routes) -> Result<LabelResult> {
        let mut scores: Vec<Option<f64>> = vec![None; labels.len()];
        let mut alternatives = None;
        let asks_top_k = labels.iter().any(|l| l.len() == 1) || routes.restricted;
        if routes.top_k && asks_top_k {
            alternatives = self.top_k(ids, routes)?;
            if let Some(alternatives) = &alternatives {
                for (slot, label) in scores.iter_mut().zip(labels) {
                    if let [id] = label.as_slice() {
                        *slot = self.find(alternatives, *id);
                    }
                }
            }
        }
        let bound = alternatives
            .as_ref()
            .and_then(|a| a.iter().map(|a| a.1).reduce(f64::min));
        // The rest by restricted generation where it is trusted, token by token (a
        // label's first token from the top-K where it is listed there).
        let mut restricted = vec![false; labels.len()];
        if routes.restricted {
            for (index, label) in labels.iter().enumerate() {
                if scores[index].is_none() {
                    scores[index] =
                        self.restricted_label(ids, label, alternatives.as_deref(), routes)?;
                    restricted[index] = scores[index].is_some();
                }
            }
        }
        let mut echoed = Vec::new().into_iter();
        if routes.echo {
            let missing: Vec<&[u32]> = scores
                .iter()
                .zip(labels)
                .filter(|(slot, _)| slot.is_none())
                .map(|(_, label)| label.as_slice())
                .collect();
            if !missing.is_empty() {
                echoed = self.echo_each(ids, &missing, routes)?.into_iter();
            }
        }
        let mut results = Vec::with_capacity(labels.len());
        for ((slot, label), restricted) in scores.into_iter().zip(labels).zip(restricted) {
            let logprob = match slot {
                Some(lp) => {
                    let count = match restricted {
                        true => &self.counts.restricted,
                        false => &self.counts.top_k,
                    };
                    count.fetch_add(1, Ordering::Relaxed);
                    lp
                }
                None if routes.echo => {
                    self.counts.echo.fetch_add(1, Ordering::Relaxed);
                    let values = echoed.next().flatten().ok_or_else(|| {
                        anyhow!("the engine stopped echoing prompt log-probabilities")
                    })?;
                    values.iter().sum()
                }
                None => match (self.settings.accept_top_k_only, bound, label.len()) {
                    (true, Some(bound), 1) => {
                        self.counts.bounded.fetch_add(1, Ordering::Relaxed);
                        bound
                    }
                    _ => bail!(
                        "label tokens {label:?} are not among the engine's top {} and the \
                         engine gives no echo log-probabilities to score them exactly",
                        self.settings.top_k
                    ),
                },
            };
            results.push(LabelScore {
                tokens: label.clone(),
                logprob,
            });
        }
        Ok(LabelResult {
            labels: results,
            prompt_tokens: ids.len(),
        })
    }

    /// Find the routes on the first prompt: top-K (with ids if the engine takes the
    /// field), then echo; refuse an engine that gives neither (or top-K alone, unless
    /// accepted).
    fn detect(&mut self, ids: &[u32], label: &[u32]) -> Result<Routes> {
        let mut routes = Routes {
            top_k: true,
            echo: true,
            ids: true,
            restricted: false,
        };
        let first = match self.top_k(ids, routes) {
            Err(error) if refuses_token_ids(&error) => {
                self.forgive_probe();
                self.text_prompts = true;
                self.progress.note(&format!(
                    "note: the engine takes no token ids as prompts for model '{}': prompts \
                     are sent as text, and each echo is checked against the local tokens",
                    self.served_name
                ));
                self.top_k(ids, routes)
            }
            other => other,
        };
        let first = match first {
            Err(error) if mentions(&error, "return_tokens_as_token_ids") => {
                self.forgive_probe();
                routes.ids = false;
                self.top_k(ids, routes)?
            }
            other => other?,
        };
        match &first {
            None => routes.top_k = false,
            Some(alternatives) => {
                routes.ids = alternatives
                    .iter()
                    .any(|(k, _)| matches!(k, TokenKey::Id(_)));
                self.ids_named = Some(routes.ids);
            }
        }
        let mut echo_refusal = String::new();
        // The label's first token by a route already trusted, to check the restricted one.
        let mut reference = match (&first, label) {
            (Some(alternatives), [id, ..]) => self.find(alternatives, *id),
            _ => None,
        };
        routes.echo = match self.echo(ids, label, routes) {
            Ok(Some(values)) => {
                // The two routes must tell the same story: an engine whose echo is
                // misaligned (positions shifted, another token's log-prob) is caught here
                // on a label the top-K also gives.
                let listed = match (&first, label) {
                    (Some(alternatives), [id]) => self.find(alternatives, *id),
                    _ => None,
                };
                match listed {
                    Some(listed) if (listed - values[0]).abs() > ROUTES_AGREE => {
                        echo_refusal = format!(
                            " (its echo gives log P = {:.6} for label token {} where its \
                             top-K gives {listed:.6}: the echo's positions are not the tokens \
                             sent)",
                            values[0], label[0]
                        );
                        false
                    }
                    _ => {
                        reference = reference.or(values.first().copied());
                        true
                    }
                }
            }
            Ok(None) => false,
            // An engine that refuses `echo` outright.
            Err(error)
                if crate::engine::error_kind(&error) == crate::engine::ErrorKind::BadRequest =>
            {
                self.forgive_probe();
                echo_refusal = format!(" (it answered: {error:#})");
                false
            }
            Err(error) => return Err(error),
        };
        routes.restricted = match (routes.top_k, reference, label.first()) {
            (true, Some(reference), Some(&id)) => match self.restricted(ids, id, routes) {
                Ok(found) => found.is_some_and(|lp| (lp - reference).abs() <= ROUTES_AGREE),
                Err(error)
                    if crate::engine::error_kind(&error)
                        == crate::engine::ErrorKind::BadRequest =>
                {
                    self.forgive_probe();
                    false
                }
                Err(error) => return Err(error),
            },
            _ => false,
        };
        let url = self.endpoint.base().to_string();
        match (routes.top_k, routes.echo) {
            (false, false) => bail!(
                "the engine at {url} gives no log-probabilities for model '{}': neither the \
                 next position's top-K (`logprobs` in /completions) nor the prompt's (`echo` \
                 with `logprobs`); exact label probabilities need one of them",
                self.served_name
            ),
            (true, false) if !self.settings.accept_top_k_only => bail!(
                "the engine at {url} gives the next position's top-{} log-probabilities but \
                 not the prompt's (`echo` with `logprobs`){echo_refusal}: a label outside the \
                 top-{} could not be scored exactly. Pass --accept-top-k-only to accept \
                 bounded probabilities for such labels (the outputs then say `[top-k only]`)",
                self.settings.top_k,
                self.settings.top_k
            ),
            (true, false) => {
                self.info.name = format!("{} [top-k only]", self.info.name);
            }
            _ => {}
        }
        Ok(routes)
    }

    /// Compare this tokenizer with the engine's own (`/tokenize`, where it has one) on a
    /// probe text (the chat template's tags included where the model has one): a
    /// different tokenizer would make every probability another model's answer to other
    /// tokens.
    pub fn check_tokens(&self) -> Result<()> {
        let probe = "Which summary is more coherent, A or B? Answer: A. Scores 1, 5, 10; \
                     caf\u{e9} na\u{ef}ve \u{6771}\u{4eac}\n\t(x+y)^2 <= 3.14";
        let text = match self.chat.is_chat() {
            true => self.chat.render(Some("You are a judge."), probe, " A"),
            false => probe.to_string(),
        };
        let ours = self.tokenizer.encode_prompt(&text)?;
        // Each engine's route, tried in turn: vLLM, SGLang and our `serve` (`prompt`);
        // llama.cpp's server (`content`, the same path); TGI (`inputs`, a list of
        // tokens); llama-cpp-python (`/extras/tokenize`, `input`).
        let attempts = [
            (
                "/tokenize",
                json!({"model": self.served_name, "prompt": text}),
            ),
            ("/tokenize", json!({"content": text, "add_special": true})),
            (
                "/tokenize",
                json!({"inputs": text, "add_special_tokens": true}),
            ),
            (
                "/extras/tokenize",
                json!({"model": self.served_name, "input": text}),
            ),
        ];
        let mut theirs = None;
        for (route, body) in &attempts {
            match self.endpoint.post_at_root(route, body) {
                Ok(answer) => {
                    // An empty list for a non-empty probe: the body was not understood.
                    if let Some(tokens) = replies::tokenized(&answer).filter(|t| !t.is_empty()) {
                        theirs = Some((*route, tokens));
                        break;
                    }
                }
                Err(error) if matches!(error.status(), Some(400 | 404 | 405 | 422)) => {}
                Err(error) => return Err(anyhow!(error)),
            }
        }
        let Some((route, theirs)) = theirs else {
            self.progress.note(&format!(
                "note: the engine has no tokenize route this client knows (/tokenize, \
                 /extras/tokenize) for model '{}': prompts are sent as this tokenizer's ids, \
                 unchecked against the engine's",
                self.served_name
            ));
            return Ok(());
        };
        if theirs != ours {
            let at = theirs
                .iter()
                .zip(&ours)
                .position(|(a, b)| a != b)
                .unwrap_or(theirs.len().min(ours.len()));
            bail!(
                "token mismatch: the engine's tokenizer ({route}) and the local one \
                 (--tokenizer) differ at token {at} of a probe text (engine {:?}, local {:?}; \
                 {} and {} tokens): give --tokenizer the served model's own tokenizer",
                theirs.get(at),
                ours.get(at),
                theirs.len(),
                ours.len()
            );
        }
        Ok(())
    }

    /// Run `work` on every index in `order`, up to the concurrency bound at once, handing
    /// each answer to `on_result` on this thread as it arrives; the first error stops
    /// the rest.
    pub(super) fn in_parallel<T: Send>(
        &self,
        order: &[usize],
        work: &(dyn Fn(usize) -> Result<T> + Sync),
        on_result: &mut dyn FnMut(usize, T) -> Result<()>,
    ) -> Result<()> {
        let queue = Mutex::new(order.iter().copied());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let workers = self.settings.concurrency.clamp(1, order.len().max(1));
        std::thread::scope(|scope| {
            let (sender, receiver) = mpsc::channel::<(usize, Result<T>)>();
            for _ in 0..workers {
                let sender = sender.clone();
                let (queue, stop) = (&queue, &stop);
                scope.spawn(move || loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some(index) = next else { return };
                    if sender.send((index, work(index))).is_err() {
                        return;
                    }
                });
            }
            drop(sender);
            let mut outcome = Ok(());
            for (index, result) in receiver {
                let handed = result.and_then(|value| on_result(index, value));
                if let Err(error) = handed {
                    stop.store(true, Ordering::Relaxed);
                    outcome = Err(error);
                    break;
                }
            }
            outcome
        })
    }
}

impl RemoteScorer {
    /// [`Self::in_parallel`] over every index of `0..count` in `order`, the answers
    /// collected in index order; `what` names an answer missing.
    pub(super) fn collect_in_parallel<T: Send>(
        &self,
        order: &[usize],
        count: usize,
        work: &(dyn Fn(usize) -> Result<T> + Sync),
        what: &str,
    ) -> Result<Vec<T>> {
        let mut slots: Vec<Option<T>> = (0..count).map(|_| None).collect();
        self.in_parallel(order, work, &mut |index, value| {
            slots[index] = Some(value);
            Ok(())
        })?;
        slots
            .into_iter()
            .map(|slot| slot.with_context(|| format!("{what} got no answer")))
            .collect()
    }
}

/// Whether an engine refused a prompt of token ids: a refusal or a validation error
/// naming `prompt` (llama-cpp-python's server answers 500 with pydantic's "Input should
/// be a valid string": its prompts are strings).
pub(super) fn refuses_token_ids(error: &anyhow::Error) -> bool {
    let refused = crate::engine::error_kind(error) == crate::engine::ErrorKind::BadRequest
        || mentions(error, "validation error");
    refused && mentions(error, "prompt")
}

/// Whether an error's message names `field` (an engine refusing a field it does not
/// know).
fn mentions(error: &anyhow::Error, field: &str) -> bool {
    format!("{error:#}").contains(field)
}

impl Scorer for RemoteScorer {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        Ok(RenderedPrompt {
            input: self.render_text(prompt)?,
            decoder_prefix: String::new(),
        })
    }

    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        crate::engine::templating::encode_prompt(
            &self.chat,
            &self.tokenizer,
            &self.info.name,
            prompt,
        )
    }

    fn report_to(&mut self, progress: Progress) {
        self.progress = progress;
    }

    fn usage(&self) -> Option<Usage> {
        Some(self.usage_counts())
    }

    fn usage_line(&self, usage: &Usage) -> Option<String> {
        (usage.requests > 0).then(|| self.summary_of(usage))
    }

    fn encode_prompts(&self, prompts: &[&Prompt]) -> Vec<Result<TokenPrompt>> {
        crate::engine::templating::encode_prompts(
            &self.chat,
            &self.tokenizer,
            &self.info.name,
            prompts,
        )
    }

    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        templating::encode_label(&self.tokenizer, label)
    }

    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut prompts = Vec::with_capacity(requests.len());
        let mut labels = Vec::with_capacity(requests.len());
        for request in requests {
            prompts.push(self.prompt_ids(&request.prompt)?);
            let ids: Vec<Vec<u32>> = request
                .labels
                .iter()
                .map(|l| self.encode_label(l))
                .collect::<Result<_>>()?;
            labels.push(ids);
        }
        let mut order: Vec<usize> = (0..requests.len()).collect();
        order.sort_by(|&a, &b| prompts[a].cmp(&prompts[b]));
        let first = order[0];
        let routes = match self.routes {
            Some(routes) => routes,
            None => {
                let label = labels[first]
                    .first()
                    .context("a label request without labels")?;
                let routes = self.detect(&prompts[first], label)?;
                self.routes = Some(routes);
                routes
            }
        };
        let this = &*self;
        this.in_parallel(
            &order,
            &|index| this.score(&prompts[index], &labels[index], routes),
            on_result,
        )
    }

    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>> {
        let mut items = Vec::with_capacity(requests.len());
        for request in requests {
            let ids = self.prompt_ids(&request.prompt)?;
            let tokens = self.tokenizer.encode(&request.continuation)?;
            items.push((ids, tokens));
        }
        let routes = Routes {
            top_k: false,
            echo: true,
            ids: self.routes.is_some_and(|r| r.ids),
            restricted: false,
        };
        let order: Vec<usize> = (0..items.len()).collect();
        let this = &*self;
        this.collect_in_parallel(
            &order,
            items.len(),
            &|index| {
                let (ids, tokens) = &items[index];
                if tokens.is_empty() {
                    return Ok(ContinuationResult {
                        tokens: Vec::new(),
                        token_logprobs: Vec::new(),
                    });
                }
                let token_logprobs = this.echo(ids, tokens, routes)?.ok_or_else(|| {
                    anyhow!(
                        "the engine gives no echo log-probabilities: continuations cannot be \
                         scored on it"
                    )
                })?;
                Ok(ContinuationResult {
                    tokens: tokens.clone(),
                    token_logprobs,
                })
            },
            "a continuation",
        )
    }

    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        Some(&self.tokenizer)
    }

    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        prefix_cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        // The engine keeps its own prefix cache.
        let _ = prefix_cache;
        self.generate_all(requests, sink)
    }

    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        templating::conversation_prompt(&self.chat, &self.info.name, messages)
    }
}

impl Drop for RemoteScorer {
    fn drop(&mut self) {
        if let Some(line) = self.usage_line(&self.usage_counts()) {
            self.progress.note(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restricted_answer_must_fit_the_whole_distributions_top_k() {
        let top3 = [-1.0, -2.0, -3.0];
        // Outside the top-3: below its least value (within the routes' agreement).
        assert!(from_whole_distribution(-7.5, &top3, 3));
        assert!(from_whole_distribution(-3.0005, &top3, 3));
        assert!(!from_whole_distribution(-2.5, &top3, 3));
        // Among the top-3: two others.
        assert!(from_whole_distribution(-2.5, &top3[..2], 3));
        // The restricted distribution: the token alone, or others at -inf / vLLM's -9999.
        assert!(!from_whole_distribution(0.0, &[], 3));
        assert!(!from_whole_distribution(0.0, &[f64::NEG_INFINITY; 3], 3));
        assert!(!from_whole_distribution(0.0, &[-9999.0; 3], 3));
        // Too few alternatives to judge.
        assert!(!from_whole_distribution(-7.5, &top3[..1], 3));
    }
}
