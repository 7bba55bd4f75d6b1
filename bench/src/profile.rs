//! One workload in a loop against a backend in its own process, for `perf record` (issue 13's
//! profile): `ac-bench profile h2d --seconds 5`, with the backend's pid printed so that the
//! profile can be split per process. See "Profile" in BENCHMARKS.md.

use std::time::{Duration, Instant};

use ac_frontend::LaunchDims;

use crate::setup::{connect, Child_};

/// What the profile loop does.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Workload {
    /// Host-to-device copies (`--mib`).
    H2d,
    /// Device-to-host copies (`--mib`).
    D2h,
    /// Bursts of 10,000 asynchronous launches, each burst then synchronized.
    Launches,
    /// Small synchronous calls.
    Ping,
    /// One launch, then a synchronize: the latency row's loop.
    LaunchSync,
    /// A synchronize alone: the stream barrier's round trip without a launch.
    Sync,
}

/// Runs `workload` for `seconds` (copies of `copy` bytes) and prints how much it did.
pub async fn run(workload: Workload, seconds: u64, stripes: usize, lanes: usize, copy: usize) -> anyhow::Result<()> {
    let mut backend = Child_::start(copy as u64 / (1 << 20) + 64)?;
    println!("backend pid {}", backend.pid());
    backend.options.stripes = stripes;
    backend.options.lanes = lanes;
    let acc = connect(&backend.options).await?;
    let fill = acc.builtin().await?.function("fill").await?;
    let small = acc.alloc::<f32>(1).await?;
    let args = [small.arg(), 1.0f32.into(), 1u64.into()];
    let mut host = vec![7u8; copy];
    // Device memory that holds data, as a program's does.
    let buf = crate::copies::mapped(&acc, &host).await?;
    let (deadline, mut units) = (Instant::now() + Duration::from_secs(seconds), 0u64);
    let start = Instant::now();
    while Instant::now() < deadline {
        match workload {
            Workload::H2d => buf.copy_from_host(&host).await?,
            Workload::D2h => buf.copy_to_host(&mut host).await?,
            Workload::Launches => {
                for _ in 0..10_000 {
                    fill.launch(LaunchDims::linear(1, 1), &args).await?;
                }
                acc.synchronize().await?;
            }
            Workload::Ping => acc.ping().await?,
            Workload::LaunchSync => {
                fill.launch(LaunchDims::linear(1, 1), &args).await?;
                acc.synchronize().await?;
            }
            Workload::Sync => acc.synchronize().await?,
        }
        units += match workload {
            Workload::H2d | Workload::D2h => copy as u64,
            Workload::Launches => 10_000,
            Workload::Ping | Workload::LaunchSync | Workload::Sync => 1,
        };
    }
    let rate = units as f64 / start.elapsed().as_secs_f64();
    println!(
        "{workload:?}: {rate:.0} {} per second",
        if matches!(workload, Workload::H2d | Workload::D2h) { "bytes" } else { "calls" }
    );
    Ok(())
}
