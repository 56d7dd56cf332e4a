//! A BERT encoder (candle-transformers' implementation) with its tokenizer: text in,
//! one contextual embedding per token out (the last hidden layer, [CLS] and [SEP]
//! included). Used by BERTScore; knows nothing of metrics.

use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::Tokenizer;

/// An encoder and its tokenizer.
pub struct BertEncoder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    max_positions: usize,
}

/// One text's tokens and their embeddings.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEmbeddings {
    pub ids: Vec<u32>,
    /// One row per token.
    pub vectors: Vec<Vec<f32>>,
}

impl BertEncoder {
    /// Load from `config.json`, `model.safetensors` and `tokenizer.json`.
    pub fn load(config: &Path, weights: &Path, tokenizer: &Path, device: &Device) -> Result<Self> {
        let text = std::fs::read_to_string(config)
            .with_context(|| format!("cannot read {}", config.display()))?;
        let config: Config = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a BERT config", config.display()))?;
        let max_positions = config.max_position_embeddings;
        // SAFETY: the weights file is not modified while mapped (it sits in our cache).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, device) }
            .with_context(|| format!("cannot map {}", weights.display()))?;
        let model = BertModel::load(vb, &config)
            .with_context(|| format!("{} is not a BERT checkpoint", weights.display()))?;
        let mut tokenizer = Tokenizer::from_file(tokenizer)
            .map_err(|e| anyhow!("cannot read {}: {e}", tokenizer.display()))?;
        // sentence-transformers ships tokenizer.json padded to a fixed length: one text at
        // a time needs neither padding nor its truncation (we cut to the model's length).
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| anyhow!("cannot turn off truncation: {e}"))?;
        Ok(Self {
            model,
            tokenizer,
            device: device.clone(),
            max_positions,
        })
    }

    /// Token ids with [CLS] and [SEP] (the tokenizer's post-processing), cut to the
    /// model's longest input.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| anyhow!("cannot tokenise {text:?}: {e}"))?;
        let mut ids = encoding.get_ids().to_vec();
        if ids.len() > self.max_positions {
            let last = *ids.last().context("empty encoding")?;
            ids.truncate(self.max_positions - 1);
            ids.push(last);
        }
        Ok(ids)
    }

    /// The last hidden layer's vector of every token of `text`.
    pub fn embed(&self, text: &str) -> Result<TokenEmbeddings> {
        let ids = self.encode(text)?;
        let input = Tensor::new(ids.as_slice(), &self.device)?.unsqueeze(0)?;
        let types = input.zeros_like()?;
        let hidden = self.model.forward(&input, &types, None)?;
        let vectors = hidden.squeeze(0)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        Ok(TokenEmbeddings { ids, vectors })
    }

    /// The ids of [CLS] and [SEP] (weight 0 in BERTScore).
    pub fn special_ids(&self) -> Vec<u32> {
        ["[CLS]", "[SEP]"]
            .iter()
            .filter_map(|t| self.tokenizer.token_to_id(t))
            .collect()
    }
}
