//! The CPU buffer path (our segment-attention kernel, per-token kernels and products
//! writing into reused buffers) inside the real model against candle's formulation of
//! the same layers (prefix broadcast to every row, explicit score matrix, one tensor per
//! operation), which was the f32 path before the kernels. Same weights, same inputs: only
//! the order of floating-point accumulation differs (online softmax, polynomial
//! exponentials, lane sums in the normalisation, residual additions inside the
//! products). Label logits are of magnitude 10-30, where one f32 ulp is 1.9e-6 to 3.8e-6,
//! and the reordered sums pass through 30 layers: measured 2.5e-5 on an AMD EPYC
//! (AVX-512). We allow 1e-4 (about 5e-6 relative): a wrong mask, segment or head mapping
//! moves logits by 1e-2 or more.

use crate::common;

use anyhow::Result;
use nlg_judge::arch::llama::KvCache;
use nlg_judge::arch::llama::{LlamaModel, RowGroup};
use nlg_judge_kernels::gemm::amx::Unit;

const TOLERANCE: f32 = 1e-4;
/// Label logits with attention on bf16 tiles against the f32 kernel: measured 0.059 on
/// an AMD EPYC (see `attention_on_the_tile_model_stays_close_to_the_f32_kernel`).
const TILE_TOLERANCE: f32 = 0.25;

/// Token ids spread over the vocabulary, `len` of them, seeded by `seed`.
fn tokens(len: usize, seed: usize) -> Vec<u32> {
    (0..len)
        .map(|t| ((t * 131 + seed * 977 + 7) % 49000) as u32)
        .collect()
}

/// Label logits (three ids) at every position of every row of a multi-group pass whose
/// groups continue chains of prefix segments of different lengths.
fn label_logits(model: &LlamaModel, segments: &[KvCache]) -> Result<Vec<f32>> {
    label_logits_tiling(model, segments, false)
}

/// [`label_logits`], the groups asking for their segments' keys kept tiled when `tile`.
fn label_logits_tiling(model: &LlamaModel, segments: &[KvCache], tile: bool) -> Result<Vec<f32>> {
    let rows_a = [tokens(17, 1), tokens(5, 2), tokens(40, 3)];
    let rows_b = [tokens(1, 4), tokens(33, 5)];
    let rows_c = [tokens(9, 6)];
    let groups = [
        RowGroup {
            prefix: vec![&segments[0], &segments[1], &segments[2]],
            rows: rows_a.iter().map(|r| r.as_slice()).collect(),
            tile_keys: tile,
        },
        RowGroup {
            prefix: vec![&segments[0]],
            rows: rows_b.iter().map(|r| r.as_slice()).collect(),
            tile_keys: tile,
        },
        RowGroup {
            prefix: vec![],
            rows: rows_c.iter().map(|r| r.as_slice()).collect(),
            tile_keys: tile,
        },
    ];
    let outputs = model.forward_groups(&groups, true)?;
    let mut logits = Vec::new();
    for out in &outputs {
        let positions: Vec<(usize, usize)> = out
            .lengths
            .iter()
            .enumerate()
            .flat_map(|(row, &len)| (0..len).map(move |t| (row, t)))
            .collect();
        let hidden = out.positions(&positions)?;
        logits.extend(
            model
                .token_logits(&hidden, &[330, 389, 42])?
                .flatten_all()?
                .to_vec1::<f32>()?,
        );
    }
    Ok(logits)
}

/// Prefix segments computed by the model under test: a 300-token root, then 80 and 1.
fn segments(model: &LlamaModel) -> Result<Vec<KvCache>> {
    let root = model.forward(&[&tokens(300, 9)], None, true)?.kv.unwrap();
    let second = model
        .forward(&[&tokens(80, 10)], Some(&root), true)?
        .kv
        .unwrap();
    let both = root.append(&second)?;
    let third = model
        .forward(&[&tokens(1, 11)], Some(&both), true)?
        .kv
        .unwrap();
    Ok(vec![root, second, third])
}

#[test]
fn the_kernel_matches_candle_attention_over_prefix_chains() -> Result<()> {
    let kernel = common::smollm2().clone();
    let candle = kernel.clone().with_candle_attention();
    let (kernel_segments, candle_segments) = (segments(&kernel)?, segments(&candle)?);
    // The caches each path produced agree too.
    for (a, b) in kernel_segments.iter().zip(&candle_segments) {
        for layer in [0, a.num_layers() - 1] {
            let diff = (&a.layer(layer).0 - &b.layer(layer).0)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert!(diff < 1e-4, "layer {layer} keys differ by {diff}");
        }
    }
    let ours = label_logits(&kernel, &kernel_segments)?;
    let theirs = label_logits(&candle, &candle_segments)?;
    assert_eq!(ours.len(), theirs.len());
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("largest |logit(kernel) - logit(candle)| = {worst:e}");
    assert!(worst < TOLERANCE, "label logits differ by {worst}");
    Ok(())
}

/// The attention's products on AMX tiles in bf16 (`with_attention_tiles`, here on the
/// portable model of the tiles, so on any machine) inside the real model, against the
/// f32 kernel, on the same prefix segments: only the label pass attends on tiles. The
/// tiles round queries, keys, probabilities and values to bf16 (2^-8 relative) in each
/// of the 30 layers; the kernel test (`kernels/tests/attention_tiles.rs`) bounds one
/// call, and catches mask, segment and packing slips; this test checks the wiring (the
/// pass runs on the tiles: the logits move, but by no more than bf16 attention should:
/// 0.059 measured on logits of magnitude 10-30, 0.25 allowed).
#[test]
fn attention_on_the_tile_model_stays_close_to_the_f32_kernel() -> Result<()> {
    let kernel = common::smollm2().clone();
    assert_eq!(
        kernel.attention_tiles(),
        None,
        "f32 attends on the vector kernel"
    );
    let tiles = kernel.clone().with_attention_tiles(Some(Unit::Model));
    let segments = segments(&kernel)?;
    let ours = label_logits(&tiles, &segments)?;
    let reference = label_logits(&kernel, &segments)?;
    assert_eq!(ours.len(), reference.len());
    let worst = ours
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("largest |logit(tiles) - logit(f32 kernel)| = {worst:e}");
    assert!(
        worst > 0.0,
        "the tiles' bf16 rounding changed nothing: not on tiles?"
    );
    assert!(worst < TILE_TOLERANCE, "label logits differ by {worst}");
    Ok(())
}

/// Decoding rows ask for their segments' keys kept tiled for the kernel: the logits keep
/// every bit (the kernel transposes the keys into the same tiles otherwise), the tiled
/// keys are made once and kept in the segment (their bytes counted), and only where a
/// group asks and the segment is long enough to be worth it.
#[test]
fn keys_kept_tiled_in_the_segments_change_no_bit() -> Result<()> {
    let model = common::smollm2().clone();
    assert!(
        model.keeps_tiled_keys(),
        "f32 on the CPU attends on the vector kernel"
    );
    let segments = segments(&model)?;
    let bytes = |segments: &[KvCache]| segments.iter().map(KvCache::memory_bytes).collect();
    let plain_bytes: Vec<usize> = bytes(&segments);
    let plain = label_logits(&model, &segments)?;
    assert_eq!(bytes(&segments), plain_bytes, "nothing tiled unless asked");
    let tiled = label_logits_tiling(&model, &segments, true)?;
    let kept: Vec<usize> = bytes(&segments);
    // 300 and 80 positions are tiled (in whole tiles: about half their bytes again); the
    // one-position segment is read as it is.
    for (index, (&before, &after)) in plain_bytes.iter().zip(&kept).enumerate() {
        if segments[index].len() >= 16 {
            assert!(
                after > before + before / 2 - 1,
                "segment {index}: {before} -> {after}"
            );
        } else {
            assert_eq!(after, before, "segment {index}");
        }
    }
    let again = label_logits_tiling(&model, &segments, true)?;
    assert_eq!(
        bytes(&segments),
        kept,
        "the kept tiles are reused, not made again"
    );
    for (name, other) in [("tiled", &tiled), ("tiled again", &again)] {
        assert_eq!(other.len(), plain.len());
        assert!(
            plain
                .iter()
                .zip(other)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name} logits differ from the plain keys' logits"
        );
    }
    Ok(())
}
