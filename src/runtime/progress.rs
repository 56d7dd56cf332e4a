//! Progress bars for long file work (downloads, extraction, hashing), drawn on stderr and
//! hidden when progress is switched off or stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-count bar of `total` bytes (0: unknown length, a spinner with a byte count).
pub fn bytes_bar(enabled: bool, total: u64, message: impl Into<String>) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = if total > 0 {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:40!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg:40!} {bytes}") {
            bar.set_style(style);
        }
        bar
    };
    bar.set_message(message.into());
    bar
}

/// A spinner for work of unknown length (a `pip download`).
pub fn spinner(enabled: bool, message: impl Into<String>) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.into());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}
