//! 04: the resource manager's workflow (paper Listing 1): AC_Init, compute on the static
//! accelerators, AC_Get more at runtime (or carry on when rejected), AC_Free, AC_Finalize.
//!
//! With no batch system (the embedded default): `ARM_ADDR=... ARM_CA_CERT=... ARM_ACPN=2
//! cargo run --bin 04_dynamic`. In a batch job, `ARM_JOB_ID` and `ARM_JOB_CREDENTIAL` replace
//! `ARM_ACPN`.
//!
//! `AC_GET` (default 2) is how many it asks for at runtime: on a one-GPU host, `ARM_ACPN=0
//! AC_GET=1` holds no static accelerator and is granted the GPU dynamically
//! (`scripts/gpu-check` runs it so).

use ac_frontend::{Accelerator, LaunchDims, Session, SessionOptions};
use anyhow::{ensure, Context};

/// How many accelerators `AC_Get` asks for: `AC_GET`, or 2.
fn get_count() -> anyhow::Result<u32> {
    match std::env::var("AC_GET") {
        Ok(n) => n.parse().with_context(|| format!("AC_GET must be a count, not `{n}`")),
        Err(_) => Ok(2),
    }
}

/// Runs saxpy on one accelerator over `x` and checks the result.
async fn saxpy_on(acc: &Accelerator, x: &[f32]) -> anyhow::Result<()> {
    let n = x.len();
    let dx = acc.alloc_from(x).await?;
    let dy = acc.alloc_from(&vec![1.0f32; n]).await?;
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    saxpy.launch(LaunchDims::linear(n as u64, 256), &[2.0f32.into(), dx.arg(), dy.arg(), (n as u64).into()]).await?;
    let y = dy.to_vec().await?;
    ensure!(y.iter().zip(x).all(|(yi, xi)| *yi == 2.0 * xi + 1.0), "saxpy result differs from the CPU reference");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let count = get_count()?;
    let x: Vec<f32> = (0..1 << 20).map(|i| (i % 1000) as f32).collect();
    let start = std::time::Instant::now();
    let session = Session::init(SessionOptions::from_env()?).await?; // AC_Init
    println!(
        "AC_Init: job {} on node {}: {} static accelerator(s) in {:.1} ms",
        session.job(),
        session.node(),
        session.accelerators().len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    for handle in session.accelerators() {
        saxpy_on(&handle.acc, &x).await?;
        println!("  {}: saxpy OK", handle.id);
    }
    let start = std::time::Instant::now();
    match session.get(count).await? {
        // AC_Get
        Some(set) => {
            println!(
                "AC_Get({count}): granted set {} of {} in {:.1} ms",
                set.id,
                set.handles.len(),
                start.elapsed().as_secs_f64() * 1e3
            );
            for handle in &set.handles {
                saxpy_on(&handle.acc, &x).await?;
                println!("  {}: saxpy OK", handle.id);
            }
            let start = std::time::Instant::now();
            session.free(set).await?; // AC_Free
            println!("AC_Free: released in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
        }
        None => println!("AC_Get({count}): rejected, carrying on with the static accelerators"),
    }
    let start = std::time::Instant::now();
    session.finalize().await?; // AC_Finalize
    println!("AC_Finalize: done in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    Ok(())
}
