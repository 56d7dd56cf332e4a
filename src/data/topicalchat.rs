//! Topical-Chat with the USR annotations (`topicalchat/topical_chat.json`, the UniEval
//! copy) as generic records.
//!
//! The context is the dialogue history (`source`, one turn per line, whitespace trimmed);
//! like the comparative-assessment prompts ("Dialogue: ..."), the knowledge fact
//! (`context` in the file) is left out unless asked for, in which case it follows the
//! history after a blank line as `Fact: ...`. Rows are grouped by their history (six
//! responses each, contexts numbered `topicalchat-0..59` in file order); the candidate is
//! `system_output` and its id the `system_id`.
//!
//! Scores keep the file's names: understandability, naturalness, coherence, engagingness,
//! groundedness, overall. The comparative-assessment paper's columns map to them as
//! COH = `understandability`, CNT (continuity) = `coherence` (USR "maintains context"),
//! ENG = `engagingness`, NAT = `naturalness` (see [`PAPER_COLUMNS`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use super::CandidateRecord;

/// The file inside the shared data directory.
pub const FILE: &str = "topicalchat/topical_chat.json";

/// `(paper column, attribute to prompt for, score field in the file)`.
pub const PAPER_COLUMNS: [(&str, &str, &str); 4] = [
    ("COH", "coherence", "understandability"),
    ("CNT", "continuity", "coherence"),
    ("ENG", "engagingness", "engagingness"),
    ("NAT", "naturalness", "naturalness"),
];

#[derive(Deserialize)]
struct Row {
    source: String,
    system_id: String,
    system_output: String,
    context: String,
    scores: BTreeMap<String, f64>,
}

/// Options of the Topical-Chat reader.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Append the knowledge fact to the dialogue history.
    pub with_knowledge: bool,
}

/// Read `<data_dir>/topicalchat/topical_chat.json`.
pub fn read(data_dir: &Path, options: Options) -> Result<Vec<CandidateRecord>> {
    let path = data_dir.join(FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let rows: Vec<Row> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a list of Topical-Chat rows", path.display()))?;
    let mut histories: Vec<String> = Vec::new();
    let mut records = Vec::with_capacity(rows.len());
    for (index, row) in rows.into_iter().enumerate() {
        let number = match histories.iter().position(|h| *h == row.source) {
            Some(number) => number,
            None => {
                histories.push(row.source.clone());
                histories.len() - 1
            }
        };
        let mut context = render_history(&row.source);
        if context.is_empty() {
            bail!(
                "{}: row {index}: empty dialogue history `source`",
                path.display()
            );
        }
        if options.with_knowledge {
            context = format!("{context}\n\nFact: {}", row.context.trim());
        }
        records.push(CandidateRecord {
            context_id: format!("topicalchat-{number}"),
            context,
            candidate_id: row.system_id.clone(),
            candidate: row.system_output.trim().to_string(),
            reference: None,
            scores: row.scores,
            system_id: Some(row.system_id),
            metadata: Default::default(),
        });
    }
    Ok(records)
}

/// One turn per line, trimmed, empty lines dropped.
fn render_history(source: &str) -> String {
    source
        .split('\n')
        .map(str::trim)
        .filter(|turn| !turn.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{find_shared_data_dir, group_contexts};

    #[test]
    fn sixty_dialogues_of_six_responses() {
        let Some(dir) = find_shared_data_dir() else {
            eprintln!("shared data not found; skipping");
            return;
        };
        let records = read(&dir, Options::default()).unwrap();
        let contexts = group_contexts(records).unwrap();
        assert_eq!(contexts.len(), 60);
        assert!(contexts.iter().all(|c| c.candidates.len() == 6));
        for (_, _, field) in PAPER_COLUMNS {
            assert!(contexts.iter().all(|c| c.human_scores(field).is_some()));
        }
        let first = &contexts[0];
        assert!(first.text.starts_with("so , i 'm reading the latest film"));
        assert!(!first.text.contains("Fact:"));
        assert!(first.text.lines().all(|l| l == l.trim() && !l.is_empty()));

        let with = read(
            &dir,
            Options {
                with_knowledge: true,
            },
        )
        .unwrap();
        assert!(with[0].context.starts_with(&first.text));
        assert!(with[0].context.contains("\n\nFact: from left , emma baker"));
    }

    #[test]
    fn history_turns_are_trimmed_lines() {
        assert_eq!(render_history(" a b \n c \n\n"), "a b\nc");
    }
}
