//! Tests that touch process-wide state, in a binary of their own so that it reaches no
//! other test (`tests/it` holds all the others): environment variables, and the global
//! allocation counter. Each test holds [`ENVIRONMENT`] while it runs, so they never run
//! beside each other either.

#[path = "../it/common/mod.rs"]
mod common;

mod hub_settings;
mod llama_allocations;
mod llama_candle_parity;

/// Held by every test of this binary for its whole run.
pub static ENVIRONMENT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Take [`ENVIRONMENT`], even after a test that held it panicked.
pub fn environment() -> std::sync::MutexGuard<'static, ()> {
    ENVIRONMENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
