//! The `ac-backend` daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use ac_backend::{BackendConfig, DeviceChoice, Isolation};
use ac_proto::daemon;
use anyhow::Context;
use clap::Parser;

/// Accelerator host daemon: serves memory, copy and kernel calls over QUIC.
#[derive(Debug, Parser)]
#[command(version, long_version = ac_proto::long_version(), about)]
struct Args {
    /// TOML configuration file (flags and environment override it).
    #[arg(long, env = "AC_BACKEND_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on, e.g. 0.0.0.0:7100 (port 0 picks a free port).
    #[arg(long, env = "AC_BACKEND_LISTEN")]
    listen: Option<std::net::SocketAddr>,
    /// Directory for the created CA and certificate.
    #[arg(long, env = "AC_BACKEND_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Device to run: `cuda` (fail without a GPU), `auto` (CUDA, else the CPU device) or `cpu`.
    #[arg(long, env = "AC_BACKEND_DEVICE", value_enum)]
    device: Option<DeviceChoice>,
    /// Devices to serve, by index (NVML's order, as `nvidia-smi` shows; CUDA ordinals without
    /// NVML), e.g. `0,2`; default every GPU, or one CPU device. With `--device cpu`, each index
    /// is one emulated accelerator.
    #[arg(long, env = "AC_BACKEND_DEVICES", value_delimiter = ',')]
    devices: Option<Vec<u32>>,
    /// GPUs or MIG instances to serve, by UUID (`nvidia-smi -L`), comma-separated.
    #[arg(long, env = "AC_BACKEND_GPU_UUIDS", value_delimiter = ',')]
    gpu_uuids: Option<Vec<String>>,
    /// NVIDIA's management library (libnvidia-ml.so.1), when the loader does not find it.
    #[arg(long, env = "AC_BACKEND_NVML_LIBRARY")]
    nvml_library: Option<PathBuf>,
    /// The most sessions one device serves at once (default: from a GPU's memory).
    #[arg(long, env = "AC_BACKEND_MAX_SESSIONS")]
    max_sessions: Option<u32>,
    /// A session worker's GPU, by UUID: set as CUDA_VISIBLE_DEVICES before CUDA loads (the
    /// backend starts its session workers so; not for people).
    #[arg(long, hide = true, value_name = "UUID", requires = "session_worker")]
    visible_device: Option<String>,
    /// Pinned host memory for staging bulk copies, per GPU, MiB.
    #[arg(long, env = "AC_BACKEND_STAGING_MIB")]
    staging_mib: Option<u64>,
    /// Extra names (DNS names or addresses) for the certificate it makes, comma-separated.
    #[arg(long, env = "AC_BACKEND_NAMES", value_delimiter = ',')]
    names: Option<Vec<String>>,
    /// Memory of each CPU device, MiB.
    #[arg(long, env = "AC_BACKEND_MEMORY_MIB")]
    memory_mib: Option<u64>,
    /// How long a session whose connection timed out is held for its program to resume it,
    /// milliseconds (0: not at all).
    #[arg(long, env = "AC_BACKEND_SESSION_HOLD_MS")]
    session_hold_ms: Option<u64>,
    /// Where GPU sessions run: `process` (a worker process per session: a kernel fault ends
    /// only its session) or `context` (a CUDA context per session in this process: a fault
    /// ends every session).
    #[arg(long, env = "AC_BACKEND_ISOLATION", value_enum)]
    isolation: Option<Isolation>,
    /// The NVIDIA driver library (libcuda.so) to load, when the loader does not find it.
    #[arg(long, env = "AC_BACKEND_CUDA_DRIVER")]
    cuda_driver: Option<PathBuf>,
    /// Serve one session's device calls on stdin and stdout, on GPU INDEX (the backend starts
    /// its session workers so; not for people).
    #[arg(long, hide = true, value_name = "INDEX")]
    session_worker: Option<u32>,
    /// The session worker's shared memory for bulk copies, as an inherited descriptor (the
    /// backend passes it; not for people).
    #[arg(long, hide = true, value_name = "FD", requires = "session_worker")]
    session_shared: Option<i32>,
    /// The session worker's socket for shareable handles' descriptors, as an inherited
    /// descriptor (the backend passes it; not for people).
    #[arg(long, hide = true, value_name = "FD", requires = "session_worker")]
    session_fds: Option<i32>,
    /// Bulk copy chunk size, KiB.
    #[arg(long, env = "AC_BACKEND_CHUNK_KIB")]
    chunk_kib: Option<usize>,
    /// Serve Prometheus metrics over HTTP at /metrics on this address, e.g. 10.1.0.2:7101: a
    /// management address, as it has no authentication (default: none).
    #[arg(long, env = "AC_BACKEND_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// The resource manager's public key to trust (64 hex digits; `armctl manager-key` prints
    /// it); a replicated manager's: every replica's, separated by commas.
    #[arg(long, env = "AC_BACKEND_ARM_PUBLIC_KEY")]
    arm_public_key: Option<String>,
    /// Bulk lanes one session may use at once (default: one per four cores, 1 to 4).
    #[arg(long, env = "AC_BACKEND_LANES_PER_SESSION")]
    lanes_per_session: Option<u16>,
    /// Threads serving the network (0: one per core). Device work runs on threads of its own.
    #[arg(long, env = "AC_BACKEND_IO_THREADS", default_value_t = 0)]
    io_threads: usize,
    /// Write the bound address to this file once listening (for scripts using port 0).
    #[arg(long)]
    addr_file: Option<PathBuf>,
}

impl Args {
    fn into_config(self) -> anyhow::Result<(BackendConfig, Option<PathBuf>)> {
        let _ = self.io_threads; // used before the runtime starts
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                BackendConfig::from_toml(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => BackendConfig::default(),
        };
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.state_dir {
            config.state_dir = v;
        }
        if let Some(v) = self.device {
            config.device = v;
        }
        if let Some(v) = self.devices {
            config.devices = Some(v);
        }
        if let Some(v) = self.gpu_uuids {
            config.gpu_uuids = Some(v);
        }
        if let Some(v) = self.nvml_library {
            config.nvml_library = Some(v);
        }
        if let Some(v) = self.max_sessions {
            config.max_sessions = Some(v);
        }
        if let Some(v) = self.staging_mib {
            config.staging_mib = v;
        }
        if let Some(v) = self.names {
            config.names = v;
        }
        if let Some(v) = self.session_hold_ms {
            config.session_hold_ms = v;
        }
        if let Some(v) = self.memory_mib {
            config.memory_mib = v;
        }
        if let Some(v) = self.isolation {
            config.isolation = v;
        }
        if let Some(v) = self.cuda_driver {
            config.cuda_driver = Some(v);
        }
        if let Some(v) = self.metrics_listen {
            config.metrics_listen = Some(v);
        }
        if let Some(v) = self.lanes_per_session {
            config.lanes_per_session = Some(v);
        }
        if let Some(v) = self.arm_public_key {
            config.arm_public_key = Some(v);
        }
        if let Some(v) = self.chunk_kib {
            config.copy.chunk_bytes = v * 1024;
        }
        Ok((config, self.addr_file))
    }
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if let Some(uuid) = &args.visible_device {
        // Before any thread starts and before CUDA loads: the driver reads it once, at cuInit,
        // and then numbers only this GPU (or MIG instance), as device 0.
        std::env::set_var("CUDA_VISIBLE_DEVICES", uuid);
    }
    // A session worker logs warnings only unless asked: one starts per GPU session.
    let default_filter = if args.session_worker.is_some() { "warn" } else { "info" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(ac_proto::daemon::log_colours())
        .init();
    let (worker, shared, fds) = (args.session_worker, args.session_shared, args.session_fds);
    let io_threads = args.io_threads;
    let (config, addr_file) = args.into_config()?;
    if let Some(index) = worker {
        ac_backend::device::worker::serve::run_worker(&config, index, shared, fds).context("serving a session")?;
        return Ok(ExitCode::SUCCESS);
    }
    raise_descriptor_limit();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if io_threads > 0 {
        runtime.worker_threads(io_threads);
    }
    runtime.enable_all().build().context("starting the runtime")?.block_on(serve(config, addr_file))
}

/// Raises the soft limit on open descriptors to the hard one (the packaged unit sets 65,536):
/// the backend keeps a descriptor for each piece of physical memory a session shares, besides
/// its connections, and the usual soft limit of 1,024 would refuse connections first.
#[allow(unsafe_code)] // setrlimit on this process's own limits
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reads and writes this process's limit through a valid struct.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
        }
    };
    if !raised {
        tracing::warn!("could not raise the open descriptor limit: {}", std::io::Error::last_os_error());
    }
}

/// The exit status after a restart asked for with SIGUSR2 (`systemctl reload`): the unit's
/// `RestartForceExitStatus=` starts the installed binary again. 75 is sysexits' EX_TEMPFAIL.
const EXIT_RESTART: u8 = 75;
/// How often a backend that is to restart when idle counts its sessions.
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(200);

async fn serve(config: BackendConfig, addr_file: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    // Set up before anything else, so that a package upgrade (its postinst reads the signals this
    // process catches) never sends SIGUSR2 to a backend that would die of it.
    let mut restart =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2()).context("handling SIGUSR2")?;
    let backend = ac_backend::start(config).await.context("starting the backend")?;
    eprintln!("ac-backend listening on {}; clients trust {}", backend.addr(), backend.ca_cert().display());
    if let Some(names) = backend.ca_cert().parent().and_then(ac_proto::tls::issued_names) {
        eprintln!("  its certificate names {} (add more with --names or AC_BACKEND_NAMES)", names.join(", "));
    }
    if let Some(addr) = backend.metrics_addr() {
        eprintln!("  metrics at http://{addr}/metrics");
    }
    for info in backend.devices() {
        eprintln!("  device {}: {} ({:?}, {} MiB free)", info.index, info.name, info.kind, info.memory_free >> 20);
    }
    if let Some(path) = addr_file {
        daemon::write_addr_file(&path, backend.addr()).with_context(|| format!("writing {}", path.display()))?;
    }
    let code = tokio::select! {
        stopped = daemon::shutdown_signal() => stopped.map(|()| ExitCode::SUCCESS)?,
        _ = restart_when_idle(&backend, &mut restart) => ExitCode::from(EXIT_RESTART),
    };
    eprintln!("ac-backend shutting down");
    backend.shutdown().await;
    Ok(code)
}

/// Returns once SIGUSR2 has come and no session is left: an upgrade's restart that ends no
/// program's session (packaging/daemon.postinst). Until then the backend serves as before,
/// new sessions included.
async fn restart_when_idle(backend: &ac_backend::RunningBackend, signal: &mut tokio::signal::unix::Signal) {
    signal.recv().await;
    let live = backend.sessions();
    tracing::info!(sessions = live, "restart asked for (SIGUSR2): restarting when no session is left");
    while backend.sessions() > 0 {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    tracing::info!("no session left: restarting (exit status {EXIT_RESTART})");
}
