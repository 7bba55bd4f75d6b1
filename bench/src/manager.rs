//! The manager a benchmark measures: the `arm-server` binary in a process of its own (its CPU
//! time and memory its own), or three of them as the replicas of one manager, on loopback
//! addresses of their own.

use std::path::Path;
use std::process::Child;

use ac_frontend::arm::ArmOptions;
use anyhow::Context;

use crate::setup::{cpu_seconds, spawn_daemon};

/// The manager: the `arm-server` binary in a process of its own (its CPU time and memory its
/// own), or three of them as the replicas of one manager (`failover.rs`).
pub(crate) struct Manager {
    pub(crate) children: Vec<Option<Child>>,
    pub(crate) addrs: Vec<std::net::SocketAddr>,
    /// Each replica's state directory (one for a single manager), under `_root`.
    pub(crate) dirs: Vec<std::path::PathBuf>,
    /// Removed with the manager.
    pub(crate) _root: tempfile::TempDir,
}

impl Manager {
    pub(crate) fn start() -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join("arm");
        let (child, addr) = spawn_daemon("arm-server", &[], &dir)?;
        Ok(Self { children: vec![Some(child)], addrs: vec![addr], dirs: vec![dir], _root: root })
    }

    /// Three replicas of one manager, set up as docs/admin.md says: the first one's CA, admin
    /// certificate and signing key copied to the others before they first start.
    pub(crate) fn start_replicas() -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        let dirs: Vec<_> = (1..=3).map(|id| root.path().join(format!("r{id}"))).collect();
        ac_proto::tls::ensure_self_signed(&dirs[0], &[], &["admin"])?;
        std::fs::write(dirs[0].join("signing.key"), ac_proto::capability::Signer::generate_pkcs8()?)?;
        for file in ["cert.pem", "key.pem"] {
            std::fs::remove_file(dirs[0].join(file))?;
        }
        for dir in &dirs[1..] {
            std::fs::create_dir_all(dir)?;
            for file in ["ca.pem", "ca.key", "admin.pem", "admin.key", "signing.key"] {
                std::fs::copy(dirs[0].join(file), dir.join(file)).with_context(|| format!("copying {file}"))?;
            }
        }
        let children = (1..=3).map(|id| spawn_replica(&dirs[id - 1], id).map(Some)).collect::<anyhow::Result<_>>()?;
        let addrs = IPS.iter().map(|ip| format!("{ip}:7000").parse()).collect::<Result<_, _>>()?;
        Ok(Self { children, addrs, dirs, _root: root })
    }

    /// What programs are given: every replica's address.
    pub(crate) fn options(&self) -> ArmOptions {
        let mut options = ArmOptions::new(self.addrs[0], self.dirs[0].join("ca.pem"));
        options.alternates = self.addrs[1..].to_vec();
        options
    }

    pub(crate) fn admin_options(&self) -> ArmOptions {
        let mut options = self.options();
        options.identity = Some((self.dirs[0].join("admin.pem"), self.dirs[0].join("admin.key")));
        options
    }

    /// CPU seconds so far (every replica's) and resident memory in KiB (the largest).
    pub(crate) fn usage(&self) -> (f64, u64) {
        let mut cpu = 0.0;
        let mut rss = 0;
        for child in self.children.iter().flatten() {
            let pid = child.id();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let resident = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            cpu += cpu_seconds(pid);
            rss = rss.max(resident);
        }
        (cpu, rss)
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The replicas' addresses: programs on port 7000, Raft on 7100.
const IPS: [&str; 3] = ["127.0.56.1", "127.0.56.2", "127.0.56.3"];

/// The `[replication]` section of replica `id` (1-3).
fn replication(id: usize) -> String {
    let members: Vec<String> = (1..=3)
        .map(|m| format!("{{ id = {m}, raft = \"{ip}:7100\", api = \"{ip}:7000\" }}", ip = IPS[m - 1]))
        .collect();
    format!("[replication]\nid = {id}\nmembers = [{}]\n", members.join(", "))
}

/// Starts replica `id` on its state directory `dir`.
pub(crate) fn spawn_replica(dir: &Path, id: usize) -> anyhow::Result<Child> {
    let config = dir.join("arm.toml");
    std::fs::write(&config, replication(id))?;
    let listen = format!("{}:7000", IPS[id - 1]);
    let config = config.to_string_lossy().to_string();
    Ok(spawn_daemon("arm-server", &["--listen", &listen, "--config", &config], dir)?.0)
}
