//! A large synthetic `compare` run as an HTML report, to measure the report's size and
//! how fast a browser opens it (scripts/check_report_in_browser.sh):
//!
//!     cargo run --release --example synthetic_report -- CONTEXTS CANDIDATES OUT.html
//!
//! Each context gets an article and candidates of realistic length (made of a fixed
//! word list), human scores, and every ordered pair's probability from the candidates'
//! latent quality with a positional bias: p_A = sigma(2 (q_A - q_B) + 0.6) plus noise.
//! No model runs: the comparisons go through the same summary as a real run.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use nlg_judge::data::{Candidate, Context};
use nlg_judge::judge::pairwise::run::summarise;
use nlg_judge::judge::pairwise::{CompareOptions, Comparison, Debias, PairwiseTemplate};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::rank::RankMethod;
use nlg_judge::report::Report;
use rand::{Rng, SeedableRng};

const WORDS: &[&str] = &[
    "the",
    "council",
    "approved",
    "a",
    "new",
    "plan",
    "for",
    "river",
    "district",
    "after",
    "months",
    "of",
    "debate",
    "residents",
    "said",
    "budget",
    "would",
    "rise",
    "by",
    "percent",
    "while",
    "school",
    "library",
    "opened",
    "on",
    "Saturday",
    "with",
    "volunteers",
    "and",
    "teachers",
    "mayor",
    "announced",
    "that",
    "funding",
    "came",
    "from",
    "private",
    "donors",
    "critics",
    "argued",
    "cost",
    "too",
    "high",
    "but",
    "supporters",
    "welcomed",
    "project",
];

fn sentence(rng: &mut impl Rng, words: usize) -> String {
    let mut text: Vec<&str> = (0..words)
        .map(|_| WORDS[rng.gen_range(0..WORDS.len())])
        .collect();
    let first = text[0].to_string();
    let mut out = first[..1].to_uppercase() + &first[1..];
    text.remove(0);
    for w in text {
        out.push(' ');
        out.push_str(w);
    }
    out.push('.');
    out
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: synthetic_report CONTEXTS CANDIDATES OUT.html";
    let contexts_n: usize = args.get(1).context(usage)?.parse().context(usage)?;
    let candidates_n: usize = args.get(2).context(usage)?.parse().context(usage)?;
    let out = args.get(3).context(usage)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut contexts = Vec::with_capacity(contexts_n);
    let mut comparisons = Vec::with_capacity(contexts_n);
    for d in 0..contexts_n {
        let article: Vec<String> = (0..14).map(|_| sentence(&mut rng, 22)).collect();
        let quality: Vec<f64> = (0..candidates_n).map(|_| rng.gen_range(0.0..1.0)).collect();
        let candidates = quality
            .iter()
            .enumerate()
            .map(|(k, &q)| Candidate {
                id: format!("system-{k:02}"),
                text: (0..3)
                    .map(|_| sentence(&mut rng, 18))
                    .collect::<Vec<_>>()
                    .join(" "),
                reference: None,
                scores: BTreeMap::from([(
                    "coherence".to_string(),
                    (1.0 + 4.0 * q + rng.gen_range(-0.8..0.8))
                        .round()
                        .clamp(1.0, 5.0),
                )]),
                system_id: Some(format!("system-{k:02}")),
                metadata: Default::default(),
                source: None,
            })
            .collect();
        contexts.push(Context {
            id: format!("doc-{d:04}"),
            text: article.join(" "),
            candidates,
        });
        let mut list = Vec::with_capacity(candidates_n * candidates_n);
        for i in 0..candidates_n {
            for j in (0..candidates_n).filter(|&j| j != i) {
                let x = 2.0 * (quality[i] - quality[j]) + 0.6 + rng.gen_range(-0.7..0.7);
                list.push(Comparison {
                    first: i,
                    second: j,
                    p_a: 1.0 / (1.0 + (-x).exp()),
                    label_mass: 0.8,
                    p_b: None,
                    p_tie: None,
                });
            }
        }
        comparisons.push(list);
    }
    let mut options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence")?,
        PairwiseTemplate::builtin("c1", Task::Summary)?,
    );
    options.rank = RankMethod::Soft;
    options.debias = Debias::Threshold;
    let result = summarise(&contexts, comparisons, &options)?;
    let facts = vec![
        (
            "input".to_string(),
            format!("synthetic: {contexts_n} contexts x {candidates_n} candidates"),
        ),
        (
            "model".to_string(),
            "none (probabilities drawn from latent qualities)".to_string(),
        ),
        ("attribute".to_string(), "coherence".to_string()),
        ("design".to_string(), "full".to_string()),
        ("scores".to_string(), "soft win ratio".to_string()),
        (
            "debiasing".to_string(),
            format!("balanced threshold tau = {:.4}", result.tau),
        ),
    ];
    let report = Report::from_compare(
        &format!("Synthetic run: {contexts_n} contexts x {candidates_n} candidates"),
        facts,
        &result,
        &contexts,
        "soft win ratio",
    )?;
    report.write(std::path::Path::new(out))?;
    eprintln!("wrote {out}");
    Ok(())
}
