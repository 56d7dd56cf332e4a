//! LLM-based perturbations: the auto-CoT adjustment prompts of `templates/dhp/prompts/`
//! (the paper's appendix B form) sent to our own model through [`Scorer::generate`] with
//! seeded nucleus sampling.
//!
//! A generation is cleaned (a preamble line such as "Revised Summary:" or "Here is the
//! adjusted summary:", surrounding quotes, text after the first blank line when the
//! original has a single paragraph) and then checked: empty, unchanged, or far shorter or
//! longer than the original is rejected, and the next seed is tried, up to `attempts`
//! times; then the row is recorded as failed with the last reason. The raw generations
//! are kept in the result cache under the model's fingerprint, the rendered prompt and
//! the sampling settings, so reruns and resumed runs read them back.

use anyhow::{Context as _, Result};
use rand::Rng;
use sha2::{Digest, Sha256};

use super::items::DhpItem;
use super::perturb::{Editor, LlmOutcome};
use super::rules::item_rng;
use super::task::{Degree, DhpTask, LlmEdit};
use crate::engine::{
    Generate, GenerationRequest, Prompt, ResultCache, Sampling, Scorer, TextPrompt,
};

/// Kind of the generation entries in the result cache's text table.
pub const CACHE_KIND: &str = "dhp-edit";
/// Version of the prompts and the request (part of the cache key).
const VERSION: &str = "dhp-edit/v1";

fn template(edit: LlmEdit, degree: Degree) -> &'static str {
    let major = degree == Degree::Major;
    match (edit, major) {
        (LlmEdit::FictionalEntities, false) => {
            include_str!("../../templates/dhp/prompts/fictional-entities-minor.txt")
        }
        (LlmEdit::FictionalEntities, true) => {
            include_str!("../../templates/dhp/prompts/fictional-entities-major.txt")
        }
        (LlmEdit::Grammar, false) => include_str!("../../templates/dhp/prompts/grammar-minor.txt"),
        (LlmEdit::Grammar, true) => include_str!("../../templates/dhp/prompts/grammar-major.txt"),
        (LlmEdit::Rewrite, false) => include_str!("../../templates/dhp/prompts/rewrite-minor.txt"),
        (LlmEdit::Rewrite, true) => include_str!("../../templates/dhp/prompts/rewrite-major.txt"),
    }
}

/// (item, Item, for_what, source) of a task's prompts.
fn nouns(task: DhpTask) -> (&'static str, &'static str, &'static str, &'static str) {
    match task {
        DhpTask::Summarization => ("summary", "Summary", "an article", "article"),
        DhpTask::StoryCompletion => ("story ending", "Ending", "a story", "story"),
        DhpTask::Translation => ("translation", "Translation", "a source text", "source text"),
        DhpTask::QuestionAnswering => ("answer", "Answer", "a question", "question"),
    }
}

/// The adjustment prompt for `text`.
pub fn render_prompt(task: DhpTask, edit: LlmEdit, degree: Degree, text: &str) -> String {
    let (item, item_cap, for_what, source) = nouns(task);
    let body = template(edit, degree).trim_end();
    // `{text}` last, so that the text itself is never scanned for placeholders.
    let (head, tail) = body.split_once("{text}").unwrap_or((body, ""));
    let fill = |s: &str| {
        s.replace("{Item}", item_cap)
            .replace("{item}", item)
            .replace("{for_what}", for_what)
            .replace("{source}", source)
    };
    format!("{}{}{}", fill(head), text.trim(), fill(tail))
}

/// Clean a generation: drop a preamble line, quotes, and (for single-paragraph
/// originals) anything after the first paragraph.
pub fn clean(generation: &str, original: &str) -> String {
    let mut text = generation.trim().to_string();
    // A first line that announces the text ("Revised Summary:", "Here is ...:").
    if let Some((first, rest)) = text.split_once('\n') {
        let lower = first.trim().to_lowercase();
        if lower.ends_with(':')
            || lower.starts_with("here is")
            || lower.starts_with("here's")
            || lower.starts_with("revised")
            || lower.starts_with("sure")
        {
            text = rest.trim().to_string();
        }
    }
    for prefix in ["Revised ", "Adjusted "] {
        if let Some(rest) = text.strip_prefix(prefix) {
            if let Some((_, after)) = rest.split_once(':') {
                if rest.find(':').is_some_and(|i| i < 25) {
                    text = after.trim().to_string();
                }
            }
        }
    }
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    if digits > 0
        && text[digits..].starts_with(". ")
        && !original.trim_start().starts_with(&text[..digits + 1])
    {
        text = text[digits + 2..].trim().to_string();
    }
    if !original.trim().contains("\n\n") {
        if let Some((first, _)) = text.split_once("\n\n") {
            text = first.trim().to_string();
        }
    }
    let quoted = text.len() >= 2
        && ((text.starts_with('"') && text.ends_with('"'))
            || (text.starts_with('\u{201c}') && text.ends_with('\u{201d}')));
    if quoted && !original.trim().starts_with('"') {
        let mut chars = text.chars();
        chars.next();
        chars.next_back();
        text = chars.as_str().trim().to_string();
    }
    text
}

fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Phrases of the prompts that a usable edit does not contain.
const ECHOES: [&str; 6] = [
    "adjustment",
    "instructions",
    "revised summary",
    "revised ending",
    "fictional counterpart",
    "grammatical error",
];

/// The fraction of `original`'s words (lower-cased, punctuation trimmed) that `edited`
/// still contains (as a multiset).
pub fn kept_word_fraction(edited: &str, original: &str) -> f64 {
    let words = |text: &str| -> Vec<String> {
        text.split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect()
    };
    let mut pool = words(edited);
    let wanted = words(original);
    if wanted.is_empty() {
        return 0.0;
    }
    let mut kept = 0;
    for word in &wanted {
        if let Some(at) = pool.iter().position(|w| w == word) {
            pool.swap_remove(at);
            kept += 1;
        }
    }
    kept as f64 / wanted.len() as f64
}

/// Why a cleaned generation is not a usable edit of `original`, if it is not: empty,
/// unchanged, echoing the prompt, not an edit (keeps under half of the original's words;
/// 90% for rewrite-and-insert, which keeps every sentence), or far shorter or longer.
pub fn rejection(edit: LlmEdit, cleaned: &str, original: &str) -> Option<String> {
    if cleaned.trim().is_empty() {
        return Some("empty generation".into());
    }
    if normalised(cleaned) == normalised(original) {
        return Some("generation equals the original".into());
    }
    let lower = cleaned.to_lowercase();
    if ECHOES.iter().any(|echo| lower.contains(echo)) {
        return Some("generation repeats the instructions".into());
    }
    let kept = kept_word_fraction(cleaned, original);
    let least = match edit {
        LlmEdit::Rewrite => 0.9,
        _ => 0.5,
    };
    if kept < least {
        return Some(format!(
            "generation is not an edit of the text (keeps {:.0}% of its words)",
            100.0 * kept
        ));
    }
    let (got, want) = (
        cleaned.chars().count() as f64,
        original.chars().count() as f64,
    );
    let most = match edit {
        LlmEdit::Rewrite => 3.0 * want + 40.0,
        _ => 1.6 * want + 40.0,
    };
    if got < 0.5 * want {
        return Some(format!(
            "generation too short ({got} characters for {want})"
        ));
    }
    if got > most {
        return Some(format!("generation too long ({got} characters for {want})"));
    }
    if edit == LlmEdit::Rewrite && got <= want {
        return Some("a rewrite-and-insert edit did not add anything".into());
    }
    None
}

/// Makes LLM edits with a scorer's `generate`.
pub struct LlmEditor<'a> {
    pub scorer: &'a mut dyn Scorer,
    pub cache: Option<&'a ResultCache>,
    /// The run's seed; each item and perturbation derives its own first sampling seed.
    pub seed: u64,
    /// Generations tried per edit (each with the next seed).
    pub attempts: usize,
    pub temperature: f64,
    pub top_p: f64,
}

impl LlmEditor<'_> {
    fn generate(&mut self, prompt: &str, max_tokens: usize, seed: u64) -> Result<String> {
        let request = GenerationRequest {
            prompt: Prompt::chat(TextPrompt::user(prompt)),
            max_tokens,
            sampling: Sampling::TopP {
                temperature: self.temperature,
                top_p: self.top_p,
                seed,
            },
            stop: vec!["\n\n\n".into()],
        };
        let rendered = self.scorer.render(&request.prompt)?;
        let mut hasher = Sha256::new();
        for part in [
            VERSION.to_string(),
            rendered.input,
            rendered.decoder_prefix,
            format!("{max_tokens}/{}/{}/{seed}", self.temperature, self.top_p),
        ] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let key = hex::encode(hasher.finalize());
        let model = self.scorer.info().fingerprint.clone();
        if let Some(cache) = self.cache {
            if let Some(text) = cache.get_text(&model, CACHE_KIND, &key)? {
                return Ok(text);
            }
        }
        let generation = self.scorer.generate(&request)?;
        if let Some(cache) = self.cache {
            cache.put_text(&model, CACHE_KIND, &key, &generation.text)?;
        }
        Ok(generation.text)
    }
}

impl Editor for LlmEditor<'_> {
    fn edit(
        &mut self,
        task: DhpTask,
        edit: LlmEdit,
        degree: Degree,
        item: &DhpItem,
    ) -> Result<LlmOutcome> {
        let name = format!("{}-{}", edit.name(), degree.name());
        let first_seed: u64 = item_rng(self.seed, &item.id, &name).gen::<u32>() as u64;
        let prompt = render_prompt(task, edit, degree, &item.text);
        // Room for the text (about 4 characters a token), what an edit adds, and slack.
        let factor = if edit == LlmEdit::Rewrite { 2 } else { 1 };
        let max_tokens = factor * item.text.chars().count() / 3 + 48;
        let mut reason = String::from("no attempt");
        for attempt in 0..self.attempts.max(1) {
            let seed = first_seed + attempt as u64;
            let raw = self
                .generate(&prompt, max_tokens, seed)
                .with_context(|| format!("generation with seed {seed}"))?;
            let cleaned = clean(&raw, &item.text);
            match rejection(edit, &cleaned, &item.text) {
                None => {
                    return Ok(LlmOutcome {
                        text: Ok(cleaned),
                        seed,
                        attempts: attempt + 1,
                    })
                }
                Some(why) => reason = why,
            }
        }
        Ok(LlmOutcome {
            text: Err(format!("{} attempts; last: {reason}", self.attempts.max(1))),
            seed: first_seed + self.attempts.max(1) as u64 - 1,
            attempts: self.attempts.max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MockScorer;

    const ENDING: &str = "Rick is happy now and lives in Boston.";

    #[test]
    fn the_papers_prompt_is_rendered_with_the_tasks_nouns() {
        let prompt = render_prompt(
            DhpTask::Summarization,
            LlmEdit::FictionalEntities,
            Degree::Minor,
            "A {text} summary.",
        );
        assert!(prompt.starts_with("You will be given one summary written for an article."));
        assert!(prompt.contains("Adjustment: Please substitute only one critical named entity"));
        assert!(prompt.ends_with("Summary:\n\nA {text} summary.\n\nRevised Summary:"));
        let story = render_prompt(
            DhpTask::StoryCompletion,
            LlmEdit::Grammar,
            Degree::None,
            ENDING,
        );
        assert!(story.contains("exactly one grammatical error"));
        assert!(story.contains("Ending:\n\nRick"));
    }

    #[test]
    fn cleaning_drops_preambles_quotes_and_extra_paragraphs() {
        assert_eq!(
            clean("Revised Ending:\n\"Rick is happy now in Zorbia.\"", ENDING),
            "Rick is happy now in Zorbia."
        );
        assert_eq!(
            clean(
                "Here is the revised ending: \nRick is sad.\n\nI changed the mood.",
                ENDING
            ),
            "Rick is sad."
        );
        assert_eq!(
            clean("Revised Summary: The cat sat.", ENDING),
            "The cat sat."
        );
    }

    #[test]
    fn rejections_name_the_problem() {
        let fne = LlmEdit::FictionalEntities;
        assert_eq!(rejection(fne, " ", ENDING).unwrap(), "empty generation");
        assert!(
            rejection(fne, "Rick is happy now and  lives in Boston.", ENDING)
                .unwrap()
                .contains("equals the original")
        );
        assert!(rejection(fne, "Rick.", ENDING)
            .unwrap()
            .contains("not an edit"));
        let padded = format!("{ENDING} {}", "and then more words ".repeat(5));
        assert!(rejection(fne, &padded, ENDING)
            .unwrap()
            .contains("too long"));
        assert!(rejection(fne, "Rick is happy now and lives in Zorbia.", ENDING).is_none());
        assert!(rejection(LlmEdit::Rewrite, "Rick is happy now in Boston.", ENDING).is_some());
        assert!(rejection(
            fne,
            "Please make sure you read and understand these instructions carefully.",
            ENDING
        )
        .unwrap()
        .contains("repeats the instructions"));
        assert!(rejection(
            fne,
            "The person was a boy from a town far away in Ohio.",
            ENDING
        )
        .unwrap()
        .contains("not an edit"));
        assert_eq!(clean("1. Rick is sad now.", ENDING), "Rick is sad now.");
    }

    #[test]
    fn retries_with_the_next_seed_then_records_failure_and_caches() {
        let item = DhpItem {
            id: "s1".into(),
            context: String::new(),
            text: ENDING.into(),
            wrong: None,
        };
        let cache = ResultCache::in_memory().unwrap();
        // first answer unusable (unchanged), second usable
        let mut answers = vec![
            ENDING.to_string(),
            "Rick is happy now and lives in Zorbia.".into(),
        ]
        .into_iter();
        let mut mock =
            MockScorer::new().with_generation(move |_| Ok(answers.next().unwrap_or_default()));
        let calls = mock.calls();
        let mut editor = LlmEditor {
            scorer: &mut mock,
            cache: Some(&cache),
            seed: 5,
            attempts: 3,
            temperature: 0.7,
            top_p: 0.9,
        };
        let outcome = editor
            .edit(
                DhpTask::StoryCompletion,
                LlmEdit::FictionalEntities,
                Degree::None,
                &item,
            )
            .unwrap();
        assert_eq!(
            outcome.text.as_deref(),
            Ok("Rick is happy now and lives in Zorbia.")
        );
        assert_eq!(outcome.attempts, 2);
        assert_eq!(calls.generations(), 2);
        // a rerun reads both generations from the cache
        let again = editor
            .edit(
                DhpTask::StoryCompletion,
                LlmEdit::FictionalEntities,
                Degree::None,
                &item,
            )
            .unwrap();
        assert_eq!(again, outcome);
        assert_eq!(calls.generations(), 2);
        // a model that only ever returns nothing: failed after 3 attempts
        let mut empty = MockScorer::new().with_generation(|_| Ok(String::new()));
        let mut editor = LlmEditor {
            scorer: &mut empty,
            cache: None,
            seed: 5,
            attempts: 3,
            temperature: 0.7,
            top_p: 0.9,
        };
        let outcome = editor
            .edit(
                DhpTask::StoryCompletion,
                LlmEdit::Grammar,
                Degree::None,
                &item,
            )
            .unwrap();
        assert_eq!(outcome.attempts, 3);
        assert_eq!(
            outcome.text.unwrap_err(),
            "3 attempts; last: empty generation"
        );
    }
}
