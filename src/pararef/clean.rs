//! From a chat model's answer to a bare paraphrase: chat preambles ("Sure! Here is the
//! paraphrased text:"), labels ("Paraphrase:"), markdown emphasis, surrounding quotes and
//! trailing commentary ("Note: ...", "This version ...") are removed and whitespace is
//! collapsed. An answer with nothing left is no paraphrase (`None`).

/// Words that open a preamble line ("Here is ...:", "Sure, ...").
const PREAMBLE_OPENERS: &[&str] = &[
    "here is",
    "here's",
    "here are",
    "sure",
    "certainly",
    "of course",
    "okay",
    "ok,",
    "absolutely",
    "paraphrase",
    "paraphrased",
    "rephrased",
    "revised",
    "rewritten",
    "new version",
    "original",
];

/// Openers of commentary after the paraphrase.
const COMMENTARY_OPENERS: &[&str] = &[
    "note:",
    "note that",
    "explanation",
    "this version",
    "this paraphrase",
    "this rephrased",
    "this revised",
    "in this version",
    "in this paraphrase",
    "i changed",
    "i have changed",
    "i've changed",
    "i made",
    "i hope",
    "changes made",
    "let me know",
    "the changes",
];

fn starts_with_any(text: &str, openers: &[&str]) -> bool {
    let lower = text
        .trim_start_matches(['*', '#', ' ', '"', '\''])
        .to_lowercase();
    openers.iter().any(|o| lower.starts_with(o))
}

/// A line that only introduces what follows.
fn is_preamble_line(line: &str) -> bool {
    let trimmed = line.trim().trim_matches('*').trim();
    trimmed.ends_with(':') && (starts_with_any(trimmed, PREAMBLE_OPENERS) || trimmed.len() < 40)
        || matches!(
            trimmed.to_lowercase().trim_end_matches(['!', '.', ',']),
            "sure" | "certainly" | "of course" | "okay" | "absolutely"
        )
}

/// Strip one layer of matching quotes around `text`.
fn strip_quotes(text: &str) -> &str {
    let pairs = [('"', '"'), ('\'', '\''), ('“', '”'), ('«', '»'), ('‘', '’')];
    for (open, close) in pairs {
        if let Some(inner) = text.strip_prefix(open).and_then(|t| t.strip_suffix(close)) {
            if !inner.contains(open) || open == close && !inner.contains(close) {
                return inner.trim();
            }
        }
    }
    text
}

/// The paraphrase in a model's answer, or `None` when nothing but preamble is left.
pub fn clean_paraphrase(answer: &str) -> Option<String> {
    let text = answer.replace("**", "").replace("\r\n", "\n");
    let mut lines: Vec<&str> = text.lines().collect();
    // Preamble lines (and blank lines) before the paraphrase.
    while let Some(first) = lines.first() {
        if first.trim().is_empty() || is_preamble_line(first) {
            lines.remove(0);
        } else {
            break;
        }
    }
    // A preamble on the paraphrase's own line: "Here is the paraphrase: X".
    let mut first_line = lines.first().map(|l| l.to_string()).unwrap_or_default();
    if starts_with_any(&first_line, PREAMBLE_OPENERS) {
        if let Some(colon) = first_line.find(':') {
            first_line = first_line[colon + 1..].trim().to_string();
        }
    }
    if !lines.is_empty() {
        lines[0] = &first_line;
    }
    // Keep the first paragraph; drop commentary lines that follow it.
    let mut kept: Vec<&str> = Vec::new();
    for line in &lines {
        let line = line.trim();
        if line.is_empty() {
            if kept.is_empty() {
                continue;
            }
            break;
        }
        if !kept.is_empty() && starts_with_any(line, COMMENTARY_OPENERS) {
            break;
        }
        kept.push(line);
    }
    let joined = kept.join(" ");
    let mut sentence = joined.split_whitespace().collect::<Vec<_>>().join(" ");
    // Commentary in parentheses or after "Note:" on the same line.
    for marker in [" (Note:", " Note:", " (This ", " (I "] {
        if let Some(cut) = sentence.find(marker) {
            sentence.truncate(cut);
        }
    }
    let sentence = strip_quotes(sentence.trim()).trim().to_string();
    if sentence.is_empty() || is_preamble_line(&sentence) {
        None
    } else {
        Some(sentence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preambles_quotes_and_commentary_are_removed() {
        let cases = [
            (
                "Here is the paraphrased text:\n\n\"The mat was sat on by the cat.\"",
                "The mat was sat on by the cat.",
            ),
            (
                "Sure! Here's a more formal version: The feline rested upon the mat.",
                "The feline rested upon the mat.",
            ),
            (
                "**Paraphrased:**\nA cat sat on a mat.\n\nNote: I changed the articles.",
                "A cat sat on a mat.",
            ),
            (
                "The cat was sitting on the mat.\nThis version uses the past continuous.",
                "The cat was sitting on the mat.",
            ),
            ("  The cat   sat\non the mat.  ", "The cat sat on the mat."),
            ("“Quoted answer.”", "Quoted answer."),
        ];
        for (answer, expected) in cases {
            assert_eq!(
                clean_paraphrase(answer).as_deref(),
                Some(expected),
                "{answer:?}"
            );
        }
    }

    #[test]
    fn empty_or_preamble_only_answers_are_no_paraphrase() {
        for answer in [
            "",
            "   \n",
            "Here is the paraphrased text:",
            "Sure!",
            "\"\"",
        ] {
            assert_eq!(clean_paraphrase(answer), None, "{answer:?}");
        }
    }
}
