//! The Porter stemmer as NLTK's `PorterStemmer()` applies it by default (mode
//! `NLTK_EXTENSIONS`), which Google's rouge-score uses for `use_stemmer=True`: Porter's
//! five steps plus NLTK's departures (a pool of irregular forms, "ies"/"ied" on four-letter
//! words, "y" -> "i" only after a consonant, "alli", "fulli" and "logi" in step 2, two-letter
//! words ending consonant-after-vowel count as cvc). Input is lower-case ASCII here (the
//! ROUGE tokeniser keeps only [a-z0-9]); other characters are treated as consonants.

const IRREGULAR: &[(&str, &str)] = &[
    ("sky", "sky"),
    ("skies", "sky"),
    ("dying", "die"),
    ("lying", "lie"),
    ("tying", "tie"),
    ("news", "news"),
    ("innings", "inning"),
    ("inning", "inning"),
    ("outings", "outing"),
    ("outing", "outing"),
    ("cannings", "canning"),
    ("canning", "canning"),
    ("howe", "howe"),
    ("proceed", "proceed"),
    ("exceed", "exceed"),
    ("succeed", "succeed"),
];

fn is_vowel(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u')
}

/// Per letter, whether it is a consonant ("y" is one after a vowel or at the start).
fn consonant_flags(word: &[u8]) -> Vec<bool> {
    let mut flags: Vec<bool> = Vec::with_capacity(word.len());
    for (i, &c) in word.iter().enumerate() {
        let flag = if is_vowel(c) {
            false
        } else if c == b'y' {
            i == 0 || !flags[i - 1]
        } else {
            true
        };
        flags.push(flag);
    }
    flags
}

fn is_consonant(word: &[u8], i: usize) -> bool {
    consonant_flags(&word[..=i])[i]
}

/// Porter's m: the number of vowel-consonant transitions.
fn measure(stem: &[u8]) -> usize {
    let flags = consonant_flags(stem);
    flags.windows(2).filter(|w| !w[0] && w[1]).count()
}

fn contains_vowel(stem: &[u8]) -> bool {
    consonant_flags(stem).iter().any(|&c| !c)
}

fn ends_double_consonant(word: &[u8]) -> bool {
    let n = word.len();
    n >= 2 && word[n - 1] == word[n - 2] && is_consonant(word, n - 1)
}

fn ends_cvc(word: &[u8]) -> bool {
    let n = word.len();
    (n >= 3
        && is_consonant(word, n - 3)
        && !is_consonant(word, n - 2)
        && is_consonant(word, n - 1)
        && !matches!(word[n - 1], b'w' | b'x' | b'y'))
        || (n == 2 && !is_consonant(word, 0) && is_consonant(word, 1))
}

/// A rule's condition on the stem left after removing the suffix.
type Condition<'a> = Option<&'a dyn Fn(&[u8]) -> bool>;

/// The first rule whose suffix ends `word` decides: its condition holds on the stem
/// (replacement applied) or not (word unchanged). The suffix `*d` means "ends with a double
/// consonant" and removes both letters.
fn apply_rules(word: &[u8], rules: &[(&str, &str, Condition)]) -> Vec<u8> {
    for (suffix, replacement, condition) in rules {
        if *suffix == "*d" && ends_double_consonant(word) {
            let stem = &word[..word.len() - 2];
            return if condition.is_none_or(|c| c(stem)) {
                [stem, replacement.as_bytes()].concat()
            } else {
                word.to_vec()
            };
        }
        if word.ends_with(suffix.as_bytes()) {
            let stem = &word[..word.len() - suffix.len()];
            return if condition.is_none_or(|c| c(stem)) {
                [stem, replacement.as_bytes()].concat()
            } else {
                word.to_vec()
            };
        }
    }
    word.to_vec()
}

fn replace_suffix(word: &[u8], suffix: &str, replacement: &str) -> Vec<u8> {
    [&word[..word.len() - suffix.len()], replacement.as_bytes()].concat()
}

fn step1a(word: &[u8]) -> Vec<u8> {
    if word.ends_with(b"ies") && word.len() == 4 {
        return replace_suffix(word, "ies", "ie");
    }
    apply_rules(
        word,
        &[
            ("sses", "ss", None),
            ("ies", "i", None),
            ("ss", "ss", None),
            ("s", "", None),
        ],
    )
}

fn step1b(word: &[u8]) -> Vec<u8> {
    if word.ends_with(b"ied") {
        return if word.len() == 4 {
            replace_suffix(word, "ied", "ie")
        } else {
            replace_suffix(word, "ied", "i")
        };
    }
    if word.ends_with(b"eed") {
        let stem = &word[..word.len() - 3];
        return if measure(stem) > 0 {
            [stem, b"ee"].concat()
        } else {
            word.to_vec()
        };
    }
    let mut intermediate: Option<&[u8]> = None;
    for suffix in ["ed", "ing"] {
        if word.ends_with(suffix.as_bytes()) {
            let stem = &word[..word.len() - suffix.len()];
            if contains_vowel(stem) {
                intermediate = Some(stem);
                break;
            }
        }
    }
    let Some(stem) = intermediate else {
        return word.to_vec();
    };
    let last = stem.last().copied();
    let last_text = last.map(|c| (c as char).to_string()).unwrap_or_default();
    let not_lsz = |_: &[u8]| !matches!(last, Some(b'l' | b's' | b'z'));
    let cvc_one = |s: &[u8]| measure(s) == 1 && ends_cvc(s);
    apply_rules(
        stem,
        &[
            ("at", "ate", None),
            ("bl", "ble", None),
            ("iz", "ize", None),
            ("*d", &last_text, Some(&not_lsz)),
            ("", "e", Some(&cvc_one)),
        ],
    )
}

fn step1c(word: &[u8]) -> Vec<u8> {
    let after_consonant = |s: &[u8]| s.len() > 1 && is_consonant(s, s.len() - 1);
    apply_rules(word, &[("y", "i", Some(&after_consonant))])
}

fn positive_measure(stem: &[u8]) -> bool {
    measure(stem) > 0
}

fn step2(word: &[u8]) -> Vec<u8> {
    if word.ends_with(b"alli") && positive_measure(&word[..word.len() - 4]) {
        return step2(&replace_suffix(word, "alli", "al"));
    }
    let m: Condition = Some(&positive_measure);
    let logi = |_: &[u8]| word.len() >= 3 && positive_measure(&word[..word.len() - 3]);
    apply_rules(
        word,
        &[
            ("ational", "ate", m),
            ("tional", "tion", m),
            ("enci", "ence", m),
            ("anci", "ance", m),
            ("izer", "ize", m),
            ("bli", "ble", m),
            ("alli", "al", m),
            ("entli", "ent", m),
            ("eli", "e", m),
            ("ousli", "ous", m),
            ("ization", "ize", m),
            ("ation", "ate", m),
            ("ator", "ate", m),
            ("alism", "al", m),
            ("iveness", "ive", m),
            ("fulness", "ful", m),
            ("ousness", "ous", m),
            ("aliti", "al", m),
            ("iviti", "ive", m),
            ("biliti", "ble", m),
            ("fulli", "ful", m),
            ("logi", "log", Some(&logi)),
        ],
    )
}

fn step3(word: &[u8]) -> Vec<u8> {
    let m: Condition = Some(&positive_measure);
    apply_rules(
        word,
        &[
            ("icate", "ic", m),
            ("ative", "", m),
            ("alize", "al", m),
            ("iciti", "ic", m),
            ("ical", "ic", m),
            ("ful", "", m),
            ("ness", "", m),
        ],
    )
}

fn step4(word: &[u8]) -> Vec<u8> {
    let gt1 = |s: &[u8]| measure(s) > 1;
    let m: Condition = Some(&gt1);
    let ion = |s: &[u8]| measure(s) > 1 && matches!(s.last(), Some(b's' | b't'));
    apply_rules(
        word,
        &[
            ("al", "", m),
            ("ance", "", m),
            ("ence", "", m),
            ("er", "", m),
            ("ic", "", m),
            ("able", "", m),
            ("ible", "", m),
            ("ant", "", m),
            ("ement", "", m),
            ("ment", "", m),
            ("ent", "", m),
            ("ion", "", Some(&ion)),
            ("ou", "", m),
            ("ism", "", m),
            ("ate", "", m),
            ("iti", "", m),
            ("ous", "", m),
            ("ive", "", m),
            ("ize", "", m),
        ],
    )
}

fn step5a(word: &[u8]) -> Vec<u8> {
    if let Some(stem) = word.strip_suffix(b"e") {
        let m = measure(stem);
        if m > 1 || (m == 1 && !ends_cvc(stem)) {
            return stem.to_vec();
        }
    }
    word.to_vec()
}

fn step5b(word: &[u8]) -> Vec<u8> {
    let whole = |_: &[u8]| measure(&word[..word.len() - 1]) > 1;
    apply_rules(word, &[("ll", "l", Some(&whole))])
}

/// One step of the algorithm.
type Step = fn(&[u8]) -> Vec<u8>;

/// The stem of `word` (lower-cased first, as NLTK does).
pub fn stem(word: &str) -> String {
    let lower = word.to_lowercase();
    if let Some((_, stem)) = IRREGULAR.iter().find(|(form, _)| *form == lower) {
        return stem.to_string();
    }
    if word.chars().count() <= 2 {
        return lower;
    }
    let bytes = lower.as_bytes();
    let steps: [Step; 8] = [step1a, step1b, step1c, step2, step3, step4, step5a, step5b];
    let mut current = bytes.to_vec();
    for step in steps {
        current = step(&current);
    }
    String::from_utf8(current).unwrap_or(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_examples() {
        for (word, expected) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "tie"),
            ("agreed", "agre"),
            ("hopping", "hop"),
            ("filing", "file"),
            ("relational", "relat"),
            ("generalization", "gener"),
            ("dying", "die"),
            ("happy", "happi"),
        ] {
            assert_eq!(stem(word), expected, "{word}");
        }
    }
}
