//! 02: `y = a*x + y` on a remote accelerator, checked against the same computation on the CPU.
//!
//! `AC_BACKEND_ADDR=... AC_CA_CERT=... cargo run --bin 02_saxpy [-- N]`

use ac_frontend::blocking::Accelerator;
use ac_frontend::LaunchDims;
use anyhow::{ensure, Context};

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose().context("N")?.unwrap_or(1 << 22);
    let a = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.001).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();

    let acc = Accelerator::from_env()?;
    println!("saxpy of {n} elements on {}", acc.info().name);
    let start = std::time::Instant::now();
    let dx = acc.alloc_from(&x)?;
    let dy = acc.alloc_from(&y)?;
    let saxpy = acc.builtin()?.function("saxpy")?;
    saxpy.launch(LaunchDims::linear(n as u64, 256), &[a.into(), dx.arg(), dy.arg(), (n as u64).into()])?;
    let result = dy.to_vec()?;
    let elapsed = start.elapsed();

    let max_error =
        result.iter().zip(x.iter().zip(&y)).map(|(r, (xi, yi))| (r - (a * xi + yi)).abs()).fold(0.0f32, f32::max);
    println!("{} MiB there and back in {:.1} ms", (n * 4 * 3) >> 20, elapsed.as_secs_f64() * 1e3);
    println!("check: max |error| = {max_error:e} over {n} elements");
    ensure!(max_error <= 1e-5, "saxpy result differs from the CPU reference");
    println!("saxpy OK");
    Ok(())
}
