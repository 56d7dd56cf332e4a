//! Matrix products on AMX tiles (Intel Sapphire Rapids and later): `tdpbf16ps` for
//! [`Bf16Matrix`] and `tdpbssd` for [`Int8Matrix`], on the weights as those types already
//! pack them.
//!
//! One driver (`driver.rs`) runs a tile unit: for now the portable model of the
//! instructions ([`model`]), so the packing, blocking and threading are tested on every
//! machine; the real instructions come next, behind the same driver.
//!
//! Numbers: int8 tiles give the vector paths' numbers bit for bit (integer sums are
//! exact; the scaling is the same f32 steps). bf16 tiles add the same exact products
//! in another order than `vdpbf16ps` (see [`model`]), so they differ from the vector
//! paths by rounding, within the bound the tests state.

mod driver;
pub mod model;

use super::tiles::Store;
use super::{Bf16Matrix, Int8Matrix};
pub use driver::{BLOCK_ROWS, STEP_PAIRS};
use model::TileModel;

/// Which tiles run a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// The portable model of the instructions ([`model::TileModel`]), any machine.
    Model,
}

/// `out = x W^T` (or `+=`) for `matrix` on `unit`'s tiles.
pub(super) fn bf16_product(
    unit: Unit,
    matrix: &Bf16Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
) {
    match unit {
        // SAFETY: the model runs anywhere.
        Unit::Model => unsafe { driver::bf16_product::<TileModel>(matrix, x, m, out, store) },
    }
}

/// `out = x W^T` (or `+=`) for `matrix` on `unit`'s tiles.
pub(super) fn int8_product(
    unit: Unit,
    matrix: &Int8Matrix,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    store: Store,
) {
    match unit {
        // SAFETY: the model runs anywhere.
        Unit::Model => unsafe { driver::int8_product::<TileModel>(matrix, x, m, out, store) },
    }
}
