//! A site on emulated hosts (`crate::netns`): the manager on host 0, a backend of CPU devices on
//! host 1, programs on hosts 2 and up, deployed as the README says (certificates made by the
//! daemons themselves, `armctl host add` by address). Shared by `tests/network.rs` and
//! `tests/resumption.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::netns::{Bed, Proc};
use crate::workspace_binary;

/// The manager's host.
pub const ARM: usize = 0;
/// The backend's host.
pub const BACKEND: usize = 1;
/// The first program's host.
pub const PROGRAM: usize = 2;

/// A site: the manager on host 0, a backend with `devices` CPU accelerators on host 1,
/// programs on hosts 2 and up; the backend registered by address from a program's host (a
/// remote admin).
#[derive(Debug)]
pub struct Site {
    /// The hosts.
    pub bed: Bed,
    /// The daemons' state and the logs.
    pub dir: tempfile::TempDir,
    arm: Option<Proc>,
    /// The backend.
    pub backend: Option<Proc>,
}

impl Site {
    /// Starts the manager and the backend, and registers the backend.
    pub fn start(hosts: usize, devices: &str, arm_flags: &[&str]) -> Self {
        let bed = Bed::new(hosts, 1500);
        let dir = tempfile::tempdir().expect("temp dir");
        let backend = start_backend(&bed, dir.path(), devices);
        let mut site = Self { bed, dir, arm: None, backend: Some(backend) };
        let listen = site.bed.sock(ARM, 7000).to_string();
        site.start_arm(&listen, arm_flags, &[]);
        let backend_ca = site.path("backend/ca.pem");
        let addr = site.bed.sock(BACKEND, 7100).to_string();
        site.armctl(&["host", "add", &addr, "--backend-ca", &backend_ca, "--name", "gpu1"])
            .unwrap_or_else(|e| panic!("host add: {e}"));
        site
    }

    pub fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_string_lossy().into_owned()
    }

    pub fn start_arm(&mut self, listen: &str, flags: &[&str], env: &[(&str, String)]) {
        let state = self.path("arm");
        let mut args = vec!["--listen", listen, "--state-dir", &state];
        args.extend_from_slice(flags);
        self.arm = Some(self.bed.start_daemon(ARM, "arm-server", &args, env, self.dir.path(), "arm"));
    }

    pub fn stop_arm(&mut self) {
        self.arm.take();
    }

    /// `armctl` from the first program's host, by address.
    pub fn armctl(&self, args: &[&str]) -> Result<String, String> {
        let env = [
            ("ARM_ADDR", self.bed.sock(ARM, 7000).to_string()),
            ("ARM_CA_CERT", self.path("arm/ca.pem")),
            ("ARMCTL_CERT", self.path("arm/admin.pem")),
            ("ARMCTL_KEY", self.path("arm/admin.key")),
        ];
        self.bed.exec(PROGRAM, &workspace_binary("armctl").to_string_lossy(), args, &env)
    }

    /// `armctl host list --json`.
    pub fn hosts(&self) -> Vec<ac_proto::arm::HostView> {
        let out = self.armctl(&["host", "list", "--json"]).unwrap_or_else(|e| panic!("host list: {e}"));
        match serde_json::from_str(&out).expect("host list JSON") {
            ac_proto::arm::Response::Hosts(hosts) => hosts,
            other => panic!("host list answered {other:?}"),
        }
    }

    /// Accelerator states: (id, state, holder).
    pub fn accelerators(&self) -> Vec<(String, String, Option<String>)> {
        self.hosts().into_iter().flat_map(|h| h.accelerators).map(|a| (a.id, a.state, a.holder)).collect()
    }

    pub fn host_state(&self) -> String {
        self.hosts()[0].state.clone()
    }

    /// A program on host `host`, an ad-hoc job of `acpn` accelerators. Its rounds read the
    /// site's mark ([`Site::mark`]).
    pub fn program(&self, host: usize, acpn: u32, args: &[&str], extra: &[(&str, String)]) -> Proc {
        self.program_of(&workspace_binary("ac-net-client"), host, acpn, args, extra)
    }

    /// [`Site::program`] for any program `exe` (one linked with libac, or an interpreter), with
    /// the same environment; its output goes to a log named after it and its arguments.
    pub fn program_of(&self, exe: &Path, host: usize, acpn: u32, args: &[&str], extra: &[(&str, String)]) -> Proc {
        let mut env = vec![
            ("ARM_ADDR", self.bed.sock(ARM, 7000).to_string()),
            ("ARM_CA_CERT", self.path("arm/ca.pem")),
            ("ARM_ACPN", acpn.to_string()),
            ("ARM_NODE", format!("node{host}")),
            ("AC_NET_MARK", self.path("mark")),
        ];
        env.extend(extra.iter().cloned());
        let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let log = self.dir.path().join(format!("program-{host}-{name}-{}.log", args.join("-").replace('/', "_")));
        self.bed.spawn(host, exe, args, &env, &log)
    }

    /// Sets the mark that the programs' rounds read when they start to `n` (written whole, by a
    /// rename): a round that prints `mark n` began after this call.
    pub fn mark(&self, n: u64) {
        let fresh = self.path("mark.new");
        std::fs::write(&fresh, n.to_string()).expect("mark written");
        std::fs::rename(&fresh, self.path("mark")).expect("mark in place");
    }
}

/// A backend of CPU devices `devices` ("0,1") on the backend's host, its state in `dir`.
pub fn start_backend(bed: &Bed, dir: &Path, devices: &str) -> Proc {
    start_backend_with(bed, dir, devices, &[])
}

/// [`start_backend`] with more environment (`AC_BACKEND_SESSION_HOLD_MS`, say).
pub fn start_backend_with(bed: &Bed, dir: &Path, devices: &str, env: &[(&str, String)]) -> Proc {
    let state = dir.join("backend").to_string_lossy().into_owned();
    let listen = bed.sock(BACKEND, 7100).to_string();
    let args =
        ["--listen", &listen, "--state-dir", &state, "--device", "cpu", "--devices", devices, "--memory-mib", "256"];
    bed.start_daemon(BACKEND, "ac-backend", &args, env, dir, "backend")
}

/// Waits for a line holding `needle`; panics with the output after `limit`.
pub fn expect_line(proc: &mut Proc, needle: &str, limit: Duration) -> Instant {
    match proc.wait_for(needle, limit) {
        Some((at, _)) => at,
        None => panic!("no `{needle}` within {limit:?}; output:\n{}", proc.output()),
    }
}

/// Waits for a round that began after mark `n` was set ([`Site::mark`]): one that says `mark n`
/// or later. A line read now may have been printed long ago (before a partition, say); the mark
/// says when its round started, and so that the session worked after that moment.
pub fn expect_round_after_mark(proc: &mut Proc, n: u64, limit: Duration) -> Instant {
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let Some((at, line)) = proc.wait_for(" ok mark ", left) else {
            panic!("no round begun after mark {n} within {limit:?}; output:\n{}", proc.output());
        };
        let mark: u64 = line.rsplit(' ').next().and_then(|m| m.parse().ok()).expect("a mark");
        if mark >= n {
            return at;
        }
    }
}

/// A direct program's environment for the backend of `bed`, whose state is in `dir`.
pub fn backend_env(bed: &Bed, dir: &Path) -> [(&'static str, String); 2] {
    [
        ("AC_BACKEND_ADDR", bed.sock(BACKEND, 7100).to_string()),
        ("AC_CA_CERT", dir.join("backend/ca.pem").to_string_lossy().into_owned()),
    ]
}

/// The backend's device memory, free and total, as a program on host `from` reads it now.
pub fn device_memory(bed: &Bed, dir: &Path, from: usize) -> (u64, u64) {
    let log = dir.join("probe.log");
    let mut probe = bed.spawn(from, &workspace_binary("ac-net-client"), &["memory"], &backend_env(bed, dir), &log);
    let (_, line) = probe.wait_for("memory ", Duration::from_secs(10)).expect("memory line");
    memory_numbers(&line)
}

/// Free and total bytes from `ac-net-client memory`'s line `memory FREE TOTAL`.
pub fn memory_numbers(line: &str) -> (u64, u64) {
    let numbers: Vec<u64> = line.split_whitespace().skip(1).map(|n| n.parse().expect("number")).collect();
    (numbers[0], numbers[1])
}

/// Seconds from the backend's "session held" (its control connection timed out) to "not
/// resumed within its hold", by the timestamps of those lines in its log `dir/backend.log`, for
/// the first session held: the hold it gave the session, measured by the backend itself (a probe
/// from outside sees only when the memory was free, not how long it stayed held). Panics when
/// either line is missing.
pub fn hold_logged(dir: &Path) -> f64 {
    let log = std::fs::read_to_string(dir.join("backend.log")).expect("backend log");
    let held = log
        .lines()
        .find(|l| l.contains("connection lost; session held"))
        .unwrap_or_else(|| panic!("no session held in:\n{log}"));
    // The same session's end (another session, a probe's, may be held meanwhile).
    let session = held.split_whitespace().find(|w| w.starts_with("session=")).expect("the session's id");
    let ended = log
        .lines()
        .find(|l| l.contains("not resumed within its hold") && l.split_whitespace().any(|w| w == session))
        .unwrap_or_else(|| panic!("no end of the hold of {session} in:\n{log}"));
    let at = |line: &str| log_seconds(line).unwrap_or_else(|| panic!("no timestamp in: {line}"));
    // Across midnight (UTC) the day's seconds start again.
    let span = at(ended) - at(held);
    if span < -43_200.0 {
        span + 86_400.0
    } else {
        span
    }
}

/// The second of the day (UTC) of a daemon's log line, which `tracing` begins with its time
/// (`2026-12-01T20:30:01.123456Z`).
fn log_seconds(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let (h, m, s) =
        (parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?);
    Some(h * 3600.0 + m * 60.0 + s)
}
