//! `nlg_judge._native`: the Rust side of the Python package. Thin by design: every
//! result comes from the library's own routes (the ones the command line takes), this
//! crate only carries values across, runs model work off the interpreter's lock, relays
//! progress and Ctrl-C, and turns errors into Python exceptions. The Python side
//! (`python/nlg_judge/`) shapes inputs (lists, DataFrames, paths) and outputs (NumPy,
//! pandas, tqdm).

mod convert;
mod errors;
mod functions;
mod judge;
mod jury;
mod results;
mod worker;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    nlg_judge::allocations::keep_freed_memory();
    let py = m.py();
    m.add("NlgJudgeError", py.get_type::<errors::NlgJudgeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<judge::NativeJudge>()?;
    m.add_class::<results::NativeCompareResult>()?;
    m.add_class::<results::NativeScoreResult>()?;
    m.add_class::<jury::NativeJuryResult>()?;
    m.add_function(wrap_pyfunction!(jury::check_jury_weights, m)?)?;
    m.add_function(wrap_pyfunction!(jury::jury_compare, m)?)?;
    m.add_function(wrap_pyfunction!(jury::jury_scores, m)?)?;
    m.add_function(wrap_pyfunction!(functions::correlate, m)?)?;
    m.add_function(wrap_pyfunction!(functions::metric_rows, m)?)?;
    m.add_function(wrap_pyfunction!(functions::corpus_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(functions::dhp_perturb, m)?)?;
    m.add_function(wrap_pyfunction!(functions::dhp_analyze, m)?)?;
    m.add_function(wrap_pyfunction!(functions::run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(functions::choices, m)?)?;
    m.add_function(wrap_pyfunction!(functions::defaults, m)?)?;
    Ok(())
}
