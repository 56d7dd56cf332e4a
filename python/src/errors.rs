//! Rust errors as Python exceptions, with the message the command line prints (the error
//! chain, joined by ": "): `ValueError` for the caller's input (bad options, bad rows, a
//! request the model cannot take: what makes the command exit with 2), `NlgJudgeError`
//! for everything else.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::PyErr;

use nlg_judge::cli::{exit_code, input_error};

create_exception!(
    nlg_judge,
    NlgJudgeError,
    PyException,
    "A failure of nlg-judge that is not the caller's input: model files, the model, the \
     result cache, reading or writing files."
);

/// Mark `error` as the caller's input's fault (the command line's `InputError`).
pub fn input(error: anyhow::Error) -> anyhow::Error {
    input_error(error)
}

/// The Python exception for `error`.
pub fn to_py(error: anyhow::Error) -> PyErr {
    let text = error
        .chain()
        .map(|cause| cause.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    if exit_code(&error) == 2 {
        PyValueError::new_err(text)
    } else {
        NlgJudgeError::new_err(text)
    }
}

/// `?` on library results inside Python methods.
pub trait OrPy<T> {
    fn or_py(self) -> pyo3::PyResult<T>;
}

impl<T> OrPy<T> for anyhow::Result<T> {
    fn or_py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
