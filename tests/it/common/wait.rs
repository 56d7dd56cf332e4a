//! Waiting for an event in a test: poll a condition (a counter, a health field, a file, a
//! child's exit) until it holds, with a bound, and fail naming the event that never came.
//! Tests never sleep a fixed time and hope that something happened meanwhile: under load
//! (a build beside the suite, CI's two busy cores) such hopes are what made tests flaky.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long an event may take before the test fails: generous, so that a loaded machine
/// is never mistaken for a hang, and finite, so that a hang is a failure and not a stall.
pub const BOUND: Duration = Duration::from_secs(180);

/// How often the condition is looked at.
const POLL: Duration = Duration::from_millis(5);

/// Poll `ready` until it holds; panic naming `event` if it has not within [`BOUND`].
pub fn until(event: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > BOUND {
            panic!("waited {BOUND:?} for {event}, and it never came");
        }
        std::thread::sleep(POLL);
    }
}

/// Poll `ready` until it gives a value; panic naming `event` if it has not within
/// [`BOUND`].
pub fn for_value<T>(event: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        if started.elapsed() > BOUND {
            panic!("waited {BOUND:?} for {event}, and it never came");
        }
        std::thread::sleep(POLL);
    }
}

/// [`until`] for async conditions (an HTTP request), yielding to the runtime between
/// looks.
pub async fn until_async<F, Fut>(event: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !ready().await {
        if started.elapsed() > BOUND {
            panic!("waited {BOUND:?} for {event}, and it never came");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`for_value`] for async conditions.
pub async fn for_value_async<T, F, Fut>(event: &str, mut ready: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = ready().await {
            return value;
        }
        if started.elapsed() > BOUND {
            panic!("waited {BOUND:?} for {event}, and it never came");
        }
        tokio::time::sleep(POLL).await;
    }
}
