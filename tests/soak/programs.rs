//! The soak's programs: each slot runs one `ac-soak-client` process after another until the
//! churn ends, static (a submitted job, bound before the program starts, ended afterwards as
//! Slurm's epilog would) or dynamic (an ad-hoc job that takes and frees accelerators at run
//! time), and kills some of them with `kill -9` mid-work. A checkpoint of the driver holds new
//! programs back until it is done ([`Shared::gate`]).
//!
//! The driver learns which backends a program used: from its `using` lines, and, when it
//! fails, from the manager's view of its job, read while the failed program waits (an
//! accelerator granted but never connected is known only there); only a restart of one of
//! those backends can explain the program's error.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_frontend::arm::ArmClient;
use ac_proto::arm::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The longest a program may run before it counts as hung (and is killed).
const PROGRAM_LIMIT: Duration = Duration::from_secs(120);
/// How long the driver keeps asking a restarting manager before giving up.
const MANAGER_PATIENCE: Duration = Duration::from_secs(60);

/// Static or dynamic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Accelerators bound to a submitted job before the program starts.
    Static,
    /// `AC_Get`/`AC_Free` at run time, in an ad-hoc job.
    Dynamic,
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Every result exact.
    Ok,
    /// This many result elements differed from the host's.
    Wrong(u64),
    /// An SDK error ([`super::error_class`]) and its message.
    Error {
        /// The error's class.
        class: String,
        /// Its message.
        message: String,
    },
    /// Killed by the driver with `kill -9`.
    Killed,
    /// Ended without an outcome line (a panic, a signal the driver did not send).
    Crashed(String),
    /// Still running after [`PROGRAM_LIMIT`]; killed.
    Hung,
}

/// One program's run.
#[derive(Debug, Clone)]
pub struct Program {
    /// Static or dynamic.
    pub kind: Kind,
    /// When it was started.
    pub started: Instant,
    /// When it ended.
    pub finished: Instant,
    /// How.
    pub ended: Ended,
    /// `AC_Get`s the manager rejected.
    pub rejected: u64,
    /// The backends (`h0`, `h1`, ...) whose accelerators it held.
    pub hosts: BTreeSet<String>,
}

/// What every slot shares.
#[derive(Debug)]
pub struct Shared {
    /// The manager's address.
    pub arm_addr: std::net::SocketAddr,
    /// The manager's CA certificate.
    pub arm_ca: PathBuf,
    /// An admin client (submits and ends the static jobs).
    pub admin: ArmClient,
    /// `ac-soak-client`.
    pub client: PathBuf,
    /// Where the programs' standard error goes.
    pub log: PathBuf,
    /// No program starts after this.
    pub churn_end: Instant,
    /// What went wrong on the driver's side (a manager that never answered again).
    pub problems: Mutex<Vec<String>>,
    /// Job submissions whose answer the manager's kill lost (the job was ended unused).
    pub lost_answers: AtomicU64,
    /// Held (read) by each program from its job's submission to its end; a checkpoint takes it
    /// (write), so that it waits for the running programs and new ones wait for it (tokio's
    /// lock queues readers behind a waiting writer).
    pub gate: tokio::sync::RwLock<()>,
    /// Programs ended so far.
    pub ended: AtomicU64,
}

/// A small deterministic generator (xorshift64*): the same seed gives the same churn.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded; a zero seed is moved off zero.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }
}

/// Asks the manager, again while it cannot be reached (it may be restarting), for at most
/// [`MANAGER_PATIENCE`]; a refusal is an answer.
async fn ask(shared: &Shared, request: &Request) -> Result<Response, ac_frontend::Error> {
    let start = Instant::now();
    loop {
        match shared.admin.request(request.clone()).await {
            Err(ac_frontend::Error::ManagerUnreachable { .. }) if start.elapsed() < MANAGER_PATIENCE => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            answer => return answer,
        }
    }
}

/// Submits a static job; its credential, or `None` (the job is then ended).
async fn submit(shared: &Shared, request: Request, job: &str) -> Option<String> {
    match ask(shared, &request).await {
        Ok(Response::Submitted { credential, .. }) => return Some(credential),
        // Job ids are unique: the manager committed an earlier attempt whose answer was lost when
        // it was killed. That job's credential is gone with the answer, so it is ended unused.
        Err(ac_frontend::Error::Manager { kind: ac_proto::arm::ArmErrorKind::Conflict, .. }) => {
            shared.lost_answers.fetch_add(1, Ordering::Relaxed);
        }
        other => shared.problem(format!("submit {job}: {other:?}")),
    }
    end_job(shared, job).await;
    None
}

/// Ends a static job, as Slurm's epilog does once the job's programs are gone.
async fn end_job(shared: &Shared, job: &str) {
    if let Err(e) = ask(shared, &Request::JobEnd { id: job.to_string() }).await {
        shared.problem(format!("end {job}: {e}"));
    }
}

impl Shared {
    /// Notes a problem on the driver's side.
    pub fn problem(&self, what: String) {
        self.problems.lock().expect("problems").push(what);
    }
}

/// Runs programs in slot `slot` until the churn ends; returns them.
pub async fn slot(shared: Arc<Shared>, slot: usize, seed: u64) -> Vec<Program> {
    let mut rng = Rng::new(seed);
    let mut programs = Vec::new();
    while Instant::now() < shared.churn_end {
        let _running = shared.gate.read().await;
        if Instant::now() >= shared.churn_end {
            break;
        }
        let kind = if rng.below(2) == 0 { Kind::Static } else { Kind::Dynamic };
        let rounds = 4 + rng.below(12) as u32;
        // One program in five is killed, at some point of its first few seconds.
        let kill_after = (rng.below(5) == 0).then(|| Duration::from_millis(300 + rng.below(4_000)));
        let node = format!("n{slot}");
        let job = format!("s{slot}-{}", programs.len());
        let env = match kind {
            Kind::Static => {
                let submit_request = Request::JobSubmit {
                    id: job.clone(),
                    nodes: vec![node.clone()],
                    acpn: 1 + rng.below(2) as u32,
                    user: format!("u{}", slot % 3),
                    walltime_s: 0,
                    group: None,
                    reservation: None,
                    peak: None,
                };
                match submit(&shared, submit_request, &job).await {
                    Some(credential) => vec![("ARM_JOB_ID", job.clone()), ("ARM_JOB_CREDENTIAL", credential)],
                    None => continue,
                }
            }
            Kind::Dynamic => vec![("ARM_ACPN", "0".to_string())],
        };
        let program = run_one(&shared, kind, &node, env, rounds, rng.below(1 << 20) as u32, kill_after).await;
        if kind == Kind::Static {
            end_job(&shared, &job).await;
        }
        programs.push(program);
        shared.ended.fetch_add(1, Ordering::Relaxed);
    }
    programs
}

/// Starts one `ac-soak-client` and waits for it (or kills it after `kill_after`).
async fn run_one(
    shared: &Arc<Shared>,
    kind: Kind,
    node: &str,
    env: Vec<(&str, String)>,
    rounds: u32,
    seed: u32,
    kill_after: Option<Duration>,
) -> Program {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&shared.log).expect("program log");
    let mut command = tokio::process::Command::new(&shared.client);
    command
        .arg(if kind == Kind::Static { "static" } else { "dynamic" })
        .arg(rounds.to_string())
        .arg(seed.to_string())
        .env("ARM_ADDR", shared.arm_addr.to_string())
        .env("ARM_CA_CERT", &shared.arm_ca)
        .env("ARM_NODE", node)
        .env("ARM_INIT_TIMEOUT_S", "60")
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn().expect("ac-soak-client starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let stdin = child.stdin.take().expect("piped stdin");
    let reader = tokio::spawn(follow(shared.clone(), stdout, stdin));
    let limit = kill_after.unwrap_or(PROGRAM_LIMIT);
    let (status, killed) = match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => (status, false),
        Err(_) => {
            let _ = child.start_kill();
            (child.wait().await, true)
        }
    };
    let (lines, hosts) = reader.await.unwrap_or_default();
    let rejected = lines.iter().filter(|l| *l == "rejected").count() as u64;
    let ended = match (killed, kill_after) {
        (true, Some(_)) => Ended::Killed,
        (true, None) => Ended::Hung,
        _ => outcome(&lines, status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())),
    };
    Program { kind, started, finished: Instant::now(), ended, rejected, hosts }
}

/// Reads a program's lines until it ends: `job ID` (its job), `using ID...` (accelerators it
/// connected to), and `failed`, after which it waits for a line on its standard input while
/// the driver reads from the manager which accelerators its job holds. Returns every line and
/// the backends the program used.
async fn follow(
    shared: Arc<Shared>,
    stdout: tokio::process::ChildStdout,
    mut stdin: tokio::process::ChildStdin,
) -> (Vec<String>, BTreeSet<String>) {
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let (mut all, mut hosts, mut job) = (Vec::new(), BTreeSet::new(), None);
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(id) = line.strip_prefix("job ") {
            job = Some(id.to_string());
        } else if let Some(ids) = line.strip_prefix("using ") {
            hosts.extend(ids.split_whitespace().map(host_of));
        } else if line == "failed" {
            if let Some(job) = &job {
                hosts.extend(held(&shared, job).await);
            }
            // A program killed meanwhile reads nothing: nothing to do.
            let _ = stdin.write_all(b"go\n").await;
        }
        all.push(line);
    }
    (all, hosts)
}

/// The backend of accelerator `id` (`host/device`).
fn host_of(id: &str) -> String {
    id.split('/').next().unwrap_or(id).to_string()
}

/// The backends of the accelerators job `job` holds, statically and dynamically, as the
/// manager says.
async fn held(shared: &Shared, job: &str) -> BTreeSet<String> {
    match ask(shared, &Request::JobShow { id: job.to_string() }).await {
        Ok(Response::Job(view)) => {
            let statics = view.static_accelerators.iter().map(|(_, a)| host_of(a));
            statics.chain(view.dynamic_accelerators.iter().map(|(_, a)| host_of(a))).collect()
        }
        other => {
            shared.problem(format!("show {job} after its program failed: {other:?}"));
            BTreeSet::new()
        }
    }
}

/// The program's last `outcome` line, or a crash.
fn outcome(lines: &[String], status: String) -> Ended {
    let Some(last) = lines.iter().rev().find_map(|l| l.strip_prefix("outcome ")) else {
        return Ended::Crashed(status);
    };
    let mut words = last.splitn(3, ' ');
    match (words.next(), words.next(), words.next()) {
        (Some("ok"), _, _) => Ended::Ok,
        (Some("wrong"), Some(n), _) => Ended::Wrong(n.parse().unwrap_or(u64::MAX)),
        (Some("error"), Some(class), message) => {
            Ended::Error { class: class.to_string(), message: message.unwrap_or_default().to_string() }
        }
        _ => Ended::Crashed(format!("{status}: {last}")),
    }
}
