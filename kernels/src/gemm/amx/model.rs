//! A portable model of the AMX tile instructions the tile products use, so that their
//! packing, blocking and driver code runs (and is tested) on any machine, and so that a
//! machine with AMX can check its hardware against a written-down arithmetic.
//!
//! What the model does, and where it comes from (Intel SDM vol. 2, the entries
//! LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBF16PS and TDPBSSD; the same reading
//! is in the Bochs emulator's AMX code):
//!
//! - **State**: eight tile registers of 16 rows by 64 bytes and a palette-1
//!   configuration (64 bytes: palette, start row, then per tile its bytes per row and its
//!   rows). Loading a configuration zeroes every tile; instructions on a tile the
//!   configuration leaves empty, and shapes that do not chain (`C` rows = `A` rows, `A`
//!   bytes per row / 4 = `B` rows, `C` bytes per row = `B` bytes per row, at most 16 of
//!   each), fault. Here they return a [`Fault`] instead of raising #GP or #UD, so a
//!   driver that would crash an AMX machine fails a test on any machine.
//! - **`tdpbf16ps`** (`C += A B`, `A` and `B` holding bf16 pairs): for each row of `C`,
//!   two f32 sums per output column, one for the even and one for the odd bf16 of each
//!   pair, start at +0 and take the products of all the tile's pairs (up to 16) in order,
//!   each with a fused multiply-add rounded to nearest even. Only then is
//!   `even + odd` formed (rounded) and added to `C` (rounded). Inputs that are subnormal
//!   count as zero (DAZ), results that are subnormal become zero (FTZ); MXCSR plays no
//!   part. So a tile does not add in the order of `vdpbf16ps` (which adds each pair's
//!   odd then even product straight into its accumulator; see `gemm::bf16`): the two
//!   differ by rounding, within the bound the tests state.
//! - **`tdpbssd`** (`A`, `B` signed bytes in quadruples): each four-product sum is exact
//!   and added to the i32 in `C` with wrap-around; integer sums do not depend on order,
//!   so the model is exact whatever the hardware's order.
//!
//! Where the real instruction may differ from this model: the SDM's pseudo-code is the
//! only published description of the bf16 order, and Intel's Intrinsics Guide describes
//! an older one (both products of each pair added straight into `C`, even first); the
//! hardware's internal sums might also keep more precision than one f32 rounding per
//! step. Tininess is decided here after rounding (a sum that rounds to the smallest
//! normal is kept), and flushed zeros keep their sign; the SDM does not say either. NaN
//! payloads are whatever Rust's arithmetic gives. The tests that run on AMX hardware
//! compare it with this model and report any difference.
//!
//! Speed (issue 61): the model stands in for the tiles in whole benchmark runs on
//! machines without AMX (`NLG_JUDGE_TILES=model`), so `tdpbf16ps` computes a row's 16
//! columns at once on the CPU's vector multiply-adds (each column's chains in the order
//! above, four rows side by side) and full-width loads and stores copy whole rows:
//! about 20 GFLOP/s on two Zen 4 cores instead of 0.6 with a library `fmaf` per step.
//! `tests/amx.rs` checks it against the element-by-element definition.

use std::fmt;

/// Tile registers (`tmm0` to `tmm7`).
pub const TILES: usize = 8;
/// Rows of a tile register.
pub const MAX_ROWS: usize = 16;
/// Bytes of a tile row.
pub const ROW_BYTES: usize = 64;

/// A 64-byte tile configuration, the operand of `ldtilecfg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TileConfig([u8; 64]);

impl TileConfig {
    /// Palette 1 with `shapes[t]` = (rows, bytes per row) of tile `t`; `(0, 0)` leaves a
    /// tile unconfigured. Start row 0.
    pub const fn palette1(shapes: [(u8, u16); TILES]) -> TileConfig {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        let mut t = 0;
        while t < TILES {
            let (rows, colsb) = shapes[t];
            bytes[16 + 2 * t] = colsb as u8;
            bytes[16 + 2 * t + 1] = (colsb >> 8) as u8;
            bytes[48 + t] = rows;
            t += 1;
        }
        TileConfig(bytes)
    }

    /// A configuration from its 64 bytes as `ldtilecfg` reads them.
    pub const fn from_bytes(bytes: [u8; 64]) -> TileConfig {
        TileConfig(bytes)
    }

    /// The 64 bytes.
    pub fn bytes(&self) -> &[u8; 64] {
        &self.0
    }

    /// The palette (0: no configuration, the tiles released).
    pub fn palette(&self) -> u8 {
        self.0[0]
    }

    /// Rows of tile `t`.
    pub fn rows(&self, t: usize) -> usize {
        self.0[48 + t] as usize
    }

    /// Bytes per row of tile `t`.
    pub fn colsb(&self, t: usize) -> usize {
        u16::from_le_bytes([self.0[16 + 2 * t], self.0[17 + 2 * t]]) as usize
    }
}

/// What the hardware would raise instead of running an instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `ldtilecfg` of an invalid configuration (#GP).
    Config(String),
    /// An instruction on tiles that are not configured, or of shapes that do not chain
    /// (#UD).
    Invalid(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Config(why) => write!(f, "#GP at ldtilecfg: {why}"),
            Fault::Invalid(why) => write!(f, "#UD: {why}"),
        }
    }
}

impl std::error::Error for Fault {}

/// The tile registers and configuration of one thread.
#[derive(Clone)]
pub struct TileModel {
    /// `None` when the tiles are released (the state after `tilerelease`).
    config: Option<TileConfig>,
    tiles: [[[u8; ROW_BYTES]; MAX_ROWS]; TILES],
}

impl Default for TileModel {
    fn default() -> Self {
        Self::new()
    }
}

impl TileModel {
    /// Released tiles (no configuration).
    pub const fn new() -> TileModel {
        TileModel {
            config: None,
            tiles: [[[0; ROW_BYTES]; MAX_ROWS]; TILES],
        }
    }

    /// The configuration loaded, if any.
    pub fn config(&self) -> Option<&TileConfig> {
        self.config.as_ref()
    }

    /// Row `r` of tile `t` as bytes.
    pub fn row(&self, t: usize, r: usize) -> &[u8; ROW_BYTES] {
        &self.tiles[t][r]
    }

    /// `ldtilecfg`: check and load `config`, zeroing every tile (palette 0 releases).
    pub fn ldtilecfg(&mut self, config: &TileConfig) -> Result<(), Fault> {
        let bytes = config.bytes();
        match bytes[0] {
            0 => {
                self.tilerelease();
                return Ok(());
            }
            1 => {}
            palette => return Err(Fault::Config(format!("palette {palette} is not 1"))),
        }
        if bytes[1] != 0 {
            return Err(Fault::Config(
                "a start row other than 0 (only interrupted loads set one)".into(),
            ));
        }
        let reserved = bytes[2..16]
            .iter()
            .chain(&bytes[32..48])
            .chain(&bytes[56..]);
        if reserved.into_iter().any(|&b| b != 0) {
            return Err(Fault::Config("reserved bytes are not zero".into()));
        }
        for t in 0..TILES {
            let (rows, colsb) = (config.rows(t), config.colsb(t));
            if rows > MAX_ROWS || colsb > ROW_BYTES {
                return Err(Fault::Config(format!(
                    "tile {t}: {rows} rows of {colsb} bytes (at most {MAX_ROWS} of \
                     {ROW_BYTES})"
                )));
            }
            if (rows == 0) != (colsb == 0) {
                return Err(Fault::Config(format!(
                    "tile {t}: {rows} rows of {colsb} bytes (both or neither zero)"
                )));
            }
        }
        self.config = Some(*config);
        self.tiles = [[[0; ROW_BYTES]; MAX_ROWS]; TILES];
        Ok(())
    }

    /// `sttilecfg`: the configuration loaded, or 64 zero bytes when the tiles are released.
    pub fn sttilecfg(&self) -> TileConfig {
        self.config.unwrap_or(TileConfig([0; 64]))
    }

    /// `tilerelease`: back to the released state.
    pub fn tilerelease(&mut self) {
        self.config = None;
        self.tiles = [[[0; ROW_BYTES]; MAX_ROWS]; TILES];
    }

    /// The shape (rows, bytes per row) of configured tile `t`.
    fn shape(&self, t: usize) -> Result<(usize, usize), Fault> {
        let config = self
            .config
            .as_ref()
            .ok_or_else(|| Fault::Invalid("tiles are not configured".into()))?;
        if t >= TILES || config.rows(t) == 0 {
            return Err(Fault::Invalid(format!("tile {t} is not configured")));
        }
        let (rows, colsb) = (config.rows(t), config.colsb(t));
        if colsb % 4 != 0 {
            return Err(Fault::Invalid(format!(
                "tile {t}: {colsb} bytes per row is not a multiple of 4"
            )));
        }
        Ok((rows, colsb))
    }

    /// `tilezero`.
    pub fn tilezero(&mut self, t: usize) -> Result<(), Fault> {
        self.shape(t)?;
        self.tiles[t] = [[0; ROW_BYTES]; MAX_ROWS];
        Ok(())
    }

    /// `tileloadd tmm{t}, [base + stride]`: row `r` from `base + r * stride`; the bytes
    /// and rows past the tile's shape become zero.
    ///
    /// # Safety
    /// `base + r * stride` must be readable for the tile's bytes per row, for every row.
    pub unsafe fn tileloadd(
        &mut self,
        t: usize,
        base: *const u8,
        stride: usize,
    ) -> Result<(), Fault> {
        let (rows, colsb) = self.shape(t)?;
        if colsb == ROW_BYTES {
            // Whole rows as fixed-size copies (a library call per row otherwise).
            for (r, row) in self.tiles[t].iter_mut().enumerate() {
                *row = if r < rows {
                    // SAFETY: the caller's promise (a row's bytes at `base + r * stride`).
                    unsafe {
                        base.add(r * stride)
                            .cast::<[u8; ROW_BYTES]>()
                            .read_unaligned()
                    }
                } else {
                    [0; ROW_BYTES]
                };
            }
            return Ok(());
        }
        self.tiles[t] = [[0; ROW_BYTES]; MAX_ROWS];
        for (r, row) in self.tiles[t].iter_mut().enumerate().take(rows) {
            // SAFETY: the caller's promise.
            let source = unsafe { std::slice::from_raw_parts(base.add(r * stride), colsb) };
            row[..colsb].copy_from_slice(source);
        }
        Ok(())
    }

    /// `tilestored [base + stride], tmm{t}`: the tile's rows, its bytes per row each.
    ///
    /// # Safety
    /// `base + r * stride` must be writable for the tile's bytes per row, for every row.
    pub unsafe fn tilestored(&self, t: usize, base: *mut u8, stride: usize) -> Result<(), Fault> {
        let (rows, colsb) = self.shape(t)?;
        if colsb == ROW_BYTES {
            for (r, row) in self.tiles[t].iter().enumerate().take(rows) {
                // SAFETY: the caller's promise (a row's bytes at `base + r * stride`).
                unsafe {
                    base.add(r * stride)
                        .cast::<[u8; ROW_BYTES]>()
                        .write_unaligned(*row)
                };
            }
            return Ok(());
        }
        for (r, row) in self.tiles[t].iter().enumerate().take(rows) {
            // SAFETY: the caller's promise.
            let target = unsafe { std::slice::from_raw_parts_mut(base.add(r * stride), colsb) };
            target.copy_from_slice(&row[..colsb]);
        }
        Ok(())
    }

    /// The checks of a tile product `c += a b`: (rows of `c`, columns of `c` in dwords,
    /// dwords of the inner dimension).
    fn product_shape(&self, c: usize, a: usize, b: usize) -> Result<(usize, usize, usize), Fault> {
        if c == a || c == b || a == b {
            return Err(Fault::Invalid(format!(
                "a tile product needs three different tiles (tmm{c}, tmm{a}, tmm{b})"
            )));
        }
        let ((c_rows, c_colsb), (a_rows, a_colsb), (b_rows, b_colsb)) =
            (self.shape(c)?, self.shape(a)?, self.shape(b)?);
        let (n, k) = (c_colsb / 4, b_rows);
        if c_colsb != b_colsb || c_rows != a_rows || a_colsb / 4 != k {
            return Err(Fault::Invalid(format!(
                "shapes do not chain: C {c_rows}x{c_colsb} bytes, A {a_rows}x{a_colsb}, \
                 B {b_rows}x{b_colsb}"
            )));
        }
        if n > 16 || k > 16 {
            return Err(Fault::Invalid(format!(
                "{n} columns or {k} inner dwords exceed 16"
            )));
        }
        Ok((c_rows, n, k))
    }

    /// `tdpbf16ps tmm{c}, tmm{a}, tmm{b}` (see the module documentation for the order).
    pub fn tdpbf16ps(&mut self, c: usize, a: usize, b: usize) -> Result<(), Fault> {
        let (rows, n, k) = self.product_shape(c, a, b)?;
        let [a, b, c] = self
            .tiles
            .get_disjoint_mut([a, b, c])
            .expect("three different tiles (checked by product_shape)");
        bf16_tile_product(a, b, c, Shape { rows, n, k });
        Ok(())
    }

    /// `tdpbssd tmm{c}, tmm{a}, tmm{b}`: signed bytes, i32 sums with wrap-around.
    pub fn tdpbssd(&mut self, c: usize, a: usize, b: usize) -> Result<(), Fault> {
        let (rows, n, k) = self.product_shape(c, a, b)?;
        for m in 0..rows {
            for kk in 0..k {
                let a_bytes = dword(&self.tiles[a][m], kk);
                for j in 0..n {
                    let b_bytes = dword(&self.tiles[b][kk], j);
                    let dot: i32 = (0..4)
                        .map(|i| a_bytes[i] as i8 as i32 * b_bytes[i] as i8 as i32)
                        .sum();
                    let row = &mut self.tiles[c][m];
                    let sum = i32::from_le_bytes(dword(row, j)).wrapping_add(dot);
                    row[4 * j..4 * j + 4].copy_from_slice(&sum.to_le_bytes());
                }
            }
            self.tiles[c][m][4 * n..].fill(0);
        }
        self.tiles[c][rows..].iter_mut().for_each(|row| row.fill(0));
        Ok(())
    }
}

/// A tile register's bytes.
type Tile = [[u8; ROW_BYTES]; MAX_ROWS];

/// The shape of a product: `C`'s rows and columns (dwords), `B`'s rows.
#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    n: usize,
    k: usize,
}

/// `C += A B` as `tdpbf16ps` (module documentation), on the widest vector path this CPU
/// has: the same arithmetic in the same order per element (sums across the columns of a
/// row, which are independent), so every path gives the same bits; the plain one calls a
/// library `fmaf` per multiply-add, 30 to 50 times slower, which made a model run of
/// a whole benchmark take hours.
fn bf16_tile_product(a: &Tile, b: &Tile, c: &mut Tile, shape: Shape) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512vl,fma")]
        fn avx512(a: &Tile, b: &Tile, c: &mut Tile, shape: Shape) {
            bf16_tile_product_inline(a, b, c, shape)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(a: &Tile, b: &Tile, c: &mut Tile, shape: Shape) {
            bf16_tile_product_inline(a, b, c, shape)
        }
        let cpu = crate::cpu::CpuFeatures::get();
        if cpu.avx512f && cpu.fma {
            // SAFETY: the CPU has the features.
            return unsafe { avx512(a, b, c, shape) };
        }
        if cpu.avx2 && cpu.fma {
            // SAFETY: the CPU has the features.
            return unsafe { avx2(a, b, c, shape) };
        }
    }
    bf16_tile_product_inline(a, b, c, shape)
}

#[inline(always)]
fn bf16_tile_product_inline(a: &Tile, b: &Tile, c: &mut Tile, Shape { rows, n, k }: Shape) {
    // The even and odd bf16 of every dword of A and B widened once (dwords past the
    // shapes are computed and never used).
    let (b_even, b_odd) = widened(b);
    let (a_even, a_odd) = widened(a);
    // Four rows at a time: each sum is a chain of dependent multiply-adds, and four
    // rows' chains run side by side (rows past `rows` are computed and never stored).
    const ROWS_AT_ONCE: usize = 4;
    for m0 in (0..MAX_ROWS).step_by(ROWS_AT_ONCE) {
        let (mut even, mut odd) = ([[0f32; 16]; ROWS_AT_ONCE], [[0f32; 16]; ROWS_AT_ONCE]);
        for kk in 0..k {
            for r in 0..ROWS_AT_ONCE {
                let (a_even, a_odd) = (a_even[m0 + r][kk], a_odd[m0 + r][kk]);
                for j in 0..16 {
                    even[r][j] = flush(a_even.mul_add(b_even[kk][j], even[r][j]));
                    odd[r][j] = flush(a_odd.mul_add(b_odd[kk][j], odd[r][j]));
                }
            }
        }
        for r in 0..ROWS_AT_ONCE.min(rows.saturating_sub(m0)) {
            // Every column as a vector (the dwords past `n` become zero).
            let row = &mut c[m0 + r];
            let old: [f32; 16] = std::array::from_fn(|j| f32::from_le_bytes(dword(row, j)));
            let mut new = [0u32; 16];
            for j in 0..16 {
                let pair = flush(even[r][j] + odd[r][j]);
                let sum = flush(flush(old[j]) + pair).to_bits();
                new[j] = if j < n { sum } else { 0 };
            }
            for (bytes, word) in row.chunks_exact_mut(4).zip(new) {
                bytes.copy_from_slice(&word.to_le_bytes());
            }
        }
    }
    c[rows..].iter_mut().for_each(|row| row.fill(0));
}

/// The even and odd bf16 of each dword of `tile` (row, dword), widened with subnormals
/// as zero.
#[inline(always)]
fn widened(tile: &Tile) -> ([[f32; 16]; 16], [[f32; 16]; 16]) {
    let (mut even, mut odd) = ([[0f32; 16]; 16], [[0f32; 16]; 16]);
    for r in 0..MAX_ROWS {
        for j in 0..16 {
            (even[r][j], odd[r][j]) = bf16_at(&tile[r], 2 * j);
        }
    }
    (even, odd)
}

/// Dword `j` of a tile row, as bytes.
#[inline(always)]
fn dword(row: &[u8; ROW_BYTES], j: usize) -> [u8; 4] {
    [row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]]
}

/// The bf16 pair at element `i` (even) and `i + 1` (odd) of a tile row, widened to f32
/// with subnormals as zero.
#[inline(always)]
fn bf16_at(row: &[u8; ROW_BYTES], i: usize) -> (f32, f32) {
    let half = |i: usize| {
        let bits = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
        flush(f32::from_bits((bits as u32) << 16))
    };
    (half(i), half(i + 1))
}

/// A subnormal value as zero of its sign: DAZ for inputs, FTZ for results.
#[inline(always)]
fn flush(value: f32) -> f32 {
    if value.is_subnormal() {
        f32::from_bits(value.to_bits() & 0x8000_0000)
    } else {
        value
    }
}
