//! What the processor can do, detected once at run time.
//!
//! Kernels choose their instruction paths from this record rather than from compile-time
//! target features, so one build serves machines with and without AVX-512 and its
//! BF16/VNNI extensions.

use std::sync::OnceLock;

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
}

impl CpuFeatures {
    /// The features of the machine this runs on (detected on first use, then cached).
    pub fn get() -> CpuFeatures {
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
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> CpuFeatures {
        CpuFeatures::default()
    }

    /// The names of the detected features, in a fixed order (for benchmark headers).
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
        ];
        all.iter()
            .filter(|(_, present)| *present)
            .map(|(name, _)| *name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_imply_their_base() {
        let features = CpuFeatures::get();
        // AVX-512 extensions are never reported without the foundation.
        if features.avx512bf16 || features.avx512vnni || features.avx512bw {
            assert!(features.avx512f, "{features:?}");
        }
        assert_eq!(features, CpuFeatures::get(), "detection is cached");
        assert_eq!(features.names().len(), {
            let f = features;
            [
                f.avx2,
                f.fma,
                f.f16c,
                f.avx512f,
                f.avx512bw,
                f.avx512vl,
                f.avx512bf16,
                f.avx512vnni,
                f.avxvnni,
            ]
            .iter()
            .filter(|&&x| x)
            .count()
        });
    }
}
