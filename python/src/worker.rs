//! Model work off the interpreter's lock, with progress and Ctrl-C.
//!
//! Each `Judge` owns one worker thread that loads the model and then runs the judge's
//! jobs one at a time (the scorer is `Send` but not `Sync`, as in the service). A calling
//! Python thread hands a job over and waits for it with the interpreter's lock released,
//! waking every 50 ms to check for signals and to pass the job's progress events to the
//! Python progress sink (so tqdm and callbacks run in the caller's thread).
//!
//! On Ctrl-C the caller asks the job to stop ([`nlg_judge::progress::ProgressSink::interrupted`]):
//! the library checks between results, after each result is stored in the result cache,
//! so nothing computed is lost and nothing is cut mid-write. The caller waits up to
//! [`STOP_WAIT`] for the job to stop, then raises `KeyboardInterrupt` either way (a job
//! inside one long step finishes that step in the background, then stops).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use pyo3::prelude::*;

use nlg_judge::engine::{ResultCache, Scorer};
use nlg_judge::progress::{Progress, ProgressSink};

use crate::errors::{to_py, NlgJudgeError};

/// How often a waiting caller checks for signals and progress.
const TICK: Duration = Duration::from_millis(50);
/// How long a caller waits for an interrupted job to stop before raising.
const STOP_WAIT: Duration = Duration::from_millis(500);

/// What a job works with: the loaded model and the result cache.
pub struct Engine {
    pub scorer: Box<dyn Scorer>,
    pub cache: Option<ResultCache>,
}

/// What a job reports while it runs, and its end.
enum Message<T> {
    Begin(u64, String),
    Advance(u64),
    End,
    Note(String),
    Done(Result<T>),
}

/// The job's side of a call: progress events go to the waiting caller; the caller's
/// stop request is read here.
struct Relay<T> {
    sender: Mutex<Sender<Message<T>>>,
    stop: Arc<AtomicBool>,
}

impl<T> Relay<T> {
    fn send(&self, message: Message<T>) {
        if let Ok(sender) = self.sender.lock() {
            let _ = sender.send(message);
        }
    }
}

impl<T: Send + 'static> ProgressSink for Relay<T> {
    fn begin(&self, total: u64, unit: &str) {
        self.send(Message::Begin(total, unit.to_string()));
    }
    fn advance(&self, steps: u64) {
        self.send(Message::Advance(steps));
    }
    fn end(&self) {
        self.send(Message::End);
    }
    fn note(&self, message: &str) {
        self.send(Message::Note(message.to_string()));
    }
    fn interrupted(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// One call: the progress to give the library, the sender of the job's result, and the
/// caller's end to wait on.
pub struct Call<T> {
    /// In a mutex only so that a reference to it may cross into `Python::detach`.
    receiver: Mutex<Receiver<Message<T>>>,
    stop: Arc<AtomicBool>,
}

/// Where a job reports its result.
pub struct Reply<T>(Sender<Message<T>>);

impl<T> Reply<T> {
    pub fn send(self, result: Result<T>) {
        let _ = self.0.send(Message::Done(result));
    }
}

/// A new call: the library's [`Progress`] (relayed to the caller), the reply, the wait.
pub fn call<T: Send + 'static>() -> (Progress, Reply<T>, Call<T>) {
    let (sender, receiver) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let relay = Relay {
        sender: Mutex::new(sender.clone()),
        stop: stop.clone(),
    };
    (
        Progress::to(Arc::new(relay)),
        Reply(sender),
        Call {
            receiver: Mutex::new(receiver),
            stop,
        },
    )
}

impl<T: Send + 'static> Call<T> {
    /// Wait for the result with the interpreter's lock released; pass progress to `sink`
    /// (an object with `begin(total, unit)`, `advance(steps)`, `end()`, `note(text)`);
    /// raise `KeyboardInterrupt` (or what the signal handler raises) on a signal.
    pub fn wait(self, py: Python<'_>, sink: Option<&Bound<'_, PyAny>>) -> PyResult<T> {
        let mut sink_error: Option<PyErr> = None;
        loop {
            let message = py.detach(|| self.receive(TICK));
            match message {
                Ok(Message::Done(result)) => {
                    return match sink_error {
                        Some(error) => Err(error),
                        None => result.map_err(to_py),
                    }
                }
                Ok(event) => {
                    if let (Some(sink), None) = (sink, &sink_error) {
                        if let Err(error) = relay_event(sink, event) {
                            // A failing progress callback stops the job; its error is raised.
                            self.stop.store(true, Ordering::SeqCst);
                            sink_error = Some(error);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(NlgJudgeError::new_err(
                        "the model worker stopped without an answer (a panic: see standard error)",
                    ))
                }
            }
            if let Err(signal) = py.check_signals() {
                self.stop.store(true, Ordering::SeqCst);
                self.drain_until_stopped(py);
                return Err(signal);
            }
        }
    }

    fn receive(&self, timeout: Duration) -> Result<Message<T>, RecvTimeoutError> {
        match self.receiver.lock() {
            Ok(receiver) => receiver.recv_timeout(timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        }
    }

    /// After a stop request: wait up to [`STOP_WAIT`] for the job to end.
    fn drain_until_stopped(&self, py: Python<'_>) {
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match py.detach(|| self.receive(left)) {
                Ok(Message::Done(_)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

fn relay_event<T>(sink: &Bound<'_, PyAny>, event: Message<T>) -> PyResult<()> {
    match event {
        Message::Begin(total, unit) => sink.call_method1("begin", (total, unit)),
        Message::Advance(steps) => sink.call_method1("advance", (steps,)),
        Message::End => sink.call_method0("end"),
        Message::Note(text) => sink.call_method1("note", (text,)),
        Message::Done(_) => return Ok(()),
    }
    .map(|_| ())
}

/// A job for the worker thread.
type Job = Box<dyn FnOnce(&mut Engine) + Send>;

/// The worker thread of one judge.
pub struct Worker {
    jobs: Mutex<Option<Sender<Job>>>,
}

impl Worker {
    /// Start the thread: it runs `load` (its result goes to `reply`), then jobs until the
    /// worker is dropped.
    pub fn start<T: Send + 'static>(
        load: impl FnOnce() -> Result<(Engine, T)> + Send + 'static,
        reply: Reply<T>,
    ) -> Result<Self> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("nlg-judge-model".into())
            .spawn(move || {
                let mut engine = match catch_unwind(AssertUnwindSafe(load)) {
                    Ok(Ok((engine, loaded))) => {
                        reply.send(Ok(loaded));
                        engine
                    }
                    Ok(Err(error)) => return reply.send(Err(error)),
                    Err(_) => return,
                };
                for job in receiver {
                    // A panicking job drops its reply (the caller sees the worker stop
                    // answering); the worker goes on with the next job.
                    let _ = catch_unwind(AssertUnwindSafe(|| job(&mut engine)));
                }
            })?;
        Ok(Self {
            jobs: Mutex::new(Some(jobs)),
        })
    }

    /// Queue `job`; it runs after the jobs queued before it.
    pub fn submit(&self, job: impl FnOnce(&mut Engine) + Send + 'static) -> PyResult<()> {
        let jobs = self.jobs.lock().map_err(|_| closed())?;
        let sender = jobs.as_ref().ok_or_else(closed)?;
        sender.send(Box::new(job)).map_err(|_| closed())
    }

    /// Let the thread end after the jobs queued so far.
    pub fn close(&self) {
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
    }
}

fn closed() -> PyErr {
    NlgJudgeError::new_err("this Judge is closed")
}

/// Run `work` on a thread of its own (no model needed), waiting as [`Call::wait`] does.
pub fn run_detached<T: Send + 'static>(
    py: Python<'_>,
    sink: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(Progress) -> Result<T> + Send + 'static,
) -> PyResult<T> {
    let (progress, reply, call) = call::<T>();
    thread::Builder::new()
        .name("nlg-judge-work".into())
        .spawn(move || reply.send(work(progress)))
        .map_err(|e| NlgJudgeError::new_err(format!("cannot start a thread: {e}")))?;
    call.wait(py, sink)
}
