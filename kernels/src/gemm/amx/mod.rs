//! Matrix products on AMX tiles (Intel Sapphire Rapids and later): `tdpbf16ps` for
//! [`Bf16Matrix`] and `tdpbssd` for [`Int8Matrix`], on the weights as those types already
//! pack them, for products with at least [`MIN_ROWS`] rows.
//!
//! One driver (`driver.rs`) runs either of two tile units: the real instructions
//! (`asm.rs`, x86-64) or a portable model of them ([`model`]), so the packing, blocking
//! and threading are tested on every machine and an AMX machine checks its hardware
//! against the model. Tiles run only where [`status`] found the CPU's bits (not hidden
//! by `NLG_JUDGE_CPU`) and the operating system's permission, requested once per
//! process; otherwise the vector paths run and [`Status::reason`] says why. Never a
//! SIGILL: no tile instruction runs without both.
//!
//! Numbers: int8 tiles give the vector paths' numbers bit for bit (integer sums are
//! exact; the scaling is the same f32 steps). bf16 tiles add the same exact products
//! in another order than `vdpbf16ps` (see [`model`]), so they differ from the vector
//! paths by rounding, within the bound the tests state.

#[cfg(target_arch = "x86_64")]
mod asm;
mod driver;
pub mod model;
mod permission;

use std::sync::OnceLock;

use super::tiles::Store;
use super::{Bf16Matrix, Int8Matrix};
use crate::cpu::CpuFeatures;
use crate::timing::{self, Kernel};
#[cfg(target_arch = "x86_64")]
pub(crate) use asm::Hardware;
pub(crate) use driver::{with_config, Operands, Product, TileUnit, BF16_CONFIG};
pub use driver::{BLOCK_ROWS, STEP_PAIRS};
pub(crate) use model::TileModel;

/// Rows from which a product runs on tiles where they are available; fewer rows (a
/// generated token's single row) stay on the vector path. One output block is 32 rows
/// (two `A` tiles): below that a tile pass multiplies mostly padding, and it has a fixed
/// cost (loads, stores, the int8 scaling). Not yet measured on AMX hardware: the figure
/// to measure and move is this one.
pub const MIN_ROWS: usize = BLOCK_ROWS;

/// Which tiles run a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// The portable model of the instructions ([`model::TileModel`]), any machine.
    Model,
    /// The real instructions (only where [`status`] allows them).
    Hardware,
}

/// Whether the real tiles can run here, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// `tdpbf16ps` products can run.
    pub bf16: bool,
    /// `tdpbssd` products can run.
    pub int8: bool,
    /// Why not, in one sentence (`None` when both can run).
    pub reason: Option<String>,
}

/// The operating system's answer to the tile request, asked once per process and only
/// where the CPU has the tiles.
fn permission() -> &'static Result<(), String> {
    static PERMISSION: OnceLock<Result<(), String>> = OnceLock::new();
    PERMISSION.get_or_init(|| {
        if CpuFeatures::detected().amx_tile {
            permission::request()
        } else {
            Err("this CPU has no AMX tiles".into())
        }
    })
}

/// Whether tiles run here: the CPU's AMX bits as `NLG_JUDGE_CPU` leaves them, and the
/// operating system's permission (requested on the first call).
pub fn status() -> &'static Status {
    static STATUS: OnceLock<Status> = OnceLock::new();
    STATUS.get_or_init(|| {
        let (cpu, detected) = (CpuFeatures::get(), CpuFeatures::detected());
        let refused = |reason: String| Status {
            bf16: false,
            int8: false,
            reason: Some(reason),
        };
        if !cpu.amx_tile {
            return refused(if detected.amx_tile {
                format!(
                    "{}={} hides the AMX tiles",
                    crate::cpu::ENV,
                    std::env::var(crate::cpu::ENV).unwrap_or_default()
                )
            } else {
                "this CPU has no AMX tiles".into()
            });
        }
        if let Err(why) = permission() {
            return refused(why.clone());
        }
        let missing: Vec<&str> = [("amx_bf16", cpu.amx_bf16), ("amx_int8", cpu.amx_int8)]
            .iter()
            .filter(|(_, present)| !present)
            .map(|(name, _)| *name)
            .collect();
        Status {
            bf16: cpu.amx_bf16,
            int8: cpu.amx_int8,
            reason: (!missing.is_empty())
                .then(|| format!("this CPU's tiles lack {}", missing.join(", "))),
        }
    })
}

/// The measurement switch (issue 61): `NLG_JUDGE_TILES=model` runs every tile path (the
/// bf16 and int8 products of [`MIN_ROWS`] rows or more, and the tile attention where
/// `--precision bf16` takes it) on the portable model of the instructions, on any
/// machine, AMX or not: the work around the tiles then runs as it does on AMX while the
/// tile instructions take the model's time, and `bench pairwise --json` reports the two
/// apart (`crate::timing`). For measurements only: the model is far slower than the
/// tiles. Unset or empty: the tiles run where [`status`] allows them. Read once per
/// process.
pub const TILES_ENV: &str = "NLG_JUDGE_TILES";

/// What [`TILES_ENV`] asks: `Ok(true)` for `model`, `Ok(false)` when unset or empty, an
/// error naming the values for anything else (the command line refuses to run then).
pub fn tiles_switch() -> Result<bool, String> {
    parse_tiles_switch(std::env::var(TILES_ENV).ok().as_deref())
}

fn parse_tiles_switch(value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("") => Ok(false),
        Some("model") => Ok(true),
        Some(value) => Err(format!(
            "{TILES_ENV}={value}: the only value is `model` (the portable model of the tiles, \
             for measurements); unset it to run the tiles where the CPU has them"
        )),
    }
}

/// Whether [`TILES_ENV`] runs the tile paths on the model.
pub fn model_forced() -> bool {
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| tiles_switch().unwrap_or(false))
}

/// The unit bf16 tile paths run on here: the model where [`TILES_ENV`] asks for it, the
/// hardware where [`status`] allows bf16 tiles, else none (the vector paths run).
pub fn bf16_unit() -> Option<Unit> {
    if model_forced() {
        Some(Unit::Model)
    } else {
        status().bf16.then_some(Unit::Hardware)
    }
}

/// [`bf16_unit`] for int8 tiles.
pub fn int8_unit() -> Option<Unit> {
    if model_forced() {
        Some(Unit::Model)
    } else {
        status().int8.then_some(Unit::Hardware)
    }
}

/// Whether the tile unit's peak can be measured here: the CPU has AMX-BF16 (whatever
/// `NLG_JUDGE_CPU` says, as the FMA peak ignores it) and the tile state was granted.
pub fn peak_available() -> bool {
    CpuFeatures::detected().amx_bf16 && permission().is_ok()
}

/// `rounds` rounds of four independent `tdpbf16ps` (16x16 by 16 pairs, 16,384 flops
/// each) on resident tiles, for the peak measurement.
///
/// # Panics
/// Unless [`peak_available`].
pub fn peak_rounds(rounds: usize) {
    assert!(peak_available(), "AMX-BF16 tiles are not available here");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AMX-BF16 and the OS granted the tile state (asserted).
    unsafe {
        asm::peak_rounds(rounds)
    }
}

/// Floating-point operations of one round of [`peak_rounds`].
pub const PEAK_FLOPS_PER_ROUND: usize = 4 * 2 * 16 * 16 * 32;

/// `out = x W^T` (or `+=`) for `matrix` on `unit`'s tiles.
///
/// # Panics
/// If `unit` is the hardware and [`status`] does not allow bf16 tiles.
pub(super) fn bf16_product(
    unit: Unit,
    matrix: &Bf16Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
) {
    if unit == Unit::Hardware {
        let status = status();
        assert!(status.bf16, "AMX bf16 tiles are not available: {status:?}");
    }
    timing::call(Kernel::Products, |sums| {
        // SAFETY: the model runs anywhere; the hardware where asserted above.
        unsafe {
            match (unit, sums.is_some()) {
                (Unit::Model, false) => {
                    driver::bf16_product::<TileModel, false>(matrix, x, m, out, store, sums)
                }
                (Unit::Model, true) => {
                    driver::bf16_product::<TileModel, true>(matrix, x, m, out, store, sums)
                }
                #[cfg(target_arch = "x86_64")]
                (Unit::Hardware, false) => {
                    driver::bf16_product::<asm::Hardware, false>(matrix, x, m, out, store, sums)
                }
                #[cfg(target_arch = "x86_64")]
                (Unit::Hardware, true) => {
                    driver::bf16_product::<asm::Hardware, true>(matrix, x, m, out, store, sums)
                }
                #[cfg(not(target_arch = "x86_64"))]
                (Unit::Hardware, _) => unreachable!("no AMX outside x86-64 (asserted)"),
            }
        }
    })
}

/// `out = x W^T` (or `+=`) for `matrix` on `unit`'s tiles.
///
/// # Panics
/// If `unit` is the hardware and [`status`] does not allow int8 tiles.
pub(super) fn int8_product(
    unit: Unit,
    matrix: &Int8Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
) {
    if unit == Unit::Hardware {
        let status = status();
        assert!(status.int8, "AMX int8 tiles are not available: {status:?}");
    }
    timing::call(Kernel::Products, |sums| {
        // SAFETY: the model runs anywhere; the hardware where asserted above.
        unsafe {
            match (unit, sums.is_some()) {
                (Unit::Model, false) => {
                    driver::int8_product::<TileModel, false>(matrix, x, m, out, store, sums)
                }
                (Unit::Model, true) => {
                    driver::int8_product::<TileModel, true>(matrix, x, m, out, store, sums)
                }
                #[cfg(target_arch = "x86_64")]
                (Unit::Hardware, false) => {
                    driver::int8_product::<asm::Hardware, false>(matrix, x, m, out, store, sums)
                }
                #[cfg(target_arch = "x86_64")]
                (Unit::Hardware, true) => {
                    driver::int8_product::<asm::Hardware, true>(matrix, x, m, out, store, sums)
                }
                #[cfg(not(target_arch = "x86_64"))]
                (Unit::Hardware, _) => unreachable!("no AMX outside x86-64 (asserted)"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tiles_switch_takes_model_or_nothing() {
        assert_eq!(parse_tiles_switch(None), Ok(false));
        assert_eq!(parse_tiles_switch(Some("")), Ok(false));
        assert_eq!(parse_tiles_switch(Some("model")), Ok(true));
        let refused = parse_tiles_switch(Some("hardware")).expect_err("not a value");
        assert!(refused.contains("NLG_JUDGE_TILES=hardware") && refused.contains("`model`"));
    }
}
