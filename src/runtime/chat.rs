//! Chat templates: how a (system, user) exchange and the opening of the model's answer are
//! written as one string for the tokenizer.
//!
//! We implement the two families our models use rather than a Jinja engine: ChatML
//! (SmolLM2, Qwen2) and Llama-2's `[INST]` format. A checkpoint's template is named by its
//! model card, or, for a bare GGUF file, recognised from its `tokenizer.chat_template`.

use super::card::{ChatSpec, ChatTemplateKind};

/// A chat template with its default system message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// No template: the system message (if any) and the user text are joined by a blank
    /// line, and the answer prefix follows directly.
    None,
    /// `<|im_start|>role\n...<|im_end|>\n` turns, then `<|im_start|>assistant\n`.
    ChatMl { default_system: Option<String> },
    /// `[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]`; the tokenizer adds `<s>`.
    Llama2 { default_system: Option<String> },
}

impl ChatTemplate {
    /// The template a card's `[chat]` table names.
    pub fn from_spec(spec: &ChatSpec) -> Self {
        let default_system = spec.default_system.clone();
        match spec.template {
            ChatTemplateKind::None => ChatTemplate::None,
            ChatTemplateKind::Chatml => ChatTemplate::ChatMl { default_system },
            ChatTemplateKind::Llama2 => ChatTemplate::Llama2 { default_system },
        }
    }

    /// Recognise a Jinja chat template (GGUF `tokenizer.chat_template`, or
    /// `tokenizer_config.json`): ChatML if it writes `<|im_start|>`, Llama-2 if it writes
    /// `[INST]`, else none. A literal default system message in a ChatML template
    /// (`'<|im_start|>system\nYou are ...<|im_end|>'`) is kept as the default.
    pub fn detect(jinja: &str) -> Self {
        if jinja.contains("<|im_start|>") {
            ChatTemplate::ChatMl {
                default_system: literal_chatml_system(jinja),
            }
        } else if jinja.contains("[INST]") {
            ChatTemplate::Llama2 {
                default_system: None,
            }
        } else {
            ChatTemplate::None
        }
    }

    /// Whether this is a real chat template.
    pub fn is_chat(&self) -> bool {
        !matches!(self, ChatTemplate::None)
    }

    /// The system message used when a prompt gives none.
    pub fn default_system(&self) -> Option<&str> {
        match self {
            ChatTemplate::None => None,
            ChatTemplate::ChatMl { default_system } | ChatTemplate::Llama2 { default_system } => {
                default_system.as_deref()
            }
        }
    }

    /// One user turn with an optional system message (`None`: the template's default),
    /// followed by the opening of the assistant's answer.
    pub fn render(&self, system: Option<&str>, user: &str, answer_prefix: &str) -> String {
        let system = system.or(self.default_system());
        match self {
            ChatTemplate::None => match system {
                Some(system) => format!("{system}\n\n{user}{answer_prefix}"),
                None => format!("{user}{answer_prefix}"),
            },
            ChatTemplate::ChatMl { .. } => {
                let mut text = String::new();
                if let Some(system) = system {
                    text.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
                }
                text.push_str(&format!(
                    "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{answer_prefix}"
                ));
                text
            }
            // As Meta's reference template: the system block opens the first user message,
            // and the message is stripped of surrounding whitespace.
            ChatTemplate::Llama2 { .. } => {
                let content = match system {
                    Some(system) => format!("<<SYS>>\n{system}\n<</SYS>>\n\n{user}"),
                    None => user.to_string(),
                };
                format!("[INST] {} [/INST]{answer_prefix}", content.trim())
            }
        }
    }
}

impl ChatTemplate {
    /// A whole conversation, `(role, content)` messages with roles `system`, `user` and
    /// `assistant`, followed by the opening of a new assistant turn; `None` without a
    /// chat template. A conversation without a leading system message gets the
    /// template's default one. One user message renders as [`Self::render`] does.
    pub fn render_conversation(&self, messages: &[(&str, &str)]) -> Option<String> {
        let (system, rest) = match messages.split_first() {
            Some((("system", content), rest)) => (Some(*content), rest),
            _ => (self.default_system(), messages),
        };
        match self {
            ChatTemplate::None => None,
            ChatTemplate::ChatMl { .. } => {
                let mut text = String::new();
                if let Some(system) = system {
                    text.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
                }
                for (role, content) in rest {
                    text.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
                }
                text.push_str("<|im_start|>assistant\n");
                Some(text)
            }
            // Meta's template: the system block opens the first user message; each answer
            // closes its exchange with `</s><s>`; messages are stripped.
            ChatTemplate::Llama2 { .. } => {
                let mut text = String::new();
                let mut system = system;
                for (role, content) in rest {
                    if *role == "assistant" {
                        text.push_str(&format!(" {} </s><s>", content.trim()));
                        continue;
                    }
                    let content = match system.take() {
                        Some(system) => format!("<<SYS>>\n{system}\n<</SYS>>\n\n{content}"),
                        None => content.to_string(),
                    };
                    text.push_str(&format!("[INST] {} [/INST]", content.trim()));
                }
                Some(text)
            }
        }
    }
}

/// The first `<|im_start|>system\n...<|im_end|>` in the template whose message is plain
/// literal text (no quotes, no Jinja expressions), with `\n` escapes unescaped.
fn literal_chatml_system(jinja: &str) -> Option<String> {
    const OPEN: &str = "<|im_start|>system";
    let mut rest = jinja;
    while let Some(start) = rest.find(OPEN) {
        rest = &rest[start + OPEN.len()..];
        let body = rest.strip_prefix('\n').or_else(|| rest.strip_prefix("\\n"));
        let Some(body) = body else { continue };
        let Some(end) = body.find("<|im_end|>") else {
            continue;
        };
        let message = &body[..end];
        let literal = !message.is_empty()
            && !message.contains(['\'', '"', '{', '}', '+'])
            && !message.contains("<|im_start|>");
        if literal {
            return Some(message.replace("\\n", "\n"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // The template in SmolLM2-135M-Instruct.Q4_1.gguf (`tokenizer.chat_template`).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn chatml_with_system() {
        let template = ChatTemplate::ChatMl {
            default_system: None,
        };
        assert_eq!(
            template.render(Some("Be brief."), "Which is better?", "Summary"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhich is better?<|im_end|>\n<|im_start|>assistant\nSummary"
        );
        assert_eq!(
            template.render(None, "Hi", ""),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn smollm2_default_system_is_detected_and_used() {
        let template = ChatTemplate::detect(SMOLLM2);
        assert_eq!(
            template.default_system(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        // What SmolLM2's Jinja template renders for [{"role": "user", "content": "Hi"}]
        // with add_generation_prompt, written out by hand from the template above.
        assert_eq!(
            template.render(None, "Hi", ""),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        // A given system message replaces the default.
        assert!(!template.render(Some("S"), "Hi", "").contains("SmolLM"));
    }

    #[test]
    fn escaped_newlines_and_expressions() {
        let jinja = "{%- if tools %}{{- '<|im_start|>system\\n' + messages[0]['content'] }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen.\\nBe kind.<|im_end|>\\n' }}{%- endif %}";
        assert_eq!(
            ChatTemplate::detect(jinja).default_system(),
            Some("You are Qwen.\nBe kind.")
        );
        let no_default =
            "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}";
        assert_eq!(
            ChatTemplate::detect(no_default),
            ChatTemplate::ChatMl {
                default_system: None
            }
        );
    }

    #[test]
    fn llama2_format() {
        let template = ChatTemplate::Llama2 {
            default_system: None,
        };
        assert_eq!(
            template.render(None, "Which is better?\n\nAnswer:", " Summary"),
            "[INST] Which is better?\n\nAnswer: [/INST] Summary"
        );
        assert_eq!(
            template.render(Some("You judge."), " Q ", ""),
            // Only the ends of the whole message are stripped, as in Meta's template.
            "[INST] <<SYS>>\nYou judge.\n<</SYS>>\n\n Q [/INST]"
        );
        assert_eq!(
            ChatTemplate::detect("{{ bos_token + '[INST] ' + content + ' [/INST]' }}"),
            template
        );
    }

    #[test]
    fn no_template() {
        assert_eq!(ChatTemplate::detect("{{ messages }}"), ChatTemplate::None);
        assert_eq!(ChatTemplate::None.render(None, "Q", " A"), "Q A");
        assert_eq!(ChatTemplate::None.render(Some("S"), "Q", ""), "S\n\nQ");
    }

    #[test]
    fn conversations_render_every_turn_and_one_user_message_as_render_does() {
        let chatml = ChatTemplate::ChatMl {
            default_system: Some("Default.".to_string()),
        };
        let llama2 = ChatTemplate::Llama2 {
            default_system: None,
        };
        for template in [&chatml, &llama2] {
            assert_eq!(
                template.render_conversation(&[("user", "Hi")]).unwrap(),
                template.render(None, "Hi", "")
            );
            assert_eq!(
                template
                    .render_conversation(&[("system", "S"), ("user", "Hi")])
                    .unwrap(),
                template.render(Some("S"), "Hi", "")
            );
        }
        let turns = [("user", "A?"), ("assistant", "B."), ("user", "C?")];
        assert_eq!(
            chatml.render_conversation(&turns).unwrap(),
            "<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\nA?<|im_end|>\n<|im_start|>assistant\nB.<|im_end|>\n<|im_start|>user\nC?<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            llama2.render_conversation(&turns).unwrap(),
            "[INST] A? [/INST] B. </s><s>[INST] C? [/INST]"
        );
        assert_eq!(ChatTemplate::None.render_conversation(&turns), None);
    }
}
