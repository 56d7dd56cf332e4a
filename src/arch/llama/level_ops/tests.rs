//! The fused level operations against references built from plain candle operations
//! and an f64 attention.

use super::*;
use candle_core::{Device, IndexOp};

/// Deterministic values in about [-1, 1].
fn fill(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn shape() -> LevelShape {
    LevelShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        rotary_dim: 16,
        interleaved: false,
        scale: 0.25,
        softcap: None,
        window: None,
    }
}

/// Rope tables `(positions, rotary_dim / 2)` as the model builds them.
fn tables(positions: usize, rotary_dim: usize) -> (Vec<f32>, Vec<f32>) {
    let half = rotary_dim / 2;
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for p in 0..positions {
        for i in 0..half {
            let angle = p as f32 / 10000f32.powf(2.0 * i as f32 / rotary_dim as f32);
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}

/// A pass of three rows over an arena whose first 150 positions hold two contexts'
/// keys (several tiles each, a ragged last one): a row continuing context 0 and a
/// candidate, one continuing context 1, and one with no ancestors that nobody reads.
fn rows() -> Vec<(usize, Vec<Range<usize>>, usize, usize)> {
    // (tokens, segments, position, destination)
    vec![
        (5, vec![0..100, 100..110], 110, 150),
        (3, std::iter::once(110..140).collect(), 30, 155),
        (2, vec![], 0, 158),
    ]
}

fn meta_rows(rows: &[(usize, Vec<Range<usize>>, usize, usize)]) -> Vec<MetaRow<'_>> {
    rows.iter()
        .map(|(tokens, segments, position, destination)| MetaRow {
            tokens: *tokens,
            position: *position,
            segments,
            destination: *destination,
        })
        .collect()
}

/// The rotated head `x` by candle's own rope, at `position`.
fn candle_rope(x: &[f32], position: usize, s: &LevelShape) -> Vec<f32> {
    let (cos, sin) = tables(position + 1, s.rotary_dim);
    let half = s.rotary_dim / 2;
    let cos = Tensor::from_vec(cos[position * half..].to_vec(), (1, half), &Device::Cpu).unwrap();
    let sin = Tensor::from_vec(sin[position * half..].to_vec(), (1, half), &Device::Cpu).unwrap();
    let head = Tensor::from_vec(x.to_vec(), (1, 1, 1, s.head_dim), &Device::Cpu).unwrap();
    let rotary = head
        .narrow(3, 0, s.rotary_dim)
        .unwrap()
        .contiguous()
        .unwrap();
    let rotated = if s.interleaved {
        candle_nn::rotary_emb::rope_i(&rotary, &cos, &sin).unwrap()
    } else {
        candle_nn::rotary_emb::rope(&rotary, &cos, &sin).unwrap()
    };
    let mut out = rotated.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    out.extend_from_slice(&x[s.rotary_dim..]);
    out
}

struct Pass {
    projected: Tensor,
    arena: Tensor,
    meta: LevelMeta,
    meta_tensor: Tensor,
    cos: Tensor,
    sin: Tensor,
}

fn pass(s: LevelShape, dtype: DType) -> Result<Pass> {
    let rows = rows();
    let meta = LevelMeta::new(&meta_rows(&rows))?;
    let tokens = meta.tokens;
    let device = Device::Cpu;
    let kv_width = s.kv_heads * s.head_dim;
    let arena_values = fill(160 * 2 * kv_width, 1);
    let arena = Tensor::from_vec(arena_values, (160, 2 * kv_width), &device)?.to_dtype(dtype)?;
    let projected = Tensor::from_vec(
        fill(tokens * s.projected_width(), 2),
        (tokens, s.projected_width()),
        &device,
    )?
    .to_dtype(dtype)?;
    let (cos, sin) = tables(200, s.rotary_dim);
    let half = s.rotary_dim / 2;
    let positions: Vec<u32> = (0..tokens).map(|t| meta.query_position(t) as u32).collect();
    let index = Tensor::new(positions.as_slice(), &device)?;
    let cos = Tensor::from_vec(cos, (200, half), &device)?
        .index_select(&index, 0)?
        .to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (200, half), &device)?
        .index_select(&index, 0)?
        .to_dtype(dtype)?;
    let meta_tensor = Tensor::new(meta.words.as_slice(), &device)?;
    Ok(Pass {
        projected,
        arena,
        meta,
        meta_tensor,
        cos,
        sin,
    })
}

/// The f64 attention of token `t`, head `head`, over the ranges the pass gives it, with
/// keys and queries rotated by candle's rope.
fn reference(p: &Pass, s: &LevelShape, t: usize, head: usize) -> Result<Vec<f64>> {
    let arena = p.arena.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    let row = p.projected.to_dtype(DType::F32)?.i(t)?.to_vec1::<f32>()?;
    let d = s.head_dim;
    let kv = head / (s.heads / s.kv_heads);
    let kv_width = s.kv_heads * d;
    let q = candle_rope(&row[head * d..(head + 1) * d], p.meta.query_position(t), s);
    let mut scores = Vec::new();
    let mut values = Vec::new();
    for (start, end, first) in p.meta.ranges(t) {
        for (j, key) in (start..end).enumerate() {
            let position = first + j;
            if s.window
                .is_some_and(|w| p.meta.query_position(t) - position >= w)
            {
                continue;
            }
            let k = &arena[key][kv * d..(kv + 1) * d];
            let dot: f64 = q
                .iter()
                .zip(k)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let mut score = dot * f64::from(s.scale);
            if let Some(cap) = s.softcap {
                score = (score / f64::from(cap)).tanh() * f64::from(cap);
            }
            scores.push(score);
            values.push(arena[key][kv_width + kv * d..kv_width + (kv + 1) * d].to_vec());
        }
    }
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut out = vec![0f64; d];
    for (w, v) in weights.iter().zip(&values) {
        for (o, &x) in out.iter_mut().zip(v) {
            *o += w / total * f64::from(x);
        }
    }
    Ok(out)
}

/// Writes the pass into the arena and attends; the largest difference from the f64
/// reference over every token and head.
fn worst_attention_error(s: LevelShape, dtype: DType, path: CpuAttention) -> Result<f64> {
    let p = pass(s, dtype)?;
    rope_store(
        &p.arena,
        &p.projected,
        &p.meta,
        &p.meta_tensor,
        (&p.cos, &p.sin),
        s,
    )?;
    let out = attend_with(
        &p.projected,
        &p.arena,
        &p.meta,
        &p.meta_tensor,
        (&p.cos, &p.sin),
        s,
        path,
    )?
    .to_dtype(DType::F32)?
    .to_vec2::<f32>()?;
    let mut worst = 0f64;
    for (t, row) in out.iter().enumerate() {
        for head in 0..s.heads {
            let expected = reference(&p, &s, t, head)?;
            for (a, b) in row[head * s.head_dim..].iter().zip(&expected) {
                worst = worst.max((f64::from(*a) - b).abs());
            }
        }
    }
    Ok(worst)
}

#[test]
fn rope_store_writes_rotated_keys_and_values_at_each_destination() -> Result<()> {
    for (rotary_dim, interleaved) in [(16, false), (16, true), (8, false)] {
        let s = LevelShape {
            rotary_dim,
            interleaved,
            ..shape()
        };
        let p = pass(s, DType::F32)?;
        let before = p.arena.to_vec2::<f32>()?;
        rope_store(
            &p.arena,
            &p.projected,
            &p.meta,
            &p.meta_tensor,
            (&p.cos, &p.sin),
            s,
        )?;
        let after = p.arena.to_vec2::<f32>()?;
        let projected = p.projected.to_vec2::<f32>()?;
        let (q_width, kv_width, d) = (s.q_width(), s.kv_width(), s.head_dim);
        let mut written = vec![false; after.len()];
        for (t, row) in projected.iter().enumerate() {
            let dest = p.meta.destination(t);
            written[dest] = true;
            for h in 0..s.kv_heads {
                let key = &row[q_width + h * d..q_width + (h + 1) * d];
                let expected = candle_rope(key, p.meta.query_position(t), &s);
                for (j, (a, b)) in after[dest][h * d..(h + 1) * d]
                    .iter()
                    .zip(&expected)
                    .enumerate()
                {
                    assert!(
                        (a - b).abs() <= 1e-6,
                        "rotary {rotary_dim}, token {t}, head {h}, {j}: {a} vs {b}"
                    );
                }
            }
            assert_eq!(
                after[dest][kv_width..],
                row[q_width + kv_width..],
                "values of token {t}"
            );
        }
        for (position, was) in written.iter().enumerate() {
            if !was {
                assert_eq!(
                    after[position], before[position],
                    "position {position} untouched"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn ragged_attention_matches_the_f64_reference() -> Result<()> {
    for s in [
        shape(),
        LevelShape {
            interleaved: true,
            rotary_dim: 8,
            ..shape()
        },
        LevelShape {
            softcap: Some(0.5),
            window: Some(20),
            ..shape()
        },
        LevelShape {
            heads: 2,
            kv_heads: 2,
            head_dim: 64,
            rotary_dim: 64,
            window: Some(1),
            ..shape()
        },
    ] {
        // The CUDA kernel's tiled loop, and our vector segment kernel.
        for path in [CpuAttention::Tiled, CpuAttention::Kernel] {
            let worst = worst_attention_error(s, DType::F32, path)?;
            assert!(worst <= 1e-5, "{s:?}, {path:?}: largest difference {worst}");
        }
    }
    Ok(())
}

#[test]
fn reduced_precision_stays_within_its_rounding() -> Result<()> {
    // Inputs rounded to bf16/f16 against the f64 reference on the rounded inputs; the
    // output rounds once.
    let bf16 = worst_attention_error(shape(), DType::BF16, CpuAttention::Kernel)?;
    let f16 = worst_attention_error(shape(), DType::F16, CpuAttention::Kernel)?;
    assert!(bf16 <= 8e-3 && f16 <= 1e-3, "bf16 {bf16}, f16 {f16}");
    Ok(())
}

#[test]
fn act_mul_equals_the_activation_times_up_on_a_split_product() -> Result<()> {
    let device = Device::Cpu;
    let both = Tensor::from_vec(fill(7 * 24, 5), (7, 24), &device)?.affine(4.0, 0.0)?;
    let (gate, up) = (both.narrow(1, 0, 12)?, both.narrow(1, 12, 12)?);
    for (activation, expected) in [
        (GatedActivation::Silu, (candle_nn::ops::silu(&gate)? * &up)?),
        (GatedActivation::GeluTanh, (gate.gelu()? * &up)?),
    ] {
        let got = act_mul(&gate, &up, activation)?;
        let worst = (got - expected)?
            .abs()?
            .flatten_all()?
            .max(0)?
            .to_scalar::<f32>()?;
        assert!(worst <= 1e-5, "{activation:?}: {worst}");
    }
    let bf16 = act_mul(
        &gate.to_dtype(DType::BF16)?,
        &up.to_dtype(DType::BF16)?,
        GatedActivation::Silu,
    )?;
    assert_eq!(bf16.dtype(), DType::BF16);
    Ok(())
}

#[test]
fn index_data_outside_the_arena_is_refused_before_any_kernel() -> Result<()> {
    let s = shape();
    let p = pass(s, DType::F32)?;
    let segments: Vec<Range<usize>> = std::iter::once(0..170).collect();
    let bad = LevelMeta::new(&[MetaRow {
        tokens: 1,
        position: 170,
        segments: &segments,
        destination: 0,
    }])?;
    let projected = p.projected.narrow(0, 0, 1)?;
    let tables = (&p.cos.narrow(0, 0, 1)?, &p.sin.narrow(0, 0, 1)?);
    let tensor = Tensor::new(bad.words.as_slice(), &Device::Cpu)?;
    let error = ragged_attention(&projected, &p.arena, &bad, &tensor, tables, s).unwrap_err();
    assert!(
        format!("{error:#}").contains("reads arena range 0..170 of 160"),
        "{error:#}"
    );
    let far = LevelMeta::new(&[MetaRow {
        tokens: 1,
        position: 0,
        segments: &[],
        destination: 160,
    }])?;
    // A segment longer than the keys before its token is refused when the pass is made.
    let long: Vec<Range<usize>> = std::iter::once(0..20).collect();
    let error = LevelMeta::new(&[MetaRow {
        tokens: 1,
        position: 10,
        segments: &long,
        destination: 30,
    }])
    .unwrap_err();
    assert!(
        format!("{error:#}").contains("does not precede it"),
        "{error:#}"
    );
    let tensor = Tensor::new(far.words.as_slice(), &Device::Cpu)?;
    let error = rope_store(&p.arena, &projected, &far, &tensor, tables, s).unwrap_err();
    assert!(
        format!("{error:#}").contains("writes arena position 160 of 160"),
        "{error:#}"
    );
    Ok(())
}

#[test]
fn the_cuda_source_has_every_kernel_the_launches_name() {
    for kernel in ["level_rope_store_", "level_attention_", "level_act_mul_"] {
        for suffix in ["f32", "bf16", "f16"] {
            assert!(
                CUDA_SOURCE.contains(&format!(
                    "LEVEL_KERNELS({}",
                    match suffix {
                        "f32" => "float, f32",
                        "bf16" => "bf16_t, bf16",
                        _ => "f16_t, f16",
                    }
                )),
                "{kernel}{suffix}"
            );
            assert!(
                CUDA_SOURCE.contains(&format!("void {kernel}##SUFFIX")),
                "{kernel}"
            );
        }
    }
    assert!(CUDA_SOURCE.contains("#define TILE 64") && TILE == 64);
    // NVRTC compiles without the host's headers (`scripts/gpu/compile_level_kernels.sh`
    // found `INFINITY` undefined there while nvcc took it).
    assert!(!CUDA_SOURCE.contains("#include") && !CUDA_SOURCE.contains("INFINITY"));
}
