//! The generic input format: one candidate per JSON line.
//!
//! ```json
//! {"context_id": "d1", "context": "...", "candidate_id": "M11", "candidate": "...",
//!  "reference": "...", "scores": {"coherence": 3.3}, "system_id": "M11"}
//! ```
//!
//! `reference`, `scores` and `system_id` are optional; other fields are ignored. Ids may
//! be strings or integers. In `scores`, numbers are human scores; any other value (a
//! boolean flag, a note) is kept as the candidate's metadata and is no score: judging an
//! attribute whose human value is not a number is an error naming the file, line and key
//! ([`find_human_key`]). The human key of an attribute matches case-insensitively. Every method reads its input through [`read_contexts`], which
//! groups the lines by context (contexts in order of first appearance, candidates in line
//! order); the dataset converters write it with [`write_records`].

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde_json::{Map, Value};

/// One line of the generic format.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateRecord {
    pub context_id: String,
    pub context: String,
    pub candidate_id: String,
    pub candidate: String,
    pub reference: Option<String>,
    /// Human scores by attribute name (sorted, so output is deterministic).
    pub scores: BTreeMap<String, f64>,
    pub system_id: Option<String>,
    /// The non-numeric values of `scores` (flags, notes): kept, never scores.
    pub metadata: BTreeMap<String, Value>,
}

/// One candidate of a [`Context`].
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: String,
    pub text: String,
    pub reference: Option<String>,
    pub scores: BTreeMap<String, f64>,
    pub system_id: Option<String>,
    /// The non-numeric values of `scores` (see [`CandidateRecord::metadata`]).
    pub metadata: BTreeMap<String, Value>,
    /// Where the candidate was read (`file:line`), for error messages.
    pub source: Option<String>,
}

/// A context (article, dialogue, triples) with the candidates generated for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub id: String,
    pub text: String,
    pub candidates: Vec<Candidate>,
}

impl Context {
    /// The candidates' human scores for `field`, or `None` when any candidate lacks it.
    pub fn human_scores(&self, field: &str) -> Option<Vec<f64>> {
        self.candidates
            .iter()
            .map(|c| c.scores.get(field).copied())
            .collect()
    }
}

/// The human-score key that `wanted` names in `contexts`: an exact match, else the one
/// key equal to it case-insensitively; `None` when no candidate has it. A candidate whose
/// value under that key is not a number is an error naming its `file:line` and the key.
pub fn find_human_key(contexts: &[Context], wanted: &str) -> Result<Option<String>> {
    let candidates = || contexts.iter().flat_map(|c| &c.candidates);
    let has = |key: &str| candidates().any(|c| c.scores.contains_key(key));
    let key = if has(wanted) {
        Some(wanted.to_string())
    } else {
        candidates()
            .flat_map(|c| c.scores.keys().chain(c.metadata.keys()))
            .find(|k| k.eq_ignore_ascii_case(wanted))
            .cloned()
    };
    let Some(key) = key else {
        return Ok(None);
    };
    if let Some(bad) = candidates().find(|c| c.metadata.contains_key(&key)) {
        bail!(
            "{}: `scores.{key}` is {}, not a number; the human score of the judged attribute \
             must be a number",
            bad.source.as_deref().unwrap_or("input"),
            kind_of(&bad.metadata[&key])
        );
    }
    Ok(Some(key))
}

/// [`find_human_key`] for the first of `names` that the input has (a key given by the
/// user, or every spelling of an attribute: `judge::attribute::score_keys`).
pub fn find_human_key_among(contexts: &[Context], names: &[String]) -> Result<Option<String>> {
    for name in names {
        if let Some(key) = find_human_key(contexts, name)? {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The human-score key of a run: `given` (`--human-key`), which must then exist, else the
/// first of `attribute_names` (every spelling of the attribute) the input has, or none.
/// A score under it that is not a number is an error naming the line.
pub fn human_key_for(
    contexts: &[Context],
    given: Option<&str>,
    attribute_names: &[String],
) -> Result<Option<String>> {
    let Some(given) = given else {
        return find_human_key_among(contexts, attribute_names);
    };
    match find_human_key(contexts, given)? {
        Some(key) => Ok(Some(key)),
        None => bail!(
            "no candidate has the human score `{given}` given by --human-key; the human scores \
             are: {}",
            match human_keys(contexts) {
                keys if keys.is_empty() => "none".to_string(),
                keys => keys.join(", "),
            }
        ),
    }
}

/// The warning for candidates whose text is empty (or only white space), if any: the
/// judge reads nothing of them, yet they are ranked like the others. Names the first
/// few by id, context and `file:line`.
pub fn empty_candidates_warning(contexts: &[Context]) -> Option<String> {
    const NAMED: usize = 3;
    let empty: Vec<String> = contexts
        .iter()
        .flat_map(|context| {
            context
                .candidates
                .iter()
                .filter(|c| c.text.trim().is_empty())
                .map(move |c| match &c.source {
                    Some(at) => format!("`{}` of context `{}` ({at})", c.id, context.id),
                    None => format!("`{}` of context `{}`", c.id, context.id),
                })
        })
        .collect();
    let named = match empty.len() {
        0 => return None,
        n if n <= NAMED => empty.join(", "),
        n => format!("{}, and {} more", empty[..NAMED].join(", "), n - NAMED),
    };
    Some(format!(
        "warning: {} candidate{} empty: {named}; the judge reads nothing of {}, yet it is \
         ranked like the others",
        empty.len(),
        if empty.len() == 1 { " is" } else { "s are" },
        if empty.len() == 1 { "it" } else { "them" },
    ))
}

/// Every numeric human-score key in `contexts`, sorted.
pub fn human_keys(contexts: &[Context]) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = contexts
        .iter()
        .flat_map(|c| &c.candidates)
        .flat_map(|c| c.scores.keys())
        .collect();
    keys.into_iter().cloned().collect()
}

/// Read every line of a generic JSONL file (blank lines are skipped).
pub fn read_records(path: &Path) -> Result<Vec<CandidateRecord>> {
    Ok(read_located(path)?.into_iter().map(|(_, r)| r).collect())
}

/// Records with their `file:line` location.
fn read_located(path: &Path) -> Result<Vec<(String, CandidateRecord)>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut records = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line_no = index + 1;
        let line =
            line.with_context(|| format!("{}:{line_no}: cannot read line", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_record(&line)
            .with_context(|| format!("{}:{line_no}: bad record", path.display()))?;
        records.push((format!("{}:{line_no}", path.display()), record));
    }
    if records.is_empty() {
        bail!("{}: no records", path.display());
    }
    Ok(records)
}

/// Read a generic JSONL file and group it by context; every context needs at least two
/// candidates (a pairwise comparison needs a pair).
pub fn read_contexts(path: &Path) -> Result<Vec<Context>> {
    group_located(read_located(path)?, 2).with_context(|| format!("in {}", path.display()))
}

/// Read a generic JSONL file and group it by context, allowing contexts with a single
/// candidate (methods that score each candidate on its own).
pub fn read_single_contexts(path: &Path) -> Result<Vec<Context>> {
    group_located(read_located(path)?, 1).with_context(|| format!("in {}", path.display()))
}

/// Records given as JSON texts, each with where it came from (`row 3`), grouped as
/// [`read_contexts`] groups a file's lines (`min_candidates`: 2 for pairwise comparison, 1
/// for scoring each candidate on its own). Errors name the row and the field.
pub fn contexts_from_rows(
    rows: &[(String, String)],
    min_candidates: usize,
) -> Result<Vec<Context>> {
    if rows.is_empty() {
        bail!("no records");
    }
    let records = rows
        .iter()
        .map(|(location, text)| {
            parse_record(text)
                .map(|record| (location.clone(), record))
                .with_context(|| format!("{location}: bad record"))
        })
        .collect::<Result<Vec<_>>>()?;
    group_located(records, min_candidates)
}

/// Group records by `context_id`: contexts in order of first appearance, candidates in
/// record order. Errors on a context whose text differs between its records, on a
/// duplicate candidate id within a context, and on a context with fewer than two
/// candidates.
pub fn group_contexts(records: Vec<CandidateRecord>) -> Result<Vec<Context>> {
    group_located(
        records
            .into_iter()
            .enumerate()
            .map(|(index, record)| (format!("record {}", index + 1), record))
            .collect(),
        2,
    )
}

fn group_located(
    records: Vec<(String, CandidateRecord)>,
    min_candidates: usize,
) -> Result<Vec<Context>> {
    let mut contexts: Vec<Context> = Vec::new();
    let mut index_of: HashMap<String, usize> = HashMap::new();
    for (location, record) in records {
        let slot = match index_of.get(&record.context_id) {
            Some(&slot) => {
                if contexts[slot].text != record.context {
                    bail!(
                        "{location}: context `{}` has a different `context` text than its first record",
                        record.context_id
                    );
                }
                slot
            }
            None => {
                index_of.insert(record.context_id.clone(), contexts.len());
                contexts.push(Context {
                    id: record.context_id.clone(),
                    text: record.context.clone(),
                    candidates: Vec::new(),
                });
                contexts.len() - 1
            }
        };
        let context = &mut contexts[slot];
        if context
            .candidates
            .iter()
            .any(|c| c.id == record.candidate_id)
        {
            bail!(
                "{location}: candidate `{}` appears twice in context `{}`",
                record.candidate_id,
                record.context_id
            );
        }
        context.candidates.push(Candidate {
            id: record.candidate_id,
            text: record.candidate,
            reference: record.reference,
            scores: record.scores,
            system_id: record.system_id,
            metadata: record.metadata,
            source: Some(location),
        });
    }
    if let Some(lonely) = contexts
        .iter()
        .find(|c| c.candidates.len() < min_candidates)
    {
        bail!(
            "context `{}` has only one candidate (`{}`); pairwise comparison needs at least two",
            lonely.id,
            lonely.candidates[0].id
        );
    }
    Ok(contexts)
}

/// Write records as generic JSONL, one per line, fields in a fixed order.
pub fn write_records(out: &mut dyn Write, records: &[CandidateRecord]) -> Result<()> {
    for record in records {
        let mut object = Map::new();
        object.insert("context_id".into(), record.context_id.clone().into());
        object.insert("context".into(), record.context.clone().into());
        object.insert("candidate_id".into(), record.candidate_id.clone().into());
        object.insert("candidate".into(), record.candidate.clone().into());
        if let Some(reference) = &record.reference {
            object.insert("reference".into(), reference.clone().into());
        }
        if !record.scores.is_empty() || !record.metadata.is_empty() {
            let scores: Map<String, Value> = record
                .scores
                .iter()
                .map(|(name, &value)| (name.clone(), Value::from(value)))
                .chain(record.metadata.clone())
                .collect();
            object.insert("scores".into(), Value::Object(scores));
        }
        if let Some(system) = &record.system_id {
            object.insert("system_id".into(), system.clone().into());
        }
        serde_json::to_writer(&mut *out, &Value::Object(object))?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn parse_record(line: &str) -> Result<CandidateRecord> {
    let value: Value = serde_json::from_str(line).context("not valid JSON")?;
    let Value::Object(object) = value else {
        bail!("expected a JSON object, found {}", kind_of(&value));
    };
    let mut scores = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    match object.get("scores") {
        None | Some(Value::Null) => {}
        Some(Value::Object(values)) => {
            for (name, value) in values {
                match value.as_f64() {
                    Some(number) => scores.insert(name.clone(), number),
                    None => metadata.insert(name.clone(), value.clone()).map(|_| 0.0),
                };
            }
        }
        Some(other) => bail!(
            "field `scores`: expected an object, found {}",
            kind_of(other)
        ),
    };
    Ok(CandidateRecord {
        context_id: required_id(&object, "context_id")?,
        context: required_text(&object, "context")?,
        candidate_id: required_id(&object, "candidate_id")?,
        candidate: required_text(&object, "candidate")?,
        reference: optional_text(&object, "reference")?,
        scores,
        system_id: optional_id(&object, "system_id")?,
        metadata,
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required_text(object: &Map<String, Value>, field: &str) -> Result<String> {
    optional_text(object, field)?.with_context(|| format!("missing field `{field}`"))
}

fn optional_text(object: &Map<String, Value>, field: &str) -> Result<Option<String>> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => bail!(
            "field `{field}`: expected a string, found {}",
            kind_of(other)
        ),
    }
}

fn required_id(object: &Map<String, Value>, field: &str) -> Result<String> {
    optional_id(object, field)?.with_context(|| format!("missing field `{field}`"))
}

/// Ids may be strings or integers (written back as strings).
fn optional_id(object: &Map<String, Value>, field: &str) -> Result<Option<String>> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => bail!("field `{field}` is empty"),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
            Ok(Some(number.to_string()))
        }
        Some(other) => bail!(
            "field `{field}`: expected a string or an integer, found {}",
            kind_of(other)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_temp(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn error_chain(error: &anyhow::Error) -> String {
        format!("{error:#}")
    }

    const GOOD: &str = r#"{"context_id": "d1", "context": "doc one", "candidate_id": "a", "candidate": "x", "scores": {"coherence": 3}}
{"context_id": 2, "context": "doc two", "candidate_id": "a", "candidate": "y"}

{"context_id": "d1", "context": "doc one", "candidate_id": "b", "candidate": "z", "system_id": "S"}
{"context_id": 2, "context": "doc two", "candidate_id": "b", "candidate": "w", "reference": "r"}
"#;

    #[test]
    fn empty_candidates_are_named_with_their_lines() {
        let file = write_temp(GOOD);
        assert_eq!(
            empty_candidates_warning(&read_contexts(file.path()).unwrap()),
            None
        );
        let text = GOOD.replace(r#""candidate": "z""#, r#""candidate": "  ""#);
        let file = write_temp(&text);
        let warning = empty_candidates_warning(&read_contexts(file.path()).unwrap()).unwrap();
        let at = format!("{}:4", file.path().display());
        assert!(
            warning.starts_with("warning: 1 candidate is empty: `b` of context `d1` (")
                && warning.contains(&at),
            "{warning}"
        );
    }

    #[test]
    fn groups_by_context_in_order_of_first_appearance() {
        let file = write_temp(GOOD);
        let contexts = read_contexts(file.path()).unwrap();
        let ids: Vec<_> = contexts.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["d1", "2"]);
        let candidates: Vec<_> = contexts[0].candidates.iter().map(|c| &c.text).collect();
        assert_eq!(candidates, ["x", "z"]);
        assert_eq!(contexts[0].candidates[0].scores["coherence"], 3.0);
        assert_eq!(contexts[0].candidates[1].system_id.as_deref(), Some("S"));
        assert_eq!(contexts[1].candidates[1].reference.as_deref(), Some("r"));
        assert_eq!(contexts[0].human_scores("coherence"), None);
    }

    #[test]
    fn rows_group_like_a_file_and_errors_name_the_row() {
        let file = write_temp(GOOD);
        let rows: Vec<(String, String)> = GOOD
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| (format!("row {i}"), l.to_string()))
            .collect();
        let from_rows = contexts_from_rows(&rows, 2).unwrap();
        let from_file = read_contexts(file.path()).unwrap();
        assert_eq!(from_rows.len(), from_file.len());
        for (a, b) in from_rows.iter().zip(&from_file) {
            assert_eq!((&a.id, &a.text), (&b.id, &b.text));
            assert_eq!(a.candidates.len(), b.candidates.len());
        }
        let bad = [(
            "row 7".to_string(),
            r#"{"context_id": "d1", "context": "c", "candidate_id": "a"}"#.to_string(),
        )];
        let error = error_chain(&contexts_from_rows(&bad, 1).unwrap_err());
        assert!(
            error.starts_with("row 7: bad record") && error.contains("`candidate`"),
            "{error}"
        );
    }

    #[test]
    fn round_trips_through_the_writer() {
        let file = write_temp(GOOD);
        let records = read_records(file.path()).unwrap();
        let mut out = Vec::new();
        write_records(&mut out, &records).unwrap();
        let again = write_temp(std::str::from_utf8(&out).unwrap());
        assert_eq!(read_records(again.path()).unwrap(), records);
    }

    #[test]
    fn malformed_json_names_file_and_line() {
        let file = write_temp(&format!("{GOOD}{{\"context_id\": \"d1\",\n"));
        let error = error_chain(&read_contexts(file.path()).unwrap_err());
        let expected = format!("{}:6:", file.path().display());
        assert!(error.contains(&expected), "{error}");
        assert!(error.contains("not valid JSON"), "{error}");
    }

    #[test]
    fn missing_or_mistyped_fields_are_named() {
        let file = write_temp(r#"{"context_id": "d1", "context": "c", "candidate_id": "a"}"#);
        let error = error_chain(&read_records(file.path()).unwrap_err());
        assert!(
            error.contains(":1:") && error.contains("`candidate`"),
            "{error}"
        );

        let file = write_temp(
            r#"{"context_id": 1.5, "context": "c", "candidate_id": "a", "candidate": "x"}"#,
        );
        let error = error_chain(&read_records(file.path()).unwrap_err());
        assert!(error.contains("`context_id`"), "{error}");
    }

    #[test]
    fn non_numeric_scores_are_metadata_and_keys_match_case_insensitively() {
        let file = write_temp(
            r#"{"context_id": "d1", "context": "c", "candidate_id": "a", "candidate": "x", "scores": {"Coherence": 4, "model_ambiguous": false, "Fluency": 3}}
{"context_id": "d1", "context": "c", "candidate_id": "b", "candidate": "y", "scores": {"Coherence": 2, "model_ambiguous": true, "Fluency": "high"}}
"#,
        );
        let contexts = read_contexts(file.path()).unwrap();
        let b = &contexts[0].candidates[1];
        assert_eq!(b.scores, BTreeMap::from([("Coherence".to_string(), 2.0)]));
        assert_eq!(b.metadata["model_ambiguous"], Value::Bool(true));
        assert_eq!(
            find_human_key(&contexts, "coherence").unwrap().as_deref(),
            Some("Coherence")
        );
        assert_eq!(find_human_key(&contexts, "empathy").unwrap(), None);
        assert_eq!(human_keys(&contexts), ["Coherence", "Fluency"]);
        let error = error_chain(&find_human_key(&contexts, "fluency").unwrap_err());
        let at = format!("{}:2:", file.path().display());
        assert!(
            error.contains(&at) && error.contains("`scores.Fluency`") && error.contains("a string"),
            "{error}"
        );
        let records = read_records(file.path()).unwrap();
        let mut out = Vec::new();
        write_records(&mut out, &records).unwrap();
        let again = write_temp(std::str::from_utf8(&out).unwrap());
        assert_eq!(read_records(again.path()).unwrap(), records);
    }

    #[test]
    fn a_context_with_one_candidate_is_named() {
        let file = write_temp(
            r#"{"context_id": "d1", "context": "c", "candidate_id": "a", "candidate": "x"}
{"context_id": "d1", "context": "c", "candidate_id": "b", "candidate": "y"}
{"context_id": "alone", "context": "c2", "candidate_id": "only", "candidate": "z"}
"#,
        );
        let error = error_chain(&read_contexts(file.path()).unwrap_err());
        assert!(
            error.contains("`alone`") && error.contains("only one candidate"),
            "{error}"
        );
        let contexts = read_single_contexts(file.path()).unwrap();
        assert_eq!(contexts[1].candidates.len(), 1);
    }

    #[test]
    fn duplicate_candidates_and_conflicting_contexts_are_errors() {
        let file = write_temp(
            r#"{"context_id": "d1", "context": "c", "candidate_id": "a", "candidate": "x"}
{"context_id": "d1", "context": "c", "candidate_id": "a", "candidate": "y"}
"#,
        );
        let error = error_chain(&read_contexts(file.path()).unwrap_err());
        assert!(error.contains("candidate `a` appears twice"), "{error}");

        let file = write_temp(
            r#"{"context_id": "d1", "context": "c", "candidate_id": "a", "candidate": "x"}
{"context_id": "d1", "context": "other", "candidate_id": "b", "candidate": "y"}
"#,
        );
        let error = error_chain(&read_contexts(file.path()).unwrap_err());
        assert!(error.contains("different `context` text"), "{error}");
    }

    #[test]
    fn missing_file_is_named() {
        let error = error_chain(&read_contexts(Path::new("/nonexistent/in.jsonl")).unwrap_err());
        assert!(error.contains("/nonexistent/in.jsonl"), "{error}");
    }
}
