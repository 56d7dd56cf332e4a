//! Counting heap allocations, so that tests and benchmarks can say how many a forward
//! pass makes. The process allocator (mimalloc) is wrapped in a counter of calls and
//! bytes; two relaxed atomic additions per allocation, nothing else. And the one setting
//! of the allocator a run needs ([`keep_freed_memory`]).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// An allocator that counts what it hands out before delegating to `A`.
pub struct Counting<A>(pub A);

// SAFETY: every call is forwarded unchanged to the wrapped allocator.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        self.0.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        self.0.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        self.0.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.0.dealloc(ptr, layout)
    }
}

#[inline]
fn count(bytes: usize) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Allocations (including reallocations) and bytes requested since the process started,
/// by all threads.
pub fn allocated() -> (u64, u64) {
    (CALLS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

/// mimalloc's option `mi_option_purge_delay` (its position in `mi_option_e`,
/// `include/mimalloc.h`, the same in mimalloc 2 and 3).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    /// mimalloc's `mi_option_set` (linked by the `mimalloc` crate's allocator).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Keep memory the process frees for its own next allocations instead of handing it back
/// to the system 10 ms later (mimalloc's default purge delay): a forward pass allocates
/// and frees the same multi-megabyte buffers at every layer and step, and each purged
/// page was faulted and zeroed again by the kernel. Measured on a 16-feedback generation
/// (`bench generate`, int8): 27,000 page faults down to 1,200, about 5% of the run. The
/// process holds its peak (which the memory plan counts) until it exits.
///
/// A `MIMALLOC_PURGE_DELAY` (or `MIMALLOC_RESET_DELAY`) in the environment wins. Call it
/// once at start-up, before the work begins.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
        || std::env::var_os("MIMALLOC_RESET_DELAY").is_some()
    {
        return;
    }
    // SAFETY: sets one of mimalloc's options (a plain store into its option table);
    // -1 is the documented value for "never purge".
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}
