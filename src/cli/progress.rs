//! The command line's [`ProgressSink`]: on a terminal one bar on stderr per library task,
//! notes printed above it; when stderr is not a terminal (a log file, CI, a batch job)
//! plain lines instead, every few seconds and at the end of each task
//! (`runtime::progress::PlainLines`). The library reports through [`Progress`]; only
//! this file draws.

use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressStyle};

use crate::progress::{Progress, ProgressSink};
use crate::runtime::progress::{plain, PlainLines, Unit};

/// What shows the current task.
enum Shown {
    Bar(ProgressBar),
    Lines(PlainLines),
}

/// Bars on stderr, or plain lines where stderr is not a terminal.
struct Bars {
    /// Names the lines ("compare: 120/240 comparisons ...").
    label: String,
    plain: bool,
    current: Mutex<Option<Shown>>,
}

impl Bars {
    fn with_current(&self, f: impl FnOnce(&mut Option<Shown>)) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut current);
    }
}

/// Close what shows a task: clear its bar, or print its last line.
fn close(shown: Shown) {
    match shown {
        Shown::Bar(bar) => bar.finish_and_clear(),
        Shown::Lines(mut lines) => {
            if let Some(line) = lines.finish() {
                eprintln!("{line}");
            }
        }
    }
}

impl ProgressSink for Bars {
    fn begin(&self, total: u64, unit: &str) {
        let shown = if self.plain {
            Shown::Lines(PlainLines::new(
                self.label.clone(),
                total,
                Unit::Count(unit.to_string()),
            ))
        } else {
            let bar = ProgressBar::new(total);
            let template = format!(
                "{{elapsed_precise}} [{{wide_bar}}] {{pos}}/{{len}} {unit}, {{per_sec}}, ETA {{eta}}{{msg}}"
            );
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            Shown::Bar(bar)
        };
        self.with_current(|current| {
            if let Some(old) = current.replace(shown) {
                close(old);
            }
        });
    }

    fn advance(&self, steps: u64) {
        self.with_current(|current| match current {
            Some(Shown::Bar(bar)) => bar.inc(steps),
            Some(Shown::Lines(lines)) => {
                if let Some(line) = lines.advance(steps) {
                    eprintln!("{line}");
                }
            }
            None => {}
        });
    }

    fn found_in_cache(&self, steps: u64) {
        self.with_current(|current| match current {
            Some(Shown::Bar(bar)) => {
                bar.inc(steps);
                // The rate and ETA from the steps computed from here on only.
                bar.reset_eta();
                bar.set_message(format!(" ({} from the cache)", bar.position()));
            }
            Some(Shown::Lines(lines)) => lines.found_in_cache(steps),
            None => {}
        });
    }

    fn end(&self) {
        self.with_current(|current| {
            if let Some(shown) = current.take() {
                close(shown);
            }
        });
    }

    fn note(&self, message: &str) {
        self.with_current(|current| match current {
            Some(Shown::Bar(bar)) => bar.println(message),
            _ => eprintln!("{message}"),
        });
    }
}

/// Progress on stderr, its plain lines named `label` (the command: "compare").
pub fn bars(label: &str) -> Progress {
    Progress::to(Arc::new(Bars {
        label: label.to_string(),
        plain: plain(),
        current: Mutex::new(None),
    }))
}
