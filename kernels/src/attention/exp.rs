//! A vectorisable base-2 exponential for the softmax of attention scores.
//!
//! The online softmax needs `2^x` for `x <= 0` over whole tiles of scores; `f32::exp2`
//! is a library call per element. This one is straight-line arithmetic that the compiler
//! turns into SIMD instructions inside the kernel's target-feature functions.

/// `2^x` for `x <= 0` (and `-inf`), relative error below 2e-7; inputs below -126 give 0.
#[inline(always)]
pub(crate) fn exp2_non_positive(x: f32) -> f32 {
    // -inf and anything below -127 become exactly -127: n = -127, f = 0, result 0.
    let x = x.max(-127.0);
    let n = (x + 0.5).floor();
    let f = x - n; // in [-0.5, 0.5]
                   // 2^f = e^(f ln 2), Taylor series to degree 7 (error (0.347^8)/8! < 6e-9).
    let t = f * std::f32::consts::LN_2;
    let mut p = 1.0 / 5040.0;
    p = p * t + 1.0 / 720.0;
    p = p * t + 1.0 / 120.0;
    p = p * t + 1.0 / 24.0;
    p = p * t + 1.0 / 6.0;
    p = p * t + 0.5;
    p = p * t + 1.0;
    p = p * t + 1.0;
    // 2^n by building the exponent field; n = -127 gives the bit pattern of 0.0.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_library_exponential() {
        let mut worst = 0f64;
        let mut x = -40.0f32;
        while x <= 0.0 {
            let got = exp2_non_positive(x) as f64;
            let want = (x as f64).exp2();
            worst = worst.max(((got - want) / want).abs());
            x += 0.001;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
    }

    #[test]
    fn masked_scores_give_exact_zero() {
        assert_eq!(exp2_non_positive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp2_non_positive(-500.0), 0.0);
        assert_eq!(exp2_non_positive(0.0), 1.0);
    }
}
