//! The soak (issue 27, item 4): minutes of churn against real daemons on loopback, then a
//! check that nothing was left behind.
//!
//! One `arm-server` and a few CPU-device `ac-backend`s run as processes. Slots run
//! `ac-soak-client` programs one after another (static and dynamic, one in five killed with
//! `kill -9` mid-work; [`programs`]), while the driver restarts a backend (`kill -9`, then the
//! same port and state directory) every few minutes, in turn, never `h0`, and the manager once.
//! Every program checks its results exactly; one that loses its accelerator to a restart must
//! end with a clear error, counted by class, and only if a restart happened while it ran.
//! After the churn: the pool is all free and no job is live, every device's memory is free
//! again (read from each backend with `DeviceInfo`), and the daemons' resident memory and open
//! descriptors are compared with their values after warm-up ([`report`] has the bounds).
//! Used by `ac-soak` (`scripts/soak`) and by `tests/tests/soak.rs`.

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
pub use report::{DaemonFigures, Programs, Report, FD_BOUND, RSS_BOUND_MIB};

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
    /// the whole soak).
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

    /// The manager's restart: a sixth into the soak.
    fn manager_restart(&self) -> Duration {
        self.duration / 6
    }

    /// The daemons' figures after warm-up: a third into the soak, after the manager's restart.
    fn baseline(&self) -> Duration {
        self.duration / 3
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

/// A restart: from the kill until the daemon listens again, and whether it was the manager's.
#[derive(Debug, Clone, Copy)]
struct Restart {
    killed: Instant,
    back: Instant,
    manager: bool,
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
    });
    let slots: Vec<_> = (0..config.programs)
        .map(|s| tokio::spawn(programs::slot(shared.clone(), s, config.seed.wrapping_mul(1_000) + s as u64)))
        .collect();
    let (restarts, baseline) = chaos(config, &mut daemons, start).await;
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
    // The probe's own session ends too; the pool must be free again for the end figures.
    let (leaked_after_probe, _) = settle(&shared.admin).await;
    let end = daemons.samples();
    let daemons_figures =
        baseline.into_iter().zip(end).map(|((name, start), (_, end))| DaemonFigures { name, start, end }).collect();
    let problems = shared.problems.lock().expect("problems").clone();
    Report {
        minutes: config.duration.as_secs_f64() / 60.0,
        concurrency: config.programs,
        pool: config.backends * config.devices as usize,
        programs: tally(&all, &restarts, start),
        backend_restarts: restarts.iter().filter(|r| !r.manager).count() as u64,
        manager_restarts: restarts.iter().filter(|r| r.manager).count() as u64,
        leaked_accelerators: leaked_accelerators.into_iter().chain(leaked_after_probe).collect(),
        live_jobs,
        device_memory_in_use,
        devices_checked,
        daemons: daemons_figures,
        problems,
        lost_submit_answers: shared.lost_answers.load(std::sync::atomic::Ordering::Relaxed),
        settle_s,
    }
}

/// Restarts backends in turn and the manager once, and takes the daemons' figures after
/// warm-up, until the churn ends; returns the restarts and those figures.
async fn chaos(
    config: &Config,
    daemons: &mut Daemons,
    start: Instant,
) -> (Vec<Restart>, Vec<(String, Option<ProcSample>)>) {
    #[derive(Clone, Copy)]
    enum Event {
        Backend(usize),
        Manager,
        Baseline,
    }
    let mut events = vec![(config.manager_restart(), Event::Manager), (config.baseline(), Event::Baseline)];
    let period = config.backend_period();
    let mut at = period;
    let mut turn = 0;
    while at < config.duration {
        events.push((at, Event::Backend(1 + turn % (daemons.backends() - 1))));
        at += period;
        turn += 1;
    }
    events.sort_by_key(|(at, _)| *at);
    let mut restarts = Vec::new();
    let mut baseline = Vec::new();
    for (at, event) in events {
        tokio::time::sleep_until((start + at).into()).await;
        match event {
            Event::Backend(i) => {
                let killed = Instant::now();
                tokio::task::block_in_place(|| daemons.restart_backend(i));
                restarts.push(Restart { killed, back: Instant::now(), manager: false });
                eprintln!("soak: h{i} restarted at {:.1} s", (killed - start).as_secs_f64());
            }
            Event::Manager => {
                let killed = Instant::now();
                tokio::task::block_in_place(|| daemons.restart_manager());
                restarts.push(Restart { killed, back: Instant::now(), manager: true });
                eprintln!("soak: the manager restarted at {:.1} s", (killed - start).as_secs_f64());
            }
            Event::Baseline => baseline = daemons.samples(),
        }
    }
    tokio::time::sleep_until((start + config.duration).into()).await;
    (restarts, baseline)
}

/// Counts the programs' ends; an error counts as clear only if a restart that can cause its
/// class happened while the program ran.
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
                let during = |r: &&Restart| {
                    r.back + EXPLAIN_BEFORE >= program.started
                        && r.killed <= program.finished
                        && ((backend && !r.manager) || (manager && r.manager))
                };
                if restarts.iter().any(|r| during(&r)) {
                    *p.errors.entry(class.clone()).or_default() += 1;
                    p.error_examples.entry(class.clone()).or_insert_with(|| message.clone());
                } else {
                    let (from, to) = (program.started - start, program.finished - start);
                    let when = format!("ran {:.1}-{:.1} s", from.as_secs_f64(), to.as_secs_f64());
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
