//! Starting backends (in this process or as a child process) and connecting clients.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ac_backend::{BackendConfig, CopySettings, RunningBackend};
use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::transport::Tuning;
use anyhow::{bail, Context};

/// A backend in this process.
pub struct InProcess {
    pub backend: RunningBackend,
    _state: tempfile::TempDir,
}

/// Lanes per session the benches' backends serve: more than any measured program asks for.
pub const BENCH_LANES: u16 = 16;

impl InProcess {
    pub async fn start(memory_mib: u64, tuning: Tuning, copy: CopySettings) -> anyhow::Result<Self> {
        let state = tempfile::tempdir()?;
        let config = BackendConfig {
            listen: "127.0.0.1:0".parse()?,
            state_dir: state.path().to_path_buf(),
            memory_mib,
            // Unpipelined copies (the store-and-forward baseline) stage whole copies: let them
            // be as large as the device.
            inline_budget_mib: u32::try_from(memory_mib).unwrap_or(u32::MAX),
            // The programs' lane counts are what is measured: serve as many as they ask.
            lanes_per_session: Some(BENCH_LANES),
            transport: tuning,
            copy,
            ..BackendConfig::default()
        };
        Ok(Self { backend: ac_backend::start(config).await?, _state: state })
    }

    pub fn from_parts(backend: RunningBackend, state: tempfile::TempDir) -> Self {
        Self { backend, _state: state }
    }

    pub fn options(&self, stripes: usize, tuning: &Tuning) -> ConnectOptions {
        let mut options = ConnectOptions::new(self.backend.addr(), self.backend.ca_cert());
        options.stripes = stripes;
        options.tuning = tuning.clone();
        options
    }
}

/// A backend in a child process (the `ac-backend` binary next to this one).
pub struct Child_ {
    pub child: Child,
    pub options: ConnectOptions,
    _state: tempfile::TempDir,
}

impl Child_ {
    pub fn start(memory_mib: u64) -> anyhow::Result<Self> {
        let state = tempfile::tempdir()?;
        let memory = memory_mib.to_string();
        let lanes = BENCH_LANES.to_string();
        let args = ["--memory-mib", &memory, "--lanes-per-session", &lanes];
        let (child, addr) = spawn_daemon("ac-backend", &args, &state.path().join("backend"))?;
        let options = ConnectOptions::new(addr, state.path().join("backend/ca.pem"));
        Ok(Self { child, options, _state: state })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Child_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the daemon on `state_dir` logs: beside its state, or, with `AC_BENCH_LOG_DIR` set, in
/// that directory (kept after the run, whole, where the failover section prints only tails).
pub(crate) fn daemon_log(state_dir: &std::path::Path) -> std::path::PathBuf {
    match std::env::var_os("AC_BENCH_LOG_DIR") {
        Some(dir) => {
            let name = state_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            std::path::Path::new(&dir).join(format!("{name}.log"))
        }
        None => state_dir.with_extension("log"),
    }
}

/// Starts daemon `name` (a sibling binary) on a free loopback port with its state in
/// `state_dir` and `args` besides, quiet but for warnings, and waits for its address.
pub fn spawn_daemon(name: &str, args: &[&str], state_dir: &std::path::Path) -> anyhow::Result<(Child, SocketAddr)> {
    let exe = sibling(name)?;
    let addr_file = state_dir.with_extension("addr");
    // A port of its own on loopback, unless the caller names the address.
    let listen: &[&str] = if args.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
    let child = Command::new(&exe)
        .args(listen)
        .args(args)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("--addr-file")
        .arg(&addr_file)
        // `AC_BENCH_DAEMON_LOG=info` shows, say, each replica's takeover steps.
        .env("RUST_LOG", std::env::var("AC_BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn".into()))
        // Kept for a failing run to show (`failover.rs`); appended to, so that a daemon
        // started again (a replica after its kill) adds to what it logged before.
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(daemon_log(state_dir))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let start = Instant::now();
    while std::fs::read_to_string(&addr_file).map_or(true, |s| s.trim().is_empty()) {
        if start.elapsed() > Duration::from_secs(10) {
            bail!("{} did not start", exe.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, std::fs::read_to_string(&addr_file)?.trim().parse()?))
}

/// A binary built next to this one.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    if !path.exists() {
        bail!("{} not found: build it first (cargo build --release)", path.display());
    }
    Ok(path)
}

pub async fn connect(options: &ConnectOptions) -> anyhow::Result<Accelerator> {
    Ok(Accelerator::connect(options).await?)
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

pub use crate::stats::{median, percentiles};

pub fn mib(bytes: usize) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// CPU time (user + system, every thread) of process `pid` so far, in seconds, from
/// `/proc/PID/stat` (clock ticks of 1/100 s, Linux's `USER_HZ`).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds spent by a set of processes between `start` and `bytes_per_cpu_second`.
pub struct CpuMeter {
    pids: Vec<u32>,
    start: f64,
}

impl CpuMeter {
    /// Starts counting the CPU time of `pids` (this process is always included).
    pub fn start(others: &[u32]) -> Self {
        let mut pids = vec![std::process::id()];
        pids.extend_from_slice(others);
        let start = pids.iter().map(|p| cpu_seconds(*p)).sum();
        Self { pids, start }
    }

    /// `bytes` divided by the CPU seconds spent since the start.
    pub fn bytes_per_cpu_second(&self, bytes: usize) -> f64 {
        let spent: f64 = self.pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - self.start;
        bytes as f64 / spent.max(0.01)
    }
}

/// Asynchronous launches per second of `function`: a tenth of `launches` and a synchronize
/// first (warm-up), then `launches` and one synchronize, timed.
pub async fn launch_rate(
    acc: &Accelerator,
    function: &ac_frontend::Function,
    args: &[ac_frontend::KernelArg],
    launches: usize,
) -> anyhow::Result<f64> {
    let dims = ac_frontend::LaunchDims::new([1, 1, 1], [1, 1, 1]);
    for _ in 0..launches / 10 {
        function.launch(dims, args).await?;
    }
    acc.synchronize().await?;
    let start = Instant::now();
    for _ in 0..launches {
        function.launch(dims, args).await?;
    }
    acc.synchronize().await?;
    Ok(launches as f64 / start.elapsed().as_secs_f64())
}

/// One copy of `mib` MiB each way, MB/s (host to device, device to host), after one each way
/// (pages touched, staging warm), as the programs compared with do.
pub async fn copy_rates(acc: &Accelerator, mib: usize) -> anyhow::Result<(f64, f64)> {
    let bytes = mib << 20;
    let host = vec![7u8; bytes];
    let mut back = vec![0u8; bytes];
    let device = acc.alloc::<u8>(bytes).await?;
    device.copy_from_host(&host).await?;
    device.copy_to_host(&mut back).await?;
    let start = Instant::now();
    device.copy_from_host(&host).await?;
    let h2d = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    let start = Instant::now();
    device.copy_to_host(&mut back).await?;
    let d2h = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    device.free().await?;
    Ok((h2d, d2h))
}
