//! What `compare` prints for people: a ranked table per context (rank, candidate, score,
//! the start of the text), the positional-bias figures, the judge diagnostics (warnings
//! with their remedies), and where the full results went; and `score`'s ranked tables
//! in the same columns.
//!
//! This is the first output a newcomer sees (the README's first command), so it explains
//! itself; machine-readable results go to files or standard output as JSONL.

use std::fmt::Write as _;

use crate::data::Context;
use crate::judge::pairwise::CompareResult;
use crate::judge::ScoreRun;
use crate::rank::{ranks_from_scores, Rate};

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
    if let Some(fit) = &result.prior {
        let _ = writeln!(
            text,
            "absolute scores as experts: one slope for all {} context(s), fitted {} logits per \
             standard deviation (standard error {}) from {} compared pair(s) whose absolute \
             scores differ{}",
            fit.contexts,
            fixed(fit.fitted, 3),
            fixed(fit.standard_error, 3),
            fit.pairs,
            if fit.held {
                "; negative without support, held at 0 (see the diagnostics)"
            } else if fit.fitted < 0.0 {
                "; negative: the absolute scores order the candidates against the comparisons"
            } else {
                ""
            }
        );
    }
    text.push_str(&result.diagnostics.text());
    text
}

/// `score`'s ranked table per context, best first (rank, score, candidate, the start of
/// its text), as `compare` prints its own: the same columns, ranks from the scores.
pub fn format_score_tables(run: &ScoreRun, contexts: &[Context]) -> String {
    let mut text = String::new();
    let mut start = 0;
    while start < run.candidates.len() {
        let context_id = &run.candidates[start].context_id;
        let end = run.candidates[start..]
            .iter()
            .position(|c| &c.context_id != context_id)
            .map_or(run.candidates.len(), |k| start + k);
        let here = &run.candidates[start..end];
        let scores: Vec<f64> = here.iter().map(|c| c.score).collect();
        let ranks = ranks_from_scores(&scores);
        let source = contexts.iter().find(|c| &c.id == context_id);
        let text_of = |id: &str| {
            source
                .and_then(|c| c.candidates.iter().find(|k| k.id == id))
                .map(|k| first_line(&k.text, TEXT_WIDTH))
                .unwrap_or_default()
        };
        let id_width = here
            .iter()
            .map(|c| c.candidate_id.chars().count())
            .max()
            .unwrap_or(0)
            .max("candidate".len());
        let _ = writeln!(text, "context {context_id}:");
        let _ = writeln!(
            text,
            "  {:>5}  {:>8}  {:<id_width$}  text",
            "rank", "score", "candidate"
        );
        let mut order: Vec<usize> = (0..here.len()).collect();
        order.sort_by(|&a, &b| ranks[a].total_cmp(&ranks[b]).then(a.cmp(&b)));
        for k in order {
            let id = &here[k].candidate_id;
            let _ = writeln!(
                text,
                "  {:>5}  {:>8}  {:<id_width$}  {}",
                ranks[k],
                fixed(here[k].score, 4),
                id,
                text_of(id)
            );
        }
        start = end;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_tables_rank_each_context_best_first() {
        use crate::data::Candidate;
        use crate::judge::scoring::ScoredCandidate;
        let scored = |context: &str, id: &str, score: f64| ScoredCandidate {
            context_id: context.into(),
            candidate_id: id.into(),
            system_id: None,
            score,
            distribution: None,
            feedback: None,
            format: None,
            reasoning: None,
            reasoning_cut: false,
            human: Default::default(),
        };
        let run = ScoreRun {
            candidates: vec![
                scored("d1", "a", 2.5),
                scored("d1", "bb", 4.0),
                scored("d2", "c", 1.0),
            ],
            method: crate::judge::ResolvedMethod::Gptscore {
                task: crate::judge::Task::Summary,
                attribute: crate::judge::Attribute::named("coherence").unwrap(),
            },
            computed: 0,
            cached: 0,
            diagnostics: Default::default(),
        };
        let candidate = |id: &str, text: &str| Candidate {
            id: id.into(),
            text: text.into(),
            reference: None,
            scores: Default::default(),
            system_id: None,
            metadata: Default::default(),
            source: None,
        };
        let contexts = vec![Context {
            id: "d1".into(),
            text: String::new(),
            candidates: vec![candidate("a", "First text."), candidate("bb", "Second.")],
        }];
        let table = format_score_tables(&run, &contexts);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "context d1:");
        assert_eq!(lines[1], "   rank     score  candidate  text");
        assert_eq!(lines[2], "      1    4.0000  bb         Second.");
        assert_eq!(lines[3], "      2    2.5000  a          First text.");
        assert_eq!(lines[4], "context d2:");
        assert_eq!(lines[6], "      1    1.0000  c          ");
    }

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
