//! The Para-Ref experiment's data: WMT22 zh-en and de-en (two human references, the
//! systems' outputs, DA z-scores per segment) and SummEval (eleven references per
//! document), read from the shared data directory, and the seeded random subsets this
//! machine can afford.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::Value;

/// One system output with its human score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredOutput {
    pub system: String,
    pub text: String,
    pub human: f64,
}

/// One source segment (WMT) or document (SummEval) with its references and outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: String,
    /// Human references; the first is the one paraphrased.
    pub references: Vec<String>,
    pub outputs: Vec<ScoredOutput>,
}

fn read_lines(path: &Path) -> Result<Vec<String>> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .lines()
        .map(str::to_string)
        .collect())
}

/// WMT22 `pair` ("zh-en", "de-en"): per segment, references A and B and the outputs of
/// the systems with a DA z-score for it (HUMAN-B, reference B scored as a system, is not
/// an output). DA rows naming the same system and segment twice are averaged.
pub fn read_wmt22(data_dir: &Path, pair: &str) -> Result<Vec<Item>> {
    let dir = data_dir.join("wmt22");
    let ref_a = read_lines(&dir.join(format!("generaltest2022.{pair}.ref.A.en")))?;
    let ref_b = read_lines(&dir.join(format!("generaltest2022.{pair}.ref.B.en")))?;
    if ref_a.len() != ref_b.len() {
        bail!(
            "{pair}: references A and B have {} and {} lines",
            ref_a.len(),
            ref_b.len()
        );
    }
    let scores_path = dir.join(format!("ad-seg-scores-{pair}.csv"));
    let text = std::fs::read_to_string(&scores_path)
        .with_context(|| format!("cannot read {}", scores_path.display()))?;
    let mut scores: BTreeMap<(usize, String), (f64, usize)> = BTreeMap::new();
    for (index, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 {
            bail!(
                "{}:{}: expected SYS SID RAW.SCR Z.SCR",
                scores_path.display(),
                index + 1
            );
        }
        let system = fields[0]
            .rsplit_once('.')
            .map_or(fields[0], |(name, _)| name);
        if system == "HUMAN-B" {
            continue;
        }
        let sid: usize = fields[1]
            .parse()
            .with_context(|| format!("{}:{}: bad SID", scores_path.display(), index + 1))?;
        let z: f64 = fields[3]
            .parse()
            .with_context(|| format!("{}:{}: bad Z.SCR", scores_path.display(), index + 1))?;
        let slot = scores.entry((sid, system.to_string())).or_insert((0.0, 0));
        slot.0 += z;
        slot.1 += 1;
    }
    let mut outputs: HashMap<String, Vec<String>> = HashMap::new();
    let mut items: BTreeMap<usize, Item> = BTreeMap::new();
    for ((sid, system), (sum, count)) in scores {
        if !outputs.contains_key(&system) {
            let path = dir
                .join("system-outputs")
                .join(format!("generaltest2022.{pair}.hyp.{system}.en"));
            outputs.insert(system.clone(), read_lines(&path)?);
        }
        let lines = &outputs[&system];
        let (Some(text), Some(a), Some(b)) =
            (lines.get(sid - 1), ref_a.get(sid - 1), ref_b.get(sid - 1))
        else {
            bail!("{pair}: segment {sid} of {system} is past the end of the files");
        };
        let item = items.entry(sid).or_insert_with(|| Item {
            id: format!("{pair}:{sid}"),
            references: vec![a.clone(), b.clone()],
            outputs: Vec::new(),
        });
        item.outputs.push(ScoredOutput {
            system,
            text: text.clone(),
            human: sum / count as f64,
        });
    }
    Ok(items
        .into_values()
        .filter(|item| item.references.iter().all(|r| !r.trim().is_empty()))
        .filter(|item| item.outputs.iter().all(|o| !o.text.trim().is_empty()))
        .collect())
}

/// SummEval: per document, its eleven references (the first is paraphrased) and the 16
/// system summaries with the expert score of `attribute`.
pub fn read_summeval(data_dir: &Path, attribute: &str) -> Result<Vec<Item>> {
    let path = data_dir.join("summeval").join("summeval.jsonl");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut items: Vec<Item> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), index + 1);
        let row: Value = serde_json::from_str(line).with_context(at)?;
        let field = |name: &str| {
            row.get(name)
                .with_context(|| format!("{}: missing field '{name}'", at()))
        };
        let doc = field("doc_id")?.as_str().unwrap_or_default().to_string();
        let references: Vec<String> = field("references")?
            .as_array()
            .with_context(|| format!("{}: 'references' is not a list", at()))?
            .iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect();
        let output = ScoredOutput {
            system: field("system_id")?.as_str().unwrap_or_default().to_string(),
            text: field("summary")?.as_str().unwrap_or_default().to_string(),
            human: field(attribute)?
                .as_f64()
                .with_context(|| format!("{}: '{attribute}' is not a number", at()))?,
        };
        match items.last_mut() {
            Some(item) if item.id == doc => item.outputs.push(output),
            _ => items.push(Item {
                id: doc,
                references,
                outputs: vec![output],
            }),
        }
    }
    Ok(items)
}

/// `count` items chosen at random under `seed` (all when fewer), in their original order.
pub fn subset(items: &[Item], count: usize, seed: u64) -> Vec<Item> {
    let mut indices: Vec<usize> = (0..items.len()).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    indices.shuffle(&mut rng);
    indices.truncate(count);
    indices.sort_unstable();
    indices.into_iter().map(|i| items[i].clone()).collect()
}
