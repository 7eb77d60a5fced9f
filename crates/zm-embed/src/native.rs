//! A BERT encoder's forward pass on the CPU, in f32, one text at a time:
//! what both the bundled model and a model from a directory run. MPNet
//! (all-mpnet-base-v2) is the same encoder with other tensor names, no
//! token types, positions counted from the padding id + 1, and a learned
//! bias per head and relative distance added to every attention score.
//!
//! Why our own and not candle's `BertModel`: candle stores a linear
//! layer's weights `[out, in]` and multiplies through `gemm`, which then
//! copies ("packs") the whole weight matrix on every call because it is
//! the row-major left operand of the transposed product. For a short query
//! (a dozen tokens) that copy was half the embedding's time. Here every
//! f32 weight matrix is transposed once at load (`[in, out]`), which
//! `gemm` reads in place, and quantized weights (the bundled model's) stay
//! quantized and go through [`crate::blocked`]; the multiply runs on the
//! calling thread (the recall that waits for it runs the full-text legs
//! on the other core).
//!
//! Attention-masked mean pooling over one unpadded text is the plain mean
//! of its token states; the caller L2-normalises.

use crate::EmbedError;
use crate::blocked::{Blocked, Quantized};

/// The shape of a BERT encoder (the fields of its `config.json` that the
/// forward pass reads).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub positions: usize,
    pub type_vocab: usize,
    pub eps: f32,
    pub activation: Activation,
    pub family: Family,
}

/// Which encoder the weights are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// `model_type` `bert` (or none): Hugging Face's `BertModel`.
    Bert,
    /// `model_type` `mpnet`: Hugging Face's `MPNetModel`.
    MpNet,
}

/// How far apart two tokens must be for MPNet's relative-position buckets
/// to stop growing (fixed in `MPNetModel`, not in its configuration).
const MPNET_MAX_DISTANCE: usize = 128;
/// MPNet's relative-position buckets: `MPNetModel` computes them for 32
/// whatever its configuration says (the configuration only sizes the
/// table), so any other table size is refused.
const MPNET_BUCKETS: usize = 32;
/// MPNet's first position's row in the position table: `MPNetModel`
/// counts positions from its padding index (fixed at 1) + 1, whatever
/// `pad_token_id` says.
const MPNET_FIRST_POSITION: usize = 2;

/// MPNet's bucket for the distance from query token `i` to key token `j`
/// (as `MPNetModel` computes it, bidirectionally): half the buckets for
/// keys after the query, half for keys before; within a half, exact
/// buckets for the nearest distances and logarithmic ones beyond, up to
/// [`MPNET_MAX_DISTANCE`].
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)]
pub(crate) fn mpnet_bucket(i: usize, j: usize) -> usize {
    let half = MPNET_BUCKETS / 2;
    let exact = half / 2;
    let (base, n) = if j > i { (half, j - i) } else { (0, i - j) };
    if n < exact {
        return base + n;
    }
    // In f32, as the reference computes it; the boundaries (16, 32, 64)
    // come out the same in f64 too.
    let log = (n as f32 / exact as f32).ln() / (MPNET_MAX_DISTANCE as f32 / exact as f32).ln();
    let large = exact + (log * (half - exact) as f32) as usize;
    base + large.min(half - 1)
}

/// MPNet's attention bias for one text, from its table (`[bucket,
/// head]`): the same in every layer.
pub(crate) struct DistanceBias {
    /// `[head][rows - 1 + j - i]`: the bias of key `j` for query `i`.
    by_head: Vec<Vec<f32>>,
    rows: usize,
}

impl DistanceBias {
    /// No bias (BERT).
    fn none() -> DistanceBias {
        DistanceBias {
            by_head: Vec::new(),
            rows: 0,
        }
    }

    /// The bias for a text of `rows` tokens.
    pub(crate) fn new(relative: &[f32], heads: usize, rows: usize) -> DistanceBias {
        let by_head = (0..heads)
            .map(|head| {
                (0..2 * rows - 1)
                    .map(|d| {
                        // Key j = d, query i = rows - 1: distance j - i.
                        let bucket = mpnet_bucket(rows - 1, d);
                        relative[bucket * heads + head]
                    })
                    .collect()
            })
            .collect();
        DistanceBias { by_head, rows }
    }

    /// Query `i`'s bias under `head`, by key: `[j]` (`None` without a
    /// bias).
    pub(crate) fn row(&self, head: usize, i: usize) -> Option<&[f32]> {
        let all = self.by_head.get(head)?;
        Some(&all[self.rows - 1 - i..2 * self.rows - 1 - i])
    }
}

/// The feed-forward layers' activation (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `gelu`: the exact GELU, `x·Φ(x)` with the error function
    /// ([`crate::gelu`]).
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`: GELU's tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
}

impl Activation {
    fn apply(self, values: &mut [f32]) {
        match self {
            Activation::Gelu => crate::gelu::apply(values),
            Activation::GeluTanh => {
                // sqrt(2 / pi)
                const C: f32 = 0.797_884_6;
                for v in values {
                    let x = *v;
                    *v = 0.5 * x * (1.0 + libm::tanhf(C * (x + 0.044_715 * x * x * x)));
                }
            }
            Activation::Relu => {
                for v in values {
                    *v = v.max(0.0);
                }
            }
        }
    }
}

fn load_err(what: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(what.to_string())
}

impl Config {
    /// Read a Hugging Face `config.json`. Only what this forward pass
    /// computes is accepted: absolute positions, and GELU (exact or its
    /// tanh approximation) or ReLU.
    pub(crate) fn from_json(v: &serde_json::Value) -> Result<Config, EmbedError> {
        let n = |key: &str| {
            v.get(key)
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| load_err(format!("config.json: no positive {key}")))
        };
        let family = match v.get("model_type").and_then(|t| t.as_str()) {
            None | Some("bert") => Family::Bert,
            Some("mpnet") => {
                let buckets = v
                    .get("relative_attention_num_buckets")
                    .map_or(Some(MPNET_BUCKETS as u64), serde_json::Value::as_u64);
                if buckets != Some(MPNET_BUCKETS as u64) {
                    return Err(load_err(format!(
                        "config.json: relative_attention_num_buckets must be {MPNET_BUCKETS} (what MPNetModel computes)"
                    )));
                }
                Family::MpNet
            }
            Some(t) => {
                return Err(load_err(format!(
                    "config.json: model_type {t:?} is not supported (\"bert\" or \"mpnet\")"
                )));
            }
        };
        let activation = match v
            .get("hidden_act")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("gelu")
        {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(load_err(format!(
                    "config.json: hidden_act {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh or relu)"
                )));
            }
        };
        if let Some(p) = v.get("position_embedding_type").and_then(|p| p.as_str())
            && p != "absolute"
        {
            return Err(load_err(format!(
                "config.json: position_embedding_type {p:?} is not supported (only \"absolute\")"
            )));
        }
        #[allow(clippy::cast_possible_truncation)]
        let eps = v
            .get("layer_norm_eps")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(1e-12) as f32;
        let c = Config {
            vocab: n("vocab_size")?,
            hidden: n("hidden_size")?,
            layers: n("num_hidden_layers")?,
            heads: n("num_attention_heads")?,
            intermediate: n("intermediate_size")?,
            positions: n("max_position_embeddings")?,
            // MPNet has no token types: one row of zeros stands for them.
            type_vocab: match family {
                Family::MpNet => 1,
                Family::Bert => v
                    .get("type_vocab_size")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or(2)
                    .max(1),
            },
            eps,
            activation,
            family,
        };
        if c.family == Family::MpNet && c.positions <= MPNET_FIRST_POSITION {
            return Err(load_err(
                "config.json: max_position_embeddings leaves MPNet no position",
            ));
        }
        if !c.hidden.is_multiple_of(c.heads) {
            return Err(load_err(
                "config.json: hidden_size is not a multiple of num_attention_heads",
            ));
        }
        Ok(c)
    }
}

/// Where the forward pass gets its weights: `tensor(name, shape)` is the
/// named tensor, row-major, of exactly that shape (or an error).
pub(crate) type Tensors<'a> = dyn FnMut(&str, &[usize]) -> Result<Tensor, EmbedError> + 'a;

/// A stored tensor: f32 values, or small integers with a scale per block
/// (the bundled model's 4-bit form, or a directory model's 8-bit one,
/// kept as it is where the forward pass can compute on it).
pub(crate) enum Tensor {
    Dense(Vec<f32>),
    Quantized(Quantized),
}

impl Tensor {
    /// Its f32 values.
    fn into_dense(self) -> Vec<f32> {
        match self {
            Tensor::Dense(v) => v,
            Tensor::Quantized(q) => q.dequantize(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Tensor::Dense(v) => v.len(),
            Tensor::Quantized(q) => q.values.len(),
        }
    }
}

/// A dense layer: `x·W + b`.
struct Linear {
    w: Weights,
    b: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

/// A dense layer's weights.
enum Weights {
    /// f32, stored `[inputs, outputs]` for `gemm`.
    Dense(Vec<f32>),
    /// Small integers and their scales, multiplied as they are.
    Blocked(Blocked),
}

impl Linear {
    /// Read the layers `names` (each `[out_i, inputs]` weights and
    /// `[out_i]` bias, in PyTorch's layout) as one layer whose outputs are
    /// theirs side by side, transposed for `gemm`.
    fn load(
        t: &mut Tensors<'_>,
        names: &[&str],
        inputs: usize,
        outputs: usize,
    ) -> Result<Linear, EmbedError> {
        let total = outputs * names.len();
        let mut parts = Vec::with_capacity(names.len());
        let mut b = Vec::with_capacity(total);
        for name in names {
            let weight = t(&format!("{name}.weight"), &[outputs, inputs])?;
            let bias = t(&format!("{name}.bias"), &[outputs])?.into_dense();
            // The shapes `apply`'s unsafe multiply relies on, whatever the
            // source of the tensors promised.
            if weight.len() != outputs * inputs || bias.len() != outputs {
                return Err(load_err(format!("{name}: a tensor of the wrong length")));
            }
            parts.push(weight);
            b.extend(bias);
        }
        // Quantized along rows that are whole blocks: kept as they are.
        let quantized: Vec<&Quantized> = parts
            .iter()
            .filter_map(|p| match p {
                Tensor::Quantized(q) => Some(q),
                Tensor::Dense(_) => None,
            })
            .collect();
        if quantized.len() == parts.len()
            && let Some(w) = Blocked::from_parts(&quantized, inputs, outputs)
        {
            return Ok(Linear {
                w: Weights::Blocked(w),
                b,
                inputs,
                outputs: total,
            });
        }
        let mut w = vec![0f32; inputs * total];
        for (part, weight) in parts.into_iter().enumerate() {
            let weight = weight.into_dense();
            for (o, row) in weight.chunks_exact(inputs).enumerate() {
                for (i, x) in row.iter().enumerate() {
                    w[i * total + part * outputs + o] = *x;
                }
            }
        }
        Ok(Linear {
            w: Weights::Dense(w),
            b,
            inputs,
            outputs: total,
        })
    }

    /// `rows` input rows (`rows × inputs`, row-major) through the layer.
    fn apply(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs, "input rows of the wrong width");
        let mut out = Vec::with_capacity(rows * self.outputs);
        for _ in 0..rows {
            out.extend_from_slice(&self.b);
        }
        let w = match &self.w {
            Weights::Blocked(w) => {
                w.multiply_add(x, rows, &mut out);
                return out;
            }
            Weights::Dense(w) => w,
        };
        let (n, k) = (self.outputs, self.inputs);
        assert_eq!(out.len(), rows * n, "bias of the wrong width");
        assert_eq!(w.len(), k * n, "weights of the wrong size");
        // Both strides fit: the buffers are allocations of these sizes.
        #[allow(clippy::cast_possible_wrap)]
        let (n_s, k_s) = (n as isize, k as isize);
        // SAFETY: `out` is rows × n, `x` rows × k and `w` k × n (asserted
        // above), all row-major, contiguous and owned; the destination
        // aliases neither operand. `read_dst` adds the bias rows already in `out`.
        #[allow(unsafe_code)]
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n_s,
                true,
                x.as_ptr(),
                1,
                k_s,
                w.as_ptr(),
                1,
                n_s,
                1.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        out
    }
}

/// Layer normalisation's scale and shift.
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn load(t: &mut Tensors<'_>, name: &str, width: usize, eps: f32) -> Result<Norm, EmbedError> {
        Ok(Norm {
            gamma: t(&format!("{name}.weight"), &[width])?.into_dense(),
            beta: t(&format!("{name}.bias"), &[width])?.into_dense(),
            eps,
        })
    }

    /// Normalise every row of `x` in place.
    #[allow(clippy::cast_precision_loss)]
    fn apply(&self, x: &mut [f32]) {
        let width = self.gamma.len();
        for row in x.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inv = (var + self.eps).sqrt().recip();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    }
}

/// The word-embedding table: only the rows of a text's tokens are read,
/// so a quantized one stays in its stored form.
enum Table {
    Dense(Vec<f32>),
    Quantized(Quantized),
}

struct Layer {
    /// Query, key and value side by side: one multiply instead of three.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// A BERT encoder's weights, ready for the forward pass.
pub(crate) struct Bert {
    config: Config,
    words: Table,
    positions: Vec<f32>,
    types: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    /// MPNet's attention bias, `[bucket, head]` (empty for BERT).
    relative: Vec<f32>,
}

/// The tensor names of one layer, by family.
struct LayerNames {
    query: &'static str,
    key: &'static str,
    value: &'static str,
    out: &'static str,
    norm: &'static str,
}

impl Family {
    fn layer_names(self) -> LayerNames {
        match self {
            Family::Bert => LayerNames {
                query: "attention.self.query",
                key: "attention.self.key",
                value: "attention.self.value",
                out: "attention.output.dense",
                norm: "attention.output.LayerNorm",
            },
            Family::MpNet => LayerNames {
                query: "attention.attn.q",
                key: "attention.attn.k",
                value: "attention.attn.v",
                out: "attention.attn.o",
                norm: "attention.LayerNorm",
            },
        }
    }
}

impl Bert {
    /// Read the weights, under the names Hugging Face's `BertModel` gives
    /// them (`embeddings.…`, `encoder.layer.N.…`).
    pub(crate) fn load(config: Config, t: &mut Tensors<'_>) -> Result<Bert, EmbedError> {
        let (h, eps) = (config.hidden, config.eps);
        let words = match t("embeddings.word_embeddings.weight", &[config.vocab, h])? {
            Tensor::Quantized(q) => Table::Quantized(q),
            Tensor::Dense(v) => Table::Dense(v),
        };
        let positions = t(
            "embeddings.position_embeddings.weight",
            &[config.positions, h],
        )?
        .into_dense();
        let (types, relative) = match config.family {
            Family::Bert => (
                t(
                    "embeddings.token_type_embeddings.weight",
                    &[config.type_vocab, h],
                )?
                .into_dense(),
                Vec::new(),
            ),
            Family::MpNet => (
                vec![0f32; h],
                t(
                    "encoder.relative_attention_bias.weight",
                    &[MPNET_BUCKETS, config.heads],
                )?
                .into_dense(),
            ),
        };
        let names = config.family.layer_names();
        let embedding_norm = Norm::load(t, "embeddings.LayerNorm", h, eps)?;
        let layers = (0..config.layers)
            .map(|l| {
                let p = format!("encoder.layer.{l}");
                Ok(Layer {
                    qkv: Linear::load(
                        t,
                        &[
                            &format!("{p}.{}", names.query),
                            &format!("{p}.{}", names.key),
                            &format!("{p}.{}", names.value),
                        ],
                        h,
                        h,
                    )?,
                    attention_out: Linear::load(t, &[&format!("{p}.{}", names.out)], h, h)?,
                    attention_norm: Norm::load(t, &format!("{p}.{}", names.norm), h, eps)?,
                    intermediate: Linear::load(
                        t,
                        &[&format!("{p}.intermediate.dense")],
                        h,
                        config.intermediate,
                    )?,
                    output: Linear::load(
                        t,
                        &[&format!("{p}.output.dense")],
                        config.intermediate,
                        h,
                    )?,
                    output_norm: Norm::load(t, &format!("{p}.output.LayerNorm"), h, eps)?,
                })
            })
            .collect::<Result<Vec<_>, EmbedError>>()?;
        Ok(Bert {
            config,
            words,
            positions,
            types,
            embedding_norm,
            layers,
            relative,
        })
    }

    /// The hidden size: the dimension of the pooled vector.
    pub(crate) fn dims(&self) -> usize {
        self.config.hidden
    }

    /// The longest input, in tokens, the position table covers.
    pub(crate) fn max_tokens(&self) -> usize {
        self.config.positions.saturating_sub(self.first_position())
    }

    /// The position table's row for a text's first token.
    fn first_position(&self) -> usize {
        match self.config.family {
            Family::Bert => 0,
            Family::MpNet => MPNET_FIRST_POSITION,
        }
    }

    /// The mean of the last layer's token states for one text's token ids
    /// and token types (not normalised).
    pub(crate) fn pooled(&self, ids: &[u32], types: &[u32]) -> Result<Vec<f32>, EmbedError> {
        let c = &self.config;
        let (h, rows) = (c.hidden, ids.len());
        if rows == 0 || rows > self.max_tokens() || types.len() != rows {
            return Err(EmbedError::Inference(format!(
                "{rows} tokens for a model of at most {}",
                self.max_tokens()
            )));
        }
        let first = self.first_position();
        let mut x = Vec::with_capacity(rows * h);
        for (r, (&id, &ty)) in ids.iter().zip(types).enumerate() {
            let (id, ty) = (id as usize, ty as usize);
            if id >= c.vocab || ty >= c.type_vocab {
                return Err(EmbedError::Inference(
                    "a token outside the vocabulary".into(),
                ));
            }
            let pos = &self.positions[(first + r) * h..(first + r + 1) * h];
            let kind = &self.types[ty * h..(ty + 1) * h];
            let sum = |((w, p), k): ((f32, &f32), &f32)| w + k + p;
            match &self.words {
                Table::Dense(words) => x.extend(
                    words[id * h..(id + 1) * h]
                        .iter()
                        .copied()
                        .zip(pos)
                        .zip(kind)
                        .map(sum),
                ),
                Table::Quantized(words) => x.extend(words.row(id, h).zip(pos).zip(kind).map(sum)),
            }
        }
        self.embedding_norm.apply(&mut x);
        let bias = self.attention_bias(rows);
        for layer in &self.layers {
            x = self.layer(layer, &x, rows, &bias);
        }
        let mut pooled = vec![0f32; h];
        for row in x.chunks_exact(h) {
            for (p, v) in pooled.iter_mut().zip(row) {
                *p += v;
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let inv = 1.0 / rows as f32;
        for p in &mut pooled {
            *p *= inv;
        }
        Ok(pooled)
    }

    /// MPNet's attention bias for a text of `rows` tokens, the same in
    /// every layer (none for BERT).
    fn attention_bias(&self, rows: usize) -> DistanceBias {
        match self.config.family {
            Family::Bert => DistanceBias::none(),
            Family::MpNet => DistanceBias::new(&self.relative, self.config.heads, rows),
        }
    }

    /// One encoder layer over `rows` token states (`bias` as
    /// [`Bert::attention_bias`] gives it).
    #[allow(clippy::cast_precision_loss)]
    fn layer(&self, layer: &Layer, x: &[f32], rows: usize, bias: &DistanceBias) -> Vec<f32> {
        let h = self.config.hidden;
        let heads = self.config.heads;
        let d = h / heads;
        let qkv = layer.qkv.apply(x, rows);
        let scale = 1.0 / (d as f32).sqrt();
        let mut context = vec![0f32; rows * h];
        let mut scores = vec![0f32; rows];
        for head in 0..heads {
            let at = |r: usize, part: usize| {
                let start = r * 3 * h + part * h + head * d;
                &qkv[start..start + d]
            };
            for i in 0..rows {
                let q = at(i, 0);
                let mut max = f32::NEG_INFINITY;
                let row_bias = bias.row(head, i);
                for (j, s) in scores.iter_mut().enumerate() {
                    let k = at(j, 1);
                    *s = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
                    if let Some(b) = row_bias {
                        *s += b[j];
                    }
                    max = max.max(*s);
                }
                let mut sum = 0f32;
                for s in &mut scores {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let out = &mut context[i * h + head * d..i * h + (head + 1) * d];
                for (j, s) in scores.iter().enumerate() {
                    let p = s / sum;
                    for (o, v) in out.iter_mut().zip(at(j, 2)) {
                        *o += p * v;
                    }
                }
            }
        }
        let mut attended = layer.attention_out.apply(&context, rows);
        for (a, x) in attended.iter_mut().zip(x) {
            *a += x;
        }
        layer.attention_norm.apply(&mut attended);
        let mut inner = layer.intermediate.apply(&attended, rows);
        self.config.activation.apply(&mut inner);
        let mut out = layer.output.apply(&inner, rows);
        for (o, a) in out.iter_mut().zip(&attended) {
            *o += a;
        }
        layer.output_norm.apply(&mut out);
        out
    }
}

/// The fewest tokens per text a model may cut texts to.
const MIN_TOKENS: usize = 8;

/// A tokenizer and a BERT encoder: text in, unit vector out.
pub(crate) struct TextModel {
    bert: Bert,
    tokenizer: tokenizers::Tokenizer,
}

impl TextModel {
    /// Pair a tokenizer (`tokenizer.json`'s bytes) with the encoder; texts
    /// are cut at `max_tokens` (including the special tokens), never past
    /// the encoder's position table.
    pub(crate) fn new(
        bert: Bert,
        tokenizer_json: &[u8],
        max_tokens: usize,
    ) -> Result<TextModel, EmbedError> {
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(tokenizer_json)
            .map_err(|e| load_err(format!("tokenizer.json: {e}")))?;
        // A tokenizer that can give an id past the weights' vocabulary is
        // not theirs: refused at load, not text by text (each such text
        // would be stored without a vector, for good).
        let ids = tokenizer.get_vocab(true).values().max().map_or(0, |&id| {
            usize::try_from(id).map_or(usize::MAX, |id| id.saturating_add(1))
        });
        if ids > bert.config.vocab {
            return Err(load_err(format!(
                "tokenizer.json gives token ids up to {}, past the weights' vocabulary of {} (vocab_size): they are not one model's",
                ids - 1,
                bert.config.vocab
            )));
        }
        // A text is cut to this many tokens, its special ones included:
        // fewer than the special tokens would underflow in the tokenizer
        // (a panic, or no cut at all), and a few more would embed every
        // text alike.
        let max_length = max_tokens.min(bert.max_tokens());
        if max_length < MIN_TOKENS {
            return Err(load_err(format!(
                "texts would be cut to {max_length} tokens (max_seq_length, or its default: {max_tokens}; the position table: {}): a model needs at least {MIN_TOKENS}",
                bert.max_tokens()
            )));
        }
        // One text at a time: no padding.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| load_err(format!("tokenizer truncation: {e}")))?;
        Ok(TextModel { bert, tokenizer })
    }

    pub(crate) fn dims(&self) -> usize {
        self.bert.dims()
    }

    /// Each text's unit vector, in order (the first failure is the
    /// answer). More than one text is spread over the machine's cores, a
    /// contiguous run of texts per core: the background embedder's batches
    /// go as fast as candle's threaded multiply did, while one query runs
    /// on the calling thread alone.
    pub(crate) fn embed_all(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.len() < 2 {
            return texts.iter().map(|t| self.embed(t)).collect();
        }
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        if cores < 2 {
            return texts.iter().map(|t| self.embed(t)).collect();
        }
        let per = texts.len().div_ceil(cores.min(texts.len()));
        std::thread::scope(|s| {
            let runs: Vec<_> = texts
                .chunks(per)
                .map(|run| s.spawn(move || run.iter().map(|t| self.embed(t)).collect::<Vec<_>>()))
                .collect();
            // Every thread joined before the first failure is the answer.
            let joined: Vec<_> = runs
                .into_iter()
                .map(std::thread::ScopedJoinHandle::join)
                .collect();
            let mut out = Vec::with_capacity(texts.len());
            for vectors in joined {
                let vectors = vectors
                    .map_err(|_| EmbedError::Inference("an embedding thread panicked".into()))?;
                for v in vectors {
                    out.push(v?);
                }
            }
            Ok(out)
        })
    }

    /// One text's unit vector.
    pub(crate) fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if text.trim().is_empty() {
            return Err(EmbedError::Input("a blank text".into()));
        }
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let mut v = self.bert.pooled(enc.get_ids(), enc.get_type_ids())?;
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

/// A safetensors file's tensor as f32 (stored as f32, f16 or bf16): the
/// bundled model's, whose file is in the binary.
pub(crate) fn safetensor(
    file: &safetensors::SafeTensors<'_>,
    name: &str,
    shape: &[usize],
) -> Result<Vec<f32>, EmbedError> {
    let view = file
        .tensor(name)
        .map_err(|_| load_err(format!("model.safetensors has no tensor {name}")))?;
    if view.shape() != shape {
        return Err(load_err(format!(
            "model.safetensors: {name} has shape {:?}, the configuration says {shape:?}",
            view.shape()
        )));
    }
    to_f32(name, view.dtype(), view.data(), shape)
}

/// A tensor's stored bytes (f32, f16 or bf16, little-endian) as f32
/// values, which must be exactly `shape`'s count.
pub(crate) fn to_f32(
    name: &str,
    dtype: safetensors::Dtype,
    data: &[u8],
    shape: &[usize],
) -> Result<Vec<f32>, EmbedError> {
    let values: Vec<f32> = match dtype {
        safetensors::Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        safetensors::Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        safetensors::Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(load_err(format!(
                "model.safetensors: {name} is {other:?}; f32, f16 or bf16 expected"
            )));
        }
    };
    if values.len() != shape.iter().product::<usize>() {
        return Err(load_err(format!("model.safetensors: {name} is truncated")));
    }
    Ok(values)
}
