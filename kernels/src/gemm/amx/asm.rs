//! The AMX instructions themselves, for x86-64, in stable `asm!` with the tile registers
//! named in the templates: the driver's groups of [`TileUnit`], one `asm!` block each,
//! and the loop that measures the tile unit's peak. Nothing else lives here, so what
//! only AMX hardware can run is as small as it can be; `driver.rs` does the rest for
//! both units, and the model's implementation there issues the same instructions in the
//! same order.
//!
//! Nothing here may run unless `super::status` found the CPU's AMX bits and the
//! operating system's permission: every entry point is `unsafe` with that promise.
//! These blocks declare no tile registers as clobbered (Rust has no such operands): the
//! compiler never uses the tiles itself, and each block's effect on them is what the
//! driver expects.

use std::arch::asm;

use super::driver::{with_config, Operands, Product, TileUnit, BF16_CONFIG};
use super::model::TileConfig;

/// The real tiles of the calling thread.
pub struct Hardware;

// SAFETY: each method issues exactly the instructions the trait names.
unsafe impl TileUnit for Hardware {
    fn with_this_thread<R>(body: impl FnOnce(&mut Self) -> R) -> R {
        body(&mut Hardware)
    }

    unsafe fn current_config(&mut self) -> TileConfig {
        let mut bytes = [0u8; 64];
        asm!(
            "sttilecfg [{config}]",
            config = in(reg) bytes.as_mut_ptr(),
            options(nostack, preserves_flags),
        );
        TileConfig::from_bytes(bytes)
    }

    unsafe fn load_config(&mut self, config: &TileConfig) {
        // The configurations loaded are valid palette-1 records: the driver's (the
        // model's tests load the same bytes and check them) or one `sttilecfg` stored.
        asm!(
            "ldtilecfg [{config}]",
            config = in(reg) config.bytes().as_ptr(),
            options(readonly, nostack, preserves_flags),
        );
    }

    unsafe fn zero_c(&mut self) {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nomem, nostack, preserves_flags),
        );
    }

    unsafe fn step(&mut self, product: Product, operands: Operands) {
        let Operands {
            a,
            a_stride,
            b,
            b_stride,
        } = operands;
        let a_lower = a.add(16 * a_stride);
        // The step's loads, then four products of the instruction `$op`.
        macro_rules! step {
            ($op:literal) => {
                asm!(
                    "tileloadd tmm4, [{a} + {a_stride}*1]",
                    "tileloadd tmm5, [{a_lower} + {a_stride}*1]",
                    "tileloadd tmm6, [{b} + {b_stride}*1]",
                    "tileloadd tmm7, [{b} + {b_stride}*1 + 64]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    concat!($op, " tmm2, tmm5, tmm6"),
                    concat!($op, " tmm3, tmm5, tmm7"),
                    a = in(reg) a,
                    a_lower = in(reg) a_lower,
                    a_stride = in(reg) a_stride,
                    b = in(reg) b,
                    b_stride = in(reg) b_stride,
                    options(readonly, nostack, preserves_flags),
                )
            };
        }
        match product {
            Product::Bf16 => step!("tdpbf16ps"),
            Product::Int8 => step!("tdpbssd"),
        }
    }

    unsafe fn store_c(&mut self, c: *mut u8, c_stride: usize) {
        let c_lower = c.add(16 * c_stride);
        asm!(
            "tilestored [{c} + {c_stride}*1], tmm0",
            "tilestored [{c} + {c_stride}*1 + 64], tmm1",
            "tilestored [{c_lower} + {c_stride}*1], tmm2",
            "tilestored [{c_lower} + {c_stride}*1 + 64], tmm3",
            c = in(reg) c,
            c_lower = in(reg) c_lower,
            c_stride = in(reg) c_stride,
            options(nostack, preserves_flags),
        );
    }
}

/// `rounds` rounds of four independent `tdpbf16ps` on tiles loaded once (`tmm0`-`tmm3`
/// += `tmm4`/`tmm5` by `tmm6`/`tmm7`), no memory traffic in the loop; the tiles are
/// given back as found (see `driver::with_config`).
///
/// # Safety
/// AMX-BF16 and the tile state must be available (see `super::status`).
pub unsafe fn peak_rounds(rounds: usize) {
    // bf16 2^-8 everywhere: sums stay small (2^-11 per product) for any round count.
    let operand = [0x3b80_3b80u32; 256];
    with_config(&mut Hardware, &BF16_CONFIG, |_| {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{p} + {stride}*1]",
            "tileloadd tmm5, [{p} + {stride}*1]",
            "tileloadd tmm6, [{p} + {stride}*1]",
            "tileloadd tmm7, [{p} + {stride}*1]",
            "2:",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "dec {rounds}",
            "jnz 2b",
            p = in(reg) operand.as_ptr(),
            stride = in(reg) 64usize,
            rounds = inout(reg) rounds.max(1) => _,
            options(readonly, nostack),
        )
    });
}
