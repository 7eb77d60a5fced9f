//! The exact GELU, `x·Φ(x)`, in branchless f32 arithmetic that the
//! compiler turns into vector code, instead of one `libm::erff` call per
//! value (a branchy scalar function: a tenth of a query's embedding went
//! there, docs/BENCHMARKS.md).
//!
//! With `z = |x|/√2` and `t = 1/(1 + z/2)`, the complementary error
//! function is `erfc(z) = t·exp(−z² + p(t))`, where `p` is smooth on
//! `t ∈ (0, 1]` and a degree-9 polynomial holds it to 1.8e-7 (fitted by
//! least squares at 4,000 Chebyshev nodes of `t ∈ [1/6, 1]`, that is
//! `z ≤ 10`, against a 40-digit `erfc`; past `z = 10` erfc is below f32's
//! smallest normal number anyway). Then `Φ(x) = erfc(z)/2` for `x < 0` and
//! `1 − erfc(z)/2` otherwise, so the small tail keeps its relative
//! accuracy. `exp` is computed here too (a power of two from the
//! exponent bits, times a degree-6 polynomial on `[−ln2/2, ln2/2]`, within
//! 1.1e-7), because the standard library's is a scalar call.
//!
//! No operation is fused or reordered (Rust does not contract `a·b + c`),
//! so the vector code and the plain loop give the same bits on every CPU.

/// `p(t)`'s coefficients, constant term first.
const ERFC_TAIL: [f32; 10] = [
    -1.265_448,
    0.998_632_8,
    0.386_640_4,
    0.034_602_8,
    0.001_267_586_5,
    -0.080_280_43,
    -0.696_251_87,
    1.156_733_8,
    -0.680_827_2,
    0.144_930_21,
];

/// `(eʳ − 1 − r)/r²` on `r ∈ [−ln2/2, ln2/2]`, constant term first.
const EXP_REST: [f32; 5] = [
    0.5,
    0.166_665_76,
    0.041_666_467,
    0.008_363_175,
    0.001_393_364_4,
];

/// ln 2 in two parts (Cody and Waite): `k·LN2_HI` is exact for the `k`
/// used here, `LN2_LO` carries the rest.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5·2²³: adding it rounds a float below 2²² to an integer, which then
/// sits in the low bits of the sum's mantissa.
const ROUNDER: f32 = 12_582_912.0;

/// `eʸ` for `y ≤ 0` (anything below −87 gives e⁻⁸⁷, about 1.6e-38: the
/// caller adds it to 1, or takes 0 instead, where it would matter).
#[inline(always)]
fn exp_non_positive(y: f32) -> f32 {
    let y = y.max(-87.0);
    let shifted = y * std::f32::consts::LOG2_E + ROUNDER;
    let k = shifted - ROUNDER;
    // The same integer, read from the mantissa: −126 ≤ k ≤ 0.
    let k_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let r = y - k * LN2_HI - k * LN2_LO;
    let mut rest = EXP_REST[4];
    for c in EXP_REST[..4].iter().rev() {
        rest = rest * r + c;
    }
    let e_r = 1.0 + r + r * r * rest;
    // 2ᵏ: the exponent field k + 127 (1 ≤ k + 127 ≤ 127), mantissa zero.
    let two_k = f32::from_bits(k_bits.wrapping_add(127) << 23);
    e_r * two_k
}

/// GELU of one value: `x·Φ(x)`. Below x ≈ −13.01 (z > 9.2, before `exp`'s
/// argument reaches its floor), where |GELU| is under 1e-37, it is 0 (so
/// −∞ gives 0, as the limit does).
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let far = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let z = far.min(10.0);
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = ERFC_TAIL[9];
    for c in ERFC_TAIL[..9].iter().rev() {
        p = p * t + c;
    }
    // erfc(z) / 2.
    let half_erfc = 0.5 * t * exp_non_positive(p - z * z);
    let phi = if x < 0.0 { half_erfc } else { 1.0 - half_erfc };
    // Not x·0 there: −∞·0 is NaN.
    if x < 0.0 && far > 9.2 { 0.0 } else { x * phi }
}

/// GELU of every value, in place: compiled for AVX2 where the CPU has it
/// (pulp, as the weight multiply is), in plain code elsewhere; the same
/// bits either way.
pub(crate) fn apply(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        simd.vectorize(Wide(values));
        return;
    }
    plain(values);
}

fn plain(values: &mut [f32]) {
    for v in values {
        *v = gelu(*v);
    }
}

/// The loop inside the function pulp compiles for AVX2 (everything it
/// calls is inlined into it, so the compiler vectorizes it for 8 lanes).
#[cfg(target_arch = "x86_64")]
struct Wide<'a>(&'a mut [f32]);

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Wide<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        for v in self.0 {
            *v = gelu(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GELU from f64's error function: the reference.
    fn reference(x: f32) -> f64 {
        let x = f64::from(x);
        0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
    }

    /// Every 1/4096 from −16 to 16, and far out.
    fn grid() -> Vec<f32> {
        #[allow(clippy::cast_precision_loss)]
        let near = (-65_536..=65_536).map(|i| i as f32 / 4096.0);
        near.chain([
            -1e4,
            -100.0,
            -30.0,
            -13.0,
            13.0,
            30.0,
            100.0,
            1e4,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
        ])
        .collect()
    }

    #[test]
    fn exp_is_within_a_few_ulp_on_its_whole_range() {
        let mut worst = (0.0f64, 0.0f32);
        #[allow(clippy::cast_precision_loss)]
        for i in 0..=870_000 {
            let y = -(i as f32) / 10_000.0;
            let want = f64::from(y).exp();
            let err = (f64::from(exp_non_positive(y)) - want).abs() / want;
            if err > worst.0 {
                worst = (err, y);
            }
        }
        assert!(
            worst.0 < 2.5e-7,
            "worst relative error {} at y = {}",
            worst.0,
            worst.1
        );
    }

    #[test]
    fn phi_is_within_4e_7_and_the_tail_keeps_its_relative_accuracy() {
        let (mut abs, mut rel) = ((0.0f64, 0.0f32), (0.0f64, 0.0f32));
        for x in grid() {
            let (got, want) = (f64::from(gelu(x)), reference(x));
            // Φ's absolute error: GELU's relative to |x|.
            let e = (got - want).abs() / f64::from(x.abs()).max(1e-30);
            if e > abs.0 {
                abs = (e, x);
            }
            // Where Φ is tiny (x < 0, down to where f32 still holds
            // GELU), its relative error, which grows with z² from the
            // rounding of z² inside exp.
            if (-13.0..0.0).contains(&x) {
                let z = f64::from(x) * std::f64::consts::FRAC_1_SQRT_2;
                let e = (got - want).abs() / want.abs() / (1.0 + 0.25 * z * z);
                if e > rel.0 {
                    rel = (e, x);
                }
            }
        }
        assert!(abs.0 < 4e-7, "Φ off by {} at x = {}", abs.0, abs.1);
        assert!(
            rel.0 < 1e-6,
            "the tail off by {} (scaled) at x = {}",
            rel.0,
            rel.1
        );
    }

    #[test]
    fn nowhere_meaningfully_worse_than_libm_erff() {
        // The previous computation, point by point relative to |x| (the
        // scale of GELU's value): ours may differ from the exact value by
        // at most libm's error plus two f32 steps.
        let libm_gelu = |x: f32| x * 0.5 * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2));
        for x in grid() {
            let want = reference(x);
            let scale = f64::from(x.abs()).max(1e-30);
            let ours = (f64::from(gelu(x)) - want).abs() / scale;
            let theirs = (f64::from(libm_gelu(x)) - want).abs() / scale;
            assert!(
                ours <= theirs + 2.4e-7,
                "x = {x}: ours {ours}, libm's {theirs}"
            );
        }
    }

    #[test]
    fn the_vector_code_gives_the_plain_loops_bits() {
        let xs = grid();
        let mut wide = xs.clone();
        apply(&mut wide);
        let mut one = xs;
        plain(&mut one);
        assert!(
            wide.iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "the dispatched and the plain loop differ"
        );
    }

    #[test]
    fn the_tails_and_zero() {
        assert_eq!(gelu(0.0), 0.0);
        assert_eq!(gelu(1e4), 1e4);
        assert_eq!(gelu(-1e4), 0.0);
        assert_eq!(gelu(-30.0), 0.0);
        assert_eq!(gelu(f32::NEG_INFINITY), 0.0);
        assert_eq!(gelu(-f32::MAX), 0.0);
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert!(gelu(f32::NAN).is_nan());
        assert!(gelu(-13.0) < 0.0, "still there at −13: {}", gelu(-13.0));
        // −3·Φ(−3) = −0.004 049 694 1…
        assert!(
            (gelu(-3.0) - (-0.004_049_694)).abs() < 1e-8,
            "{}",
            gelu(-3.0)
        );
    }
}
