//! WebNLG 2017 human evaluation (`webnlg/human_eval_2017.csv`) as generic records.
//!
//! One context per triple set (`mr`, 223 of them, numbered `webnlg-0..222` in file
//! order), rendered one triple per line as `subject | relation | object` with the
//! underscores of DBpedia names turned into spaces. Candidates are the outputs of the
//! nine system teams (`candidate_id` = `system_id` = `team`), with the fluency, grammar
//! and semantics means (1-3). The human reference (team `webnlg`) becomes every
//! candidate's `reference`, and a candidate too when asked. Empty outputs (193 rows whose
//! `text` is empty or `null`, scored 1/1/1 by placeholder) are dropped unless asked for.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use super::CandidateRecord;

/// The file inside the shared data directory.
pub const FILE: &str = "webnlg/human_eval_2017.csv";

/// The team whose texts are the human references.
pub const REFERENCE_TEAM: &str = "webnlg";

/// Options of the WebNLG reader.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep the human reference (team `webnlg`) as a candidate.
    pub include_reference: bool,
    /// Keep empty outputs (`text` empty or `null`) as empty candidates.
    pub keep_empty: bool,
}

#[derive(Deserialize)]
struct Row {
    mr: String,
    team: String,
    text: String,
    fluency: f64,
    grammar: f64,
    semantics: f64,
}

/// Whether a system output is missing.
pub fn is_empty_output(text: &str) -> bool {
    let text = text.trim();
    text.is_empty() || text == "null"
}

/// Read `<data_dir>/webnlg/human_eval_2017.csv`.
pub fn read(data_dir: &Path, options: Options) -> Result<Vec<CandidateRecord>> {
    let path = data_dir.join(FILE);
    let mut reader =
        csv::Reader::from_path(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut rows = Vec::new();
    for (index, row) in reader.deserialize::<Row>().enumerate() {
        // Line numbers count the header; a quoted text may span lines, so csv's own
        // position (in the error) is the authority and the row number is a guide.
        let row = row.with_context(|| format!("{}: data row {}", path.display(), index + 1))?;
        rows.push(row);
    }
    let mut sets: Vec<&str> = Vec::new();
    for row in &rows {
        if !sets.contains(&row.mr.as_str()) {
            sets.push(&row.mr);
        }
    }
    let references: BTreeMap<&str, &str> = rows
        .iter()
        .filter(|row| row.team == REFERENCE_TEAM && !is_empty_output(&row.text))
        .map(|row| (row.mr.as_str(), row.text.as_str()))
        .collect();
    let mut records = Vec::new();
    for (number, set) in sets.iter().enumerate() {
        let context = render_triples(set)
            .with_context(|| format!("{}: triple set {number}", path.display()))?;
        for row in rows.iter().filter(|row| row.mr == *set) {
            if row.team == REFERENCE_TEAM && !options.include_reference {
                continue;
            }
            if is_empty_output(&row.text) && !options.keep_empty {
                continue;
            }
            let text = if is_empty_output(&row.text) {
                ""
            } else {
                row.text.trim()
            };
            records.push(CandidateRecord {
                context_id: format!("webnlg-{number}"),
                context: context.clone(),
                candidate_id: row.team.clone(),
                candidate: text.to_string(),
                reference: references.get(set).map(|r| r.trim().to_string()),
                scores: BTreeMap::from([
                    ("fluency".to_string(), row.fluency),
                    ("grammar".to_string(), row.grammar),
                    ("semantics".to_string(), row.semantics),
                ]),
                system_id: Some(row.team.clone()),
                metadata: Default::default(),
            });
        }
    }
    Ok(records)
}

/// `a_b | rel | c<br>...` -> one `a b | rel | c` per line.
fn render_triples(mr: &str) -> Result<String> {
    let mut lines = Vec::new();
    for triple in mr.split("<br>") {
        let parts: Vec<&str> = triple.split('|').map(str::trim).collect();
        if parts.len() != 3 {
            bail!("`{triple}` is not a `subject | relation | object` triple");
        }
        lines.push(format!(
            "{} | {} | {}",
            parts[0].replace('_', " "),
            parts[1],
            parts[2].replace('_', " ")
        ));
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{find_shared_data_dir, group_contexts};

    #[test]
    fn counts_of_sets_teams_and_empty_outputs() {
        let Some(dir) = find_shared_data_dir() else {
            eprintln!("shared data not found; skipping");
            return;
        };
        // 223 sets x 9 system teams = 2007 outputs, of which 193 are empty (data README).
        let records = read(&dir, Options::default()).unwrap();
        let contexts = group_contexts(records.clone()).unwrap();
        assert_eq!(contexts.len(), 223);
        assert_eq!(records.len(), 2007 - 193);
        assert!(records.iter().all(|r| r.candidate_id != REFERENCE_TEAM));
        assert!(records.iter().all(|r| r.reference.is_some()));

        let all = read(
            &dir,
            Options {
                include_reference: true,
                keep_empty: true,
            },
        )
        .unwrap();
        assert_eq!(all.len(), 2230);
        let contexts = group_contexts(all).unwrap();
        assert!(contexts.iter().all(|c| c.candidates.len() == 10));
    }

    #[test]
    fn triples_are_rendered_one_per_line() {
        let text = render_triples("101_Helena | discoverer | James_Craig_Watson<br>James_Craig_Watson | almaMater | University_of_Michigan").unwrap();
        assert_eq!(
            text,
            "101 Helena | discoverer | James Craig Watson\nJames Craig Watson | almaMater | University of Michigan"
        );
        assert!(render_triples("a | b").is_err());
    }
}
