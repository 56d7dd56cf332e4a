//! BERTScore's greedy matching (Zhang et al., 2020): every candidate token is matched to
//! its most similar reference token by cosine similarity (precision) and every reference
//! token to its most similar candidate token (recall), each token weighted 1 or by its
//! idf over the references, [CLS] and [SEP] weighted 0 (they still take part in the
//! matching, as in the bert-score package); F1 is the harmonic mean. No baseline
//! rescaling. Embeddings: the last hidden layer of the encoder (for all-MiniLM-L6-v2,
//! layer 6 of 6). The paper's BERTScore used larger encoders.

use std::collections::{HashMap, HashSet};

use anyhow::{bail, Result};

use crate::arch::bert::{BertEncoder, TokenEmbeddings};

/// Precision, recall and F1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BertScore {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Token weights: 1 for every token, or idf over a set of references.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdfWeights {
    /// `None`: every token weighs 1.
    idf: Option<(HashMap<u32, f64>, f64)>,
    special: HashSet<u32>,
}

impl IdfWeights {
    /// Every token 1, `special` tokens 0.
    pub fn uniform(special: &[u32]) -> Self {
        Self {
            idf: None,
            special: special.iter().copied().collect(),
        }
    }

    /// idf(w) = ln((M + 1) / (df(w) + 1)) over the M tokenised references (as the
    /// bert-score package), `special` tokens 0.
    pub fn from_references(references: &[Vec<u32>], special: &[u32]) -> Self {
        let mut df: HashMap<u32, f64> = HashMap::new();
        for ids in references {
            for id in ids.iter().copied().collect::<HashSet<_>>() {
                *df.entry(id).or_insert(0.0) += 1.0;
            }
        }
        let m = references.len() as f64;
        let idf = df
            .into_iter()
            .map(|(id, count)| (id, ((m + 1.0) / (count + 1.0)).ln()))
            .collect();
        Self {
            idf: Some((idf, (m + 1.0).ln())),
            special: special.iter().copied().collect(),
        }
    }

    pub fn weight(&self, id: u32) -> f64 {
        if self.special.contains(&id) {
            return 0.0;
        }
        match &self.idf {
            None => 1.0,
            Some((idf, unseen)) => idf.get(&id).copied().unwrap_or(*unseen),
        }
    }
}

fn unit_rows(vectors: &[Vec<f32>]) -> Vec<Vec<f64>> {
    vectors
        .iter()
        .map(|v| {
            let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            v.iter().map(|&x| x as f64 / norm).collect()
        })
        .collect()
}

/// Greedy cosine matching of two embedded texts.
pub fn greedy_match(
    candidate: &TokenEmbeddings,
    reference: &TokenEmbeddings,
    weights: &IdfWeights,
) -> Result<BertScore> {
    if candidate.vectors.is_empty() || reference.vectors.is_empty() {
        bail!("BERTScore needs at least one token on each side");
    }
    let c = unit_rows(&candidate.vectors);
    let r = unit_rows(&reference.vectors);
    let sim: Vec<Vec<f64>> = c
        .iter()
        .map(|cv| {
            r.iter()
                .map(|rv| cv.iter().zip(rv).map(|(a, b)| a * b).sum())
                .collect()
        })
        .collect();
    let weighted = |best: Vec<f64>, ids: &[u32]| {
        let w: Vec<f64> = ids.iter().map(|&id| weights.weight(id)).collect();
        let total: f64 = w.iter().sum();
        if total == 0.0 {
            0.0
        } else {
            best.iter().zip(&w).map(|(s, w)| s * w).sum::<f64>() / total
        }
    };
    let best_c: Vec<f64> = sim
        .iter()
        .map(|row| row.iter().copied().fold(f64::NEG_INFINITY, f64::max))
        .collect();
    let best_r: Vec<f64> = (0..r.len())
        .map(|j| {
            sim.iter()
                .map(|row| row[j])
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    let precision = weighted(best_c, &candidate.ids);
    let recall = weighted(best_r, &reference.ids);
    let f1 = if precision + recall > 0.0 {
        2.0 * precision * recall / (precision + recall)
    } else {
        0.0
    };
    Ok(BertScore {
        precision,
        recall,
        f1,
    })
}

/// BERTScore of a candidate against one reference with an encoder.
pub fn bertscore(
    encoder: &BertEncoder,
    candidate: &str,
    reference: &str,
    weights: &IdfWeights,
) -> Result<BertScore> {
    greedy_match(
        &encoder.embed(candidate)?,
        &encoder.embed(reference)?,
        weights,
    )
}

/// The BERTScore encoder's model card.
pub const ENCODER_CARD: &str = "all-minilm-l6-v2";

/// Fetch (if needed) and load the encoder of card `card` on the CPU.
pub fn load_encoder(card: &str, options: &crate::runtime::FetchOptions) -> Result<BertEncoder> {
    use crate::runtime::card::FileRole;
    let catalog = crate::runtime::CardCatalog::from_env()?;
    let Some(card) = catalog.get(card) else {
        bail!("unknown model card '{card}'");
    };
    let files = crate::runtime::fetch_card(card, options)?;
    let path = |role: FileRole| {
        files
            .iter()
            .find(|f| f.role == role)
            .map(|f| f.path.clone())
            .ok_or_else(|| anyhow::anyhow!("card {} has no {role:?} file", card.name))
    };
    BertEncoder::load(
        &path(FileRole::Config)?,
        &path(FileRole::Weights)?,
        &path(FileRole::Tokenizer)?,
        &candle_core::Device::Cpu,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ids: &[u32], vectors: &[[f32; 2]]) -> TokenEmbeddings {
        TokenEmbeddings {
            ids: ids.to_vec(),
            vectors: vectors.iter().map(|v| v.to_vec()).collect(),
        }
    }

    #[test]
    fn identical_texts_score_one_and_specials_weigh_nothing() {
        let a = text(
            &[101, 5, 6, 102],
            &[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]],
        );
        let score = greedy_match(&a, &a, &IdfWeights::uniform(&[101, 102])).unwrap();
        assert!((score.f1 - 1.0).abs() < 1e-12);
        // Token 6 matches token 5 at cos 45 degrees; [CLS]/[SEP] do not count.
        let b = text(&[101, 5, 102], &[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]);
        let score = greedy_match(&a, &b, &IdfWeights::uniform(&[101, 102])).unwrap();
        let half = std::f64::consts::FRAC_1_SQRT_2;
        assert!((score.precision - (1.0 + half) / 2.0).abs() < 1e-12);
        assert!((score.recall - 1.0).abs() < 1e-12);
    }

    #[test]
    fn idf_follows_document_frequency() {
        let w = IdfWeights::from_references(&[vec![1, 2], vec![1, 3]], &[]);
        assert!((w.weight(1) - (3.0f64 / 3.0).ln()).abs() < 1e-12);
        assert!((w.weight(2) - (3.0f64 / 2.0).ln()).abs() < 1e-12);
        assert!((w.weight(9) - 3.0f64.ln()).abs() < 1e-12);
    }
}
