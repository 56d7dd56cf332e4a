//! The predictions reader of meta-evaluation: one JSON object per line, a metric's
//! prediction, the human score, the group (context) and, at system level, the system,
//! each found by a dotted path (`scores.coherence`, `all.1`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::stats::Item;

/// A field to read: its dotted path, and how the caller names it in messages (the CLI:
/// its flag, e.g. `--pred`).
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub path: &'a str,
    pub name: &'a str,
}

impl<'a> Field<'a> {
    pub fn new(path: &'a str, name: &'a str) -> Self {
        Self { path, name }
    }
}

/// The fields to read from each line; `system` only when the level needs it.
#[derive(Debug, Clone, Copy)]
pub struct PredictionFields<'a> {
    pub pred: Field<'a>,
    pub human: Field<'a>,
    pub group: Field<'a>,
    pub system: Option<Field<'a>>,
}

/// One [`Item`] per non-blank line of the JSONL file at `path`; errors name the file,
/// line and field.
pub fn read_predictions(path: &Path, fields: &PredictionFields) -> Result<Vec<Item>> {
    items_of(read_lines(path)?, fields)
}

/// One [`Item`] per record given as a JSON text with where it came from (`row 3`);
/// errors name the row and field.
pub fn predictions_from_rows(
    rows: &[(String, String)],
    fields: &PredictionFields,
) -> Result<Vec<Item>> {
    items_of(parse_rows(rows)?, fields)
}

fn items_of(records: Vec<(String, Value)>, fields: &PredictionFields) -> Result<Vec<Item>> {
    records
        .into_iter()
        .map(|(at, record)| parse_item(&record, fields).with_context(|| at))
        .collect()
}

/// Records given as JSON texts with their locations, checked as file lines are.
pub fn parse_rows(rows: &[(String, String)]) -> Result<Vec<(String, Value)>> {
    if rows.is_empty() {
        bail!("no records");
    }
    rows.iter()
        .map(|(at, text)| {
            let record: Value =
                serde_json::from_str(text).with_context(|| format!("{at}: not valid JSON"))?;
            if !record.is_object() {
                bail!("{at}: expected a JSON object, found {}", kind(&record));
            }
            Ok((at.clone(), record))
        })
        .collect()
}

/// The items of `pred_path` (predictions, groups) joined with `human_path` (human scores,
/// systems) on (`context_id`, `candidate_id`); unmatched rows on either side are refused
/// with their count, and a key that appears twice on either side is refused.
pub fn read_joined(
    pred_path: &Path,
    human_path: &Path,
    fields: &PredictionFields,
) -> Result<Vec<Item>> {
    join_records(
        read_lines(pred_path)?,
        &pred_path.display().to_string(),
        read_lines(human_path)?,
        &human_path.display().to_string(),
        fields,
    )
}

/// [`read_joined`] over records already read (each with its location), the two sides
/// named `pred_name` and `human_name` in messages.
pub fn join_records(
    pred_records: Vec<(String, Value)>,
    pred_name: &str,
    human_records: Vec<(String, Value)>,
    human_name: &str,
    fields: &PredictionFields,
) -> Result<Vec<Item>> {
    let key = |record: &Value| -> Result<(String, String)> {
        Ok((
            id_field(record, "context_id", "join")?,
            id_field(record, "candidate_id", "join")?,
        ))
    };
    let mut humans: HashMap<(String, String), (String, Value)> = HashMap::new();
    let mut human_order = Vec::new();
    for (at, record) in human_records {
        let k = key(&record).with_context(|| at.clone())?;
        if humans.contains_key(&k) {
            bail!("{at}: (`{}`, `{}`) appears twice", k.0, k.1);
        }
        human_order.push(k.clone());
        humans.insert(k, (at, record));
    }
    let mut items = Vec::new();
    let mut unmatched = Vec::new();
    let mut used = HashSet::new();
    for (at, record) in pred_records {
        let k = key(&record).with_context(|| at.clone())?;
        let Some((human_at, human)) = humans.get(&k) else {
            unmatched.push(at);
            continue;
        };
        if !used.insert(k.clone()) {
            bail!("{at}: (`{}`, `{}`) appears twice", k.0, k.1);
        }
        items.push(Item {
            pred: number_field(&record, fields.pred.path, fields.pred.name)
                .with_context(|| at.clone())?,
            human: number_field(human, fields.human.path, fields.human.name)
                .with_context(|| human_at.clone())?,
            group: id_field(&record, fields.group.path, fields.group.name)
                .with_context(|| at.clone())?,
            system: match fields.system {
                Some(field) => id_field(human, field.path, field.name)
                    .or_else(|_| id_field(&record, field.path, field.name))
                    .with_context(|| human_at.clone())?,
                None => String::new(),
            },
        });
    }
    let unused: Vec<&(String, String)> =
        human_order.iter().filter(|k| !used.contains(*k)).collect();
    if !unmatched.is_empty() || !unused.is_empty() {
        let mut why = Vec::new();
        if let Some(first) = unmatched.first() {
            why.push(format!(
                "{} rows of {} have no row with the same (context_id, candidate_id) in {} \
                 (the first: {first})",
                unmatched.len(),
                pred_name,
                human_name
            ));
        }
        if let Some(first) = unused.first() {
            why.push(format!(
                "{} rows of {} have none in {} (the first: `{}`/`{}`)",
                unused.len(),
                human_name,
                pred_name,
                first.0,
                first.1
            ));
        }
        bail!("cannot join: {}", why.join("; "));
    }
    Ok(items)
}

/// The JSON objects of a JSONL file with their `file:line` (blank lines skipped).
fn read_lines(path: &Path) -> Result<Vec<(String, Value)>> {
    let file =
        File::open(path).with_context(|| format!("cannot open input file {}", path.display()))?;
    let mut records = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let number = index + 1;
        let at = || format!("{}:{number}", path.display());
        let line = line.with_context(|| format!("{}: cannot read line", at()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value =
            serde_json::from_str(&line).with_context(|| format!("{}: not valid JSON", at()))?;
        if !record.is_object() {
            bail!("{}: expected a JSON object, found {}", at(), kind(&record));
        }
        records.push((at(), record));
    }
    if records.is_empty() {
        bail!("{}: no records", path.display());
    }
    Ok(records)
}

fn parse_item(record: &Value, fields: &PredictionFields) -> Result<Item> {
    Ok(Item {
        pred: number_field(record, fields.pred.path, fields.pred.name)?,
        human: number_field(record, fields.human.path, fields.human.name)?,
        group: id_field(record, fields.group.path, fields.group.name)?,
        system: match fields.system {
            Some(field) => id_field(record, field.path, field.name)?,
            None => String::new(),
        },
    })
}

/// Follows a dotted path through objects (by key) and arrays (by index).
fn lookup<'a>(record: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(record, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        })
}

fn field<'a>(record: &'a Value, path: &str, flag: &str) -> Result<&'a Value> {
    match lookup(record, path) {
        Some(Value::Null) => bail!("field `{path}` ({flag}) is null"),
        Some(value) => Ok(value),
        None => bail!("field `{path}` ({flag}) is missing"),
    }
}

fn number_field(record: &Value, path: &str, flag: &str) -> Result<f64> {
    let value = field(record, path, flag)?;
    match value.as_f64() {
        Some(number) => Ok(number),
        None if value.is_string() => bail!(
            "field `{path}` ({flag}) is the string {value}; expected a JSON number (unquoted)"
        ),
        None => bail!(
            "field `{path}` ({flag}) is {}; expected a number",
            kind(value)
        ),
    }
}

fn id_field(record: &Value, path: &str, flag: &str) -> Result<String> {
    match field(record, path, flag)? {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        other => bail!(
            "field `{path}` ({flag}) is {}; expected a string or number id",
            kind(other)
        ),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dotted_paths_reach_nested_objects_and_arrays() {
        let record = json!({"scores": {"coherence": 3.5, "all": [1, 2.5]}, "id": 7});
        assert_eq!(lookup(&record, "scores.coherence"), Some(&json!(3.5)));
        assert_eq!(lookup(&record, "scores.all.1"), Some(&json!(2.5)));
        assert_eq!(lookup(&record, "scores.all.2"), None);
        assert_eq!(lookup(&record, "id.x"), None);
        assert_eq!(lookup(&record, "scores.fluency"), None);
    }

    #[test]
    fn quoted_numbers_are_rejected_with_a_reason() {
        let record = json!({"score": "3.5"});
        let error = number_field(&record, "score", "--pred").unwrap_err();
        assert_eq!(
            error.to_string(),
            "field `score` (--pred) is the string \"3.5\"; expected a JSON number (unquoted)"
        );
    }

    #[test]
    fn ids_may_be_numbers_but_not_booleans() {
        let record = json!({"doc": 12, "flag": true});
        assert_eq!(id_field(&record, "doc", "--group").unwrap(), "12");
        let error = id_field(&record, "flag", "--group").unwrap_err();
        assert!(error.to_string().contains("is a boolean"), "{error}");
    }
}
