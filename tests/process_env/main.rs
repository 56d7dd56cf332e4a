//! Tests that set process-wide environment variables, in a binary of their own so that
//! the variables reach no other test (`tests/it` holds all the others). Each test holds
//! [`ENVIRONMENT`] while it runs, so they never see each other's variables either.

#[path = "../it/common/mod.rs"]
mod common;

mod hub_settings;
mod llama_candle_parity;

/// Held by every test of this binary for its whole run.
pub static ENVIRONMENT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Take [`ENVIRONMENT`], even after a test that held it panicked.
pub fn environment() -> std::sync::MutexGuard<'static, ()> {
    ENVIRONMENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
