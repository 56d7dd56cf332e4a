//! Reduced-precision matrix products for linear layers: `y = x W^T` with `W` packed once
//! at load in bf16 ([`Bf16Matrix`]) or int8 ([`Int8Matrix`]) and `x` converted per call.
//!
//! Each kernel picks its instruction path at run time ([`Isa`], from
//! [`crate::cpu::CpuFeatures::get`]) and has a portable path that gives the same numbers
//! bit for bit (AMX's bf16 tiles excepted: they sum in another order, see [`amx`]);
//! tiles run in parallel on rayon's pool and the result does not depend on the number of
//! threads (see `tiles`).

pub mod amx;
pub mod bf16;
pub mod int8;
mod tiles;

pub use bf16::Bf16Matrix;
pub use int8::Int8Matrix;
pub use tiles::Store;

/// The instruction path a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AMX tiles (`tdpbf16ps` for bf16, `tdpbssd` for int8), see [`amx`]; the default
    /// paths take it for products of at least [`amx::MIN_ROWS`] rows.
    Amx,
    /// AVX-512 with the kernel's extension (AVX512-BF16 for bf16, AVX512-VNNI for int8).
    Avx512,
    /// 256-bit AVX-VNNI (int8 only).
    AvxVnni,
    /// AVX2 and FMA: bf16 widened to f32 in registers, int8 through `vpmaddwd`.
    Avx2,
    /// aarch64 NEON with the dot-product extension (int8 only: `sdot`).
    Dotprod,
    /// aarch64 NEON: bf16 widened to f32 in registers (`fmla`), int8 through widening
    /// multiplies (`smull`) and pairwise additions.
    Neon,
    /// Plain Rust, any machine.
    Portable,
}

impl Isa {
    /// Every path, widest first (x86-64's, then aarch64's).
    pub const ALL: [Isa; 7] = [
        Isa::Amx,
        Isa::Avx512,
        Isa::AvxVnni,
        Isa::Avx2,
        Isa::Dotprod,
        Isa::Neon,
        Isa::Portable,
    ];

    /// The path's name in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Amx => "amx",
            Isa::Avx512 => "avx512",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx2 => "avx2",
            Isa::Dotprod => "dotprod",
            Isa::Neon => "neon",
            Isa::Portable => "portable",
        }
    }
}
