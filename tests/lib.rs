// shape: the test bed every scenario shares (daemons, namespaces, certificates); split by what
// a scenario needs would scatter the one place a test's set-up is read.
//! Helpers for the end-to-end tests: a real backend on a loopback port chosen by the OS, real
//! clients, and a raw QUIC client that can send what the SDK never would.

pub mod copy_kernels;
pub mod cuda;
pub mod dft_kernels;
pub mod epilogue_kernels;
pub mod kernels;
pub mod libac;
pub mod lu_kernels;
pub mod netns;
pub mod prometheus;
pub mod qr_kernels;
pub mod site;
pub mod slurm;
pub mod soak;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ac_backend::{BackendConfig, RunningBackend};
use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::backend::{Preamble, ALPN};
use ac_proto::transport::Tuning;
use ac_proto::{tls, transport};

/// A backend serving in this process, with its state directory.
#[derive(Debug)]
pub struct TestBackend {
    /// The running daemon.
    pub backend: RunningBackend,
    _state: tempfile::TempDir,
}

/// Transport settings that notice dead peers quickly.
pub fn quick_tuning() -> Tuning {
    Tuning { idle_timeout_ms: 1_500, keep_alive_ms: 300, ..Tuning::default() }
}

impl TestBackend {
    /// Starts a CPU-device backend with `memory_mib` of device memory.
    pub async fn start(memory_mib: u64) -> Self {
        Self::start_with(|c| c.memory_mib = memory_mib).await
    }

    /// Starts a backend after `adjust` changed the test defaults.
    pub async fn start_with(adjust: impl FnOnce(&mut BackendConfig)) -> Self {
        let state = tempfile::tempdir().expect("temp dir");
        let mut config = BackendConfig {
            listen: restartable_addr(),
            state_dir: state.path().to_path_buf(),
            memory_mib: 256,
            transport: quick_tuning(),
            // Tests that stripe over lanes say how many, on any machine (the default follows
            // the host's cores).
            lanes_per_session: Some(8),
            ..BackendConfig::default()
        };
        adjust(&mut config);
        let backend = ac_backend::start(config).await.expect("backend starts");
        Self { backend, _state: state }
    }

    /// Options to connect to it.
    pub fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new(self.backend.addr(), self.backend.ca_cert());
        options.tuning = quick_tuning();
        // One lane on any machine (the default follows the cores): tests that mean more set it.
        options.lanes = 1;
        options
    }

    /// An SDK client without a capability, as an error when the backend refuses it.
    pub async fn connect_raw(&self) -> Result<Accelerator, ac_frontend::Error> {
        Accelerator::connect(&self.options()).await
    }

    /// A connected SDK client.
    pub async fn connect(&self) -> Accelerator {
        Accelerator::connect(&self.options()).await.expect("client connects")
    }

    /// Waits until `check` holds, for at most `limit`.
    pub async fn eventually(&self, limit: Duration, check: impl Fn(&RunningBackend) -> bool) -> bool {
        eventually(limit, || async { check(&self.backend) }).await
    }

    /// A raw QUIC connection with the backend's ALPN and no hello sent yet.
    pub async fn raw_connection(&self) -> quinn::Connection {
        raw_backend_connection(self.backend.addr(), self.backend.ca_cert()).await.expect("handshake")
    }

    /// A raw connection whose first stream has sent the preamble and `hello_frame` bytes.
    pub async fn raw_session(
        &self,
        after_preamble: &[u8],
    ) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
        let conn = self.raw_connection().await;
        let (mut send, recv) = conn.open_bi().await.expect("stream");
        let mut bytes = Preamble::CURRENT.to_bytes().to_vec();
        bytes.extend_from_slice(after_preamble);
        send.write_all(&bytes).await.expect("write");
        (conn, send, recv)
    }
}

/// A raw QUIC connection to the backend at `addr` (whose CA is `ca`), with the backend's ALPN
/// and no hello sent yet.
pub async fn raw_backend_connection(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
) -> Result<quinn::Connection, quinn::ConnectionError> {
    let roots = tls::load_roots(ca).expect("CA");
    let crypto = Arc::new(tls::client_crypto(roots, ALPN).expect("client TLS"));
    let endpoint = transport::client_endpoint(addr, Some(crypto), &quick_tuning()).expect("endpoint");
    endpoint.connect(addr, "127.0.0.1").expect("connect").await
}

/// Polls `check` until it holds or `limit` has passed; returns whether it held.
pub async fn eventually<F: std::future::Future<Output = bool>>(limit: Duration, mut check: impl FnMut() -> F) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check().await
}

/// Waits for `conn` to be closed by the peer and returns (code, reason).
pub async fn closed_by_peer(conn: &quinn::Connection) -> (u64, String) {
    match tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("closed in time") {
        quinn::ConnectionError::ApplicationClosed(c) => {
            (c.error_code.into_inner(), String::from_utf8_lossy(&c.reason).into_owned())
        }
        other => panic!("expected an application close, got {other}"),
    }
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 10_007) as f32 * 0.25).collect()
}

/// A resource manager with registered CPU-device backends, all in this process.
#[derive(Debug)]
pub struct TestCluster {
    /// The manager.
    pub arm: arm_server::RunningArm,
    /// The backends, registered as `h0`, `h1`, ...
    pub backends: Vec<TestBackend>,
    /// The manager's state directory (kept for restarts).
    pub state: tempfile::TempDir,
}

/// Where the kernel's own choice of ports begins (`ip_local_port_range`).
const EPHEMERAL_LOW_DEFAULT: u16 = 32_768;

/// The lowest port [`restartable_addr`] picks.
const FIRST_FIXED_PORT: u16 = 10_000;

/// A loopback address on a port free now for TCP and UDP alike, below the kernel's ephemeral
/// range, so that no client socket is given it meanwhile: a daemon restarted on the address of
/// its first life finds its port free again. (A port the kernel picked for the first life may go
/// to any other test's client socket: a backend's lane port once did, "Address already in use".)
pub fn restartable_addr() -> std::net::SocketAddr {
    use std::hash::{BuildHasher, Hasher};
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_LOW_DEFAULT);
    let span = u64::from(low.saturating_sub(FIRST_FIXED_PORT).max(1));
    let mut seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
    loop {
        let port = FIRST_FIXED_PORT + (seed % span) as u16;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        if std::net::TcpListener::bind(addr).is_ok() && std::net::UdpSocket::bind(addr).is_ok() {
            return addr;
        }
        seed = seed.rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15;
    }
}

/// `listen`, with a port of [`restartable_addr`]'s when it asks for any port (`:0`).
fn restartable(listen: &str) -> String {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.port() == 0 && addr.ip().is_loopback() => restartable_addr().to_string(),
        _ => listen.to_string(),
    }
}

/// The resource manager's test settings: short leases and time-outs.
pub fn arm_config(dir: &std::path::Path) -> arm_server::ArmConfig {
    arm_server::ArmConfig {
        listen: restartable_addr(),
        state_dir: dir.to_path_buf(),
        lease_ms: 1_000,
        backend_timeout_ms: 1_000,
        walltime_grace_s: 0,
        ..arm_server::ArmConfig::default()
    }
}

impl TestCluster {
    /// Starts a manager and `n` backends, and registers them.
    pub async fn start(n: usize) -> Self {
        Self::start_with(n, |_| {}).await
    }

    /// The same, with the manager's configuration adjusted first.
    pub async fn start_with(n: usize, adjust: impl FnOnce(&mut arm_server::ArmConfig)) -> Self {
        let state = tempfile::tempdir().expect("temp dir");
        let mut config = arm_config(state.path());
        adjust(&mut config);
        let arm = arm_server::start(config).await.expect("arm starts");
        let mut backends = Vec::new();
        for _ in 0..n {
            backends.push(TestBackend::start(64).await);
        }
        let cluster = Self { arm, backends, state };
        for i in 0..n {
            cluster.add_host(i).await;
        }
        cluster
    }

    /// Registers backend `i` as `h{i}`.
    pub async fn add_host(&self, i: usize) {
        let b = &self.backends[i].backend;
        let request = ac_proto::arm::Request::HostAdd {
            addr: b.addr(),
            name: format!("h{i}"),
            server_name: "127.0.0.1".into(),
            ca_pem: std::fs::read_to_string(b.ca_cert()).expect("backend CA"),
            labels: vec![],
        };
        self.admin().await.request(request).await.expect("host added");
    }

    /// Options to reach the manager without credentials.
    pub fn arm_options(&self) -> ac_frontend::arm::ArmOptions {
        let mut options = ac_frontend::arm::ArmOptions::new(self.arm.addr(), self.arm.ca_cert());
        options.tuning = quick_tuning();
        options
    }

    /// An admin client (mutual TLS with the admin certificate).
    pub async fn admin(&self) -> ac_frontend::arm::ArmClient {
        let mut options = self.arm_options();
        options.identity = Some(self.arm.admin_identity());
        ac_frontend::arm::ArmClient::connect(options).await.expect("admin connects")
    }

    /// Submits a job for `alice` without a walltime; returns its credential.
    pub async fn submit(&self, id: &str, nodes: &[&str], acpn: u32) -> String {
        self.submit_as(id, nodes, acpn, "alice", 0).await
    }

    /// Submits a job for `user` with a walltime (seconds, 0: none); returns its credential.
    pub async fn submit_as(&self, id: &str, nodes: &[&str], acpn: u32, user: &str, walltime_s: u64) -> String {
        submit_job(&self.admin().await, id, nodes, acpn, user, walltime_s).await
    }

    /// Submits a job of `acpn` on `node` for `user` that pre-allocates up to `peak` (spare units
    /// other jobs may borrow); returns its credential.
    pub async fn submit_with_peak(&self, id: &str, node: &str, acpn: u32, user: &str, peak: u32) -> String {
        let submit = ac_proto::arm::Request::JobSubmit {
            id: id.into(),
            nodes: vec![node.into()],
            acpn,
            user: user.into(),
            walltime_s: 0,
            group: None,
            reservation: None,
            peak: Some(peak),
        };
        match self.admin().await.request(submit).await.expect("submitted") {
            ac_proto::arm::Response::Submitted { credential, .. } => credential,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Session options for a job's node.
    pub fn session_options(&self, job: &str, credential: &str, node: &str) -> ac_frontend::SessionOptions {
        ac_frontend::SessionOptions {
            arm: self.arm_options(),
            job: ac_proto::arm::JobAuth::Credential { job: job.into(), secret: credential.into() },
            node: node.into(),
            init_timeout: Some(Duration::from_secs(10)),
            stripes: 1,
            progress: false,
        }
    }

    /// A job's view.
    pub async fn job(&self, id: &str) -> ac_proto::arm::JobView {
        match self.admin().await.request(ac_proto::arm::Request::JobShow { id: id.into() }).await.expect("job") {
            ac_proto::arm::Response::Job(view) => *view,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Every host's view.
    pub async fn hosts(&self) -> Vec<ac_proto::arm::HostView> {
        match self.admin().await.request(ac_proto::arm::Request::HostList).await.expect("hosts") {
            ac_proto::arm::Response::Hosts(hosts) => hosts,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Runs the `armctl` binary against `c`'s manager, with its admin certificate or with none;
/// returns the exit code, stdout and stderr.
pub fn armctl(c: &TestCluster, admin: bool, args: &[&str]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(workspace_binary("armctl"));
    cmd.args(["--arm", &c.arm.addr().to_string()]).arg("--ca").arg(c.arm.ca_cert());
    let (cert, key) = c.arm.admin_identity();
    if admin {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    } else {
        // No identity, and no embedded default's beside it.
        cmd.current_dir(std::env::temp_dir());
    }
    let out = cmd.args(args).output().expect("armctl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Submits a job through an admin client; returns its credential.
pub async fn submit_job(
    admin: &ac_frontend::arm::ArmClient,
    id: &str,
    nodes: &[&str],
    acpn: u32,
    user: &str,
    walltime_s: u64,
) -> String {
    let request = ac_proto::arm::Request::JobSubmit {
        id: id.into(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        acpn,
        user: user.into(),
        walltime_s,
        group: None,
        reservation: None,
        peak: None,
    };
    match admin.request(request).await.expect("submitted") {
        ac_proto::arm::Response::Submitted { credential, .. } => credential,
        other => panic!("unexpected {other:?}"),
    }
}

/// Checks that an accelerator computes (a small saxpy, verified).
pub async fn computes(acc: &Accelerator) -> Result<(), ac_frontend::Error> {
    let x = acc.alloc_from(&[1.0f32, 2.0, 3.0]).await?;
    let y = acc.alloc_from(&[1.0f32, 1.0, 1.0]).await?;
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    saxpy.launch(ac_frontend::LaunchDims::linear(3, 32), &[2.0f32.into(), x.arg(), y.arg(), 3u64.into()]).await?;
    assert_eq!(y.to_vec().await?, vec![3.0, 5.0, 7.0]);
    Ok(())
}

/// The error an accelerator's calls meet once its capability's revocation (which travels to the
/// backend after the manager's answer) has arrived; panics if none comes within 5 s.
pub async fn revoked_eventually(acc: &Accelerator) -> ac_frontend::Error {
    let failing = async {
        loop {
            match computes(acc).await {
                Err(e) => return e,
                Ok(()) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), failing).await.expect("revoked within 5 s")
}

/// A binary of the workspace, built next to the test executables.
pub fn workspace_binary(name: &str) -> std::path::PathBuf {
    // Tests run from target/<profile>/deps, benchmarks from target/<profile>.
    let exe = std::env::current_exe().expect("test executable");
    let dirs = exe.ancestors().skip(1).take(2);
    let found = dirs.map(|d| d.join(name)).find(|p| p.exists());
    found.unwrap_or_else(|| panic!("{name} is not built (cargo build --workspace --release)"))
}

/// Starts daemon `binary` with `args` and environment `envs`, its state in `dir`, and waits for
/// the address it writes to `addr_file`.
#[allow(clippy::zombie_processes)] // the child goes to a struct whose `Drop` reaps it
fn spawn_daemon(
    binary: &str,
    args: &[std::ffi::OsString],
    envs: &[(&str, &str)],
    dir: &std::path::Path,
    addr_file: &std::path::Path,
) -> (std::process::Child, std::net::SocketAddr) {
    let child = std::process::Command::new(workspace_binary(binary))
        .args(args)
        .arg("--state-dir")
        .arg(dir)
        .arg("--addr-file")
        .arg(addr_file)
        // The log stays beside the state, for a failing test to show.
        .env("RUST_LOG", "info,openraft=warn")
        .envs(envs.iter().copied())
        .stderr(daemon_log(dir, binary))
        .spawn()
        .unwrap_or_else(|e| panic!("{binary} starts: {e}"));
    (child, wait_for_address(addr_file, binary))
}

/// The log file of daemon `binary` in its state directory `dir`, appended to across restarts.
fn daemon_log(dir: &std::path::Path, binary: &str) -> std::fs::File {
    let path = dir.join(format!("{binary}.log"));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The last `lines` lines of a file, or what kept it from being read.
pub fn tail(path: &std::path::Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// Says why a test cannot run here (not root, a tool missing) before its caller returns, and
/// so passes it; but where the environment variable `required` is set, fails it instead:
/// `scripts/test` sets `AC_NETNS_REQUIRED` and `AC_PACKAGES_REQUIRED` (as it sets
/// `AC_NVRTC_REQUIRED`), so that a skip in CI cannot pass what never ran.
pub fn skip(required: &str, why: &str) {
    assert!(std::env::var_os(required).is_none(), "{required} is set, but this test cannot run here: {why}");
    eprintln!("SKIPPED: {why} (with {required} set, this fails)");
}

/// Registers `backends` as `h0`, `h1`, ... with a manager, through an admin client.
pub async fn register_hosts(admin: &ac_frontend::arm::ArmClient, backends: &[TestBackend]) {
    for (i, b) in backends.iter().enumerate() {
        let request = ac_proto::arm::Request::HostAdd {
            addr: b.backend.addr(),
            name: format!("h{i}"),
            server_name: "127.0.0.1".into(),
            ca_pem: std::fs::read_to_string(b.backend.ca_cert()).expect("backend CA"),
            labels: vec![],
        };
        admin.request(request).await.expect("host added");
    }
}

/// The address a daemon writes to `addr_file` once it listens; panics after 10 s without one.
fn wait_for_address(addr_file: &std::path::Path, daemon: &str) -> std::net::SocketAddr {
    let start = Instant::now();
    loop {
        if let Some(addr) = std::fs::read_to_string(addr_file).ok().and_then(|text| text.trim().parse().ok()) {
            return addr;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{daemon} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL and reap, as a crash (nothing if it already ended).
fn kill_9(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// An admin client of the manager whose state directory is `dir`.
pub async fn admin_of(addr: std::net::SocketAddr, dir: &std::path::Path) -> ac_frontend::arm::ArmClient {
    let mut options = ac_frontend::arm::ArmOptions::new(addr, dir.join("ca.pem"));
    options.identity = Some((dir.join("admin.pem"), dir.join("admin.key")));
    ac_frontend::arm::ArmClient::connect(options).await.expect("admin connects")
}

/// A job as the manager shows it to an admin.
pub async fn job_of(admin: &ac_frontend::arm::ArmClient, id: &str) -> ac_proto::arm::JobView {
    match admin.request(ac_proto::arm::Request::JobShow { id: id.into() }).await.expect("job shown") {
        ac_proto::arm::Response::Job(view) => *view,
        other => panic!("unexpected {other:?}"),
    }
}

/// An `arm-server` process.
#[derive(Debug)]
pub struct ArmProcess {
    /// The process.
    pub child: std::process::Child,
    /// Its address.
    pub addr: std::net::SocketAddr,
}

impl ArmProcess {
    /// Starts `arm-server` on `listen` with its state in `dir`.
    pub fn start(dir: &std::path::Path, listen: &str) -> Self {
        Self::start_with_config(dir, listen, "")
    }

    /// The same, with a TOML configuration (written to `dir/arm.toml`).
    pub fn start_with_config(dir: &std::path::Path, listen: &str, toml: &str) -> Self {
        Self::start_with_lease(dir, listen, toml, 3_000)
    }

    /// The same, with programs' leases of `lease_ms` (3 s above: tests of leases end soon).
    pub fn start_with_lease(dir: &std::path::Path, listen: &str, toml: &str, lease_ms: u64) -> Self {
        let addr_file = dir.join(format!("addr-{}", std::process::id()));
        let _ = std::fs::remove_file(&addr_file);
        let config = dir.join("arm.toml");
        std::fs::write(&config, toml).expect("configuration written");
        let mut args: Vec<std::ffi::OsString> = vec!["--config".into(), config.into()];
        let lease_ms = lease_ms.to_string();
        let listen = restartable(listen);
        args.extend(["--listen", &listen, "--lease-ms", &lease_ms, "--backend-timeout-ms", "1000"].map(Into::into));
        let (child, addr) = spawn_daemon("arm-server", &args, &[], dir, &addr_file);
        Self { child, addr }
    }

    /// SIGKILL, as a crash.
    pub fn kill_9(mut self) {
        kill_9(&mut self.child);
    }

    /// SIGTERM, as a service manager stops it, and waits for it to exit (at most 10 s), so that
    /// everything it writes on its way out (its log, a replica's deferred applies) is written.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(sent.success(), "SIGTERM to the manager");
        let start = std::time::Instant::now();
        while self.child.try_wait().expect("the manager's status").is_none() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "the manager did not exit within 10 s of SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for ArmProcess {
    fn drop(&mut self) {
        kill_9(&mut self.child);
    }
}

/// Busy threads on every core while alive: the ordering tests run on a loaded machine, where
/// late wake-ups expose work that reaches the device out of order.
#[derive(Debug)]
pub struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// One spinning thread per core.
    pub fn start() -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The pattern from the ordering issue, as a program writes it: `threads` threads share one
/// handle; each, `rounds` times, uploads `x` and `y` (`elements` floats each), launches `saxpy`
/// and copies `y` back, then drops both buffers without synchronizing. Returns the number of
/// wrong elements seen.
pub fn saxpy_on_shared_handle(
    acc: &ac_frontend::blocking::Accelerator,
    threads: usize,
    rounds: usize,
    elements: usize,
) -> Result<u64, ac_frontend::Error> {
    let saxpy = acc.builtin()?.function("saxpy")?;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let saxpy = &saxpy;
                scope.spawn(move || -> Result<u64, ac_frontend::Error> {
                    let mut wrong = 0;
                    for round in 0..rounds {
                        let seed = (t * rounds + round) as u32;
                        let (x, y) = (pattern(elements, seed), pattern(elements, seed + 7));
                        let (dx, dy) = (acc.alloc_from(&x)?, acc.alloc_from(&y)?);
                        let args = [2.0f32.into(), dx.arg(), dy.arg(), (elements as u64).into()];
                        saxpy.launch(ac_frontend::LaunchDims::linear(elements as u64, 256), &args)?;
                        let got = dy.to_vec()?;
                        wrong +=
                            got.iter().zip(x.iter().zip(&y)).filter(|(g, (x, y))| **g != *y + 2.0 * *x).count() as u64;
                    }
                    Ok(wrong)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker thread")).sum()
    })
}

/// An `ac-backend` process (CPU device) with its state in a directory of the caller's, so that
/// it can be killed and started again as the same host.
#[derive(Debug)]
pub struct BackendProcess {
    /// The process.
    pub child: std::process::Child,
    /// Its address.
    pub addr: std::net::SocketAddr,
    /// Its state directory.
    pub dir: std::path::PathBuf,
}

impl BackendProcess {
    /// Starts `ac-backend` on `listen` with its state (certificates, trust, revocations) in `dir`.
    pub fn start(dir: &std::path::Path, listen: &str) -> Self {
        Self::spawn(dir, listen, &[], &[])
    }

    /// The same, with more command-line arguments (`--devices 0,1,2,3`).
    pub fn start_with(dir: &std::path::Path, listen: &str, extra: &[&str]) -> Self {
        Self::spawn(dir, listen, extra, &[])
    }

    /// The same, with these environment variables (`AC_BACKEND_*` settings).
    pub fn start_with_env(dir: &std::path::Path, listen: &str, envs: &[(&str, &str)]) -> Self {
        Self::spawn(dir, listen, &[], envs)
    }

    fn spawn(dir: &std::path::Path, listen: &str, extra: &[&str], envs: &[(&str, &str)]) -> Self {
        let addr_file = dir.join("addr");
        let _ = std::fs::remove_file(&addr_file);
        let listen = restartable(listen);
        let mut args: Vec<std::ffi::OsString> =
            ["--listen", &listen, "--device", "cpu", "--memory-mib", "64"].map(Into::into).to_vec();
        args.extend(extra.iter().map(Into::into));
        let (child, addr) = spawn_daemon("ac-backend", &args, envs, dir, &addr_file);
        Self { child, addr, dir: dir.to_path_buf() }
    }

    /// SIGKILL, as a crash.
    pub fn kill_9(mut self) {
        kill_9(&mut self.child);
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        kill_9(&mut self.child);
    }
}
