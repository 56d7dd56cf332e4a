//! Values across the border: option names parsed with the command line's own names
//! (clap's `ValueEnum` of the core's enums), input data as a path or as located JSON
//! rows, results as JSON text (parsed by the Python side, exactly: floats round-trip).

use std::path::PathBuf;

use anyhow::{anyhow, Context as _, Result};
use clap::ValueEnum;
use pyo3::prelude::*;

use nlg_judge::data::{contexts_from_rows, read_contexts, read_single_contexts, Context};

use crate::errors::input;

/// Input data: a JSONL file, or rows as JSON texts with where each came from (`row 3`).
pub enum Source {
    Path(PathBuf),
    Rows(Vec<(String, String)>),
}

impl Source {
    /// From what `nlg_judge._data.source()` gives: a path string or a list of
    /// `(location, json)` pairs.
    pub fn extract(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(path) = value.extract::<String>() {
            return Ok(Source::Path(PathBuf::from(path)));
        }
        Ok(Source::Rows(value.extract::<Vec<(String, String)>>()?))
    }

    /// The contexts, grouped as the command line groups a file (`min_candidates` 2 for
    /// comparison, 1 for scoring); errors are the input's.
    pub fn contexts(&self, min_candidates: usize) -> Result<Vec<Context>> {
        match self {
            Source::Path(path) if min_candidates >= 2 => read_contexts(path),
            Source::Path(path) => read_single_contexts(path),
            Source::Rows(rows) => contexts_from_rows(rows, min_candidates),
        }
        .map_err(input)
    }
}

/// `value` as one of `T`'s command-line names; the error names the keyword and lists the
/// possible values.
pub fn choice<T: ValueEnum>(keyword: &str, value: &str) -> Result<T> {
    T::from_str(value, false).map_err(|_| {
        input(anyhow!(
            "{keyword}: invalid value '{value}' (possible values: {})",
            names::<T>().join(", ")
        ))
    })
}

/// An optional choice.
pub fn optional_choice<T: ValueEnum>(keyword: &str, value: Option<&str>) -> Result<Option<T>> {
    value.map(|v| choice(keyword, v)).transpose()
}

/// `T`'s command-line names.
pub fn names<T: ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// A value parsed with `FromStr`, the error the input's and named by its keyword.
pub fn parsed<T>(keyword: &str, value: Option<&str>) -> Result<Option<T>>
where
    T: std::str::FromStr,
    T::Err: Into<anyhow::Error>,
{
    value
        .map(|text| {
            text.parse::<T>()
                .map_err(|e| input(e.into().context(format!("{keyword}: '{text}'"))))
        })
        .transpose()
}

/// Serialize `value` as JSON text.
pub fn to_json(value: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(value).context("cannot serialise the result")
}
