//! Rotary position embeddings of the llama family: the base frequencies and the scaling
//! rules checkpoints declare (`rope_scaling` / `rope_parameters` in `config.json`, the
//! `rope.*` keys and `rope_freqs` / `rope_factors_*` tensors of GGUF), turned into the
//! cosine and sine tables every path reads.
//!
//! The tables cover the rotated dimensions only: the first `rotary_dim` of each head
//! (all of it but for partial rotary embeddings, `partial_rotary_factor < 1` as in
//! Phi-4-mini), whose frequencies are `theta^(-2i/rotary_dim)`; every scaling rule is
//! computed over those dimensions, as transformers does.
//!
//! Every rule here is static: the angle of a position does not depend on how long the
//! sequence is. Two rules in transformers are not: `dynamic` (NTK) changes the
//! frequencies once a sequence passes the trained context, and `longrope` switches from
//! its short to its long factors there. Within the trained context both equal a static
//! rule (the base frequencies; the short factors), so for them the model's context
//! window is the trained one and they are exact inside it.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

/// The rope types [`RopeScaling::from_hf`] reads, for error messages.
pub const SUPPORTED_ROPE_TYPES: &str = "default, linear, dynamic, llama3, yarn, longrope (su)";

/// How a checkpoint scales its rotary frequencies.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain `theta^(-2i/d)`.
    None,
    /// Positions divided by `factor` (all frequencies divided by it).
    Linear { factor: f64 },
    /// Dynamic NTK: the base frequencies inside the trained context (see the module
    /// header); kept for the record.
    Dynamic { factor: f64 },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth blend
    /// between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_context: usize,
    },
    /// YaRN: interpolation blended with extrapolation by frequency, tables scaled by an
    /// attention factor.
    Yarn {
        factor: f64,
        original_context: usize,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
        truncate: bool,
    },
    /// Each frequency divided by its own factor (llama.cpp's `rope_freqs` tensor: llama 3
    /// scaling precomputed), tables scaled by an attention factor.
    Factors {
        factors: Vec<f64>,
        attention_factor: f64,
    },
}

impl RopeScaling {
    /// Read `rope_scaling` (or transformers 5's `rope_parameters`) of a `config.json`;
    /// `max_positions` is the config's `max_position_embeddings` and
    /// `original_positions` its top-level `original_max_position_embeddings` (Phi-3),
    /// `rotary_dim` the rotated dimensions of a head. Returns the scaling and the context
    /// window it is exact for.
    pub fn from_hf(
        value: Option<&Value>,
        max_positions: usize,
        original_positions: Option<usize>,
        rotary_dim: usize,
    ) -> Result<(Self, usize)> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok((Self::None, max_positions));
        };
        let kind = value
            .get("rope_type")
            .or_else(|| value.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let number = |key: &str| -> Result<Option<f64>> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| anyhow!("rope_scaling.{key} is not a number")),
            }
        };
        let required = |key: &str| -> Result<f64> {
            number(key)?.ok_or_else(|| anyhow!("rope_scaling of type '{kind}' needs '{key}'"))
        };
        let original = |fallback: usize| -> Result<usize> {
            Ok(number("original_max_position_embeddings")?
                .map(|n| n as usize)
                .or(original_positions)
                .unwrap_or(fallback))
        };
        Ok(match kind {
            "default" => (Self::None, max_positions),
            "linear" => (
                Self::Linear {
                    factor: required("factor")?,
                },
                max_positions,
            ),
            "dynamic" => (
                Self::Dynamic {
                    factor: required("factor")?,
                },
                max_positions,
            ),
            "llama3" => (
                Self::Llama3 {
                    factor: required("factor")?,
                    low_freq_factor: required("low_freq_factor")?,
                    high_freq_factor: required("high_freq_factor")?,
                    original_context: original(max_positions)?,
                },
                max_positions,
            ),
            "yarn" => {
                let factor = required("factor")?;
                let attention_factor = match number("attention_factor")? {
                    Some(a) => a,
                    None => match (number("mscale")?, number("mscale_all_dim")?) {
                        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                            yarn_mscale(factor, m) / yarn_mscale(factor, all)
                        }
                        _ => yarn_mscale(factor, 1.0),
                    },
                };
                let truncate = value
                    .get("truncate")
                    .and_then(Value::as_bool)
                    .unwrap_or(true);
                (
                    Self::Yarn {
                        factor,
                        original_context: original(max_positions)?,
                        beta_fast: number("beta_fast")?.unwrap_or(32.0),
                        beta_slow: number("beta_slow")?.unwrap_or(1.0),
                        attention_factor,
                        truncate,
                    },
                    max_positions,
                )
            }
            "longrope" | "su" => {
                let short = value
                    .get("short_factor")
                    .and_then(Value::as_array)
                    .ok_or_else(|| anyhow!("rope_scaling of type '{kind}' needs 'short_factor'"))?
                    .iter()
                    .map(|v| {
                        v.as_f64()
                            .ok_or_else(|| anyhow!("rope_scaling.short_factor holds a non-number"))
                    })
                    .collect::<Result<Vec<f64>>>()?;
                if short.len() != rotary_dim / 2 {
                    bail!(
                        "rope_scaling.short_factor has {} entries, expected {} (rotated dimensions / 2)",
                        short.len(),
                        rotary_dim / 2
                    );
                }
                let original = original_positions
                    .or(number("original_max_position_embeddings")?.map(|n| n as usize))
                    .unwrap_or(max_positions);
                let scale = max_positions as f64 / original as f64;
                let attention_factor = match number("attention_factor")? {
                    Some(a) => a,
                    None if scale <= 1.0 => 1.0,
                    None => (1.0 + scale.ln() / (original as f64).ln()).sqrt(),
                };
                (
                    Self::Factors {
                        factors: short,
                        attention_factor,
                    },
                    original.min(max_positions),
                )
            }
            other => bail!(
                "rope_scaling type '{other}' is not supported (supported: {SUPPORTED_ROPE_TYPES})"
            ),
        })
    }

    /// The inverse frequencies of `rotary_dim` rotated dimensions with base `theta`.
    pub fn inverse_frequencies(&self, theta: f64, rotary_dim: usize) -> Result<Vec<f64>> {
        let half = rotary_dim / 2;
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f64 / rotary_dim as f64))
            .collect();
        Ok(match self {
            Self::None | Self::Dynamic { .. } => base,
            Self::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                let old = *original_context as f64;
                let low_wavelength = old / low_freq_factor;
                let high_wavelength = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelength = 2.0 * std::f64::consts::PI / f;
                        if wavelength < high_wavelength {
                            f
                        } else if wavelength > low_wavelength {
                            f / factor
                        } else {
                            let smooth = (old / wavelength - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            Self::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let d = rotary_dim as f64;
                let correction = |rotations: f64| {
                    d * (*original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * theta.ln())
                };
                let (mut low, mut high) = (correction(*beta_fast), correction(*beta_slow));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let low = low.max(0.0);
                let high = high.min(d - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        f / factor * (1.0 - extrapolation) + f * extrapolation
                    })
                    .collect()
            }
            Self::Factors { factors, .. } => {
                if factors.len() != half {
                    bail!(
                        "rope frequency factors have {} entries, expected {half} (rotated dimensions / 2)",
                        factors.len()
                    );
                }
                base.iter().zip(factors).map(|(f, s)| f / s).collect()
            }
        })
    }

    /// What the cosine and sine tables are multiplied by.
    pub fn attention_factor(&self) -> f64 {
        match self {
            Self::Yarn {
                attention_factor, ..
            }
            | Self::Factors {
                attention_factor, ..
            } => *attention_factor,
            _ => 1.0,
        }
    }

    /// Cosine and sine tables `(positions, rotary_dim / 2)`.
    pub fn tables(
        &self,
        theta: f64,
        rotary_dim: usize,
        positions: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        // transformers computes the frequencies and angles in f32; so do we, so that long
        // positions round the same way.
        let inverse: Vec<f32> = self
            .inverse_frequencies(theta, rotary_dim)?
            .into_iter()
            .map(|f| f as f32)
            .collect();
        let scale = self.attention_factor() as f32;
        let half = rotary_dim / 2;
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for pos in 0..positions {
            for &f in &inverse {
                let angle = pos as f32 * f;
                cos.push(angle.cos() * scale);
                sin.push(angle.sin() * scale);
            }
        }
        Ok((cos, sin))
    }
}

/// YaRN's attention scaling `0.1 * m * ln(s) + 1` (1 for `s <= 1`).
fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(RopeScaling, usize)> {
        let value: Value = serde_json::from_str(text)?;
        RopeScaling::from_hf(Some(&value), 2048, None, 64)
    }

    #[test]
    fn llama3_scaling_keeps_high_and_divides_low_frequencies() -> Result<()> {
        let (scaling, window) = parse(
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}"#,
        )?;
        assert_eq!(window, 2048);
        let base = RopeScaling::None.inverse_frequencies(500000.0, 64)?;
        let scaled = scaling.inverse_frequencies(500000.0, 64)?;
        assert_eq!(scaled[0], base[0]);
        assert!((scaled[31] - base[31] / 8.0).abs() < 1e-15);
        Ok(())
    }

    /// Frequencies 0, 5, 10, ..., 25, 31 of a 64-wide head, as transformers 5.24's
    /// `ROPE_INIT_FUNCTIONS` computes them (in f32, hence the relative tolerance).
    #[test]
    fn yarn_and_llama3_frequencies_match_transformers() -> Result<()> {
        let picks = [0, 5, 10, 15, 20, 25, 31];
        let check = |scaling: &RopeScaling, theta: f64, want: &[f64]| -> Result<()> {
            let got = scaling.inverse_frequencies(theta, 64)?;
            for (&i, &w) in picks.iter().zip(want) {
                assert!(
                    (got[i] - w).abs() <= 3e-6 * w,
                    "frequency {i}: {} vs {w}",
                    got[i]
                );
            }
            Ok(())
        };
        let (yarn, _) = RopeScaling::from_hf(
            Some(&serde_json::json!({"rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 32768})),
            131072,
            None,
            64,
        )?;
        assert!((yarn.attention_factor() - 1.138629436111989).abs() < 1e-12);
        check(
            &yarn,
            1e6,
            &[
                1.0,
                0.11547820270061493,
                0.01333521492779255,
                0.001026617712341249,
                4.4456985051510856e-05,
                5.133812464919174e-06,
                3.8498163235090033e-07,
            ],
        )?;
        let (llama3, _) = RopeScaling::from_hf(
            Some(&serde_json::json!({"rope_type": "llama3", "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192})),
            131072,
            None,
            64,
        )?;
        check(
            &llama3,
            500000.0,
            &[
                1.0,
                0.12868738174438477,
                0.016560440883040428,
                0.0013718936825171113,
                3.428102354519069e-05,
                4.411534519022098e-06,
                3.76732259610435e-07,
            ],
        )
    }

    #[test]
    fn unknown_rope_type_names_what_is_supported() {
        let err = parse(r#"{"rope_type": "mrope", "factor": 2.0}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("'mrope'") && err.contains("llama3"), "{err}");
        let err = parse(r#"{"rope_type": "linear"}"#).unwrap_err().to_string();
        assert!(err.contains("factor"), "{err}");
    }

    #[test]
    fn longrope_keeps_the_original_window_and_scales_tables() -> Result<()> {
        let factors: Vec<String> = (0..32)
            .map(|i| format!("{}", 1.0 + i as f64 / 10.0))
            .collect();
        let text = format!(
            r#"{{"type": "longrope", "short_factor": [{0}], "long_factor": [{0}]}}"#,
            factors.join(",")
        );
        let value: Value = serde_json::from_str(&text)?;
        let (scaling, window) = RopeScaling::from_hf(Some(&value), 8192, Some(1024), 64)?;
        assert_eq!(window, 1024);
        let expected = (1.0 + 8f64.ln() / 1024f64.ln()).sqrt();
        assert!((scaling.attention_factor() - expected).abs() < 1e-12);
        Ok(())
    }
}
