//! The soak's report: what ran, how it ended, what was left behind, and the verdict.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::daemons::ProcSample;

/// Resident memory a daemon may gain between the sample after warm-up and the end, MiB.
///
/// Why 64: the allocator keeps some freed memory, and a live program's buffers (up to 2 MiB per
/// accelerator) and connections are in the baseline sample but not in the end one; a leak of
/// one program's buffers, or a few KiB per program or session, over the hundreds to thousands
/// of programs of a soak exceeds it.
pub const RSS_BOUND_MIB: u64 = 64;
/// Open descriptors a daemon may gain between the sample after warm-up and the end.
///
/// Why 16: a backend holds a socket per live bulk lane (2 per session), the manager its store and
/// sockets; the baseline is taken mid-churn with up to a few dozen lanes open. One descriptor
/// leaked per program or per restart exceeds 16 within minutes.
pub const FD_BOUND: u64 = 16;

/// How the programs ended.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Programs {
    /// Programs started.
    pub started: u64,
    /// Static ones (jobs bound before they started).
    pub static_programs: u64,
    /// Dynamic ones (`AC_Get`/`AC_Free` at run time).
    pub dynamic_programs: u64,
    /// Ended with every result exact.
    pub ok: u64,
    /// Killed with `kill -9` by the driver.
    pub killed: u64,
    /// Ended with a wrong result: a failure.
    pub wrong: u64,
    /// Ended without an outcome (panic, foreign signal): a failure.
    pub crashed: u64,
    /// Still running after the limit: a failure.
    pub hung: u64,
    /// `AC_Get`s the manager rejected (the pool was busy; not an error).
    pub rejected_gets: u64,
    /// Clear errors by class, each explained by a restart during the program's life.
    pub errors: BTreeMap<String, u64>,
    /// The first message of each class of clear error.
    pub error_examples: BTreeMap<String, String>,
    /// Errors no restart explains (a failure), with their messages.
    pub unexplained: Vec<String>,
}

/// A daemon's figures after warm-up and at the end.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonFigures {
    /// `arm-server`, `h0`, `h1`, ...
    pub name: String,
    /// After warm-up.
    pub start: Option<ProcSample>,
    /// After the churn, once everything settled.
    pub end: Option<ProcSample>,
}

impl DaemonFigures {
    /// Whether the same process was measured at both ends (the bounds apply only then).
    pub fn same_process(&self) -> bool {
        matches!((self.start, self.end), (Some(s), Some(e)) if s.pid == e.pid)
    }

    /// What exceeds the bounds, if anything.
    fn over_bounds(&self) -> Option<String> {
        let (Some(s), Some(e)) = (self.start, self.end) else { return None };
        let rss_grew = e.rss_kib.saturating_sub(s.rss_kib) > RSS_BOUND_MIB << 10;
        let fds_grew = e.fds.saturating_sub(s.fds) > FD_BOUND;
        (self.same_process() && (rss_grew || fds_grew))
            .then(|| format!("{}: RSS {} -> {} KiB, fds {} -> {}", self.name, s.rss_kib, e.rss_kib, s.fds, e.fds))
    }
}

/// Everything the soak measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Churn, minutes.
    pub minutes: f64,
    /// Programs running at once.
    pub concurrency: usize,
    /// Accelerators in the pool.
    pub pool: usize,
    /// How the programs ended.
    pub programs: Programs,
    /// Backends killed and started again.
    pub backend_restarts: u64,
    /// Manager kills and restarts.
    pub manager_restarts: u64,
    /// Accelerators not free at the end (id and state), after the settling time.
    pub leaked_accelerators: Vec<String>,
    /// Jobs still running or queued at the end.
    pub live_jobs: Vec<String>,
    /// Device memory still in use at the end, per accelerator that has any (bytes, as the
    /// backend's `DeviceInfo` says).
    pub device_memory_in_use: BTreeMap<String, u64>,
    /// Accelerators whose memory was read at the end.
    pub devices_checked: usize,
    /// The daemons' resident memory and descriptors.
    pub daemons: Vec<DaemonFigures>,
    /// Problems on the driver's side (a manager that stopped answering, a step that failed).
    pub problems: Vec<String>,
    /// Static jobs whose submission the manager committed but whose answer its kill lost (the
    /// driver ended them unused; job ids are unique, so the retry's "exists" says so).
    pub lost_submit_answers: u64,
    /// Seconds from the end of the churn until the pool was free again.
    pub settle_s: f64,
}

impl Report {
    /// Why the soak failed; empty if it passed.
    pub fn failures(&self) -> Vec<String> {
        let p = &self.programs;
        let mut failures = Vec::new();
        let mut check = |bad: bool, why: String| {
            if bad {
                failures.push(why);
            }
        };
        check(p.wrong > 0, format!("{} program(s) got a wrong result", p.wrong));
        check(p.crashed > 0, format!("{} program(s) crashed", p.crashed));
        check(p.hung > 0, format!("{} program(s) hung", p.hung));
        check(!p.unexplained.is_empty(), format!("unexplained errors: {:?}", p.unexplained));
        check(p.ok == 0 || p.killed == 0, format!("no churn: {} ok, {} killed", p.ok, p.killed));
        check(p.static_programs == 0 || p.dynamic_programs == 0, "static or dynamic programs missing".into());
        check(self.backend_restarts == 0 || self.manager_restarts == 0, "a restart did not happen".into());
        check(!self.leaked_accelerators.is_empty(), format!("leaked accelerators: {:?}", self.leaked_accelerators));
        check(!self.live_jobs.is_empty(), format!("jobs still live: {:?}", self.live_jobs));
        check(
            self.devices_checked != self.pool,
            format!("device memory read on {} of {}", self.devices_checked, self.pool),
        );
        check(!self.device_memory_in_use.is_empty(), format!("device memory leaked: {:?}", self.device_memory_in_use));
        for daemon in &self.daemons {
            check(daemon.start.is_none() || daemon.end.is_none(), format!("{}: not measured", daemon.name));
            if let Some(why) = daemon.over_bounds() {
                check(true, why);
            }
        }
        check(!self.problems.is_empty(), format!("driver problems: {:?}", self.problems));
        failures
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let p = &self.programs;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak: {:.1} min, {} programs at once, {} accelerators",
            self.minutes, self.concurrency, self.pool
        );
        let _ = writeln!(
            out,
            "programs: {} started ({} static, {} dynamic), {} ok, {} killed (-9), {} wrong, {} crashed, {} hung",
            p.started, p.static_programs, p.dynamic_programs, p.ok, p.killed, p.wrong, p.crashed, p.hung
        );
        let _ = writeln!(out, "AC_Get rejected (pool busy): {}", p.rejected_gets);
        let errors: Vec<String> = p.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "clear errors (explained by a restart): {}", or_none(&errors.join(", ")));
        for (class, message) in &p.error_examples {
            let _ = writeln!(out, "  e.g. {class}: {message}");
        }
        let _ = writeln!(out, "unexplained errors: {}", p.unexplained.len());
        for why in p.unexplained.iter().take(10) {
            let _ = writeln!(out, "  {why}");
        }
        let _ = writeln!(out, "restarts: {} backend, {} manager", self.backend_restarts, self.manager_restarts);
        let _ = writeln!(out, "submissions whose answer the manager's kill lost: {}", self.lost_submit_answers);
        let _ = writeln!(out, "settled in {:.1} s after the churn", self.settle_s);
        let _ = writeln!(out, "leaked accelerators: {}", or_none(&self.leaked_accelerators.join(", ")));
        let _ = writeln!(out, "live jobs: {}", or_none(&self.live_jobs.join(", ")));
        let memory: Vec<String> = self.device_memory_in_use.iter().map(|(k, b)| format!("{k} {b} B")).collect();
        let _ = writeln!(
            out,
            "device memory in use ({} devices read): {}",
            self.devices_checked,
            or_none(&memory.join(", "))
        );
        let _ = writeln!(out, "daemon       pid(start/end)   RSS MiB start -> end   fds start -> end");
        for d in &self.daemons {
            let pid = |s: Option<ProcSample>| s.map_or("-".into(), |s| s.pid.to_string());
            let rss = |s: Option<ProcSample>| s.map_or("-".into(), |s| format!("{:.1}", s.rss_kib as f64 / 1024.0));
            let fds = |s: Option<ProcSample>| s.map_or("-".into(), |s| s.fds.to_string());
            let _ = writeln!(
                out,
                "{:<12} {:>7}/{:<7}  {:>8} -> {:<8}  {:>5} -> {:<5}{}",
                d.name,
                pid(d.start),
                pid(d.end),
                rss(d.start),
                rss(d.end),
                fds(d.start),
                fds(d.end),
                if d.same_process() { "" } else { "  (restarted since: not bounded)" }
            );
        }
        let _ = writeln!(out, "bounds: RSS +{RSS_BOUND_MIB} MiB, fds +{FD_BOUND} (same process)");
        let failures = self.failures();
        let _ = writeln!(out, "verdict: {}", if failures.is_empty() { "PASS".into() } else { failures.join("; ") });
        out
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}
