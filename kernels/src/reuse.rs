//! Buffers a thread keeps from call to call.
//!
//! The kernels and the model's forward pass need scratch space of the same size on every
//! layer of every pass; fresh buffers each time cost the kernel's zeroing of new pages.
//! Each user keeps its buffers in a thread-local `RefCell` and reaches them through
//! [`with_reused`], which also covers the one case a plain borrow would panic on: a
//! nested call on the same thread (rayon may run another job on a thread that waits),
//! which gets fresh buffers instead.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Run `body` on this thread's buffers in `key`, or on fresh ones when they are in use.
pub fn with_reused<T: Default + 'static, R>(
    key: &'static LocalKey<RefCell<T>>,
    body: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut kept) => body(&mut kept),
        Err(_) => body(&mut T::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static KEPT: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn buffers_are_kept_and_a_nested_call_gets_fresh_ones() {
        with_reused(&KEPT, |kept| kept.push(7));
        let seen = with_reused(&KEPT, |kept| {
            let nested = with_reused(&KEPT, |inner| inner.len());
            (kept.clone(), nested)
        });
        assert_eq!(seen, (vec![7], 0));
    }
}
