//! A vectorisable base-2 exponential for the softmax of attention scores.
//!
//! The online softmax needs `2^x` for `x <= 0` over whole tiles of scores; `f32::exp2`
//! is a library call per element. This one is straight-line arithmetic that the compiler
//! turns into SIMD instructions inside the kernel's target-feature functions.

/// `2^x` for `x <= 0` (and `-inf`), relative error below 2e-7; inputs below -126 give 0.
#[inline(always)]
pub(crate) fn exp2_non_positive<M: MulAdd>(x: f32) -> f32 {
    // -inf and anything below -127 become exactly -127: n = -127, f = 0, result 0.
    // (A comparison, not `f32::max`: its NaN rules would keep the compiler from a single
    // vector instruction.)
    let x = if x < -127.0 { -127.0 } else { x };
    let n = (x + 0.5).floor();
    let f = x - n; // in [-0.5, 0.5]
                   // 2^f = e^(f ln 2), Taylor series to degree 7 (error (0.347^8)/8! < 6e-9).
    let t = f * std::f32::consts::LN_2;
    let mut p = 1.0 / 5040.0;
    p = M::mul_add(p, t, 1.0 / 720.0);
    p = M::mul_add(p, t, 1.0 / 120.0);
    p = M::mul_add(p, t, 1.0 / 24.0);
    p = M::mul_add(p, t, 1.0 / 6.0);
    p = M::mul_add(p, t, 0.5);
    p = M::mul_add(p, t, 1.0);
    p = M::mul_add(p, t, 1.0);
    // 2^n by building the exponent field; n = -127 gives the bit pattern of 0.0.
    // `n + 127` is a whole number in [0, 127]; added to 2^23 it lands in the low bits of
    // the mantissa. (`n as i32` would saturate and map NaN to 0, which compiles to
    // scalar code per lane.)
    let biased = (n + (127.0 + 8_388_608.0)).to_bits() & 0xff;
    let scale = f32::from_bits(biased << 23);
    p * scale
}

/// `a * b + c`, fused or not: fused only where the CPU has FMA (x86-64's FMA3, or any
/// aarch64 CPU: `fmadd`/`fmla` are part of its base instruction set); elsewhere it would
/// be a slow library call.
pub(crate) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// One rounding: the FMA instruction.
pub(crate) struct Fused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// Two roundings: multiply, then add.
pub(crate) struct Separate;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_library_exponential() {
        for exp2 in [exp2_non_positive::<Separate>, exp2_non_positive::<Fused>] {
            let mut worst = 0f64;
            let mut x = -40.0f32;
            while x <= 0.0 {
                let got = exp2(x) as f64;
                let want = (x as f64).exp2();
                worst = worst.max(((got - want) / want).abs());
                x += 0.001;
            }
            assert!(worst < 2e-7, "worst relative error {worst}");
        }
    }

    #[test]
    fn masked_scores_give_exact_zero() {
        for exp2 in [exp2_non_positive::<Separate>, exp2_non_positive::<Fused>] {
            assert_eq!(exp2(f32::NEG_INFINITY), 0.0);
            assert_eq!(exp2(-500.0), 0.0);
            assert_eq!(exp2(0.0), 1.0);
        }
    }
}
