//! Where a forward pass's time goes: the seconds the buffer path spends in the layers'
//! matrix products and in the segment-attention kernel, summed while a benchmark asks.
//!
//! Issue 50 asks `bench pairwise` to say how a tree run divides between the products,
//! attention and the rest, so that the next kernel to speed up is chosen by measurement
//! (once the products run on tiles, attention may dominate). The forward passes run on
//! the thread that asks for them (the decoder calls `forward_groups` on its caller's
//! thread; the kernels fan out to rayon inside each call), so the sums are per thread:
//! a recording on one thread never counts another thread's passes (tests running
//! passes side by side in one process stay independent). Outside a recording a timed
//! call costs one thread-local read and no clock.
//!
//! Issue 61: a recording also records the tile kernels' own split (the tile instructions
//! against the work around them, `nlg_judge_kernels::timing`), on the same thread.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The timed parts of a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The layers' matrix products (query/key/value, output, gate/up, down).
    Products,
    /// The segment-attention kernel itself (`Q K^T`, softmax, `P V`), without the
    /// rotary embedding and the key/value bookkeeping around it.
    Attention,
}

/// Time summed per part during a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Split {
    pub products: Duration,
    pub attention: Duration,
    /// The tile kernels' parts (all zero where no tile path ran).
    pub tiles: nlg_judge_kernels::timing::TileSplit,
}

thread_local! {
    /// The running sums while this thread records, `None` otherwise.
    static RECORDING: Cell<Option<Split>> = const { Cell::new(None) };
}

/// Start recording on this thread (from zero, dropping any recording in progress).
pub fn start() {
    RECORDING.with(|r| r.set(Some(Split::default())));
    nlg_judge_kernels::timing::start();
}

/// Stop recording on this thread and return the sums (zero if none was started).
pub fn finish() -> Split {
    let tiles = nlg_judge_kernels::timing::finish();
    RECORDING
        .with(|r| r.take())
        .map(|split| Split { tiles, ..split })
        .unwrap_or_default()
}

/// Run `body`, adding its wall time to `part` when this thread records.
#[inline]
pub fn timed<R>(part: Part, body: impl FnOnce() -> R) -> R {
    if RECORDING.with(|r| r.get()).is_none() {
        return body();
    }
    let start = Instant::now();
    let result = body();
    let elapsed = start.elapsed();
    RECORDING.with(|r| {
        // A nested `finish` inside `body` (none exists) ends the recording: add nothing.
        if let Some(mut split) = r.get() {
            match part {
                Part::Products => split.products += elapsed,
                Part::Attention => split.attention += elapsed,
            }
            r.set(Some(split));
        }
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_while_recording_and_only_on_this_thread() {
        let pause = Duration::from_millis(2);
        // Not recording: the body runs and nothing is kept.
        assert_eq!(timed(Part::Products, || 7), 7);
        assert_eq!(finish(), Split::default());

        start();
        timed(Part::Products, || std::thread::sleep(pause));
        timed(Part::Attention, || std::thread::sleep(pause));
        timed(Part::Attention, || std::thread::sleep(pause));
        // Another thread's calls are not this recording's, and it records nothing.
        let other = std::thread::spawn(move || {
            timed(Part::Products, || std::thread::sleep(pause));
            finish()
        });
        assert_eq!(other.join().expect("the other thread"), Split::default());
        let split = finish();
        assert!(split.products >= pause, "{split:?}");
        assert!(split.attention >= 2 * pause, "{split:?}");
        // Finished: nothing more is added.
        timed(Part::Products, || std::thread::sleep(pause));
        assert_eq!(finish(), Split::default());
    }
}
