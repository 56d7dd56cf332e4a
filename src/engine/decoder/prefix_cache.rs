//! A bounded cache of recently computed prompt prefixes, kept between completion calls.
//!
//! A radix trie over token ids, like the evaluation trie, whose nodes hold the keys and
//! values of their tokens and the final hidden states of their positions. The keys and
//! values let a later prompt that starts the same way skip those positions; the hidden
//! states (one row of the model's width per position, ~5% of the keys and values for
//! SmolLM2) answer prompt log-prob queries at cached positions, which is what
//! lm-evaluation-harness asks for: one context scored with several continuations, one
//! request at a time. The cache is the caller's (the service's model worker owns one), as
//! every key/value cache in the engine is; it forgets everything when used with another
//! model.
//!
//! Memory is bounded by bytes (keys, values, hidden states, token ids and a per-entry
//! allowance): when an insertion goes over the bound, the least recently used leaves go
//! first (a node is used whenever a prompt reads or extends it, so its ancestors are used
//! at least as recently and never go before it). An entry larger than the whole bound is
//! not stored.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use candle_core::Tensor;

use super::tree_eval::Precomputed;
use crate::arch::llama::KvCache;

/// Bytes counted for each entry beside its tensors (node bookkeeping).
const ENTRY_OVERHEAD_BYTES: usize = 256;

/// Part of a cached path: the first `len` tokens of cache entry `node`, at path position
/// `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedPiece {
    node: usize,
    start: usize,
    len: usize,
}

/// The cached start of one prompt: the pieces covering its first [`Self::len`] tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedPrefix {
    pieces: Vec<CachedPiece>,
}

impl CachedPrefix {
    /// Tokens covered.
    pub fn len(&self) -> usize {
        self.pieces.last().map_or(0, |p| p.start + p.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the cache holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Bytes held now.
    pub bytes: usize,
    /// Tokens held now.
    pub tokens: usize,
    /// Entries (trie nodes) held now.
    pub entries: usize,
    /// Prompt tokens found in the cache, over all lookups.
    pub hit_tokens: usize,
    /// Tokens stored, over all insertions.
    pub stored_tokens: usize,
    /// Entries dropped to stay within the bound.
    pub evictions: usize,
}

struct Entry {
    tokens: Vec<u32>,
    kv: KvCache,
    hidden: Tensor,
    parent: usize,
    children: BTreeMap<u32, usize>,
    last_used: u64,
    bytes: usize,
}

/// The bounded prefix cache; see the module header.
pub struct PrefixCache {
    capacity: usize,
    /// Slot 0 is the root (no entry); freed slots are reused.
    entries: Vec<Option<Entry>>,
    root_children: BTreeMap<u32, usize>,
    free: Vec<usize>,
    clock: u64,
    model: Option<String>,
    stats: PrefixCacheStats,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats)
            .finish()
    }
}

const ROOT: usize = 0;

impl PrefixCache {
    /// A cache holding at most `capacity_bytes` (0: nothing is kept).
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            capacity: capacity_bytes,
            entries: vec![None],
            root_children: BTreeMap::new(),
            free: Vec::new(),
            clock: 0,
            model: None,
            stats: PrefixCacheStats::default(),
        }
    }

    /// The bound in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Drop every entry.
    pub fn clear(&mut self) {
        self.entries = vec![None];
        self.root_children.clear();
        self.free.clear();
        self.stats.bytes = 0;
        self.stats.tokens = 0;
        self.stats.entries = 0;
    }

    /// Use the cache for the model with this fingerprint: entries of another model are
    /// dropped. Starts a new period of use (for least-recently-used eviction).
    pub fn begin(&mut self, model_fingerprint: &str) {
        if self.model.as_deref() != Some(model_fingerprint) {
            self.clear();
            self.model = Some(model_fingerprint.to_string());
        }
        self.clock += 1;
    }

    fn entry(&self, id: usize) -> Result<&Entry> {
        self.entries
            .get(id)
            .and_then(Option::as_ref)
            .with_context(|| format!("prefix cache entry {id} is missing"))
    }

    fn children_of(&self, id: usize) -> &BTreeMap<u32, usize> {
        if id == ROOT {
            &self.root_children
        } else {
            &self.entries[id].as_ref().expect("a live entry").children
        }
    }

    /// The longest cached start of `tokens`; the entries read count as used now.
    pub fn lookup(&mut self, tokens: &[u32]) -> CachedPrefix {
        let mut pieces = Vec::new();
        let mut at = ROOT;
        let mut depth = 0;
        while depth < tokens.len() {
            let Some(&child) = self.children_of(at).get(&tokens[depth]) else {
                break;
            };
            let entry = self.entries[child].as_mut().expect("a live entry");
            let matched = entry
                .tokens
                .iter()
                .zip(&tokens[depth..])
                .take_while(|(a, b)| a == b)
                .count();
            entry.last_used = self.clock;
            pieces.push(CachedPiece {
                node: child,
                start: depth,
                len: matched,
            });
            depth += matched;
            if matched < entry.tokens.len() {
                break;
            }
            at = child;
        }
        self.stats.hit_tokens += depth;
        CachedPrefix { pieces }
    }

    /// Keys/values and hidden states of path positions `start..start + len`, which
    /// `prefix` must cover.
    pub fn range(&self, prefix: &CachedPrefix, start: usize, len: usize) -> Result<Precomputed> {
        if start + len > prefix.len() || len == 0 {
            bail!(
                "positions {start}..{} are not inside the cached prefix of {} tokens",
                start + len,
                prefix.len()
            );
        }
        let mut own = Vec::new();
        let mut hidden = Vec::new();
        for piece in &prefix.pieces {
            let from = start.max(piece.start);
            let to = (start + len).min(piece.start + piece.len);
            if from >= to {
                continue;
            }
            let entry = self.entry(piece.node)?;
            let offset = from - piece.start;
            own.push(slice_kv(&entry.kv, offset, to - from)?);
            hidden.push(entry.hidden.narrow(0, offset, to - from)?);
        }
        let hidden = if hidden.len() == 1 {
            hidden.remove(0)
        } else {
            Tensor::cat(&hidden, 0)?
        };
        Ok(Precomputed { own, hidden })
    }

    /// Store a computed trie node: the last `path.len() - start` tokens of `path`, with
    /// their keys/values (pieces in order) and hidden states. The first `start` tokens
    /// must be cached already (else nothing is stored). Returns whether it was stored.
    pub fn insert(
        &mut self,
        path: &[u32],
        start: usize,
        own: &[KvCache],
        hidden: &Tensor,
    ) -> Result<bool> {
        let len = path.len().saturating_sub(start);
        let held: usize = own.iter().map(KvCache::len).sum();
        if len == 0 || held != len || hidden.dim(0)? != len {
            bail!(
                "a cache entry of {len} tokens got {held} key/value positions and {} hidden states",
                hidden.dim(0)?
            );
        }
        let kv = join(own)?;
        let hidden = hidden.copy()?;
        let bytes = kv.memory_bytes()
            + hidden.elem_count() * hidden.dtype().size_in_bytes()
            + len * std::mem::size_of::<u32>()
            + ENTRY_OVERHEAD_BYTES;
        if bytes > self.capacity {
            return Ok(false);
        }
        // Walk to depth `start`, splitting the entry it ends inside.
        let mut at = ROOT;
        let mut depth = 0;
        while depth < start {
            let Some(&child) = self.children_of(at).get(&path[depth]) else {
                return Ok(false);
            };
            let entry = self.entry(child)?;
            let matched = entry
                .tokens
                .iter()
                .zip(&path[depth..start])
                .take_while(|(a, b)| a == b)
                .count();
            if matched == 0 || (matched < entry.tokens.len() && depth + matched < start) {
                return Ok(false);
            }
            if matched < entry.tokens.len() {
                self.split(child, matched)?;
            }
            self.entries[child]
                .as_mut()
                .expect("a live entry")
                .last_used = self.clock;
            depth += matched;
            at = child;
        }
        if self.children_of(at).contains_key(&path[start]) {
            return Ok(false);
        }
        let id = self.free.pop().unwrap_or_else(|| {
            self.entries.push(None);
            self.entries.len() - 1
        });
        self.entries[id] = Some(Entry {
            tokens: path[start..].to_vec(),
            kv,
            hidden,
            parent: at,
            children: BTreeMap::new(),
            last_used: self.clock,
            bytes,
        });
        self.children_mut(at).insert(path[start], id);
        self.stats.bytes += bytes;
        self.stats.tokens += len;
        self.stats.entries += 1;
        self.stats.stored_tokens += len;
        self.evict();
        Ok(true)
    }

    fn children_mut(&mut self, id: usize) -> &mut BTreeMap<u32, usize> {
        if id == ROOT {
            &mut self.root_children
        } else {
            &mut self.entries[id].as_mut().expect("a live entry").children
        }
    }

    /// Cut entry `id` after `at` tokens: it keeps the head, a new child takes the tail
    /// and the children.
    fn split(&mut self, id: usize, at: usize) -> Result<()> {
        let entry = self.entries[id]
            .take()
            .context("splitting a missing entry")?;
        let total = entry.tokens.len();
        let head_kv = slice_kv(&entry.kv, 0, at)?;
        let tail_kv = slice_kv(&entry.kv, at, total - at)?;
        let head_hidden = entry.hidden.narrow(0, 0, at)?.copy()?;
        let tail_hidden = entry.hidden.narrow(0, at, total - at)?.copy()?;
        let size = |kv: &KvCache, hidden: &Tensor, tokens: usize| {
            kv.memory_bytes()
                + hidden.elem_count() * hidden.dtype().size_in_bytes()
                + tokens * std::mem::size_of::<u32>()
                + ENTRY_OVERHEAD_BYTES
        };
        let tail_id = self.free.pop().unwrap_or_else(|| {
            self.entries.push(None);
            self.entries.len() - 1
        });
        for &grandchild in entry.children.values() {
            if let Some(child) = self.entries[grandchild].as_mut() {
                child.parent = tail_id;
            }
        }
        let tail = Entry {
            tokens: entry.tokens[at..].to_vec(),
            bytes: size(&tail_kv, &tail_hidden, total - at),
            kv: tail_kv,
            hidden: tail_hidden,
            parent: id,
            children: entry.children,
            last_used: entry.last_used,
        };
        let head = Entry {
            tokens: entry.tokens[..at].to_vec(),
            bytes: size(&head_kv, &head_hidden, at),
            kv: head_kv,
            hidden: head_hidden,
            parent: entry.parent,
            children: BTreeMap::from([(tail.tokens[0], tail_id)]),
            last_used: entry.last_used,
        };
        self.stats.bytes = self.stats.bytes - entry.bytes + head.bytes + tail.bytes;
        self.stats.entries += 1;
        self.entries[tail_id] = Some(tail);
        self.entries[id] = Some(head);
        Ok(())
    }

    /// Drop least recently used leaves until the cache holds at most `bytes` (its bound
    /// stays): room for what a caller must hold beside it (generation's rows within its
    /// key/value budget).
    pub fn shrink_to(&mut self, bytes: usize) {
        self.evict_to(bytes.min(self.capacity));
    }

    /// Drop least recently used leaves until the cache is within its bound.
    fn evict(&mut self) {
        self.evict_to(self.capacity);
    }

    fn evict_to(&mut self, bound: usize) {
        while self.stats.bytes > bound {
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter_map(|(id, e)| e.as_ref().map(|e| (id, e)))
                .filter(|(_, e)| e.children.is_empty())
                .min_by_key(|(id, e)| (e.last_used, std::cmp::Reverse(*id)))
                .map(|(id, _)| id);
            let Some(id) = victim else { break };
            let entry = self.entries[id].take().expect("a live entry");
            let first = entry.tokens[0];
            self.children_mut(entry.parent).remove(&first);
            self.free.push(id);
            self.stats.bytes -= entry.bytes;
            self.stats.tokens -= entry.tokens.len();
            self.stats.entries -= 1;
            self.stats.evictions += 1;
        }
    }
}

/// Positions `start..start + len` of a one-row cache, as their own contiguous cache (the
/// whole cache is shared, not copied).
pub fn slice_kv(kv: &KvCache, start: usize, len: usize) -> Result<KvCache> {
    if start == 0 && len == kv.len() {
        return Ok(kv.clone());
    }
    let layers = (0..kv.num_layers())
        .map(|index| {
            let (k, v) = kv.layer(index);
            Ok((
                k.narrow(2, start, len)?.contiguous()?,
                v.narrow(2, start, len)?.contiguous()?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    KvCache::new(layers)
}

/// Pieces of consecutive positions joined into one cache.
fn join(pieces: &[KvCache]) -> Result<KvCache> {
    let (first, rest) = pieces.split_first().context("no key/value pieces")?;
    let mut joined = first.clone();
    for piece in rest {
        joined = joined.append(piece)?;
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A fake one-layer entry for `tokens` whose values encode the path position.
    fn node(start: usize, len: usize) -> (Vec<KvCache>, Tensor) {
        let data: Vec<f32> = (start..start + len).map(|p| p as f32).collect();
        let k = Tensor::from_vec(data.clone(), (1, 1, len, 1), &Device::Cpu).unwrap();
        let hidden = Tensor::from_vec(data, (len, 1), &Device::Cpu).unwrap();
        (vec![KvCache::new(vec![(k.clone(), k)]).unwrap()], hidden)
    }

    fn insert(cache: &mut PrefixCache, path: &[u32], start: usize) -> bool {
        let (own, hidden) = node(start, path.len() - start);
        cache.insert(path, start, &own, &hidden).unwrap()
    }

    fn positions(done: &Precomputed) -> Vec<f32> {
        done.hidden.flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn lookups_find_the_longest_cached_start_across_split_entries() {
        let mut cache = PrefixCache::new(1 << 20);
        cache.begin("m");
        assert!(insert(&mut cache, &[1, 2, 3, 4], 0));
        assert!(insert(&mut cache, &[1, 2, 3, 4, 5, 6], 4));
        // A path that leaves inside the first entry splits it.
        assert!(insert(&mut cache, &[1, 2, 9], 2));
        assert_eq!(cache.stats().entries, 4);
        let found = cache.lookup(&[1, 2, 3, 4, 5, 7]);
        assert_eq!(found.len(), 5);
        let done = cache.range(&found, 1, 4).unwrap();
        assert_eq!(positions(&done), vec![1.0, 2.0, 3.0, 4.0]);
        let keys: usize = done.own.iter().map(KvCache::len).sum();
        assert_eq!(keys, 4);
        assert_eq!(cache.lookup(&[1, 2, 9, 9]).len(), 3);
        assert_eq!(cache.lookup(&[7]).len(), 0);
        assert!(cache.range(&found, 3, 3).is_err());
        // Without its start in the cache, nothing is stored.
        assert!(!insert(&mut cache, &[5, 5, 5], 2));
    }

    #[test]
    fn the_bound_evicts_least_recently_used_leaves_first() {
        let (own, hidden) = node(0, 4);
        let entry_bytes = own[0].memory_bytes() + 16 + 16 + ENTRY_OVERHEAD_BYTES;
        let mut cache = PrefixCache::new(2 * entry_bytes);
        cache.begin("m");
        assert!(cache.insert(&[1, 2, 3, 4], 0, &own, &hidden).unwrap());
        cache.begin("m");
        assert!(cache.insert(&[5, 6, 7, 8], 0, &own, &hidden).unwrap());
        cache.begin("m");
        assert_eq!(cache.lookup(&[1, 2, 3, 4]).len(), 4);
        cache.begin("m");
        assert!(cache.insert(&[9, 9, 9, 9], 0, &own, &hidden).unwrap());
        // [5..8] was used longest ago.
        assert_eq!(cache.lookup(&[5, 6, 7, 8]).len(), 0);
        assert_eq!(cache.lookup(&[1, 2, 3, 4]).len(), 4);
        assert_eq!(cache.lookup(&[9, 9, 9, 9]).len(), 4);
        let stats = cache.stats();
        assert!(stats.bytes <= cache.capacity(), "{stats:?}");
        assert_eq!((stats.entries, stats.evictions), (2, 1));
        // An entry larger than the bound is not stored; another model clears the cache.
        let (big, big_hidden) = node(0, 64);
        let path: Vec<u32> = (100..164).collect();
        assert!(!cache.insert(&path, 0, &big, &big_hidden).unwrap());
        cache.begin("other");
        assert_eq!(cache.stats().entries, 0);
        assert_eq!(cache.lookup(&[1, 2, 3, 4]).len(), 0);
        // A zero bound keeps nothing.
        let mut none = PrefixCache::new(0);
        none.begin("m");
        assert!(!none.insert(&[1, 2, 3, 4], 0, &own, &hidden).unwrap());
    }
}
