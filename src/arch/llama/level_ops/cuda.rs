//! Launches of the level kernels (`level_ops.cu`) on a CUDA device: the source compiled
//! once per process by NVRTC, loaded once per device, launched on candle's stream.

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, Storage};

use super::{GatedActivation, RaggedAttention, RopeStore};

const MODULE: &str = "nlg_judge_level_ops";

/// The kernels' PTX, compiled on first use (NVRTC errors carry the compiler's log).
fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        nvrtc::compile_ptx(super::CUDA_SOURCE)
            .map(|ptx| ptx.to_src())
            .map_err(|e| format!("compiling the level kernels with NVRTC: {e:?}"))
    })
    .as_deref()
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

fn suffix(storage: &CudaStorage) -> Result<&'static str> {
    Ok(match storage.dtype() {
        candle_core::DType::F32 => "f32",
        candle_core::DType::BF16 => "bf16",
        candle_core::DType::F16 => "f16",
        other => candle_core::bail!("the level kernels take f32, bf16 or f16, not {other:?}"),
    })
}

fn whole(layout: &Layout, what: &str) -> Result<(usize, usize)> {
    layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{what} must be contiguous")))
}

/// A captured tensor's storage (a rope table), which must be on the same device.
fn captured(tensor: &candle_core::Tensor) -> Result<(candle_core::StorageRef<'_>, Layout)> {
    let (storage, layout) = tensor.storage_and_layout();
    if !matches!(&*storage, Storage::Cuda(_)) {
        candle_core::bail!("a rope table is not on the GPU like the rest of the pass");
    }
    Ok((storage, layout.clone()))
}

fn cuda_of(storage: &Storage) -> &CudaStorage {
    match storage {
        Storage::Cuda(s) => s,
        _ => unreachable!("checked by `captured`"),
    }
}

fn dim(x: usize) -> Result<i32> {
    i32::try_from(x)
        .map_err(|_| candle_core::Error::Msg(format!("{x} does not fit a kernel argument")))
}

pub(super) fn rope_store(
    op: &RopeStore,
    arena: &mut CudaStorage,
    arena_layout: &Layout,
    projected: &CudaStorage,
    projected_layout: &Layout,
    meta: &CudaStorage,
    meta_layout: &Layout,
) -> Result<()> {
    let s = &op.shape;
    let (cos, cos_layout) = captured(op.cos)?;
    let (sin, sin_layout) = captured(op.sin)?;
    let (cos, sin) = (cuda_of(&cos), cuda_of(&sin));
    let device = arena.device().clone();
    let name = format!("level_rope_store_{}", suffix(arena)?);
    let (p0, p1) = whole(projected_layout, "the projections")?;
    let (m0, m1) = whole(meta_layout, "the pass index")?;
    let (c0, c1) = whole(&cos_layout, "a rope table")?;
    let (s0, s1) = whole(&sin_layout, "a rope table")?;
    if whole(arena_layout, "the arena")?.0 != 0 {
        candle_core::bail!("the arena must be a whole tensor");
    }
    let meta = meta.as_cuda_slice::<u32>()?.slice(m0..m1);
    let config = LaunchConfig {
        grid_dim: (op.meta.tokens as u32, 1, 1),
        block_dim: (s.kv_width().min(1024) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    fn launch<T: DeviceRepr>(
        (device, name): (&CudaDevice, &str),
        config: LaunchConfig,
        arena: &mut candle_core::cuda_backend::cudarc::driver::CudaSlice<T>,
        (projected, cos, sin): (
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
        ),
        meta: &candle_core::cuda_backend::cudarc::driver::CudaView<u32>,
        ints: [i32; 5],
    ) -> Result<()> {
        // The function's type is not exported by candle: it stays inferred here.
        let func = device.get_or_load_custom_func(name, MODULE, ptx()?)?;
        let mut builder = func.builder();
        builder.arg(&projected);
        builder.arg(meta);
        builder.arg(&cos);
        builder.arg(&sin);
        builder.arg(arena);
        for int in &ints {
            builder.arg(int);
        }
        // SAFETY: the index data was checked against the arena's size, every tensor
        // against the pass's shape, before the launch.
        unsafe { builder.launch(config) }.w()?;
        Ok(())
    }
    let ints = [
        dim(s.q_width())?,
        dim(s.kv_width())?,
        dim(s.head_dim)?,
        dim(s.rotary_dim)?,
        i32::from(s.interleaved),
    ];
    match (&mut arena.slice, &projected.slice, &cos.slice, &sin.slice) {
        (
            CudaStorageSlice::F32(a),
            CudaStorageSlice::F32(p),
            CudaStorageSlice::F32(c),
            CudaStorageSlice::F32(sn),
        ) => launch(
            (&device, &name),
            config,
            a,
            (p.slice(p0..p1), c.slice(c0..c1), sn.slice(s0..s1)),
            &meta,
            ints,
        ),
        (
            CudaStorageSlice::BF16(a),
            CudaStorageSlice::BF16(p),
            CudaStorageSlice::BF16(c),
            CudaStorageSlice::BF16(sn),
        ) => launch(
            (&device, &name),
            config,
            a,
            (p.slice(p0..p1), c.slice(c0..c1), sn.slice(s0..s1)),
            &meta,
            ints,
        ),
        (
            CudaStorageSlice::F16(a),
            CudaStorageSlice::F16(p),
            CudaStorageSlice::F16(c),
            CudaStorageSlice::F16(sn),
        ) => launch(
            (&device, &name),
            config,
            a,
            (p.slice(p0..p1), c.slice(c0..c1), sn.slice(s0..s1)),
            &meta,
            ints,
        ),
        _ => {
            candle_core::bail!("the arena, the projections and the rope tables must share a dtype")
        }
    }
}

pub(super) fn ragged_attention(
    op: &RaggedAttention,
    projected: &CudaStorage,
    projected_layout: &Layout,
    arena: &CudaStorage,
    arena_layout: &Layout,
    meta: &CudaStorage,
    meta_layout: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let s = &op.shape;
    let tokens = op.meta.tokens;
    let (cos, cos_layout) = captured(op.cos)?;
    let (sin, sin_layout) = captured(op.sin)?;
    let (cos, sin) = (cuda_of(&cos), cuda_of(&sin));
    let device = projected.device().clone();
    let name = format!("level_attention_{}", suffix(projected)?);
    let (p0, p1) = whole(projected_layout, "the projections")?;
    let (a0, a1) = whole(arena_layout, "the arena")?;
    let (m0, m1) = whole(meta_layout, "the pass index")?;
    let (c0, c1) = whole(&cos_layout, "a rope table")?;
    let (s0, s1) = whole(&sin_layout, "a rope table")?;
    let meta = meta.as_cuda_slice::<u32>()?.slice(m0..m1);
    let config = LaunchConfig {
        grid_dim: (tokens as u32, s.heads as u32, 1),
        block_dim: (s.head_dim as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let ints = [
        dim(tokens)?,
        dim(s.heads)?,
        dim(s.kv_heads)?,
        dim(s.head_dim)?,
        dim(s.rotary_dim)?,
        i32::from(s.interleaved),
    ];
    let floats = [s.scale, s.softcap.unwrap_or(0.0)];
    let window = dim(s.window.unwrap_or(0))?;
    let out_len = tokens * s.q_width();
    fn launch<T: DeviceRepr>(
        (device, name): (&CudaDevice, &str),
        config: LaunchConfig,
        (projected, arena, cos, sin): (
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
            candle_core::cuda_backend::cudarc::driver::CudaView<T>,
        ),
        meta: &candle_core::cuda_backend::cudarc::driver::CudaView<u32>,
        (ints, floats, window): ([i32; 6], [f32; 2], i32),
        out_len: usize,
    ) -> Result<candle_core::cuda_backend::cudarc::driver::CudaSlice<T>> {
        // SAFETY: every element is written by the kernel before it is read.
        let out = unsafe { device.alloc::<T>(out_len)? };
        // The function's type is not exported by candle: it stays inferred here.
        let func = device.get_or_load_custom_func(name, MODULE, ptx()?)?;
        let mut builder = func.builder();
        builder.arg(&projected);
        builder.arg(&arena);
        builder.arg(meta);
        builder.arg(&cos);
        builder.arg(&sin);
        builder.arg(&out);
        for int in &ints {
            builder.arg(int);
        }
        for float in &floats {
            builder.arg(float);
        }
        builder.arg(&window);
        // SAFETY: the index data was checked against the arena's size before the launch.
        unsafe { builder.launch(config) }.w()?;
        Ok(out)
    }
    let args = (ints, floats, window);
    let slice = match (&projected.slice, &arena.slice, &cos.slice, &sin.slice) {
        (
            CudaStorageSlice::F32(p),
            CudaStorageSlice::F32(a),
            CudaStorageSlice::F32(c),
            CudaStorageSlice::F32(sn),
        ) => CudaStorageSlice::F32(launch(
            (&device, &name),
            config,
            (
                p.slice(p0..p1),
                a.slice(a0..a1),
                c.slice(c0..c1),
                sn.slice(s0..s1),
            ),
            &meta,
            args,
            out_len,
        )?),
        (
            CudaStorageSlice::BF16(p),
            CudaStorageSlice::BF16(a),
            CudaStorageSlice::BF16(c),
            CudaStorageSlice::BF16(sn),
        ) => CudaStorageSlice::BF16(launch(
            (&device, &name),
            config,
            (
                p.slice(p0..p1),
                a.slice(a0..a1),
                c.slice(c0..c1),
                sn.slice(s0..s1),
            ),
            &meta,
            args,
            out_len,
        )?),
        (
            CudaStorageSlice::F16(p),
            CudaStorageSlice::F16(a),
            CudaStorageSlice::F16(c),
            CudaStorageSlice::F16(sn),
        ) => CudaStorageSlice::F16(launch(
            (&device, &name),
            config,
            (
                p.slice(p0..p1),
                a.slice(a0..a1),
                c.slice(c0..c1),
                sn.slice(s0..s1),
            ),
            &meta,
            args,
            out_len,
        )?),
        _ => {
            candle_core::bail!("the arena, the projections and the rope tables must share a dtype")
        }
    };
    Ok((
        CudaStorage { slice, device },
        Shape::from((tokens, s.q_width())),
    ))
}

pub(super) fn act_mul(
    activation: GatedActivation,
    gate: &CudaStorage,
    gate_layout: &Layout,
    up: &CudaStorage,
    up_layout: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (rows, width) = gate_layout.shape().dims2()?;
    let view = |layout: &Layout, what: &str| -> Result<(usize, usize)> {
        super::row_view(layout, what).map_err(|e| candle_core::Error::Msg(format!("{e:#}")))
    };
    let (g0, gate_stride) = view(gate_layout, "the gate")?;
    let (u0, up_stride) = view(up_layout, "the up projection")?;
    let device = gate.device().clone();
    let name = format!("level_act_mul_{}", suffix(gate)?);
    let n = rows * width;
    let config = LaunchConfig::for_num_elems(n.max(1) as u32);
    let ints = [
        dim(rows)?,
        dim(width)?,
        dim(gate_stride)?,
        dim(up_stride)?,
        match activation {
            GatedActivation::Silu => 0,
            GatedActivation::GeluTanh => 1,
        },
    ];
    // The views reach from each start to the end of its storage (strided rows).
    fn launch<T: DeviceRepr>(
        (device, name): (&CudaDevice, &str),
        config: LaunchConfig,
        gate: candle_core::cuda_backend::cudarc::driver::CudaView<T>,
        up: candle_core::cuda_backend::cudarc::driver::CudaView<T>,
        ints: [i32; 5],
        n: usize,
    ) -> Result<candle_core::cuda_backend::cudarc::driver::CudaSlice<T>> {
        // SAFETY: every element is written by the kernel.
        let out = unsafe { device.alloc::<T>(n)? };
        // The function's type is not exported by candle: it stays inferred here.
        let func = device.get_or_load_custom_func(name, MODULE, ptx()?)?;
        let mut builder = func.builder();
        builder.arg(&gate);
        builder.arg(&up);
        builder.arg(&out);
        for int in &ints {
            builder.arg(int);
        }
        // SAFETY: rows and strides come from the layouts of the two inputs.
        unsafe { builder.launch(config) }.w()?;
        Ok(out)
    }
    let slice = match (&gate.slice, &up.slice) {
        (CudaStorageSlice::F32(g), CudaStorageSlice::F32(u)) => CudaStorageSlice::F32(launch(
            (&device, &name),
            config,
            g.slice(g0..),
            u.slice(u0..),
            ints,
            n,
        )?),
        (CudaStorageSlice::BF16(g), CudaStorageSlice::BF16(u)) => CudaStorageSlice::BF16(launch(
            (&device, &name),
            config,
            g.slice(g0..),
            u.slice(u0..),
            ints,
            n,
        )?),
        (CudaStorageSlice::F16(g), CudaStorageSlice::F16(u)) => CudaStorageSlice::F16(launch(
            (&device, &name),
            config,
            g.slice(g0..),
            u.slice(u0..),
            ints,
            n,
        )?),
        _ => candle_core::bail!("gate and up must share a dtype"),
    };
    Ok((CudaStorage { slice, device }, Shape::from((rows, width))))
}
