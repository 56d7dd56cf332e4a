//! Splitting a product `y = x W^T` into output tiles and running them in parallel.
//!
//! Every output element belongs to exactly one tile, and a tile sums over the whole inner
//! dimension in one fixed order, so the numbers never depend on how many threads run the
//! tiles or in which order they finish.

use rayon::prelude::*;

use crate::timing::{CallTicks, Part, Stopwatch};

/// Output columns per packed weight panel (two 512-bit vectors of f32 or i32 lanes).
pub const NR: usize = 32;
/// Input rows per microkernel call.
pub const MR: usize = 8;
/// Input rows per call of the AVX2 and NEON bf16 microkernels (two register tiles of six
/// rows: twelve accumulators hide the latency of FMA chains on AVX2, eight do not).
pub const WIDE_MR: usize = 12;
/// Rows of `x` one parallel task covers, about (a multiple of the tile's rows).
const ROW_BLOCK: usize = 64;
/// Weight panels one parallel task covers.
const PANELS_PER_TASK: usize = 2;

/// What a product does with the output it is handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// `out = x W^T`.
    Overwrite,
    /// `out += x W^T` (a residual connection folded into the product).
    Add,
}

/// Number of [`NR`]-wide panels that cover `n` output columns.
pub fn panel_count(n: usize) -> usize {
    n.div_ceil(NR)
}

/// The output matrix, shared by tasks that each write their own disjoint tiles.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: tasks write disjoint elements (each output element lies in exactly one tile).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// Run `tile(row0, rows, panel)` for every `ROWS`-row by `NR`-column tile of the `(m, n)`
/// output, in parallel, and copy (or add, per `store`) the valid part of each tile it
/// returns (the first `rows` rows, the columns below `n`) into `out` (row-major, `m x n`).
pub fn for_each_tile<const ROWS: usize, F>(
    m: usize,
    n: usize,
    out: &mut [f32],
    store: Store,
    tile: F,
) where
    F: Fn(usize, usize, usize) -> [[f32; NR]; ROWS] + Sync,
{
    for_each_tile_timed::<ROWS, false, F>(m, n, out, store, tile, None)
}

/// [`for_each_tile`], each task's ticks charged to [`Part::ProductOther`] when `TIMED`
/// (the tile products, whose blocks move their tile instructions' ticks from there to
/// [`Part::ProductTiles`]: see `crate::timing`).
pub fn for_each_tile_timed<const ROWS: usize, const TIMED: bool, F>(
    m: usize,
    n: usize,
    out: &mut [f32],
    store: Store,
    tile: F,
    sums: Option<&CallTicks>,
) where
    F: Fn(usize, usize, usize) -> [[f32; NR]; ROWS] + Sync,
{
    let row_block = ROWS * (ROW_BLOCK / ROWS).max(1);
    assert_eq!(
        out.len(),
        m * n,
        "output holds {} values, expected {m}x{n}",
        out.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    let panels = panel_count(n);
    let row_blocks = m.div_ceil(row_block);
    let panel_groups = panels.div_ceil(PANELS_PER_TASK);
    let shared = SharedOut {
        ptr: out.as_mut_ptr(),
        len: out.len(),
    };
    let shared = &shared;
    let run_task = |task: usize| {
        let mut watch = Stopwatch::<TIMED>::new();
        let (block, group) = (task / panel_groups, task % panel_groups);
        let row_end = ((block + 1) * row_block).min(m);
        let panel_end = ((group + 1) * PANELS_PER_TASK).min(panels);
        for row0 in (block * row_block..row_end).step_by(ROWS) {
            let rows = ROWS.min(m - row0);
            for panel in group * PANELS_PER_TASK..panel_end {
                let values = tile(row0, rows, panel);
                let col0 = panel * NR;
                let cols = NR.min(n - col0);
                for (r, row) in values.iter().enumerate().take(rows) {
                    let start = (row0 + r) * n + col0;
                    debug_assert!(start + cols <= shared.len);
                    // SAFETY: in bounds (row0 + r < m, col0 + cols <= n), and this
                    // task is the only reader and writer of this tile.
                    let target =
                        unsafe { std::slice::from_raw_parts_mut(shared.ptr.add(start), cols) };
                    match store {
                        Store::Overwrite => target.copy_from_slice(&row[..cols]),
                        Store::Add => {
                            for (t, v) in target.iter_mut().zip(row) {
                                *t += v;
                            }
                        }
                    }
                }
            }
        }
        watch.lap(Part::ProductOther);
        watch.flush(sums);
    };
    let tasks = row_blocks * panel_groups;
    if tasks == 1 {
        run_task(0);
    } else {
        (0..tasks).into_par_iter().for_each(run_task);
    }
}
