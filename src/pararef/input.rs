//! The JSONL rows reference-based metrics read, and the paraphrase files.
//!
//! Metric input: the generic candidate format (see [`crate::data::jsonl`]) whose reference
//! is either `reference` (a string) or `references` (a list of strings):
//! `{"context_id", "candidate_id", "candidate", "reference" | "references", "scores"?,
//! "system_id"?}`. Paraphrase files (written by `nlg-judge paraphrase`), one row per
//! distinct reference: `{"reference_id", "reference", "paraphrases": [...], "failed": k}`,
//! where `reference_id` is derived from the reference text, so any file naming the same
//! reference finds its paraphrases.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One candidate with its references.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRow {
    pub context_id: String,
    pub candidate_id: String,
    pub candidate: String,
    /// At least one; the first is "the" reference.
    pub references: Vec<String>,
    pub scores: BTreeMap<String, f64>,
    pub system_id: Option<String>,
}

/// The id of a reference: the first 16 hex digits of the sha256 of its text.
pub fn reference_id(reference: &str) -> String {
    hex::encode(&Sha256::digest(reference.as_bytes())[..8])
}

fn id_field(object: &serde_json::Map<String, Value>, name: &str) -> Result<String> {
    match object.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(other) => bail!("field '{name}' must be a string or an integer, got {other}"),
        None => bail!("missing field '{name}'"),
    }
}

fn parse_row(line: &str) -> Result<MetricRow> {
    let value: Value = serde_json::from_str(line).context("not valid JSON")?;
    let Value::Object(object) = value else {
        bail!("a row must be a JSON object");
    };
    let candidate = match object.get("candidate") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => bail!("field 'candidate' must be a string, got {other}"),
        None => bail!("missing field 'candidate'"),
    };
    let references = match (object.get("reference"), object.get("references")) {
        (Some(_), Some(_)) => bail!("give 'reference' or 'references', not both"),
        (Some(Value::String(s)), None) => vec![s.clone()],
        (Some(other), None) => bail!("field 'reference' must be a string, got {other}"),
        (None, Some(Value::Array(items))) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => bail!("field 'references[{i}]' must be a string, got {other}"),
            })
            .collect::<Result<_>>()?,
        (None, Some(other)) => bail!("field 'references' must be a list of strings, got {other}"),
        (None, None) => bail!("no reference: the row needs 'reference' or 'references'"),
    };
    if references.is_empty() {
        bail!("field 'references' is empty");
    }
    if let Some(i) = references.iter().position(|r| r.trim().is_empty()) {
        bail!("reference {i} is empty");
    }
    let mut scores = BTreeMap::new();
    if let Some(value) = object.get("scores") {
        let Value::Object(map) = value else {
            bail!("field 'scores' must be an object");
        };
        for (name, score) in map {
            let Some(score) = score.as_f64() else {
                bail!("field 'scores.{name}' must be a number");
            };
            scores.insert(name.clone(), score);
        }
    }
    let system_id = match object.get("system_id") {
        None | Some(Value::Null) => None,
        Some(_) => Some(id_field(&object, "system_id")?),
    };
    Ok(MetricRow {
        context_id: id_field(&object, "context_id")?,
        candidate_id: id_field(&object, "candidate_id")?,
        candidate,
        references,
        scores,
        system_id,
    })
}

/// Metric rows given as JSON texts with where each came from (`row 3`); errors name the
/// row and field.
pub fn metric_rows_from(rows: &[(String, String)]) -> Result<Vec<MetricRow>> {
    if rows.is_empty() {
        bail!("no rows");
    }
    rows.iter()
        .map(|(at, text)| parse_row(text).with_context(|| at.clone()))
        .collect()
}

/// Read every row of a metric input file; errors name the file and line.
pub fn read_metric_rows(path: &Path) -> Result<Vec<MetricRow>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut rows = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line =
            line.with_context(|| format!("{}:{}: cannot read", path.display(), index + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        rows.push(parse_row(&line).with_context(|| format!("{}:{}", path.display(), index + 1))?);
    }
    if rows.is_empty() {
        bail!("{} has no rows", path.display());
    }
    Ok(rows)
}

/// One row of a paraphrase file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParaphraseRow {
    pub reference_id: String,
    pub reference: String,
    pub paraphrases: Vec<String>,
    /// Paraphrases that could not be obtained after the retries.
    pub failed: usize,
}

/// A paraphrase file, by reference id.
pub fn read_paraphrases(path: &Path) -> Result<HashMap<String, ParaphraseRow>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut rows = HashMap::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let at = || format!("{}:{}", path.display(), index + 1);
        let line = line.with_context(at)?;
        if line.trim().is_empty() {
            continue;
        }
        let row: ParaphraseRow = serde_json::from_str(&line)
            .with_context(|| format!("{}: not a paraphrase row", at()))?;
        if row.reference_id != reference_id(&row.reference) {
            bail!(
                "{}: reference_id {} does not match the reference text",
                at(),
                row.reference_id
            );
        }
        rows.insert(row.reference_id.clone(), row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_one_reference_or_a_list() {
        let one = parse_row(
            r#"{"context_id": 1, "candidate_id": "a", "candidate": "x", "reference": "r"}"#,
        )
        .unwrap();
        assert_eq!(one.references, ["r"]);
        assert_eq!(one.context_id, "1");
        let many = parse_row(
            r#"{"context_id": "c", "candidate_id": "a", "candidate": "x", "references": ["r", "s"], "scores": {"da": 0.5}}"#,
        )
        .unwrap();
        assert_eq!(many.references, ["r", "s"]);
        assert_eq!(many.scores["da"], 0.5);
    }

    #[test]
    fn bad_rows_get_named_errors() {
        let cases = [
            (
                r#"{"context_id": "c", "candidate_id": "a", "candidate": "x"}"#,
                "no reference",
            ),
            (
                r#"{"context_id": "c", "candidate_id": "a", "candidate": "x", "reference": " "}"#,
                "empty",
            ),
            (
                r#"{"context_id": "c", "candidate_id": "a", "candidate": "x", "references": [1]}"#,
                "references[0]",
            ),
            (
                r#"{"candidate_id": "a", "candidate": "x", "reference": "r"}"#,
                "context_id",
            ),
        ];
        for (line, expected) in cases {
            let error = format!("{:#}", parse_row(line).unwrap_err());
            assert!(error.contains(expected), "{line}: {error}");
        }
    }

    #[test]
    fn reference_ids_are_stable_and_distinct() {
        assert_eq!(reference_id("a"), reference_id("a"));
        assert_ne!(reference_id("a"), reference_id("b"));
        assert_eq!(reference_id("a").len(), 16);
    }
}
