//! A gate for tests that must hold model calls in flight: each call that reaches the
//! gate is counted and waits until the test opens it. The server tests use it to have a
//! request in progress while they reload tokens, fill a queue or drain the service.

use std::sync::{Condvar, Mutex};

/// Holds model calls until released; counts the calls that reached it.
#[derive(Default)]
pub struct Gate {
    /// (open, calls that reached the gate)
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl Gate {
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

    /// Waits until `calls` calls have reached the gate.
    pub fn wait_for(&self, calls: usize) {
        let mut state = self.state.lock().unwrap();
        while state.1 < calls {
            state = self.changed.wait(state).unwrap();
        }
    }
}
