//! The command line's [`ProgressSink`]: one bar on stderr per library task, notes printed
//! above it. The library reports through [`Progress`]; only this file draws.

use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressStyle};

use crate::progress::{Progress, ProgressSink};

/// Bars on stderr (indicatif hides them when stderr is not a terminal).
#[derive(Default)]
struct Bars {
    current: Mutex<Option<ProgressBar>>,
}

impl Bars {
    fn with_bar(&self, f: impl FnOnce(&mut Option<ProgressBar>)) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut current);
    }
}

impl ProgressSink for Bars {
    fn begin(&self, total: u64, unit: &str) {
        let bar = ProgressBar::new(total);
        let template = format!(
            "{{elapsed_precise}} [{{wide_bar}}] {{pos}}/{{len}} {unit}, {{per_sec}}, ETA {{eta}}"
        );
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        self.with_bar(|current| {
            if let Some(old) = current.replace(bar) {
                old.finish_and_clear();
            }
        });
    }

    fn advance(&self, steps: u64) {
        self.with_bar(|current| {
            if let Some(bar) = current {
                bar.inc(steps);
            }
        });
    }

    fn end(&self) {
        self.with_bar(|current| {
            if let Some(bar) = current.take() {
                bar.finish_and_clear();
            }
        });
    }

    fn note(&self, message: &str) {
        self.with_bar(|current| match current {
            Some(bar) => bar.println(message),
            None => eprintln!("{message}"),
        });
    }
}

/// Progress drawn on stderr.
pub fn bars() -> Progress {
    Progress::to(Arc::new(Bars::default()))
}
