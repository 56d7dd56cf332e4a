//! Generation on a llama-family decoder: the engine's one generation route
//! ([`crate::engine::Scorer::generate_each`]), for methods and the OpenAI routes alike.
//!
//! 1. **Admission in prefix order.** Generating requests wait sorted by their prompt's
//!    tokens, so neighbours share their longest prefixes. Up to `max_batch_rows` rows run
//!    at once, and no more than the key/value budget (`max_arena_bytes`, 4 GiB by
//!    default, the figure the memory plan counts) holds with every row at its prompt
//!    (a start shared with the row before it in the same wave counted once) and whole
//!    token bound, beside the prefix cache's bytes; when a quarter of the slots are free
//!    (or none run), the next waiting prompts are admitted together. The prefix cache a
//!    call keeps for itself (when its caller gives none) holds at most half that budget.
//!    `engine::memory::generation_kv_bytes` counts a workload the same way.
//! 2. **Prompts through the prefix trie.** The admitted prompts (and, in the first wave,
//!    every request that only scores its prompt) form one trie, cut where the prefix
//!    cache already holds their start: shared prefixes (a document's article for all its
//!    candidates) are computed once, and every node computed goes into the prefix cache,
//!    so later waves start from it. Distributions are read at every scored prompt
//!    position and at each generating prompt's last one.
//! 3. **Decoding, all rows in one pass.** Each step samples every row's next token,
//!    checks its ends (end-of-sequence token, a stop string, the token bound, the
//!    window) and feeds the unfinished rows' tokens in one forward pass. A row's own keys
//!    and values grow in blocks ([`KvBlocks`]), never by joining the whole cache at each
//!    token; stop strings are looked for only when a token could complete one, and the
//!    text is decoded whole only then and at the end.
//! 4. **Follow-ups from the row's own state.** A finished row goes to the sink at once,
//!    which may answer a label request continuing it (a judge's verdict after its
//!    feedback and marker). Its tokens are matched against the row's (prompt and fed
//!    tokens); the keys and values up to where they part are the row's own, and only the
//!    rest (the marker, typically) runs, in the next pass beside the decoding rows.
//!
//! A position's answer depends only on the tokens before it: which pass computes it
//! moves its last bits at most (the batch-invariance tests show the text is the same).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor};

use super::pieces::TokenPieces;
use super::prefix_cache::{slice_kv, CachedPrefix, PrefixCache};
use super::tree_eval::{EvalStats, TreeEvaluator};
use super::trie::{QueryAt, TokenTrie};
use super::{first_stop, DecoderScorer};
use crate::arch::llama::{KvCache, RowGroup};
use crate::engine::completion::{
    CompletionRequest, CompletionResult, ScoredToken, TokenLogprob, MAX_TOP_LOGPROBS,
};
use crate::engine::generation::{unscored, GenerationSink};
use crate::engine::memory::{held_positions, own_prefix_cache_bytes, RowExtent};
use crate::engine::request::{FinishReason, LabelRequest, LabelResult, LabelScore};
use crate::engine::sampling::TokenSampler;
use crate::engine::scorer::Scorer;

/// What the generation route did: the figures `bench generate` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens of the generating and scored requests.
    pub prompt_tokens: usize,
    /// Prompt tokens run through the model (the rest shared in the trie or found in the
    /// prefix cache).
    pub prompt_tokens_computed: usize,
    /// Tokens generated (end-of-sequence tokens included).
    pub generated_tokens: usize,
    /// Decoding passes, and the rows they carried (their mean is the batch a step used).
    pub decode_steps: usize,
    pub decode_rows: usize,
    /// The most key/value bytes the admission counted at once (rows at their prompts and
    /// token bounds, the prefix cache at its bytes): at most the budget, `max_arena_bytes`,
    /// unless one row alone exceeds it.
    pub peak_kv_bytes: usize,
    /// Whether decoding rows kept their segments' keys tiled for the attention kernel
    /// (where the key/value budget held them; see the admission).
    pub tiled_keys: bool,
    /// Follow-up label reads, and the tokens they ran (what the rows' own state lacked).
    pub follow_ups: usize,
    pub follow_up_tokens: usize,
    /// Seconds in the prompts' trie passes, in the decoding passes (follow-ups ride in
    /// them) and in sampling, ends and detokenisation between passes.
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub step_seconds: f64,
}

impl GenerationStats {
    fn add(&mut self, other: &GenerationStats) {
        self.prompt_tokens += other.prompt_tokens;
        self.prompt_tokens_computed += other.prompt_tokens_computed;
        self.generated_tokens += other.generated_tokens;
        self.decode_steps += other.decode_steps;
        self.decode_rows += other.decode_rows;
        self.peak_kv_bytes = self.peak_kv_bytes.max(other.peak_kv_bytes);
        self.tiled_keys |= other.tiled_keys;
        self.follow_ups += other.follow_ups;
        self.follow_up_tokens += other.follow_up_tokens;
        self.prefill_seconds += other.prefill_seconds;
        self.decode_seconds += other.decode_seconds;
        self.step_seconds += other.step_seconds;
    }
}

/// A next-token distribution given as logits.
pub(super) struct Distribution<'a> {
    logits: &'a [f32],
    log_normaliser: f64,
}

impl<'a> Distribution<'a> {
    pub(super) fn new(logits: &'a [f32]) -> Self {
        let max = logits
            .iter()
            .copied()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| (f64::from(l) - f64::from(max)).exp())
            .sum();
        Self {
            logits,
            log_normaliser: f64::from(max) + sum.ln(),
        }
    }

    fn logprob(&self, id: u32) -> f64 {
        self.logits
            .get(id as usize)
            .map_or(f64::NEG_INFINITY, |&l| f64::from(l) - self.log_normaliser)
    }

    /// The `k` most likely ids, most likely first (equal logits: lower id first).
    fn top(&self, k: usize) -> Vec<u32> {
        if k == 0 {
            return Vec::new();
        }
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (id, &logit) in self.logits.iter().enumerate() {
            if logit.is_nan() || (best.len() == k && logit <= best[k - 1].0) {
                continue;
            }
            let at = best.partition_point(|&(l, _)| l >= logit);
            best.insert(at, (logit, id as u32));
            best.truncate(k);
        }
        best.into_iter().map(|(_, id)| id).collect()
    }

    fn scored(&self, id: u32, top: usize, pieces: &mut TokenPieces) -> TokenLogprob {
        TokenLogprob {
            token: pieces.piece(id),
            logprob: Some(self.logprob(id)),
            top: self
                .top(top)
                .into_iter()
                .map(|alternative| ScoredToken {
                    token: pieces.piece(alternative),
                    logprob: self.logprob(alternative),
                })
                .collect(),
        }
    }
}

/// Keys and values of a row's generated tokens, in blocks whose lengths fall from first
/// to last like the bits of a binary counter: a new token's block is joined with the
/// last one while that one is no longer, so over a generation of `n` tokens each
/// position is copied about `log2(n)` times (joining the whole cache at every token
/// copied it `n` times) and attention reads at most `log2(n) + 1` segments.
#[derive(Default)]
struct KvBlocks {
    blocks: Vec<KvCache>,
}

impl KvBlocks {
    fn push(&mut self, kv: KvCache) -> Result<()> {
        self.blocks.push(kv);
        while let [.., earlier, last] = self.blocks.as_slice() {
            if earlier.len() > last.len() {
                break;
            }
            let joined = earlier.append(last)?;
            self.blocks.truncate(self.blocks.len() - 2);
            self.blocks.push(joined);
        }
        Ok(())
    }
}

/// `segment` with tiled keys of its own, the same copy for every row of a wave whose
/// prompt holds it (`wave`: each segment met so far and its copy).
fn with_wave_tiles(wave: &mut Vec<(KvCache, KvCache)>, segment: &KvCache) -> KvCache {
    if let Some((_, copy)) = wave
        .iter()
        .find(|(seen, _)| seen.shares_tiles_with(segment))
    {
        return copy.clone();
    }
    let copy = segment.with_own_tiles();
    wave.push((segment.clone(), copy.clone()));
    copy
}

/// How many tokens `a` and `b` start with alike.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The first `len` positions of key/value pieces (whole pieces shared, the last one cut).
fn truncate<'a>(pieces: impl Iterator<Item = &'a KvCache>, len: usize) -> Result<Vec<KvCache>> {
    let mut out = Vec::new();
    let mut left = len;
    for piece in pieces {
        if left == 0 {
            break;
        }
        let take = piece.len().min(left);
        out.push(slice_kv(piece, 0, take)?);
        left -= take;
    }
    if left > 0 {
        bail!("key/value pieces hold fewer than {len} positions");
    }
    Ok(out)
}

/// The trie nodes along `tokens` (the last one may hold more tokens than `tokens` has
/// left, when the sequence is a prefix of another).
fn node_path(trie: &TokenTrie, tokens: &[u32]) -> Result<Vec<usize>> {
    let mut path = Vec::new();
    let mut at = trie.root();
    let mut depth = 0;
    while depth < tokens.len() {
        let next = trie
            .node(at)
            .children
            .iter()
            .copied()
            .find(|&child| trie.node(child).tokens.first() == Some(&tokens[depth]))
            .context("a prompt is missing from its trie")?;
        path.push(next);
        depth += trie.node(next).tokens.len();
        at = next;
    }
    Ok(path)
}

/// What a distribution query of the prompt trie is for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Score the prompt token after this position.
    PromptToken,
    /// The first generated token.
    Generate,
}

/// A prompt after its trie pass.
#[derive(Default)]
struct Prefilled {
    /// Per prompt position: the token, scored where asked.
    scored: Vec<Option<TokenLogprob>>,
    /// The distribution after the prompt (generating requests).
    first_logits: Option<Vec<f32>>,
    /// The prompt's keys/values in pieces (generating requests).
    prefix: Vec<KvCache>,
    cached_prompt_tokens: usize,
}

/// One generating request on its way.
struct Row {
    index: usize,
    /// The admission wave (prompts of a wave share their starts through one trie).
    wave: usize,
    prompt: Prefilled,
    own: KvBlocks,
    /// Tokens fed after the prompt (their keys/values are in `own`).
    fed: Vec<u32>,
    logits: Vec<f32>,
    sampler: TokenSampler,
    /// Generated tokens that are text (not the end-of-sequence token).
    tokens: Vec<u32>,
    generated: Vec<TokenLogprob>,
    /// The text cut before a stop string (set when one ended the row).
    text: Option<String>,
    finish: Option<FinishReason>,
}

/// A label read continuing a finished row: `rows` run after `prefix`; label `l`'s token
/// `t` is read at `(queries[l][t].0, .1)` with target `.2`.
struct FollowUp {
    index: usize,
    prefix: Vec<KvCache>,
    rows: Vec<Vec<u32>>,
    queries: Vec<Vec<(usize, usize, u32)>>,
    labels: Vec<Vec<u32>>,
    prompt_tokens: usize,
}

/// The settings and tokens of one call, read by every step.
struct Call<'r> {
    requests: &'r [CompletionRequest],
    prompts: Vec<Vec<u32>>,
    /// Per request: the last bytes of its stop strings (a token that has none of them
    /// cannot complete one).
    stop_ends: Vec<Vec<u8>>,
}

impl DecoderScorer {
    /// See [`crate::engine::Scorer::generate_each`] and the module header.
    pub(super) fn generate_all(
        &mut self,
        requests: &[CompletionRequest],
        cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        let mut stats = EvalStats::default();
        let mut figures = GenerationStats::default();
        let outcome = self.run_generations(requests, cache, sink, &mut stats, &mut figures);
        self.stats.add(&stats);
        self.generation_stats.add(&figures);
        outcome
    }

    fn run_generations(
        &self,
        requests: &[CompletionRequest],
        given_cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
        stats: &mut EvalStats,
        figures: &mut GenerationStats,
    ) -> Result<()> {
        let window = self.model.config().context_length;
        let refs: Vec<&crate::engine::Prompt> = requests.iter().map(|r| &r.prompt).collect();
        let encoded = self.encode_prompts(&refs);
        let mut prompts = Vec::with_capacity(requests.len());
        let mut samplers = Vec::with_capacity(requests.len());
        for (index, (request, ids)) in requests.iter().zip(encoded).enumerate() {
            let at = || format!("completion {index}");
            if request.top_logprobs > MAX_TOP_LOGPROBS {
                crate::bad_request!(
                    "completion {index}: {} alternatives asked, at most {MAX_TOP_LOGPROBS}",
                    request.top_logprobs
                );
            }
            let ids = ids.with_context(at)?.input;
            if ids.is_empty() {
                crate::bad_request!("completion {index}: empty prompt");
            }
            if ids.len() > window || (request.max_tokens > 0 && ids.len() >= window) {
                crate::bad_request!(
                    "completion {index}: a prompt of {} tokens leaves no room in the model's \
                     context window of {window} tokens",
                    ids.len()
                );
            }
            prompts.push(ids);
            samplers.push(Some(
                TokenSampler::new(&request.sampling)
                    .and_then(|s| s.allowing(request.allowed_tokens.as_deref()))
                    .with_context(at)?,
            ));
        }
        let call = Call {
            requests,
            stop_ends: requests
                .iter()
                .map(|r| {
                    r.stop
                        .iter()
                        .filter_map(|s| s.as_bytes().last().copied())
                        .collect()
                })
                .collect(),
            prompts,
        };
        if self.model.activation_dtype() != DType::F32 && requests.iter().any(|r| r.prompt_logprobs)
        {
            crate::bad_request!(
                "prompt log-probabilities need a model computing in f32 (--precision f32): \
                 this one computes in {:?}",
                self.model.activation_dtype()
            );
        }
        // Later waves start from what earlier ones computed: a call without a prefix cache
        // of its caller's keeps one of its own.
        let mut own_cache;
        let cache = if given_cache.capacity() == 0 {
            own_cache =
                PrefixCache::new(own_prefix_cache_bytes(self.settings.budget.max_arena_bytes));
            &mut own_cache
        } else {
            given_cache
        };
        cache.begin(&self.info.fingerprint);

        let rows_at_once = self.settings.budget.max_batch_rows.max(1);
        // Keys and values of one position, all layers (f32 on the CPU's buffer path, the
        // activations' type elsewhere), and the most the running rows may hold.
        let config = self.model.config();
        let plain_position_bytes = config.num_layers
            * 2
            * config.num_kv_heads
            * config.head_dim
            * self.model.activation_dtype().size_in_bytes();
        let kv_budget = self.settings.budget.max_arena_bytes;
        // Prompts admitted together go through one trie: a row holds its prompt past what
        // it shares with the row before it in the same wave (rows stay in prompt order).
        // Prompts run alone (activations other than f32) share nothing.
        let sharing = self.model.activation_dtype() == DType::F32;
        let extent = |index: usize, previous: Option<usize>| RowExtent {
            prompt: call.prompts[index].len() as u64,
            shared_with_previous: previous.filter(|_| sharing).map_or(0, |p| {
                common_prefix(&call.prompts[p], &call.prompts[index]) as u64
            }),
            max_tokens: call.requests[index].max_tokens as u64,
        };
        let scoring: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].max_tokens == 0)
            .collect();
        let mut waiting: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].max_tokens > 0)
            .collect();
        waiting.sort_by(|&a, &b| call.prompts[a].cmp(&call.prompts[b]));
        waiting.reverse(); // popped from the end, in prompt order

        // Decoding rows keep their segments' keys tiled for the attention kernel (a third
        // copy of each position's keys and values; the kernel transposed them at every
        // step otherwise) where the budget holds the whole first wave that way beside a
        // full prefix cache: then the rows count at three copies. Where it does not (a
        // large judge near its budget), rows count at two and nothing is tiled, so that
        // tiling never costs a row its place in the batch.
        let tiled_position_bytes = plain_position_bytes / 2 * 3;
        let first_wave: Vec<usize> = waiting.iter().rev().take(rows_at_once).copied().collect();
        let first_wave_positions = held_positions(
            first_wave
                .iter()
                .enumerate()
                .map(|(k, &index)| extent(index, k.checked_sub(1).map(|p| first_wave[p]))),
        );
        let tiling = self.model.keeps_tiled_keys()
            && tiled_position_bytes
                .saturating_mul(first_wave_positions as usize)
                .saturating_add(cache.capacity())
                <= kv_budget;
        let position_bytes = if tiling {
            tiled_position_bytes
        } else {
            plain_position_bytes
        };
        figures.tiled_keys = tiling;
        let bytes_of = |positions: u64| position_bytes.saturating_mul(positions as usize);
        let mut pieces = TokenPieces::new(&self.tokenizer);
        let mut rows: Vec<Row> = Vec::new();
        let mut follow_ups: Vec<FollowUp> = Vec::new();
        let mut first_wave = true;
        let mut wave = 0;

        loop {
            // Admission: within the row budget and the key/value budget. The running rows
            // count at their prompts (shared starts once within a wave) and whole token
            // bounds ([`held_positions`], as the memory plan counts a workload), and the
            // prefix cache at its bytes: at each admission they fit the budget together.
            // (The cache's entries for running rows' prompts are those rows' own keys and
            // values, counted twice: what the call holds stays within the count.)
            let free = rows_at_once.saturating_sub(rows.len());
            let held = bytes_of(held_positions(rows.iter().enumerate().map(|(k, row)| {
                let previous = k
                    .checked_sub(1)
                    .map(|p| &rows[p])
                    .filter(|p| p.wave == row.wave);
                extent(row.index, previous.map(|p| p.index))
            })));
            let admit = if waiting.is_empty() || free == 0 {
                0
            } else if rows.is_empty() || free >= (rows_at_once / 4).max(1) {
                // The next rows in prompt order while they fit beside the running ones (one
                // at least when none runs, however large); the prefix cache gives up its
                // least recently used prefixes where it leaves an admitted row no room.
                let mut admit = 0;
                let mut bytes = held;
                let mut previous = None;
                for &index in waiting.iter().rev().take(free) {
                    let alone = rows.is_empty() && admit == 0;
                    let row = bytes_of(held_positions([extent(index, previous)]));
                    if bytes + row > kv_budget && !alone {
                        break;
                    }
                    bytes += row;
                    if bytes + cache.stats().bytes > kv_budget {
                        cache.shrink_to(kv_budget.saturating_sub(bytes));
                    }
                    admit += 1;
                    previous = Some(index);
                }
                if admit > 0 {
                    let counted = bytes + cache.stats().bytes;
                    figures.peak_kv_bytes = figures.peak_kv_bytes.max(counted);
                }
                admit
            } else {
                0
            };
            if admit > 0 || first_wave {
                let mut jobs: Vec<usize> = Vec::new();
                if first_wave {
                    jobs.extend(&scoring);
                }
                for _ in 0..admit {
                    jobs.extend(waiting.pop());
                }
                let clock = Instant::now();
                let before = stats.tokens;
                let mut prefilled = self.prefill(&call, &jobs, cache, &mut pieces, stats)?;
                figures.prefill_seconds += clock.elapsed().as_secs_f64();
                figures.prompt_tokens_computed += stats.tokens - before;
                figures.prompt_tokens += jobs
                    .iter()
                    .filter(|&&i| {
                        call.requests[i].prompt_logprobs || call.requests[i].max_tokens > 0
                    })
                    .map(|&i| call.prompts[i].len())
                    .sum::<usize>();
                // Tiled keys of the wave's prompt segments belong to the wave's rows (one
                // copy for the rows sharing a segment), not to the prefix cache's entries.
                let mut wave_segments: Vec<(KvCache, KvCache)> = Vec::new();
                for &index in &jobs {
                    let mut prompt = prefilled
                        .remove(&index)
                        .context("a prompt was not evaluated")?;
                    if tiling {
                        for segment in &mut prompt.prefix {
                            *segment = with_wave_tiles(&mut wave_segments, segment);
                        }
                    }
                    if call.requests[index].max_tokens == 0 {
                        let result = self.result_of(&call, index, prompt, Vec::new(), None)?;
                        if let Some(request) = sink.generated(index, result, self)? {
                            follow_ups.push(self.follow_up(&call, index, &[], &[], request)?);
                        }
                        continue;
                    }
                    rows.push(Row {
                        index,
                        wave,
                        logits: prompt
                            .first_logits
                            .clone()
                            .context("no distribution after a generating prompt")?,
                        prompt,
                        own: KvBlocks::default(),
                        fed: Vec::new(),
                        sampler: samplers[index].take().context("a request ran twice")?,
                        tokens: Vec::new(),
                        generated: Vec::new(),
                        text: None,
                        finish: None,
                    });
                }
                first_wave = false;
                wave += 1;
            }
            if rows.is_empty() && follow_ups.is_empty() {
                if waiting.is_empty() {
                    break;
                }
                continue;
            }

            // Sample every row's next token; finished rows leave for the sink.
            let clock = Instant::now();
            let mut stepping: Vec<u32> = Vec::with_capacity(rows.len());
            let mut still = Vec::with_capacity(rows.len());
            for mut row in std::mem::take(&mut rows) {
                match self.step(&call, &mut row, &mut pieces)? {
                    Some(next) => {
                        stepping.push(next);
                        still.push(row);
                    }
                    None => {
                        let index = row.index;
                        figures.generated_tokens += row.generated.len();
                        let sequence: Vec<u32> = call.prompts[index]
                            .iter()
                            .chain(&row.fed)
                            .copied()
                            .collect();
                        let kv: Vec<KvCache> = row
                            .prompt
                            .prefix
                            .iter()
                            .chain(&row.own.blocks)
                            .cloned()
                            .collect();
                        let Row {
                            prompt,
                            tokens,
                            generated,
                            text,
                            finish,
                            ..
                        } = row;
                        let text = match text {
                            Some(text) => text,
                            None => self.tokenizer.decode(&tokens, true)?,
                        };
                        let result = self.result_of(
                            &call,
                            index,
                            prompt,
                            generated,
                            Some((text, finish.unwrap_or(FinishReason::MaxTokens))),
                        )?;
                        if let Some(request) = sink.generated(index, result, self)? {
                            follow_ups.push(self.follow_up(&call, index, &sequence, &kv, request)?);
                        }
                    }
                }
            }
            rows = still;
            figures.step_seconds += clock.elapsed().as_secs_f64();
            if rows.is_empty() && follow_ups.is_empty() {
                continue;
            }
            let clock = Instant::now();
            figures.decode_steps += 1;
            figures.decode_rows += rows.len();
            figures.follow_ups += follow_ups.len();
            figures.follow_up_tokens += follow_ups
                .iter()
                .map(|f| f.rows.iter().map(Vec::len).sum::<usize>())
                .sum::<usize>();

            // One pass: the decoding rows' tokens, then the follow-ups.
            let singles: Vec<[u32; 1]> = stepping.iter().map(|&t| [t]).collect();
            let mut groups: Vec<RowGroup> = rows
                .iter()
                .zip(&singles)
                .map(|(row, token)| RowGroup {
                    prefix: row.prompt.prefix.iter().chain(&row.own.blocks).collect(),
                    rows: vec![token.as_slice()],
                    tile_keys: tiling,
                })
                .collect();
            for follow_up in &follow_ups {
                groups.push(RowGroup {
                    prefix: follow_up.prefix.iter().collect(),
                    rows: follow_up.rows.iter().map(Vec::as_slice).collect(),
                    tile_keys: false,
                });
            }
            let outputs = self.model.forward_groups(&groups, true)?;
            stats.forward_calls += 1;
            stats.tokens += groups
                .iter()
                .map(|g| g.rows.iter().map(|r| r.len()).sum::<usize>())
                .sum::<usize>();
            drop(groups);
            let mut outputs = outputs.into_iter();
            if !rows.is_empty() {
                let decoded: Vec<_> = outputs.by_ref().take(rows.len()).collect();
                let last = decoded
                    .iter()
                    .map(|o| o.last(0))
                    .collect::<Result<Vec<_>>>()?;
                let logits = self
                    .model
                    .full_logits(&Tensor::cat(&last, 0)?)?
                    .to_vec2::<f32>()?;
                for (((row, mut output), row_logits), &token) in
                    rows.iter_mut().zip(decoded).zip(logits).zip(&stepping)
                {
                    let new = output.kv.take().context("forward pass returned no cache")?;
                    row.own.push(new)?;
                    row.fed.push(token);
                    row.logits = row_logits;
                }
            }
            for (follow_up, output) in std::mem::take(&mut follow_ups).into_iter().zip(outputs) {
                let index = follow_up.index;
                let result = self.read_follow_up(follow_up, &output)?;
                sink.labelled(index, result)?;
            }
            figures.decode_seconds += clock.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Sample `row`'s next token and check its ends; the token to feed, or `None` when
    /// the row is finished.
    fn step(&self, call: &Call, row: &mut Row, pieces: &mut TokenPieces) -> Result<Option<u32>> {
        let request = &call.requests[row.index];
        let window = self.model.config().context_length;
        if row.generated.len() >= request.max_tokens
            || call.prompts[row.index].len() + row.generated.len() >= window
        {
            row.finish = Some(FinishReason::MaxTokens);
            return Ok(None);
        }
        let next = row.sampler.next(&row.logits)?;
        let entry = if request.logprobs {
            Distribution::new(&row.logits).scored(next, request.top_logprobs, pieces)
        } else {
            let piece = pieces.piece(next);
            unscored(next, piece.bytes)
        };
        let could_stop = entry.token.bytes.is_empty()
            || entry
                .token
                .bytes
                .iter()
                .any(|b| call.stop_ends[row.index].contains(b));
        row.generated.push(entry);
        if self.stop_ids.contains(&next) {
            row.finish = Some(FinishReason::EndOfSequence);
            return Ok(None);
        }
        row.tokens.push(next);
        if !call.stop_ends[row.index].is_empty() && could_stop {
            let mut text = self.tokenizer.decode(&row.tokens, true)?;
            if let Some(cut) = first_stop(&text, &request.stop) {
                text.truncate(cut);
                row.text = Some(text);
                row.finish = Some(FinishReason::Stop);
                return Ok(None);
            }
        }
        if row.generated.len() == request.max_tokens {
            row.finish = Some(FinishReason::MaxTokens);
            return Ok(None);
        }
        Ok(Some(next))
    }

    /// The result of request `index`: its prompt tokens (scored where asked), and what it
    /// generated (`None`: it asked for nothing).
    fn result_of(
        &self,
        call: &Call,
        index: usize,
        prompt: Prefilled,
        generated: Vec<TokenLogprob>,
        ended: Option<(String, FinishReason)>,
    ) -> Result<CompletionResult> {
        let mut pieces = TokenPieces::new(&self.tokenizer);
        let ids = &call.prompts[index];
        let mut scored = prompt.scored;
        scored.resize(ids.len(), None);
        let prompt_tokens = ids
            .iter()
            .zip(scored)
            .map(|(&id, scored)| scored.unwrap_or_else(|| unscored(id, pieces.piece(id).bytes)))
            .collect();
        let (text, finish) = ended.unwrap_or((String::new(), FinishReason::MaxTokens));
        Ok(CompletionResult {
            prompt: prompt_tokens,
            generated,
            text,
            finish,
            cached_prompt_tokens: prompt.cached_prompt_tokens,
        })
    }

    /// The follow-up `request` after request `index`, whose `sequence` of tokens has the
    /// keys/values `kv` (in pieces): the shared start is read from them, the rest runs.
    fn follow_up(
        &self,
        call: &Call,
        index: usize,
        sequence: &[u32],
        kv: &[KvCache],
        request: LabelRequest,
    ) -> Result<FollowUp> {
        let at = || format!("the label read after completion {index}");
        if request.labels.is_empty() {
            crate::bad_request!("{}: no labels", at());
        }
        let prompt = self.prompt_ids(&request.prompt).with_context(at)?;
        let labels = request
            .labels
            .iter()
            .map(|l| self.encode_label(l))
            .collect::<Result<Vec<_>>>()
            .with_context(at)?;
        let window = self.model.config().context_length;
        let longest = labels.iter().map(Vec::len).max().unwrap_or(0);
        if prompt.len() + longest > window {
            crate::bad_request!(
                "{}: prompt and label need {} tokens, more than the model's context window of \
                 {window}",
                at(),
                prompt.len() + longest
            );
        }
        let held: usize = kv.iter().map(KvCache::len).sum();
        let shared = sequence
            .iter()
            .zip(&prompt)
            .take(held)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        let _ = call;
        let suffix = &prompt[shared..];
        let mut rows: Vec<Vec<u32>> = Vec::new();
        let mut queries = Vec::with_capacity(labels.len());
        for label in &labels {
            let mut row = suffix.to_vec();
            row.extend_from_slice(&label[..label.len() - 1]);
            let at_row = match rows.iter().position(|r| *r == row) {
                Some(existing) => existing,
                None => {
                    rows.push(row);
                    rows.len() - 1
                }
            };
            queries.push(
                label
                    .iter()
                    .enumerate()
                    .map(|(t, &target)| (at_row, suffix.len() - 1 + t, target))
                    .collect(),
            );
        }
        Ok(FollowUp {
            index,
            prefix: truncate(kv.iter(), shared)?,
            rows,
            queries,
            labels,
            prompt_tokens: prompt.len(),
        })
    }

    /// The label log-probabilities of a follow-up from its pass's output.
    fn read_follow_up(
        &self,
        follow_up: FollowUp,
        output: &crate::arch::llama::ForwardOutput,
    ) -> Result<LabelResult> {
        let positions: Vec<(usize, usize)> = follow_up
            .queries
            .iter()
            .flatten()
            .map(|&(row, position, _)| (row, position))
            .collect();
        let selected = output.positions(&positions)?;
        let mut ids: Vec<u32> = follow_up.queries.iter().flatten().map(|q| q.2).collect();
        ids.sort_unstable();
        ids.dedup();
        let normaliser: Vec<f32> = self.model.log_normaliser(&selected)?.to_vec1()?;
        let logits: Vec<Vec<f32>> = self.model.token_logits(&selected, &ids)?.to_vec2()?;
        let mut at = 0;
        let mut labels = Vec::with_capacity(follow_up.labels.len());
        for (label, queries) in follow_up.labels.into_iter().zip(&follow_up.queries) {
            let mut logprob = 0.0;
            for &(_, _, target) in queries {
                let column = ids
                    .binary_search(&target)
                    .ok()
                    .context("a label token is missing from the gathered head rows")?;
                logprob += f64::from(logits[at][column]) - f64::from(normaliser[at]);
                at += 1;
            }
            labels.push(LabelScore {
                tokens: label,
                logprob,
            });
        }
        Ok(LabelResult {
            labels,
            prompt_tokens: follow_up.prompt_tokens,
        })
    }

    /// Evaluate the prompts of requests `jobs`: one trie over all of them (cut where the
    /// prefix cache holds their start), distributions where asked, and the keys/values
    /// of each generating prompt. Models computing in bf16/f16 (a GPU's) run each
    /// generating prompt on its own instead (the trie's depth-first passes are f32 only).
    fn prefill(
        &self,
        call: &Call,
        jobs: &[usize],
        cache: &mut PrefixCache,
        pieces: &mut TokenPieces,
        stats: &mut EvalStats,
    ) -> Result<HashMap<usize, Prefilled>> {
        let requests = call.requests;
        let prompts = &call.prompts;
        let mut done: HashMap<usize, Prefilled> = HashMap::new();
        let active: Vec<usize> = jobs
            .iter()
            .copied()
            .filter(|&i| requests[i].prompt_logprobs || requests[i].max_tokens > 0)
            .collect();
        for &i in jobs {
            done.insert(i, Prefilled::default());
        }
        if active.is_empty() {
            return Ok(done);
        }
        if self.model.activation_dtype() != DType::F32 {
            return self.prefill_alone(call, &active, done, stats);
        }
        let mut asks: Vec<(usize, usize, Ask)> = Vec::new();
        let mut sequences = Vec::with_capacity(active.len());
        for &i in &active {
            let len = prompts[i].len();
            let mut queries = Vec::new();
            let mut ask = |position: usize, what: Ask| {
                queries.push(QueryAt {
                    position,
                    query: asks.len(),
                });
                asks.push((i, position, what));
            };
            if requests[i].prompt_logprobs {
                for position in 0..len - 1 {
                    ask(position, Ask::PromptToken);
                }
            }
            if requests[i].max_tokens > 0 {
                ask(len - 1, Ask::Generate);
            }
            sequences.push((prompts[i].clone(), queries));
        }
        let prefixes: Vec<CachedPrefix> =
            sequences.iter().map(|(ids, _)| cache.lookup(ids)).collect();
        let cuts: Vec<usize> = prefixes.iter().map(CachedPrefix::len).collect();
        let trie = TokenTrie::build_with_cuts(&sequences, &cuts)?;
        let paths: Vec<Vec<usize>> = sequences
            .iter()
            .map(|(ids, _)| node_path(&trie, ids))
            .collect::<Result<_>>()?;

        // Nodes inside a cached start, and the first sequence through each node that
        // holds all of it (a prompt that is a prefix of another ends inside the other's
        // node).
        let mut precomputed = HashMap::new();
        let mut first_through = vec![usize::MAX; trie.len()];
        for (s, path) in paths.iter().enumerate() {
            for &node in path {
                let n = trie.node(node);
                let end = n.start + n.tokens.len();
                if first_through[node] == usize::MAX && sequences[s].0.len() >= end {
                    first_through[node] = s;
                }
                if end <= cuts[s] && !precomputed.contains_key(&node) {
                    precomputed.insert(node, cache.range(&prefixes[s], n.start, n.tokens.len())?);
                }
            }
        }
        let generating: HashSet<usize> = paths
            .iter()
            .zip(&active)
            .filter(|(_, &i)| requests[i].max_tokens > 0)
            .flat_map(|(path, _)| path.iter().copied())
            .collect();
        let mut kept: HashMap<usize, Vec<KvCache>> = precomputed
            .iter()
            .filter(|(node, _)| generating.contains(node))
            .map(|(&node, done)| (node, done.own.clone()))
            .collect();

        let mut scored: HashMap<usize, Vec<Option<TokenLogprob>>> = HashMap::new();
        let mut first_logits: HashMap<usize, Vec<f32>> = HashMap::new();
        let evaluator = TreeEvaluator::new(&self.model, self.settings.budget)?;
        let pass_stats = {
            let mut on_row = |query: usize, row: &[f32]| -> Result<()> {
                let (i, position, what) = asks[query];
                match what {
                    Ask::PromptToken => {
                        let target = prompts[i][position + 1];
                        let top = requests[i].top_logprobs;
                        let slots = scored
                            .entry(i)
                            .or_insert_with(|| vec![None; prompts[i].len()]);
                        slots[position + 1] =
                            Some(Distribution::new(row).scored(target, top, pieces));
                    }
                    Ask::Generate => {
                        first_logits.insert(i, row.to_vec());
                    }
                }
                Ok(())
            };
            let mut on_node = |node: usize, own: &[KvCache], hidden: &Tensor| -> Result<()> {
                let n = trie.node(node);
                let path = &sequences[first_through[node]].0[..n.start + n.tokens.len()];
                cache.insert(path, n.start, own, hidden)?;
                if generating.contains(&node) {
                    kept.insert(node, own.to_vec());
                }
                Ok(())
            };
            evaluator.evaluate_distributions(
                &trie,
                &precomputed,
                &mut on_row,
                Some(&mut on_node),
            )?
        };
        tracing::debug!(
            prompts = active.len(),
            trie_tokens = trie.total_tokens(),
            cached_tokens = cuts.iter().sum::<usize>(),
            tokens = pass_stats.tokens,
            forward_calls = pass_stats.forward_calls,
            cache_mib = cache.stats().bytes >> 20,
            "evaluated generation prompts"
        );
        stats.add(&pass_stats);

        for (s, &i) in active.iter().enumerate() {
            let entry = done.get_mut(&i).context("a prompt without a slot")?;
            entry.scored = scored.remove(&i).unwrap_or_default();
            entry.cached_prompt_tokens = paths[s]
                .iter()
                .filter(|&&node| precomputed.contains_key(&node) || first_through[node] != s)
                .map(|&node| {
                    let n = trie.node(node);
                    (prompts[i].len() - n.start).min(n.tokens.len())
                })
                .sum();
            if requests[i].max_tokens == 0 {
                continue;
            }
            let mut prefix = Vec::new();
            for &node in &paths[s] {
                let n = trie.node(node);
                let own = kept
                    .get(&node)
                    .with_context(|| format!("no keys/values kept for trie node {node}"))?;
                let inside = (prompts[i].len() - n.start).min(n.tokens.len());
                prefix.extend(truncate(own.iter(), inside)?);
            }
            entry.prefix = prefix;
            entry.first_logits = Some(
                first_logits
                    .remove(&i)
                    .context("no distribution after a generating prompt")?,
            );
        }
        Ok(done)
    }

    /// [`Self::prefill`] for models that compute in bf16/f16: each generating prompt run
    /// on its own, side by side in passes of at most `max_batch_rows` prompts.
    fn prefill_alone(
        &self,
        call: &Call,
        active: &[usize],
        mut done: HashMap<usize, Prefilled>,
        stats: &mut EvalStats,
    ) -> Result<HashMap<usize, Prefilled>> {
        let rows_per_pass = self.settings.budget.max_batch_rows.max(1);
        for pass in active.chunks(rows_per_pass) {
            let groups: Vec<RowGroup> = pass
                .iter()
                .map(|&i| RowGroup {
                    prefix: Vec::new(),
                    rows: vec![call.prompts[i].as_slice()],
                    tile_keys: false,
                })
                .collect();
            let outputs = self.model.forward_groups(&groups, true)?;
            stats.forward_calls += 1;
            stats.tokens += pass.iter().map(|&i| call.prompts[i].len()).sum::<usize>();
            let last = outputs
                .iter()
                .map(|o| o.last(0))
                .collect::<Result<Vec<_>>>()?;
            let logits = self
                .model
                .full_logits(&Tensor::cat(&last, 0)?)?
                .to_vec2::<f32>()?;
            for ((&i, mut output), row_logits) in pass.iter().zip(outputs).zip(logits) {
                let entry = done.get_mut(&i).context("a prompt without a slot")?;
                entry.prefix = vec![output.kv.take().context("forward pass returned no cache")?];
                entry.first_logits = Some(row_logits);
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn distributions_normalise_and_rank_with_ties_by_id() {
        let logits = [1.0f32, 3.0, 3.0, -2.0, f32::NAN];
        let d = Distribution::new(&logits);
        let total: f64 = (0..4).map(|id| d.logprob(id).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert_eq!(d.top(3), vec![1, 2, 0]);
        assert_eq!(d.top(10), vec![1, 2, 0, 3]);
        assert!(d.top(0).is_empty());
        assert_eq!(d.logprob(99), f64::NEG_INFINITY);
    }

    fn one_token(value: f32) -> KvCache {
        let k = Tensor::full(value, (1, 2, 1, 3), &Device::Cpu).unwrap();
        KvCache::new(vec![(k.clone(), k)]).unwrap()
    }

    #[test]
    fn key_value_blocks_grow_like_a_binary_counter_and_keep_every_position_in_order() {
        let mut blocks = KvBlocks::default();
        for t in 0..13 {
            blocks.push(one_token(t as f32)).unwrap();
        }
        let lengths: Vec<usize> = blocks.blocks.iter().map(KvCache::len).collect();
        assert_eq!(lengths, [8, 4, 1], "13 = 8 + 4 + 1");
        let mut values = Vec::new();
        for block in &blocks.blocks {
            let keys = block.layer(0).0.narrow(1, 0, 1).unwrap();
            values.extend(
                keys.flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .chunks(3)
                    .map(|c| c[0]),
            );
        }
        assert_eq!(values, (0..13).map(|t| t as f32).collect::<Vec<_>>());
        let cut = truncate(blocks.blocks.iter(), 10).unwrap();
        assert_eq!(cut.iter().map(KvCache::len).collect::<Vec<_>>(), [8, 2]);
        assert!(truncate(blocks.blocks.iter(), 14).is_err());
    }
}
