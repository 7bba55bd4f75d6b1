//! The Python SDK (issue 49) against the Rust SDK, in the same run and on the same backend (a
//! CPU-device `ac-backend` process on loopback): a small synchronous call (4 bytes back),
//! asynchronous launches of a one-element kernel then one synchronize, and one large copy each
//! way. The Python side is `bench/python/sdk_bench.py`, run by `AC_PYTHON` (an interpreter with
//! the wheel installed: scripts/test's `.cache/py/bin/python`).
//!
//! Two Rust baselines: the async SDK awaited on the bench's runtime, and the blocking SDK called
//! from a plain thread, as libac and the Python SDK call it (every call a `block_on` on the
//! connection's runtime from the caller's thread). The three take turns for `rounds` rounds;
//! the table gives each side's median, so that the VM's drift between rounds hits all alike.
//!
//! Two Rust baselines: the async SDK awaited on the bench's runtime, and the blocking SDK called
//! from a plain thread, as libac and the Python SDK call it (every call a `block_on` on the
//! connection's runtime from the caller's thread). The three take turns for `rounds` rounds;
//! the table gives each side's median, so that the VM's drift between rounds hits all alike.

use std::process::Command;
use std::time::Instant;

use ac_frontend::{ConnectOptions, KernelArg, LaunchDims};
use anyhow::{bail, Context};

use crate::setup::{connect, copy_rates, launch_rate, spawn_daemon};

/// What one side measured.
#[derive(Debug, Default)]
struct Measures {
    small_call_us: f64,
    launches: f64,
    h2d: f64,
    d2h: f64,
}

/// Runs the comparison.
pub async fn compare(quick: bool) -> anyhow::Result<()> {
    let (calls, launches, mib, rounds) = if quick { (500, 5_000, 16, 1) } else { (5_000, 200_000, 1024, 5) };
    let python = std::env::var("AC_PYTHON").context("AC_PYTHON: an interpreter with the ac wheel (scripts/test)")?;
    let state = tempfile::tempdir()?;
    let memory = (2 * mib + 64).to_string();
    let (mut child, addr) = spawn_daemon("ac-backend", &["--memory-mib", &memory], &state.path().join("backend"))?;
    let ca = state.path().join("backend/ca.pem");
    let options = ConnectOptions::new(addr, &ca);
    let result = async {
        let (mut rust, mut blocking, mut py) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            rust.push(rust_measures(&options, calls, launches, mib).await?);
            let plain = options.clone();
            blocking.push(tokio::task::spawn_blocking(move || blocking_measures(&plain, calls, launches, mib)).await??);
            py.push(python_measures(&python, addr, &ca, calls, launches, mib).await?);
        }
        anyhow::Ok((rust, blocking, py))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let (rust, blocking, py) = result?;
    println!("## The Python SDK against the Rust SDK (CPU-device backend on loopback, median of {rounds} rounds)\n");
    println!(
        "| measure | Rust SDK, async | Rust SDK, blocking | Python SDK | Python / blocking | Python / async | target |"
    );
    println!("|---|---|---|---|---|---|---|");
    let row = |name: &str, of: fn(&Measures) -> f64, digits: usize, target: &str| {
        let (a, b, p) = (median(&rust, of), median(&blocking, of), median(&py, of));
        println!("| {name} | {a:.digits$} | {b:.digits$} | {p:.digits$} | {:.2} | {:.2} | {target} |", p / b, p / a);
    };
    row(&format!("small synchronous call (4 B back), µs ({calls})"), |m| m.small_call_us, 1, "<= 1.3x the Rust SDK's");
    row(&format!("async launches / s ({launches}, then one synchronize)"), |m| m.launches, 0, ">= 200k/s");
    row(&format!("host to device, MB/s ({mib} MiB)"), |m| m.h2d, 0, ">= 0.95 of the Rust SDK's");
    row(&format!("device to host, MB/s ({mib} MiB)"), |m| m.d2h, 0, ">= 0.95 of the Rust SDK's");
    println!();
    Ok(())
}

/// The median of one measure over the rounds.
fn median(rounds: &[Measures], of: fn(&Measures) -> f64) -> f64 {
    let mut values: Vec<f64> = rounds.iter().map(of).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The same work through the blocking SDK, from the calling (plain) thread.
fn blocking_measures(options: &ConnectOptions, calls: usize, launches: usize, mib: usize) -> anyhow::Result<Measures> {
    let acc = ac_frontend::blocking::Accelerator::connect(options)?;
    let small = acc.alloc_from(&[0f32])?;
    let mut out = [0f32];
    for _ in 0..calls / 10 {
        small.copy_to_host(&mut out)?;
    }
    let start = Instant::now();
    for _ in 0..calls {
        small.copy_to_host(&mut out)?;
    }
    let small_call_us = start.elapsed().as_secs_f64() / calls as f64 * 1e6;

    let fill = acc.builtin()?.function("fill")?;
    let x = acc.alloc::<f32>(1)?;
    let args = [x.arg(), KernelArg::F32(1.0), KernelArg::U64(1)];
    let dims = LaunchDims::new([1, 1, 1], [1, 1, 1]);
    for _ in 0..launches / 10 {
        fill.launch(dims, &args)?;
    }
    acc.synchronize()?;
    let start = Instant::now();
    for _ in 0..launches {
        fill.launch(dims, &args)?;
    }
    acc.synchronize()?;
    let launches = launches as f64 / start.elapsed().as_secs_f64();

    let bytes = mib << 20;
    let host = vec![7u8; bytes];
    let mut back = vec![0u8; bytes];
    let device = acc.alloc_from(&host)?;
    device.copy_to_host(&mut back)?;
    let start = Instant::now();
    device.copy_from_host(&host)?;
    let h2d = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    let start = Instant::now();
    device.copy_to_host(&mut back)?;
    let d2h = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    device.free()?;
    Ok(Measures { small_call_us, launches, h2d, d2h })
}

/// The same work through the Rust SDK.
async fn rust_measures(
    options: &ConnectOptions,
    calls: usize,
    launches: usize,
    mib: usize,
) -> anyhow::Result<Measures> {
    let acc = connect(options).await?;
    let small = acc.alloc_from(&[0f32]).await?;
    let mut out = [0f32];
    for _ in 0..calls / 10 {
        small.copy_to_host(&mut out).await?;
    }
    let start = Instant::now();
    for _ in 0..calls {
        small.copy_to_host(&mut out).await?;
    }
    let small_call_us = start.elapsed().as_secs_f64() / calls as f64 * 1e6;

    let fill = acc.builtin().await?.function("fill").await?;
    let x = acc.alloc::<f32>(1).await?;
    let args = [x.arg(), KernelArg::F32(1.0), KernelArg::U64(1)];
    let launches = launch_rate(&acc, &fill, &args, launches).await?;
    let (h2d, d2h) = copy_rates(&acc, mib).await?;
    acc.close().await;
    Ok(Measures { small_call_us, launches, h2d, d2h })
}

/// The same work through the Python SDK, in a process of its own.
async fn python_measures(
    python: &str,
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    calls: usize,
    launches: usize,
    mib: usize,
) -> anyhow::Result<Measures> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_bench.py");
    let mut command = Command::new(python);
    command
        .arg(script)
        .args([calls.to_string(), launches.to_string(), mib.to_string()])
        .env("AC_BACKEND_ADDR", addr.to_string())
        .env("AC_CA_CERT", ca);
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("sdk_bench.py failed: {text}");
    }
    let value = |key: &str| -> anyhow::Result<f64> {
        let line = text.lines().find_map(|l| l.strip_prefix(key)).with_context(|| format!("no `{key}` in {text}"))?;
        Ok(line.trim().parse()?)
    };
    Ok(Measures {
        small_call_us: value("small_call_us ")?,
        launches: value("launches_per_s ")?,
        h2d: value("h2d_mb_s ")?,
        d2h: value("d2h_mb_s ")?,
    })
}
