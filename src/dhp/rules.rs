//! Rule-based perturbations: random character deletions, random typos, deletions of
//! contiguous words, sentence reordering. Each takes its own random generator, seeded per
//! (run seed, item, perturbation) by [`item_rng`], so that a result does not depend on
//! which other items or perturbations were made, or in what order: reruns and resumed
//! runs give the same texts. Inapplicable input (an empty text, a one-sentence text to
//! reorder, fewer characters or words than asked for) is an error the caller records.

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::seq::{index, SliceRandom};
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use super::typo;

/// The generator of one item's perturbation.
pub fn item_rng(seed: u64, item: &str, perturbation: &str) -> StdRng {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    for part in [item, perturbation] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(&digest);
    StdRng::from_seed(bytes)
}

fn non_empty(text: &str) -> Result<()> {
    if text.trim().is_empty() {
        bail!("empty text");
    }
    Ok(())
}

/// Delete `k` alphanumeric characters chosen at random.
pub fn delete_chars(text: &str, k: usize, rng: &mut StdRng) -> Result<String> {
    non_empty(text)?;
    let chars: Vec<char> = text.chars().collect();
    let candidates: Vec<usize> = (0..chars.len())
        .filter(|&i| chars[i].is_alphanumeric())
        .collect();
    if candidates.len() < k {
        bail!(
            "the text has {} alphanumeric characters, fewer than the {k} to delete",
            candidates.len()
        );
    }
    let mut chosen: Vec<usize> = index::sample(rng, candidates.len(), k)
        .into_iter()
        .map(|i| candidates[i])
        .collect();
    chosen.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut next = chosen.iter().peekable();
    for (i, c) in chars.into_iter().enumerate() {
        if next.peek() == Some(&&i) {
            next.next();
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Add `k` random typos.
pub fn add_typos(text: &str, k: usize, rng: &mut StdRng) -> Result<String> {
    Ok(typo::add_typos(text, k, rng)?.0)
}

/// Byte spans of the whitespace-separated words of `text`.
pub fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

/// Delete `k` contiguous words starting at a random word (the text keeps at least one).
pub fn delete_words(text: &str, k: usize, rng: &mut StdRng) -> Result<String> {
    non_empty(text)?;
    let spans = word_spans(text);
    if spans.len() <= k {
        bail!(
            "the text has {} words; deleting {k} contiguous words needs more",
            spans.len()
        );
    }
    let first = rng.gen_range(0..=spans.len() - k);
    let last = first + k - 1;
    // Remove the words and the whitespace after them (before them at the end).
    let (cut_start, cut_end) = if last + 1 < spans.len() {
        (spans[first].0, spans[last + 1].0)
    } else {
        (spans[first - 1].1, spans[last].1)
    };
    Ok(format!("{}{}", &text[..cut_start], &text[cut_end..]))
}

/// Abbreviations whose period does not end a sentence.
const ABBREVIATIONS: [&str; 14] = [
    "mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "prof.", "vs.", "no.", "u.s.", "u.k.",
    "e.g.", "i.e.",
];

/// Split `text` into sentences: a sentence ends at `.`, `!` or `?` (with closing quotes
/// or brackets after it) followed by whitespace and an upper-case letter, a digit or an
/// opening quote, unless the word is a common abbreviation. Sentences are trimmed.
pub fn split_sentences(text: &str) -> Vec<String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut sentences = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        if matches!(c, '.' | '!' | '?') {
            let mut end = i + 1;
            while end < chars.len()
                && matches!(chars[end].1, '"' | '\'' | ')' | ']' | '.' | '!' | '?')
            {
                end += 1;
            }
            let mut next = end;
            while next < chars.len() && chars[next].1.is_whitespace() {
                next += 1;
            }
            let boundary = next > end
                && next < chars.len()
                && (chars[next].1.is_uppercase()
                    || chars[next].1.is_ascii_digit()
                    || matches!(chars[next].1, '"' | '\'' | '('));
            let word_start = text[..chars[i].0]
                .rfind(char::is_whitespace)
                .map_or(0, |p| p + 1);
            let word = text[word_start..chars[i].0 + 1].to_lowercase();
            if boundary && !ABBREVIATIONS.contains(&word.as_str()) {
                let end_byte = chars.get(end).map_or(text.len(), |x| x.0);
                let sentence = text[start..end_byte].trim();
                if !sentence.is_empty() {
                    sentences.push(sentence.to_string());
                }
                start = chars[next].0;
                i = next;
                continue;
            }
        }
        i += 1;
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        sentences.push(rest.to_string());
    }
    sentences
}

/// Reorder sentences: `k` of them (`None`: all) change places so that each of them
/// moves; the text is rejoined with single spaces. Returns the text and the number of
/// sentences that moved.
pub fn reorder_sentences(
    text: &str,
    k: Option<usize>,
    rng: &mut StdRng,
) -> Result<(String, usize)> {
    non_empty(text)?;
    let sentences = split_sentences(text);
    let n = sentences.len();
    if n < 2 {
        bail!("the text has {n} sentence; reordering needs at least 2");
    }
    let k = k.unwrap_or(n);
    if k < 2 || k > n {
        bail!("cannot move {k} of {n} sentences");
    }
    let chosen: Vec<usize> = {
        let mut c = index::sample(rng, n, k).into_vec();
        c.sort_unstable();
        c
    };
    // A random derangement of the chosen positions (each one moves).
    let mut target = chosen.clone();
    loop {
        target.shuffle(rng);
        if target.iter().zip(&chosen).all(|(a, b)| a != b) {
            break;
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    for (from, to) in chosen.iter().zip(&target) {
        order[*to] = *from;
    }
    let moved = order
        .iter()
        .enumerate()
        .filter(|(i, &from)| sentences[*i] != sentences[from])
        .count();
    if moved == 0 {
        bail!("the sentences chosen to move are identical");
    }
    let text = order
        .iter()
        .map(|&i| sentences[i].as_str())
        .collect::<Vec<_>>()
        .join(" ");
    Ok((text, moved))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "Andros Townsend an 83rd minute sub in Tottenham 's draw with Burnley . \
He was unable to find a winner as the game ended without a goal . \
Townsend had clashed with Paul Merson last week over England call-up . \
Mr. Merson said sorry on Monday!";

    #[test]
    fn char_deletion_removes_exactly_k_alphanumerics() {
        let original_alnum = SUMMARY.chars().filter(|c| c.is_alphanumeric()).count();
        for k in [1, 10, 50] {
            let out = delete_chars(SUMMARY, k, &mut item_rng(1, "a", "c")).unwrap();
            assert_eq!(out.chars().count(), SUMMARY.chars().count() - k);
            assert_eq!(
                out.chars().filter(|c| c.is_alphanumeric()).count(),
                original_alnum - k
            );
            // the rest is untouched: same punctuation and spacing, in order
            let strip = |s: &str| {
                s.chars()
                    .filter(|c| !c.is_alphanumeric())
                    .collect::<String>()
            };
            assert_eq!(strip(&out), strip(SUMMARY));
        }
        let error = delete_chars("ab c", 5, &mut item_rng(1, "a", "c")).unwrap_err();
        assert!(error.to_string().contains("3 alphanumeric characters"));
        assert!(delete_chars("", 1, &mut item_rng(1, "a", "c")).is_err());
    }

    #[test]
    fn seeds_make_results_reproducible_and_item_specific() {
        let a = delete_chars(
            SUMMARY,
            10,
            &mut item_rng(42, "doc1", "char-deletion-minor"),
        )
        .unwrap();
        let b = delete_chars(
            SUMMARY,
            10,
            &mut item_rng(42, "doc1", "char-deletion-minor"),
        )
        .unwrap();
        let c = delete_chars(
            SUMMARY,
            10,
            &mut item_rng(42, "doc2", "char-deletion-minor"),
        )
        .unwrap();
        let d = delete_chars(
            SUMMARY,
            10,
            &mut item_rng(43, "doc1", "char-deletion-minor"),
        )
        .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn word_deletion_removes_k_contiguous_words() {
        let words: Vec<&str> = SUMMARY.split_whitespace().collect();
        for seed in 0..30 {
            for k in [1, 5, 25] {
                let out = delete_words(SUMMARY, k, &mut item_rng(seed, "x", "w")).unwrap();
                let left: Vec<&str> = out.split_whitespace().collect();
                assert_eq!(left.len(), words.len() - k);
                // the remaining words are a prefix and a suffix of the original
                let first = (0..left.len())
                    .find(|&i| left[i] != words[i])
                    .unwrap_or(left.len());
                assert_eq!(&left[first..], &words[first + k..], "seed {seed} k {k}");
            }
        }
        assert!(delete_words("two words", 2, &mut item_rng(1, "x", "w")).is_err());
    }

    #[test]
    fn sentences_split_on_terminal_punctuation_not_abbreviations() {
        let sentences = split_sentences(SUMMARY);
        assert_eq!(sentences.len(), 4, "{sentences:?}");
        assert_eq!(sentences[3], "Mr. Merson said sorry on Monday!");
        assert_eq!(
            split_sentences("He said \"Go.\" Then he left. 3 days later, rain."),
            vec!["He said \"Go.\"", "Then he left.", "3 days later, rain."]
        );
    }

    #[test]
    fn reordering_moves_exactly_k_sentences() {
        let original = split_sentences(SUMMARY);
        for seed in 0..30 {
            let (out, moved) =
                reorder_sentences(SUMMARY, Some(2), &mut item_rng(seed, "x", "r")).unwrap();
            let now = split_sentences(&out);
            let differing = now.iter().zip(&original).filter(|(a, b)| a != b).count();
            assert_eq!((moved, differing), (2, 2));
            let mut a = now.clone();
            let mut b = original.clone();
            a.sort();
            b.sort();
            assert_eq!(a, b);
            let (out, moved) =
                reorder_sentences(SUMMARY, None, &mut item_rng(seed, "x", "r")).unwrap();
            let now = split_sentences(&out);
            assert_eq!(moved, 4);
            assert!(now.iter().zip(&original).all(|(a, b)| a != b));
        }
        let error = reorder_sentences(
            "Only one sentence here.",
            Some(2),
            &mut item_rng(1, "x", "r"),
        )
        .unwrap_err();
        assert!(error.to_string().contains("1 sentence"), "{error}");
    }
}
