//! Key tiles transposed into the layout the attention's score loop reads
//! (`(head_dim, KEY_TILE)`, dimension-major), with vector shuffles where the CPU has them.
//!
//! Every call of the attention transposes the keys it reads (prefix segments once, each
//! row's own keys once). In a decoding step every row brings one query token per head
//! group and hundreds of keys, so the transposition is as much work as the attention
//! itself: written element by element (one scalar store per float) it took 39% of a
//! decode-shaped call and 13% of a whole decoding run. On AVX-512 the keys go through
//! 16 x 16 register transposes instead (16 loads, 64 shuffles, 16 stores per block).
//! The result is the same floats in the same places on every path: a transposition
//! moves values, it computes nothing.

use super::tile::KEY_TILE;
use super::SimdPath;

/// Transpose up to [`KEY_TILE`] keys of width `dim` (`len` rows of `keys`) into `out`
/// (`dim * KEY_TILE` floats, `out[d * KEY_TILE + j]` = dimension `d` of key `j`, zero
/// past `len`), on `path` where it has a vector version.
pub(crate) fn transpose_tile_on(
    path: SimdPath,
    keys: &[f32],
    dim: usize,
    len: usize,
    out: &mut [f32],
) {
    assert!(
        len <= KEY_TILE && keys.len() >= len * dim && out.len() >= dim * KEY_TILE,
        "transpose_tile: {len} keys of {dim} from {} floats into {}",
        keys.len(),
        out.len()
    );
    #[cfg(target_arch = "x86_64")]
    if path == SimdPath::Avx512 && dim.is_multiple_of(16) {
        // SAFETY: the caller's path was checked against the CPU's features, and the
        // slices' lengths were checked above.
        unsafe { x86::transpose_tile_avx512(keys, dim, len, out) };
        return;
    }
    let _ = path;
    transpose_tile_portable(keys, dim, len, out);
}

/// [`transpose_tile_on`] one float at a time (any machine).
pub(crate) fn transpose_tile_portable(keys: &[f32], dim: usize, len: usize, out: &mut [f32]) {
    out[..dim * KEY_TILE].fill(0.0);
    for (j, key) in keys.chunks_exact(dim).take(len).enumerate() {
        for (d, &x) in key.iter().enumerate() {
            out[d * KEY_TILE + j] = x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::KEY_TILE;
    use std::arch::x86_64::*;

    /// 16 rows of 16 floats transposed in registers: row `i` of the result holds
    /// element `i` of every input row.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose16(r: &mut [__m512; 16]) {
        // Pairs of rows interleaved element by element, then pairs of those two
        // elements at a time: each 128-bit lane now holds a 4 x 4 block transposed.
        let mut t = [_mm512_setzero_ps(); 16];
        for p in 0..8 {
            t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
            t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
        }
        for q in 0..4 {
            let (a, b, c, d) = (t[4 * q], t[4 * q + 1], t[4 * q + 2], t[4 * q + 3]);
            r[4 * q] =
                _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
            r[4 * q + 1] =
                _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
            r[4 * q + 2] =
                _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
            r[4 * q + 3] =
                _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
        }
        // Then the 4 x 4 grid of 128-bit blocks transposed, in two rounds of lane
        // shuffles between groups of four rows.
        for q in 0..2 {
            for i in 0..4 {
                let (a, b) = (r[8 * q + i], r[8 * q + 4 + i]);
                t[8 * q + i] = _mm512_shuffle_f32x4::<0x88>(a, b);
                t[8 * q + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(a, b);
            }
        }
        for i in 0..8 {
            r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            r[8 + i] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[8 + i]);
        }
    }

    /// # Safety
    /// AVX-512F must be present; `keys` holds `len * dim` floats, `out` `dim * KEY_TILE`,
    /// `len <= KEY_TILE`, and `dim` is a multiple of 16.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_tile_avx512(
        keys: &[f32],
        dim: usize,
        len: usize,
        out: &mut [f32],
    ) {
        let (src, dst) = (keys.as_ptr(), out.as_mut_ptr());
        for half in 0..KEY_TILE / 16 {
            let first = half * 16;
            let rows = len.saturating_sub(first).min(16);
            for d0 in (0..dim).step_by(16) {
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, row) in r.iter_mut().enumerate() {
                    if i < rows {
                        // SAFETY: key `first + i` < len lies in `keys`.
                        *row = unsafe { _mm512_loadu_ps(src.add((first + i) * dim + d0)) };
                    }
                }
                transpose16(&mut r);
                for (i, row) in r.iter().enumerate() {
                    // SAFETY: `(d0 + i) * KEY_TILE + first + 16 <= dim * KEY_TILE`.
                    unsafe { _mm512_storeu_ps(dst.add((d0 + i) * KEY_TILE + first), *row) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_puts_every_key_where_the_portable_transposition_does() {
        for dim in [16, 32, 48, 64, 80, 128, 256] {
            for len in 0..=KEY_TILE {
                let keys: Vec<f32> = (0..len * dim).map(|i| i as f32 * 0.5 + 1.0).collect();
                let mut expected = vec![f32::NAN; dim * KEY_TILE];
                transpose_tile_portable(&keys, dim, len, &mut expected);
                for (j, key) in keys.chunks_exact(dim).enumerate() {
                    for (d, &x) in key.iter().enumerate() {
                        assert_eq!(expected[d * KEY_TILE + j], x);
                    }
                }
                for path in [SimdPath::Avx512, SimdPath::Avx2, SimdPath::Portable] {
                    if !path.available() {
                        continue;
                    }
                    let mut got = vec![f32::NAN; dim * KEY_TILE];
                    transpose_tile_on(path, &keys, dim, len, &mut got);
                    assert!(
                        got.iter()
                            .zip(&expected)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{path:?}: {len} keys of width {dim}"
                    );
                }
            }
        }
    }
}
