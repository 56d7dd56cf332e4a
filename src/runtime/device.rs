//! Which device the model runs on: `--device auto|cpu|cuda[:N]|metal`.
//!
//! `auto` takes a GPU when this build supports one and one is present, else the CPU.
//! Asking for a GPU the build was not compiled for is an error that says how to get it.

use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use candle_core::Device;

/// A device request as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Auto,
    Cpu,
    /// CUDA device by ordinal.
    Cuda(usize),
    Metal,
}

impl FromStr for DeviceSpec {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim().to_ascii_lowercase();
        match text.as_str() {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            "metal" => Ok(DeviceSpec::Metal),
            _ => match text.strip_prefix("cuda:") {
                Some(ordinal) => ordinal.parse().map(DeviceSpec::Cuda).with_context(|| {
                    format!("invalid device '{text}': the CUDA ordinal must be a number")
                }),
                None => {
                    bail!("unknown device '{text}' (expected auto, cpu, cuda, cuda:N or metal)")
                }
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
            DeviceSpec::Metal => f.write_str("metal"),
        }
    }
}

impl DeviceSpec {
    /// Open the device.
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Auto => {
                if cfg!(feature = "cuda") && candle_core::utils::cuda_is_available() {
                    return DeviceSpec::Cuda(0).open();
                }
                if cfg!(feature = "metal") && candle_core::utils::metal_is_available() {
                    return DeviceSpec::Metal.open();
                }
                Ok(Device::Cpu)
            }
            DeviceSpec::Cuda(ordinal) => {
                if !cfg!(feature = "cuda") {
                    bail!(
                        "device cuda:{ordinal} requested but this build has no CUDA support \
                         (rebuild with `--features cuda`)"
                    );
                }
                Device::new_cuda(ordinal)
                    .with_context(|| format!("cannot open CUDA device {ordinal}"))
            }
            DeviceSpec::Metal => {
                if !cfg!(feature = "metal") {
                    bail!(
                        "device metal requested but this build has no Metal support \
                         (rebuild with `--features metal`)"
                    );
                }
                Device::new_metal(0).context("cannot open the Metal device")
            }
        }
    }
}

/// Parse and open a device in one step (`"auto"`, `"cpu"`, `"cuda:1"`, ...).
pub fn select_device(spec: &str) -> Result<Device> {
    spec.parse::<DeviceSpec>()?.open()
}

/// The CPU's vector instruction sets that the matrix kernels can use, as one line
/// (`avx512f avx2 fma f16c`); candle's gemm picks the widest at run time.
pub fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut found = Vec::new();
        if std::arch::is_x86_feature_detected!("avx512f") {
            found.push("avx512f");
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            found.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("fma") {
            found.push("fma");
        }
        if std::arch::is_x86_feature_detected!("f16c") {
            found.push("f16c");
        }
        if found.is_empty() {
            "sse2".to_string()
        } else {
            found.join(" ")
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon".to_string()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("CPU".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        assert_eq!("metal".parse::<DeviceSpec>().unwrap(), DeviceSpec::Metal);
        for spec in [
            DeviceSpec::Auto,
            DeviceSpec::Cpu,
            DeviceSpec::Cuda(2),
            DeviceSpec::Metal,
        ] {
            assert_eq!(spec.to_string().parse::<DeviceSpec>().unwrap(), spec);
        }
    }

    #[test]
    fn bad_specs_are_explained() {
        let error = "tpu".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(error.contains("tpu") && error.contains("cuda:N"), "{error}");
        let error = "cuda:x".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(error.contains("ordinal"), "{error}");
    }

    #[test]
    fn cpu_opens() {
        assert!(DeviceSpec::Cpu.open().unwrap().is_cpu());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_a_clear_error() {
        let error = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(error.contains("--features cuda"), "{error}");
        // auto falls back to the CPU in a CPU-only build.
        assert!(DeviceSpec::Auto.open().unwrap().is_cpu());
    }

    #[cfg(not(feature = "metal"))]
    #[test]
    fn metal_without_feature_is_a_clear_error() {
        let error = DeviceSpec::Metal.open().unwrap_err().to_string();
        assert!(error.contains("--features metal"), "{error}");
    }
}
