//! Merging shard outputs: every check a merge needs (same fingerprint, every shard once,
//! every input context exactly once, nothing foreign), then the lines of each context in
//! the input's context order, which is the order a single run writes.
//!
//! Pure: the caller reads the files; errors are named ([`MergeError`]) so that scripts
//! and tests can tell them apart.

use std::collections::{BTreeSet, HashMap};

use thiserror::Error;

use super::fingerprint::ShardSidecar;

/// One shard's output as read from disk.
#[derive(Debug, Clone)]
pub struct ShardOutput {
    /// The file's name, for messages.
    pub name: String,
    pub sidecar: ShardSidecar,
    pub text: String,
}

/// Why shard outputs cannot be merged.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MergeError {
    #[error("no shard outputs to merge")]
    NoShards,
    #[error(
        "fingerprint mismatch: {first} and {other} differ in `{field}` ({first_value:?} versus \
         {other_value:?}); shards of one run must use the same model, method, template, design, \
         seed and input"
    )]
    FingerprintMismatch {
        first: String,
        other: String,
        field: String,
        first_value: String,
        other_value: String,
    },
    #[error(
        "input mismatch: the shards ran on an input with sha256 {shards}, --input has {input}"
    )]
    InputMismatch { shards: String, input: String },
    #[error("shard count mismatch: {first} is one of {first_count} shards, {other} one of {other_count}")]
    ShardCountMismatch {
        first: String,
        first_count: usize,
        other: String,
        other_count: usize,
    },
    #[error("duplicate shard: {first} and {other} are both shard {index}/{count}")]
    DuplicateShard {
        first: String,
        other: String,
        index: usize,
        count: usize,
    },
    #[error("missing shard: no output of shard {index}/{count} among the files given")]
    MissingShard { index: usize, count: usize },
    #[error("duplicate context: {context_id:?} appears in both {first} and {other}")]
    DuplicateContext {
        context_id: String,
        first: String,
        other: String,
    },
    #[error("missing context: {context_id:?} of the input is in no shard output")]
    MissingContext { context_id: String },
    #[error("foreign context: {file} has {context_id:?}, which the input does not have")]
    ForeignContext { file: String, context_id: String },
    #[error("bad line: {file} line {line}: {reason}")]
    BadLine {
        file: String,
        line: usize,
        reason: String,
    },
}

/// The merged output, byte for byte what one run over the input writes.
/// `input_contexts`: the input's context ids in order; `input_sha256`: its file hash.
pub fn merge_outputs(
    shards: &[ShardOutput],
    input_contexts: &[String],
    input_sha256: &str,
) -> Result<Vec<u8>, MergeError> {
    let first = shards.first().ok_or(MergeError::NoShards)?;
    for other in &shards[1..] {
        check_same_fingerprint(first, other)?;
        if other.sidecar.shard.count != first.sidecar.shard.count {
            return Err(MergeError::ShardCountMismatch {
                first: first.name.clone(),
                first_count: first.sidecar.shard.count,
                other: other.name.clone(),
                other_count: other.sidecar.shard.count,
            });
        }
    }
    if let Some(shards_input) = first.sidecar.fingerprint.get("input_sha256") {
        if shards_input != input_sha256 {
            return Err(MergeError::InputMismatch {
                shards: shards_input.clone(),
                input: input_sha256.to_string(),
            });
        }
    }
    let count = first.sidecar.shard.count;
    let mut by_index: HashMap<usize, &str> = HashMap::new();
    for shard in shards {
        if let Some(previous) = by_index.insert(shard.sidecar.shard.index, &shard.name) {
            return Err(MergeError::DuplicateShard {
                first: previous.to_string(),
                other: shard.name.clone(),
                index: shard.sidecar.shard.index,
                count,
            });
        }
    }
    if let Some(index) = (0..count).find(|i| !by_index.contains_key(i)) {
        return Err(MergeError::MissingShard { index, count });
    }

    let known: BTreeSet<&str> = input_contexts.iter().map(String::as_str).collect();
    // Context id -> (file name, its lines in file order).
    let mut lines_of: HashMap<String, (String, Vec<&str>)> = HashMap::new();
    for shard in shards {
        let mut seen_here: BTreeSet<String> = BTreeSet::new();
        for context in &shard.sidecar.contexts {
            claim(&mut lines_of, context, &shard.name)?;
            seen_here.insert(context.clone());
        }
        for (number, line) in shard.text.split_inclusive('\n').enumerate() {
            let id = context_id_of(line).map_err(|reason| MergeError::BadLine {
                file: shard.name.clone(),
                line: number + 1,
                reason,
            })?;
            if !seen_here.contains(&id) {
                // A line of a context the sidecar does not list: claim it (and catch
                // a context that another shard also wrote).
                claim(&mut lines_of, &id, &shard.name)?;
                seen_here.insert(id.clone());
            }
            lines_of.get_mut(&id).expect("claimed above").1.push(line);
        }
    }
    for (id, (file, _)) in &lines_of {
        if !known.contains(id.as_str()) {
            return Err(MergeError::ForeignContext {
                file: file.clone(),
                context_id: id.clone(),
            });
        }
    }
    let mut merged = Vec::new();
    for id in input_contexts {
        let (_, lines) = lines_of.get(id).ok_or_else(|| MergeError::MissingContext {
            context_id: id.clone(),
        })?;
        for line in lines {
            merged.extend_from_slice(line.as_bytes());
        }
    }
    Ok(merged)
}

fn claim(
    lines_of: &mut HashMap<String, (String, Vec<&str>)>,
    context: &str,
    file: &str,
) -> Result<(), MergeError> {
    if let Some((previous, _)) = lines_of.get(context) {
        return Err(MergeError::DuplicateContext {
            context_id: context.to_string(),
            first: previous.clone(),
            other: file.to_string(),
        });
    }
    lines_of.insert(context.to_string(), (file.to_string(), Vec::new()));
    Ok(())
}

fn check_same_fingerprint(first: &ShardOutput, other: &ShardOutput) -> Result<(), MergeError> {
    let a = &first.sidecar.fingerprint;
    let b = &other.sidecar.fingerprint;
    let fields: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for field in fields {
        let (x, y) = (a.get(field), b.get(field));
        if x != y {
            return Err(MergeError::FingerprintMismatch {
                first: first.name.clone(),
                other: other.name.clone(),
                field: field.clone(),
                first_value: x.cloned().unwrap_or_else(|| "(absent)".into()),
                other_value: y.cloned().unwrap_or_else(|| "(absent)".into()),
            });
        }
    }
    Ok(())
}

fn context_id_of(line: &str) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("context_id") {
        Some(serde_json::Value::String(id)) => Ok(id.clone()),
        Some(other) => Err(format!("context_id is not a string: {other}")),
        None => Err("no context_id field".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{Fingerprint, ShardSpec};

    fn shard(index: usize, count: usize, contexts: &[&str], seed: &str) -> ShardOutput {
        let mut fingerprint = Fingerprint::new();
        fingerprint.insert("seed".into(), seed.into());
        fingerprint.insert("input_sha256".into(), "abc".into());
        let text: String = contexts
            .iter()
            .flat_map(|c| {
                [
                    format!("{{\"context_id\":\"{c}\",\"k\":1}}\n"),
                    format!("{{\"context_id\":\"{c}\",\"k\":2}}\n"),
                ]
            })
            .collect();
        ShardOutput {
            name: format!("s{index}.jsonl"),
            sidecar: ShardSidecar {
                fingerprint,
                shard: ShardSpec { index, count },
                contexts: contexts.iter().map(|c| c.to_string()).collect(),
            },
            text,
        }
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn merges_in_input_order() {
        let shards = [shard(1, 2, &["c", "a"], "0"), shard(0, 2, &["b"], "0")];
        let merged = merge_outputs(&shards, &ids(&["a", "b", "c"]), "abc").unwrap();
        let text = String::from_utf8(merged).unwrap();
        let order: Vec<&str> = text.lines().map(|l| &l[15..16]).collect();
        assert_eq!(order, ["a", "a", "b", "b", "c", "c"]);
    }

    #[test]
    fn named_errors() {
        let input = ids(&["a", "b", "c"]);
        let e = merge_outputs(&[shard(0, 2, &["a", "b", "c"], "0")], &input, "abc");
        assert_eq!(e, Err(MergeError::MissingShard { index: 1, count: 2 }));
        let e = merge_outputs(
            &[shard(0, 2, &["a", "b"], "0"), shard(1, 2, &["b", "c"], "0")],
            &input,
            "abc",
        );
        assert!(
            matches!(e, Err(MergeError::DuplicateContext { context_id, .. }) if context_id == "b")
        );
        let e = merge_outputs(
            &[shard(0, 2, &["a", "b"], "0"), shard(1, 2, &["c"], "1")],
            &input,
            "abc",
        );
        assert!(matches!(e, Err(MergeError::FingerprintMismatch { field, .. }) if field == "seed"));
        let e = merge_outputs(
            &[shard(0, 2, &["a"], "0"), shard(1, 2, &["c"], "0")],
            &input,
            "abc",
        );
        assert!(matches!(e, Err(MergeError::MissingContext { context_id }) if context_id == "b"));
        let e = merge_outputs(&[shard(0, 1, &["a", "b", "c"], "0")], &input, "xyz");
        assert!(matches!(e, Err(MergeError::InputMismatch { .. })));
        let e = merge_outputs(&[shard(0, 1, &["a", "b", "c", "d"], "0")], &input, "abc");
        assert!(matches!(e, Err(MergeError::ForeignContext { .. })));
        let e = merge_outputs(
            &[shard(0, 2, &["a"], "0"), shard(0, 2, &["b"], "0")],
            &input,
            "abc",
        );
        assert!(matches!(e, Err(MergeError::DuplicateShard { .. })));
    }
}
