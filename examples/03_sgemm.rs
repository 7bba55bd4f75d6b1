//! 03: `C = alpha*A*B + beta*C` on a remote accelerator, checked against a CPU reference with a
//! relative-error bound.
//!
//! `AC_BACKEND_ADDR=... AC_CA_CERT=... cargo run --bin 03_sgemm [-- M N K]`

use ac_frontend::blocking::Accelerator;
use ac_frontend::LaunchDims;
use anyhow::ensure;

#[allow(clippy::too_many_arguments)] // the BLAS sgemm signature
fn reference(m: usize, n: usize, k: usize, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &[f32]) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
            out[i * n + j] = alpha as f64 * dot + beta as f64 * c[i * n + j] as f64;
        }
    }
    out
}

fn main() -> anyhow::Result<()> {
    let dims: Vec<usize> = std::env::args().skip(1).map(|s| s.parse()).collect::<Result<_, _>>()?;
    let (m, n, k) = match dims[..] {
        [m, n, k] => (m, n, k),
        [] => (256, 192, 128),
        _ => anyhow::bail!("usage: 03_sgemm [M N K]"),
    };
    let (alpha, beta) = (1.5f32, 0.5f32);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
    let c: Vec<f32> = (0..m * n).map(|i| (i % 3) as f32).collect();

    let acc = Accelerator::from_env()?;
    println!("sgemm {m}x{n}x{k} on {}", acc.info().name);
    let (da, db, dc) = (acc.alloc_from(&a)?, acc.alloc_from(&b)?, acc.alloc_from(&c)?);
    let sgemm = acc.builtin()?.function("sgemm")?;
    let dims = LaunchDims::new([(n as u32).div_ceil(16), (m as u32).div_ceil(16), 1], [16, 16, 1]);
    let args = [
        (m as u32).into(),
        (n as u32).into(),
        (k as u32).into(),
        alpha.into(),
        da.arg(),
        db.arg(),
        beta.into(),
        dc.arg(),
    ];
    sgemm.launch(dims, &args)?;
    let result = dc.to_vec()?;

    let expected = reference(m, n, k, alpha, &a, &b, beta, &c);
    let norm = expected.iter().map(|v| v * v).sum::<f64>().sqrt();
    let diff = result.iter().zip(&expected).map(|(r, e)| (*r as f64 - e).powi(2)).sum::<f64>().sqrt();
    let relative = diff / norm.max(f64::MIN_POSITIVE);
    println!("check: relative error ||C - C_ref|| / ||C_ref|| = {relative:e}");
    ensure!(relative <= 1e-5, "sgemm result differs from the CPU reference");
    println!("sgemm OK");
    Ok(())
}
