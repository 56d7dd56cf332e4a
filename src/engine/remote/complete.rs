//! Completions with token log-probabilities from a served model, so that `nlg-judge serve
//! --backend URL` answers its own OpenAI routes (`echo` with `logprobs`, as
//! lm-evaluation-harness asks; generated tokens' log-probs and alternatives, as deepeval's
//! G-Eval reads them) with the engine's numbers: one engine request per completion, the
//! prompt sent as token ids, the engine's answer read position by position.
//!
//! Tokens come back as ids where the engine names them so (`return_tokens_as_token_ids`,
//! asked once and remembered); an engine that names them by text has each text mapped to
//! the one id of the local tokenizer that decodes to it, and an alternative whose text
//! several ids share is left out rather than guessed.

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};

use super::replies::{self, Position, TokenKey};
use super::scorer::RemoteScorer;
use crate::engine::completion::{
    CompletionRequest, CompletionResult, ScoredToken, TokenLogprob, MAX_TOP_LOGPROBS,
};
use crate::engine::decoder::pieces::TokenPieces;
use crate::engine::generation::{unscored, GenerationSink};
use crate::engine::request::{FinishReason, Sampling};

/// The generation fields of a completion body: length, sampling, stop strings.
pub(super) fn generation_fields(max_tokens: usize, sampling: Sampling, stop: &[String]) -> Value {
    let mut fields = json!({"max_tokens": max_tokens});
    match sampling {
        Sampling::Greedy => fields["temperature"] = json!(0),
        Sampling::TopP {
            temperature,
            top_p,
            seed,
        } => {
            fields["temperature"] = json!(temperature);
            fields["top_p"] = json!(top_p);
            fields["seed"] = json!(seed);
        }
    }
    if !stop.is_empty() {
        fields["stop"] = json!(stop);
    }
    fields
}

/// Why an engine's generation ended, in our terms: `length` is the token limit; any other
/// reason is a stop string where the request gave one, else the end of the sequence.
pub(super) fn finish_reason(reason: Option<&str>, stop: &[String]) -> FinishReason {
    match reason {
        Some("length") => FinishReason::MaxTokens,
        _ if stop.iter().any(|s| !s.is_empty()) => FinishReason::Stop,
        _ => FinishReason::EndOfSequence,
    }
}

/// An engine that generated a token outside `allowed` ignores `allowed_token_ids`: an
/// error, never a silently unrestricted generation.
fn check_allowed(made: &[u32], allowed: Option<&[u32]>) -> Result<()> {
    if let Some(allowed) = allowed {
        if let Some(id) = made.iter().find(|id| !allowed.contains(id)) {
            bail!(
                "the engine generated token {id}, outside `allowed_token_ids`: it does not \
                 restrict generation"
            );
        }
    }
    Ok(())
}

impl RemoteScorer {
    /// Whether the engine names tokens by id when asked; found once, by a one-token
    /// request on `ids`.
    fn names_ids(&mut self, ids: &[u32]) -> Result<bool> {
        if let Some(known) = self.ids_named {
            return Ok(known);
        }
        let probe = json!({"max_tokens": 1, "logprobs": 1});
        let mut answer = self.completion(self.body(ids, true, probe.clone())?);
        if matches!(&answer, Err(error) if super::scorer::refuses_token_ids(error)) {
            self.forgive_probe();
            self.text_prompts = true;
            answer = self.completion(self.body(ids, true, probe)?);
        }
        let named = match answer {
            Ok(answer) => replies::positions(&answer)
                .and_then(|p| p.first().map(|p| matches!(p.token, TokenKey::Id(_))))
                .unwrap_or(false),
            Err(error) if format!("{error:#}").contains("return_tokens_as_token_ids") => {
                self.forgive_probe();
                false
            }
            Err(error) => return Err(error),
        };
        self.ids_named = Some(named);
        Ok(named)
    }

    /// The id of a token the engine named; a text is mapped to the one local id that
    /// decodes to it, else to its encoding where that is one token.
    fn id_of(&self, key: &TokenKey) -> Result<u32> {
        match key {
            TokenKey::Id(id) => Ok(*id),
            TokenKey::Text(text) => match self.owner_of(text) {
                Some(id) => Ok(id),
                None => match self.tokenizer.encode(text)?.as_slice() {
                    [id] => Ok(*id),
                    _ => bail!(
                        "the engine named a token by its text {text:?}, which is not one \
                         token of the local tokenizer alone; an engine that names tokens by \
                         id (return_tokens_as_token_ids) avoids this"
                    ),
                },
            },
        }
    }

    /// One position of the engine's answer in our terms, `top` alternatives at most,
    /// most likely first.
    fn scored(
        &self,
        pieces: &mut TokenPieces<'_>,
        id: u32,
        position: &Position,
        top: usize,
    ) -> TokenLogprob {
        let mut alternatives: Vec<ScoredToken> = position
            .top
            .iter()
            .filter_map(|(key, logprob)| {
                let id = match key {
                    TokenKey::Id(id) => *id,
                    TokenKey::Text(text) => self.owner_of(text)?,
                };
                Some(ScoredToken {
                    token: pieces.piece(id),
                    logprob: *logprob,
                })
            })
            .collect();
        alternatives.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
        alternatives.truncate(top);
        TokenLogprob {
            token: pieces.piece(id),
            logprob: position.logprob,
            top: alternatives,
        }
    }

    /// The text of generated tokens, special tokens left out, cut before the first stop
    /// string.
    fn generated_text(&self, ids: &[u32], stop: &[String]) -> Result<String> {
        let mut text = self.tokenizer.decode(ids, true)?;
        let cut = stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()))
            .min();
        if let Some(at) = cut {
            text.truncate(at);
        }
        Ok(text)
    }

    /// Answer one completion with one engine request.
    fn complete_one(
        &self,
        request: &CompletionRequest,
        ids: &[u32],
        ids_named: bool,
    ) -> Result<CompletionResult> {
        let mut pieces = TokenPieces::new(&self.tokenizer);
        let unscored = |pieces: &mut TokenPieces<'_>, id: u32| TokenLogprob {
            token: pieces.piece(id),
            logprob: None,
            top: Vec::new(),
        };
        // A restricted generation is read with log-probs, whose token ids show whether the
        // engine obeyed.
        let scored_tokens =
            request.prompt_logprobs || request.logprobs || request.allowed_tokens.is_some();
        if request.max_tokens == 0 && !request.prompt_logprobs {
            return Ok(CompletionResult {
                prompt: ids.iter().map(|&id| unscored(&mut pieces, id)).collect(),
                generated: Vec::new(),
                text: String::new(),
                finish: FinishReason::MaxTokens,
                cached_prompt_tokens: 0,
            });
        }
        let top = request.top_logprobs.min(MAX_TOP_LOGPROBS);
        // An engine generates one token at least; a prompt scored alone drops it.
        let mut fields =
            generation_fields(request.max_tokens.max(1), request.sampling, &request.stop);
        if scored_tokens {
            fields["logprobs"] = json!(top.max(1));
        }
        if request.prompt_logprobs {
            fields["echo"] = json!(true);
        }
        if let Some(allowed) = &request.allowed_tokens {
            fields["allowed_token_ids"] = json!(allowed);
        }
        let answer = self.completion(self.body(ids, ids_named && scored_tokens, fields)?)?;
        let (mut text, reason) = replies::generated(&answer)
            .context("the engine's completion has no `choices[0].text`")?;
        let positions = match scored_tokens {
            true => replies::positions(&answer).ok_or_else(|| {
                anyhow!(
                    "the engine gave no token log-probabilities (`logprobs`{}) for model '{}'",
                    if request.prompt_logprobs {
                        " with `echo`"
                    } else {
                        ""
                    },
                    self.served_name
                )
            })?,
            false => Vec::new(),
        };
        let (echoed, generated_positions) = match request.prompt_logprobs {
            true if positions.len() < ids.len() => bail!(
                "the engine echoed {} positions for a prompt of {} tokens",
                positions.len(),
                ids.len()
            ),
            true => positions.split_at(ids.len()),
            false => positions.split_at(0),
        };
        if self.text_prompts && request.prompt_logprobs {
            let echoed: Vec<TokenKey> = echoed.iter().map(|p| p.token.clone()).collect();
            self.check_echoed_texts(ids, &echoed)?;
        }
        let mut prompt = Vec::with_capacity(ids.len());
        for (at, &sent) in ids.iter().enumerate() {
            prompt.push(match echoed.get(at) {
                Some(position) => {
                    if let TokenKey::Id(got) = position.token {
                        if got != sent {
                            bail!(
                                "the engine read token {got} at position {at} where {sent} \
                                 was sent: it re-tokenises prompts"
                            );
                        }
                    }
                    let mut token = self.scored(&mut pieces, sent, position, top);
                    if at == 0 {
                        (token.logprob, token.top) = (None, Vec::new());
                    }
                    token
                }
                None => unscored(&mut pieces, sent),
            });
        }
        let (generated, text, finish) = match request.max_tokens {
            0 => (Vec::new(), String::new(), FinishReason::MaxTokens),
            _ if request.logprobs => {
                let mut generated = Vec::with_capacity(generated_positions.len());
                let mut made = Vec::with_capacity(generated_positions.len());
                for position in generated_positions {
                    let id = self.id_of(&position.token)?;
                    made.push(id);
                    generated.push(self.scored(&mut pieces, id, position, top));
                }
                check_allowed(&made, request.allowed_tokens.as_deref())?;
                if request.prompt_logprobs {
                    // An echoing engine's text starts with the prompt as it decodes it:
                    // the generated text is that of the generated tokens.
                    text = self.generated_text(&made, &request.stop)?;
                }
                (
                    generated,
                    text,
                    finish_reason(reason.as_deref(), &request.stop),
                )
            }
            _ => {
                if request.prompt_logprobs || request.allowed_tokens.is_some() {
                    let made = generated_positions
                        .iter()
                        .map(|p| self.id_of(&p.token))
                        .collect::<Result<Vec<u32>>>()?;
                    check_allowed(&made, request.allowed_tokens.as_deref())?;
                    if request.prompt_logprobs {
                        text = self.generated_text(&made, &request.stop)?;
                    }
                }
                let generated = self
                    .tokenizer
                    .encode(&text)?
                    .into_iter()
                    .map(|id| unscored(&mut pieces, id))
                    .collect();
                (
                    generated,
                    text,
                    finish_reason(reason.as_deref(), &request.stop),
                )
            }
        };
        Ok(CompletionResult {
            prompt,
            generated,
            text,
            finish,
            cached_prompt_tokens: replies::cached_prompt_tokens(&answer).min(ids.len()),
        })
    }

    /// A plain generation (no log-probabilities, no restriction) with one engine request:
    /// the engine's text, its tokens as our tokeniser reads the text.
    fn generate_plain(&self, request: &CompletionRequest, ids: &[u32]) -> Result<CompletionResult> {
        let mut pieces = TokenPieces::new(&self.tokenizer);
        let prompt = ids
            .iter()
            .map(|&id| unscored(id, pieces.piece(id).bytes))
            .collect();
        if request.max_tokens == 0 {
            return Ok(CompletionResult {
                prompt,
                generated: Vec::new(),
                text: String::new(),
                finish: FinishReason::MaxTokens,
                cached_prompt_tokens: 0,
            });
        }
        let fields = generation_fields(request.max_tokens, request.sampling, &request.stop);
        let answer = self.completion(self.body(ids, false, fields)?)?;
        let (text, finish) = replies::generated(&answer)
            .context("the engine's completion has no `choices[0].text`")?;
        let finish = finish_reason(finish.as_deref(), &request.stop);
        let mut generated: Vec<TokenLogprob> = self
            .tokenizer
            .encode(&text)?
            .into_iter()
            .map(|id| unscored(id, pieces.piece(id).bytes))
            .collect();
        if finish == FinishReason::EndOfSequence {
            // The engine's end-of-sequence token, which the text does not show (as a local
            // decoder reports it); its id where the tokeniser names one.
            let eos = self.tokenizer.special().eos.unwrap_or(u32::MAX);
            generated.push(unscored(eos, Vec::new()));
        }
        Ok(CompletionResult {
            prompt,
            generated,
            text,
            finish,
            cached_prompt_tokens: replies::cached_prompt_tokens(&answer).min(ids.len()),
        })
    }

    /// Answer generations and completions, up to the concurrency bound at once (the
    /// `--concurrency` flag), in token order (prompts sharing a prefix reach the engine
    /// together), each result to `sink` as it arrives; the follow-ups the sink asks are
    /// scored together at the end, as one label call.
    pub(super) fn generate_all(
        &mut self,
        requests: &[CompletionRequest],
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        let mut prompts = Vec::with_capacity(requests.len());
        for request in requests {
            prompts.push(self.prompt_ids(&request.prompt)?);
        }
        let scored =
            |r: &CompletionRequest| r.prompt_logprobs || r.logprobs || r.allowed_tokens.is_some();
        let ids_named = match requests
            .iter()
            .position(|r| r.prompt_logprobs || r.logprobs)
        {
            Some(first) => self.names_ids(&prompts[first])?,
            None => false,
        };
        let mut order: Vec<usize> = (0..requests.len()).collect();
        order.sort_by(|&a, &b| prompts[a].cmp(&prompts[b]));
        let mut follow_ups = Vec::new();
        {
            let this = &*self;
            this.in_parallel(
                &order,
                &|index| match scored(&requests[index]) {
                    true => this.complete_one(&requests[index], &prompts[index], ids_named),
                    false => this.generate_plain(&requests[index], &prompts[index]),
                },
                &mut |index, result| {
                    if let Some(follow_up) = sink.generated(index, result, this)? {
                        follow_ups.push((index, follow_up));
                    }
                    Ok(())
                },
            )?;
        }
        crate::engine::generation::answer_follow_ups(self, follow_ups, sink)
    }
}
