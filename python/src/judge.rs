//! `Judge`: a model loaded once on its worker thread, with its result cache, and the
//! model methods (compare, score, labels, G-Eval of one item, DHP) run as jobs there.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use pyo3::prelude::*;
use serde_json::json;

use nlg_judge::arch::WeightPolicy;
use nlg_judge::cli::model_args::PrecisionArg;
use nlg_judge::data::{find_human_key_among, Candidate, Context};
use nlg_judge::engine::remote::{self, BackendConfig};
use nlg_judge::engine::{
    load_scorer, BatchBudget, DecoderSettings, Label, LabelRequest, LoadOptions, ModelInfo, Prompt,
    ResultCache, Scorer, Strategy, TextPrompt,
};
use nlg_judge::judge::attribute::score_keys;
use nlg_judge::judge::diagnostics::{self, Audience};
use nlg_judge::judge::geval::{resolve_steps, StepsSource};
use nlg_judge::judge::pairwise::fit::compare_what_fits;
use nlg_judge::judge::pairwise::{CompareRequest, Debias, Design, StopRule};
use nlg_judge::judge::rubric::{Rubric, RubricProtocol};
use nlg_judge::judge::scoring::check_references;
use nlg_judge::judge::{
    resolve_method, run_scoring, ResolvedMethod, RubricChoice, RubricRequest, ScoreMethod,
    ScoreRequest, ScoreScale, Task,
};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;
use nlg_judge::server::api::{geval_task, GevalBody, ScoreResponse};
use nlg_judge::server::worker::LabelTask;

use crate::convert::{choice, optional_choice, parsed, to_json, Source};
use crate::errors::{input, OrPy};
use crate::results::{NativeCompareResult, NativeScoreResult};
use crate::worker::{call, Engine, Worker};

/// The Rust side of `nlg_judge.Judge`.
#[pyclass(module = "nlg_judge._native", frozen)]
pub struct NativeJudge {
    worker: Worker,
    info: ModelInfo,
    cache: Option<String>,
}

fn model_json(info: &ModelInfo, cache: &Option<String>) -> serde_json::Value {
    json!({
        "name": info.name,
        "architecture": info.architecture,
        "kind": format!("{:?}", info.kind),
        "fingerprint": info.fingerprint,
        "context_window": info.context_window,
        "cache": cache,
    })
}

impl NativeJudge {
    /// Run `work` on the worker thread and wait for it (see [`crate::worker`]).
    fn run<T: Send + 'static>(
        &self,
        py: Python<'_>,
        sink: Option<&Bound<'_, PyAny>>,
        work: impl FnOnce(&mut Engine, Progress) -> Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let (progress, reply, call) = call::<T>();
        self.worker.submit(move |engine| {
            // A served model's notes (and its closing line) reach this call's caller.
            engine.scorer.report_to(progress.clone());
            let before = engine.scorer.usage();
            let result = work(engine, progress.clone());
            // The closing line counts this call's requests only.
            if let (Some(before), Some(after)) = (before, engine.scorer.usage()) {
                if let Some(line) = engine.scorer.usage_line(&after.since(&before)) {
                    progress.note(&line);
                }
            }
            reply.send(result)
        })?;
        call.wait(py, sink)
    }
}

#[pymethods]
impl NativeJudge {
    #[new]
    #[pyo3(signature = (model, device, precision, cache, no_cache, weights, max_batch_tokens, max_batch_rows, max_arena_mib, strategy, backend=None, sink=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: String,
        device: String,
        precision: &str,
        cache: Option<PathBuf>,
        no_cache: bool,
        weights: &str,
        max_batch_tokens: usize,
        max_batch_rows: usize,
        max_arena_mib: usize,
        strategy: &str,
        backend: Option<String>,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let backend = backend
            .map(|text| {
                serde_json::from_str::<BackendConfig>(&text)
                    .map_err(|e| input(anyhow::anyhow!("backend options: {e}")))
            })
            .transpose()
            .or_py()?;
        let options = (|| -> Result<LoadOptions> {
            let mut options = LoadOptions::from_env()?;
            options.device = device;
            options.weights = choice::<WeightPolicy>("weights", weights)?;
            let precision = choice::<PrecisionArg>("precision", precision)?;
            options.precision = precision.into();
            options.memory.adapt_precision = precision == PrecisionArg::Auto;
            // The package passes the default budget when none is asked: the plan may lower
            // that one (and says so), as for the command line.
            options.memory.adapt_arena =
                max_arena_mib == BatchBudget::default().max_arena_bytes >> 20;
            options.decoder = DecoderSettings {
                strategy: choice::<Strategy>("strategy", strategy)?,
                budget: BatchBudget {
                    max_batch_tokens,
                    max_batch_rows,
                    max_arena_bytes: max_arena_mib.saturating_mul(1 << 20),
                },
            };
            Ok(options)
        })()
        .or_py()?;
        let (progress, reply, call) = call::<(ModelInfo, Option<String>)>();
        let worker = Worker::start(
            move || {
                let cache = match (no_cache, cache) {
                    (true, _) => None,
                    (false, Some(path)) => Some(ResultCache::open(&path)?),
                    (false, None) => Some(ResultCache::open(&ResultCache::default_path()?)?),
                };
                let location = cache.as_ref().map(|c| c.location().to_string());
                let scorer: Box<dyn Scorer> = match &backend {
                    Some(config) => Box::new(remote::connect(config.options(&model, progress)?)?),
                    None => load_scorer(&model, &options)?,
                };
                let info = scorer.info().clone();
                Ok((Engine { scorer, cache }, (info, location)))
            },
            reply,
        )
        .or_py()?;
        let (info, cache) = call.wait(py, sink)?;
        Ok(Self {
            worker,
            info,
            cache,
        })
    }

    /// The model and cache as JSON: name, architecture, kind, fingerprint,
    /// context_window, cache.
    fn info(&self) -> String {
        model_json(&self.info, &self.cache).to_string()
    }

    /// Stop the worker thread after the jobs queued so far.
    fn close(&self) {
        self.worker.close();
    }

    #[pyo3(signature = (source, attribute, adjective, question, template, task, item, context_label, design, comparisons, rounds, round_size, stop_when, seed, rank, debias, human_key, sink=None))]
    #[allow(clippy::too_many_arguments)]
    fn compare(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        attribute: String,
        adjective: Option<String>,
        question: Option<String>,
        template: String,
        task: &str,
        item: Option<String>,
        context_label: Option<String>,
        design: &str,
        comparisons: Option<usize>,
        rounds: Option<usize>,
        round_size: Option<usize>,
        stop_when: Option<&str>,
        seed: u64,
        rank: Option<&str>,
        debias: &str,
        human_key: Option<String>,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeCompareResult> {
        let source = Source::extract(source)?;
        let request = (|| -> Result<CompareRequest> {
            Ok(CompareRequest {
                attribute,
                adjective,
                question,
                template,
                task: choice::<Task>("task", task)?,
                item,
                context_label,
                design: choice::<Design>("design", design)?,
                comparisons,
                rounds,
                round_size,
                stop_when: parsed::<StopRule>("stop_when", stop_when)?,
                seed,
                rank: optional_choice::<RankMethod>("rank", rank)?,
                debias: choice::<Debias>("debias", debias)?,
                human_key,
            })
        })()
        .or_py()?;
        self.run(py, sink, move |engine, progress| {
            // Decided from the options and the input before the model runs: the
            // caller's to fix (ValueError), as the command line's exit code 2.
            let mut options = request.options(progress).map_err(input)?;
            options.audience = Audience::Python;
            let wanted = options
                .score_field
                .clone()
                .unwrap_or(options.attribute.name.clone());
            let contexts = source.contexts(2)?;
            // Candidates too long for the model are left out and named, as on the
            // command line.
            let fitted = compare_what_fits(
                engine.scorer.as_mut(),
                contexts,
                &options,
                engine.cache.as_ref(),
            )?;
            Ok(NativeCompareResult::new(fitted, wanted))
        })
    }

    #[pyo3(signature = (source, method, attribute, adjective, human_key, task, criteria, criteria_text, task_prompt, steps, max_step_tokens, scale, reference, sink=None))]
    #[allow(clippy::too_many_arguments)]
    fn score(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        method: &str,
        attribute: Option<String>,
        adjective: Option<String>,
        human_key: Option<String>,
        task: &str,
        criteria: Option<PathBuf>,
        criteria_text: Option<String>,
        task_prompt: Option<String>,
        steps: Option<PathBuf>,
        max_step_tokens: usize,
        scale: Option<&str>,
        reference: bool,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeScoreResult> {
        let source = Source::extract(source)?;
        let request = (|| -> Result<ScoreRequest> {
            Ok(ScoreRequest {
                method: choice::<ScoreMethod>("method", method)?,
                attribute,
                adjective,
                task: choice::<Task>("task", task)?,
                criteria,
                criteria_text,
                task_prompt,
                steps,
                max_step_tokens,
                scale: scale
                    .map(|text| {
                        ScoreScale::parse(text)
                            .map_err(|e| input(e.context(format!("scale: '{text}'"))))
                    })
                    .transpose()?,
                reference,
                rubric: None,
                audience: Audience::Python,
            })
        })()
        .or_py()?;
        self.score_request(py, sink, source, request, human_key)
    }

    /// Rubric grading (`score --method rubric`): `rubric` a built-in name or a rubric
    /// file, or `rubric_json` a rubric given whole (a JSON object).
    #[pyo3(signature = (source, rubric, rubric_json, protocol, feedback, max_feedback_tokens, max_reasoning_tokens, thinking, reference, task, attribute, human_key, sink=None))]
    #[allow(clippy::too_many_arguments)]
    fn grade(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        rubric: Option<String>,
        rubric_json: Option<String>,
        protocol: Option<&str>,
        feedback: bool,
        max_feedback_tokens: usize,
        max_reasoning_tokens: Option<usize>,
        thinking: bool,
        reference: bool,
        task: &str,
        attribute: Option<String>,
        human_key: Option<String>,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeScoreResult> {
        let source = Source::extract(source)?;
        let request = (|| -> Result<ScoreRequest> {
            let task = choice::<Task>("task", task)?;
            let chosen = match (rubric, rubric_json) {
                (Some(name), None) => RubricChoice::Named(name),
                (None, Some(text)) => {
                    let value: serde_json::Value = serde_json::from_str(&text)
                        .map_err(|e| input(anyhow::anyhow!("rubric: {e}")))?;
                    RubricChoice::Given(Box::new(
                        Rubric::from_inline(value, Some(task), "rubric").map_err(input)?,
                    ))
                }
                _ => return Err(input(anyhow::anyhow!("rubric: give a name or a dict"))),
            };
            Ok(ScoreRequest {
                task,
                reference,
                rubric: Some(RubricRequest {
                    rubric: chosen,
                    protocol: protocol
                        .map(|p| {
                            RubricProtocol::resolve(p).map_err(|e| input(e.context("protocol")))
                        })
                        .transpose()?,
                    feedback,
                    max_feedback_tokens,
                    max_reasoning_tokens,
                    thinking_off: !thinking,
                }),
                audience: Audience::Python,
                ..ScoreRequest::new(ScoreMethod::Rubric, attribute.as_deref())
            })
        })()
        .or_py()?;
        self.score_request(py, sink, source, request, human_key)
    }

    /// Log-probabilities of `labels` after `prompt` (as `nlg-judge labels --json`).
    #[pyo3(signature = (prompt, labels, answer_prefix, chat, system))]
    fn labels(
        &self,
        py: Python<'_>,
        prompt: String,
        labels: Vec<String>,
        answer_prefix: String,
        chat: bool,
        system: Option<String>,
    ) -> PyResult<String> {
        self.run(py, None, move |engine, _| {
            if labels.is_empty() {
                return Err(input(anyhow::anyhow!("labels: give at least one label")));
            }
            let text = TextPrompt {
                system,
                user: prompt,
                answer_prefix,
            };
            let prompt = if chat {
                Prompt::chat(text)
            } else {
                Prompt::plain(text)
            };
            let request = LabelRequest {
                prompt,
                labels: labels.iter().map(|l| Label::Text(l.clone())).collect(),
            };
            let rendered = engine.scorer.render(&request.prompt)?;
            let result = engine
                .scorer
                .label_logprobs(std::slice::from_ref(&request))?
                .remove(0);
            let normalised = result.normalised();
            let out = json!({
                "labels": labels.iter().zip(&result.labels).zip(normalised).map(|((text, score), p)| json!({
                    "text": text,
                    "token_ids": score.tokens,
                    "logprob": score.logprob,
                    "prob_normalised": p,
                })).collect::<Vec<_>>(),
                "label_mass": result.label_mass(),
                "prompt_tokens": result.prompt_tokens,
                "rendered": rendered.input,
            });
            Ok(out.to_string())
        })
    }

    /// G-Eval of one output, as the service's `POST /v1/geval` answers it (`body` is its
    /// JSON request body); scored through the same route as `score` (same cache keys).
    #[pyo3(signature = (body, max_step_tokens, sink=None))]
    fn geval(
        &self,
        py: Python<'_>,
        body: String,
        max_step_tokens: usize,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let body: GevalBody = nlg_judge::server::api::parse_body(body.as_bytes())
            .map_err(input)
            .or_py()?;
        let (task, reading) = geval_task(body).map_err(input).or_py()?;
        let LabelTask::Geval {
            criteria,
            steps,
            source,
            reference,
            output,
        } = task
        else {
            unreachable!("geval_task makes G-Eval tasks");
        };
        self.run(py, sink, move |engine, progress| {
            let steps_source = match steps {
                Some(text) => StepsSource::Given(text),
                None => StepsSource::Generate {
                    max_tokens: max_step_tokens,
                },
            };
            let steps = resolve_steps(
                engine.scorer.as_mut(),
                &criteria,
                &steps_source,
                engine.cache.as_ref(),
            )?;
            let has_reference = reference.is_some();
            let context = Context {
                id: "item".into(),
                text: source.unwrap_or_default(),
                candidates: vec![Candidate {
                    id: "output".into(),
                    text: output,
                    reference,
                    scores: Default::default(),
                    system_id: None,
                    metadata: Default::default(),
                    source: None,
                }],
            };
            let method = ResolvedMethod::Geval {
                criteria,
                steps: steps.clone(),
                reference: has_reference,
            };
            let run = run_scoring(
                engine.scorer.as_mut(),
                std::slice::from_ref(&context),
                &method,
                &progress,
                engine.cache.as_ref(),
            )?;
            let distribution = run
                .candidates
                .first()
                .and_then(|c| c.distribution.clone())
                .context("G-Eval gave no distribution")?;
            let mut response = ScoreResponse::new(&distribution, Some(steps.text));
            response.scale_source = Some(reading.scale_source);
            response.criteria_name = Some(reading.name);
            to_json(&response)
        })
    }

    /// `nlg-judge dhp score` on the rows of `input` (a `dhp perturb` output), writing
    /// `output`; returns the number of rows.
    #[pyo3(signature = (input, output, method, metrics, no_context, sink=None))]
    #[allow(clippy::too_many_arguments)]
    fn dhp_score(
        &self,
        py: Python<'_>,
        input: PathBuf,
        output: PathBuf,
        method: &str,
        metrics: Vec<String>,
        no_context: bool,
        sink: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        use nlg_judge::dhp::perturb::read_existing;
        use nlg_judge::dhp::score::{
            score_perturbations, write_score_rows, DhpMethod, DhpScoreOptions, ScoreEvent,
        };
        let method = choice::<DhpMethod>("method", method).or_py()?;
        self.run(py, sink, move |engine, progress| {
            let rows = read_existing(&input).map_err(input_of)?;
            let task = rows
                .first()
                .map(|r| r.task)
                .with_context(|| format!("{} has no rows", input.display()))
                .map_err(input_of)?;
            let metrics = if metrics.is_empty() {
                task.metrics().iter().map(|m| m.to_string()).collect()
            } else {
                metrics
            };
            let options = DhpScoreOptions {
                task,
                method,
                metrics,
                with_context: !no_context,
                steps: StepsSource::default(),
                progress,
            };
            let write = |rows: &[nlg_judge::dhp::ScoreRow]| -> Result<()> {
                let mut bytes = Vec::new();
                write_score_rows(rows, &mut bytes)?;
                crate::functions::write_atomically(&output, &bytes)
            };
            let scores = score_perturbations(
                engine.scorer.as_mut(),
                &rows,
                &options,
                engine.cache.as_ref(),
                &mut |event| match event {
                    ScoreEvent::MetricStarted(metric) => {
                        options
                            .progress
                            .note(&format!("{} / {metric}", method.name()));
                        options.progress.check()
                    }
                    ScoreEvent::MetricDone { metric, rows } => {
                        write(rows).with_context(|| format!("saving the rows of `{metric}`"))
                    }
                },
            )?;
            write(&scores)?;
            Ok(scores.len())
        })
    }
}

impl NativeJudge {
    /// Run a checked scoring request on `source`, the diagnostics in Python's words.
    fn score_request(
        &self,
        py: Python<'_>,
        sink: Option<&Bound<'_, PyAny>>,
        source: Source,
        request: ScoreRequest,
        human_key: Option<String>,
    ) -> PyResult<NativeScoreResult> {
        self.run(py, sink, move |engine, progress| {
            let options = request.options(progress.clone()).map_err(input)?;
            let contexts = source.contexts(1)?;
            // Decided from the options and the rows before the model runs: the caller's
            // to fix (ValueError), as the command line's exit code 2.
            if options.reference {
                check_references(&contexts, "reference=True", false).map_err(input)?;
            }
            // A human score that is not a number is refused, naming its row (a key
            // that no row has is no error here: `correlate` says so when asked).
            let names = match &human_key {
                Some(key) => vec![key.clone()],
                None => score_keys(&options.attribute),
            };
            find_human_key_among(&contexts, &names).map_err(input)?;
            let method = resolve_method(engine.scorer.as_mut(), &options, engine.cache.as_ref())?;
            let mut run = run_scoring(
                engine.scorer.as_mut(),
                &contexts,
                &method,
                &progress,
                engine.cache.as_ref(),
            )?;
            run.diagnostics = diagnostics::for_scores(&run, Audience::Python);
            NativeScoreResult::new(run, &contexts, human_key.unwrap_or(options.attribute))
        })
    }
}

fn input_of(error: anyhow::Error) -> anyhow::Error {
    input(error)
}

impl NativeJudge {
    /// Run a DHP perturbation plan with this judge's model as the LLM editor.
    pub fn run_perturb(
        &self,
        py: Python<'_>,
        sink: Option<&Bound<'_, PyAny>>,
        work: impl FnOnce(&mut Engine, Progress) -> Result<String> + Send + 'static,
    ) -> PyResult<String> {
        self.run(py, sink, work)
    }
}
