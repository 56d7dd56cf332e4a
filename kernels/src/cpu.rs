//! What the processor can do, detected once at run time, optionally lowered by the
//! `NLG_JUDGE_CPU` environment variable.
//!
//! Kernels choose their instruction paths from this record rather than from compile-time
//! target features, so one build serves machines with and without AVX-512 and its
//! BF16/VNNI extensions (x86-64), or with and without the dot-product extension
//! (aarch64). `NLG_JUDGE_CPU` hides features from the kernels so that one machine can run
//! (and measure) the narrower paths next to its best one:
//!
//! | value      | kernels see                                                    |
//! |------------|----------------------------------------------------------------|
//! | `native`   | everything detected (the default)                              |
//! | `amx`      | everything detected; an error if AMX (tile, BF16, INT8) is missing |
//! | `avx512`   | everything but AMX; an error if AVX-512F is missing            |
//! | `avx512f`  | AVX-512F/BW/VL, AVX2, FMA, F16C: no BF16/VNNI extensions       |
//! | `avxvnni`  | AVX2, FMA, F16C, AVX-VNNI: no AVX-512                          |
//! | `avx2`     | AVX2, FMA, F16C: no AVX-512, no AVX-VNNI                       |
//! | `dotprod`  | aarch64: NEON and the dot product (`sdot`): no BF16, no I8MM   |
//! | `neon`     | aarch64: NEON only: no dot product                             |
//! | `portable` | nothing: plain Rust everywhere                                 |
//!
//! The switch only lowers: a value asking for what the CPU lacks is reported by
//! [`requested_level`] (the command line refuses to run with it), and [`CpuFeatures::get`]
//! then falls back to the features the CPU has within the request. A level of the other
//! architecture (`avx2` on an ARM CPU, `neon` on an x86-64 one) asks for features the CPU
//! lacks and is refused the same way. It governs this crate's kernels only (attention,
//! pointwise, bf16/int8 products), not f32 matrix products done elsewhere.
//!
//! On aarch64, `bf16` and `i8mm` are detected and named (benchmark headers) but no kernel
//! uses them: `bfdot`/`bfmmla` do not round as the portable bf16 sums do (so they could
//! not give the same numbers bit for bit), and the `smmla` intrinsics are not stable Rust.
//! NEON is part of every aarch64 Linux or macOS target, so there `portable` is plain Rust
//! that the compiler still vectorises, without the fused multiply-adds and the
//! hand-written products of the `neon`/`dotprod` paths.

use std::sync::OnceLock;

/// The environment variable that lowers the detected features.
pub const ENV: &str = "NLG_JUDGE_CPU";

/// The instruction-set extensions the kernels can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512bf16: bool,
    pub avx512vnni: bool,
    pub avxvnni: bool,
    /// aarch64 Advanced SIMD.
    pub neon: bool,
    /// aarch64 `sdot`/`udot` (FEAT_DotProd).
    pub dotprod: bool,
    /// aarch64 BFloat16 arithmetic (FEAT_BF16): detected, not used.
    pub bf16: bool,
    /// aarch64 int8 matrix multiply (FEAT_I8MM): detected, not used.
    pub i8mm: bool,
    /// x86-64 AMX tile registers (CPUID.(7,0):EDX[24]). Whether the operating system lets
    /// this process use them is asked separately (`gemm::amx::status`).
    pub amx_tile: bool,
    /// AMX `tdpbf16ps` (CPUID.(7,0):EDX[22]).
    pub amx_bf16: bool,
    /// AMX `tdpbssd` and its kin (CPUID.(7,0):EDX[25]).
    pub amx_int8: bool,
}

/// A level `NLG_JUDGE_CPU` can ask for (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Native,
    Amx,
    Avx512,
    Avx512f,
    AvxVnni,
    Avx2,
    Dotprod,
    Neon,
    Portable,
}

impl Level {
    /// Every level, widest first (x86-64's, then aarch64's).
    pub const ALL: [Level; 9] = [
        Level::Native,
        Level::Amx,
        Level::Avx512,
        Level::Avx512f,
        Level::AvxVnni,
        Level::Avx2,
        Level::Dotprod,
        Level::Neon,
        Level::Portable,
    ];

    /// The value of `NLG_JUDGE_CPU` that asks for this level.
    pub fn name(self) -> &'static str {
        match self {
            Level::Native => "native",
            Level::Amx => "amx",
            Level::Avx512 => "avx512",
            Level::Avx512f => "avx512f",
            Level::AvxVnni => "avxvnni",
            Level::Avx2 => "avx2",
            Level::Dotprod => "dotprod",
            Level::Neon => "neon",
            Level::Portable => "portable",
        }
    }

    /// The level named `name` (case-insensitive, surrounding blanks ignored).
    pub fn parse(name: &str) -> Option<Level> {
        let name = name.trim().to_ascii_lowercase();
        Level::ALL.into_iter().find(|level| level.name() == name)
    }

    /// `features` with what this level hides removed.
    pub fn mask(self, features: CpuFeatures) -> CpuFeatures {
        let none = CpuFeatures::default();
        let avx2 = CpuFeatures {
            avx2: features.avx2,
            fma: features.fma,
            f16c: features.f16c,
            ..none
        };
        let neon = CpuFeatures {
            neon: features.neon,
            ..none
        };
        match self {
            Level::Native | Level::Amx => features,
            Level::Avx512 => CpuFeatures {
                amx_tile: false,
                amx_bf16: false,
                amx_int8: false,
                ..features
            },
            Level::Avx512f => CpuFeatures {
                avx512f: features.avx512f,
                avx512bw: features.avx512bw,
                avx512vl: features.avx512vl,
                ..avx2
            },
            Level::AvxVnni => CpuFeatures {
                avxvnni: features.avxvnni,
                ..avx2
            },
            Level::Avx2 => avx2,
            Level::Dotprod => CpuFeatures {
                dotprod: features.dotprod,
                ..neon
            },
            Level::Neon => neon,
            Level::Portable => none,
        }
    }

    /// Whether a CPU with `features` has what this level promises.
    pub fn available_on(self, features: CpuFeatures) -> bool {
        let avx2 = features.avx2 && features.fma;
        match self {
            Level::Native | Level::Portable => true,
            Level::Amx => {
                avx2 && features.avx512f
                    && features.amx_tile
                    && features.amx_bf16
                    && features.amx_int8
            }
            Level::Avx512 | Level::Avx512f => avx2 && features.avx512f,
            Level::AvxVnni => avx2 && features.avxvnni,
            Level::Avx2 => avx2,
            Level::Dotprod => features.neon && features.dotprod,
            Level::Neon => features.neon,
        }
    }
}

/// Why `NLG_JUDGE_CPU` cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelError {
    /// Not one of the level names.
    Unknown(String),
    /// A level this CPU does not have.
    Unavailable {
        level: Level,
        detected: Vec<&'static str>,
    },
}

impl std::fmt::Display for LevelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
        match self {
            LevelError::Unknown(value) => write!(
                f,
                "{ENV}={value:?} is not an instruction path; use one of {}",
                names.join(", ")
            ),
            LevelError::Unavailable { level, detected } => write!(
                f,
                "{ENV}={} asks for instructions this CPU lacks (it has: {}); \
                 the switch can only hide features, use a narrower path",
                level.name(),
                if detected.is_empty() {
                    "none the kernels use".to_string()
                } else {
                    detected.join(", ")
                }
            ),
        }
    }
}

impl std::error::Error for LevelError {}

/// The level `NLG_JUDGE_CPU` asks for (`None` when unset or empty), or why it cannot be
/// honoured on this CPU.
pub fn requested_level() -> Result<Option<Level>, LevelError> {
    match std::env::var(ENV) {
        Ok(value) if !value.trim().is_empty() => check_level(&value, CpuFeatures::detected()),
        _ => Ok(None),
    }
}

/// [`requested_level`] for the value `value` on a CPU with `features`.
pub fn check_level(value: &str, features: CpuFeatures) -> Result<Option<Level>, LevelError> {
    let level = Level::parse(value).ok_or_else(|| LevelError::Unknown(value.to_string()))?;
    if level.available_on(features) {
        Ok(Some(level))
    } else {
        Err(LevelError::Unavailable {
            level,
            detected: features.names(),
        })
    }
}

impl CpuFeatures {
    /// The features the kernels use: those of this machine, lowered by `NLG_JUDGE_CPU`
    /// (detected and read on first use, then cached). An unknown value hides nothing.
    pub fn get() -> CpuFeatures {
        static MASKED: OnceLock<CpuFeatures> = OnceLock::new();
        *MASKED.get_or_init(|| {
            let detected = Self::detected();
            match std::env::var(ENV).ok().and_then(|v| Level::parse(&v)) {
                Some(level) => level.mask(detected),
                None => detected,
            }
        })
    }

    /// The features of the machine, whatever `NLG_JUDGE_CPU` says (cached).
    pub fn detected() -> CpuFeatures {
        static DETECTED: OnceLock<CpuFeatures> = OnceLock::new();
        *DETECTED.get_or_init(Self::detect)
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> CpuFeatures {
        use std::arch::is_x86_feature_detected as has;
        CpuFeatures {
            avx2: has!("avx2"),
            fma: has!("fma"),
            f16c: has!("f16c"),
            avx512f: has!("avx512f"),
            avx512bw: has!("avx512bw"),
            avx512vl: has!("avx512vl"),
            avx512bf16: has!("avx512bf16"),
            avx512vnni: has!("avx512vnni"),
            avxvnni: has!("avxvnni"),
            ..amx_bits()
        }
    }

    #[cfg(target_arch = "aarch64")]
    fn detect() -> CpuFeatures {
        use std::arch::is_aarch64_feature_detected as has;
        let neon = has!("neon");
        CpuFeatures {
            neon,
            // The extensions are used (or would be) only through NEON registers.
            dotprod: neon && has!("dotprod"),
            bf16: neon && has!("bf16"),
            i8mm: neon && has!("i8mm"),
            ..CpuFeatures::default()
        }
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn detect() -> CpuFeatures {
        CpuFeatures::default()
    }

    /// The names of the features, in a fixed order (for benchmark headers).
    pub fn names(&self) -> Vec<&'static str> {
        let all = [
            ("avx2", self.avx2),
            ("fma", self.fma),
            ("f16c", self.f16c),
            ("avx512f", self.avx512f),
            ("avx512bw", self.avx512bw),
            ("avx512vl", self.avx512vl),
            ("avx512bf16", self.avx512bf16),
            ("avx512vnni", self.avx512vnni),
            ("avxvnni", self.avxvnni),
            ("neon", self.neon),
            ("dotprod", self.dotprod),
            ("bf16", self.bf16),
            ("i8mm", self.i8mm),
            ("amx_tile", self.amx_tile),
            ("amx_bf16", self.amx_bf16),
            ("amx_int8", self.amx_int8),
        ];
        all.iter()
            .filter(|(_, present)| *present)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// The AMX bits of CPUID leaf 7, subleaf 0 (EDX bits 22, 24, 25), the rest of the record
/// empty. The tile extensions count only with the tile registers themselves.
#[cfg(target_arch = "x86_64")]
fn amx_bits() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID leaf 0 exists on every x86-64 CPU; leaf 7 is read only when leaf 0
    // says it exists. Both only read registers. (The intrinsics are safe on recent
    // toolchains, `unsafe` on older ones within rust-version.)
    #[allow(unused_unsafe)]
    let edx = unsafe {
        if __cpuid(0).eax < 7 {
            return CpuFeatures::default();
        }
        __cpuid_count(7, 0).edx
    };
    let bit = |n: u32| edx >> n & 1 == 1;
    let tile = bit(24);
    CpuFeatures {
        amx_tile: tile,
        amx_bf16: tile && bit(22),
        amx_int8: tile && bit(25),
        ..CpuFeatures::default()
    }
}

/// Who made the processor, from CPUID's vendor string (x86-64; `Other` elsewhere): the
/// same instructions run at different rates on different makers' cores (AVX512-BF16's
/// `vdpbf16ps` was measured 1.26x f32 end to end on an AMD Zen 5, 0.69x on an Intel
/// Xeon), so the advice on precision depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Intel,
    Amd,
    Other,
}

impl Vendor {
    /// The vendor named by a CPUID vendor string (`GenuineIntel`, `AuthenticAMD`).
    pub fn from_cpuid_string(id: &str) -> Vendor {
        match id {
            "GenuineIntel" => Vendor::Intel,
            "AuthenticAMD" => Vendor::Amd,
            _ => Vendor::Other,
        }
    }

    /// This machine's vendor (read once).
    pub fn detected() -> Vendor {
        static VENDOR: OnceLock<Vendor> = OnceLock::new();
        *VENDOR.get_or_init(|| Vendor::from_cpuid_string(&cpuid_vendor_string()))
    }
}

#[cfg(target_arch = "x86_64")]
fn cpuid_vendor_string() -> String {
    // Leaf 0 is present on every x86-64 processor; the string is EBX, EDX, ECX. (The
    // intrinsic is safe on recent toolchains, `unsafe` on older ones within rust-version.)
    #[allow(unused_unsafe)]
    // SAFETY: CPUID leaf 0 exists on every x86-64 CPU and only reads registers.
    let leaf = unsafe { std::arch::x86_64::__cpuid(0) };
    let bytes: Vec<u8> = [leaf.ebx, leaf.edx, leaf.ecx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_vendor_string() -> String {
    String::new()
}

/// The instruction path each kernel family takes with the features of
/// [`CpuFeatures::get`]: `("attention", ...)` (segment attention and the pointwise
/// kernels, f32), `("bf16", ...)` and `("int8", ...)` (the reduced-precision products),
/// each `amx` (tiles for calls with enough rows, the best vector path below that),
/// `avx512`, `avxvnni`, `avx2`, `dotprod`, `neon` or `portable`.
pub fn paths() -> [(&'static str, &'static str); 3] {
    use crate::attention::SimdPath;
    use crate::gemm::{Bf16Matrix, Int8Matrix};
    let attention = match SimdPath::best() {
        SimdPath::Avx512 => "avx512",
        SimdPath::Avx2 => "avx2",
        SimdPath::Neon => "neon",
        SimdPath::Portable => "portable",
    };
    [
        ("attention", attention),
        ("bf16", Bf16Matrix::best_isa().name()),
        ("int8", Int8Matrix::best_isa().name()),
    ]
}

/// [`paths`] in words, e.g. `attention avx2, bf16 avx2, int8 avx2`.
pub fn paths_used() -> String {
    paths()
        .iter()
        .map(|(kernel, path)| format!("{kernel} {path}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEN5: CpuFeatures = CpuFeatures {
        avx2: true,
        fma: true,
        f16c: true,
        avx512f: true,
        avx512bw: true,
        avx512vl: true,
        avx512bf16: true,
        avx512vnni: true,
        avxvnni: true,
        ..NONE
    };

    const NONE: CpuFeatures = CpuFeatures {
        avx2: false,
        fma: false,
        f16c: false,
        avx512f: false,
        avx512bw: false,
        avx512vl: false,
        avx512bf16: false,
        avx512vnni: false,
        avxvnni: false,
        neon: false,
        dotprod: false,
        bf16: false,
        i8mm: false,
        amx_tile: false,
        amx_bf16: false,
        amx_int8: false,
    };

    /// An Intel Sapphire Rapids Xeon: Zen 5's vector extensions and AMX.
    const SAPPHIRE_RAPIDS: CpuFeatures = CpuFeatures {
        amx_tile: true,
        amx_bf16: true,
        amx_int8: true,
        ..ZEN5
    };

    /// An Arm Neoverse V1/V2 (Graviton 3/4) or Apple M2 and later.
    const NEOVERSE: CpuFeatures = CpuFeatures {
        neon: true,
        dotprod: true,
        bf16: true,
        i8mm: true,
        ..NONE
    };

    /// A Cortex-A72 (Raspberry Pi 4, Graviton 1): NEON without the dot product.
    const A72: CpuFeatures = CpuFeatures { neon: true, ..NONE };

    const ZEN2: CpuFeatures = CpuFeatures {
        avx2: true,
        fma: true,
        f16c: true,
        avx512f: false,
        avx512bw: false,
        avx512vl: false,
        avx512bf16: false,
        avx512vnni: false,
        avxvnni: false,
        ..NONE
    };

    #[test]
    fn extensions_imply_their_base() {
        let features = CpuFeatures::detected();
        // AVX-512 extensions are never reported without the foundation.
        if features.avx512bf16 || features.avx512vnni || features.avx512bw {
            assert!(features.avx512f, "{features:?}");
        }
        if features.dotprod || features.bf16 || features.i8mm {
            assert!(features.neon, "{features:?}");
        }
        // One architecture's features only.
        assert!(!(features.neon && features.avx2), "{features:?}");
        #[cfg(target_arch = "aarch64")]
        assert!(
            features.neon,
            "NEON is part of every aarch64 target we build for"
        );
        if features.amx_bf16 || features.amx_int8 {
            assert!(features.amx_tile, "{features:?}");
        }
        // Linux lists the AMX flags only where CPUID has them (and the kernel supports
        // them): every listed flag must have been detected.
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if let Some(flags) = cpuinfo.lines().find(|l| l.starts_with("flags")) {
            let listed: Vec<&str> = flags.split_whitespace().collect();
            for name in ["amx_tile", "amx_bf16", "amx_int8"] {
                if listed.contains(&name) {
                    assert!(features.names().contains(&name), "{name}: {features:?}");
                }
            }
        }
        assert_eq!(features, CpuFeatures::detected(), "detection is cached");
        assert_eq!(CpuFeatures::get(), CpuFeatures::get(), "masking is cached");
        assert!(paths_used().starts_with("attention "), "{}", paths_used());
    }

    #[test]
    fn levels_only_hide_features() {
        for level in Level::ALL {
            for cpu in [ZEN5, ZEN2, NEOVERSE, A72, CpuFeatures::default()] {
                let masked = level.mask(cpu);
                let (kept, had) = (masked.names(), cpu.names());
                assert!(kept.iter().all(|n| had.contains(n)), "{level:?}: {kept:?}");
            }
        }
        assert_eq!(Level::Avx2.mask(ZEN5), ZEN2);
        assert_eq!(Level::Avx2.mask(ZEN2), ZEN2);
        assert_eq!(Level::Portable.mask(ZEN5), CpuFeatures::default());
        assert_eq!(
            Level::AvxVnni.mask(ZEN5).names(),
            ["avx2", "fma", "f16c", "avxvnni"]
        );
        let avx512f = Level::Avx512f.mask(ZEN5);
        assert!(avx512f.avx512f && !avx512f.avx512bf16 && !avx512f.avx512vnni);
        assert_eq!(Level::Dotprod.mask(NEOVERSE).names(), ["neon", "dotprod"]);
        assert_eq!(Level::Neon.mask(NEOVERSE), A72);
        assert_eq!(Level::Neon.mask(A72), A72);
        assert_eq!(Level::Portable.mask(NEOVERSE), CpuFeatures::default());
        // `native` and `amx` keep the tiles, `avx512` and below hide them.
        assert_eq!(Level::Amx.mask(SAPPHIRE_RAPIDS), SAPPHIRE_RAPIDS);
        assert_eq!(Level::Native.mask(SAPPHIRE_RAPIDS), SAPPHIRE_RAPIDS);
        assert_eq!(Level::Avx512.mask(SAPPHIRE_RAPIDS), ZEN5);
        assert_eq!(Level::Avx512.mask(ZEN5), ZEN5);
        assert_eq!(Level::Avx2.mask(SAPPHIRE_RAPIDS), ZEN2);
        assert!(!Level::Avx512f.mask(SAPPHIRE_RAPIDS).amx_tile);
        // A level of the other architecture hides everything.
        assert_eq!(Level::Avx2.mask(NEOVERSE), CpuFeatures::default());
        assert_eq!(Level::Neon.mask(ZEN5), CpuFeatures::default());
    }

    #[test]
    fn requests_are_checked_against_the_cpu() {
        assert_eq!(check_level(" AVX2 ", ZEN2), Ok(Some(Level::Avx2)));
        assert_eq!(check_level("portable", ZEN2), Ok(Some(Level::Portable)));
        assert_eq!(check_level("avx512", ZEN5), Ok(Some(Level::Avx512)));
        assert_eq!(check_level("amx", SAPPHIRE_RAPIDS), Ok(Some(Level::Amx)));
        let no_tiles = check_level("AMX", ZEN5).unwrap_err();
        assert!(no_tiles.to_string().contains("avx512bf16"), "{no_tiles}");
        let refused = check_level("avx512", ZEN2).unwrap_err();
        assert!(
            refused.to_string().contains("lacks") && refused.to_string().contains("avx2"),
            "{refused}"
        );
        assert!(matches!(
            check_level("avxvnni", ZEN2),
            Err(LevelError::Unavailable { .. })
        ));
        let unknown = check_level("sse9", ZEN5).unwrap_err();
        assert!(unknown.to_string().contains("portable"), "{unknown}");
        assert!(unknown.to_string().contains("neon"), "{unknown}");
    }

    #[test]
    fn aarch64_levels_are_checked_like_the_x86_ones() {
        assert_eq!(check_level("dotprod", NEOVERSE), Ok(Some(Level::Dotprod)));
        assert_eq!(check_level(" NEON", A72), Ok(Some(Level::Neon)));
        assert_eq!(check_level("portable", A72), Ok(Some(Level::Portable)));
        assert_eq!(check_level("native", A72), Ok(Some(Level::Native)));
        let refused = check_level("dotprod", A72).unwrap_err();
        assert!(
            refused.to_string().contains("lacks") && refused.to_string().contains("neon"),
            "{refused}"
        );
        // The other architecture's levels are refused as missing features are.
        for (level, cpu) in [("neon", ZEN5), ("dotprod", ZEN2), ("avx2", NEOVERSE)] {
            assert!(
                matches!(check_level(level, cpu), Err(LevelError::Unavailable { .. })),
                "{level} on {cpu:?}"
            );
        }
        assert!(matches!(
            check_level("avx512", A72),
            Err(LevelError::Unavailable { .. })
        ));
    }

    #[test]
    fn vendor_strings_are_read() {
        assert_eq!(Vendor::from_cpuid_string("GenuineIntel"), Vendor::Intel);
        assert_eq!(Vendor::from_cpuid_string("AuthenticAMD"), Vendor::Amd);
        assert_eq!(Vendor::from_cpuid_string("HygonGenuine"), Vendor::Other);
        if cfg!(target_arch = "x86_64") {
            let here = cpuid_vendor_string();
            assert_eq!(here.len(), 12, "{here:?}");
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            if let Some(line) = cpuinfo.lines().find(|l| l.starts_with("vendor_id")) {
                assert!(line.ends_with(&here), "{line} vs {here}");
            }
        }
    }
}
