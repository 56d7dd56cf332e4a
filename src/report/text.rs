//! The report as Markdown (`--report FILE.md`), for places that show text rather than a
//! page (a pull request, a wiki, a terminal): the run's facts and notes, a jury's
//! weights and agreement, and per run a ranking table per context, with each judge's
//! score for a jury and, for rubric grading, every feedback under its table (relative
//! grading's: one per comparison).
//!
//! Every text from the data (ids, feedback, names) is escaped: the punctuation of
//! Markdown's inline markup and tables gets a backslash (no text starts a line: lines
//! start with the report's own `- `, `> `, `| ` and headings), `<`, `>` and `&` become entities, line breaks a space, so no text
//! can end a table cell, open a link or become markup in a renderer that passes HTML.
//! Candidate texts are cut to a preview; the HTML page holds them whole.

use std::fmt::Write as _;

use super::{Report, RunKind, RunView};

/// Characters of a candidate's text shown in a ranking table.
const PREVIEW: usize = 80;

/// `text` as inline Markdown that shows as written: one line, punctuation escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.trim().chars() {
        if c.is_whitespace() {
            if !space {
                out.push(' ');
            }
            space = true;
            continue;
        }
        space = false;
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// The first `PREVIEW` characters of `text` on one line, escaped.
fn preview(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= PREVIEW {
        escape(&line)
    } else {
        let cut: String = line.chars().take(PREVIEW).collect();
        format!("{}…", escape(&cut))
    }
}

fn number(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "–".to_string(),
    }
}

fn rank(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// A matrix of the judges' agreement as a table.
fn matrix(out: &mut String, names: &[String], values: &[Vec<Option<f64>>]) {
    let header: Vec<String> = names.iter().map(|n| escape(n)).collect();
    let _ = writeln!(out, "| | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(names.len()));
    for (name, row) in names.iter().zip(values) {
        let cells: Vec<String> = row.iter().map(|v| number(*v, 3)).collect();
        let _ = writeln!(out, "| {} | {} |", escape(name), cells.join(" | "));
    }
    out.push('\n');
}

/// The whole report.
pub fn render(report: &Report) -> String {
    let mut out = format!("# {}\n\n", escape(&report.title));
    for (what, value) in &report.facts {
        let _ = writeln!(out, "- {}: {}", escape(what), escape(value));
    }
    if !report.facts.is_empty() {
        out.push('\n');
    }
    for note in &report.notes {
        let _ = writeln!(out, "> {}\n", escape(note));
    }
    if let Some(jury) = &report.jury {
        let names: Vec<String> = jury.judges.iter().map(|j| j.name.clone()).collect();
        out.push_str("## The jury\n\n| judge | weight |\n|---|---:|\n");
        for judge in &jury.judges {
            let _ = writeln!(out, "| {} | {:.3} |", escape(&judge.name), judge.weight);
        }
        out.push_str("\nAgreement between the judges (Spearman within contexts, mean):\n\n");
        matrix(&mut out, &names, &jury.agreement.spearman);
        if let Some(kappa) = &jury.agreement.kappa {
            out.push_str("Agreement of their decisions (Cohen's kappa):\n\n");
            matrix(&mut out, &names, kappa);
        }
    }
    for run in &report.runs {
        run_section(&mut out, report, run);
    }
    out
}

fn run_section(out: &mut String, report: &Report, run: &RunView) {
    let kind = match run.kind {
        RunKind::Pairwise => "pairwise comparison",
        RunKind::Absolute => "absolute scores",
        RunKind::Jury => "the jury's ranking",
    };
    let _ = writeln!(
        out,
        "## {} ({kind}; {})\n",
        escape(&run.name),
        escape(&run.score)
    );
    if let Some(c) = &run.correlation {
        let _ = writeln!(
            out,
            "Agreement with the human scores {} over {} context(s): Spearman {}, Kendall {}, \
             Pearson {}.\n",
            escape(&c.key),
            c.groups,
            number(c.spearman.value, 3),
            number(c.kendall.value, 3),
            number(c.pearson.value, 3)
        );
    }
    if let Some(d) = &run.diagnostics {
        for check in &d.checks {
            let _ = writeln!(
                out,
                "- diagnostics, {} ({}): {}",
                check.name,
                if check.is_warning() { "warning" } else { "ok" },
                escape(&check.message)
            );
        }
        if !d.checks.is_empty() {
            out.push('\n');
        }
    }
    let judges = run.judges.as_deref().unwrap_or_default();
    for (context, results) in report.contexts.iter().zip(&run.contexts) {
        let _ = writeln!(out, "### Context {}\n", escape(&context.id));
        let mut header = vec![
            "rank".to_string(),
            "candidate".to_string(),
            escape(&run.score),
        ];
        let mut align = vec!["---:", "---", "---:"];
        if results.human.is_some() {
            header.push(format!(
                "human {}",
                escape(run.human_key.as_deref().unwrap_or(""))
            ));
            align.push("---:");
        }
        for name in judges {
            header.push(escape(name));
            align.push("---:");
        }
        if results.formats.is_some() {
            header.push("format".to_string());
            align.push("---");
        }
        header.push("text".to_string());
        align.push("---");
        let _ = writeln!(out, "| {} |\n|{}|", header.join(" | "), align.join("|"));
        let mut order: Vec<usize> = (0..context.candidates.len()).collect();
        order.sort_by(|&a, &b| {
            results.ranks[a]
                .total_cmp(&results.ranks[b])
                .then(a.cmp(&b))
        });
        for &k in &order {
            let candidate = &context.candidates[k];
            let mut row = vec![
                rank(results.ranks[k]),
                escape(&candidate.id),
                number(results.scores.get(k).copied(), 4),
            ];
            if let Some(human) = &results.human {
                row.push(number(human[k], 2));
            }
            if let Some(scores) = &results.judge_scores {
                for judge in scores {
                    row.push(number(judge.get(k).copied(), 4));
                }
            }
            if let Some(formats) = &results.formats {
                row.push(formats[k].map_or("–", |f| f.name()).to_string());
            }
            row.push(preview(&candidate.text));
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out.push('\n');
        if let Some(feedback) = &results.feedback {
            out.push_str("Feedback, best first:\n\n");
            for &k in &order {
                if let Some(text) = &feedback[k] {
                    let _ = writeln!(
                        out,
                        "- {}: {}",
                        escape(&context.candidates[k].id),
                        if text.trim().is_empty() {
                            "(none written)".to_string()
                        } else {
                            escape(text)
                        }
                    );
                }
            }
            out.push('\n');
        }
        if let Some(pairs) = &results.pair_feedback {
            out.push_str(if results.p_tie.is_some() {
                "Feedback on each comparison (A shown first; P(A better) over A and B, the tie \
                 left out; P(tie) over all three):\n\n"
            } else {
                "Feedback on each comparison (A shown first):\n\n"
            });
            let n = context.candidates.len();
            for pair in pairs {
                let cell = |matrix: &Option<Vec<i32>>, what: &str| {
                    matrix
                        .as_ref()
                        .and_then(|m| m.get(pair.first * n + pair.second))
                        .filter(|&&p| p >= 0)
                        .map(|&p| format!(", {what} {:.3}", f64::from(p) / 1e6))
                        .unwrap_or_default()
                };
                let p_a = cell(&results.matrix, "P(A better)");
                let p_tie = cell(&results.p_tie, "P(tie)");
                let _ = writeln!(
                    out,
                    "- A {} vs B {}{p_a}{p_tie}, format {}: {}",
                    escape(&context.candidates[pair.first].id),
                    escape(&context.candidates[pair.second].id),
                    pair.format.name(),
                    if pair.feedback.trim().is_empty() {
                        "(none written)".to_string()
                    } else {
                        escape(&pair.feedback)
                    }
                );
            }
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_cannot_break_the_markdown() {
        assert_eq!(
            escape("a | b\n\n<script>*x*</script> [l](u) & `c`"),
            "a \\| b &lt;script&gt;\\*x\\*&lt;/script&gt; \\[l\\](u) &amp; \\`c\\`"
        );
        assert_eq!(escape("  two\tspaces  "), "two spaces");
        let long = "abcdefghij".repeat(20);
        let shown = preview(&long);
        assert!(shown.ends_with('…') && shown.chars().count() == PREVIEW + 1);
        assert_eq!(rank(2.5), "2.5");
        assert_eq!(rank(3.0), "3");
        assert_eq!(number(None, 3), "–");
    }
}
