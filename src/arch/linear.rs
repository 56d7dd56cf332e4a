//! One linear-layer type for dense and quantized weights.
//!
//! GGUF checkpoints arrive quantized; candle 0.11 has fast CPU kernels for some block
//! types and none for others (Q4_1), so each weight is either kept quantized or
//! dequantised at load according to a [`WeightPolicy`]. Safetensors weights are dense.
//! Callers see one `forward` either way.

use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

/// What to do with quantized GGUF weights at load time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightPolicy {
    /// Dequantise to f32 on CPU (f32 matrix products are much faster there than
    /// candle's quantized kernels for small models), keep quantized on GPUs.
    #[default]
    Auto,
    /// Dequantise every weight to f32.
    F32,
    /// Keep weights quantized where candle has a kernel for their block type.
    Quantized,
}

impl WeightPolicy {
    /// Whether a tensor of `dtype` should be dequantised on `device`.
    pub fn dequantise(self, dtype: GgmlDType, device: &Device) -> bool {
        match dtype {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => true,
            _ => match self {
                WeightPolicy::F32 => true,
                WeightPolicy::Quantized => false,
                WeightPolicy::Auto => device.is_cpu(),
            },
        }
    }
}

/// `y = x W^T + b` with `W` dense (f32) or quantized.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: LinearWeight,
    bias: Option<Tensor>,
    in_features: usize,
    out_features: usize,
    device: Device,
}

#[derive(Debug, Clone)]
enum LinearWeight {
    /// `(out, in)`, f32.
    Dense(Tensor),
    Quantized(QMatMul),
}

impl Linear {
    /// A dense layer from an `(out, in)` weight (converted to f32).
    pub fn dense(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let (out_features, in_features) = weight.dims2().context("linear weight must be 2-D")?;
        let weight = weight.to_dtype(DType::F32)?;
        let bias = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
        check_bias(&bias, out_features)?;
        Ok(Self {
            device: weight.device().clone(),
            weight: LinearWeight::Dense(weight),
            bias,
            in_features,
            out_features,
        })
    }

    /// A layer from a GGUF tensor, dequantised or not according to `policy`.
    pub fn from_qtensor(
        weight: QTensor,
        bias: Option<Tensor>,
        policy: WeightPolicy,
        device: &Device,
    ) -> Result<Self> {
        let (out_features, in_features) = weight
            .shape()
            .dims2()
            .context("linear weight must be 2-D")?;
        let bias = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
        check_bias(&bias, out_features)?;
        let weight = if policy.dequantise(weight.dtype(), device) {
            LinearWeight::Dense(weight.dequantize(device)?)
        } else {
            LinearWeight::Quantized(QMatMul::from_qtensor(weight)?)
        };
        Ok(Self {
            weight,
            bias,
            in_features,
            out_features,
            device: device.clone(),
        })
    }

    /// Stack layers that read the same input into one (rows concatenated), so that one
    /// matrix product replaces several. Only dense layers fuse; `None` otherwise.
    pub fn fuse(layers: &[&Linear]) -> Result<Option<Linear>> {
        let mut weights = Vec::with_capacity(layers.len());
        for layer in layers {
            match &layer.weight {
                LinearWeight::Dense(w) => weights.push(w.clone()),
                LinearWeight::Quantized(_) => return Ok(None),
            }
        }
        let in_features = layers.first().map(|l| l.in_features).unwrap_or(0);
        if layers.iter().any(|l| l.in_features != in_features) {
            bail!("cannot fuse linear layers with different input sizes");
        }
        let any_bias = layers.iter().any(|l| l.bias.is_some());
        let bias = if any_bias {
            let parts = layers
                .iter()
                .map(|l| match &l.bias {
                    Some(b) => Ok(b.clone()),
                    None => Ok(Tensor::zeros(l.out_features, DType::F32, &l.device)?),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&parts, 0)?)
        } else {
            None
        };
        Ok(Some(Linear::dense(Tensor::cat(&weights, 0)?, bias)?))
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    pub fn is_quantized(&self) -> bool {
        matches!(self.weight, LinearWeight::Quantized(_))
    }

    /// The dense `(out, in)` weight, dequantising a quantized one.
    pub fn dense_weight(&self) -> Result<Tensor> {
        match &self.weight {
            LinearWeight::Dense(w) => Ok(w.clone()),
            LinearWeight::Quantized(QMatMul::QTensor(q)) => Ok(q.dequantize(&self.device)?),
            LinearWeight::Quantized(QMatMul::Tensor(w)) => Ok(w.clone()),
            LinearWeight::Quantized(QMatMul::TensorF16(w)) => Ok(w.to_dtype(DType::F32)?),
        }
    }

    /// Apply to `x` of shape `(..., in)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let Some((&last, lead)) = dims.split_last() else {
            bail!("linear input must have at least one dimension");
        };
        if last != self.in_features {
            bail!(
                "linear layer expects {} input features, got {last}",
                self.in_features
            );
        }
        let rows: usize = lead.iter().product();
        let flat = x.reshape((rows, last))?;
        let y = match &self.weight {
            LinearWeight::Dense(w) => flat.matmul(&w.t()?)?,
            LinearWeight::Quantized(q) => q.forward(&flat)?,
        };
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out_dims = lead.to_vec();
        out_dims.push(self.out_features);
        Ok(y.reshape(out_dims)?)
    }
}

fn check_bias(bias: &Option<Tensor>, out_features: usize) -> Result<()> {
    if let Some(b) = bias {
        let n = b.dims1().context("linear bias must be 1-D")?;
        if n != out_features {
            bail!("linear bias has {n} entries for {out_features} outputs");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_layers_give_the_concatenated_outputs() -> Result<()> {
        let device = Device::Cpu;
        let a = Linear::dense(
            Tensor::new(&[[1f32, 2.], [3., 4.]], &device)?,
            Some(Tensor::new(&[0.5f32, -0.5], &device)?),
        )?;
        let b = Linear::dense(Tensor::new(&[[0f32, 1.]], &device)?, None)?;
        let x = Tensor::new(&[[[1f32, 1.], [2., 0.]]], &device)?;
        let fused = Linear::fuse(&[&a, &b])?.expect("dense layers fuse");
        let y = fused.forward(&x)?.to_vec3::<f32>()?;
        assert_eq!(y, vec![vec![vec![3.5, 6.5, 1.0], vec![2.5, 5.5, 0.0]]]);
        Ok(())
    }

    #[test]
    fn wrong_input_width_is_an_error() -> Result<()> {
        let device = Device::Cpu;
        let a = Linear::dense(Tensor::zeros((2, 3), DType::F32, &device)?, None)?;
        let x = Tensor::zeros((1, 2), DType::F32, &device)?;
        assert!(a.forward(&x).is_err());
        Ok(())
    }
}
