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

    /// Three replicas of one manager, set up as docs/admin.md says: the first one's CA and
    /// admin certificate copied to the others before they first start, each with a signing
    /// key of its own.
    pub(crate) fn start_replicas() -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        let dirs: Vec<_> = (1..=3).map(|id| root.path().join(format!("r{id}"))).collect();
        let keys = arm_server::keys::prepare_replicas(&dirs).context("the replicas' directories")?;
        std::fs::write(root.path().join("keys"), keys.join("\n"))?;
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

/// The `[replication]` section of replica `id` (1-3), the replicas' public keys in `keys`.
fn replication(id: usize, keys: &[String]) -> anyhow::Result<String> {
    let members = (1..=3)
        .map(|m| {
            Ok(arm_server::config::Member {
                id: m as u64,
                raft: format!("{}:7100", IPS[m - 1]).parse()?,
                api: format!("{}:7000", IPS[m - 1]).parse()?,
                key: keys[m - 1].clone(),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    // The shipped default (the takeover measured is a site's), unless
    // `AC_BENCH_ELECTION_TIMEOUT_MS` asks for another, to compare the two in one session.
    let election_timeout_ms = match std::env::var("AC_BENCH_ELECTION_TIMEOUT_MS") {
        Ok(ms) => ms.parse().context("AC_BENCH_ELECTION_TIMEOUT_MS: milliseconds")?,
        Err(_) => arm_server::config::DEFAULT_ELECTION_TIMEOUT_MS,
    };
    let config = arm_server::config::ReplicationConfig { id: id as u64, members, join: false, election_timeout_ms };
    Ok(config.to_toml()?)
}

/// Starts replica `id` on its state directory `dir` (its keys beside it, in `keys`).
pub(crate) fn spawn_replica(dir: &Path, id: usize) -> anyhow::Result<Child> {
    let keys_file = dir.parent().context("a replica's directory has a parent")?.join("keys");
    let keys: Vec<String> = std::fs::read_to_string(&keys_file)?.lines().map(str::to_string).collect();
    let config = dir.join("arm.toml");
    std::fs::write(&config, replication(id, &keys)?)?;
    let listen = format!("{}:7000", IPS[id - 1]);
    let config = config.to_string_lossy().to_string();
    Ok(spawn_daemon("arm-server", &["--listen", &listen, "--config", &config], dir)?.0)
}
