//! `ac-bench`: measures the data plane and prints markdown tables for `BENCHMARKS.md`.
//!
//! Every ratio it reports compares figures taken in the same run, because loopback numbers on a
//! shared 2-core machine drift from run to run.
//!
//! Run: `cargo build --release && ./target/release/ac-bench` (`--quick` for a short smoke run).

mod arm;
mod baseline;
mod capi;
mod copies;
mod failover;
mod gpu;
mod holdings;
mod latency;
mod load;
mod manager;
mod memory;
mod net;
mod profile;
mod python;
mod records;
mod sessions;
mod setup;
mod shim;
mod slurm;
mod stats;

use clap::{Parser, Subcommand};

/// Data-plane benchmarks.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Small sizes and few repetitions: checks that every benchmark runs.
    #[arg(long)]
    quick: bool,
    /// Run the client (and in-process backends) on a single-threaded runtime instead of two
    /// workers: fewer cross-thread wake-ups per round trip, no parallelism.
    #[arg(long)]
    current_thread: bool,
    /// Only these sections (baseline, records, copies, tuning, latency, ordering, launches,
    /// memory, arm, load, failover, capi, net, slurm, gpu, isolation, sessions, shim, python); all
    /// but net, slurm, load, failover, isolation, sessions, shim and python when empty (gpu only where an NVIDIA driver is found).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The shim section's backend serves the machine's own CUDA driver (a GPU host) instead of
    /// the driver stand-in.
    #[arg(long)]
    shim_real_gpu: bool,
    /// The failover section's kills of the leader (20, or 3 with --quick, when not given).
    #[arg(long)]
    failover_trials: Option<usize>,
    /// The load section's runs (saturated, paced, and the same on three replicas:
    /// saturated-3, paced-3), in this order, repeats allowed (`paced,paced-3,paced-3,paced`
    /// alternates them, so that each pair compares the machine as it was then); all four when
    /// empty.
    #[arg(long, value_delimiter = ',')]
    load_runs: Vec<String>,
    /// The load section's length per run, seconds (60, or 5 with --quick, when not given).
    #[arg(long)]
    load_seconds: Option<u64>,
    /// How long each program of the load section holds a grant before its `AC_Free`, ms: a
    /// double grant can only be seen while both programs hold (0 measures the manager alone).
    #[arg(long, default_value_t = 0)]
    load_hold_ms: u64,
    /// The load section's programs hold, then free; `free-then-hold` is a fault that makes the
    /// manager's regrants during a hold double grants, to show that the run fails on them.
    #[arg(long, value_enum, default_value_t = load::Order::HoldThenFree, hide = true)]
    load_order: load::Order,
    /// The net section's TCP congestion control on its emulated hosts (`cubic`, `bbr`, ...);
    /// the machine's default when not given. The kernel must list it in
    /// `net.ipv4.tcp_allowed_congestion_control`.
    #[arg(long)]
    net_congestion: Option<String>,
    /// The net section's links (mtu1500, mtu9000, tbf1gbit, tbf5gbit); all when empty. Only
    /// the shaped ones need `tc`.
    #[arg(long, value_delimiter = ',')]
    net_links: Vec<String>,
    /// The net section's repetitions on unshaped links (11, or 1 with --quick, when not given).
    #[arg(long)]
    net_reps: Option<usize>,
    /// The net section's copy sizes, MiB (256 and 1024, or 64 with --quick, when not given).
    #[arg(long, value_delimiter = ',')]
    net_mib: Vec<usize>,
    /// The bulk lanes of the net section's SDK programs (`AC_LANES`), a row for each in turn
    /// (`1,4,8`); the SDK's default when not given. On a host with cores to spare, more lanes
    /// seal and open on more of them.
    #[arg(long, value_delimiter = ',')]
    net_lanes: Vec<usize>,
    /// The CUDA driver library the isolation section loads (e.g. the stand-in,
    /// `target/release/libcuda_standin.so`); the system's when not given.
    #[arg(long)]
    cuda_driver: Option<std::path::PathBuf>,
    /// The sessions section's rows: sessions open at once (1, 4, 16, 64 when empty). It
    /// connects to the backend of `AC_BACKEND_ADDR` and `AC_CA_CERT`.
    #[arg(long, value_delimiter = ',')]
    sessions: Vec<usize>,
    /// The process of the sessions section's backend, whose session workers it counts.
    #[arg(long)]
    backend_pid: Option<u32>,
    /// The sessions section without device memory (no NVML: the CUDA stand-in).
    #[arg(long)]
    sessions_no_nvml: bool,
    #[command(subcommand)]
    helper: Option<Helper>,
}

/// Helper processes the benchmark starts itself.
#[derive(Debug, Subcommand)]
enum Helper {
    /// Echo UDP datagrams (the raw ping-pong floor).
    #[command(hide = true)]
    UdpEcho,
    /// Serve the bare quinn baseline's streams, with certificates in this directory.
    #[command(hide = true)]
    QuinnPeer {
        /// Where the certificates go.
        dir: std::path::PathBuf,
    },
    /// One workload in a loop against a backend process, to profile with `perf record`.
    Profile {
        /// The workload.
        #[arg(value_enum)]
        workload: profile::Workload,
        /// How long, seconds.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Connections a bulk copy is striped over (QUIC connections when `--lanes 0`).
        #[arg(long, default_value_t = 2)]
        stripes: usize,
        /// Bulk lanes a copy is striped over (0: QUIC streams).
        #[arg(long, default_value_t = 2)]
        lanes: usize,
        /// Run the loop in a task on the runtime's workers, not on the thread that blocks on it
        /// (as `#[tokio::main]`, the blocking API and the C ABI do).
        #[arg(long)]
        in_task: bool,
        /// The size of each copy, MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
    },
    /// Local copies between pinned host memory and GPU 0 (`cuMemcpyHtoD`/`DtoH`, no network):
    /// prints `h2d MBIT d2h MBIT` (megabits per second, as `ac-net-client copy` does) for each
    /// repetition, after one untimed pair.
    LocalPinned {
        /// The size of each copy, MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
        /// Timed repetitions.
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// The C saxpy's work through the Rust blocking API (the C ABI's comparison).
    #[command(hide = true)]
    SaxpyClient {
        /// Elements.
        n: usize,
        /// Timed rounds.
        rounds: usize,
    },
}

/// With `AC_BENCH_LOG_DIR` set, the programs' SDK logs (`AC_BENCH_CLIENT_LOG`, by default
/// `ac_frontend=info`: each redirect to a leader) go to `ac-bench.log` there, beside the
/// daemons' logs, to set one against the other.
fn log_programs() -> anyhow::Result<()> {
    let Some(dir) = std::env::var_os("AC_BENCH_LOG_DIR") else { return Ok(()) };
    let file = std::fs::File::create(std::path::Path::new(&dir).join("ac-bench.log"))?;
    let filter = std::env::var("AC_BENCH_CLIENT_LOG").unwrap_or_else(|_| "ac_frontend=info".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .init();
    Ok(())
}

fn main() -> anyhow::Result<()> {
    ac_proto::daemon::quiet_on_closed_pipe();
    pin_the_mmap_threshold();
    let args = Args::parse();
    match &args.helper {
        Some(Helper::UdpEcho) => return latency::udp_echo(),
        Some(Helper::QuinnPeer { dir }) => return baseline::quinn_peer(dir),
        Some(Helper::SaxpyClient { n, rounds }) => return capi::saxpy_client(*n, *rounds),
        Some(Helper::LocalPinned { mib, reps }) => return gpu::print_local_pinned(*mib << 20, *reps),
        Some(Helper::Profile { .. }) | None => {}
    }
    log_programs()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if let Some(Helper::Profile { workload, seconds, stripes, lanes, in_task, mib }) = args.helper {
        let run = profile::run(workload, seconds, stripes, lanes, mib << 20);
        if in_task {
            return rt.block_on(async move { tokio::spawn(run).await? });
        }
        return rt.block_on(run);
    }
    let wants = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    println!(
        "# ac-bench{}{}\n",
        if args.quick { " (quick)" } else { "" },
        if args.current_thread { ", single-threaded client runtime" } else { ", client runtime with 2 workers" }
    );
    println!("machine: {} cores, {}\n", std::thread::available_parallelism()?.get(), setup::cpu_model());
    if wants("baseline") {
        rt.block_on(baseline::against_quinn(args.quick))?;
    }
    if wants("records") {
        rt.block_on(records::one_core(args.quick))?;
    }
    if wants("copies") {
        rt.block_on(copies::throughput(args.quick))?;
    }
    if wants("tuning") {
        rt.block_on(copies::tuning(args.quick))?;
    }
    if wants("latency") {
        rt.block_on(latency::round_trips(args.quick))?;
    }
    if wants("ordering") {
        rt.block_on(latency::copy_after_launch(args.quick))?;
    }
    if wants("launches") {
        rt.block_on(latency::launch_rate(args.quick))?;
    }
    if wants("memory") {
        rt.block_on(memory::peak(args.quick))?;
    }
    if wants("arm") {
        rt.block_on(arm::latencies(args.quick))?;
        rt.block_on(arm::scheduler_api(args.quick))?;
    }
    // A minute of the manager under 1,000 programs: only when asked for.
    if args.only.iter().any(|s| s == "load") {
        let plan = load::Plan {
            quick: args.quick,
            runs: args.load_runs.clone(),
            seconds: args.load_seconds,
            hold: std::time::Duration::from_millis(args.load_hold_ms),
            order: args.load_order,
        };
        rt.block_on(load::under_load(&plan))?;
    }
    // Minutes of kills under 1,000 programs: only when asked for.
    if args.only.iter().any(|s| s == "failover") {
        rt.block_on(failover::under_load(args.quick, args.failover_trials))?;
    }
    // Needs nvcc (scripts/test fetches it): only when asked for.
    if args.only.iter().any(|s| s == "shim") {
        rt.block_on(shim::compare(args.quick, args.shim_real_gpu))?;
    }
    // Needs AC_PYTHON (an interpreter with the wheel; scripts/test makes one): only when asked.
    if args.only.iter().any(|s| s == "python") {
        rt.block_on(python::compare(args.quick))?;
    }
    if wants("capi") {
        rt.block_on(capi::c_abi(args.quick))?;
    }
    // Needs root: only when asked for.
    if args.only.iter().any(|s| s == "net") {
        let plan = net::Plan {
            quick: args.quick,
            congestion: args.net_congestion.clone(),
            links: args.net_links.clone(),
            reps: args.net_reps,
            mib: args.net_mib.clone(),
            lanes: args.net_lanes.clone(),
        };
        net::between_hosts(&plan)?;
    }
    // Needs root and Slurm: only when asked for.
    if args.only.iter().any(|s| s == "slurm") {
        rt.block_on(slurm::with_slurm(args.quick))?;
    }
    // Session workers against contexts, on a GPU or the stand-in: only when asked for.
    if args.only.iter().any(|s| s == "isolation") {
        rt.block_on(gpu::isolation(args.quick, args.cuda_driver.as_deref()))?;
    }
    // Many sessions on a running CUDA backend: only when asked for.
    if args.only.iter().any(|s| s == "sessions") {
        let Some(backend_pid) = args.backend_pid else {
            anyhow::bail!("the sessions section needs --backend-pid (the backend of AC_BACKEND_ADDR)");
        };
        let plan = sessions::Plan { counts: args.sessions.clone(), backend_pid, nvml: !args.sessions_no_nvml };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(8).enable_all().build()?;
        rt.block_on(sessions::sweep(&plan))?;
    }
    let gpu_asked = args.only.iter().any(|s| s == "gpu");
    if gpu_asked || (args.only.is_empty() && ac_backend::device::cuda::driver::driver_present()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(8).enable_all().build()?;
        rt.block_on(gpu::copies(args.quick))?;
        rt.block_on(gpu::launch_latency(args.quick))?;
    }
    Ok(())
}

/// Keeps glibc's mmap threshold where it starts. This process runs up to 1,000 programs' clients
/// at once, each with a QUIC endpoint whose receive buffer is about 13 MB (quinn sizes it as the
/// largest datagram, 6,400 bytes here, times 64 GRO segments times a batch of 32). Once one such
/// buffer is freed, glibc raises its threshold past that size, and the next buffers come from
/// the heap, where `calloc` must zero them whole: every endpoint then holds its 13 MB resident,
/// and the heap keeps the high-water mark. The failover section with 100 programs peaked at
/// 9.6 GiB that way (1,000 were killed by the OOM killer); with the threshold pinned, 164 MiB.
/// A program has one client of its own, so this is the bench's doing, not the SDK's.
#[allow(unsafe_code)]
fn pin_the_mmap_threshold() {
    // SAFETY: mallopt only changes the allocator's parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
