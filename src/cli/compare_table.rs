//! What `compare` prints for people: a ranked table per context (rank, candidate, score,
//! the start of the text), the positional-bias figures, the judge diagnostics (warnings
//! with their remedies), and where the full results went.
//!
//! This is the first output a newcomer sees (the README's first command), so it explains
//! itself; machine-readable results go to files or standard output as JSONL.

use std::fmt::Write as _;

use crate::data::Context;
use crate::judge::pairwise::CompareResult;
use crate::rank::Rate;

/// Characters of a candidate's first line shown in the table.
const TEXT_WIDTH: usize = 60;

fn rate_text(rate: Option<Rate>) -> String {
    match rate.and_then(|r| r.value()) {
        Some(value) => format!("{value:.3}"),
        None => "-".to_string(),
    }
}

/// `x` with `decimals` decimals, never `-0.000...`.
fn fixed(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// The first line of `text`, cut to `width` characters with an ellipsis.
pub fn first_line(text: &str, width: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A ranked table per context, best first, and a summary of the run. `contexts` supplies
/// the candidates' texts (candidates missing from it print without text).
pub fn format_tables(result: &CompareResult, contexts: &[Context]) -> String {
    let mut text = String::new();
    for context in &result.contexts {
        let _ = writeln!(
            text,
            "context {}: P(A) {}, consistency {}, accuracy {}",
            context.context_id,
            rate_text(Some(context.first_position)),
            rate_text(Some(context.consistency)),
            rate_text(context.accuracy)
        );
        if let Some(run) = &context.adaptive {
            let why = run.ending.describe();
            let _ = writeln!(
                text,
                "  adaptive: {} comparisons in {} rounds; stopped: {why}",
                context.comparisons.len(),
                run.rounds
            );
        }
        let source = contexts.iter().find(|c| c.id == context.context_id);
        let text_of = |id: &str| {
            source
                .and_then(|c| c.candidates.iter().find(|k| k.id == id))
                .map(|k| first_line(&k.text, TEXT_WIDTH))
                .unwrap_or_default()
        };
        let id_width = context
            .candidate_ids
            .iter()
            .map(|id| id.chars().count())
            .max()
            .unwrap_or(0)
            .max("candidate".len());
        let mut order: Vec<usize> = (0..context.candidate_ids.len()).collect();
        order.sort_by(|&a, &b| {
            context.ranks[a]
                .total_cmp(&context.ranks[b])
                .then(a.cmp(&b))
        });
        let _ = writeln!(
            text,
            "  {:>5}  {:>8}  {:<id_width$}  text",
            "rank", "score", "candidate"
        );
        for k in order {
            let id = &context.candidate_ids[k];
            let _ = writeln!(
                text,
                "  {:>5}  {:>8}  {:<id_width$}  {}",
                context.ranks[k],
                fixed(context.scores[k], 4),
                id,
                text_of(id)
            );
        }
    }
    let _ = writeln!(
        text,
        "{} context{}, {} comparisons ({} computed, {} from the cache)",
        result.contexts.len(),
        if result.contexts.len() == 1 { "" } else { "s" },
        result.first_position.total,
        result.computed,
        result.cached,
    );
    let _ = writeln!(
        text,
        "positional bias: the first candidate of a pair won {} of the comparisons at p > 0.5 \
         (0.5 is unbiased); at the run's threshold {}: {}",
        rate_text(Some(result.first_position_raw)),
        fixed(result.tau, 3),
        rate_text(Some(result.first_position)),
    );
    let _ = writeln!(
        text,
        "consistency (both orders of a pair agree) {}; pairwise accuracy{} {}",
        rate_text(Some(result.consistency)),
        result
            .score_field
            .as_ref()
            .map(|f| format!(" vs human `{f}`"))
            .unwrap_or_default(),
        rate_text(result.accuracy)
    );
    text.push_str(&result.diagnostics.text());
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_lines_are_cut_with_an_ellipsis() {
        assert_eq!(first_line("  short\nsecond line", 10), "short");
        assert_eq!(first_line("abcdefghijkl", 5), "abcd…");
        assert_eq!(first_line("", 5), "");
        assert_eq!(first_line("ééééé", 5), "ééééé");
    }

    #[test]
    fn fixed_formatting_has_no_negative_zero() {
        assert_eq!(fixed(-1e-9, 4), "0.0000");
        assert_eq!(fixed(-0.25, 2), "-0.25");
    }
}
