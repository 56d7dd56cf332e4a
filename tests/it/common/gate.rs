//! A gate for tests that must hold model calls in flight: each call that reaches the
//! gate is counted and waits until the test opens it. The server tests use it to have a
//! request in progress while they reload tokens, fill a queue or drain the service.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Holds model calls until released; counts the calls that reached it.
#[derive(Default)]
pub struct Gate {
    /// (open, calls that reached the gate)
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl Gate {
    /// A gate that holds every call until released.
    pub fn closed() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A gate that lets every call through (and counts it).
    pub fn open() -> Arc<Self> {
        let gate = Self::default();
        gate.state.lock().unwrap().0 = true;
        Arc::new(gate)
    }

    /// Called from inside the model: counts this call, then waits until the gate opens.
    pub fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        state.1 += 1;
        self.changed.notify_all();
        while !state.0 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Opens the gate for every call waiting and every later one.
    pub fn release(&self) {
        self.state.lock().unwrap().0 = true;
        self.changed.notify_all();
    }

    /// Waits until `calls` calls have reached the gate; fails the test, naming the
    /// count, if they have not within `wait::BOUND`.
    pub fn wait_for(&self, calls: usize) {
        let deadline = Instant::now() + super::wait::BOUND;
        let mut state = self.state.lock().unwrap();
        while state.1 < calls {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "waited {:?} for {calls} model calls to reach the gate, and only {} came",
                    super::wait::BOUND,
                    state.1
                );
            }
            state = self.changed.wait_timeout(state, left).unwrap().0;
        }
    }
}
