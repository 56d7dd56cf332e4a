//! Progress of long library work, told to whoever shows it. The library never draws:
//! the command line gives a [`Progress`] that draws bars and prints notes on stderr
//! (`cli/progress.rs`); library callers and tests give [`Progress::none`] (the default).
//!
//! The watcher may also ask the work to stop (the Python package does on Ctrl-C): runners
//! check [`ProgressTask::step`] between results, after each result is stored, and return
//! an [`Interrupted`] error, so nothing computed is lost and nothing is cut mid-write.

use std::fmt;
use std::sync::Arc;

/// What receives progress: one task at a time (begin, advances, end), and notes.
pub trait ProgressSink: Send + Sync {
    /// A task of `total` steps counted in `unit` ("comparisons") begins.
    fn begin(&self, total: u64, unit: &str);
    /// `steps` more steps of the current task are done.
    fn advance(&self, steps: u64);
    /// `steps` steps of the current task were found done already (answers from the
    /// result cache): they count toward the task, not toward its rate.
    fn found_in_cache(&self, steps: u64) {
        self.advance(steps);
    }
    /// The current task is over (finished or abandoned).
    fn end(&self);
    /// A line for the person watching ("computing the comparisons of ...").
    fn note(&self, message: &str);
    /// Whether the watcher asks the work to stop at the next result (default: never).
    fn interrupted(&self) -> bool {
        false
    }
}

/// The work stopped because its watcher asked ([`ProgressSink::interrupted`]); every
/// result computed before is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// Where progress goes: nowhere, or a [`ProgressSink`]. Cheap to clone.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn ProgressSink>>);

impl Progress {
    /// Progress nobody sees.
    pub fn none() -> Self {
        Self(None)
    }

    /// Progress told to `sink`.
    pub fn to(sink: Arc<dyn ProgressSink>) -> Self {
        Self(Some(sink))
    }

    /// Whether anybody is told.
    pub fn is_shown(&self) -> bool {
        self.0.is_some()
    }

    /// Begin a task; the returned guard advances it and ends it when dropped, so a task
    /// left by an error ends too.
    pub fn task(&self, total: u64, unit: &str) -> ProgressTask {
        if let Some(sink) = &self.0 {
            sink.begin(total, unit);
        }
        ProgressTask(self.0.clone())
    }

    /// Tell the watcher something.
    pub fn note(&self, message: &str) {
        if let Some(sink) = &self.0 {
            sink.note(message);
        }
    }

    /// An [`Interrupted`] error when the watcher asks the work to stop.
    pub fn check(&self) -> anyhow::Result<()> {
        match &self.0 {
            Some(sink) if sink.interrupted() => Err(Interrupted.into()),
            _ => Ok(()),
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_shown() {
            "Progress(shown)"
        } else {
            "Progress(none)"
        })
    }
}

/// One task under way (see [`Progress::task`]).
pub struct ProgressTask(Option<Arc<dyn ProgressSink>>);

impl ProgressTask {
    pub fn advance(&self, steps: u64) {
        if let Some(sink) = &self.0 {
            sink.advance(steps);
        }
    }

    /// `steps` found done already (see [`ProgressSink::found_in_cache`]).
    pub fn found_in_cache(&self, steps: u64) {
        if let Some(sink) = &self.0 {
            if steps > 0 {
                sink.found_in_cache(steps);
            }
        }
    }

    /// Advance, then stop with [`Interrupted`] if the watcher asks (call it once the
    /// steps' results are stored).
    pub fn step(&self, steps: u64) -> anyhow::Result<()> {
        self.advance(steps);
        match &self.0 {
            Some(sink) if sink.interrupted() => Err(Interrupted.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for ProgressTask {
    fn drop(&mut self) {
        if let Some(sink) = &self.0 {
            sink.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl ProgressSink for Log {
        fn begin(&self, total: u64, unit: &str) {
            self.0.lock().unwrap().push(format!("begin {total} {unit}"));
        }
        fn advance(&self, steps: u64) {
            self.0.lock().unwrap().push(format!("+{steps}"));
        }
        fn end(&self) {
            self.0.lock().unwrap().push("end".into());
        }
        fn note(&self, message: &str) {
            self.0.lock().unwrap().push(message.into());
        }
    }

    #[test]
    fn a_task_ends_when_its_guard_drops_even_on_an_early_return() {
        let log = Arc::new(Log::default());
        let progress = Progress::to(log.clone());
        let work = || -> Result<(), ()> {
            let task = progress.task(3, "steps");
            task.advance(1);
            Err(())?;
            task.advance(2);
            Ok(())
        };
        assert!(work().is_err());
        progress.note("done");
        assert_eq!(
            *log.0.lock().unwrap(),
            ["begin 3 steps", "+1", "end", "done"]
        );
        // Nobody told: nothing happens, nothing fails.
        let silent = Progress::none();
        silent.task(5, "x").advance(5);
        assert!(!silent.is_shown());
        assert!(silent.task(1, "x").step(1).is_ok());
    }

    /// A sink that asks to stop after `after` steps.
    struct StopAfter(std::sync::atomic::AtomicU64, u64);

    impl ProgressSink for StopAfter {
        fn begin(&self, _: u64, _: &str) {}
        fn advance(&self, steps: u64) {
            self.0.fetch_add(steps, std::sync::atomic::Ordering::SeqCst);
        }
        fn end(&self) {}
        fn note(&self, _: &str) {}
        fn interrupted(&self) -> bool {
            self.0.load(std::sync::atomic::Ordering::SeqCst) >= self.1
        }
    }

    #[test]
    fn a_step_reports_the_interruption_the_watcher_asks_for() {
        let progress = Progress::to(Arc::new(StopAfter(Default::default(), 2)));
        let task = progress.task(5, "steps");
        assert!(task.step(1).is_ok());
        let error = task.step(1).unwrap_err();
        assert!(error.is::<Interrupted>(), "{error:#}");
        assert!(progress.check().unwrap_err().is::<Interrupted>());
    }
}
