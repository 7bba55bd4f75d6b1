//! The soak (issue 27, item 4): minutes of churn against real daemons on loopback, then a
//! check that nothing was left behind.
//!
//! One `arm-server` and a few CPU-device `ac-backend`s run as processes. Slots run
//! `ac-soak-client` programs one after another (static and dynamic, one in five killed with
//! `kill -9` mid-work; [`programs`]), while the driver restarts a backend (`kill -9`, then the
//! same port and state directory) every few minutes, in turn, never `h0`, and the manager once,
//! after the first backend. Every program checks its results exactly; one that loses its
//! accelerator to a restart must end with a clear error, counted by class, and only if a
//! restart that can cause that class happened while it ran: of the manager, or of a backend
//! whose accelerators it held (not any backend).
//!
//! Half-way between restarts, and at the end, the driver takes a checkpoint: it holds new
//! programs back, waits for the running ones and for the pool to be free, and reads every
//! daemon's resident memory and open descriptors. These quiet moments are equivalent, so a
//! process's descriptors must be the same at each of its checkpoints (one leaked per restart
//! of another daemon, or per program, shows), and its memory may grow only by a small bound
//! ([`report`] says why). After the churn: the pool is all free and no job is live, and every
//! device's memory is free again (read from each backend with `DeviceInfo`).
//! Used by `ac-soak` (`scripts/soak`) and by `tests/tests/e2e/soak.rs`.

mod daemons;
mod programs;
mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_frontend::{Session, SessionOptions};
use ac_proto::arm::{JobAuth, Request, Response};

pub use daemons::ProcSample;
pub use report::{Checkpoint, DaemonFigures, Programs, Report, FD_SETTLE_S, RSS_BOUND_MIB};

use daemons::Daemons;
use programs::{Ended, Kind, Program};

/// How long the pool may take to be free again after the churn (leases, revocations).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// How far before a program's start a restart may still explain its error (a grant handed out
/// just before its backend died, before the manager saw the host down).
const EXPLAIN_BEFORE: Duration = Duration::from_secs(3);

/// The soak's shape.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long programs keep coming.
    pub duration: Duration,
    /// Programs running at once.
    pub programs: usize,
    /// Backends (at least 2: `h0` is never restarted, so that one backend is measured across
    /// the whole soak, every restart of another daemon between its checkpoints).
    pub backends: usize,
    /// CPU devices per backend.
    pub devices: u32,
    /// Seed of the churn.
    pub seed: u64,
}

impl Config {
    /// `minutes` of churn with 12 programs at once on 3 backends of 4 devices.
    pub fn minutes(minutes: f64) -> Self {
        Self { duration: Duration::from_secs_f64(minutes * 60.0), programs: 12, backends: 3, devices: 4, seed: 27 }
    }

    /// A backend restart every quarter of the soak, between 30 s and 3 min apart.
    fn backend_period(&self) -> Duration {
        (self.duration / 4).clamp(Duration::from_secs(30), Duration::from_secs(180))
    }

    /// The manager's restart: a quarter period after the first backend's, so that its first
    /// process sees a backend restart between two checkpoints, and its second one the others.
    fn manager_restart(&self) -> Duration {
        self.backend_period() * 5 / 4
    }

    /// The checkpoints during the churn: half-way between restarts, the first after half a
    /// period of warm-up.
    fn checkpoints(&self) -> impl Iterator<Item = Duration> + '_ {
        let period = self.backend_period();
        (0..).map(move |k| period / 2 + period * k).take_while(|at| *at < self.duration)
    }
}

/// The class of an SDK error, as programs print it and the report counts it.
pub fn error_class(e: &ac_frontend::Error) -> String {
    use ac_frontend::Error;
    match e {
        Error::Remote { kind, .. } => format!("remote-{kind:?}"),
        Error::Manager { kind, .. } => format!("manager-{kind:?}"),
        Error::ManagerUnreachable { .. } => "manager-unreachable".into(),
        Error::VersionMismatch(_) => "version-mismatch".into(),
        Error::Disconnected(_) => "disconnected".into(),
        Error::Revoked(_) => "revoked".into(),
        Error::DeviceRefused(_) => "device-refused".into(),
        Error::Protocol(_) => "protocol".into(),
        Error::InvalidArgument(_) => "invalid-argument".into(),
        Error::Timeout(_) => "timeout".into(),
        Error::Setup(_) => "setup".into(),
    }
}

/// What can explain an error of `class`: a backend's restart, the manager's, either, or nothing.
fn causes(class: &str) -> (bool, bool) {
    match class {
        "disconnected" | "revoked" => (true, false),
        "manager-unreachable" => (false, true),
        c if c.starts_with("remote-") || c.starts_with("manager-") || c == "timeout" => (true, true),
        _ => (false, false),
    }
}

/// A restart: from the kill until the daemon listens again, and which backend's (`h1`, ...),
/// `None` for the manager's.
#[derive(Debug, Clone)]
struct Restart {
    killed: Instant,
    back: Instant,
    backend: Option<String>,
}

/// Runs the soak with its state under `dir` and reports.
pub async fn run(config: &Config, dir: &Path) -> Report {
    assert!(config.backends >= 2, "h0 is never restarted; another backend must be");
    let mut daemons = Daemons::start(dir, config.backends, config.devices).await;
    let start = Instant::now();
    let shared = Arc::new(programs::Shared {
        arm_addr: daemons.arm_addr,
        arm_ca: daemons.arm_dir().join("ca.pem"),
        admin: daemons.admin().await,
        client: crate::workspace_binary("ac-soak-client"),
        log: dir.join("programs.log"),
        churn_end: start + config.duration,
        problems: Mutex::new(Vec::new()),
        lost_answers: Default::default(),
        gate: Default::default(),
        ended: Default::default(),
    });
    let slots: Vec<_> = (0..config.programs)
        .map(|s| tokio::spawn(programs::slot(shared.clone(), s, config.seed.wrapping_mul(1_000) + s as u64)))
        .collect();
    let (restarts, mut checkpoints) = chaos(config, &mut daemons, &shared, start).await;
    let mut all = Vec::new();
    for slot in slots {
        all.extend(slot.await.expect("slot task"));
    }
    let churn_over = Instant::now();
    let (leaked_accelerators, live_jobs) = settle(&shared.admin).await;
    let settle_s = churn_over.elapsed().as_secs_f64();
    let (device_memory_in_use, devices_checked) = device_memory(&daemons, config).await.unwrap_or_else(|e| {
        shared.problem(format!("reading device memory: {e}"));
        (BTreeMap::new(), 0)
    });
    // The probe's own session ends too; the pool must be free again for the last checkpoint.
    let (leaked_after_probe, _) = settle(&shared.admin).await;
    checkpoints.push(checkpoint(&daemons, &shared, &checkpoints, start).await);
    let problems = shared.problems.lock().expect("problems").clone();
    Report {
        minutes: config.duration.as_secs_f64() / 60.0,
        concurrency: config.programs,
        pool: config.backends * config.devices as usize,
        programs: tally(&all, &restarts, start),
        backend_restarts: restarts.iter().filter(|r| r.backend.is_some()).count() as u64,
        manager_restarts: restarts.iter().filter(|r| r.backend.is_none()).count() as u64,
        leaked_accelerators: leaked_accelerators.into_iter().chain(leaked_after_probe).collect(),
        live_jobs,
        device_memory_in_use,
        devices_checked,
        daemons: DaemonFigures::of(&checkpoints),
        checkpoints,
        problems,
        lost_submit_answers: shared.lost_answers.load(std::sync::atomic::Ordering::Relaxed),
        settle_s,
    }
}

/// Restarts backends in turn and the manager once, and takes the checkpoints between them,
/// until the churn ends; returns the restarts and the checkpoints.
async fn chaos(
    config: &Config,
    daemons: &mut Daemons,
    shared: &programs::Shared,
    start: Instant,
) -> (Vec<Restart>, Vec<Checkpoint>) {
    #[derive(Clone, Copy)]
    enum Event {
        Backend(usize),
        Manager,
        Checkpoint,
    }
    let mut events = vec![(config.manager_restart(), Event::Manager)];
    events.extend(config.checkpoints().map(|at| (at, Event::Checkpoint)));
    let period = config.backend_period();
    let mut at = period;
    let mut turn = 0;
    while at < config.duration {
        events.push((at, Event::Backend(1 + turn % (daemons.backends() - 1))));
        at += period;
        turn += 1;
    }
    events.retain(|(at, _)| *at < config.duration);
    events.sort_by_key(|(at, _)| *at);
    let mut restarts = Vec::new();
    let mut checkpoints = Vec::new();
    for (at, event) in events {
        tokio::time::sleep_until((start + at).into()).await;
        match event {
            Event::Backend(i) => {
                let killed = Instant::now();
                tokio::task::block_in_place(|| daemons.restart_backend(i));
                restarts.push(Restart { killed, back: Instant::now(), backend: Some(format!("h{i}")) });
                eprintln!("soak: h{i} restarted at {:.1} s", (killed - start).as_secs_f64());
            }
            Event::Manager => {
                let killed = Instant::now();
                tokio::task::block_in_place(|| daemons.restart_manager());
                restarts.push(Restart { killed, back: Instant::now(), backend: None });
                eprintln!("soak: the manager restarted at {:.1} s", (killed - start).as_secs_f64());
            }
            Event::Checkpoint => {
                // New programs wait, running ones end; then the pool must come free.
                let _quiet = shared.gate.write().await;
                let (busy, live) = settle(&shared.admin).await;
                if !busy.is_empty() || !live.is_empty() {
                    shared.problem(format!("not quiet at a checkpoint: busy {busy:?}, live jobs {live:?}"));
                }
                let taken = checkpoint(daemons, shared, &checkpoints, start).await;
                eprintln!(
                    "soak: checkpoint at {:.1} s (quiet after {:.1} s)",
                    at.as_secs_f64(),
                    taken.at_s - at.as_secs_f64()
                );
                checkpoints.push(taken);
            }
        }
    }
    tokio::time::sleep_until((start + config.duration).into()).await;
    (restarts, checkpoints)
}

/// Every daemon's figures now, once each process's open descriptors are back at their number
/// at its first checkpoint (in `earlier`), or after [`FD_SETTLE_S`].
async fn checkpoint(
    daemons: &Daemons,
    shared: &programs::Shared,
    earlier: &[Checkpoint],
    start: Instant,
) -> Checkpoint {
    let first: BTreeMap<u32, u64> =
        earlier.iter().rev().flat_map(|c| c.daemons.iter().filter_map(|(_, s)| s.map(|s| (s.pid, s.fds)))).collect();
    let deadline = Instant::now() + Duration::from_secs(FD_SETTLE_S);
    loop {
        let now = daemons.samples();
        let back = now.iter().all(|(_, s)| s.is_none_or(|s| first.get(&s.pid).is_none_or(|fds| *fds == s.fds)));
        if back || Instant::now() > deadline {
            return Checkpoint {
                at_s: start.elapsed().as_secs_f64(),
                programs: shared.ended.load(std::sync::atomic::Ordering::Relaxed),
                daemons: now,
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts the programs' ends; an error counts as clear only if a restart that can cause its
/// class happened while the program ran: the manager's, or that of a backend whose accelerators
/// the program held.
fn tally(all: &[Program], restarts: &[Restart], start: Instant) -> Programs {
    let mut p = Programs { started: all.len() as u64, ..Programs::default() };
    for program in all {
        match program.kind {
            Kind::Static => p.static_programs += 1,
            Kind::Dynamic => p.dynamic_programs += 1,
        }
        p.rejected_gets += program.rejected;
        match &program.ended {
            Ended::Ok => p.ok += 1,
            Ended::Wrong(_) => p.wrong += 1,
            Ended::Killed => p.killed += 1,
            Ended::Crashed(why) => {
                p.crashed += 1;
                p.unexplained.push(format!("crashed: {why}"));
            }
            Ended::Hung => p.hung += 1,
            Ended::Error { class, message } => {
                let (backend, manager) = causes(class);
                let cause = |r: &Restart| match &r.backend {
                    Some(host) => backend && program.hosts.contains(host),
                    None => manager,
                };
                let during = |r: &&Restart| {
                    r.back + EXPLAIN_BEFORE >= program.started && r.killed <= program.finished && cause(r)
                };
                if restarts.iter().any(|r| during(&r)) {
                    *p.errors.entry(class.clone()).or_default() += 1;
                    p.error_examples.entry(class.clone()).or_insert_with(|| message.clone());
                } else {
                    let (from, to) = (program.started - start, program.finished - start);
                    let when =
                        format!("ran {:.1}-{:.1} s on {:?}", from.as_secs_f64(), to.as_secs_f64(), program.hosts);
                    p.unexplained.push(format!("{class}: {message} ({when})"));
                }
            }
        }
    }
    p
}

/// Waits until every host is up, every accelerator free and no job live (or the limit);
/// returns the accelerators not free and the jobs still live.
async fn settle(admin: &ac_frontend::arm::ArmClient) -> (Vec<String>, Vec<String>) {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let hosts = match admin.request(Request::HostList).await {
            Ok(Response::Hosts(hosts)) => hosts,
            other => panic!("host list: {other:?}"),
        };
        let busy: Vec<String> = hosts
            .iter()
            .flat_map(|h| h.accelerators.iter().map(move |a| (h, a)))
            .filter(|(h, a)| h.state != "up" || a.state != "free")
            .map(|(h, a)| format!("{} ({}, host {})", a.id, a.state, h.state))
            .collect();
        let live: Vec<String> = match admin.request(Request::JobList { all: false }).await {
            Ok(Response::Jobs(jobs)) => jobs.into_iter().map(|j| format!("{} ({})", j.id, j.state)).collect(),
            other => panic!("job list: {other:?}"),
        };
        if (busy.is_empty() && live.is_empty()) || Instant::now() > deadline {
            return (busy, live);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Takes the whole pool in an ad-hoc job and reads each device's memory in use from its
/// backend (`DeviceInfo`), waiting up to the settling limit for sessions the backend is still
/// closing; returns the devices with memory in use and how many were read.
async fn device_memory(daemons: &Daemons, config: &Config) -> Result<(BTreeMap<String, u64>, usize), String> {
    let pool = config.backends as u32 * config.devices;
    let mut arm = ac_frontend::arm::ArmOptions::new(daemons.arm_addr, daemons.arm_dir().join("ca.pem"));
    arm.tuning = crate::quick_tuning();
    let options = SessionOptions {
        arm,
        job: JobAuth::AdHoc { acpn: pool },
        node: "probe".into(),
        init_timeout: Some(Duration::from_secs(10)),
        stripes: 1,
        progress: false,
    };
    let session = Session::init(options).await.map_err(|e| format!("taking the whole pool: {e}"))?;
    let deadline = Instant::now() + SETTLE_LIMIT;
    let mut in_use = BTreeMap::new();
    for handle in session.accelerators() {
        loop {
            let info = handle.acc.device_info().await.map_err(|e| format!("{}: {e}", handle.id))?;
            let used = info.memory_total - info.memory_free;
            if used == 0 || Instant::now() > deadline {
                if used > 0 {
                    in_use.insert(handle.id.clone(), used);
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let read = session.accelerators().len();
    session.finalize().await.map_err(|e| format!("the probe's AC_Finalize: {e}"))?;
    Ok((in_use, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that held `hosts` and failed with `class` while it ran, from `start` + 10 s
    /// to `start` + 20 s.
    fn failed(start: Instant, class: &str, hosts: &[&str]) -> Program {
        Program {
            kind: Kind::Dynamic,
            started: start + Duration::from_secs(10),
            finished: start + Duration::from_secs(20),
            ended: Ended::Error { class: class.into(), message: "lost".into() },
            rejected: 0,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }
    }

    /// A restart of `backend` (the manager's when `None`) 15 s in, while the program ran.
    fn restart(start: Instant, backend: Option<&str>) -> Restart {
        let killed = start + Duration::from_secs(15);
        Restart { killed, back: killed + Duration::from_millis(300), backend: backend.map(Into::into) }
    }

    #[test]
    fn an_error_is_explained_only_by_a_restart_of_a_backend_the_program_used() {
        let start = Instant::now();
        let program = [failed(start, "disconnected", &["h1"])];
        let explained = |restarts: &[Restart]| tally(&program, restarts, start).unexplained.is_empty();
        assert!(explained(&[restart(start, Some("h1"))]));
        assert!(!explained(&[restart(start, Some("h2"))]), "h2's restart excused an error on h1");
        assert!(!explained(&[restart(start, None)]), "the manager's restart excused a backend's error");
        assert!(!explained(&[]));
        // A class either daemon can cause: the manager's restart, or h1's; still not h2's.
        let program = [failed(start, "timeout", &["h1"])];
        let explained = |restarts: &[Restart]| tally(&program, restarts, start).unexplained.is_empty();
        assert!(explained(&[restart(start, None)]) && explained(&[restart(start, Some("h1"))]));
        assert!(!explained(&[restart(start, Some("h2"))]));
        // A restart long before the program started explains nothing.
        let early = Restart { killed: start, back: start + Duration::from_secs(1), backend: Some("h1".into()) };
        let program = [failed(start, "disconnected", &["h1"])];
        assert!(!tally(&program, &[early], start).unexplained.is_empty());
    }
}
