//! One linear-layer type for dense and quantized weights.
//!
//! GGUF checkpoints arrive quantized; candle 0.11 has fast CPU kernels for some block
//! types and none for others (Q4_1), so each weight is either kept quantized or
//! dequantised at load according to a [`WeightPolicy`]. Safetensors weights are dense.
//! A dense layer can then be repacked for our own reduced-precision CPU kernels
//! ([`Precision`]: bf16 or int8 weights, f32 in and out). Callers see one `forward`.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Storage, Tensor};
use nlg_judge_kernels::gemm::{Bf16Matrix, Int8Matrix, Store};

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

/// The arithmetic of the matrix products in a model's layers (the output head always
/// stays f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 weights and products (candle's kernels).
    #[default]
    F32,
    /// bf16 weights, bf16 products accumulated in f32 (AVX512-BF16 where present);
    /// activations rounded to bf16, or split into two bf16 parts where the model asks
    /// for it (the llama blocks' query/key/value projection).
    Bf16,
    /// int8 weights (per output row) and activations (per token), i32 accumulation
    /// (AVX512-VNNI or AVX-VNNI where present).
    Int8,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }

    /// The result-cache identity of a model run at this precision: f32 keeps the
    /// weights' fingerprint (results cached before precisions existed stay valid);
    /// other precisions append their name, so their results are never served for f32,
    /// and bf16 also its arithmetic's revision (the query/key/value activations split in
    /// two parts since revision 2), so results of the first revision are not served.
    pub fn fingerprint(self, weights_fingerprint: &str) -> String {
        match self {
            Precision::F32 => weights_fingerprint.to_string(),
            Precision::Bf16 => format!("{weights_fingerprint}+bf16-r2"),
            Precision::Int8 => format!("{weights_fingerprint}+int8"),
        }
    }
}

/// `y = x W^T + b` with `W` dense (f32), quantized (GGUF blocks), or packed for our
/// bf16/int8 kernels.
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
    Bf16(Arc<Bf16Matrix>),
    Int8(Arc<Int8Matrix>),
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
                _ => return Ok(None),
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

    /// This layer with its products computed at `precision`: f32 leaves it as it is;
    /// bf16 and int8 repack the weight (dequantised first if needed) for our CPU kernels.
    pub fn with_precision(self, precision: Precision) -> Result<Self> {
        if precision == Precision::F32 {
            return Ok(self);
        }
        if !self.device.is_cpu() {
            bail!(
                "--precision {} runs on the CPU only (our kernels have no GPU twin)",
                precision.as_str()
            );
        }
        let dense = self.dense_weight()?.to_dtype(DType::F32)?;
        let values = dense.flatten_all()?.to_vec1::<f32>()?;
        let (rows, cols) = (self.out_features, self.in_features);
        let weight = match precision {
            Precision::Bf16 => {
                LinearWeight::Bf16(Arc::new(Bf16Matrix::from_f32(&values, rows, cols)))
            }
            Precision::Int8 => {
                LinearWeight::Int8(Arc::new(Int8Matrix::from_f32(&values, rows, cols)))
            }
            Precision::F32 => unreachable!("handled above"),
        };
        Ok(Self { weight, ..self })
    }

    /// The same layer with its dense weight and bias stored as `dtype` (bf16 or f16
    /// activations on a GPU: the product takes and gives `dtype`, cuBLAS accumulating in
    /// f32). Quantized and packed weights are refused: their products take f32.
    pub fn with_dtype(self, dtype: DType) -> Result<Self> {
        let LinearWeight::Dense(weight) = &self.weight else {
            bail!(
                "{dtype:?} activations need dense weights; this layer's are quantized or packed \
                 (a GGUF model: --weights f32)"
            );
        };
        let weight = LinearWeight::Dense(weight.to_dtype(dtype)?);
        let bias = self.bias.as_ref().map(|b| b.to_dtype(dtype)).transpose()?;
        Ok(Self {
            weight,
            bias,
            ..self
        })
    }

    /// For a bf16 layer: the same layer multiplying activations split into two bf16
    /// parts (see `Bf16Matrix::split_activations`); other layers are returned unchanged.
    pub fn with_split_activations(self) -> Self {
        match self.weight {
            LinearWeight::Bf16(m) => {
                let matrix = Arc::try_unwrap(m).unwrap_or_else(|shared| (*shared).clone());
                Self {
                    weight: LinearWeight::Bf16(Arc::new(matrix.split_activations(true))),
                    ..self
                }
            }
            weight => Self { weight, ..self },
        }
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How the weight is held: `f32`, `bf16`, `int8`, or the GGUF block type of a
    /// quantized weight in lower case (`q4k`, `q6k`, ...).
    pub fn storage(&self) -> String {
        match &self.weight {
            LinearWeight::Dense(_) => "f32".into(),
            LinearWeight::Quantized(QMatMul::QTensor(q)) => {
                format!("{:?}", q.dtype()).to_lowercase()
            }
            LinearWeight::Quantized(QMatMul::Tensor(_)) => "f32".into(),
            LinearWeight::Quantized(QMatMul::TensorF16(_)) => "f16".into(),
            LinearWeight::Bf16(_) => "bf16".into(),
            LinearWeight::Int8(_) => "int8".into(),
        }
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
            LinearWeight::Bf16(m) => self.unpacked(m.to_f32()),
            LinearWeight::Int8(m) => self.unpacked(m.to_f32()),
        }
    }

    fn unpacked(&self, values: Vec<f32>) -> Result<Tensor> {
        Ok(Tensor::from_vec(
            values,
            (self.out_features, self.in_features),
            &self.device,
        )?)
    }

    /// Tensor operations of one [`Self::forward`] on a matrix: the product, and the
    /// bias where there is one.
    pub fn launches(&self) -> usize {
        1 + usize::from(self.bias.is_some())
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
            LinearWeight::Bf16(m) => self.packed_product(&flat, |x, out| m.matmul(x, rows, out))?,
            LinearWeight::Int8(m) => self.packed_product(&flat, |x, out| m.matmul(x, rows, out))?,
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

impl Linear {
    /// Whether [`Self::forward_into`] can run this layer: an f32 dense or bf16/int8 packed
    /// weight on the CPU (candle's quantized blocks run through tensors only).
    pub fn runs_on_slices(&self) -> bool {
        self.device.is_cpu()
            && match &self.weight {
                LinearWeight::Dense(w) => w.dtype() == DType::F32,
                LinearWeight::Bf16(_) | LinearWeight::Int8(_) => true,
                LinearWeight::Quantized(_) => false,
            }
    }

    /// `out = x W^T + b` (with [`Store::Add`]: `out += x W^T + b`, a residual connection
    /// folded into the product) for `rows` rows of `x`, row-major slices `(rows, in)` and
    /// `(rows, out)`, without allocating: the forward pass's buffers are the caller's.
    pub fn forward_into(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        store: Store,
    ) -> Result<()> {
        let (k, n) = (self.in_features, self.out_features);
        if x.len() != rows * k || out.len() != rows * n {
            bail!(
                "linear layer {k} -> {n} got {} inputs and {} outputs for {rows} rows",
                x.len(),
                out.len()
            );
        }
        match &self.weight {
            LinearWeight::Dense(w) => with_cpu_values(w, "a linear weight", |w| {
                dense_product(x, w, rows, n, k, &mut *out, store)
            })?,
            LinearWeight::Bf16(m) => match store {
                Store::Overwrite => m.matmul(x, rows, out),
                Store::Add => m.matmul_add(x, rows, out),
            },
            LinearWeight::Int8(m) => match store {
                Store::Overwrite => m.matmul(x, rows, out),
                Store::Add => m.matmul_add(x, rows, out),
            },
            LinearWeight::Quantized(_) => {
                bail!("a quantized linear layer runs through tensors (Linear::forward) only")
            }
        }
        if let Some(bias) = &self.bias {
            with_cpu_values(bias, "a linear bias", |bias| {
                nlg_judge_kernels::pointwise::add_bias(out, bias)
            })?;
        }
        Ok(())
    }

    /// `(rows, in)` f32 on the CPU through one of our kernels, `product(x, out)`.
    fn packed_product(
        &self,
        flat: &Tensor,
        product: impl FnOnce(&[f32], &mut [f32]),
    ) -> Result<Tensor> {
        let (rows, _) = flat.dims2()?;
        let flat = flat.to_dtype(DType::F32)?.contiguous()?;
        let mut out = vec![0f32; rows * self.out_features];
        {
            let (storage, layout) = flat.storage_and_layout();
            let Storage::Cpu(cpu) = &*storage else {
                bail!("bf16/int8 linear layers run on the CPU only");
            };
            let Some((start, end)) = layout.contiguous_offsets() else {
                bail!("linear input is not contiguous");
            };
            product(&cpu.as_slice::<f32>()?[start..end], &mut out);
        }
        Ok(Tensor::from_vec(
            out,
            (rows, self.out_features),
            &self.device,
        )?)
    }
}

/// Hand the f32 values of a contiguous CPU tensor (`what`, for errors) to `body`.
pub(crate) fn with_cpu_values<T>(
    tensor: &Tensor,
    what: &str,
    body: impl FnOnce(&[f32]) -> T,
) -> Result<T> {
    let (guard, layout) = tensor.storage_and_layout();
    let Storage::Cpu(cpu) = &*guard else {
        bail!("{what} is not on the CPU");
    };
    let (start, end) = layout
        .contiguous_offsets()
        .with_context(|| format!("{what} is not contiguous"))?;
    Ok(body(&cpu.as_slice::<f32>()?[start..end]))
}

/// `out (=|+=) x w^T` for `x` `(m, k)` and `w` `(n, k)`, row-major, with the same matrix
/// product candle's CPU backend runs (the `gemm` crate, on rayon's pool when it has more
/// than one thread) but writing into the caller's buffer.
fn dense_product(
    x: &[f32],
    w: &[f32],
    m: usize,
    n: usize,
    k: usize,
    out: &mut [f32],
    store: Store,
) {
    debug_assert!(x.len() == m * k && w.len() == n * k && out.len() == m * n);
    if m == 0 || n == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let add = store == Store::Add;
    // SAFETY: the slices hold exactly (m, k), (n, k) and (m, n) values, and the strides
    // below address them as row-major x, w^T (column j of w^T is row j of w) and out.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            add,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            if add { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        )
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

    #[test]
    fn reduced_precision_layers_stay_close_to_the_f32_layer() -> Result<()> {
        let device = Device::Cpu;
        // Ragged sizes (not multiples of the kernels' tiles), a bias, a 3-D input.
        let (out, inp) = (37, 70);
        let weight = Tensor::randn(0f32, 1.0, (out, inp), &device)?;
        let bias = Tensor::randn(0f32, 1.0, out, &device)?;
        let x = Tensor::randn(0f32, 1.0, (2, 5, inp), &device)?;
        let dense = Linear::dense(weight, Some(bias))?;
        let expected = dense.forward(&x)?;
        let unchanged = dense.clone().with_precision(Precision::F32)?.forward(&x)?;
        assert_eq!(unchanged.to_vec3::<f32>()?, expected.to_vec3::<f32>()?);
        // Relative to the output's scale (sqrt(inp) for unit normals): bf16 rounds each
        // operand to 8 significant bits (~0.4% per product), int8 to 1/127 of the row's
        // largest value (~2-3% of a typical product); errors of independent products
        // partly cancel, so 2% and 6% of sqrt(inp) are generous yet catch a wrong layout.
        for (precision, tolerance) in [(Precision::Bf16, 0.02), (Precision::Int8, 0.06)] {
            let layer = dense.clone().with_precision(precision)?;
            assert!(Linear::fuse(&[&layer, &layer])?.is_none());
            let y = layer.forward(&x)?;
            assert_eq!(y.dims(), &[2, 5, out]);
            let worst = (y - &expected)?
                .abs()?
                .flatten_all()?
                .max(0)?
                .to_scalar::<f32>()?;
            let limit = tolerance * (inp as f32).sqrt();
            assert!(worst <= limit, "{precision:?}: {worst} > {limit}");
            assert_eq!(layer.dense_weight()?.dims(), &[out, inp]);
        }
        Ok(())
    }

    /// Splitting a bf16 layer's activations leaves only the weights' rounding: its
    /// output is the f32 product with bf16-rounded weights to about 2^-16, while one
    /// bf16 part is off by ~2^-9 of each product; the forward paths (tensor and buffer)
    /// agree exactly.
    #[test]
    fn split_activations_leave_only_the_weights_rounding() -> Result<()> {
        let device = Device::Cpu;
        let (out, inp, rows) = (45, 96, 7);
        let weight = Tensor::randn(0f32, 1.0, (out, inp), &device)?;
        let x = Tensor::randn(0f32, 1.0, (rows, inp), &device)?;
        let plain = Linear::dense(weight, None)?.with_precision(Precision::Bf16)?;
        let split = plain.clone().with_split_activations();
        let rounded_weights = Linear::dense(plain.dense_weight()?, None)?;
        let expected = rounded_weights.forward(&x)?;
        let error = |layer: &Linear| -> Result<f32> {
            Ok((layer.forward(&x)? - &expected)?
                .abs()?
                .flatten_all()?
                .max(0)?
                .to_scalar::<f32>()?)
        };
        let (split_error, plain_error) = (error(&split)?, error(&plain)?);
        assert!(
            split_error * 30.0 < plain_error,
            "split {split_error} vs one part {plain_error}"
        );
        let mut buffer = vec![0f32; rows * out];
        let values = x.flatten_all()?.to_vec1::<f32>()?;
        split.forward_into(&values, rows, &mut buffer, Store::Overwrite)?;
        assert_eq!(buffer, split.forward(&x)?.flatten_all()?.to_vec1::<f32>()?);
        Ok(())
    }

    #[test]
    fn each_precision_has_its_own_cache_identity() {
        let weights = "abc123";
        assert_eq!(Precision::F32.fingerprint(weights), weights);
        let all =
            [Precision::F32, Precision::Bf16, Precision::Int8].map(|p| p.fingerprint(weights));
        assert_ne!(all[0], all[1]);
        assert_ne!(all[0], all[2]);
        assert_ne!(all[1], all[2]);
        // The first bf16 revision's results (activations in one part) are not served.
        assert_ne!(all[1], format!("{weights}+bf16"));
    }
}
