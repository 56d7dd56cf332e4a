//! Python's notion of whitespace, which the reference tools (sacrebleu, rouge-score) rely
//! on through `str.split()` and `str.rstrip()`: reproducing their numbers exactly needs the
//! same splitting, which differs from Rust's `char::is_whitespace` on four control
//! characters (U+001C..U+001F are whitespace to Python, not to Unicode's White_Space).

/// Whether Python's `str.isspace()` holds for `c`.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `s.split()`: runs of whitespace separate words, no empty words.
pub fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_py_space).filter(|w| !w.is_empty())
}

/// Python's `s.rstrip()`.
pub fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(is_py_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_separators_split_words_as_in_python() {
        let words: Vec<&str> = py_split(" a\u{1f}b\u{a0}c\u{3000}d ").collect();
        assert_eq!(words, ["a", "b", "c", "d"]);
        assert_eq!(py_rstrip("x \u{1c}\n"), "x");
    }
}
