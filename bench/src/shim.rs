//! The CUDA shim (issue 48) against the SDK, in the same run and on the same backend: a plain
//! CUDA program (`tests/cuda/shim_bench.cu`, built by nvcc, run through `libcuda.so.1`) and the
//! same work through the SDK: asynchronous launches of a one-thread kernel, then one
//! synchronize; one copy each way. The backend is a process of its own on loopback, serving
//! the CUDA driver stand-in (`--shim-driver`, default) or a real GPU (`--shim-driver real`).

use std::path::Path;
use std::process::Command;

use ac_frontend::{ConnectOptions, KernelArg};
use anyhow::{bail, Context};

use crate::setup::{connect, copy_rates, launch_rate, sibling, spawn_daemon};

/// What one side measured.
#[derive(Debug, Default)]
struct Rates {
    launches: f64,
    h2d: f64,
    d2h: f64,
    /// A round of managed memory (the shim's side only): bytes over the time of a kernel and
    /// the synchronization after it, which carry them to the GPU and back.
    managed: f64,
    /// The same launches captured in a CUDA graph and launched once (the shim's side only).
    graph_launches: f64,
    /// Pairs of a 1 MiB allocation and its free (the SDK: `alloc`, then the buffer dropped).
    alloc_pairs: f64,
    /// The same by `cudaMallocAsync` and `cudaFreeAsync` on one stream (the shim's side only).
    pooled_pairs: f64,
}

/// Runs the comparison; `real_gpu` serves the machine's own driver instead of the stand-in.
pub async fn compare(quick: bool, real_gpu: bool) -> anyhow::Result<()> {
    let (launches, mib) = if quick { (2_000, 16) } else { (20_000, 1024) };
    let state = tempfile::tempdir()?;
    let config = state.path().join("ac-backend.toml");
    let driver = if real_gpu {
        String::new()
    } else {
        format!("cuda_driver = \"{}\"\nisolation = \"context\"\n", sibling("libcuda_standin.so")?.display())
    };
    std::fs::write(&config, format!("device = \"cuda\"\nstaging_mib = 256\n{driver}"))?;
    let args = ["--config", config.to_str().context("path")?];
    let (mut child, addr) = spawn_daemon("ac-backend", &args, &state.path().join("backend"))?;
    let ca = state.path().join("backend/ca.pem");
    let result = async {
        let sdk = sdk_rates(&ConnectOptions::new(addr, &ca), launches, mib).await?;
        let shim = shim_rates(addr, &ca, state.path(), launches, mib).await?;
        anyhow::Ok((sdk, shim))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let (sdk, shim) = result?;
    let device = if real_gpu { "the machine's GPU" } else { "the CUDA driver stand-in (kernels on the CPU)" };
    println!("## The CUDA shim against the SDK (backend on loopback, {device})\n");
    println!("| measure | SDK | CUDA program through the shim | shim / SDK |");
    println!("|---|---|---|---|");
    let row = |name: &str, a: f64, b: f64| println!("| {name} | {a:.0} | {b:.0} | {:.2} |", b / a);
    row(&format!("async launches / s ({launches}, then one synchronize)"), sdk.launches, shim.launches);
    row(
        &format!("launches / s in a CUDA graph ({launches} captured, one graph launch; SDK: async launches)"),
        sdk.launches,
        shim.graph_launches,
    );
    let pairs = launches / 10;
    row(&format!("1 MiB allocation and free pairs / s ({pairs}; SDK: alloc, drop)"), sdk.alloc_pairs, shim.alloc_pairs);
    row(
        &format!("the same by cudaMallocAsync, cudaFreeAsync on a stream ({pairs}; SDK: alloc, drop)"),
        sdk.alloc_pairs,
        shim.pooled_pairs,
    );
    row(&format!("host to device, MB/s ({mib} MiB)"), sdk.h2d, shim.h2d);
    row(&format!("device to host, MB/s ({mib} MiB)"), sdk.d2h, shim.d2h);
    // The SDK's column: the same bytes copied there and back explicitly, one after the other.
    let both_ways = 1.0 / (1.0 / sdk.h2d + 1.0 / sdk.d2h);
    row(
        &format!("managed memory round (there and back), MB/s ({mib} MiB; SDK: a copy each way)"),
        both_ways,
        shim.managed,
    );
    println!();
    Ok(())
}

/// The work through the SDK: the fixture's `iota` launched asynchronously, then copies.
async fn sdk_rates(options: &ConnectOptions, count: usize, mib: usize) -> anyhow::Result<Rates> {
    let acc = connect(options).await?;
    let image = std::fs::read(ac_tests::cuda::source("tests/fixtures/shim_kernels.sm_90.fatbin"))?;
    let iota = acc.load_cubin(&image).await?.function("_Z4iotaPjj").await?;
    let x = acc.alloc::<u32>(1).await?;
    let launches = launch_rate(&acc, &iota, &[x.arg(), KernelArg::U32(1)], count).await?;
    let (h2d, d2h) = copy_rates(&acc, mib).await?;
    let pairs = count / 10;
    let t = std::time::Instant::now();
    for _ in 0..pairs {
        drop(acc.alloc::<u8>(1 << 20).await?);
    }
    let alloc_pairs = pairs as f64 / t.elapsed().as_secs_f64();
    acc.close().await;
    Ok(Rates { launches, h2d, d2h, alloc_pairs, ..Rates::default() })
}

/// The same work as a CUDA program through the shim.
async fn shim_rates(
    addr: std::net::SocketAddr,
    ca: &Path,
    dir: &Path,
    launches: usize,
    mib: usize,
) -> anyhow::Result<Rates> {
    let Some(exe) = ac_tests::cuda::build("shim_bench", dir) else { bail!("no nvcc: scripts/test fetches it") };
    let shim = ac_tests::cuda::shim_dir(dir);
    let mut command = Command::new(exe);
    command
        .args([launches.to_string(), mib.to_string()])
        .env("LD_LIBRARY_PATH", &shim)
        .env("AC_BACKEND_ADDR", addr.to_string())
        .env("AC_CA_CERT", ca)
        .env_remove("ARM_ADDR");
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("shim_bench failed: {text}");
    }
    let value = |key: &str| -> anyhow::Result<f64> {
        let line = text.lines().find_map(|l| l.strip_prefix(key)).with_context(|| format!("no `{key}` in {text}"))?;
        Ok(line.trim().parse()?)
    };
    Ok(Rates {
        launches: value("launches/s ")?,
        h2d: value("h2d MB/s ")?,
        d2h: value("d2h MB/s ")?,
        managed: value("managed round MB/s ")?,
        graph_launches: value("graph launches/s ")?,
        alloc_pairs: value("alloc pairs/s ")?,
        pooled_pairs: value("pooled alloc pairs/s ")?,
    })
}
