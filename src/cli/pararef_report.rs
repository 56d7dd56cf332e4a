//! Writing the Para-Ref experiment's report (filled in by the evaluation step).

use std::path::Path;

use anyhow::{bail, Result};

use crate::pararef::experiment::{Dataset, Paraphrased};

pub fn write(
    _out_dir: &Path,
    _model: &str,
    _datasets: &[Dataset],
    _paraphrased: &[Paraphrased],
) -> Result<()> {
    bail!("the evaluation step is not built yet: run with --paraphrase-only")
}
