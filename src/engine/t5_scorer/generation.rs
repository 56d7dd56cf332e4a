//! Text generation: the encoder runs once, then the decoder one token at a time over its
//! cache, each token chosen by the request's sampling rule, until eos, a stop string or
//! the token limit.

use anyhow::Result;

use super::Usage;
use crate::arch::t5::T5Model;
use crate::engine::completion::CompletionRequest;
use crate::engine::request::{FinishReason, Generation, TokenPrompt};
use crate::engine::sampling::TokenSampler;
use crate::runtime::TextTokenizer;

/// Byte offset of the earliest stop string in `text` (empty stop strings never match).
fn earliest_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|stop| !stop.is_empty())
        .filter_map(|stop| text.find(stop.as_str()))
        .min()
}

/// Generate after `prompt`. The text is cut before the first stop string; `tokens` are
/// all tokens generated (the one completing a stop string included, eos excluded).
pub(super) fn generate(
    model: &T5Model,
    tokenizer: &TextTokenizer,
    prompt: &TokenPrompt,
    request: &CompletionRequest,
    usage: &mut Usage,
) -> Result<Generation> {
    let mut sampler = TokenSampler::new(&request.sampling)?;
    let mut tokens: Vec<u32> = Vec::new();
    if request.max_tokens == 0 {
        return Ok(Generation {
            text: String::new(),
            tokens,
            finish: FinishReason::MaxTokens,
        });
    }
    let eos = model.config().eos_token_id;
    let encoder_input = vec![prompt.input.clone()];
    usage.add_encoder_batch(&encoder_input);
    let encoder = model.encode(&encoder_input)?;
    let mut cache = model.start_decoder(&encoder)?;
    let mut input = vec![model.config().decoder_start_token_id];
    input.extend(&prompt.decoder_prefix);
    loop {
        let step = vec![input];
        usage.add_decoder_batch(&step);
        let hidden = model.decode_left_padded(&step, &mut cache)?;
        let last = hidden.narrow(1, hidden.dim(1)? - 1, 1)?;
        let logits: Vec<f32> = model.logits(&last)?.flatten_all()?.to_vec1()?;
        let token = sampler.next(&logits)?;
        if token == eos {
            return Ok(Generation {
                text: tokenizer.decode(&tokens, true)?,
                tokens,
                finish: FinishReason::EndOfSequence,
            });
        }
        tokens.push(token);
        let text = tokenizer.decode(&tokens, true)?;
        if let Some(cut) = earliest_stop(&text, &request.stop) {
            return Ok(Generation {
                text: text[..cut].to_string(),
                tokens,
                finish: FinishReason::Stop,
            });
        }
        if tokens.len() >= request.max_tokens {
            return Ok(Generation {
                text,
                tokens,
                finish: FinishReason::MaxTokens,
            });
        }
        input = vec![token];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_stop_string_wins_and_empty_ones_are_ignored() {
        let stops = vec!["".to_string(), "\n".to_string(), "END".to_string()];
        assert_eq!(earliest_stop("abc END\nx", &stops), Some(4));
        assert_eq!(earliest_stop("abc\nEND", &stops), Some(3));
        assert_eq!(earliest_stop("abc", &stops), None);
    }
}
