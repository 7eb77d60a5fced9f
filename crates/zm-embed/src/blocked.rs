//! Weights kept in the small integers they are stored as: one `i8` per
//! weight and one f32 scale per [`BLOCK`] consecutive inputs of an output,
//! the form the bundled model ships in (4-bit values, a scale per 32) and
//! the one a model from a directory is kept in (8-bit values, quantized at
//! load).
//!
//! Dequantized to f32 at load, the bundled model held 68 MB of weights
//! (47 of them the word-embedding table, of which a text reads only its
//! tokens' rows) and every query streamed the layers' 21 MB through the
//! caches. Kept as bytes it holds 19 MB, and a layer's weights are a
//! quarter of the traffic.
//!
//! The multiply turns [`TILE`] outputs' weights back into the exact f32
//! values (`value × scale`, what dequantizing at load computed): in
//! registers at each use for a few rows, or once into a panel that stays
//! in the L1 cache while more rows run over it. Only the order of the
//! additions differs from a dense multiply's. The multiply itself is then
//! bound by the FMA units, as the f32 one was (docs/BENCHMARKS.md).

/// Inputs per scale.
pub(crate) const BLOCK: usize = 32;
/// Outputs per panel: two AVX vectors.
const TILE: usize = 16;
/// Rows at or below which the weights are turned into f32 in registers
/// for each use rather than once into a panel (a query of a few words).
#[cfg(target_arch = "x86_64")]
const FUSED_ROWS: usize = 4;

/// A dense layer's weights as small integers with a scale per block, in
/// panels of [`TILE`] outputs: weight `(input k, output t·TILE + j)` is
/// `values[(t·inputs + k)·TILE + j] × scales[(t·blocks + k / BLOCK)·TILE + j]`.
pub(crate) struct Blocked {
    /// Followed by `TILE / 2` zeros, so that the upper half of the last
    /// panel row reads as a whole vector.
    values: Vec<i8>,
    scales: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

/// One stored tensor in PyTorch's `[outputs, inputs]` layout, quantized
/// along its rows: the value at flat index `i` is `values[i] ×
/// scales[i / BLOCK]`.
pub(crate) struct Quantized {
    pub values: Vec<i8>,
    pub scales: Vec<f32>,
}

impl Quantized {
    /// An f32 tensor (a whole number of [`BLOCK`]s) as 8-bit values: each
    /// block's largest magnitude maps to ±127, every value to the nearest
    /// step (an error of at most half a step, 1/254 of the block's
    /// largest). How a model from a directory keeps its weights: a
    /// quarter of f32's bytes, and the same multiply as the bundled model.
    pub(crate) fn from_f32(v: &[f32]) -> Quantized {
        assert!(v.len().is_multiple_of(BLOCK), "a partial block");
        let mut values = Vec::with_capacity(v.len());
        let mut scales = Vec::with_capacity(v.len() / BLOCK);
        for block in v.chunks_exact(BLOCK) {
            let max = block.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = max / 127.0;
            let inv = if scale > 0.0 { scale.recip() } else { 0.0 };
            // |x · inv| ≤ 127 (up to rounding), so the cast never clips.
            #[allow(clippy::cast_possible_truncation)]
            values.extend(
                block
                    .iter()
                    .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8),
            );
            scales.push(scale);
        }
        Quantized { values, scales }
    }

    /// The f32 tensor it stands for.
    pub(crate) fn dequantize(&self) -> Vec<f32> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| f32::from(*v) * self.scales[i / BLOCK])
            .collect()
    }

    /// Row `r` of a `[rows, width]` table, as f32.
    pub(crate) fn row(&self, r: usize, width: usize) -> impl Iterator<Item = f32> + '_ {
        let start = r * width;
        self.values[start..start + width]
            .iter()
            .enumerate()
            .map(move |(i, v)| f32::from(*v) * self.scales[(start + i) / BLOCK])
    }
}

impl Blocked {
    /// `parts` (each `[outputs, inputs]`, quantized along its rows) as one
    /// layer whose outputs are theirs side by side; `None` when the blocks
    /// do not fall on row boundaries (`inputs` not a multiple of
    /// [`BLOCK`]), the outputs do not fill whole panels, or a part is not
    /// of that shape.
    pub(crate) fn from_parts(
        parts: &[&Quantized],
        inputs: usize,
        outputs: usize,
    ) -> Option<Blocked> {
        let total = outputs * parts.len();
        if inputs == 0 || !inputs.is_multiple_of(BLOCK) || total == 0 || !total.is_multiple_of(TILE)
        {
            return None;
        }
        let blocks = inputs / BLOCK;
        let mut values = vec![0i8; inputs * total + TILE / 2];
        let mut scales = vec![0f32; blocks * total];
        for (p, part) in parts.iter().enumerate() {
            if part.values.len() != outputs * inputs || part.scales.len() < outputs * blocks {
                return None;
            }
            for o in 0..outputs {
                let (t, j) = ((p * outputs + o) / TILE, (p * outputs + o) % TILE);
                for (k, v) in part.values[o * inputs..(o + 1) * inputs].iter().enumerate() {
                    values[(t * inputs + k) * TILE + j] = *v;
                }
                for b in 0..blocks {
                    scales[(t * blocks + b) * TILE + j] = part.scales[o * blocks + b];
                }
            }
        }
        Some(Blocked {
            values,
            scales,
            inputs,
            outputs: total,
        })
    }

    /// `out += x · W` for `rows` rows (`x` is `rows × inputs`, `out` is
    /// `rows × outputs`, both row-major).
    pub(crate) fn multiply_add(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        assert_eq!(x.len(), rows * self.inputs, "input rows of the wrong width");
        assert_eq!(
            out.len(),
            rows * self.outputs,
            "output rows of the wrong width"
        );
        if rows == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            simd.vectorize(Avx2 {
                simd,
                w: self,
                x,
                rows,
                out,
            });
            return;
        }
        self.portable(x, rows, out);
    }

    /// The same in plain code, for any CPU.
    fn portable(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (k_dim, n) = (self.inputs, self.outputs);
        let blocks = k_dim / BLOCK;
        for r in 0..rows {
            let xr = &x[r * k_dim..(r + 1) * k_dim];
            for t in 0..n / TILE {
                let o = &mut out[r * n + t * TILE..r * n + (t + 1) * TILE];
                for (k, xv) in xr.iter().enumerate() {
                    let q = &self.values[(t * k_dim + k) * TILE..][..TILE];
                    let s = &self.scales[(t * blocks + k / BLOCK) * TILE..][..TILE];
                    for ((o, q), s) in o.iter_mut().zip(q).zip(s) {
                        *o += xv * (f32::from(*q) * s);
                    }
                }
            }
        }
    }
}

/// The multiply compiled for AVX2 and FMA (see `zm_store`'s vector scan
/// for why a struct: everything it calls is inlined into the function
/// pulp compiles for those features).
#[cfg(target_arch = "x86_64")]
struct Avx2<'a> {
    simd: pulp::x86::V3,
    w: &'a Blocked,
    x: &'a [f32],
    rows: usize,
    out: &'a mut [f32],
}

#[cfg(target_arch = "x86_64")]
type Pair = (pulp::f32x8, pulp::f32x8);

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Avx2<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Avx2 {
            simd,
            w,
            x,
            rows,
            out,
        } = self;
        let (k_dim, n) = (w.inputs, w.outputs);
        let blocks = k_dim / BLOCK;
        let mut panel: Vec<[f32; TILE]> = Vec::new();
        for t in 0..n / TILE {
            let stored = Stored {
                values: &w.values[t * k_dim * TILE..(t + 1) * k_dim * TILE + TILE / 2],
                scales: &w.scales[t * blocks * TILE..(t + 1) * blocks * TILE],
            };
            if rows <= FUSED_ROWS {
                let sums = rows_over(simd, k_dim, &stored, x, 0, rows);
                add_into(out, &sums, 0, rows, n, t);
                continue;
            }
            // More rows: each weight turned into f32 once, into a panel
            // that stays in the L1 cache while every row runs over it.
            panel.clear();
            for k in 0..k_dim {
                let (a, b) = stored.at(simd, k);
                let (a, b): ([f32; 8], [f32; 8]) = (pulp::cast(a), pulp::cast(b));
                let mut row = [0f32; TILE];
                row[..8].copy_from_slice(&a);
                row[8..].copy_from_slice(&b);
                panel.push(row);
            }
            let mut r0 = 0;
            while r0 < rows {
                let take = (rows - r0).min(4);
                let sums = rows_over(simd, k_dim, &Panel(&panel), x, r0, take);
                add_into(out, &sums, r0, take, n, t);
                r0 += take;
            }
        }
    }
}

/// Where the multiply gets a panel row's sixteen f32 weights. (Traits and
/// functions, not closures: a closure is compiled on its own, for the
/// baseline CPU, and its intrinsics become calls.)
#[cfg(target_arch = "x86_64")]
trait Weights {
    fn at(&self, simd: pulp::x86::V3, k: usize) -> Pair;
}

/// One panel's stored values and scales, turned into f32 at each use.
#[cfg(target_arch = "x86_64")]
struct Stored<'a> {
    values: &'a [i8],
    scales: &'a [f32],
}

#[cfg(target_arch = "x86_64")]
impl Weights for Stored<'_> {
    /// Both halves of the row's values, widened, times their scales.
    #[inline(always)]
    fn at(&self, simd: pulp::x86::V3, k: usize) -> Pair {
        let q = &self.values[k * TILE..k * TILE + TILE + TILE / 2];
        let s = &self.scales[(k / BLOCK) * TILE..(k / BLOCK + 1) * TILE];
        (
            simd.mul_f32x8(widen(simd, &q[..16]), lanes(&s[..8])),
            simd.mul_f32x8(widen(simd, &q[8..]), lanes(&s[8..])),
        )
    }
}

/// A panel already in f32.
#[cfg(target_arch = "x86_64")]
struct Panel<'a>(&'a [[f32; TILE]]);

#[cfg(target_arch = "x86_64")]
impl Weights for Panel<'_> {
    #[inline(always)]
    fn at(&self, _: pulp::x86::V3, k: usize) -> Pair {
        let p = &self.0[k];
        (lanes(&p[..8]), lanes(&p[8..]))
    }
}

/// The first eight of these values as f32 lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn widen(simd: pulp::x86::V3, bytes: &[i8]) -> pulp::f32x8 {
    let b: [i8; 16] = bytes[..16].try_into().expect("16 bytes");
    simd.convert_i32x8_to_f32x8(simd.convert_i8x16_to_i32x8(pulp::cast(b)))
}

/// The first eight of these floats as one vector.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(f: &[f32]) -> pulp::f32x8 {
    let a: [f32; 8] = f[..8].try_into().expect("8 lanes");
    pulp::cast(a)
}

/// Rows `r0..r0 + take` (at most four) of `x` times the `k_dim` panel rows
/// of `weights`: sixteen sums a row. Eight accumulators, two weight
/// vectors and a broadcast input fit AVX2's sixteen registers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rows_over<W: Weights>(
    simd: pulp::x86::V3,
    k_dim: usize,
    weights: &W,
    x: &[f32],
    r0: usize,
    take: usize,
) -> [Pair; 4] {
    let zero = simd.splat_f32x8(0.0);
    let mut acc = [(zero, zero); 4];
    let xs: [&[f32]; 4] = std::array::from_fn(|i| {
        let r = r0 + i.min(take - 1);
        &x[r * k_dim..(r + 1) * k_dim]
    });
    // The common case with a constant count, which unrolls.
    if take == 4 {
        for k in 0..k_dim {
            step(simd, &mut acc, weights.at(simd, k), &xs, k, 4);
        }
    } else {
        for k in 0..k_dim {
            step(simd, &mut acc, weights.at(simd, k), &xs, k, take);
        }
    }
    acc
}

/// Input `k` of the first `rows` rows times its weights, into the sums.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn step(
    simd: pulp::x86::V3,
    acc: &mut [Pair; 4],
    (w0, w1): Pair,
    xs: &[&[f32]; 4],
    k: usize,
    rows: usize,
) {
    for (a, xr) in acc.iter_mut().zip(xs).take(rows) {
        let xb = simd.splat_f32x8(xr[k]);
        a.0 = simd.mul_add_f32x8(xb, w0, a.0);
        a.1 = simd.mul_add_f32x8(xb, w1, a.1);
    }
}

/// Add rows `r0..r0 + take` of panel `t`'s sums into `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn add_into(out: &mut [f32], sums: &[Pair; 4], r0: usize, take: usize, n: usize, t: usize) {
    for (i, (lo, hi)) in sums.iter().enumerate().take(take) {
        let o = &mut out[(r0 + i) * n + t * TILE..(r0 + i) * n + (t + 1) * TILE];
        let (lo, hi): ([f32; 8], [f32; 8]) = (pulp::cast(*lo), pulp::cast(*hi));
        for (o, v) in o.iter_mut().zip(lo.iter().chain(&hi)) {
            *o += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic spread of small values.
    fn spread(seed: u64, n: usize) -> Vec<i64> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                i64::try_from(s % 1000).expect("small")
            })
            .collect()
    }

    #[test]
    fn eight_bit_values_are_within_half_a_step() {
        #[allow(clippy::cast_precision_loss)]
        let v: Vec<f32> = spread(7, 4 * BLOCK)
            .into_iter()
            .enumerate()
            .map(|(i, x)| (x as f32 - 500.0) / (1.0 + (i / BLOCK) as f32 * 100.0))
            .chain(std::iter::repeat_n(0.0, BLOCK))
            .collect();
        let q = Quantized::from_f32(&v);
        assert_eq!((q.values.len(), q.scales.len()), (v.len(), 5));
        let back = q.dequantize();
        for (i, (x, y)) in v.iter().zip(&back).enumerate() {
            let scale = q.scales[i / BLOCK];
            assert!(
                (x - y).abs() <= scale * 0.5 + 1e-6,
                "{i}: {x} came back as {y}"
            );
        }
        // Each block's largest magnitude is a full step range.
        for block in q.values.chunks_exact(BLOCK).take(4) {
            assert_eq!(block.iter().map(|v| v.unsigned_abs()).max(), Some(127));
        }
        // An all-zero block stays zero.
        assert!(back[4 * BLOCK..].iter().all(|x| *x == 0.0));
    }

    fn quantized(seed: u64, outputs: usize, inputs: usize) -> Quantized {
        let n = outputs * inputs;
        Quantized {
            values: spread(seed, n)
                .into_iter()
                .map(|v| i8::try_from(v % 16 - 8).expect("4 bits"))
                .collect(),
            #[allow(clippy::cast_precision_loss)]
            scales: spread(seed + 1, n / BLOCK)
                .into_iter()
                .map(|v| (v as f32 + 1.0) / 20_000.0)
                .collect(),
        }
    }

    /// `out + x · W` the plain way, in f64, from the dequantized parts.
    fn reference(
        parts: &[&Quantized],
        inputs: usize,
        outputs: usize,
        x: &[f32],
        rows: usize,
        out: &[f32],
    ) -> Vec<f64> {
        let dense: Vec<Vec<f32>> = parts.iter().map(|q| q.dequantize()).collect();
        let total = outputs * parts.len();
        let mut want: Vec<f64> = out.iter().map(|v| f64::from(*v)).collect();
        for r in 0..rows {
            for (p, d) in dense.iter().enumerate() {
                for o in 0..outputs {
                    let dot: f64 = (0..inputs)
                        .map(|k| f64::from(x[r * inputs + k]) * f64::from(d[o * inputs + k]))
                        .sum();
                    want[r * total + p * outputs + o] += dot;
                }
            }
        }
        want
    }

    #[test]
    fn the_multiply_is_the_dequantized_one() {
        // Row counts around the four-row step, output widths with and
        // without a partial panel, parts side by side.
        for (rows, inputs, outputs, parts) in [
            (0, 32, 16, 1),
            (1, 32, 16, 1),
            (2, 64, 32, 1),
            (3, 64, 48, 1),
            (6, 64, 32, 2),
            (4, 96, 16, 3),
            (5, 384, 384, 1),
            (13, 64, 8, 2),
        ] {
            let ps: Vec<Quantized> = (0..parts)
                .map(|p| quantized(7 + p as u64 * 31, outputs, inputs))
                .collect();
            let ps: Vec<&Quantized> = ps.iter().collect();
            let w = Blocked::from_parts(&ps, inputs, outputs).expect("blocks fit");
            #[allow(clippy::cast_precision_loss)]
            let x: Vec<f32> = spread(99, rows * inputs)
                .into_iter()
                .map(|v| v as f32 / 500.0 - 1.0)
                .collect();
            #[allow(clippy::cast_precision_loss)]
            let bias: Vec<f32> = (0..rows * outputs * parts)
                .map(|i| i as f32 / 7.0)
                .collect();
            let want = reference(&ps, inputs, outputs, &x, rows, &bias);
            let mut got = bias.clone();
            w.multiply_add(&x, rows, &mut got);
            let mut plain = bias.clone();
            w.portable(&x, rows, &mut plain);
            for (path, got) in [("dispatched", &got), ("portable", &plain)] {
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*g) - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{path} {rows}x{inputs}x{outputs}x{parts}: out[{i}] = {g}, want {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn blocks_must_fall_on_rows() {
        let q = quantized(3, 4, 48);
        assert!(Blocked::from_parts(&[&q], 48, 4).is_none());
        let q = quantized(3, 16, 64);
        assert!(
            Blocked::from_parts(&[&q], 64, 12).is_none(),
            "a part of the wrong shape"
        );
        let q = quantized(3, 24, 64);
        assert!(
            Blocked::from_parts(&[&q], 64, 24).is_none(),
            "no whole panel"
        );
    }

    #[test]
    fn a_table_row_is_its_dequantized_row() {
        let q = quantized(5, 6, 64);
        let dense = q.dequantize();
        for r in 0..6 {
            let row: Vec<f32> = q.row(r, 64).collect();
            assert_eq!(row, dense[r * 64..(r + 1) * 64]);
        }
    }
}
