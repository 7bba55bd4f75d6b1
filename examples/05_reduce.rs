//! 05: a sum over millions of floats with the builtin `reduce_sum` (a grid-stride loop: 1024 blocks
//! cover any N), checked against the same sum
//! in double precision on the CPU.
//!
//! `AC_BACKEND_ADDR=... AC_CA_CERT=... cargo run --bin 05_reduce [-- N]`

use ac_frontend::blocking::Accelerator;
use ac_frontend::LaunchDims;
use anyhow::{ensure, Context};

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose().context("N")?.unwrap_or(1 << 23);
    let data: Vec<f32> = (0..n).map(|i| (i % 1013) as f32 * 1e-3).collect();
    let expected: f64 = data.iter().map(|&v| v as f64).sum();

    let acc = Accelerator::from_env()?;
    println!("reduce_sum of {n} elements on {}", acc.info().name);
    let input = acc.alloc_from(&data)?;
    let out = acc.alloc_from(&[0.0f32])?;
    let reduce = acc.builtin()?.function("reduce_sum")?;
    reduce.launch(LaunchDims::new([1024, 1, 1], [256, 1, 1]), &[input.arg(), out.arg(), (n as u64).into()])?;
    let sum = out.to_vec()?[0] as f64;

    let relative = (sum - expected).abs() / expected.abs().max(1.0);
    println!("sum = {sum}, CPU reference (f64) = {expected}, relative error {relative:e}");
    ensure!(relative <= 1e-5, "reduction differs from the CPU reference");
    println!("reduce OK");
    Ok(())
}
