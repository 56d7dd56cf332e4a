//! The model worker: the one thread that owns the [`Scorer`] (which is `Send` but not
//! `Sync`). HTTP handlers send it jobs through a channel and wait for the reply.
//!
//! Each round the worker takes every job already queued (up to a bound) and serves them
//! together: G-Eval steps are resolved once per criterion (given, stored, or generated
//! and stored), all label jobs (G-Eval and prompt scoring) of the round go through the
//! engine's cached runner in one scorer call, so the engine batches them and shares their
//! common prefixes, and compare jobs run the pairwise runner on their one context (its
//! candidates too long for the model set aside first and named, as on the command line).
//! Rubric jobs write their feedback (one generation) and read their score through the
//! scoring runner of `score --method rubric`, one job at a time. Results go
//! through the result cache like the CLI's (same keys), so the service and the CLI reuse
//! each other's work. If the joint call fails, the round's label jobs are retried one by
//! one so that one bad request does not fail the others. Completion jobs (the OpenAI
//! routes) go to the engine together too, with the worker's prefix cache
//! ([`super::openai::worker`]).
//!
//! A panic inside the model code is caught ([`guarded`]): it becomes an error of the
//! call that panicked (500 for its request; a joint call is retried one by one as for
//! any error, so only the request that panics fails), and the worker goes on. Whatever
//! escapes that (a panic in the worker's own bookkeeping) fails the round's requests
//! with 500 and the worker still goes on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use tokio::sync::oneshot;

use super::api::{CompareJob, RubricTask, RubricUsed};
use super::openai::body::JobRequest;
use super::openai::{self, worker::CompletionWork};
use crate::data::{Candidate, Context};
use crate::engine::runner::{plan_label, LabelPlan, PlannedLabel};
use crate::engine::{error_kind, EngineError, ErrorKind};
use crate::engine::{CompletionResult, PrefixCache, ResultCache, Scorer};
use crate::judge::diagnostics::{self, Audience};
use crate::judge::geval::{self, Criteria, GevalInput, StepsSource};
use crate::judge::pairwise::fit::{compare_what_fits, FittedRun};
use crate::judge::rubric::relative::RelativeGrading;
use crate::judge::rubric::run::RubricMethod;
use crate::judge::{
    absolute, run_scoring, Attribute, ResolvedMethod, ScoreDistribution, ScoreRun, ScoreScale, Task,
};
use crate::progress::Progress;

/// A label job: one output rated on a scale.
#[derive(Debug, Clone)]
pub enum LabelTask {
    Geval {
        criteria: Criteria,
        /// Given steps; `None`: the model's own (generated once per criterion).
        steps: Option<String>,
        source: Option<String>,
        reference: Option<String>,
        output: String,
    },
    Score {
        task: Task,
        attribute: Attribute,
        scale: ScoreScale,
        context: String,
        output: String,
    },
}

/// The answer to a label job.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelAnswer {
    pub distribution: ScoreDistribution,
    /// G-Eval: the steps used.
    pub steps: Option<String>,
}

/// Replies carry the error chain as text.
pub type Reply<T> = oneshot::Sender<std::result::Result<T, JobFailure>>;

/// Why a job failed: whether the request or the model was at fault, and the message.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFailure {
    pub kind: ErrorKind,
    pub message: String,
}

impl JobFailure {
    pub(crate) fn of(error: &anyhow::Error) -> Self {
        Self {
            kind: error_kind(error),
            message: chain(error),
        }
    }
}

/// Work for the model thread.
pub enum Job {
    Label {
        task: LabelTask,
        reply: Reply<LabelAnswer>,
    },
    /// Compare a request's candidates (with relative rubric grading where it asks).
    Compare {
        job: Box<CompareJob>,
        /// What fits the model, ranked, what was set aside, and how a relative rubric
        /// grading was settled.
        reply: Reply<ComparedRun>,
    },
    /// Rubric grading of one output (its feedback, then its score).
    Rubric {
        task: RubricTask,
        reply: Reply<ScoreRun>,
    },
    /// OpenAI completions and chats (one engine request per choice).
    Complete {
        requests: Vec<JobRequest>,
        reply: Reply<Vec<CompletionResult>>,
    },
}

/// A compare job's answer: what fits the model, ranked, and what was set aside; with
/// relative rubric grading, the rubric and protocol it was settled to.
pub struct ComparedRun {
    pub fitted: FittedRun,
    pub rubric: Option<RubricUsed>,
}

/// Counters shared with the HTTP side.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs sent and not yet taken by the worker.
    pub queued: AtomicUsize,
    /// Jobs taken.
    pub jobs: AtomicUsize,
    /// Rounds served.
    pub rounds: AtomicUsize,
    /// Scorer calls made for label jobs.
    pub label_calls: AtomicUsize,
    /// Jobs refused because the queue was full.
    pub refused: AtomicUsize,
    /// Panics caught in the model code.
    pub panics: AtomicUsize,
}

impl WorkerStats {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

/// Default bound of the prefix cache: 512 MiB, about 11k tokens of SmolLM2-135M at f32
/// (48 KiB per token: keys, values and hidden state), which holds the prompts of a few
/// hundred lm-evaluation-harness requests or a burst of concurrent chats sharing a system
/// prompt, next to the model's own memory on a small machine.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 512 << 20;

/// Settings of the worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// Bound on generated G-Eval step tokens.
    pub steps_max_tokens: usize,
    /// Most jobs served in one round.
    pub max_round: usize,
    /// Bound of the prefix cache kept between completion rounds (bytes; 0: none).
    pub prefix_cache_bytes: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            steps_max_tokens: geval::steps::DEFAULT_MAX_TOKENS,
            max_round: 64,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
        }
    }
}

/// Start the worker thread; it ends when every sender is dropped.
pub fn spawn(
    scorer: Box<dyn Scorer>,
    cache: ResultCache,
    config: WorkerConfig,
    stats: Arc<WorkerStats>,
) -> Result<(mpsc::Sender<Job>, std::thread::JoinHandle<()>)> {
    let (sender, receiver) = mpsc::channel::<Job>();
    let handle = std::thread::Builder::new()
        .name("nlg-judge-model".to_string())
        .spawn(move || {
            let mut worker = Worker {
                scorer,
                cache,
                prefix_cache: PrefixCache::new(config.prefix_cache_bytes),
                config,
                stats,
            };
            worker.run(receiver);
        })
        .context("cannot start the model worker thread")?;
    Ok((sender, handle))
}

struct Worker {
    scorer: Box<dyn Scorer>,
    cache: ResultCache,
    /// Recent completion prefixes (keys, values, hidden states), kept between rounds.
    prefix_cache: PrefixCache,
    config: WorkerConfig,
    stats: Arc<WorkerStats>,
}

/// A label job ready for the scorer.
struct Planned {
    label: PlannedLabel,
    scale: ScoreScale,
    steps: Option<String>,
    reply: Reply<LabelAnswer>,
}

fn chain(error: &anyhow::Error) -> String {
    format!("{error:#}")
}

/// Marks an error made from a caught panic (a model failure: 500).
#[derive(Debug)]
pub struct ModelPanic(pub String);

impl std::fmt::Display for ModelPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the model code panicked: {}", self.0)
    }
}

impl std::error::Error for ModelPanic {}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Run model code, turning a panic into an error ([`ModelPanic`]) counted in `stats`.
/// The scorer may hold partial state after a panic; every call starts its own batch, so
/// the worker goes on with it.
pub(crate) fn guarded<T>(stats: &WorkerStats, work: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => {
            stats.panics.fetch_add(1, Ordering::SeqCst);
            let message = panic_message(payload.as_ref());
            tracing::error!(
                message,
                "the model code panicked; the request fails, the worker goes on"
            );
            Err(anyhow::Error::new(ModelPanic(message)))
        }
    }
}

impl Worker {
    fn run(&mut self, receiver: mpsc::Receiver<Job>) {
        while let Ok(first) = receiver.recv() {
            let mut round = vec![first];
            while round.len() < self.config.max_round.max(1) {
                match receiver.try_recv() {
                    Ok(job) => round.push(job),
                    Err(_) => break,
                }
            }
            self.stats.queued.fetch_sub(round.len(), Ordering::SeqCst);
            self.stats.jobs.fetch_add(round.len(), Ordering::SeqCst);
            self.stats.rounds.fetch_add(1, Ordering::SeqCst);
            let started = std::time::Instant::now();
            let jobs = round.len();
            // Replies still unsent when a panic escapes are dropped: their handlers answer
            // 500 (see `super::http::submit`).
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.serve_round(round))) {
                self.stats.panics.fetch_add(1, Ordering::SeqCst);
                tracing::error!(
                    message = panic_message(payload.as_ref()),
                    "a round panicked; its requests fail, the worker goes on"
                );
            }
            tracing::info!(
                jobs,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "served a round"
            );
        }
    }

    fn serve_round(&mut self, round: Vec<Job>) {
        let mut planned = Vec::new();
        let mut completions = Vec::new();
        for job in round {
            match job {
                Job::Label { task, reply } => {
                    if reply.is_closed() {
                        continue; // the client went away
                    }
                    let stats = self.stats.clone();
                    match guarded(&stats, || self.plan(&task)) {
                        Ok((label, scale, steps)) => planned.push(Planned {
                            label,
                            scale,
                            steps,
                            reply,
                        }),
                        Err(error) => {
                            let _ = reply.send(Err(JobFailure::of(&error)));
                        }
                    }
                }
                Job::Compare { job, reply } => {
                    if reply.is_closed() {
                        continue;
                    }
                    let stats = self.stats.clone();
                    let result = guarded(&stats, || self.compare(*job));
                    let _ = reply.send(result.map_err(|e| JobFailure::of(&e)));
                }
                Job::Rubric { task, reply } => {
                    if reply.is_closed() {
                        continue;
                    }
                    let stats = self.stats.clone();
                    let result = guarded(&stats, || self.grade(task));
                    let _ = reply.send(result.map_err(|e| JobFailure::of(&e)));
                }
                Job::Complete { requests, reply } => {
                    completions.push(CompletionWork { requests, reply });
                }
            }
        }
        if !planned.is_empty() {
            self.score_planned(planned);
        }
        if !completions.is_empty() {
            openai::worker::serve(
                self.scorer.as_mut(),
                &mut self.prefix_cache,
                &self.stats,
                completions,
            );
        }
    }

    /// Grade one output on its rubric as `score --method rubric` grades a candidate (the
    /// same prompts, so the same cache entries); the diagnostics in the service's words.
    /// A compare job, as `compare` runs it: relative rubric grading settled with the
    /// served model (`compare --rubric`'s [`RelativeGrading::new`]), then candidates too
    /// long for the model set aside, named, and the others ranked.
    fn compare(&mut self, job: CompareJob) -> Result<ComparedRun> {
        let CompareJob {
            context,
            mut options,
            relative,
        } = job;
        if let Some(task) = relative {
            let grading = RelativeGrading::new(
                self.scorer.as_ref(),
                task.rubric,
                task.protocol,
                task.feedback_tokens,
                task.reference,
            )
            .and_then(|grading| grading.with_thinking(task.reasoning_tokens, task.thinking_off))
            .map_err(|e| EngineError::BadRequest(format!("{e:#}")))?;
            options.relative = Some(Box::new(grading));
        }
        let rubric = options.relative.as_ref().map(|grading| RubricUsed {
            name: grading.rubric.name.clone(),
            protocol: grading.protocol.clone(),
            protocol_source: grading.protocol_source.name(),
            feedback: grading.feedback_tokens.is_some(),
        });
        let fitted = compare_what_fits(
            self.scorer.as_mut(),
            vec![context],
            &options,
            Some(&self.cache),
        )?;
        Ok(ComparedRun { fitted, rubric })
    }

    fn grade(&mut self, task: RubricTask) -> Result<ScoreRun> {
        let method = RubricMethod::new(
            self.scorer.as_ref(),
            task.rubric,
            task.protocol,
            task.feedback_tokens,
            task.reference.is_some(),
        )?
        .with_thinking(task.reasoning_tokens, task.thinking_off)?;
        let context = Context {
            id: "request".to_string(),
            text: task.context.unwrap_or_default(),
            candidates: vec![Candidate {
                id: "output".to_string(),
                text: task.output,
                reference: task.reference,
                scores: Default::default(),
                system_id: None,
                metadata: Default::default(),
                source: None,
            }],
        };
        let mut run = run_scoring(
            self.scorer.as_mut(),
            std::slice::from_ref(&context),
            &ResolvedMethod::Rubric(method),
            &Progress::none(),
            Some(&self.cache),
        )?;
        run.diagnostics = diagnostics::for_scores(&run, Audience::Service);
        Ok(run)
    }

    /// The planned request (tokenised, keyed), scale and steps of a label job.
    fn plan(&mut self, task: &LabelTask) -> Result<(PlannedLabel, ScoreScale, Option<String>)> {
        let (request, template, scale, steps) = match task {
            LabelTask::Geval {
                criteria,
                steps,
                source,
                reference,
                output,
            } => {
                let source_of_steps = match steps {
                    Some(text) => StepsSource::Given(text.clone()),
                    None => StepsSource::Generate {
                        max_tokens: self.config.steps_max_tokens,
                    },
                };
                let steps = geval::resolve_steps(
                    self.scorer.as_mut(),
                    criteria,
                    &source_of_steps,
                    Some(&self.cache),
                )?;
                let input = GevalInput {
                    source: source.as_deref(),
                    reference: reference.as_deref(),
                    output,
                };
                let request = geval::request(self.scorer.as_ref(), criteria, &steps.text, &input)?;
                (
                    request,
                    geval::template_id(criteria, &steps.text),
                    criteria.scale,
                    Some(steps.text),
                )
            }
            LabelTask::Score {
                task,
                attribute,
                scale,
                context,
                output,
            } => (
                absolute::request(
                    self.scorer.as_ref(),
                    *task,
                    &attribute.name,
                    context,
                    output,
                    *scale,
                )?,
                absolute::TEMPLATE_ID.to_string(),
                *scale,
                None,
            ),
        };
        let label = plan_label(self.scorer.as_ref(), &template, request, None)?;
        Ok((label, scale, steps))
    }

    /// Score planned jobs together (cache first), falling back to one at a time when the
    /// joint call fails.
    fn score_planned(&mut self, planned: Vec<Planned>) {
        let mut plan = LabelPlan::new();
        for job in &planned {
            plan.push(job.label.clone());
        }
        if let Err(error) = plan.lookup(Some(&self.cache)) {
            tracing::warn!(error = %chain(&error), "result cache read failed");
        }
        let joint = self.fill(&mut plan);
        if let Err(error) = joint {
            if planned.len() > 1 {
                tracing::debug!(error = %chain(&error), "joint scoring failed; scoring one by one");
                for job in planned {
                    self.score_planned(vec![job]);
                }
                return;
            }
            for job in planned {
                let _ = job.reply.send(Err(JobFailure::of(&error)));
            }
            return;
        }
        for (job, result) in planned.into_iter().zip(plan.into_partial_results()) {
            let answer = result
                .context("the scorer returned no result")
                .and_then(|result| ScoreDistribution::from_result(job.scale, &result))
                .map(|distribution| LabelAnswer {
                    distribution,
                    steps: job.steps,
                })
                .map_err(|e| JobFailure::of(&e));
            let _ = job.reply.send(answer);
        }
    }

    fn fill(&mut self, plan: &mut LabelPlan) -> Result<()> {
        if plan.missing() == 0 {
            return Ok(());
        }
        self.stats.label_calls.fetch_add(1, Ordering::SeqCst);
        let stats = self.stats.clone();
        guarded(&stats, || {
            plan.fill(self.scorer.as_mut(), Some(&self.cache), &mut |_| Ok(()))
        })?;
        Ok(())
    }
}
