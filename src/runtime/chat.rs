//! Chat templates: how a conversation (system, user and assistant turns) and the opening
//! of the model's answer are written as one string for the tokenizer.
//!
//! We implement the families our models use rather than a Jinja engine: ChatML (SmolLM2,
//! Qwen2/2.5/3), Llama-2's `[INST] <<SYS>>`, Llama 3's header ids (3.0, and 3.1's dated
//! system header), Mistral's `[INST]` (v0.3 conventions), Gemma's `<start_of_turn>` and
//! Phi-3's and Phi-4-mini's `<|user|>`. Each is checked against transformers' `apply_chat_template` with
//! the family's published template (`tests/fixtures/chat_templates`). A checkpoint's
//! template is named by its model card, or, for a checkpoint without one, recognised
//! from its own Jinja (`tokenizer.chat_template`, `tokenizer_config.json`);
//! [`ChatTemplate::differences`] says where a checkpoint's own template visibly departs
//! from ours. The beginning-of-text token is never written: the tokenizer adds it.

use super::card::{ChatSpec, ChatTemplateKind};

/// Knowledge-cutoff and date lines of Llama 3.1's system header (its template's default
/// `date_string`; Llama 3.2's template writes the current date instead).
const LLAMA31_DATES: &str = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";

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
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>` turns (contents
    /// trimmed), then the assistant header. `dated`: Llama 3.1's template, whose system
    /// header is always written and opens with the knowledge-cutoff and date lines.
    Llama3 {
        default_system: Option<String>,
        dated: bool,
    },
    /// Mistral v0.3: `[INST] ...[/INST]` user turns, ` answer</s>` assistant turns; the
    /// system message opens the last user turn.
    Mistral { default_system: Option<String> },
    /// Gemma: `<start_of_turn>user|model\n...<end_of_turn>\n` (contents trimmed); the
    /// system message opens the first user turn followed by a blank line (Gemma 3's
    /// template; Gemma 2's refuses system messages).
    Gemma { default_system: Option<String> },
    /// Phi-3 / 3.5: `<|system|>`, `<|user|>`, `<|assistant|>` turns closed by `<|end|>\n`.
    Phi3 { default_system: Option<String> },
    /// Phi-4-mini: `<|role|>...<|end|>` for every message as given (no newlines, an empty
    /// system message kept), then `<|assistant|>`.
    Phi4 { default_system: Option<String> },
}

impl ChatTemplate {
    /// The template a card's `[chat]` table names.
    pub fn from_spec(spec: &ChatSpec) -> Self {
        let default_system = spec.default_system.clone();
        match spec.template {
            ChatTemplateKind::None => ChatTemplate::None,
            ChatTemplateKind::Chatml => ChatTemplate::ChatMl { default_system },
            ChatTemplateKind::Llama2 => ChatTemplate::Llama2 { default_system },
            ChatTemplateKind::Llama3 => ChatTemplate::Llama3 {
                default_system,
                dated: false,
            },
            ChatTemplateKind::Llama31 => ChatTemplate::Llama3 {
                default_system,
                dated: true,
            },
            ChatTemplateKind::Mistral => ChatTemplate::Mistral { default_system },
            ChatTemplateKind::Gemma => ChatTemplate::Gemma { default_system },
            ChatTemplateKind::Phi3 => ChatTemplate::Phi3 { default_system },
            ChatTemplateKind::Phi4 => ChatTemplate::Phi4 { default_system },
        }
    }

    /// Recognise a Jinja chat template (GGUF `tokenizer.chat_template`, or
    /// `tokenizer_config.json`) by the markers it writes: Llama 3 header ids (dated when
    /// it writes the knowledge-cutoff line), Gemma turns, ChatML, Phi-3 turns, `[INST]`
    /// (Llama-2 with `<<SYS>>`, else Mistral); else none. A literal default system
    /// message in a ChatML template (`'<|im_start|>system\nYou are ...<|im_end|>'`) is
    /// kept as the default.
    pub fn detect(jinja: &str) -> Self {
        if jinja.contains("<|start_header_id|>") {
            ChatTemplate::Llama3 {
                default_system: None,
                dated: jinja.contains("Cutting Knowledge Date"),
            }
        } else if jinja.contains("<start_of_turn>") {
            ChatTemplate::Gemma {
                default_system: None,
            }
        } else if jinja.contains("<|im_start|>") {
            ChatTemplate::ChatMl {
                default_system: literal_chatml_system(jinja),
            }
        } else if jinja.contains("<|user|>") && jinja.contains("<|end|>") {
            ChatTemplate::Phi3 {
                default_system: None,
            }
        } else if jinja.contains("<|end|>") && writes_role_markers(jinja) {
            // Phi-4-mini writes `'<|' + message['role'] + '|>'`: no `<|user|>` literal.
            ChatTemplate::Phi4 {
                default_system: None,
            }
        } else if jinja.contains("[INST]") && jinja.contains("<<SYS>>") {
            ChatTemplate::Llama2 {
                default_system: None,
            }
        } else if jinja.contains("[INST]") {
            ChatTemplate::Mistral {
                default_system: None,
            }
        } else {
            ChatTemplate::None
        }
    }

    /// The family's name, as model cards write it.
    pub fn family(&self) -> &'static str {
        match self {
            ChatTemplate::None => "none",
            ChatTemplate::ChatMl { .. } => "chatml",
            ChatTemplate::Llama2 { .. } => "llama2",
            ChatTemplate::Llama3 { dated: false, .. } => "llama3",
            ChatTemplate::Llama3 { dated: true, .. } => "llama3.1",
            ChatTemplate::Mistral { .. } => "mistral",
            ChatTemplate::Gemma { .. } => "gemma",
            ChatTemplate::Phi3 { .. } => "phi3",
            ChatTemplate::Phi4 { .. } => "phi4",
        }
    }

    /// Where a checkpoint's own Jinja template visibly departs from our rendering: a
    /// marker we write that none of its string literals writes, a family it does not
    /// belong to, a default system message or date it writes differently. A check of
    /// the template's text, not a rendering: empty means nothing was seen, not proof of
    /// equality (our renderings are proved against the published templates by the
    /// fixture in `tests/fixtures/chat_templates`).
    pub fn differences(&self, jinja: &str) -> Vec<String> {
        let mut found = Vec::new();
        let detected = Self::detect(jinja);
        if detected.family() != self.family() {
            found.push(format!(
                "it looks like the '{}' family, ours is '{}'",
                detected.family(),
                self.family()
            ));
            return found;
        }
        let literals = string_literals(jinja);
        let writes = |marker: &str| literals.iter().any(|l| l.contains(marker));
        let (required, forbidden): (&[&str], &[&str]) = match self {
            ChatTemplate::None => (&[], &[]),
            ChatTemplate::ChatMl { .. } => (&["<|im_start|>", "<|im_end|>"], &[]),
            ChatTemplate::Llama2 { .. } => (&["[INST]", "[/INST]", "<<SYS>>"], &[]),
            ChatTemplate::Llama3 { dated: false, .. } => (
                &["<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>"],
                &[],
            ),
            ChatTemplate::Llama3 { dated: true, .. } => (
                &[
                    "<|start_header_id|>",
                    "<|end_header_id|>\n\n",
                    "<|eot_id|>",
                    "Cutting Knowledge Date: December 2023\n",
                    "26 Jul 2024",
                ],
                &[],
            ),
            ChatTemplate::Mistral { .. } => (&["[INST] ", "[/INST]"], &[" [/INST]"]),
            ChatTemplate::Gemma { .. } => (
                &[
                    "<start_of_turn>",
                    "<end_of_turn>\n",
                    "<start_of_turn>model\n",
                ],
                &[],
            ),
            ChatTemplate::Phi3 { .. } => (
                &["<|system|>\n", "<|user|>\n", "<|assistant|>\n", "<|end|>\n"],
                &[],
            ),
            ChatTemplate::Phi4 { .. } => (
                &["<|", "|>", "<|end|>", "<|assistant|>"],
                &["<|assistant|>\n", "<|end|>\n"],
            ),
        };
        for marker in required {
            if !writes(marker) {
                found.push(format!("it does not write {marker:?}, ours does"));
            }
        }
        for marker in forbidden {
            if writes(marker) {
                found.push(format!("it writes {marker:?}, ours does not"));
            }
        }
        if let ChatTemplate::ChatMl { default_system } = self {
            let theirs = literal_chatml_system(jinja);
            if &theirs != default_system {
                found.push(format!(
                    "its default system message is {theirs:?}, ours {default_system:?}"
                ));
            }
        }
        if matches!(self, ChatTemplate::Llama3 { dated: true, .. })
            && jinja.contains("strftime_now")
        {
            found.push("it writes today's date in the system header, ours 26 Jul 2024".into());
        }
        if matches!(self, ChatTemplate::Gemma { .. }) && jinja.contains("System role not supported")
        {
            found
                .push("it refuses system messages; ours folds one into the first user turn".into());
        }
        found
    }

    /// The token that closes an assistant turn in this template (`None` without one).
    /// A checkpoint's `tokenizer_config.json` may name another end-of-text token:
    /// Phi-3.5's names `<|endoftext|>` and Gemma's `<eos>` while their models end a turn
    /// with `<|end|>` and `<end_of_turn>`, which transformers stops at through
    /// `generation_config.json`'s eos ids.
    pub fn turn_end(&self) -> Option<&'static str> {
        match self {
            ChatTemplate::None => None,
            ChatTemplate::ChatMl { .. } => Some("<|im_end|>"),
            ChatTemplate::Llama2 { .. } | ChatTemplate::Mistral { .. } => Some("</s>"),
            ChatTemplate::Llama3 { .. } => Some("<|eot_id|>"),
            ChatTemplate::Gemma { .. } => Some("<end_of_turn>"),
            ChatTemplate::Phi3 { .. } | ChatTemplate::Phi4 { .. } => Some("<|end|>"),
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
            ChatTemplate::ChatMl { default_system }
            | ChatTemplate::Llama2 { default_system }
            | ChatTemplate::Llama3 { default_system, .. }
            | ChatTemplate::Mistral { default_system }
            | ChatTemplate::Gemma { default_system }
            | ChatTemplate::Phi3 { default_system }
            | ChatTemplate::Phi4 { default_system } => default_system.as_deref(),
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
            _ => {
                let mut messages = Vec::with_capacity(2);
                if let Some(system) = system {
                    messages.push(("system", system));
                }
                messages.push(("user", user));
                let mut text = self.render_conversation(&messages).unwrap_or_default();
                text.push_str(answer_prefix);
                text
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
            // Llama 3: every content trimmed; 3.1 always writes the system header, with
            // its knowledge-cutoff and date lines before the (trimmed) system message.
            ChatTemplate::Llama3 { dated, .. } => {
                let header = |role: &str| format!("<|start_header_id|>{role}<|end_header_id|>\n\n");
                let mut text = String::new();
                if *dated {
                    text.push_str(&header("system"));
                    text.push_str(LLAMA31_DATES);
                    text.push_str(system.map(str::trim).unwrap_or(""));
                    text.push_str("<|eot_id|>");
                } else if let Some(system) = system {
                    text.push_str(&format!("{}{}<|eot_id|>", header("system"), system.trim()));
                }
                for (role, content) in rest {
                    text.push_str(&format!("{}{}<|eot_id|>", header(role), content.trim()));
                }
                text.push_str(&header("assistant"));
                Some(text)
            }
            // Mistral v0.3: the system message opens the last user turn; no space before
            // `[/INST]`; answers trimmed and closed by `</s>`.
            ChatTemplate::Mistral { .. } => {
                let last_user = rest.iter().rposition(|(role, _)| *role == "user");
                let mut text = String::new();
                for (index, (role, content)) in rest.iter().enumerate() {
                    if *role == "assistant" {
                        text.push_str(&format!(" {}</s>", content.trim()));
                        continue;
                    }
                    match system {
                        Some(system) if Some(index) == last_user && index + 1 == rest.len() => {
                            text.push_str(&format!("[INST] {system}\n\n{content}[/INST]"))
                        }
                        _ => text.push_str(&format!("[INST] {content}[/INST]")),
                    }
                }
                Some(text)
            }
            // Gemma: the assistant is the "model"; the system message and a blank line
            // open the first turn; contents trimmed.
            ChatTemplate::Gemma { .. } => {
                let mut text = String::new();
                for (index, (role, content)) in rest.iter().enumerate() {
                    let role = if *role == "assistant" { "model" } else { role };
                    let prefix = match system {
                        Some(system) if index == 0 => format!("{system}\n\n"),
                        _ => String::new(),
                    };
                    text.push_str(&format!(
                        "<start_of_turn>{role}\n{prefix}{}<end_of_turn>\n",
                        content.trim()
                    ));
                }
                text.push_str("<start_of_turn>model\n");
                Some(text)
            }
            // Phi-3: an empty system message is left out; contents as given.
            ChatTemplate::Phi3 { .. } => {
                let mut text = String::new();
                if let Some(system) = system.filter(|s| !s.is_empty()) {
                    text.push_str(&format!("<|system|>\n{system}<|end|>\n"));
                }
                for (role, content) in rest {
                    text.push_str(&format!("<|{role}|>\n{content}<|end|>\n"));
                }
                text.push_str("<|assistant|>\n");
                Some(text)
            }
            // Phi-4-mini: every message as given, the system one included even if empty.
            ChatTemplate::Phi4 { .. } => {
                let mut text = String::new();
                if let Some(system) = system {
                    text.push_str(&format!("<|system|>{system}<|end|>"));
                }
                for (role, content) in rest {
                    text.push_str(&format!("<|{role}|>{content}<|end|>"));
                }
                text.push_str("<|assistant|>");
                Some(text)
            }
        }
    }
}

/// Whether a template's string literals include `<|` and `|>` on their own: role markers
/// written around a message's role (Phi-4-mini).
fn writes_role_markers(jinja: &str) -> bool {
    let literals = string_literals(jinja);
    ["<|", "|>"]
        .iter()
        .all(|marker| literals.iter().any(|l| l == marker))
}

/// The string literals of a Jinja template (`'...'` and `"..."`), with `\n`, `\t`,
/// `\\` and quote escapes undone.
fn string_literals(jinja: &str) -> Vec<String> {
    let mut literals = Vec::new();
    let mut chars = jinja.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        let quote = c;
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => literal.push('\n'),
                    Some('t') => literal.push('\t'),
                    Some(other) => literal.push(other),
                    None => break,
                },
                c if c == quote => break,
                c => literal.push(c),
            }
        }
        literals.push(literal);
    }
    literals
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
            ChatTemplate::detect(
                "{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content + ' [/INST]' }}"
            ),
            template
        );
        // Without a <<SYS>> block, [INST] is Mistral's.
        assert_eq!(
            ChatTemplate::detect("{{ bos_token + '[INST] ' + content + ' [/INST]' }}"),
            ChatTemplate::Mistral {
                default_system: None
            }
        );
    }

    #[test]
    fn string_literals_are_unescaped() {
        let jinja = r#"{{ '<|user|>\n' + x + "say \"hi\"" }}{% if a == 'b\'c' %}"#;
        assert_eq!(
            string_literals(jinja),
            vec!["<|user|>\n".to_string(), "say \"hi\"".into(), "b'c".into()]
        );
    }

    #[test]
    fn new_families_keep_the_default_system_and_the_answer_prefix() {
        let gemma = ChatTemplate::Gemma {
            default_system: Some("Judge.".into()),
        };
        assert_eq!(
            gemma.render(None, " Q ", "Summary"),
            "<start_of_turn>user\nJudge.\n\nQ<end_of_turn>\n<start_of_turn>model\nSummary"
        );
        let mistral = ChatTemplate::Mistral {
            default_system: None,
        };
        // An answer already given keeps the system message away from earlier turns.
        assert_eq!(
            mistral
                .render_conversation(&[("system", "S"), ("user", "A"), ("assistant", " B ")])
                .unwrap(),
            "[INST] A[/INST] B</s>"
        );
        let phi = ChatTemplate::Phi3 {
            default_system: None,
        };
        assert_eq!(
            phi.render(Some(""), "Q", ""),
            "<|user|>\nQ<|end|>\n<|assistant|>\n"
        );
        assert!(phi.is_chat());
        assert_eq!(phi.family(), "phi3");
    }

    #[test]
    fn each_family_closes_an_answer_with_its_turn_end() {
        // The token each family's template writes after an assistant message
        // (tests/fixtures/chat_templates: `multi_turn`'s answer "4" and what follows it).
        let cases = [
            (
                ChatTemplate::ChatMl {
                    default_system: None,
                },
                "4<|im_end|>",
            ),
            (
                ChatTemplate::Llama2 {
                    default_system: None,
                },
                " 4 </s>",
            ),
            (
                ChatTemplate::Llama3 {
                    default_system: None,
                    dated: true,
                },
                "4<|eot_id|>",
            ),
            (
                ChatTemplate::Mistral {
                    default_system: None,
                },
                " 4</s>",
            ),
            (
                ChatTemplate::Gemma {
                    default_system: None,
                },
                "4<end_of_turn>",
            ),
            (
                ChatTemplate::Phi3 {
                    default_system: None,
                },
                "4<|end|>",
            ),
            (
                ChatTemplate::Phi4 {
                    default_system: None,
                },
                "4<|end|>",
            ),
        ];
        for (template, answer) in cases {
            let end = template.turn_end().unwrap();
            assert!(answer.ends_with(end), "{}", template.family());
            let text = template
                .render_conversation(&[("user", "Q"), ("assistant", "4"), ("user", "R")])
                .unwrap();
            assert!(text.contains(answer), "{}: {text:?}", template.family());
        }
        assert_eq!(ChatTemplate::None.turn_end(), None);
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
