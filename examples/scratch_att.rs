use candle_core::{DType, Device, Tensor};
use std::time::Instant;
fn t<F: FnMut() -> anyhow::Result<Tensor>>(name: &str, mut f: F) -> anyhow::Result<f64> {
    f()?;
    let s = Instant::now();
    for _ in 0..10 {
        f()?;
    }
    let ms = s.elapsed().as_secs_f64() * 1000.0 / 10.0;
    println!("{name}: {ms:.2} ms");
    Ok(ms)
}
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
fn main() -> anyhow::Result<()> {
    let d = Device::Cpu;
    let (b, tl, p) = (15usize, 82usize, 800usize);
    let pk = Tensor::randn(0f32, 1., (1, 3, p, 64), &d)?;
    let k = Tensor::randn(0f32, 1., (b, 3, tl, 64), &d)?;
    let mut tot = 0.0;
    tot += 2.0
        * t("bcast+cat+contig K", || {
            Ok(Tensor::cat(&[&pk.broadcast_as((b, 3, p, 64))?, &k], 2)?.contiguous()?)
        })?;
    let keys = Tensor::cat(&[&pk.broadcast_as((b, 3, p, 64))?, &k], 2)?.contiguous()?;
    let q = Tensor::randn(0f32, 1., (b, 3, 3 * tl, 64), &d)?;
    tot += t("scores", || Ok(q.matmul(&keys.t()?)?))?;
    let sc = q.matmul(&keys.t()?)?;
    tot += t("scale", || Ok((&sc * 0.125)?))?;
    let mask = Tensor::zeros((b, 1, 1, tl, p + tl), DType::F32, &d)?;
    let sc5 = sc.reshape((b, 3, 3, tl, p + tl))?;
    tot += t("mask", || Ok(sc5.broadcast_add(&mask)?))?;
    tot += t("softmax", || Ok(candle_nn::ops::softmax_last_dim(&sc5)?))?;
    let w = candle_nn::ops::softmax_last_dim(&sc5)?.reshape((b, 3, 3 * tl, p + tl))?;
    tot += t("w@v", || Ok(w.matmul(&keys)?))?;
    println!("total {tot:.1} ms");
    Ok(())
}
