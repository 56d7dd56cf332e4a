//! Pairwise prompt templates and the label request built from them.
//!
//! The built-in templates are the comparative-assessment paper's two prompts (files
//! under `templates/pairwise/`, embedded at build time): `c1` asks "Which Summary is more
//! coherent, Summary A or Summary B?" after the context; `c2` opens with "Passage:" and
//! asks "... relative to the passage". For dialogue the nouns become Response and
//! Dialogue, for data-to-text Text and Triples, for `--task custom` the user's own
//! ([`crate::judge::attribute::Nouns`]). The question ("Which Summary is more coherent")
//! is the `{question}` placeholder: built from the item and the attribute's comparative,
//! or the user's own `--question`. User templates are text files with the same
//! placeholders: `{context}`, `{a}`, `{b}`, `{adjective}`, `{item}`, `{question}`,
//! `{context_label}` ("Passage") and `{context_noun}` (the label in lower case: "passage")
//! (`{{` and `}}` for literal braces; one trailing newline is dropped). Substituted text
//! is never scanned again, so a candidate containing `{a}` stays as it is.
//!
//! How the answer is elicited depends on the model family ([`Conventions`]): the user
//! prompt gets `pairwise_suffix`, the answer opens with `answer_prefix` (with `{item}`),
//! the labels `label_a`/`label_b` are scored right after it, and `chat` decides whether
//! the model's chat template wraps the prompt.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

use crate::engine::{Conventions, Label, LabelRequest, LabelResult, Prompt, TextPrompt};
use crate::judge::attribute::Task;

const C1: &str = include_str!("../../../templates/pairwise/c1.txt");
const C2: &str = include_str!("../../../templates/pairwise/c2.txt");

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 8] = [
    "context",
    "a",
    "b",
    "adjective",
    "item",
    "question",
    "context_label",
    "context_noun",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    Context,
    A,
    B,
    Adjective,
    Item,
    Question,
    ContextLabel,
    ContextNoun,
}

/// A parsed pairwise template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairwiseTemplate {
    id: String,
    segments: Vec<Segment>,
}

/// What fills a template's placeholders.
#[derive(Debug, Clone, Copy)]
pub struct Fill<'a> {
    pub context: &'a str,
    pub a: &'a str,
    pub b: &'a str,
    pub adjective: &'a str,
    pub item: &'a str,
    /// "Which Summary is more coherent" (no question mark).
    pub question: &'a str,
    /// "Passage"; `{context_noun}` is its lower case.
    pub context_label: &'a str,
}

impl PairwiseTemplate {
    /// A built-in template (`c1`, `c2`) for `task`.
    pub fn builtin(name: &str, task: Task) -> Result<Self> {
        let text = match name {
            "c1" => C1,
            "c2" => C2,
            _ => bail!("unknown built-in template `{name}` (built-ins: c1, c2)"),
        };
        let id = match name {
            "c1" => "pairwise/c1".to_string(),
            _ => format!("pairwise/c2-{}", task.name()),
        };
        Self::parse(id, text).with_context(|| format!("built-in template {name}"))
    }

    /// `c1`/`c2`, or else the path of a template file.
    pub fn resolve(spec: &str, task: Task) -> Result<Self> {
        match spec {
            "c1" | "c2" => Self::builtin(spec, task),
            path => Self::from_file(Path::new(path)),
        }
    }

    /// A user template from a file; its id is the sha256 of its text.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read template {}", path.display()))?;
        let id = format!(
            "pairwise/file:{}",
            hex::encode(Sha256::digest(text.as_bytes()))
        );
        Self::parse(id, &text).with_context(|| format!("template {}", path.display()))
    }

    /// Parse template text; `id` names it in the result cache.
    pub fn parse(id: impl Into<String>, text: &str) -> Result<Self> {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let rest = &text[at + 1..];
                    let Some(end) = rest.find('}') else {
                        bail!("unclosed `{{` at byte {at} (write `{{{{` for a literal brace)");
                    };
                    let name = &rest[..end];
                    let segment = match name {
                        "context" => Segment::Context,
                        "a" => Segment::A,
                        "b" => Segment::B,
                        "adjective" => Segment::Adjective,
                        "item" => Segment::Item,
                        "question" => Segment::Question,
                        "context_label" => Segment::ContextLabel,
                        "context_noun" => Segment::ContextNoun,
                        _ => bail!(
                            "unknown placeholder `{{{name}}}`; known: {}",
                            PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
                        ),
                    };
                    for _ in 0..name.chars().count() + 1 {
                        chars.next();
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut literal)));
                    }
                    segments.push(segment);
                }
                '}' => bail!("unmatched `}}` at byte {at} (write `}}}}` for a literal brace)"),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Text(literal));
        }
        for (needed, name) in [(Segment::A, "{a}"), (Segment::B, "{b}")] {
            if !segments.contains(&needed) {
                bail!("template has no {name} placeholder");
            }
        }
        Ok(Self {
            id: id.into(),
            segments,
        })
    }

    /// The template's identity in the result cache.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The template with its placeholders filled.
    pub fn render(&self, fill: &Fill) -> String {
        let mut out = String::new();
        let context_noun = fill.context_label.to_lowercase();
        for segment in &self.segments {
            out.push_str(match segment {
                Segment::Text(text) => text,
                Segment::Context => fill.context,
                Segment::A => fill.a,
                Segment::B => fill.b,
                Segment::Adjective => fill.adjective,
                Segment::Item => fill.item,
                Segment::Question => fill.question,
                Segment::ContextLabel => fill.context_label,
                Segment::ContextNoun => &context_noun,
            });
        }
        out
    }

    /// The label request asking the model which of `fill.a` (label A) and `fill.b`
    /// (label B) is better, in the model family's conventions.
    pub fn request(&self, conventions: &Conventions, fill: &Fill) -> LabelRequest {
        let user = self.render(fill) + &conventions.pairwise_suffix;
        let text = TextPrompt {
            system: None,
            user,
            answer_prefix: conventions.answer_prefix_for(fill.item),
        };
        LabelRequest {
            prompt: if conventions.chat {
                Prompt::chat(text)
            } else {
                Prompt::plain(text)
            },
            labels: vec![
                Label::Text(conventions.label_a.clone()),
                Label::Text(conventions.label_b.clone()),
            ],
        }
    }
}

/// `(p_A, label mass)` from the result of a pairwise request: `p_A =
/// P(label A) / (P(label A) + P(label B))`, `label mass = P(label A) + P(label B)`.
pub fn first_wins(result: &LabelResult) -> Result<(f64, f64)> {
    if result.labels.len() != 2 {
        bail!(
            "a pairwise result needs 2 label scores, got {}",
            result.labels.len()
        );
    }
    let p = result.normalised()[0];
    if !p.is_finite() {
        bail!(
            "both labels got zero probability (log-probs {} and {})",
            result.labels[0].logprob,
            result.labels[1].logprob
        );
    }
    Ok((p, result.label_mass()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LabelScore;

    /// The fill of a built-in task's prompt (the context label follows the item).
    fn fill<'a>(adjective: &'a str, item: &'a str) -> Fill<'a> {
        let context_label = match item {
            "Summary" => "Passage",
            "Response" => "Dialogue",
            "Text" => "Triples",
            _ => "Input",
        };
        Fill {
            context: "The article.",
            a: "First summary.",
            b: "Second summary.",
            adjective,
            item,
            question: Box::leak(format!("Which {item} is more {adjective}").into_boxed_str()),
            context_label,
        }
    }

    #[test]
    fn custom_nouns_and_questions_fill_the_papers_templates() {
        let t = PairwiseTemplate::builtin("c2", Task::Custom).unwrap();
        let mut f = fill("empathetic", "Story");
        f.context_label = "Prompt";
        assert_eq!(
            t.render(&f),
            "Prompt:\nThe article.\n\nStory A: First summary.\n\nStory B: Second summary.\n\n\
             Which Story is more empathetic relative to the prompt, Story A or Story B?"
        );
        f.question = "Which story shows more empathy";
        let t = PairwiseTemplate::builtin("c1", Task::Custom).unwrap();
        assert!(t
            .render(&f)
            .ends_with("Which story shows more empathy, Story A or Story B?"));
    }

    #[test]
    fn c1_renders_the_papers_text() {
        let t = PairwiseTemplate::builtin("c1", Task::Summary).unwrap();
        assert_eq!(
            t.render(&fill("coherent", Task::Summary.item())),
            "The article.\n\nSummary A: First summary.\n\nSummary B: Second summary.\n\n\
             Which Summary is more coherent, Summary A or Summary B?"
        );
        let t = PairwiseTemplate::builtin("c1", Task::Dialogue).unwrap();
        assert_eq!(
            t.render(&fill("engaging", Task::Dialogue.item())),
            "The article.\n\nResponse A: First summary.\n\nResponse B: Second summary.\n\n\
             Which Response is more engaging, Response A or Response B?"
        );
    }

    #[test]
    fn c2_renders_the_papers_text_per_task() {
        let t = PairwiseTemplate::builtin("c2", Task::Summary).unwrap();
        assert_eq!(
            t.render(&fill("consistent", Task::Summary.item())),
            "Passage:\nThe article.\n\nSummary A: First summary.\n\nSummary B: Second summary.\n\n\
             Which Summary is more consistent relative to the passage, Summary A or Summary B?"
        );
        let t = PairwiseTemplate::builtin("c2", Task::Dialogue).unwrap();
        assert_eq!(
            t.render(&fill("natural", Task::Dialogue.item())),
            "Dialogue:\nThe article.\n\nResponse A: First summary.\n\nResponse B: Second summary.\n\n\
             Which Response is more natural relative to the dialogue, Response A or Response B?"
        );
        let t = PairwiseTemplate::builtin("c2", Task::DataToText).unwrap();
        assert_eq!(
            t.render(&fill("fluent", Task::DataToText.item())),
            "Triples:\nThe article.\n\nText A: First summary.\n\nText B: Second summary.\n\n\
             Which Text is more fluent relative to the triples, Text A or Text B?"
        );
        assert_ne!(
            t.id(),
            PairwiseTemplate::builtin("c2", Task::Summary).unwrap().id()
        );
    }

    #[test]
    fn user_templates_escape_braces_and_do_not_rescan() {
        let t = PairwiseTemplate::parse("t", "{{x}} {a} vs {b}: {item}s, {adjective}?\n").unwrap();
        let mut f = fill("fluent", "Text");
        f.a = "{b}";
        assert_eq!(t.render(&f), "{x} {b} vs Second summary.: Texts, fluent?");
    }

    #[test]
    fn template_errors_name_the_problem() {
        let error = PairwiseTemplate::parse("t", "{a} {b} {candidate}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`{candidate}`"), "{error}");
        assert!(PairwiseTemplate::parse("t", "{a} only")
            .unwrap_err()
            .to_string()
            .contains("{b}"));
        assert!(PairwiseTemplate::parse("t", "{a} {b").is_err());
        assert!(PairwiseTemplate::parse("t", "{a} } {b}").is_err());
        assert!(PairwiseTemplate::builtin("c3", Task::Summary).is_err());
    }

    #[test]
    fn template_files_are_read_and_identified_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        std::fs::write(&path, "{context}\n{a}|{b}\n").unwrap();
        let t = PairwiseTemplate::resolve(path.to_str().unwrap(), Task::Summary).unwrap();
        assert!(t.id().starts_with("pairwise/file:"));
        assert_eq!(
            t.render(&fill("x", "y")),
            "The article.\nFirst summary.|Second summary."
        );
        std::fs::write(&path, "{context}\n{b}|{a}\n").unwrap();
        assert_ne!(PairwiseTemplate::from_file(&path).unwrap().id(), t.id());

        std::fs::write(&path, "{a} {b} {oops}").unwrap();
        let error = format!("{:#}", PairwiseTemplate::from_file(&path).unwrap_err());
        assert!(
            error.contains("t.txt") && error.contains("`{oops}`"),
            "{error}"
        );
        let missing = dir.path().join("missing.txt");
        let error = format!("{:#}", PairwiseTemplate::from_file(&missing).unwrap_err());
        assert!(error.contains("missing.txt"), "{error}");
    }

    #[test]
    fn requests_follow_the_model_conventions() {
        let t = PairwiseTemplate::builtin("c1", Task::Summary).unwrap();
        let llama = Conventions {
            pairwise_suffix: "\n\nAnswer:".into(),
            answer_prefix: " {item}".into(),
            label_a: "A".into(),
            label_b: "B".into(),
            score_suffix: "\n\nScore:".into(),
            chat: true,
            rubric_protocol: None,
        };
        let request = t.request(&llama, &fill("coherent", "Summary"));
        let Prompt::Text { text, chat } = &request.prompt else {
            panic!("expected a text prompt");
        };
        assert!(chat);
        assert!(text.user.ends_with("Summary A or Summary B?\n\nAnswer:"));
        assert_eq!(text.answer_prefix, " Summary");
        assert_eq!(request.labels, vec![Label::from("A"), Label::from("B")]);

        let flan = Conventions::default();
        let request = t.request(&flan, &fill("coherent", "Summary"));
        assert_eq!(
            request.prompt,
            Prompt::plain(
                TextPrompt::user(t.render(&fill("coherent", "Summary")))
                    .with_answer_prefix("Summary")
            )
        );
        assert_eq!(request.labels, vec![Label::from(" A"), Label::from(" B")]);
    }

    #[test]
    fn first_wins_normalises_over_the_two_labels() {
        let result = LabelResult {
            labels: vec![
                LabelScore {
                    tokens: vec![],
                    logprob: (0.3f64).ln(),
                },
                LabelScore {
                    tokens: vec![],
                    logprob: (0.1f64).ln(),
                },
            ],
            prompt_tokens: 3,
        };
        let (p, mass) = first_wins(&result).unwrap();
        assert!((p - 0.75).abs() < 1e-12 && (mass - 0.4).abs() < 1e-12);
        let mut dead = result.clone();
        dead.labels[0].logprob = f64::NEG_INFINITY;
        dead.labels[1].logprob = f64::NEG_INFINITY;
        assert!(first_wins(&dead).is_err());
        dead.labels.pop();
        assert!(first_wins(&dead).is_err());
    }
}
