use nlg_judge::arch::{llama, WeightPolicy};
use std::time::Instant;
fn main() -> anyhow::Result<()> {
    let path = std::path::PathBuf::from(std::env::var("GGUF")?);
    let m = llama::from_gguf(&path, WeightPolicy::F32, &candle_core::Device::Cpu)?;
    let prefix: Vec<u32> = (0..800).map(|i| (i * 37 + 11) % 49000).collect();
    let kv = m.forward(&[&prefix], None, true)?.kv.unwrap();
    let rows: Vec<Vec<u32>> = (0..15)
        .map(|r| {
            (0..(40 + r * 3))
                .map(|i| ((i * 91 + r * 7) % 49000) as u32)
                .collect()
        })
        .collect();
    let refs: Vec<&[u32]> = rows.iter().map(|r| r.as_slice()).collect();
    let tokens: usize = rows.iter().map(|r| r.len()).sum();
    for _ in 0..2 {
        let t = Instant::now();
        m.forward(&refs, Some(&kv), false)?;
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        m.forward(&refs, None, false)?;
        let b = t.elapsed().as_secs_f64();
        println!(
            "{tokens} tokens: with prefix {:.3}s ({:.0} tok/s), without {:.3}s ({:.0} tok/s)",
            a,
            tokens as f64 / a,
            b,
            tokens as f64 / b
        );
    }
    Ok(())
}
