//! The evaluation step of `nlg-judge pararef`: correlations, the Markdown report and the
//! figure, written into the output directory.

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::figure::write as write_figure;
use crate::metrics::LexicalMetric;
use crate::pararef::evaluate::evaluate;
use crate::pararef::experiment::{Dataset, Paraphrased};
use crate::pararef::report::{figure, markdown, read_markdown};

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
    write_figure(&figure, &out_dir.join("pararef.png"))?;
    write_figure(&figure, &out_dir.join("pararef.svg"))?;
    println!("{text}");
    eprintln!("report: {}", report.display());
    Ok(())
}

/// Draw the figure again from the report in `out_dir`.
pub fn redraw(out_dir: &Path) -> Result<()> {
    let report = out_dir.join("pararef.md");
    let text = std::fs::read_to_string(&report)
        .with_context(|| format!("cannot read {}", report.display()))
        .map_err(super::input_error)?;
    let (model, results) = read_markdown(&text)
        .with_context(|| format!("{}", report.display()))
        .map_err(super::input_error)?;
    let figure = figure(&model, &results);
    for name in ["pararef.png", "pararef.svg"] {
        let path = out_dir.join(name);
        write_figure(&figure, &path)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
