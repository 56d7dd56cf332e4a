//! The blocked tile products, written once for both tile units: the portable model
//! ([`TileModel`]) and the real instructions (`asm.rs`). Everything but the instructions
//! themselves (which registers hold what, the configurations, the pointers and strides,
//! the K tail, the order of the steps, the int8 scales) is this code, so the model's
//! tests check all of it on any machine.
//!
//! Registers: `tmm0`-`tmm3` hold a 32x32 block of `C` as four 16x16 tiles (`C00`,
//! `C01`, `C10`, `C11`), `tmm4`-`tmm5` two `A` tiles (rows 0-15 and 16-31 of the block),
//! `tmm6`-`tmm7` two `B` tiles (columns 0-15 and 16-31): each loaded `B` tile serves two
//! `A` tiles and each `A` tile two `B` tiles, four products per four loads.
//!
//! `B` comes straight from the weights' packing. A row of a packed panel (one pair, or
//! one quad, of the inner dimension for [`NR`] = 32 output columns) is 128 bytes: two
//! 16-column `B` rows side by side in the VNNI layout the tiles read (the even bf16 of a
//! pair in the low half, the four bytes of a quad in order). So the `B` tiles of a step
//! are loaded at the panel's row with a stride of 128 bytes, the second 64 bytes on.
//!
//! bf16: a step covers 16 pairs (32 inner values, a full tile). When the pairs are not a
//! multiple of 16, the last step reads its `B` rows from a zeroed copy of the panel's
//! last rows (the panel ends there; reading on would cross into the next panel or past
//! the allocation), and the `A` buffer pads each row with zero pairs to whole tiles, so
//! the padding adds products of zeros. Rows of `x` are padded with zero rows to whole
//! 32-row blocks (their results are computed and dropped); columns past the weight's
//! rows are the packing's zero columns, dropped the same way. Split activations (see
//! `Bf16Matrix::split_activations`) add a second step per `B` tile, on the `A` tiles of
//! the remainders.
//!
//! int8: the weights carry one scale per 32 inner values (`int8::BLOCK`), so a step
//! covers exactly one block (8 quads: `A` tiles of 32 bytes per row, `B` tiles of 8 rows);
//! its exact i32 sums are stored and scaled in f32 as the vector paths do
//! (`y = fma(sum, s_w s_x, y)`, blocks in order), with the activations signed (no offset
//! to take out). So the tiles give the int8 vector paths' numbers bit for bit.
//!
//! Threads: the blocks run in parallel through `tiles::for_each_tile`, each block summing
//! its whole inner dimension in one order, so results do not depend on the number of
//! threads. The tile configuration is per thread, and this process may hold other users
//! of it: candle's quantized Q4K products configure the tiles once per thread and then
//! trust them (their configuration happens to equal [`INT8_CONFIG`]), oneDNN under
//! Python's torch has its own. So each block reads the thread's configuration
//! (`sttilecfg`, a 64-byte store), loads its own only when it differs (`ldtilecfg` zeroes
//! the tiles, so never inside a block), and afterwards loads back the one it found, if
//! any: the tiles are given back as found. A thread that runs only our products loads
//! its configuration once.

use super::model::{TileConfig, TileModel};
use crate::gemm::bf16::{activation_pairs, PairRows};
use crate::gemm::int8::{Activations, BLOCK_QUADS};
use crate::gemm::tiles::{for_each_tile_timed, Store, NR};
use crate::gemm::{Bf16Matrix, Int8Matrix};
use crate::timing::{CallTicks, Part, Stopwatch};

/// Rows of one output block (two `A` tiles).
pub const BLOCK_ROWS: usize = 32;
/// bf16 pairs of the inner dimension per step (one `A` tile's 64 bytes per row).
pub const STEP_PAIRS: usize = 16;
/// Rows of one tile.
const TILE_ROWS: usize = 16;
/// Bytes from one row of a packed weight panel to the next.
const PANEL_STRIDE: usize = NR * 4;

/// The bf16 configuration: every tile 16 rows of 64 bytes.
pub static BF16_CONFIG: TileConfig = TileConfig::palette1([(16, 64); 8]);

/// The int8 configuration: `C` 16x64 bytes, `A` 16 rows of one block (32 bytes), `B` one
/// block's 8 quads by 16 columns.
pub static INT8_CONFIG: TileConfig = TileConfig::palette1([
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 32),
    (16, 32),
    (8, 64),
    (8, 64),
]);

/// The product a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// `tdpbf16ps`.
    Bf16,
    /// `tdpbssd`.
    Int8,
}

/// Where a step reads its tiles: `A` rows from `a`, `a_stride` bytes apart (the second
/// `A` tile 16 rows on); `B` rows from `b`, `b_stride` bytes apart (the second `B` tile 64
/// bytes on).
#[derive(Debug, Clone, Copy)]
pub struct Operands {
    pub a: *const u8,
    pub a_stride: usize,
    pub b: *const u8,
    pub b_stride: usize,
}

/// The driver's groups of tile instructions, on the registers of the module
/// documentation. Implemented by the model and by the hardware.
///
/// # Safety
/// An implementation runs exactly the instructions each method names. Callers of the
/// `unsafe` methods promise that the instructions are available (for the hardware: the
/// CPU has them and the OS granted the tile state) and that every row a load or store
/// touches is valid memory.
pub unsafe trait TileUnit {
    /// Run `body` on this thread's unit.
    fn with_this_thread<R>(body: impl FnOnce(&mut Self) -> R) -> R;

    /// `sttilecfg`: the configuration this thread's tiles hold (palette 0 when none).
    unsafe fn current_config(&mut self) -> TileConfig;

    /// `ldtilecfg config`.
    unsafe fn load_config(&mut self, config: &TileConfig);

    /// `tilezero` of `tmm0`-`tmm3`.
    unsafe fn zero_c(&mut self);

    /// `tileloadd tmm4, [a]` and `tmm5, [a + 16 a_stride]` (stride `a_stride`);
    /// `tileloadd tmm6, [b]` and `tmm7, [b + 64]` (stride `b_stride`); then the four
    /// products `tmm0 += tmm4 tmm6`, `tmm1 += tmm4 tmm7`, `tmm2 += tmm5 tmm6`,
    /// `tmm3 += tmm5 tmm7`, each `tdpbf16ps` or `tdpbssd` as `product` says.
    unsafe fn step(&mut self, product: Product, operands: Operands);

    /// `tilestored [c], tmm0`; `[c + 64], tmm1`; `[c + 16 stride], tmm2`;
    /// `[c + 16 stride + 64], tmm3` (stride `c_stride`).
    unsafe fn store_c(&mut self, c: *mut u8, c_stride: usize);
}

thread_local! {
    /// The tiles of the model on this thread, on the heap: 8 KiB of tiles in the
    /// thread-local block itself would overflow the static TLS space glibc keeps for
    /// libraries loaded later (the Python extension fails to import).
    static MODEL: std::cell::RefCell<Box<TileModel>> = std::cell::RefCell::new(Box::default());
    /// Rounded (bf16) or quantised (int8) activations, padded to whole tiles.
    static ACTIVATIONS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The model as a unit: each group as the model's instructions, in the order the
/// hardware unit issues them. A fault means a driver bug and panics with the fault.
// SAFETY: runs exactly the named instructions (of the model).
unsafe impl TileUnit for TileModel {
    fn with_this_thread<R>(body: impl FnOnce(&mut Self) -> R) -> R {
        crate::reuse::with_reused(&MODEL, |model| body(model))
    }

    unsafe fn current_config(&mut self) -> TileConfig {
        self.sttilecfg()
    }

    unsafe fn load_config(&mut self, config: &TileConfig) {
        self.ldtilecfg(config)
            .unwrap_or_else(|fault| panic!("{fault}"));
    }

    unsafe fn zero_c(&mut self) {
        for t in 0..4 {
            self.tilezero(t).unwrap_or_else(|fault| panic!("{fault}"));
        }
    }

    unsafe fn step(&mut self, product: Product, operands: Operands) {
        let Operands {
            a,
            a_stride,
            b,
            b_stride,
        } = operands;
        // SAFETY: the caller's promise covers these rows.
        let loads = unsafe {
            [
                self.tileloadd(4, a, a_stride),
                self.tileloadd(5, a.add(TILE_ROWS * a_stride), a_stride),
                self.tileloadd(6, b, b_stride),
                self.tileloadd(7, b.add(64), b_stride),
            ]
        };
        let run = |model: &mut TileModel, c, a, b| match product {
            Product::Bf16 => model.tdpbf16ps(c, a, b),
            Product::Int8 => model.tdpbssd(c, a, b),
        };
        let products = [
            run(self, 0, 4, 6),
            run(self, 1, 4, 7),
            run(self, 2, 5, 6),
            run(self, 3, 5, 7),
        ];
        for result in loads.into_iter().chain(products) {
            result.unwrap_or_else(|fault| panic!("{fault}"));
        }
    }

    unsafe fn store_c(&mut self, c: *mut u8, c_stride: usize) {
        let lower = c.add(TILE_ROWS * c_stride);
        for (t, base) in [c, c.add(64), lower, lower.add(64)].into_iter().enumerate() {
            // SAFETY: the caller's promise covers these rows.
            unsafe { self.tilestored(t, base, c_stride) }.unwrap_or_else(|fault| panic!("{fault}"));
        }
    }
}

/// `body` with `config` loaded in `unit`'s tiles, which are given back as found: a
/// configuration loaded before (another user's) is loaded again afterwards; released
/// tiles keep `config`, so the next block finds it and loads nothing.
///
/// # Safety
/// `U`'s instructions must be available on this machine.
pub unsafe fn with_config<U: TileUnit, R>(
    unit: &mut U,
    config: &TileConfig,
    body: impl FnOnce(&mut U) -> R,
) -> R {
    let found = unit.current_config();
    if found != *config {
        unit.load_config(config);
    }
    let result = body(unit);
    if found != *config && found.palette() != 0 {
        unit.load_config(&found);
    }
    result
}

/// `out = x W^T` (or `+=`, per `store`) for the bf16 `matrix` on the tiles of `U`; with
/// `TIMED`, its parts' ticks added to `sums` (`crate::timing`).
///
/// # Safety
/// `U`'s instructions must be available on this machine.
pub unsafe fn bf16_product<U: TileUnit, const TIMED: bool>(
    matrix: &Bf16Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
    sums: Option<&CallTicks>,
) {
    let mut watch = Stopwatch::<TIMED>::new();
    let pairs = matrix.pairs();
    let layout = PairRows {
        m,
        pairs,
        stride: pairs.next_multiple_of(STEP_PAIRS),
        rows: m.next_multiple_of(BLOCK_ROWS),
    };
    let split = matrix.splits_activations();
    crate::reuse::with_reused(&ACTIVATIONS, |buffer| {
        activation_pairs(x, matrix.cols(), layout, split, buffer);
        watch.lap(Part::ProductConversion);
        watch.flush(sums);
        let len = layout.len();
        let hi = &buffer[..len];
        let lo = if split {
            &buffer[len..2 * len]
        } else {
            &[][..]
        };
        let tile = |row0: usize, _rows: usize, panel: usize| {
            U::with_this_thread(|unit| {
                // SAFETY: the caller's promise.
                unsafe {
                    bf16_block::<U, TIMED>(unit, hi, lo, layout, row0, matrix.panel(panel), sums)
                }
            })
        };
        for_each_tile_timed::<BLOCK_ROWS, TIMED, _>(m, matrix.rows(), out, store, tile, sums);
    });
}

/// The 32x32 output block at rows `row0..` of the activations `hi` (and `lo`, empty
/// unless split; both laid out as `layout`) and the weight panel `panel`; with `TIMED`,
/// the tile instructions' ticks moved from the task's [`Part::ProductOther`] to
/// [`Part::ProductTiles`].
///
/// # Safety
/// `U`'s instructions must be available on this machine.
unsafe fn bf16_block<U: TileUnit, const TIMED: bool>(
    unit: &mut U,
    hi: &[u32],
    lo: &[u32],
    layout: PairRows,
    row0: usize,
    panel: &[u32],
    sums: Option<&CallTicks>,
) -> [[f32; NR]; BLOCK_ROWS] {
    let (pairs, stride) = (layout.pairs, layout.stride);
    // Every load below stays inside these.
    assert!(row0 + BLOCK_ROWS <= layout.rows && layout.len() <= hi.len());
    assert!(lo.is_empty() || layout.len() <= lo.len());
    assert!(panel.len() >= pairs * NR && stride % STEP_PAIRS == 0 && stride >= pairs);
    let a_stride = 4 * stride;
    let hi = hi[row0 * stride..].as_ptr();
    let lo = (!lo.is_empty()).then(|| lo[row0 * stride..].as_ptr());
    let (full, tail) = (pairs / STEP_PAIRS, pairs % STEP_PAIRS);
    let mut last = [0u32; STEP_PAIRS * NR];
    last[..tail * NR].copy_from_slice(&panel[full * STEP_PAIRS * NR..pairs * NR]);
    let mut c = [[0f32; NR]; BLOCK_ROWS];
    let mut watch = Stopwatch::<TIMED>::new();
    with_config(unit, &BF16_CONFIG, |unit| {
        unit.zero_c();
        for s in 0..full + usize::from(tail > 0) {
            let b = if s < full {
                panel[s * STEP_PAIRS * NR..].as_ptr()
            } else {
                last.as_ptr()
            };
            for a in std::iter::once(hi).chain(lo) {
                let operands = Operands {
                    a: a.add(s * STEP_PAIRS).cast(),
                    a_stride,
                    b: b.cast(),
                    b_stride: PANEL_STRIDE,
                };
                unit.step(Product::Bf16, operands);
            }
        }
        unit.store_c(c.as_mut_ptr().cast(), 4 * NR);
    });
    watch.lap_within(Part::ProductTiles, Part::ProductOther);
    watch.flush(sums);
    c
}

/// `out = x W^T` (or `+=`, per `store`) for the int8 `matrix` on the tiles of `U`; with
/// `TIMED`, its parts' ticks added to `sums` (`crate::timing`).
///
/// # Safety
/// `U`'s instructions must be available on this machine.
pub unsafe fn int8_product<U: TileUnit, const TIMED: bool>(
    matrix: &Int8Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
    sums: Option<&CallTicks>,
) {
    let mut watch = Stopwatch::<TIMED>::new();
    let blocks = matrix.blocks();
    let activations = Activations::quantise(x, m, matrix.cols(), blocks);
    let quads = blocks * BLOCK_QUADS;
    crate::reuse::with_reused(&ACTIVATIONS, |a| {
        a.clear();
        a.extend(activations.signed_quads());
        a.resize(m.next_multiple_of(BLOCK_ROWS) * quads, 0);
        watch.lap(Part::ProductConversion);
        watch.flush(sums);
        let a = &a[..];
        let a_scales = &activations.scales[..];
        let fma = crate::cpu::CpuFeatures::get().fma;
        let tile = |row0: usize, rows: usize, panel: usize| {
            let (w, w_scales) = matrix.panel(panel);
            let block = Int8Block {
                a: &a[row0 * quads..],
                a_scales: &a_scales[row0 * blocks..],
                w,
                w_scales,
                blocks,
                rows,
                fma,
            };
            // SAFETY: the caller's promise.
            U::with_this_thread(|unit| unsafe { block.run::<U, TIMED>(unit, sums) })
        };
        for_each_tile_timed::<BLOCK_ROWS, TIMED, _>(m, matrix.rows(), out, store, tile, sums);
    });
}

/// One 32x32 int8 output block's operands.
struct Int8Block<'a> {
    /// Signed activation quads from the block's first row (at least 32 rows).
    a: &'a [u32],
    /// `s_x` per row and block from the block's first row.
    a_scales: &'a [f32],
    /// The weight panel's quads `(quad, column)` and scales `(block, column)`.
    w: &'a [u32],
    w_scales: &'a [f32],
    blocks: usize,
    /// Rows of the block that hold activations (the rest are padding).
    rows: usize,
    /// Whether the CPU has FMA (the scaling then runs on it; same numbers).
    fma: bool,
}

impl Int8Block<'_> {
    /// The block; with `TIMED`, its tile instructions' ticks moved from the task's
    /// [`Part::ProductOther`] to [`Part::ProductTiles`].
    ///
    /// # Safety
    /// `U`'s instructions must be available on this machine.
    unsafe fn run<U: TileUnit, const TIMED: bool>(
        &self,
        unit: &mut U,
        sums: Option<&CallTicks>,
    ) -> [[f32; NR]; BLOCK_ROWS] {
        let quads = self.blocks * BLOCK_QUADS;
        assert!(self.a.len() >= BLOCK_ROWS * quads && self.w.len() >= quads * NR);
        assert!(self.a_scales.len() >= self.rows * self.blocks);
        let mut out = [[0f32; NR]; BLOCK_ROWS];
        let mut block_sums = [[0i32; NR]; BLOCK_ROWS];
        let mut watch = Stopwatch::<TIMED>::new();
        with_config(unit, &INT8_CONFIG, |unit| {
            for b in 0..self.blocks {
                self.block(unit, b, &mut block_sums, &mut out, &mut watch);
            }
        });
        watch.flush(sums);
        out
    }

    /// Inner block `b`: its exact sums on the tiles (into `sums`), scaled into `out`.
    ///
    /// # Safety
    /// `U`'s instructions must be available on this machine, configured as
    /// [`INT8_CONFIG`].
    unsafe fn block<U: TileUnit, const TIMED: bool>(
        &self,
        unit: &mut U,
        b: usize,
        sums: &mut [[i32; NR]; BLOCK_ROWS],
        out: &mut [[f32; NR]; BLOCK_ROWS],
        watch: &mut Stopwatch<TIMED>,
    ) {
        let quads = self.blocks * BLOCK_QUADS;
        let k0 = b * BLOCK_QUADS;
        let operands = Operands {
            a: self.a[k0..].as_ptr().cast(),
            a_stride: 4 * quads,
            b: self.w[k0 * NR..].as_ptr().cast(),
            b_stride: PANEL_STRIDE,
        };
        watch.skip();
        unit.zero_c();
        unit.step(Product::Int8, operands);
        unit.store_c(sums.as_mut_ptr().cast(), 4 * NR);
        watch.lap_within(Part::ProductTiles, Part::ProductOther);
        let w_scales = &self.w_scales[b * NR..(b + 1) * NR];
        for (r, (out_row, sums_row)) in out.iter_mut().zip(sums.iter()).enumerate() {
            if r < self.rows {
                let a_scale = self.a_scales[r * self.blocks + b];
                scale_row(out_row, sums_row, w_scales, a_scale, self.fma);
            }
        }
    }
}

/// `out[c] = fma(sums[c], w_scales[c] * a_scale, out[c])`, as the vector paths scale.
fn scale_row(out: &mut [f32; NR], sums: &[i32; NR], w_scales: &[f32], a_scale: f32, fma: bool) {
    #[inline(always)]
    fn body(out: &mut [f32; NR], sums: &[i32; NR], w_scales: &[f32], a_scale: f32) {
        for ((y, &sum), &w_scale) in out.iter_mut().zip(sums).zip(w_scales) {
            *y = (sum as f32).mul_add(w_scale * a_scale, *y);
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    fn fused(out: &mut [f32; NR], sums: &[i32; NR], w_scales: &[f32], a_scale: f32) {
        body(out, sums, w_scales, a_scale)
    }
    #[cfg(target_arch = "x86_64")]
    if fma {
        // SAFETY: the caller saw FMA in the CPU's features.
        return unsafe { fused(out, sums, w_scales, a_scale) };
    }
    let _ = fma;
    body(out, sums, w_scales, a_scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another user's configuration: two small tiles.
    fn foreign() -> TileConfig {
        let mut shapes = [(0, 0); 8];
        shapes[0] = (2, 8);
        shapes[1] = (2, 8);
        TileConfig::palette1(shapes)
    }

    #[test]
    fn blocks_give_the_tiles_back_as_found() {
        // Three output columns, 40 inner values (20 pairs: one whole step and a tail).
        let matrix = Bf16Matrix::from_f32(&[0.5; 3 * 40], 3, 40);
        let layout = PairRows {
            m: BLOCK_ROWS,
            pairs: 20,
            stride: 32,
            rows: BLOCK_ROWS,
        };
        // bf16 1.0 in every pair, padding included: the tail's zeroed weights cancel it.
        let ones = vec![0x3f80_3f80u32; layout.len()];
        let run = |model: &mut TileModel| {
            // SAFETY: the model runs anywhere.
            unsafe { bf16_block::<_, false>(model, &ones, &[], layout, 0, matrix.panel(0), None) }
        };
        let mut model = TileModel::new();
        model.ldtilecfg(&foreign()).expect("valid");
        let c = run(&mut model);
        assert!(c
            .iter()
            .all(|row| row[..3] == [20.0; 3] && row[3..] == [0.0; 29]));
        assert_eq!(
            model.config(),
            Some(&foreign()),
            "the other user's tiles back"
        );
        // Released tiles keep ours: the next block loads nothing.
        model.tilerelease();
        assert_eq!(run(&mut model), c);
        assert_eq!(model.config(), Some(&BF16_CONFIG));
        // Found as needed: not loaded again (loading would zero the tiles' data).
        model.ldtilecfg(&INT8_CONFIG).expect("valid");
        let row = [7u8; 64];
        // SAFETY: tmm7 is 8 rows of 64 bytes, all read from `row` (stride 0).
        unsafe { model.tileloadd(7, row.as_ptr(), 0) }.expect("load");
        // SAFETY: the model runs anywhere.
        unsafe { with_config(&mut model, &INT8_CONFIG, |_| ()) };
        assert_eq!(model.row(7, 3), &row);
    }
}
