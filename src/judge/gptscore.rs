//! GPTScore (Fu et al., 2023), the likelihood baseline: a model that was asked for a good
//! output should find a good candidate likely. The score is the mean token
//! log-probability of the candidate after an instruction naming the attribute and the
//! context.
//!
//! Chat models read the instruction and context as the user's message and the candidate
//! as their answer; plain decoders read `"<instruction>\n\n<context>\n\nSummary:"` and the
//! candidate after a space; encoder-decoders read the instruction and context in the
//! encoder and score the candidate in the decoder.

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::attribute::{Attribute, Task};
use crate::engine::cache::prompt_hash;
use crate::engine::{ContinuationRequest, ModelKind, Prompt, ResultCache, Scorer, TextPrompt};

/// Kind of GPTScore entries in the result cache's text table (with the prompt version).
pub const CACHE_KIND: &str = "gptscore-v1";

/// The instruction for `task` and `attribute`.
pub fn instruction(task: Task, attribute: &Attribute) -> String {
    let adjective = &attribute.adjective;
    match task {
        Task::Summary => {
            format!("Write a summary of the following article that is {adjective}.")
        }
        Task::Dialogue => format!(
            "Write the next turn of the following dialogue so that the response is {adjective}."
        ),
        Task::DataToText => {
            format!("Write a text that expresses the following triples and is {adjective}.")
        }
        Task::Custom => format!("Write a text for the following input that is {adjective}."),
    }
}

/// The continuation request scoring `candidate` in `scorer`'s conventions.
pub fn request(
    scorer: &dyn Scorer,
    task: Task,
    attribute: &Attribute,
    context: &str,
    candidate: &str,
) -> Result<ContinuationRequest> {
    if candidate.trim().is_empty() {
        bail!("an empty candidate has no likelihood to measure");
    }
    let info = scorer.info();
    let mut user = format!("{}\n\n{context}", instruction(task, attribute));
    let chat = info.conventions.chat && info.kind == ModelKind::DecoderOnly;
    let continuation = if chat || info.kind == ModelKind::EncoderDecoder {
        candidate.to_string()
    } else {
        user.push_str(&format!("\n\n{}:", task.item()));
        format!(" {candidate}")
    };
    let text = TextPrompt::user(user);
    Ok(ContinuationRequest {
        prompt: if chat {
            Prompt::chat(text)
        } else {
            Prompt::plain(text)
        },
        continuation,
    })
}

/// One candidate's likelihood.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Likelihood {
    /// Mean token log-probability (the score).
    pub mean_logprob: f64,
    pub tokens: usize,
}

/// The result-cache key of a request: the prompt's tokens and the continuation text.
pub fn cache_key(scorer: &dyn Scorer, request: &ContinuationRequest) -> Result<String> {
    let tokens = scorer.encode_prompt(&request.prompt)?;
    let mut hasher = Sha256::new();
    hasher.update(prompt_hash(&tokens).as_bytes());
    hasher.update([0]);
    hasher.update(request.continuation.as_bytes());
    Ok(hex::encode(hasher.finalize()))
}

/// Score `requests`, reading and storing each result in the cache when there is one.
/// Returns the likelihoods and how many of them were computed (not found in the cache).
pub fn score_requests(
    scorer: &mut dyn Scorer,
    requests: &[ContinuationRequest],
    cache: Option<&ResultCache>,
) -> Result<(Vec<Likelihood>, usize)> {
    let fingerprint = scorer.info().fingerprint.clone();
    let keys = requests
        .iter()
        .map(|r| cache_key(scorer, r))
        .collect::<Result<Vec<_>>>()?;
    let mut found: Vec<Option<Likelihood>> = Vec::with_capacity(requests.len());
    for key in &keys {
        let hit = match cache {
            Some(cache) => match cache.get_text(&fingerprint, CACHE_KIND, key)? {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .with_context(|| format!("result cache: bad GPTScore entry {key}"))?,
                ),
                None => None,
            },
            None => None,
        };
        found.push(hit);
    }
    let missing: Vec<usize> = (0..requests.len())
        .filter(|&i| found[i].is_none())
        .collect();
    if !missing.is_empty() {
        let batch: Vec<ContinuationRequest> =
            missing.iter().map(|&i| requests[i].clone()).collect();
        let results = scorer.continuation_logprobs(&batch)?;
        for (&i, result) in missing.iter().zip(results) {
            let likelihood = Likelihood {
                mean_logprob: result.mean_logprob(),
                tokens: result.token_logprobs.len(),
            };
            if let Some(cache) = cache {
                cache.put_text(
                    &fingerprint,
                    CACHE_KIND,
                    &keys[i],
                    &serde_json::to_string(&likelihood)?,
                )?;
            }
            found[i] = Some(likelihood);
        }
    }
    let likelihoods = found
        .into_iter()
        .enumerate()
        .map(|(i, l)| l.with_context(|| format!("no likelihood for request {i}")))
        .collect::<Result<Vec<_>>>()?;
    Ok((likelihoods, missing.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Conventions, MockScorer};

    #[test]
    fn plain_decoders_read_the_item_noun_before_the_candidate() {
        let mock = MockScorer::new();
        let attribute = Attribute::named("fluency").unwrap();
        let r = request(&mock, Task::Summary, &attribute, "ARTICLE", "A summary.").unwrap();
        let Prompt::Text { text, chat } = &r.prompt else {
            panic!("text prompt expected")
        };
        assert!(!chat);
        assert_eq!(
            text.user,
            "Write a summary of the following article that is fluent.\n\nARTICLE\n\nSummary:"
        );
        assert_eq!(r.continuation, " A summary.");

        let chat_mock = MockScorer::new().with_conventions(Conventions {
            chat: true,
            ..Conventions::default()
        });
        let r = request(&chat_mock, Task::Dialogue, &attribute, "A: hi", "B: hey").unwrap();
        assert!(matches!(r.prompt, Prompt::Text { chat: true, .. }));
        assert_eq!(r.continuation, "B: hey");
        assert!(request(&mock, Task::Summary, &attribute, "c", "  ").is_err());
    }
}
