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
    /// A text the model refuses (blank, too long for one call).
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
}

/// A vector as stored and compared: `values[i] × scale` approximates the
/// unit vector's coordinate `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    scale: f32,
    values: Box<[i8]>,
}

impl Vector {
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
/// the `pocket` feature. Loading takes a few hundred milliseconds and
/// about 70 MiB: do it once, off the async runtime.
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

/// A sentence-transformers model (BERT family, mean pooling) from a
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
mod dir;

#[cfg(feature = "pocket")]
mod pocket {
    use super::{EmbedError, Encoder};

    /// `pocket-encoder`: paraphrase-MiniLM-L3-v2, 4-bit weights in the
    /// crate, 384 dimensions, 128 tokens (longer texts are cut).
    pub(crate) struct Pocket {
        inner: pocket_encoder::Encoder,
        model: String,
    }

    /// `<id>@<weights sha256>`.
    pub(crate) fn identity() -> String {
        let info = pocket_encoder::model_info();
        format!("{}@{}", info.id, info.revision)
    }

    impl Pocket {
        pub(crate) fn load() -> Result<Pocket, EmbedError> {
            let inner =
                pocket_encoder::Encoder::new().map_err(|e| EmbedError::Load(e.to_string()))?;
            Ok(Pocket {
                inner,
                model: identity(),
            })
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
            self.inner.embed(texts).map_err(|e| match e {
                pocket_encoder::Error::Input(m) => EmbedError::Input(m.to_string()),
                pocket_encoder::Error::Inference(m) => EmbedError::Inference(m),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
