//! The evaluation step of `nlg-judge pararef`: correlations, the Markdown report and the
//! figure, written into the output directory.

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::metrics::LexicalMetric;
use crate::pararef::evaluate::evaluate;
use crate::pararef::experiment::{Dataset, Paraphrased};
use crate::pararef::report::{figure, markdown};
use crate::reproduce::figure::{write_png, write_svg};

/// The numbers of paraphrases the tables and the figure show (those up to n).
pub const KS: [usize; 5] = [1, 2, 5, 10, 20];

pub fn write(
    out_dir: &Path,
    model: &str,
    datasets: &[Dataset],
    paraphrased: &[Paraphrased],
) -> Result<()> {
    let results: Vec<_> = datasets
        .iter()
        .zip(paraphrased)
        .map(|(dataset, para)| {
            let ks: Vec<usize> = KS.iter().copied().filter(|&k| k <= dataset.n).collect();
            evaluate(dataset, &para.rows, &LexicalMetric::ALL, &ks)
        })
        .collect();
    let text = markdown(model, &results, paraphrased);
    let report = out_dir.join("pararef.md");
    std::fs::write(&report, &text).with_context(|| format!("cannot write {}", report.display()))?;
    let figure = figure(model, &results);
    write_png(&figure, &out_dir.join("pararef.png"))?;
    write_svg(&figure, &out_dir.join("pararef.svg"))?;
    println!("{text}");
    eprintln!("report: {}", report.display());
    Ok(())
}
