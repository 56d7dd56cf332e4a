//! Segment attention: the queries of a batch of rows attend to a chain of shared prefix
//! key/value segments, read in place, and then to each row's own keys.
//!
//! The prefix trie gives many rows (siblings) the same long prefix. Copying the prefix's
//! keys and values into every row, and materialising a full score matrix, cost more than
//! the attention arithmetic itself. Here:
//! - each prefix segment is a slice `(kv_heads, len, head_dim)` read where it lies;
//! - queries are processed in chunks of [`QUERY_CHUNK`] vectors (consecutive tokens of
//!   consecutive rows, all query heads of one key/value head), so every tile of prefix
//!   keys loaded is used by a whole chunk, across rows and grouped query heads;
//! - the softmax is online (running max and sum per query, one pass over the keys, no
//!   score tensor), with the causal mask on each row's own keys; padding positions are
//!   never queried and never attended to;
//! - keys are read transposed, tile by tile (`(head_dim, KEY_TILE)`): a segment whose
//!   caller keeps its keys tiled ([`tile_keys`], [`Segment::tiled_keys`]) is read as it
//!   is; the others are transposed once per call (prefix segments many chunks read, each
//!   row's own keys), into buffers the calling thread keeps from call to call, or inside
//!   the one chunk that reads them;
//! - the softmax's exponential, maximum and sums are written so that they compile to
//!   vector instructions (see `exp.rs` and `ChunkState::softmax_update`): written the
//!   obvious way (`f32::max`, `as i32`), they compiled to scalar code and cost more than
//!   the products;
//! - accumulation is f32; every output's arithmetic follows one fixed order of key tiles
//!   that depends only on the shapes, so the result is bitwise the same for any number
//!   of threads (work items are fixed chunks, distributed by rayon).
//!
//! Where AMX tiles run, [`segment_attention_tiles`] (`amx.rs`) does the same work with
//! its two products in bf16 on the tiles; the decoder takes it at `--precision bf16`.
//!
//! The layouts match what the decoder has in hand: queries and outputs packed by token,
//! `(tokens, heads * head_dim)`; a group's own keys/values right-padded,
//! `(rows, kv_heads, stride, head_dim)`, as they are kept for the next pass.

mod amx;
pub(crate) mod exp;
mod rope;
mod tile;
pub mod tile_softmax;
mod transpose;

pub use amx::{segment_attention_tiles, segment_attention_tiles_on, tiles_available};
pub use rope::{split_rotate, RopeTables};

use crate::cpu::CpuFeatures;
use rayon::prelude::*;
use std::collections::HashMap;

use tile::{
    ChunkState, Fused, MulAdd, Separate, KEY_TILE, LANES, QUERY_CHUNK, SCORE_BLOCK_NARROW,
    SCORE_BLOCK_WIDE,
};
use transpose::transpose_tile_on;

/// Head counts and width of an attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionDims {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; `heads` is a multiple of it (grouped-query attention).
    pub kv_heads: usize,
    /// Floats per head.
    pub head_dim: usize,
}

impl AttentionDims {
    /// Query heads sharing one key/value head.
    pub fn group_size(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Whether the kernel handles this shape (head width a multiple of 16, up to 256).
    pub fn supported(&self) -> bool {
        self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.head_dim.is_multiple_of(LANES)
            && (LANES..=16 * LANES).contains(&self.head_dim)
    }
}

/// A run of cached positions shared by every row of a group: keys and values laid out
/// `(kv_heads, len, head_dim)`.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub len: usize,
    /// The same keys tiled as the kernel reads them ([`tile_keys`]), where the caller
    /// keeps them: the kernel then transposes nothing of this segment. A decoding row
    /// reads the same prefix segments at every step; transposing them at every call was
    /// a tenth of a generation's time.
    pub tiled_keys: Option<&'a [f32]>,
}

/// Floats that [`tile_keys`] makes of a segment of `len` positions.
pub fn tiled_keys_len(dims: AttentionDims, len: usize) -> usize {
    dims.kv_heads * len.div_ceil(KEY_TILE) * dims.head_dim * KEY_TILE
}

/// A segment's keys, `(kv_heads, len, head_dim)`, tiled as the kernel reads them:
/// `(kv_heads, tiles, head_dim, KEY_TILE)`, dimension-major within each tile of
/// `KEY_TILE` positions, zero past `len`. Given as [`Segment::tiled_keys`], they give
/// the same bits as the keys themselves (the kernel transposes those into this layout).
pub fn tile_keys(
    dims: AttentionDims,
    keys: &[f32],
    len: usize,
) -> Result<Vec<f32>, AttentionError> {
    if !dims.supported() || keys.len() != dims.kv_heads * len * dims.head_dim {
        return Err(AttentionError(format!(
            "cannot tile {} floats as {len} keys of {dims:?}",
            keys.len()
        )));
    }
    let mut out = vec![0f32; tiled_keys_len(dims, len)];
    tile_segment(SimdPath::best(), dims, keys, len, &mut out);
    Ok(out)
}

/// [`tile_keys`] into `out` on a chosen instruction path.
fn tile_segment(path: SimdPath, dims: AttentionDims, keys: &[f32], len: usize, out: &mut [f32]) {
    let hd = dims.head_dim;
    let tiles = len.div_ceil(KEY_TILE);
    for kv_head in 0..dims.kv_heads {
        let base = kv_head * len * hd;
        for t in 0..tiles {
            let start = t * KEY_TILE;
            let n = KEY_TILE.min(len - start);
            let at = base + start * hd;
            let tile = &mut out[(kv_head * tiles + t) * hd * KEY_TILE..];
            transpose_tile_on(path, &keys[at..at + n * hd], hd, n, tile);
        }
    }
}

/// Rows continuing the same prefix.
#[derive(Debug, Clone, Copy)]
pub struct RowGroup<'a> {
    /// The shared prefix, in position order (may be empty).
    pub prefix: &'a [Segment<'a>],
    /// Each row's number of real tokens (at least 1).
    pub lengths: &'a [usize],
    /// The group's first token in the packed query/output layout; its rows' tokens
    /// follow one another from there.
    pub first_token: usize,
    /// The rows' own keys and values, `(rows, kv_heads, stride, head_dim)`.
    pub keys: &'a [f32],
    pub values: &'a [f32],
    /// Positions per row in `keys`/`values` (at least the longest row).
    pub stride: usize,
}

/// Why the kernel refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionError(pub String);

impl std::fmt::Display for AttentionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "segment attention: {}", self.0)
    }
}

impl std::error::Error for AttentionError {}

/// Which instructions the kernel runs on.
///
/// The vector paths compile the same source as the portable one with the CPU's vector
/// features enabled and fused multiply-adds (see `tile.rs`): their numbers agree with the
/// plain formulation to the tests' tolerance, not bit for bit with the portable path
/// (whose multiply-adds round twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdPath {
    Avx512,
    Avx2,
    /// aarch64 NEON with its fused multiply-add (`fmla`).
    Neon,
    Portable,
}

impl SimdPath {
    /// The widest path this CPU supports.
    pub fn best() -> SimdPath {
        let f = CpuFeatures::get();
        if f.avx512f && f.fma {
            SimdPath::Avx512
        } else if f.avx2 && f.fma {
            SimdPath::Avx2
        } else if f.neon {
            SimdPath::Neon
        } else {
            SimdPath::Portable
        }
    }

    /// Whether this CPU (with `NLG_JUDGE_CPU` applied) runs this path.
    pub fn available(self) -> bool {
        let f = CpuFeatures::get();
        match self {
            SimdPath::Avx512 => f.avx512f && f.fma,
            SimdPath::Avx2 => f.avx2 && f.fma,
            SimdPath::Neon => f.neon,
            SimdPath::Portable => true,
        }
    }
}

/// What attention applies besides the causal mask (Mistral, Phi-3 and Gemma's sliding
/// windows; Gemma 2's score soft-capping).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Masking {
    /// A query at position `p` sees keys at positions `> p - window` only. Positions
    /// count from the start of the group's prefix.
    pub window: Option<usize>,
    /// Scaled scores pass through `c * tanh(s / c)` before the softmax.
    pub softcap: Option<f32>,
}

/// `out[token, head] = softmax(scale * q k^T) v` over the group's prefix segments and
/// the row's own keys up to the token (causal), for every real token of every group.
/// `queries` and `out` are `(tokens, heads * head_dim)`, tokens packed group after group.
pub fn segment_attention(
    dims: AttentionDims,
    scale: f32,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    segment_attention_on(SimdPath::best(), dims, scale, groups, queries, out)
}

/// [`segment_attention`] with a sliding window and/or soft-capped scores.
pub fn segment_attention_masked(
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    segment_attention_masked_on(SimdPath::best(), dims, scale, masking, groups, queries, out)
}

/// [`segment_attention`] on a chosen instruction path (for tests and benchmarks).
pub fn segment_attention_on(
    path: SimdPath,
    dims: AttentionDims,
    scale: f32,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    segment_attention_masked_on(path, dims, scale, Masking::default(), groups, queries, out)
}

/// [`segment_attention_masked`] on a chosen instruction path.
pub fn segment_attention_masked_on(
    path: SimdPath,
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    if masking.window == Some(0) || masking.softcap.is_some_and(|c| c <= 0.0 || !c.is_finite()) {
        return Err(AttentionError(format!(
            "a window must be positive and a soft-cap positive and finite: {masking:?}"
        )));
    }
    if !path.available() {
        return Err(AttentionError(format!(
            "{path:?} is not supported by this CPU"
        )));
    }
    validate(dims, groups, queries, out)?;
    // The transposed keys live in buffers kept by the calling thread from call to call
    // (each layer of each pass needs them): fresh ones every call cost the kernel's
    // zeroing of new pages. A nested call (none exists) would get fresh buffers.
    crate::reuse::with_reused(&WORKSPACE, |(prefix_buffer, own_buffer)| {
        run_job(
            path,
            dims,
            scale,
            masking,
            groups,
            queries,
            out,
            prefix_buffer,
            own_buffer,
        );
    });
    Ok(())
}

thread_local! {
    /// Transposed prefix keys and own keys, reused across calls on this thread.
    static WORKSPACE: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

#[allow(clippy::too_many_arguments)]
fn run_job(
    path: SimdPath,
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
    prefix_buffer: &mut Vec<f32>,
    own_buffer: &mut Vec<f32>,
) {
    let offsets = transpose_prefixes(path, dims, groups, prefix_buffer);
    let own_offsets = transpose_own_keys(path, dims, groups, own_buffer);
    let (plan, bundles) = work_plan(dims, groups, masking.window);
    let (transposed, own_transposed) = (&prefix_buffer[..], &own_buffer[..]);
    let job = Job {
        dims,
        scale: scale * std::f32::consts::LOG2_E,
        window: masking.window,
        // Scores are in base 2 (times log2 e): so is the cap.
        softcap: masking
            .softcap
            .map_or(0.0, |c| c * std::f32::consts::LOG2_E),
        groups,
        queries,
        out: OutPtr(out.as_mut_ptr()),
        transposed,
        offsets: &offsets,
        own_transposed,
        own_offsets: &own_offsets,
        path,
        plan: &plan,
        bundles: &bundles,
    };
    // Head width in lane arrays => value-block queries on wide and on narrow registers.
    macro_rules! run {
        ($($nv:literal => $pv:literal / $narrow:literal),*) => {
            match dims.head_dim / LANES {
                $($nv => job.run::<$nv, $pv, $narrow>(path),)*
                _ => unreachable!("head width checked by validate"),
            }
        };
    }
    run!(1 => 8 / 4, 2 => 8 / 2, 3 => 4 / 1, 4 => 4 / 1, 5 => 2 / 1, 6 => 2 / 1, 7 => 2 / 1,
         8 => 2 / 4, 9 => 1 / 4, 10 => 1 / 4, 11 => 1 / 4, 12 => 1 / 4, 13 => 1 / 4,
         14 => 1 / 4, 15 => 1 / 4, 16 => 1 / 4);
}

/// `buffer` grown to at least `len` values; what it held is left (every part the kernel
/// reads is written first).
pub(super) fn at_least<T: Copy + Default>(buffer: &mut Vec<T>, len: usize) -> &mut [T] {
    if buffer.len() < len {
        buffer.resize(len, T::default());
    }
    &mut buffer[..len]
}

fn validate(
    dims: AttentionDims,
    groups: &[RowGroup],
    queries: &[f32],
    out: &[f32],
) -> Result<(), AttentionError> {
    let fail = |message: String| Err(AttentionError(message));
    if !dims.supported() {
        return fail(format!("unsupported shape {dims:?}"));
    }
    let (hd, width) = (dims.head_dim, dims.heads * dims.head_dim);
    let mut end_token = 0;
    for (index, group) in groups.iter().enumerate() {
        let tokens: usize = group.lengths.iter().sum();
        end_token = end_token.max(group.first_token + tokens);
        if group.lengths.iter().any(|&l| l == 0 || l > group.stride) {
            return fail(format!(
                "group {index}: row lengths {:?} must be within 1..={}",
                group.lengths, group.stride
            ));
        }
        let own = group.lengths.len() * dims.kv_heads * group.stride * hd;
        if group.keys.len() < own || group.values.len() < own {
            return fail(format!(
                "group {index}: own keys/values hold {}/{} floats, need {own}",
                group.keys.len(),
                group.values.len()
            ));
        }
        for (s, segment) in group.prefix.iter().enumerate() {
            let need = dims.kv_heads * segment.len * hd;
            if segment.keys.len() != need || segment.values.len() != need {
                return fail(format!(
                    "group {index}, prefix segment {s}: {}/{} floats, expected {need}",
                    segment.keys.len(),
                    segment.values.len()
                ));
            }
            if let Some(tiled) = segment.tiled_keys {
                let need = tiled_keys_len(dims, segment.len);
                if tiled.len() != need {
                    return fail(format!(
                        "group {index}, prefix segment {s}: {} tiled key floats, expected {need}",
                        tiled.len()
                    ));
                }
            }
        }
    }
    if queries.len() < end_token * width || out.len() < end_token * width {
        return fail(format!(
            "queries/outputs hold {}/{} floats, need {} ({end_token} tokens)",
            queries.len(),
            out.len(),
            end_token * width
        ));
    }
    // Groups must not write to the same tokens.
    for (a, ga) in groups.iter().enumerate() {
        let ta: usize = ga.lengths.iter().sum();
        for gb in &groups[a + 1..] {
            let tb: usize = gb.lengths.iter().sum();
            if ga.first_token < gb.first_token + tb && gb.first_token < ga.first_token + ta {
                return fail("groups overlap in the packed token layout".into());
            }
        }
    }
    Ok(())
}

/// Every distinct prefix segment that more than one chunk reads (per key/value head) and
/// whose caller keeps no tiled keys,
/// its keys transposed once, tile by tile, per key/value head (`(kv_heads, tiles,
/// head_dim, KEY_TILE)`), so that the many chunks reading a shared prefix copy tiles
/// instead of transposing them again; and where each such segment (by the address and
/// length of its keys) starts in that buffer. A segment only one chunk reads (a decoding
/// row's own prompt and generated keys) is transposed tile by tile in that chunk
/// instead: a pass over it here would double the memory it costs.
fn transpose_prefixes(
    path: SimdPath,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<f32>,
) -> HashMap<(usize, usize), usize> {
    let hd = dims.head_dim;
    let mut readers: HashMap<(usize, usize), usize> = HashMap::new();
    for group in groups {
        for segment in group.prefix {
            *readers
                .entry((segment.keys.as_ptr() as usize, segment.len))
                .or_default() += query_chunks(dims, group);
        }
    }
    let mut offsets = HashMap::new();
    let mut total = 0;
    let mut distinct = Vec::new();
    for group in groups {
        for segment in group.prefix {
            let key = (segment.keys.as_ptr() as usize, segment.len);
            if segment.len > 0
                && segment.tiled_keys.is_none()
                && readers[&key] > 1
                && !offsets.contains_key(&key)
            {
                offsets.insert(key, total);
                distinct.push((*segment, total));
                total += dims.kv_heads * segment.len.div_ceil(KEY_TILE) * hd * KEY_TILE;
            }
        }
    }
    let mut rest: &mut [f32] = at_least(buffer, total);
    let mut pieces = Vec::with_capacity(distinct.len());
    for (segment, _) in &distinct {
        let size = dims.kv_heads * segment.len.div_ceil(KEY_TILE) * hd * KEY_TILE;
        let (piece, tail) = rest.split_at_mut(size);
        pieces.push((segment, piece));
        rest = tail;
    }
    pieces.into_par_iter().for_each(|(segment, piece)| {
        tile_segment(path, dims, segment.keys, segment.len, piece);
    });
    offsets
}

/// Every group's own keys transposed once, tile by tile (`(rows, kv_heads, tiles,
/// head_dim, KEY_TILE)` per group, [`own_tiles`] tiles per row, only its real positions
/// filled), so that the chunks of a row read them instead of transposing
/// them again; and where each group's part starts, or `None` for a group of one chunk
/// per key/value head (a decoding step's row), whose chunk transposes its own keys.
fn transpose_own_keys(
    path: SimdPath,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<f32>,
) -> Vec<Option<usize>> {
    let hd = dims.head_dim;
    let tile = hd * KEY_TILE;
    let shared = |g: &RowGroup| query_chunks(dims, g) > 1;
    let sizes: Vec<usize> = groups
        .iter()
        .map(|g| {
            if shared(g) {
                g.lengths.len() * dims.kv_heads * own_tiles(g) * tile
            } else {
                0
            }
        })
        .collect();
    let mut offsets = Vec::with_capacity(groups.len());
    let mut total = 0;
    for (group, size) in groups.iter().zip(&sizes) {
        offsets.push(shared(group).then_some(total));
        total += size;
    }
    let mut rest: &mut [f32] = at_least(buffer, total);
    let mut pieces = Vec::with_capacity(groups.len());
    for (group, &size) in groups.iter().zip(&sizes) {
        let (piece, tail) = rest.split_at_mut(size);
        if size > 0 {
            pieces.push((group, piece));
        }
        rest = tail;
    }
    pieces.into_par_iter().for_each(|(group, piece)| {
        let tiles = own_tiles(group);
        for (row, &length) in group.lengths.iter().enumerate() {
            for kv_head in 0..dims.kv_heads {
                let base = (row * dims.kv_heads + kv_head) * group.stride * hd;
                let base_t = (row * dims.kv_heads + kv_head) * tiles * tile;
                for t in 0..length.div_ceil(KEY_TILE) {
                    let start = t * KEY_TILE;
                    let len = KEY_TILE.min(length - start);
                    let at = base + start * hd;
                    transpose_tile_on(
                        path,
                        &group.keys[at..at + len * hd],
                        hd,
                        len,
                        &mut piece[base_t + t * tile..],
                    );
                }
            }
        }
    });
    offsets
}

/// Key tiles per row of a group's own keys: enough for its longest row (the stride may
/// be far longer: the capacity of a cache).
fn own_tiles(group: &RowGroup) -> usize {
    group
        .lengths
        .iter()
        .max()
        .map_or(0, |&l| l.div_ceil(KEY_TILE))
}

/// The output pointer, shared by work items that write disjoint tokens/heads (the
/// vector kernel's and the tile kernel's, `amx.rs`).
#[derive(Clone, Copy)]
pub(super) struct OutPtr(pub(super) *mut f32);
// SAFETY: work items write disjoint ranges (one query head of one token each).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

struct Job<'a> {
    dims: AttentionDims,
    /// `scale * log2(e)`: scores come out in base 2.
    scale: f32,
    window: Option<usize>,
    /// The soft-cap in base 2 (0: none).
    softcap: f32,
    groups: &'a [RowGroup<'a>],
    queries: &'a [f32],
    out: OutPtr,
    /// The prefix segments' keys, transposed ([`transpose_prefixes`]).
    transposed: &'a [f32],
    offsets: &'a HashMap<(usize, usize), usize>,
    /// Each group's own keys, transposed ([`transpose_own_keys`]), and where each
    /// group's part starts.
    own_transposed: &'a [f32],
    own_offsets: &'a [Option<usize>],
    /// The instruction path (for transpositions done inside a chunk).
    path: SimdPath,
    /// The work items of one key/value head ([`work_plan`]), and the groups of the
    /// bundles in it.
    plan: &'a [Work],
    bundles: &'a [usize],
}

/// Where each query of a work item comes from: its group's row, its position in that
/// row, and its (token, head) slot in the output.
struct ChunkQueries {
    rows: [usize; QUERY_CHUNK],
    positions: [usize; QUERY_CHUNK],
    slots: [usize; QUERY_CHUNK],
}

impl Default for ChunkQueries {
    fn default() -> Self {
        Self {
            rows: [0; QUERY_CHUNK],
            positions: [0; QUERY_CHUNK],
            slots: [0; QUERY_CHUNK],
        }
    }
}

/// One work item for a key/value head.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Work {
    /// A chunk of [`QUERY_CHUNK`] queries of one group.
    Chunk { group: usize, chunk: usize },
    /// Groups of one chunk each whose first prefix segment is the same (`bundles[members]`,
    /// their queries together at most one chunk): decoding rows after a shared article.
    /// That segment's tiles are read once for all their queries, then each group's
    /// other segments and own keys for its own queries. A query's arithmetic is the same
    /// as in a chunk of its own (each query's softmax and sums see the same tiles in the
    /// same order, whatever else the chunk holds), so bundling changes no bit.
    Bundle { members: std::ops::Range<usize> },
}

/// The work items of one key/value head, in group order: each chunk of each group, but
/// one-chunk groups that start with the same prefix segment bundled (no sliding window:
/// the window's reach differs between groups), and the groups of every bundle, in order.
fn work_plan(
    dims: AttentionDims,
    groups: &[RowGroup],
    window: Option<usize>,
) -> (Vec<Work>, Vec<usize>) {
    let queries_of = |g: &RowGroup| g.lengths.iter().sum::<usize>() * dims.group_size();
    let bundleable = |g: &RowGroup| {
        window.is_none()
            && queries_of(g) <= QUERY_CHUNK
            && g.prefix.first().is_some_and(|s| s.len > 0)
    };
    // Open bundles by their first segment: (members, queries).
    let mut open: HashMap<(usize, usize), usize> = HashMap::new();
    let mut lists: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut bundle_of = vec![None; groups.len()];
    for (index, group) in groups.iter().enumerate() {
        if !bundleable(group) {
            continue;
        }
        let first = &group.prefix[0];
        let key = (first.keys.as_ptr() as usize, first.len);
        let n = queries_of(group);
        let list = match open.get(&key) {
            Some(&list) if lists[list].1 + n <= QUERY_CHUNK => list,
            _ => {
                lists.push((Vec::new(), 0));
                open.insert(key, lists.len() - 1);
                lists.len() - 1
            }
        };
        lists[list].0.push(index);
        lists[list].1 += n;
        bundle_of[index] = Some(list);
    }
    let mut plan = Vec::new();
    let mut members = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        match bundle_of[index].map(|list| &lists[list].0) {
            Some(list) if list.len() > 1 => {
                if list[0] == index {
                    let start = members.len();
                    members.extend_from_slice(list);
                    plan.push(Work::Bundle {
                        members: start..members.len(),
                    });
                }
            }
            _ => plan.extend((0..query_chunks(dims, group)).map(|chunk| Work::Chunk {
                group: index,
                chunk,
            })),
        }
    }
    (plan, members)
}

/// Work items of [`QUERY_CHUNK`] query vectors for one key/value head of `group` (its
/// tokens times the query heads sharing that key/value head).
pub(super) fn query_chunks(dims: AttentionDims, group: &RowGroup) -> usize {
    let tokens: usize = group.lengths.iter().sum();
    (tokens * dims.group_size()).div_ceil(QUERY_CHUNK)
}

impl Job<'_> {
    fn items(&self) -> usize {
        self.plan.len() * self.dims.kv_heads
    }

    /// `PV` queries per value block where the registers hold 512 floats (AVX-512; whole
    /// head width), `PV_NARROW` where they hold 128 (AVX2, NEON; one lane array of the
    /// head at a time from 128-wide heads up, see `ChunkState::tile`), chosen so that the
    /// block's outputs stay in registers.
    fn run<const NV: usize, const PV: usize, const PV_NARROW: usize>(&self, path: SimdPath) {
        const WIDE: usize = SCORE_BLOCK_WIDE;
        const NARROW: usize = SCORE_BLOCK_NARROW;
        (0..self.items()).into_par_iter().for_each(|item| {
            // SAFETY: `path` was checked against the CPU's features.
            unsafe {
                match path {
                    SimdPath::Avx512 => self.item_avx512::<NV, PV, WIDE>(item),
                    SimdPath::Avx2 => self.item_avx2::<NV, PV_NARROW, NARROW>(item),
                    SimdPath::Neon => self.item_neon::<NV, PV_NARROW, NARROW>(item),
                    SimdPath::Portable => self.item::<Separate, NV, PV, WIDE, false>(item),
                }
            }
        });
    }

    #[cfg_attr(
        target_arch = "x86_64",
        target_feature(enable = "avx512f,avx512vl,fma")
    )]
    unsafe fn item_avx512<const NV: usize, const PV: usize, const SB: usize>(&self, item: usize) {
        self.item::<Fused, NV, PV, SB, false>(item)
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn item_avx2<const NV: usize, const PV: usize, const SB: usize>(&self, item: usize) {
        self.item::<Fused, NV, PV, SB, true>(item)
    }

    #[cfg_attr(target_arch = "aarch64", target_feature(enable = "neon"))]
    unsafe fn item_neon<const NV: usize, const PV: usize, const SB: usize>(&self, item: usize) {
        self.item::<Fused, NV, PV, SB, true>(item)
    }

    /// One work item: a chunk of queries of one group, or a bundle of one-chunk groups
    /// ([`Work`]), for one key/value head.
    #[inline(always)]
    fn item<M: MulAdd, const NV: usize, const PV: usize, const SB: usize, const SLICED: bool>(
        &self,
        item: usize,
    ) {
        // Key/value head first, then the plan's order: the items of one head run one
        // after the other, so a prefix that many groups share (a document's article,
        // under every decoding row) is read for one head while it is still in cache,
        // rather than for all heads and again for the next group.
        let (kv_head, work) = (item / self.plan.len(), &self.plan[item % self.plan.len()]);
        let mut st = ChunkState::<NV>::new();
        st.softcap = self.softcap;
        let mut queries = ChunkQueries::default();
        match *work {
            Work::Chunk { group, chunk } => {
                let n = self.fill::<NV>(&mut st, &mut queries, 0, group, kv_head, chunk);
                self.group_keys::<M, NV, PV, SB, SLICED>(
                    &mut st,
                    &queries,
                    0..n,
                    group,
                    0,
                    kv_head,
                );
                self.write(&st, &queries, n);
            }
            Work::Bundle { ref members } => {
                let mut spans = [(0usize, 0usize, 0usize); QUERY_CHUNK];
                let mut n = 0;
                for (span, &group) in spans.iter_mut().zip(&self.bundles[members.clone()]) {
                    let start = n;
                    n += self.fill::<NV>(&mut st, &mut queries, n, group, kv_head, 0);
                    *span = (group, start, n);
                }
                // The first segment, shared by every member: all the bundle's queries
                // at once (no sliding window in a bundle: every query sees every key).
                let first = &self.groups[self.bundles[members.start]].prefix[0];
                self.segment_tiles::<M, NV, PV, SB, SLICED>(
                    &mut st,
                    &queries,
                    0..n,
                    first,
                    0,
                    0,
                    kv_head,
                );
                for &(group, start, end) in &spans[..members.len()] {
                    self.group_keys::<M, NV, PV, SB, SLICED>(
                        &mut st,
                        &queries,
                        start..end,
                        group,
                        1,
                        kv_head,
                    );
                }
                self.write(&st, &queries, n);
            }
        }
    }

    /// Queries of `chunk` of group `group_index` for `kv_head`, scaled, into the chunk
    /// state from position `at`, with where each comes from; returns how many.
    #[inline(always)]
    fn fill<const NV: usize>(
        &self,
        st: &mut ChunkState<NV>,
        queries: &mut ChunkQueries,
        at: usize,
        group_index: usize,
        kv_head: usize,
        chunk: usize,
    ) -> usize {
        let group = &self.groups[group_index];
        let (hd, g) = (self.dims.head_dim, self.dims.group_size());
        let width = self.dims.heads * hd;
        let tokens: usize = group.lengths.iter().sum();
        let first_query = chunk * QUERY_CHUNK;
        let n = QUERY_CHUNK.min(tokens * g - first_query);
        assert!(
            at + n <= QUERY_CHUNK,
            "a bundle holds at most one chunk of queries"
        );
        let first_token = first_query / g;
        let (mut row, mut row_start) = (0, 0);
        while row_start + group.lengths[row] <= first_token {
            row_start += group.lengths[row];
            row += 1;
        }
        for i in 0..n {
            let query = first_query + i;
            let token = query / g;
            while token >= row_start + group.lengths[row] {
                row_start += group.lengths[row];
                row += 1;
            }
            let head = kv_head * g + query % g;
            queries.rows[at + i] = row;
            queries.positions[at + i] = token - row_start;
            queries.slots[at + i] = (group.first_token + token) * width + head * hd;
            let slot = queries.slots[at + i];
            let q = &self.queries[slot..slot + hd];
            for v in 0..NV {
                for lane in 0..LANES {
                    st.q[at + i][v][lane] = q[v * LANES + lane] * self.scale;
                }
            }
        }
        n
    }

    /// Queries `range` (all of group `group_index`) attend to the group's prefix
    /// segments from `first_segment` on, then, causally, to their rows' own keys.
    #[inline(always)]
    fn group_keys<
        M: MulAdd,
        const NV: usize,
        const PV: usize,
        const SB: usize,
        const SLICED: bool,
    >(
        &self,
        st: &mut ChunkState<NV>,
        queries: &ChunkQueries,
        range: std::ops::Range<usize>,
        group_index: usize,
        first_segment: usize,
        kv_head: usize,
    ) {
        let group = &self.groups[group_index];
        let dims = self.dims;
        let hd = dims.head_dim;
        let prefix_len: usize = group.prefix.iter().map(|s| s.len).sum();

        // The shared prefix: every query sees every key (but those a sliding window
        // hides: keys at least `window` positions behind the query).
        let mut segment_start: usize = group.prefix[..first_segment].iter().map(|s| s.len).sum();
        for segment in &group.prefix[first_segment..] {
            self.segment_tiles::<M, NV, PV, SB, SLICED>(
                st,
                queries,
                range.clone(),
                segment,
                segment_start,
                prefix_len,
                kv_head,
            );
            segment_start += segment.len;
        }

        // Each row's own keys, causally: runs of queries from the same row.
        let own_keys_t = self.own_offsets[group_index].map(|at| &self.own_transposed[at..]);
        let (rows, positions) = (&queries.rows, &queries.positions);
        let mut first = range.start;
        while first < range.end {
            let row = rows[first];
            let mut end = first;
            while end < range.end && rows[end] == row {
                end += 1;
            }
            let base = (row * dims.kv_heads + kv_head) * group.stride * hd;
            let base_t = (row * dims.kv_heads + kv_head) * own_tiles(group) * hd * KEY_TILE;
            let last_position = positions[end - 1];
            let mut start = 0;
            let mut from = first;
            while start <= last_position {
                while positions[from] < start {
                    from += 1;
                }
                let len = KEY_TILE.min(last_position + 1 - start);
                for (visible, &position) in
                    st.visible[from..end].iter_mut().zip(&positions[from..end])
                {
                    *visible = (position + 1 - start).min(len);
                }
                if let Some(window) = self.window {
                    for (first, &position) in st.first_visible[from..end]
                        .iter_mut()
                        .zip(&positions[from..end])
                    {
                        let lowest = (position + 1).saturating_sub(window);
                        *first = lowest.saturating_sub(start).min(len);
                    }
                }
                let at = base + start * hd;
                let values = &group.values[at..at + len * hd];
                match own_keys_t {
                    Some(own_keys_t) => {
                        let at_t = base_t + (start / KEY_TILE) * hd * KEY_TILE;
                        st.tile::<M, PV, SB, SLICED>(
                            from,
                            end,
                            &own_keys_t[at_t..at_t + hd * KEY_TILE],
                            values,
                            len,
                        )
                    }
                    None => st.tile_from_rows::<M, PV, SB, SLICED>(
                        self.path,
                        from,
                        end,
                        &group.keys[at..at + len * hd],
                        values,
                        len,
                    ),
                }
                start += KEY_TILE;
            }
            first = end;
        }
    }

    /// Queries `range` attend to every key of one prefix segment, which starts
    /// `segment_at` positions into a prefix of `prefix_len` (for a sliding window).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn segment_tiles<
        M: MulAdd,
        const NV: usize,
        const PV: usize,
        const SB: usize,
        const SLICED: bool,
    >(
        &self,
        st: &mut ChunkState<NV>,
        queries: &ChunkQueries,
        range: std::ops::Range<usize>,
        segment: &Segment,
        segment_at: usize,
        prefix_len: usize,
        kv_head: usize,
    ) {
        if segment.len == 0 {
            return;
        }
        let hd = self.dims.head_dim;
        let base = kv_head * segment.len * hd;
        let tiles = segment.len.div_ceil(KEY_TILE);
        let transposed = match segment.tiled_keys {
            Some(tiled) => Some(&tiled[kv_head * tiles * hd * KEY_TILE..]),
            None => self
                .offsets
                .get(&(segment.keys.as_ptr() as usize, segment.len))
                .map(|&at| &self.transposed[at + kv_head * tiles * hd * KEY_TILE..]),
        };
        let (from, end) = (range.start, range.end);
        for t in 0..tiles {
            let start = t * KEY_TILE;
            let len = KEY_TILE.min(segment.len - start);
            st.visible[from..end].fill(len);
            if let Some(window) = self.window {
                let tile_at = segment_at + start;
                for (first, &position) in st.first_visible[from..end]
                    .iter_mut()
                    .zip(&queries.positions[from..end])
                {
                    // Keys at positions >= p + 1 - window are visible.
                    let lowest = (prefix_len + position + 1).saturating_sub(window);
                    *first = lowest.saturating_sub(tile_at).min(len);
                }
                if st.first_visible[from..end].iter().all(|&f| f >= len) {
                    continue;
                }
            }
            let at = base + start * hd;
            let values = &segment.values[at..at + len * hd];
            match transposed {
                Some(transposed) => st.tile::<M, PV, SB, SLICED>(
                    from,
                    end,
                    &transposed[t * hd * KEY_TILE..(t + 1) * hd * KEY_TILE],
                    values,
                    len,
                ),
                None => st.tile_from_rows::<M, PV, SB, SLICED>(
                    self.path,
                    from,
                    end,
                    &segment.keys[at..at + len * hd],
                    values,
                    len,
                ),
            }
        }
    }

    /// The first `n` queries' outputs, normalised, into their slots.
    #[inline(always)]
    fn write<const NV: usize>(&self, st: &ChunkState<NV>, queries: &ChunkQueries, n: usize) {
        let hd = self.dims.head_dim;
        for (i, &slot) in queries.slots.iter().enumerate().take(n) {
            let inverse = 1.0 / st.total(i);
            // SAFETY: `slot` is this work item's own (token, head), inside `out`
            // (checked by `validate`); no other item writes it.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(slot), hd) };
            for v in 0..NV {
                for lane in 0..LANES {
                    dst[v * LANES + lane] = st.acc[i][v][lane] * inverse;
                }
            }
        }
    }
}
