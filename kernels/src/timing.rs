//! Where the tile paths' time goes: cycle counts of the tile instructions and of the
//! work around them, in the tile attention and the tile products, summed while a caller
//! asks.
//!
//! Issue 61: on an AMX machine the tile attention took 3.7 times the f32 attention, and a
//! profile found the cost in the plain-Rust work around the tiles, not in the tiles. So
//! `bench pairwise --json` reports each tile kernel's seconds split into its parts, on
//! every machine: where no AMX runs, the portable model stands in for the tiles
//! (`NLG_JUDGE_TILES=model`, see `gemm::amx`), so the work around them is timed as it
//! runs on AMX while the tile instructions take the model's time.
//!
//! A recording belongs to the thread that starts it ([`start`], [`finish`]), as the
//! forward pass's own split does (`src/arch/llama/time_split.rs`): a kernel call on that
//! thread, while it records, runs its timed variant, whose workers (rayon's threads) sum
//! counter ticks per part into their own slot of the call's sums (no shared cache line,
//! no locked instruction); at the call's end the sums and the call's wall time join the
//! recording. Outside a recording a call costs one thread-local read: the untimed
//! variant is compiled without a single counter read (`Stopwatch<false>`).
//!
//! The counter is the time-stamp counter on x86-64 (`rdtsc`: constant rate, not core
//! cycles; about 20 to 40 cycles to read) and nanoseconds elsewhere; the report divides
//! each kernel's wall seconds between its parts in proportion to their ticks, so the
//! unit cancels. The reads themselves add to the parts they close (a few per key tile).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The timed parts of the tile paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Tile attention: the tile instructions (configuration, loads, `tdpbf16ps`, stores)
    /// of both products.
    AttentionTiles,
    /// Tile attention: the online-softmax update (`tile_softmax.rs`).
    AttentionSoftmax,
    /// Tile attention: rounding and packing keys and values (once per call) and queries
    /// (once per chunk).
    AttentionPacking,
    /// Tile attention: the rest of its work items (adding the `P V` blocks into the
    /// outputs, masks, the final normalisation, bookkeeping).
    AttentionOther,
    /// Tile products: the tile instructions.
    ProductTiles,
    /// Tile products: the activations rounded (bf16) or quantised (int8) into tile rows,
    /// once per call, on the calling thread.
    ProductConversion,
    /// Tile products: the rest of each output block (operand set-up, zeroing, the int8
    /// scaling, the copy into the output).
    ProductOther,
}

impl Part {
    /// Every part, in the order of [`TileSplit::ticks`].
    pub const ALL: [Part; 7] = [
        Part::AttentionTiles,
        Part::AttentionSoftmax,
        Part::AttentionPacking,
        Part::AttentionOther,
        Part::ProductTiles,
        Part::ProductConversion,
        Part::ProductOther,
    ];

    /// The part's name in reports (`attention_tiles`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Part::AttentionTiles => "attention_tiles",
            Part::AttentionSoftmax => "attention_softmax",
            Part::AttentionPacking => "attention_packing",
            Part::AttentionOther => "attention_other",
            Part::ProductTiles => "products_tiles",
            Part::ProductConversion => "products_conversion",
            Part::ProductOther => "products_other",
        }
    }

    /// The kernel the part belongs to.
    pub fn kernel(self) -> Kernel {
        match self {
            Part::AttentionTiles
            | Part::AttentionSoftmax
            | Part::AttentionPacking
            | Part::AttentionOther => Kernel::Attention,
            _ => Kernel::Products,
        }
    }
}

/// The two tile kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `attention::segment_attention_tiles`.
    Attention,
    /// The bf16 and int8 products on tiles (`gemm::amx`).
    Products,
}

const PARTS: usize = Part::ALL.len();

/// What a recording summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TileSplit {
    /// Counter ticks per part ([`Part::ALL`]'s order), summed over the threads that did
    /// the work.
    pub ticks: [u64; PARTS],
    /// Wall seconds of the tile attention's calls and of the tile products' calls.
    pub attention_seconds: f64,
    pub product_seconds: f64,
    /// Calls of each.
    pub attention_calls: u64,
    pub product_calls: u64,
}

impl TileSplit {
    /// The ticks of `part`.
    pub fn ticks(&self, part: Part) -> u64 {
        self.ticks[part as usize]
    }

    /// `part`'s share of its kernel's ticks (0 when the kernel never ran).
    pub fn share(&self, part: Part) -> f64 {
        let total: u64 = Part::ALL
            .iter()
            .filter(|p| p.kernel() == part.kernel())
            .map(|&p| self.ticks(p))
            .sum();
        if total == 0 {
            0.0
        } else {
            self.ticks(part) as f64 / total as f64
        }
    }

    /// `part`'s seconds: its kernel's wall seconds times its share of the ticks.
    pub fn seconds(&self, part: Part) -> f64 {
        let wall = match part.kernel() {
            Kernel::Attention => self.attention_seconds,
            Kernel::Products => self.product_seconds,
        };
        wall * self.share(part)
    }
}

thread_local! {
    /// The running sums while this thread records, `None` otherwise.
    static RECORDING: Cell<Option<TileSplit>> = const { Cell::new(None) };
}

/// Start recording on this thread (from zero, dropping any recording in progress).
pub fn start() {
    RECORDING.with(|r| r.set(Some(TileSplit::default())));
}

/// Stop recording on this thread and return the sums (zero if none was started).
pub fn finish() -> TileSplit {
    RECORDING.with(|r| r.take()).unwrap_or_default()
}

/// Whether this thread records.
pub fn recording() -> bool {
    RECORDING.with(|r| r.get().is_some())
}

/// The counter: the time-stamp counter on x86-64, nanoseconds since the first read
/// elsewhere.
#[inline(always)]
pub(crate) fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86-64 CPU.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// One thread's sums, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Slot([AtomicU64; PARTS]);

/// A timed call's sums: a slot per thread of rayon's pool and one for any other thread.
pub(crate) struct CallTicks {
    slots: Vec<Slot>,
}

impl CallTicks {
    fn new() -> Self {
        let slots = rayon::current_num_threads() + 1;
        Self {
            slots: (0..slots).map(|_| Slot::default()).collect(),
        }
    }

    /// Add `ticks` to this thread's slot (only this thread writes it: a plain read and
    /// write, no locked instruction).
    fn add(&self, ticks: &[u64; PARTS]) {
        let index = rayon::current_thread_index().map_or(0, |i| i + 1);
        let slot = &self.slots[index.min(self.slots.len() - 1)];
        for (sum, &t) in slot.0.iter().zip(ticks) {
            if t != 0 {
                // Wrapping: a part taken from (`Stopwatch::lap_within`) is negative in a
                // slot until the enclosing stopwatch adds the whole.
                sum.store(
                    sum.load(Ordering::Relaxed).wrapping_add(t),
                    Ordering::Relaxed,
                );
            }
        }
    }

    fn total(&self) -> [u64; PARTS] {
        let mut total = [0u64; PARTS];
        for slot in &self.slots {
            for (sum, part) in total.iter_mut().zip(&slot.0) {
                *sum = sum.wrapping_add(part.load(Ordering::Relaxed));
            }
        }
        total
    }
}

/// Run one call of `kernel`: `body(None)` when this thread does not record; otherwise
/// `body(Some(sums))`, the call's wall time and sums added to the recording.
pub(crate) fn call<R>(kernel: Kernel, body: impl FnOnce(Option<&CallTicks>) -> R) -> R {
    if !recording() {
        return body(None);
    }
    let sums = CallTicks::new();
    let start = Instant::now();
    let result = body(Some(&sums));
    let seconds = start.elapsed().as_secs_f64();
    let ticks = sums.total();
    RECORDING.with(|r| {
        // A nested `finish` inside `body` (none exists) ends the recording: add nothing.
        if let Some(mut split) = r.get() {
            for (sum, t) in split.ticks.iter_mut().zip(ticks) {
                *sum += t;
            }
            match kernel {
                Kernel::Attention => {
                    split.attention_seconds += seconds;
                    split.attention_calls += 1;
                }
                Kernel::Products => {
                    split.product_seconds += seconds;
                    split.product_calls += 1;
                }
            }
            r.set(Some(split));
        }
    });
    result
}

/// A thread's laps through the parts of some work: each [`Self::lap`] charges the ticks
/// since the previous one (or since [`Self::new`]) to a part. With `ON` false it reads
/// no counter and compiles to nothing.
pub(crate) struct Stopwatch<const ON: bool> {
    ticks: [u64; PARTS],
    last: u64,
}

impl<const ON: bool> Stopwatch<ON> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Self {
            ticks: [0; PARTS],
            last: if ON { now() } else { 0 },
        }
    }

    /// Charge the ticks since the last lap to `part`.
    #[inline(always)]
    pub(crate) fn lap(&mut self, part: Part) {
        if ON {
            let now = now();
            self.ticks[part as usize] =
                self.ticks[part as usize].wrapping_add(now.wrapping_sub(self.last));
            self.last = now;
        }
    }

    /// Restart from now, charging nothing (the time since is counted elsewhere).
    #[inline(always)]
    pub(crate) fn skip(&mut self) {
        if ON {
            self.last = now();
        }
    }

    /// Charge the ticks since the last lap to `part` and take them from `outer`, the part
    /// an enclosing stopwatch charges the whole time to.
    #[inline(always)]
    pub(crate) fn lap_within(&mut self, part: Part, outer: Part) {
        if ON {
            let now = now();
            let ticks = now.wrapping_sub(self.last);
            self.ticks[part as usize] = self.ticks[part as usize].wrapping_add(ticks);
            self.ticks[outer as usize] = self.ticks[outer as usize].wrapping_sub(ticks);
            self.last = now;
        }
    }

    /// Add the laps to `sums` (this thread's slot) and start again from zero.
    #[inline(always)]
    pub(crate) fn flush(&mut self, sums: Option<&CallTicks>) {
        if ON {
            if let Some(sums) = sums {
                sums.add(&self.ticks);
            }
            self.ticks = [0; PARTS];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_while_recording_and_only_on_this_thread() {
        let work = |sums: Option<&CallTicks>| {
            let mut watch = Stopwatch::<true>::new();
            std::thread::sleep(std::time::Duration::from_millis(2));
            watch.lap(Part::AttentionSoftmax);
            watch.lap(Part::AttentionTiles);
            watch.flush(sums);
            sums.is_some()
        };
        // Not recording: untimed.
        assert!(!call(Kernel::Attention, work));
        assert_eq!(finish(), TileSplit::default());

        start();
        assert!(call(Kernel::Attention, work));
        // Another thread's calls are not this recording's, and it records nothing.
        let other = std::thread::spawn(move || {
            assert!(!call(Kernel::Attention, work));
            finish()
        });
        assert_eq!(
            other.join().expect("the other thread"),
            TileSplit::default()
        );
        let split = finish();
        assert_eq!(split.attention_calls, 1);
        assert_eq!(split.product_calls, 0);
        assert!(split.attention_seconds >= 0.002, "{split:?}");
        // The sleep went to the first lap, almost nothing to the second.
        let softmax = split.ticks(Part::AttentionSoftmax);
        assert!(
            softmax > 0 && softmax > 100 * split.ticks(Part::AttentionTiles),
            "{split:?}"
        );
        assert!(split.share(Part::AttentionSoftmax) > 0.99);
        assert!(split.seconds(Part::AttentionSoftmax) <= split.attention_seconds);
        assert_eq!(split.share(Part::ProductTiles), 0.0);
        // Finished: nothing more is added.
        call(Kernel::Products, work);
        assert_eq!(finish(), TileSplit::default());
    }

    #[test]
    fn workers_sum_into_their_own_slots() {
        use rayon::prelude::*;
        start();
        call(Kernel::Products, |sums| {
            (0..64).into_par_iter().for_each(|_| {
                let mut watch = Stopwatch::<true>::new();
                std::hint::black_box((0..1000u64).sum::<u64>());
                watch.lap(Part::ProductTiles);
                watch.flush(sums);
            })
        });
        let split = finish();
        assert_eq!(split.product_calls, 1);
        assert!(split.ticks(Part::ProductTiles) > 0);
        assert_eq!(split.share(Part::ProductTiles), 1.0);
        // An untimed stopwatch charges nothing.
        let mut watch = Stopwatch::<false>::new();
        watch.lap(Part::ProductTiles);
        assert_eq!(watch.ticks, [0; PARTS]);
    }
}
