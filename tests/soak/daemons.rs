//! The soak's daemons as real processes: one `arm-server` and CPU-device `ac-backend`s, each
//! restarted (`kill -9`, then started again on the same port and state directory) on the
//! driver's word, and their resident memory and open descriptors read from `/proc`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ac_frontend::arm::ArmClient;
use ac_proto::arm::Request;
use serde::Serialize;

use crate::{admin_of, ArmProcess, BackendProcess};

/// The manager's configuration: ended jobs are purged after a minute instead of a week, so that
/// its memory reaches a steady state within the soak (the job history kept for `armctl job list
/// --all` is data, not a leak) and the purge itself is soaked.
const ARM_CONFIG: &str = "job_retention_s = 60\n";

/// A daemon's resident memory and open file descriptors at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcSample {
    /// The process.
    pub pid: u32,
    /// `VmRSS` from `/proc/PID/status`, KiB.
    pub rss_kib: u64,
    /// Entries of `/proc/PID/fd`.
    pub fds: u64,
}

impl ProcSample {
    /// Reads process `pid`'s figures; `None` once it is gone.
    pub fn read(pid: u32) -> Option<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        Some(Self { pid, rss_kib, fds })
    }
}

/// The manager and the backends of the soak.
#[derive(Debug)]
pub struct Daemons {
    dir: PathBuf,
    devices: u32,
    arm: Option<ArmProcess>,
    /// The manager's address (kept across its restart).
    pub arm_addr: SocketAddr,
    backends: Vec<Option<BackendProcess>>,
}

impl Daemons {
    /// Starts the manager and `backends` backends of `devices` CPU devices each under `dir`,
    /// and registers the backends as `h0`, `h1`, ...
    pub async fn start(dir: &Path, backends: usize, devices: u32) -> Self {
        std::fs::create_dir_all(dir.join("arm")).expect("manager state directory");
        let arm = ArmProcess::start_with_config(&dir.join("arm"), "127.0.0.1:0", ARM_CONFIG);
        let mut daemons =
            Self { dir: dir.to_path_buf(), devices, arm_addr: arm.addr, arm: Some(arm), backends: vec![] };
        for i in 0..backends {
            let process = daemons.start_backend(i, "127.0.0.1:0");
            daemons.backends.push(Some(process));
        }
        let admin = daemons.admin().await;
        for (i, b) in daemons.backends.iter().flatten().enumerate() {
            let request = Request::HostAdd {
                addr: b.addr,
                name: format!("h{i}"),
                server_name: "127.0.0.1".into(),
                ca_pem: std::fs::read_to_string(b.dir.join("ca.pem")).expect("backend CA"),
                labels: vec![],
            };
            admin.request(request).await.expect("host added");
        }
        daemons
    }

    fn start_backend(&self, i: usize, listen: &str) -> BackendProcess {
        let dir = self.dir.join(format!("b{i}"));
        std::fs::create_dir_all(&dir).expect("backend state directory");
        let devices = (0..self.devices).map(|d| d.to_string()).collect::<Vec<_>>().join(",");
        BackendProcess::start_with(&dir, listen, &["--devices", &devices])
    }

    /// The manager's state directory.
    pub fn arm_dir(&self) -> PathBuf {
        self.dir.join("arm")
    }

    /// An admin client of the manager (it reconnects by itself after a restart).
    pub async fn admin(&self) -> ArmClient {
        admin_of(self.arm_addr, &self.arm_dir()).await
    }

    /// How many backends there are.
    pub fn backends(&self) -> usize {
        self.backends.len()
    }

    /// `kill -9` of backend `i`, then the same backend again on its port and state directory.
    pub fn restart_backend(&mut self, i: usize) {
        let old = self.backends[i].take().expect("backend running");
        let addr = old.addr;
        old.kill_9();
        self.backends[i] = Some(self.start_backend(i, &addr.to_string()));
    }

    /// `kill -9` of the manager, then the manager again on its port and state directory.
    pub fn restart_manager(&mut self) {
        if let Some(arm) = self.arm.take() {
            arm.kill_9();
        }
        self.arm = Some(ArmProcess::start_with_config(&self.arm_dir(), &self.arm_addr.to_string(), ARM_CONFIG));
    }

    /// Every daemon's name and current figures: `arm-server`, then `h0`, `h1`, ...
    pub fn samples(&self) -> Vec<(String, Option<ProcSample>)> {
        let arm = self.arm.as_ref().map(|a| a.child.id());
        let backends =
            self.backends.iter().enumerate().map(|(i, b)| (format!("h{i}"), b.as_ref().map(|b| b.child.id())));
        std::iter::once(("arm-server".to_string(), arm))
            .chain(backends)
            .map(|(name, pid)| (name, pid.and_then(ProcSample::read)))
            .collect()
    }
}
