//! A decoder-only model's prompts and labels as text and tokens: the chat template
//! applied to a method's prompt or to a conversation, labels encoded and checked.
//! Shared by every scorer that tokenises prompts itself (a model loaded here, a model
//! served by an engine), so that both read the same tokens.

use anyhow::Result;

use super::completion::{ChatMessage, ChatRole};
use super::request::{Label, Prompt, TextPrompt, TokenPrompt};
use crate::runtime::{ChatTemplate, TextTokenizer};

/// The text a decoder-only model reads for `prompt` (token prompts decoded).
pub fn render_text(
    chat: &ChatTemplate,
    tokenizer: &TextTokenizer,
    model_name: &str,
    prompt: &Prompt,
) -> Result<String> {
    match prompt {
        Prompt::Text { text, chat: false } => Ok(format!("{}{}", text.user, text.answer_prefix)),
        Prompt::Text { text, chat: true } => {
            if !chat.is_chat() {
                crate::bad_request!(
                    "model '{model_name}' has no chat template; use a plain prompt"
                );
            }
            Ok(chat.render(text.system.as_deref(), &text.user, &text.answer_prefix))
        }
        Prompt::Tokens(tokens) => tokenizer.decode(&tokens.input, false),
    }
}

/// A decoder-only model's token ids for `prompt`: token prompts checked against the
/// vocabulary, text prompts rendered ([`render_text`]) and tokenised.
pub fn encode_prompt(
    chat: &ChatTemplate,
    tokenizer: &TextTokenizer,
    model_name: &str,
    prompt: &Prompt,
) -> Result<TokenPrompt> {
    match prompt {
        Prompt::Tokens(tokens) => {
            if !tokens.decoder_prefix.is_empty() {
                anyhow::bail!("decoder-only models take no decoder prefix");
            }
            for &id in &tokens.input {
                tokenizer.check_id(id)?;
            }
            Ok(tokens.clone())
        }
        Prompt::Text { .. } => Ok(TokenPrompt {
            input: tokenizer.encode_prompt(&render_text(chat, tokenizer, model_name, prompt)?)?,
            decoder_prefix: Vec::new(),
        }),
    }
}

/// [`encode_prompt`] of every prompt, in parallel on the rayon pool, in order.
pub fn encode_prompts(
    chat: &ChatTemplate,
    tokenizer: &TextTokenizer,
    model_name: &str,
    prompts: &[&Prompt],
) -> Vec<Result<TokenPrompt>> {
    use rayon::prelude::*;
    prompts
        .par_iter()
        .map(|prompt| encode_prompt(chat, tokenizer, model_name, prompt))
        .collect()
}

/// A conversation through the chat template, as a plain prompt.
pub fn conversation_prompt(
    chat: &ChatTemplate,
    model_name: &str,
    messages: &[ChatMessage],
) -> Result<Prompt> {
    let turns: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            let role = match m.role {
                ChatRole::System => "system",
                ChatRole::User => "user",
                ChatRole::Assistant => "assistant",
            };
            (role, m.content.as_str())
        })
        .collect();
    match chat.render_conversation(&turns) {
        Some(text) => Ok(Prompt::plain(TextPrompt::user(text))),
        None => crate::bad_request!(
            "model '{model_name}' has no chat template; use completions with a plain prompt"
        ),
    }
}

/// A label's token ids under `tokenizer`: a text encoded, given ids checked against the
/// vocabulary; an empty label is an error.
pub fn encode_label(tokenizer: &TextTokenizer, label: &Label) -> Result<Vec<u32>> {
    let ids = match label {
        Label::Text(text) => tokenizer.encode(text)?,
        Label::Tokens(ids) => {
            for &id in ids {
                tokenizer.check_id(id)?;
            }
            ids.clone()
        }
    };
    if ids.is_empty() {
        crate::bad_request!("empty label: a label needs at least one token");
    }
    Ok(ids)
}
