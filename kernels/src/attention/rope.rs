//! From one packed query/key/value projection to the layouts segment attention reads:
//! rotary embeddings applied to queries and keys, keys and values regrouped by head.
//!
//! The decoder projects all tokens at once into `(tokens, (heads + 2 kv_heads) * head_dim)`.
//! Attention wants queries packed by token (as they are) but rotated, and each row's keys
//! and values by head, `(rows, kv_heads, stride, head_dim)`, which is also the layout they
//! are cached in. One pass does both, instead of padding, transposing and rotating
//! through several temporaries.
//!
//! Rotation covers the first `rotary_dim` dimensions of each query/key head (all of it
//! but for partial rotary embeddings, e.g. Phi-4-mini); the others are copied as they are.

use super::{AttentionDims, AttentionError};

/// Rotary-embedding tables `(positions, rotary_dim / 2)`.
#[derive(Debug, Clone, Copy)]
pub struct RopeTables<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    /// Rotated dimensions of each head, from the first; even, at most `head_dim`.
    pub rotary_dim: usize,
    /// Rotate pairs `(2i, 2i + 1)` (GPT-J style) instead of halves `(i, i + d/2)`.
    pub interleaved: bool,
}

/// Split `projected` (one group's tokens, rows after one another) into rotated
/// `queries` `(tokens, heads * head_dim)` and rotated `keys` / plain `values`
/// `(rows, kv_heads, stride, head_dim)`; row `r`'s token `t` is at position
/// `first_position + t`. Positions past a row's length are set to zero.
#[allow(clippy::too_many_arguments)]
pub fn split_rotate(
    dims: AttentionDims,
    rope: RopeTables,
    first_position: usize,
    lengths: &[usize],
    stride: usize,
    projected: &[f32],
    queries: &mut [f32],
    keys: &mut [f32],
    values: &mut [f32],
) -> Result<(), AttentionError> {
    let hd = dims.head_dim;
    let rd = rope.rotary_dim;
    let half = rd / 2;
    let q_width = dims.heads * hd;
    let kv_width = dims.kv_heads * hd;
    let in_width = q_width + 2 * kv_width;
    let tokens: usize = lengths.iter().sum();
    let own = lengths.len() * kv_width * stride;
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let fail = |m: String| Err(AttentionError(m));
    if rd == 0 || !rd.is_multiple_of(2) || rd > hd {
        return fail(format!("rotation of {rd} dimensions of {hd}-wide heads"));
    }
    if longest > stride {
        return fail(format!(
            "rows of {longest} tokens exceed the stride {stride}"
        ));
    }
    if projected.len() < tokens * in_width || queries.len() < tokens * q_width {
        return fail(format!(
            "projection/queries hold {}/{} floats, need {}/{}",
            projected.len(),
            queries.len(),
            tokens * in_width,
            tokens * q_width
        ));
    }
    if keys.len() < own || values.len() < own {
        return fail(format!("keys/values need {own} floats"));
    }
    let positions = first_position + longest;
    if rope.cos.len() < positions * half || rope.sin.len() < positions * half {
        return fail(format!(
            "rotary tables cover fewer than {positions} positions"
        ));
    }
    let mut token = 0;
    for (row, &length) in lengths.iter().enumerate() {
        for t in 0..stride {
            for h in 0..dims.kv_heads {
                let at = ((row * dims.kv_heads + h) * stride + t) * hd;
                if t >= length {
                    keys[at..at + hd].fill(0.0);
                    values[at..at + hd].fill(0.0);
                    continue;
                }
                let src = &projected[token * in_width..(token + 1) * in_width];
                let pos = (first_position + t) * half;
                let (cos, sin) = (&rope.cos[pos..pos + half], &rope.sin[pos..pos + half]);
                let k = &src[q_width + h * hd..q_width + (h + 1) * hd];
                rotate(k, &mut keys[at..at + hd], cos, sin, rope.interleaved);
                let v = &src[q_width + kv_width + h * hd..q_width + kv_width + (h + 1) * hd];
                values[at..at + hd].copy_from_slice(v);
            }
            if t < length {
                let src = &projected[token * in_width..token * in_width + q_width];
                let dst = &mut queries[token * q_width..(token + 1) * q_width];
                let pos = (first_position + t) * half;
                let (cos, sin) = (&rope.cos[pos..pos + half], &rope.sin[pos..pos + half]);
                for h in 0..dims.heads {
                    let span = h * hd..(h + 1) * hd;
                    rotate(
                        &src[span.clone()],
                        &mut dst[span],
                        cos,
                        sin,
                        rope.interleaved,
                    );
                }
                token += 1;
            }
        }
    }
    Ok(())
}

/// `out = x` rotated over its first `2 * cos.len()` dimensions, the rest copied.
#[inline]
fn rotate(x: &[f32], out: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool) {
    let half = cos.len();
    let (x, pass) = x.split_at(2 * half);
    let (out, out_pass) = out.split_at_mut(2 * half);
    out_pass.copy_from_slice(pass);
    if interleaved {
        for i in 0..half {
            let (a, b) = (x[2 * i], x[2 * i + 1]);
            out[2 * i] = a * cos[i] - b * sin[i];
            out[2 * i + 1] = a * sin[i] + b * cos[i];
        }
    } else {
        let (lo, hi) = x.split_at(half);
        let (out_lo, out_hi) = out.split_at_mut(half);
        for i in 0..half {
            out_lo[i] = lo[i] * cos[i] - hi[i] * sin[i];
            out_hi[i] = hi[i] * cos[i] + lo[i] * sin[i];
        }
    }
}
