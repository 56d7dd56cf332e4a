//! The model worker's part of the OpenAI routes: every completion job of a round goes to
//! the scorer in one call, so that concurrent requests share one prefix trie (and the
//! worker's prefix cache). Chats are rendered here, where the model's chat template is.
//! If the joint call fails, each job is tried alone so that one bad request does not
//! fail the others.

use anyhow::Result;

use super::body::JobRequest;
use crate::engine::{CompletionRequest, CompletionResult, Generate, PrefixCache, Scorer};
use crate::server::worker::{guarded, JobFailure, Reply, WorkerStats};

/// One completion job as the worker holds it.
pub struct CompletionWork {
    pub requests: Vec<JobRequest>,
    pub reply: Reply<Vec<CompletionResult>>,
}

/// The engine requests of a job: chats rendered, chat budgets filled to the room left
/// in the context window.
fn prepare(scorer: &dyn Scorer, requests: &[JobRequest]) -> Result<Vec<CompletionRequest>> {
    let window = scorer.info().context_window;
    requests
        .iter()
        .map(|job| {
            let mut request = job.request.clone();
            if let Some(messages) = &job.chat {
                request.prompt = scorer.chat_prompt(messages)?;
            }
            if job.fill_window {
                let prompt = scorer.encode_prompt(&request.prompt)?;
                let used = prompt.input.len() + prompt.decoder_prefix.len();
                request.max_tokens = window.saturating_sub(used);
            }
            Ok(request)
        })
        .collect()
}

/// Serve a round's completion jobs together.
pub fn serve(
    scorer: &mut dyn Scorer,
    cache: &mut PrefixCache,
    stats: &WorkerStats,
    work: Vec<CompletionWork>,
) {
    let mut ready = Vec::with_capacity(work.len());
    for job in work {
        if job.reply.is_closed() {
            continue; // the client went away
        }
        match guarded(stats, || prepare(scorer, &job.requests)) {
            Ok(requests) => ready.push((requests, job.reply)),
            Err(error) => {
                let _ = job.reply.send(Err(JobFailure::of(&error)));
            }
        }
    }
    complete(scorer, cache, stats, ready);
}

type Ready = (Vec<CompletionRequest>, Reply<Vec<CompletionResult>>);

fn complete(
    scorer: &mut dyn Scorer,
    cache: &mut PrefixCache,
    stats: &WorkerStats,
    jobs: Vec<Ready>,
) {
    if jobs.is_empty() {
        return;
    }
    let all: Vec<CompletionRequest> = jobs
        .iter()
        .flat_map(|(requests, _)| requests.iter().cloned())
        .collect();
    let started = std::time::Instant::now();
    match guarded(stats, || scorer.complete(&all, cache)) {
        Ok(results) => {
            tracing::info!(
                jobs = jobs.len(),
                completions = all.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                prefix_cache_mib = cache.stats().bytes >> 20,
                "served completions"
            );
            let mut results = results.into_iter();
            for (requests, reply) in jobs {
                let mine: Vec<CompletionResult> = results.by_ref().take(requests.len()).collect();
                let _ = reply.send(Ok(mine));
            }
        }
        Err(error) if jobs.len() > 1 => {
            tracing::debug!(error = %format!("{error:#}"), "joint completion failed; serving jobs one by one");
            for job in jobs {
                complete(scorer, cache, stats, vec![job]);
            }
        }
        Err(error) => {
            for (_, reply) in jobs {
                let _ = reply.send(Err(JobFailure::of(&error)));
            }
        }
    }
}
