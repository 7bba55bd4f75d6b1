//! The CUDA device: remote copy throughput against a local pinned copy on the same GPU and the
//! loopback network alone, all measured in one run, and launch + synchronize latency, remote
//! against local. Needs an NVIDIA GPU (`scripts/gpu-check` runs it).

#![allow(unsafe_code)] // the local baselines call the CUDA driver directly

use std::ffi::c_void;
use std::path::Path;
use std::time::{Duration, Instant};

use ac_backend::device::cuda::{self, driver};
use ac_backend::device::{Device, DeviceStream};
use ac_backend::{BackendConfig, CopySettings, DeviceChoice, Isolation};
use ac_frontend::{Accelerator, CopyOptions, LaunchDims};
use ac_proto::backend::{KernelArg, ModuleSource};
use ac_proto::transport::Tuning;
use anyhow::{bail, Context as _};
use cudarc::driver::sys;

use crate::setup::{connect, mib, percentiles, InProcess};

fn rate(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

fn cu(call: &str, code: sys::CUresult) -> anyhow::Result<()> {
    driver::check(call, code).map_err(|e| anyhow::anyhow!(e.message))
}

/// Local host-to-device and device-to-host copies of `len` bytes between pinned host memory and
/// GPU 0, best of `reps`, MB/s: the ceiling a remote copy is compared with.
fn local_pinned(len: usize, reps: usize) -> anyhow::Result<(f64, f64)> {
    let pairs = local_pinned_pairs(len, reps)?;
    Ok(pairs.iter().fold((0.0f64, 0.0f64), |(h, d), &(h2d, d2h)| (h.max(h2d), d.max(d2h))))
}

/// `reps` timed pairs of local copies (host-to-device, then device-to-host) of `len` bytes
/// between pinned host memory and GPU 0, after one untimed pair, MB/s each.
fn local_pinned_pairs(len: usize, reps: usize) -> anyhow::Result<Vec<(f64, f64)>> {
    let (mut device, mut ctx, mut dptr, mut host) = (0, std::ptr::null_mut(), 0, std::ptr::null_mut());
    // SAFETY: valid out-pointers; the buffers are freed below and used only in between.
    unsafe {
        // Called any number of times; the first call of a process that has no backend in it.
        cu("cuInit", sys::cuInit(0))?;
        cu("cuDeviceGet", sys::cuDeviceGet(&mut device, 0))?;
        cu("cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut ctx, device))?;
        cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
        cu("cuMemAlloc", sys::cuMemAlloc_v2(&mut dptr, len))?;
        cu("cuMemHostAlloc", sys::cuMemHostAlloc(&mut host, len, 0))?;
        std::ptr::write_bytes(host as *mut u8, 7, len);
        let mut pairs = Vec::with_capacity(reps);
        for i in 0..reps + 1 {
            let start = Instant::now();
            cu("cuMemcpyHtoD", sys::cuMemcpyHtoD_v2(dptr, host as *const c_void, len))?;
            let h2d = rate(len, start.elapsed());
            let start = Instant::now();
            cu("cuMemcpyDtoH", sys::cuMemcpyDtoH_v2(host, dptr, len))?;
            let d2h = rate(len, start.elapsed());
            if i > 0 {
                pairs.push((h2d, d2h));
            }
        }
        sys::cuMemFreeHost(host);
        sys::cuMemFree_v2(dptr);
        Ok(pairs)
    }
}

/// `ac-bench local-pinned`: [`local_pinned_pairs`] on the system's driver, a line per pair in
/// megabits per second, for `scripts/gpu-check` to set beside the SDK's and plain TCP's copies.
pub fn print_local_pinned(len: usize, reps: usize) -> anyhow::Result<()> {
    if !driver::driver_present() {
        bail!("local-pinned needs an NVIDIA GPU and driver (libcuda.so)");
    }
    anyhow::ensure!(len > 0 && reps > 0, "local-pinned needs a size and repetitions");
    for (h2d, d2h) in local_pinned_pairs(len, reps)? {
        // MB/s to Mbit/s.
        println!("h2d {:.0} d2h {:.0}", h2d * 8.0, d2h * 8.0);
    }
    Ok(())
}

/// Best-of-`reps` host-to-device and device-to-host MB/s through `acc`, every byte checked.
async fn remote(acc: &Accelerator, src: &[u8], reps: usize) -> anyhow::Result<(f64, f64)> {
    let mut dst = vec![0u8; src.len()];
    let rates = crate::copies::measure(acc, src, &mut dst, reps).await?;
    anyhow::ensure!(dst == src, "copy corrupted data");
    Ok(rates)
}

async fn backend(device: DeviceChoice, memory_mib: u64, isolation: Isolation) -> anyhow::Result<InProcess> {
    cuda_backend(device, memory_mib, isolation, None).await
}

/// A backend on `device`; a CUDA one loads the driver library `driver` (and so do its workers).
async fn cuda_backend(
    device: DeviceChoice,
    memory_mib: u64,
    isolation: Isolation,
    driver: Option<&Path>,
) -> anyhow::Result<InProcess> {
    if device == DeviceChoice::Cpu {
        return InProcess::start(memory_mib, Tuning::default(), CopySettings::default()).await;
    }
    let state = tempfile::tempdir()?;
    let config = BackendConfig {
        listen: "127.0.0.1:0".parse()?,
        state_dir: state.path().to_path_buf(),
        device,
        isolation,
        cuda_driver: driver.map(Path::to_path_buf),
        ..BackendConfig::default()
    };
    Ok(InProcess::from_parts(ac_backend::start(config).await?, state))
}

/// Copies: remote through a CUDA backend, the same copy through a CPU-device backend (the
/// network and protocol alone, landing in host memory), and the local pinned copy.
pub async fn copies(quick: bool) -> anyhow::Result<()> {
    if !driver::driver_present() {
        bail!("the gpu section needs an NVIDIA GPU and driver (libcuda.so)");
    }
    let sizes: &[usize] = if quick { &[64 << 20] } else { &[64 << 20, 1 << 30, 4 << 30] };
    let stripes = 4;
    let tuning = Tuning::default();
    let gpu = backend(DeviceChoice::Cuda, 0, Isolation::Process).await.context("CUDA backend")?;
    let shared = backend(DeviceChoice::Cuda, 0, Isolation::Context).await.context("CUDA backend")?;
    let net = backend(DeviceChoice::Cpu, (sizes[sizes.len() - 1] >> 20) as u64 + 512, Isolation::Process).await?;
    let (gpu_acc, net_acc) =
        (connect(&gpu.options(stripes, &tuning)).await?, connect(&net.options(stripes, &tuning)).await?);
    let shared_acc = connect(&shared.options(stripes, &tuning)).await?;
    let info = gpu_acc.info().clone();
    // The lanes carry the copies (`stripes` counts QUIC connections, used only without lanes).
    let lanes = gpu.options(stripes, &tuning).lanes;
    println!("## CUDA device: copy pipelining (backend in-process, loopback, {lanes} bulk lane(s))\n");
    println!(
        "GPU: {} (compute {:?}). Local: cuMemcpyHtoD/DtoH from pinned memory on the same GPU. Network alone: the same bulk copy into a CPU-device backend. Remote: through the backend's default session worker process (`isolation = process`); efficiency = remote / min(network, local). Context: the same copy with the session's context in the backend's process (`isolation = context`). MB/s = 10^6 bytes/s, best of the repetitions.\n",
        info.name, info.compute_capability
    );
    println!("| size | direction | local pinned MB/s | network alone MB/s | remote MB/s | efficiency | context MB/s | remote, not pipelined MB/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for &size in sizes {
        let reps = if size >= 1 << 30 { 2 } else { 4 };
        let src: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
        let (local_h2d, local_d2h) = local_pinned(size, reps)?;
        let (net_h2d, net_d2h) = remote(&net_acc, &src, reps).await?;
        gpu_acc.set_copy_options(CopyOptions::default());
        let (h2d, d2h) = remote(&gpu_acc, &src, reps).await?;
        let (shared_h2d, shared_d2h) = remote(&shared_acc, &src, reps).await?;
        // Store-and-forward holds the whole copy: over the session's payload budget the backend
        // refuses it.
        let staged = if size as u64 <= u64::from(BackendConfig::default().inline_budget_mib) << 20 {
            gpu_acc.set_copy_options(CopyOptions { pipelined: false, ..CopyOptions::default() });
            let (h2d, d2h) = remote(&gpu_acc, &src, 1).await?;
            [format!("{h2d:.0}"), format!("{d2h:.0}")]
        } else {
            ["refused: over the payload budget"; 2].map(String::from)
        };
        let [h2d_staged, d2h_staged] = staged;
        for (dir, local, net, got, shared, staged) in [
            ("H2D", local_h2d, net_h2d, h2d, shared_h2d, h2d_staged),
            ("D2H", local_d2h, net_d2h, d2h, shared_d2h, d2h_staged),
        ] {
            let efficiency = got / local.min(net);
            println!(
                "| {} | {dir} | {local:.0} | {net:.0} | {got:.0} | {efficiency:.2} | {shared:.0} | {staged} |",
                mib(size)
            );
        }
    }
    println!();
    Ok(())
}

/// Bulk copies through a session worker against the same copies with the context in the
/// backend's process, and the network alone (a CPU-device backend), on whichever driver is
/// loaded: with the CUDA stand-in (`--cuda-driver`), what a worker's plumbing costs per byte,
/// without a GPU. Medians of the repetitions.
pub async fn isolation(quick: bool, driver: Option<&Path>) -> anyhow::Result<()> {
    if let Some(path) = driver {
        driver::load_from(path).map_err(|e| anyhow::anyhow!(e))?;
    }
    if driver.is_none() && !driver::driver_present() {
        bail!("the isolation section needs a CUDA driver: an NVIDIA one, or the stand-in through --cuda-driver");
    }
    let (sizes, reps): (&[usize], usize) = if quick { (&[64 << 20], 2) } else { (&[256 << 20, 1 << 30], 7) };
    let tuning = Tuning::default();
    let worker = cuda_backend(DeviceChoice::Cuda, 0, Isolation::Process, driver).await.context("worker backend")?;
    let context = cuda_backend(DeviceChoice::Cuda, 0, Isolation::Context, driver).await.context("context backend")?;
    let net = backend(DeviceChoice::Cpu, (sizes[sizes.len() - 1] >> 20) as u64 + 512, Isolation::Process).await?;
    let worker_acc = connect(&worker.options(1, &tuning)).await?;
    let (context_acc, net_acc) =
        (connect(&context.options(1, &tuning)).await?, connect(&net.options(1, &tuning)).await?);
    println!("## Session workers against contexts (loopback, default lanes)\n");
    println!(
        "Device: {}. Worker: the session's context in `ac-backend --session-worker` (`isolation = process`); context: in the backend's process (`isolation = context`); network alone: the same copy into a CPU-device backend. MB/s = 10^6 bytes/s, medians of {reps}, alternating.\n",
        worker_acc.info().name
    );
    println!("| size | direction | network alone MB/s | worker MB/s | context MB/s | worker / context |");
    println!("|---|---|---|---|---|---|");
    for &size in sizes {
        let src = crate::copies::host_data(size);
        let mut dst = vec![0u8; size];
        let mut runs: [Vec<(f64, f64)>; 3] = Default::default();
        for _ in 0..reps {
            for (acc, run) in [&net_acc, &worker_acc, &context_acc].into_iter().zip(runs.iter_mut()) {
                run.extend(crate::copies::copy_pairs(acc, &src, &mut dst, 1).await?);
                anyhow::ensure!(dst == src, "copy corrupted data");
            }
        }
        let [net, worker, context] = runs.map(|r| {
            (
                crate::setup::median(r.iter().map(|p| p.0).collect()),
                crate::setup::median(r.iter().map(|p| p.1).collect()),
            )
        });
        for (dir, pick) in [("H2D", 0), ("D2H", 1)] {
            let at = |p: (f64, f64)| if pick == 0 { p.0 } else { p.1 };
            println!(
                "| {} | {dir} | {:.0} | {:.0} | {:.0} | {:.2} |",
                mib(size),
                at(net),
                at(worker),
                at(context),
                at(worker) / at(context)
            );
        }
    }
    println!();
    Ok(())
}

/// Launch + synchronize of a one-thread kernel: through the network, and on the same device
/// layer in this process (no network).
pub async fn launch_latency(quick: bool) -> anyhow::Result<()> {
    if !driver::driver_present() {
        bail!("the gpu section needs an NVIDIA GPU and driver (libcuda.so)");
    }
    let n = if quick { 200 } else { 5_000 };
    let gpu = backend(DeviceChoice::Cuda, 0, Isolation::Process).await?;
    let acc = connect(&gpu.options(1, &Tuning::default())).await?;
    let (remote_p50, remote_p99) = crate::latency::launch_sync_latency(&acc, n).await?;
    let shared = backend(DeviceChoice::Cuda, 0, Isolation::Context).await?;
    let acc = connect(&shared.options(1, &Tuning::default())).await?;
    let (shared_p50, shared_p99) = crate::latency::launch_sync_latency(&acc, n).await?;
    let (local_p50, local_p99) = tokio::task::spawn_blocking(move || local_launch_latency(n)).await??;
    println!("## CUDA device: launch + synchronize latency (µs)\n");
    println!("| path | p50 | p99 |\n|---|---|---|");
    println!("| local (device layer in-process, no network) | {local_p50:.1} | {local_p99:.1} |");
    println!("| remote (QUIC on loopback, session worker process) | {remote_p50:.1} | {remote_p99:.1} |");
    println!("| remote (QUIC on loopback, context in the backend) | {shared_p50:.1} | {shared_p99:.1} |\n");
    Ok(())
}

fn local_launch_latency(n: usize) -> anyhow::Result<(f64, f64)> {
    let gpu = cuda::CudaDevice::open(0, 16 << 20, CopySettings::default()).map_err(|e| anyhow::anyhow!(e.message))?;
    let ctx = gpu.open_context().map_err(|e| anyhow::anyhow!(e.message))?;
    let wire = |e: ac_proto::backend::WireError| anyhow::anyhow!(e.message);
    let module = ctx.load_module(&ModuleSource::Builtin("builtin".into()), &[]).map_err(wire)?;
    let kernel = ctx.kernel(module, "fill").map_err(wire)?;
    let mem = ctx.alloc(4).map_err(wire)?;
    let stream: DeviceStream = ctx.create_stream().map_err(wire)?;
    let args = [
        ac_backend::device::DeviceArg::Mem { mem, offset: 0, len: 4 },
        ac_backend::device::DeviceArg::Scalar(KernelArg::F32(1.0)),
        ac_backend::device::DeviceArg::Scalar(KernelArg::U64(1)),
    ];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        ctx.launch(&kernel, &LaunchDims::linear(1, 1), &args, stream).map_err(wire)?;
        ctx.synchronize(stream).map_err(wire)?;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    Ok(percentiles(samples))
}
