//! Sentence embeddings for recall.
//!
//! * [`Encoder`] — the seam: a model that turns texts into unit vectors,
//!   with an identity string recorded next to every vector it makes.
//! * [`Vector`] — a compact stored vector: one signed byte per dimension
//!   and one scale (`384 + 4` bytes for the bundled model, not `4 × 384`),
//!   and the cosine of two of them.
//! * [`bundled`] — the model compiled into the binary (cargo feature
//!   `pocket`, on by default): `pocket-encoder`, paraphrase-MiniLM-L3-v2
//!   quantized, weights inside the crate. Nothing is fetched at run time.
//!
//! Architecture invariant: this crate knows nothing of memories, users or
//! databases. `zm-store` decides what is embedded, where vectors live and
//! who may compare against them.

use std::sync::Arc;

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model could not be loaded.
    #[error("the embedding model could not be loaded: {0}")]
    Load(String),
    /// A text the model refuses (blank; through `pocket-encoder`, also
    /// more than 64 KiB, or a call over 4096 texts or 4 MiB).
    #[error("the text cannot be embedded: {0}")]
    Input(String),
    /// Inference failed.
    #[error("embedding failed: {0}")]
    Inference(String),
}

/// A model that embeds texts as unit vectors (L2-normalized).
pub trait Encoder: Send + Sync + 'static {
    /// The model's identity: two vectors are only ever compared when both
    /// were made by the same identity. Changing it re-embeds everything.
    fn model(&self) -> &str;
    /// The vectors' dimension.
    fn dims(&self) -> usize;
    /// One unit vector per text, in order. Blocking and CPU-bound: call it
    /// off the async runtime's workers.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Does a batch run on the calling thread and threads
    /// [`Encoder::embed`] starts for it, which end with the call (and
    /// inherit the caller's priority), rather than on a pool that outlives
    /// the call? Only for such a model does the background embedder run
    /// its batches at a lowered priority: a pool started from a lowered
    /// thread would stay lowered, and embed recall's queries too.
    fn batches_on_threads_of_their_own(&self) -> bool {
        false
    }
}

/// A vector as stored and compared: `values[i] × scale` approximates the
/// unit vector's coordinate `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    scale: f32,
    values: Box<[i8]>,
}

impl Vector {
    /// A model's output as a vector to store and compare, if it is one:
    /// every coordinate finite and not all zero. An infinite or NaN
    /// coordinate would make every cosine with it NaN (and [`quantize`]'s
    /// scale infinite, so its bytes would not read back).
    ///
    /// [`quantize`]: Vector::quantize
    pub fn of_output(v: &[f32]) -> Option<Vector> {
        (v.iter().all(|x| x.is_finite()) && v.iter().any(|x| *x != 0.0))
            .then(|| Vector::quantize(v))
    }

    /// Quantize a vector: the largest coordinate (in absolute value) maps
    /// to ±127. The cosine of two quantized unit vectors is within about
    /// 0.01 of the exact one (see the tests).
    pub fn quantize(v: &[f32]) -> Vector {
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let values = v
            .iter()
            .map(|x| {
                let q = (x / scale).round().clamp(-127.0, 127.0);
                // In [-127, 127] after the clamp.
                #[allow(clippy::cast_possible_truncation)]
                let q = q as i8;
                q
            })
            .collect();
        // Normalise so that `dot(self, self) × scale²` is 1: the cosine of
        // two quantized vectors is then their scaled dot product.
        let mut out = Vector { scale, values };
        let norm = f64::from(out.raw_dot(&out)).sqrt();
        if norm > 0.0 {
            #[allow(clippy::cast_possible_truncation)]
            let s = (1.0 / norm) as f32;
            out.scale = s;
        }
        out
    }

    /// The scale: coordinate `i` is `values()[i] as f32 * scale()`.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The int8 coordinates.
    pub fn values(&self) -> &[i8] {
        &self.values
    }

    /// The dimension.
    pub fn dims(&self) -> usize {
        self.values.len()
    }

    /// The cosine of two vectors of the same model (0 when the dimensions
    /// differ).
    pub fn cosine(&self, other: &Vector) -> f32 {
        if self.values.len() != other.values.len() {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let dot = self.raw_dot(other) as f32;
        dot * self.scale * other.scale
    }

    /// The integer dot product.
    fn raw_dot(&self, other: &Vector) -> i32 {
        dot_i8(&self.values, &other.values)
    }

    /// The stored form: the scale (f32, little-endian), then one byte per
    /// dimension.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.values.len());
        out.extend_from_slice(&self.scale.to_le_bytes());
        out.extend(self.values.iter().map(|v| v.to_le_bytes()[0]));
        out
    }

    /// Read the stored form; `None` when it is not `4 + dims` bytes.
    pub fn from_bytes(bytes: &[u8], dims: usize) -> Option<Vector> {
        if bytes.len() != 4 + dims {
            return None;
        }
        let scale = f32::from_le_bytes(bytes[..4].try_into().ok()?);
        if !scale.is_finite() {
            return None;
        }
        let values = bytes[4..].iter().map(|b| i8::from_le_bytes([*b])).collect();
        Some(Vector { scale, values })
    }
}

/// The dot product of two byte vectors, accumulated in 32 bits.
/// (Always inlined, so a caller compiled for a wider instruction set
/// vectorises it with that set.)
#[inline(always)]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    // Chunks of 32 with 32 independent accumulators: the form the compiler
    // vectorises best on baseline x86-64 (2.2x faster than chunks of 16 on
    // a 100k-vector scan; chunks of 64 are slower again).
    let mut acc = [0i32; 32];
    let (ac, ar) = a.as_chunks::<32>();
    let (bc, br) = b.as_chunks::<32>();
    for (x, y) in ac.iter().zip(bc) {
        for i in 0..32 {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    let mut sum: i32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

/// The model compiled into this binary, if any: `None` when built without
/// the `pocket` feature. Loading takes a few hundred milliseconds, and our
/// forward pass keeps the weights as bytes: 19 MB, against 68 MB as f32
/// (`blocked.rs`; the server's peak RSS fell from 197 to 148 MiB,
/// docs/BENCHMARKS.md). Do it once, off the async runtime.
pub fn bundled() -> Option<Result<Arc<dyn Encoder>, EmbedError>> {
    #[cfg(feature = "pocket")]
    {
        Some(pocket::Pocket::load().map(|p| Arc::new(p) as Arc<dyn Encoder>))
    }
    #[cfg(not(feature = "pocket"))]
    {
        None
    }
}

/// A sentence-transformers model (BERT or MPNet family, mean pooling) from a
/// directory, instead of the bundled one: `None` in a build without the
/// model support (the `pocket` feature).
pub fn from_dir(dir: &std::path::Path) -> Option<Result<Arc<dyn Encoder>, EmbedError>> {
    #[cfg(feature = "pocket")]
    {
        Some(dir::DirModel::load(dir).map(|m| Arc::new(m) as Arc<dyn Encoder>))
    }
    #[cfg(not(feature = "pocket"))]
    {
        let _ = dir;
        None
    }
}

/// The model to embed with: the one in `dir` when given (see
/// [`from_dir`]), else the bundled one; `None` in a build without model
/// support.
pub fn load(dir: Option<&std::path::Path>) -> Option<Result<Arc<dyn Encoder>, EmbedError>> {
    match dir {
        Some(d) => from_dir(d),
        None => bundled(),
    }
}

/// The identity of the bundled model without loading it (`None` without
/// one).
pub fn bundled_model() -> Option<String> {
    #[cfg(feature = "pocket")]
    {
        Some(pocket::identity())
    }
    #[cfg(not(feature = "pocket"))]
    {
        None
    }
}

#[cfg(feature = "pocket")]
mod blocked;
#[cfg(feature = "pocket")]
mod dir;
#[cfg(feature = "pocket")]
mod gelu;
#[cfg(feature = "pocket")]
mod native;

#[cfg(feature = "pocket")]
mod pocket {
    use super::{EmbedError, Encoder};

    /// `pocket-encoder`: paraphrase-MiniLM-L3-v2, 4-bit weights in the
    /// crate, 384 dimensions, 128 tokens (longer texts are cut).
    pub(crate) struct Pocket {
        engine: Engine,
        model: String,
    }

    /// What runs the bundled weights.
    pub(crate) enum Engine {
        /// Our forward pass ([`crate::native`]) over the crate's own weight
        /// file, found at build time (see `build.rs`).
        #[cfg(zm_native_pocket)]
        Native(Box<crate::native::TextModel>),
        /// `pocket-encoder` itself (candle; its own f32 code on Linux
        /// ARM64): when the build found no weight file, or it is not the
        /// one `pocket-encoder` was published with.
        Crate(pocket_encoder::Encoder),
    }

    /// `<id>@<weights sha256>`.
    pub(crate) fn identity() -> String {
        let info = pocket_encoder::model_info();
        format!("{}@{}", info.id, info.revision)
    }

    impl Pocket {
        pub(crate) fn load() -> Result<Pocket, EmbedError> {
            #[cfg(zm_native_pocket)]
            if let Some(native) = native::load()? {
                return Ok(Pocket {
                    engine: Engine::Native(Box::new(native)),
                    model: identity(),
                });
            }
            let inner =
                pocket_encoder::Encoder::new().map_err(|e| EmbedError::Load(e.to_string()))?;
            Ok(Pocket {
                engine: Engine::Crate(inner),
                model: identity(),
            })
        }

        #[cfg(test)]
        pub(crate) fn engine(&self) -> &Engine {
            &self.engine
        }
    }

    impl Encoder for Pocket {
        fn model(&self) -> &str {
            &self.model
        }
        fn dims(&self) -> usize {
            pocket_encoder::model_info().dimensions
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            match &self.engine {
                #[cfg(zm_native_pocket)]
                Engine::Native(m) => m.embed_all(texts),
                Engine::Crate(e) => e.embed(texts).map_err(|e| match e {
                    pocket_encoder::Error::Input(m) => EmbedError::Input(m.to_string()),
                    pocket_encoder::Error::Inference(m) => EmbedError::Inference(m),
                }),
            }
        }
        /// Our forward pass spreads a batch over scoped threads of its
        /// own; candle's multiply (the fallback) runs on rayon's global
        /// pool, which outlives the call.
        fn batches_on_threads_of_their_own(&self) -> bool {
            match &self.engine {
                #[cfg(zm_native_pocket)]
                Engine::Native(_) => true,
                Engine::Crate(_) => false,
            }
        }
    }

    /// The bundled weights in our forward pass.
    #[cfg(zm_native_pocket)]
    pub(crate) mod native {
        use sha2::Digest;

        use crate::EmbedError;
        use crate::blocked::Quantized;
        use crate::native::{Bert, Config, Tensor, TextModel, safetensor};

        pub(crate) const WEIGHTS: &[u8] = include_bytes!(env!("ZM_POCKET_WEIGHTS"));
        pub(crate) const TOKENIZER: &[u8] = include_bytes!(env!("ZM_POCKET_TOKENIZER"));
        pub(crate) const CONFIG: &[u8] = include_bytes!(env!("ZM_POCKET_CONFIG"));

        /// The sha256 of `assets/config.json` in `pocket-encoder` 0.1.2
        /// (the version Cargo.toml pins): `model_info()` carries no hash
        /// of it, and it decides the forward pass (its layer-norm epsilon,
        /// its activation) as much as the weights do.
        const CONFIG_SHA256: &str =
            "fc00f0ca1c3380f17937a4050908dd2cf743c36bebe437cf448b8aa4e7ddfe4d";

        /// Whether the files the build found are the ones `pocket-encoder`
        /// was published with (its `model_info()` carries the weights' and
        /// the tokenizer's sha256).
        pub(crate) fn genuine() -> bool {
            let info = pocket_encoder::model_info();
            let sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
            info.revision == format!("sha256:{}", sha(WEIGHTS))
                && info.tokenizer_sha256 == sha(TOKENIZER)
                && sha(CONFIG) == CONFIG_SHA256
        }

        /// The bundled model in our forward pass; `None` when the files
        /// are not `pocket-encoder`'s own.
        pub(crate) fn load() -> Result<Option<TextModel>, EmbedError> {
            load_with(Tensor::Quantized)
        }

        /// The same, with `keep` deciding what a quantized tensor becomes
        /// (kept as it is, or dequantized for `gemm`: how a test checks
        /// that the two multiplies agree).
        pub(crate) fn load_with(
            keep: fn(Quantized) -> Tensor,
        ) -> Result<Option<TextModel>, EmbedError> {
            if !genuine() {
                return Ok(None);
            }
            let load =
                |e: &dyn std::fmt::Display| EmbedError::Load(format!("the bundled model: {e}"));
            let json: serde_json::Value = serde_json::from_slice(CONFIG).map_err(|e| load(&e))?;
            let config = Config::from_json(&json)?;
            let file = safetensors::SafeTensors::deserialize(WEIGHTS).map_err(|e| load(&e))?;
            let bert = Bert::load(config, &mut |name, shape| {
                if shape.len() < 2 {
                    safetensor(&file, name, shape).map(Tensor::Dense)
                } else {
                    quantized(&file, name, shape).map(keep)
                }
            })?;
            let max = pocket_encoder::model_info().max_tokens;
            TextModel::new(bert, TOKENIZER, max).map(Some)
        }

        /// A 2-D tensor in `pocket-encoder`'s storage: 4-bit values in
        /// `<name>.q4` (two a byte, low nibble first, offset by 8) and one
        /// f16 scale per 32 values in `<name>.scales`.
        pub(crate) fn quantized(
            file: &safetensors::SafeTensors<'_>,
            name: &str,
            shape: &[usize],
        ) -> Result<Quantized, EmbedError> {
            let missing = || EmbedError::Load(format!("the bundled model has no tensor {name}"));
            let packed = file.tensor(&format!("{name}.q4")).map_err(|_| missing())?;
            let scales = file
                .tensor(&format!("{name}.scales"))
                .map_err(|_| missing())?;
            let scales: Vec<f32> = scales
                .data()
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect();
            let count = shape.iter().product::<usize>();
            let packed = packed.data();
            if packed.len() * 2 < count || scales.len() * crate::blocked::BLOCK < count {
                return Err(EmbedError::Load(format!(
                    "the bundled tensor {name} is truncated"
                )));
            }
            let values = (0..count)
                .map(|i| {
                    let nibble = (packed[i / 2] >> ((i % 2) * 4)) & 15;
                    // 0..=15, so the signed byte is the same number.
                    nibble.cast_signed() - 8
                })
                .collect();
            Ok(Quantized { values, scales })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NaN or infinite coordinate, or all zeros, is no vector; a finite
    /// one with a zero coordinate is.
    #[test]
    fn only_finite_nonzero_output_is_a_vector() {
        assert!(Vector::of_output(&[f32::NAN, 0.5]).is_none());
        assert!(Vector::of_output(&[f32::INFINITY, 0.0]).is_none());
        assert!(Vector::of_output(&[f32::NEG_INFINITY, 0.1]).is_none());
        assert!(Vector::of_output(&[0.0, 0.0]).is_none());
        let v = Vector::of_output(&[0.0, 2.0]).expect("a vector");
        assert!((v.cosine(&v) - 1.0).abs() < 1e-6);
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn exact(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn quantized_cosines_are_close_to_exact_ones() {
        // A deterministic spread of vectors.
        let mut seed = 0x1234_5678_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            #[allow(clippy::cast_precision_loss)]
            let x = (seed % 20_001) as f32 / 10_000.0 - 1.0;
            x
        };
        for _ in 0..50 {
            let a = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
            let b = unit(&(0..384).map(|_| next() * 0.5 + 0.0).collect::<Vec<_>>());
            let mix = unit(
                &a.iter()
                    .zip(&b)
                    .map(|(x, y)| x + 0.3 * y)
                    .collect::<Vec<_>>(),
            );
            for (x, y) in [(&a, &b), (&a, &mix), (&a, &a)] {
                let (qa, qb) = (Vector::quantize(x), Vector::quantize(y));
                let err = (qa.cosine(&qb) - exact(x, y)).abs();
                assert!(err < 0.01, "cosine off by {err}");
            }
        }
        let a = Vector::quantize(&unit(&[1.0, 2.0, 3.0]));
        assert!((a.cosine(&a) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn the_stored_form_reads_back_and_refuses_a_wrong_length() {
        let v = Vector::quantize(&unit(&[0.5, -0.25, 0.1, 0.0, 0.9]));
        let bytes = v.to_bytes();
        assert_eq!(bytes.len(), 4 + 5);
        assert_eq!(Vector::from_bytes(&bytes, 5), Some(v.clone()));
        assert_eq!(Vector::from_bytes(&bytes, 6), None);
        assert_eq!(
            v.cosine(&Vector::quantize(&[1.0; 6])),
            0.0,
            "different dimensions"
        );
    }

    #[test]
    fn dot_handles_a_tail_shorter_than_a_chunk() {
        let a: Vec<i8> = (0..37).map(|i| i8::try_from(i - 18).unwrap()).collect();
        let b: Vec<i8> = (0..37).map(|i| i8::try_from(i % 7).unwrap()).collect();
        let want: i32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum();
        assert_eq!(dot_i8(&a, &b), want);
    }

    /// Texts of the lengths recall and the embedder see: a word, queries,
    /// sentences, non-Latin text, and one past the 128-token cut.
    #[cfg(zm_native_pocket)]
    fn sample_texts() -> Vec<String> {
        vec![
            "billing".into(),
            "which datastore did we pick for invoices".into(),
            "We chose Postgres over Mongo for billing because invoices need transactions.".into(),
            "Convention: run cargo fmt before every commit; CI rejects unformatted code.".into(),
            "The dog chased the cat".into(),
            "The cat chased the dog".into(),
            "日本語 中文 مرحبا café 🦀".into(),
            "word ".repeat(300),
        ]
    }

    #[cfg(zm_native_pocket)]
    fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// The tests of our forward pass exist only where the build found
    /// `pocket-encoder`'s weights; CI sets `ZM_REQUIRE_NATIVE_POCKET` so
    /// that a build which did not find them fails here instead of
    /// skipping them silently.
    #[cfg(feature = "pocket")]
    #[test]
    fn the_forward_pass_is_ours_where_required() {
        if std::env::var_os("ZM_REQUIRE_NATIVE_POCKET").is_none() {
            return;
        }
        #[cfg(not(zm_native_pocket))]
        panic!("ZM_REQUIRE_NATIVE_POCKET is set but build.rs did not find pocket-encoder's assets");
        #[cfg(zm_native_pocket)]
        assert!(matches!(
            pocket::Pocket::load().expect("loads").engine(),
            pocket::Engine::Native(_)
        ));
    }

    /// Only our forward pass says its batches run on threads of their own
    /// (the background embedder lowers their priority); candle's pool,
    /// which outlives a call, does not.
    #[cfg(feature = "pocket")]
    #[test]
    fn only_our_forward_pass_runs_batches_on_threads_of_its_own() {
        let model = pocket::Pocket::load().expect("loads");
        let native = !matches!(model.engine(), pocket::Engine::Crate(_));
        assert_eq!(model.batches_on_threads_of_their_own(), native);
    }

    #[cfg(zm_native_pocket)]
    #[test]
    fn the_bundled_weights_run_in_our_forward_pass_and_match_pocket_encoder() {
        let ours = pocket::Pocket::load().expect("loads");
        assert!(
            matches!(ours.engine(), pocket::Engine::Native(_)),
            "the build found pocket-encoder's weights, so they must run natively"
        );
        let texts = sample_texts();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mine = ours.embed(&refs).unwrap();
        let theirs = pocket_encoder::Encoder::new()
            .unwrap()
            .embed(&refs)
            .unwrap();
        assert_eq!(mine.len(), texts.len());
        assert!(mine.iter().all(|v| v.len() == 384));
        let worst = max_abs_diff(&mine, &theirs);
        assert!(
            worst < 1e-4,
            "coordinates drift from pocket-encoder's by {worst}"
        );
        eprintln!("coordinates within {worst:e} of pocket-encoder's");
        // And so the stored form: the int8 vectors agree to within one step.
        for (a, b) in mine.iter().zip(&theirs) {
            let (qa, qb) = (Vector::quantize(a), Vector::quantize(b));
            assert!(
                qa.values()
                    .iter()
                    .zip(qb.values())
                    .all(|(x, y)| (i16::from(*x) - i16::from(*y)).abs() <= 1)
            );
        }
        assert!(matches!(ours.embed(&[" \n "]), Err(EmbedError::Input(_))));
    }

    /// The bundled model's tensors in f32: name, shape, values.
    #[cfg(zm_native_pocket)]
    fn bundled_tensors() -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let file = safetensors::SafeTensors::deserialize(pocket::native::WEIGHTS).unwrap();
        // The shapes of the f32 tensors the quantized ones stand for.
        let shapes: std::collections::HashMap<String, Vec<usize>> =
            serde_json::from_str(include_str!(env!("ZM_POCKET_SHAPES"))).unwrap();
        let mut tensors = Vec::new();
        for name in file.names() {
            let (base, quantized) = match name.strip_suffix(".q4") {
                Some(base) => (base.to_string(), true),
                None if name.ends_with(".scales") => continue,
                None => (name.to_string(), false),
            };
            let shape = shapes[&base].clone();
            let values = if quantized {
                pocket::native::quantized(&file, &base, &shape)
                    .unwrap()
                    .dequantize()
            } else {
                native::safetensor(&file, &base, &shape).unwrap()
            };
            tensors.push((base, shape, values));
        }
        tensors
    }

    /// A sentence-transformers directory of these f32 tensors (the
    /// bundled tokenizer, mean pooling, 128 tokens).
    #[cfg(zm_native_pocket)]
    fn model_directory(
        tag: &str,
        config: &[u8],
        tensors: &[(String, Vec<usize>, Vec<f32>)],
    ) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("zm-embed-dir-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .iter()
            .zip(&bytes)
            .map(|((n, s, _), b)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                        .unwrap(),
                )
            })
            .collect();
        std::fs::write(
            dir.join("model.safetensors"),
            safetensors::serialize(views, None).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        std::fs::write(dir.join("tokenizer.json"), pocket::native::TOKENIZER).unwrap();
        std::fs::write(
            dir.join("sentence_bert_config.json"),
            br#"{"max_seq_length": 128}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("1_Pooling/config.json"),
            br#"{"pooling_mode_mean_tokens": true}"#,
        )
        .unwrap();
        dir
    }

    /// A directory holding the bundled model as a sentence-transformers
    /// export (f32 safetensors, some names under `bert.`).
    #[cfg(zm_native_pocket)]
    fn bundled_as_directory(tag: &str, config: &[u8]) -> std::path::PathBuf {
        let tensors: Vec<_> = bundled_tensors()
            .into_iter()
            .map(|(name, shape, values)| {
                let name = if name.starts_with("encoder.layer.1") {
                    format!("bert.{name}")
                } else {
                    name
                };
                (name, shape, values)
            })
            .collect();
        model_directory(tag, config, &tensors)
    }

    /// The bundled BERT written as an MPNet that computes the same: its
    /// tensors under MPNet's names (layer 1's under `mpnet.`), the
    /// position table two rows later (MPNet counts from its padding id
    /// plus one) with BERT's only token type added to every row (MPNet has
    /// none), and a relative attention bias of `bias(bucket, head)`.
    #[cfg(zm_native_pocket)]
    fn bundled_as_mpnet(tag: &str, bias: impl Fn(usize, usize) -> f32) -> std::path::PathBuf {
        let tensors = bundled_tensors();
        let find = |n: &str| tensors.iter().find(|(name, _, _)| name == n).unwrap();
        let (_, _, types) = find("embeddings.token_type_embeddings.weight");
        let (_, pshape, positions) = find("embeddings.position_embeddings.weight");
        let h = pshape[1];
        let mut shifted = vec![0f32; 2 * h];
        for row in positions.chunks_exact(h) {
            shifted.extend(row.iter().zip(&types[..h]).map(|(p, t)| p + t));
        }
        let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
        for (name, shape, values) in &tensors {
            // Some under `mpnet.`, as a checkpoint saved with a task head
            // names them.
            let renamed = if name.starts_with("encoder.layer.1") {
                format!("mpnet.{name}")
            } else {
                name.clone()
            };
            let renamed = renamed
                .replace("attention.self.query", "attention.attn.q")
                .replace("attention.self.key", "attention.attn.k")
                .replace("attention.self.value", "attention.attn.v")
                .replace("attention.output.dense", "attention.attn.o")
                .replace("attention.output.LayerNorm", "attention.LayerNorm");
            match name.as_str() {
                "embeddings.token_type_embeddings.weight" => {}
                "embeddings.position_embeddings.weight" => {
                    out.push((renamed, vec![pshape[0] + 2, h], shifted.clone()));
                }
                _ => out.push((renamed, shape.clone(), values.clone())),
            }
        }
        let mut config: serde_json::Value = serde_json::from_slice(pocket::native::CONFIG).unwrap();
        let heads = usize::try_from(config["num_attention_heads"].as_u64().unwrap()).unwrap();
        let relative = (0..32)
            .flat_map(|b| (0..heads).map(move |h| (b, h)))
            .map(|(b, h)| bias(b, h))
            .collect();
        out.push((
            "encoder.relative_attention_bias.weight".into(),
            vec![32, heads],
            relative,
        ));
        config["model_type"] = "mpnet".into();
        config["pad_token_id"] = 1.into();
        config["relative_attention_num_buckets"] = 32.into();
        config["max_position_embeddings"] = (pshape[0] + 2).into();
        model_directory(tag, config.to_string().as_bytes(), &out)
    }

    #[cfg(zm_native_pocket)]
    #[test]
    fn a_model_directory_runs_the_same_forward_pass() {
        let dir = bundled_as_directory("same", pocket::native::CONFIG);
        let texts = sample_texts();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let f32_model = dir::DirModel::load_keeping(&dir, dir::Keep::F32).unwrap();
        assert!(
            f32_model.model().starts_with("dir@sha256:"),
            "{}",
            f32_model.model()
        );
        assert_eq!(f32_model.dims(), 384);
        let f32_vectors = f32_model.embed(&refs).unwrap();
        // The directory's f32 weights go through gemm, as do the bundled
        // ones dequantized at load: the same vectors, exactly.
        let dense = pocket::native::load_with(|q| native::Tensor::Dense(q.dequantize()))
            .unwrap()
            .unwrap()
            .embed_all(&refs)
            .unwrap();
        assert_eq!(max_abs_diff(&f32_vectors, &dense), 0.0);
        // Kept quantized, the bundled weights go through the blocked
        // multiply: only the order of the additions differs.
        let bundled = bundled().unwrap().unwrap().embed(&refs).unwrap();
        let d = max_abs_diff(&bundled, &dense);
        assert!(d < 1e-6, "the blocked multiply's vectors differ by {d}");

        // What `--embedding-model` loads keeps the matrices as 8-bit
        // values: its own identity, and vectors within a cosine of 0.999
        // of the f32 ones.
        let model = from_dir(&dir).expect("compiled in").expect("loads");
        assert_eq!(model.model(), format!("{}#q8", f32_model.model()));
        let eight = model.embed(&refs).unwrap();
        for ((a, b), t) in eight.iter().zip(&f32_vectors).zip(&texts) {
            let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            assert!(cos > 0.999 && cos <= 1.0 + 1e-5, "{t:?}: cosine {cos}");
        }
        assert!(max_abs_diff(&eight, &f32_vectors) > 0.0, "not quantized");

        // The activation is the configuration's: the same weights with
        // ReLU or GELU's tanh form give other vectors (the tanh form
        // close to the exact one).
        let mut config: serde_json::Value = serde_json::from_slice(pocket::native::CONFIG).unwrap();
        let mut with_activation = |act: &str| {
            config["hidden_act"] = act.into();
            std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
            dir::DirModel::load_keeping(&dir, dir::Keep::F32)
                .map(|m| (m.embed(&refs).unwrap(), m.model().to_string()))
        };
        let (relu, relu_model) = with_activation("relu").unwrap();
        let (tanh, tanh_model) = with_activation("gelu_new").unwrap();
        // Other vectors, another identity: what one configuration stored
        // is never compared with what the other embeds.
        assert_ne!(relu_model, tanh_model);
        assert_ne!(relu_model, f32_model.model());
        assert!(max_abs_diff(&relu, &bundled) > 1e-3, "relu is not gelu");
        let d = max_abs_diff(&tanh, &bundled);
        assert!(d > 0.0 && d < 1e-2, "gelu_new against gelu: {d}");
        // What the forward pass does not compute is refused at load.
        let Err(EmbedError::Load(why)) = with_activation("swish") else {
            panic!("a swish model loaded");
        };
        assert!(why.contains("hidden_act"), "{why}");
        // The same settings written otherwise (spacing, line endings, the
        // writing library's version): the same identity.
        let mut same: serde_json::Value = serde_json::from_slice(pocket::native::CONFIG).unwrap();
        same["transformers_version"] = "9.9.9".into();
        let pretty = serde_json::to_string_pretty(&same)
            .unwrap()
            .replace('\n', "\r\n");
        std::fs::write(dir.join("config.json"), pretty).unwrap();
        let reformatted = dir::DirModel::load_keeping(&dir, dir::Keep::F32).unwrap();
        assert_eq!(reformatted.model(), f32_model.model());
        // Another name, in another directory: the same files, the same
        // identity (instances sharing a database must agree).
        same["_name_or_path"] = "somebody/renamed".into();
        let elsewhere = bundled_as_directory("elsewhere", same.to_string().as_bytes());
        let moved = dir::DirModel::load_keeping(&elsewhere, dir::Keep::F32).unwrap();
        assert_eq!(moved.model(), f32_model.model());
        assert!(!moved.model().contains("renamed") && !moved.model().contains("elsewhere"));
        std::fs::remove_dir_all(&elsewhere).unwrap();
        // A text cut to fewer tokens than a model needs (its special
        // tokens and a few) is refused at load: 2 would embed every text
        // as the same two special tokens, 1 underflowed in the tokenizer.
        for short in [0, 1, 2, 7] {
            std::fs::write(
                dir.join("sentence_bert_config.json"),
                format!(r#"{{"max_seq_length": {short}}}"#),
            )
            .unwrap();
            let Err(EmbedError::Load(why)) = dir::DirModel::load_keeping(&dir, dir::Keep::F32)
            else {
                panic!("a model cutting texts to {short} tokens loaded");
            };
            assert!(why.contains("at least"), "{why}");
        }
        std::fs::write(
            dir.join("sentence_bert_config.json"),
            br#"{"max_seq_length": 8}"#,
        )
        .unwrap();
        dir::DirModel::load_keeping(&dir, dir::Keep::F32).expect("8 tokens load");
        std::fs::write(
            dir.join("sentence_bert_config.json"),
            br#"{"max_seq_length": 128}"#,
        )
        .unwrap();
        // What the pass does not compute is refused at load, not embedded
        // otherwise than the model was trained: a pooling mode beside the
        // mean, a module past pooling, an optional file that does not
        // parse (it is not taken for an absent one), a pooling directory
        // outside the model's.
        let refused = |file: &str, text: &str, want: &str| {
            let before = std::fs::read(dir.join(file)).ok();
            std::fs::write(dir.join(file), text).unwrap();
            let got = dir::DirModel::load_keeping(&dir, dir::Keep::F32).map(|_| ());
            match before {
                Some(b) => std::fs::write(dir.join(file), b).unwrap(),
                None => std::fs::remove_file(dir.join(file)).unwrap(),
            }
            let Err(EmbedError::Load(why)) = got else {
                panic!("{file} = {text} loaded");
            };
            assert!(why.contains(want), "{file}: {why}");
        };
        refused(
            "1_Pooling/config.json",
            r#"{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#,
            "pooling_mode_max_tokens is on too",
        );
        refused(
            "1_Pooling/config.json",
            r#"{"pooling_mode_cls_token": true}"#,
            "only mean pooling",
        );
        refused(
            "1_Pooling/config.json",
            "{not json",
            "1_Pooling/config.json",
        );
        refused(
            "sentence_bert_config.json",
            "{not json",
            "sentence_bert_config.json",
        );
        refused(
            "sentence_bert_config.json",
            r#"{"max_seq_length": "128"}"#,
            "not a whole number",
        );
        let modules = |extra: &str| {
            format!(
                r#"[{{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"}},{{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}}{extra}]"#
            )
        };
        refused(
            "modules.json",
            &modules(
                r#",{"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}"#,
            ),
            "\"sentence_transformers.models.Dense\" is not supported",
        );
        refused(
            "modules.json",
            r#"[{"type":"sentence_transformers.models.Pooling","path":"../elsewhere"}]"#,
            "not a directory of the model's",
        );
        // A tokenizer that gives an id past the weights' vocabulary is
        // another model's.
        let mut tokenizer: serde_json::Value =
            serde_json::from_slice(pocket::native::TOKENIZER).unwrap();
        tokenizer["added_tokens"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"id": 30522, "content": "[EXTRA]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
        refused(
            "tokenizer.json",
            &tokenizer.to_string(),
            "past the weights' vocabulary of 30522",
        );
        // The usual three modules load, as the directory without them.
        std::fs::write(
            dir.join("modules.json"),
            modules(r#",{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}"#),
        )
        .unwrap();
        let with_modules = dir::DirModel::load_keeping(&dir, dir::Keep::F32).unwrap();
        assert_eq!(with_modules.model(), f32_model.model());
        std::fs::remove_file(dir.join("modules.json")).unwrap();
        // A weight file cut short is refused at load, naming what is wrong.
        let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
        std::fs::write(dir.join("config.json"), pocket::native::CONFIG).unwrap();
        for cut in [weights.len() - 1, 100, 4] {
            std::fs::write(dir.join("model.safetensors"), &weights[..cut]).unwrap();
            let Some(Err(EmbedError::Load(why))) = from_dir(&dir).map(|r| r.map(|_| ())) else {
                panic!("a weight file cut at {cut} bytes loaded");
            };
            assert!(why.contains("model.safetensors"), "{why}");
        }
        std::fs::write(dir.join("model.safetensors"), &weights).unwrap();
        let mut config: serde_json::Value = serde_json::from_slice(pocket::native::CONFIG).unwrap();
        // A configuration that does not fit the weights names the tensor.
        config["hidden_act"] = "gelu".into();
        config["intermediate_size"] = 1024.into();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let Some(Err(EmbedError::Load(why))) = from_dir(&dir).map(|r| r.map(|_| ())) else {
            panic!("weights of the wrong shape loaded");
        };
        assert!(why.contains("intermediate.dense.weight"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// MPNet's relative-position buckets, as `MPNetModel` computes them
    /// (32 buckets, distances up to 128): `(j - i, bucket(j - i),
    /// bucket(i - j))`, worked out with its formula.
    #[cfg(feature = "pocket")]
    #[test]
    fn mpnet_buckets_follow_the_reference() {
        let want = [
            (0, 0, 0),
            (1, 17, 1),
            (7, 23, 7),
            (8, 24, 8),
            (11, 24, 8),
            (12, 25, 9),
            (15, 25, 9),
            (16, 26, 10),
            (22, 26, 10),
            (23, 27, 11),
            (31, 27, 11),
            (32, 28, 12),
            (45, 28, 12),
            (46, 29, 13),
            (63, 29, 13),
            (64, 30, 14),
            (90, 30, 14),
            (91, 31, 15),
            (127, 31, 15),
            (128, 31, 15),
            (500, 31, 15),
        ];
        for (d, after, before) in want {
            assert_eq!(native::mpnet_bucket(3, 3 + d), after, "key {d} after");
            assert_eq!(native::mpnet_bucket(3 + d, 3), before, "key {d} before");
        }
        // What the attention adds to query i's score for key j: the
        // table's row for bucket(i, j), in that head's column.
        let heads = 3;
        #[allow(clippy::cast_precision_loss)]
        let table: Vec<f32> = (0..32)
            .flat_map(|b| (0..heads).map(move |h| (b * 10 + h) as f32))
            .collect();
        let rows = 9;
        let bias = native::DistanceBias::new(&table, heads, rows);
        for h in 0..heads {
            for i in 0..rows {
                let row = bias.row(h, i).unwrap();
                assert_eq!(row.len(), rows);
                for (j, b) in row.iter().enumerate() {
                    #[allow(clippy::cast_precision_loss)]
                    let want = (native::mpnet_bucket(i, j) * 10 + h) as f32;
                    assert_eq!(*b, want, "head {h}, query {i}, key {j}");
                }
            }
        }
        // The next key is bucket 17, the previous one bucket 1.
        assert_eq!(bias.row(0, 4).unwrap()[5], 170.0);
        assert_eq!(bias.row(0, 4).unwrap()[3], 10.0);
    }

    #[cfg(zm_native_pocket)]
    #[test]
    fn an_mpnet_directory_runs_mpnet_s_forward_pass() {
        let texts = sample_texts();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let bert = bundled_as_directory("mpnet-bert", pocket::native::CONFIG);
        let want = from_dir(&bert).unwrap().unwrap().embed(&refs).unwrap();
        std::fs::remove_dir_all(&bert).unwrap();
        let embed = |tag: &str, bias: &dyn Fn(usize, usize) -> f32| {
            let dir = bundled_as_mpnet(tag, bias);
            let model = from_dir(&dir).unwrap().unwrap();
            let v = model.embed(&refs).unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            v
        };
        // No relative bias (or one the same for every distance, which
        // softmax cancels): the BERT it was made from, up to the order of
        // two additions.
        let zero = embed("mpnet-zero", &|_, _| 0.0);
        let d = max_abs_diff(&zero, &want);
        assert!(
            d < 1e-5,
            "an MPNet without bias differs from its BERT by {d}"
        );
        let flat = embed("mpnet-flat", &|_, h| 0.5 + h as f32);
        let d = max_abs_diff(&flat, &want);
        assert!(
            d < 1e-5,
            "a bias the same at every distance changed the vectors by {d}"
        );
        // A bias by distance changes every vector of more than one token.
        let near = embed("mpnet-near", &|b, _| if b == 0 { 4.0 } else { 0.0 });
        for ((v, w), t) in near.iter().zip(&want).zip(&texts) {
            let d = max_abs_diff(std::slice::from_ref(v), std::slice::from_ref(w));
            assert!(d > 1e-3, "{t:?}: the relative bias changed nothing ({d})");
        }
        // Keys before and after a token fall in different buckets: a bias
        // on the ones after is not a bias on the ones before.
        let after = embed("mpnet-after", &|b, _| if b >= 16 { 2.0 } else { 0.0 });
        let before = embed("mpnet-before", &|b, _| {
            if (1..16).contains(&b) { 2.0 } else { 0.0 }
        });
        assert!(max_abs_diff(&after, &before) > 1e-3);
    }

    #[cfg(feature = "pocket")]
    #[test]
    fn the_bundled_model_meets_a_paraphrase() {
        let enc = bundled().expect("compiled in").expect("loads");
        assert!(
            enc.model().starts_with("pocket-encoder/"),
            "{}",
            enc.model()
        );
        let v = enc
            .embed(&[
                "We chose Postgres over Mongo for billing.",
                "which datastore did we pick for invoices",
                "The office plant needs water on Fridays.",
            ])
            .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].len(), enc.dims());
        let q: Vec<Vector> = v.iter().map(|x| Vector::quantize(x)).collect();
        assert!(
            q[0].cosine(&q[1]) > q[1].cosine(&q[2]) + 0.1,
            "the paraphrase is nearer than the unrelated text: {} vs {}",
            q[0].cosine(&q[1]),
            q[1].cosine(&q[2])
        );
        assert!(matches!(enc.embed(&["   "]), Err(EmbedError::Input(_))));
    }
}
