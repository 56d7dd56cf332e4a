//! Who made each request, and the per-token bound on queued requests.
//!
//! With tokens configured, every `/v1` request is made by a token's name ([`Caller`]).
//! Each name may have at most `max_queued_per_token` requests waiting for the model
//! worker or being served by it; one more is answered 503 with `Retry-After` at once,
//! so that one client's flood fills its own share and not the whole queue, and the
//! others' requests are still taken. Counters per name (requests, queued now, refused)
//! are shown by `/healthz` to callers presenting a token; they never hold a token or a
//! text.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

/// Default bound on the requests one token may have queued (a quarter of the default
/// global queue bound: four clients flooding at once still leave it room).
pub const DEFAULT_MAX_QUEUED_PER_TOKEN: usize = 64;

/// The name of the token a request came with; `None` when the service has no tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller(pub Option<Arc<str>>);

impl Caller {
    /// The name, or `-` without tokens (for the log).
    pub fn label(&self) -> &str {
        self.0.as_deref().unwrap_or("-")
    }
}

/// One name's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CallerCounts {
    /// Requests authenticated with the name.
    pub requests: u64,
    /// Requests waiting for the model worker or served by it now.
    pub queued: usize,
    /// Requests refused (503) because the name had `max_queued_per_token` queued.
    pub refused: u64,
}

/// The counters of every name seen, and the bound.
#[derive(Debug)]
pub struct Callers {
    max_queued: usize,
    by_name: Mutex<BTreeMap<Arc<str>, CallerCounts>>,
}

/// A place in the queue held by one name; given back when dropped.
#[derive(Debug)]
pub struct Place {
    callers: Arc<Callers>,
    name: Arc<str>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(counts) = self.callers.lock().get_mut(&self.name) {
            counts.queued = counts.queued.saturating_sub(1);
        }
    }
}

impl Callers {
    pub fn new(max_queued_per_token: usize) -> Self {
        Self {
            max_queued: max_queued_per_token,
            by_name: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn max_queued(&self) -> usize {
        self.max_queued
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Arc<str>, CallerCounts>> {
        match self.by_name.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Count an authenticated request of `name`.
    pub fn count_request(&self, name: &Arc<str>) {
        self.lock().entry(name.clone()).or_default().requests += 1;
    }

    /// A place in the queue for `name`, or (refused) the number it has queued already.
    pub fn enter(self: &Arc<Self>, name: &Arc<str>) -> Result<Place, usize> {
        let mut by_name = self.lock();
        let counts = by_name.entry(name.clone()).or_default();
        if counts.queued >= self.max_queued {
            counts.refused += 1;
            return Err(counts.queued);
        }
        counts.queued += 1;
        Ok(Place {
            callers: self.clone(),
            name: name.clone(),
        })
    }

    /// Every name's counters, by name.
    pub fn snapshot(&self) -> BTreeMap<String, CallerCounts> {
        self.lock()
            .iter()
            .map(|(name, counts)| (name.to_string(), counts.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_has_its_own_bound_and_places_are_given_back() {
        let callers = Arc::new(Callers::new(2));
        let alice: Arc<str> = "alice".into();
        let bob: Arc<str> = "bob".into();
        callers.count_request(&alice);
        let first = callers.enter(&alice).unwrap();
        let _second = callers.enter(&alice).unwrap();
        assert_eq!(callers.enter(&alice).unwrap_err(), 2);
        // Another name is not held by alice's flood.
        let _bob = callers.enter(&bob).unwrap();
        drop(first);
        let _third = callers.enter(&alice).unwrap();
        let snapshot = callers.snapshot();
        assert_eq!(
            snapshot["alice"],
            CallerCounts {
                requests: 1,
                queued: 2,
                refused: 1
            }
        );
        assert_eq!(snapshot["bob"].queued, 1);
        assert_eq!(Caller(None).label(), "-");
        assert_eq!(Caller(Some(alice)).label(), "alice");
    }
}
