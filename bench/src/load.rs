//! The manager under load (issue 27, item 3): many connected programs loop `AC_Get(1)` /
//! `AC_Free` on a pool of 64 accelerators, and the manager's side is measured: the request and
//! its answer over each program's own QUIC connection, not the handshakes with the backends
//! (the programs speak the manager's protocol through `ArmClient`, as `Session` does, and never
//! dial the granted backends).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_backend::{BackendConfig, DeviceChoice};
use ac_frontend::arm::ArmClient;
use ac_proto::arm::{Ask, JobAuth, Request, Response};
use anyhow::bail;

use crate::holdings::{double_grants, Holding};
use crate::manager::Manager;
use crate::setup::{cpu_seconds, median, percentiles, InProcess};

const HOSTS: usize = 8;
const DEVICES: u32 = 8;

/// What every program counts.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) pairs: AtomicU64,
    pub(crate) rejections: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// The first few errors, said, for the run's verdict.
    pub(crate) first_errors: Mutex<Vec<String>>,
    /// When each grant was answered, where a run times them (`failover.rs`).
    pub(crate) grant_times: Option<Mutex<Vec<Instant>>>,
    /// Set to end every program's loop before its end (`failover.rs`).
    pub(crate) stop: std::sync::atomic::AtomicBool,
}

impl Tally {
    fn error(&self, what: String) {
        if self.errors.fetch_add(1, Ordering::Relaxed) < 5 {
            self.first_errors.lock().expect("errors poisoned").push(what);
        }
    }
}

/// The order of a program's hold and its `AC_Free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// Hold, then free: what a program does.
    HoldThenFree,
    /// A fault, to show that the run fails on a double grant: free first and hold after, so
    /// the manager grants the accelerator again while the program still counts it held.
    FreeThenHold,
}

/// What the load section runs.
pub struct Plan {
    pub quick: bool,
    /// The runs in their order, repeats allowed (saturated, paced, saturated-3, paced-3); all
    /// four when empty.
    pub runs: Vec<String>,
    /// Seconds per run (60, or 5 with `quick`, when not given).
    pub seconds: Option<u64>,
    /// How long a program holds each grant before it frees it.
    pub hold: Duration,
    pub order: Order,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) async fn add_hosts(admin: &ArmClient) -> anyhow::Result<Vec<InProcess>> {
    let mut backends = Vec::new();
    for i in 0..HOSTS {
        let state = tempfile::tempdir()?;
        let config = BackendConfig {
            listen: "127.0.0.1:0".parse()?,
            state_dir: state.path().to_path_buf(),
            device: DeviceChoice::Cpu,
            devices: Some((0..DEVICES).collect()),
            memory_mib: 16,
            ..BackendConfig::default()
        };
        let backend = InProcess::from_parts(ac_backend::start(config).await?, state);
        let request = Request::HostAdd {
            addr: backend.backend.addr(),
            name: format!("h{i}"),
            server_name: "127.0.0.1".into(),
            ca_pem: std::fs::read_to_string(backend.backend.ca_cert())?,
            labels: vec![],
        };
        match admin.request(request).await? {
            Response::Host(view) if view.accelerators.len() == DEVICES as usize => {}
            other => bail!("host h{i} not added with {DEVICES} accelerators: {other:?}"),
        }
        backends.push(backend);
    }
    Ok(backends)
}

/// A job with nothing static and its program's session: a connection of its own, bound.
async fn program(manager: &Manager, admin: &ArmClient, i: usize) -> anyhow::Result<(ArmClient, String)> {
    let id = format!("load-{i}");
    let submit = Request::JobSubmit {
        id: id.clone(),
        nodes: vec!["n1".into()],
        acpn: 0,
        user: "bench".into(),
        walltime_s: 0,
        group: None,
        reservation: None,
        peak: None,
    };
    let Response::Submitted { credential, .. } = admin.request(submit).await? else {
        bail!("job {id} not submitted");
    };
    let client = ArmClient::connect(manager.options()).await?;
    let token = ac_proto::random_hex(32);
    let auth = JobAuth::Credential { job: id, secret: credential };
    client.request(Request::Init { auth, node: "n1".into(), token: token.clone() }).await?;
    Ok((client, token))
}

/// `programs` programs' sessions, a few dozen handshakes at a time, as programs starting on a
/// cluster would.
pub(crate) async fn connect_programs(
    manager: &Manager,
    admin: &ArmClient,
    programs: usize,
) -> anyhow::Result<Vec<(ArmClient, String)>> {
    let mut sessions = Vec::with_capacity(programs);
    for chunk in (0..programs).collect::<Vec<_>>().chunks(50) {
        let batch = chunk.iter().map(|&i| program(manager, admin, i));
        sessions.extend(futures_util::future::try_join_all(batch).await?);
    }
    Ok(sessions)
}

/// Each session's program looping ([`churn`]) in a task of its own until `end` (or the tally's
/// `stop`); each task gives back its client and what it measured.
pub(crate) fn start_churning(
    sessions: Vec<(ArmClient, String)>,
    end: Instant,
    behaviour: Behaviour,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<(ArmClient, Samples)>> {
    sessions
        .into_iter()
        .enumerate()
        .map(|(me, (client, token))| {
            let tally = tally.clone();
            tokio::spawn(async move {
                let samples = churn(me, &client, token, end, behaviour, tally).await;
                (client, samples)
            })
        })
        .collect()
}

/// What one program measured: each granted-and-freed pair, and each request (granted,
/// rejected or freed) from its sending to its answer; and what it held when.
#[derive(Default)]
pub(crate) struct Samples {
    pairs: Vec<Duration>,
    requests: Vec<Duration>,
    pub(crate) holdings: Vec<Holding>,
}

/// After a rejection, how long a program waits before it asks again: `None` asks again at
/// once; `Some(mean)` waits between half and one and a half times `mean` (a program that goes
/// on computing with what it holds and asks again later).
pub(crate) type BackOff = Option<Duration>;

/// A small xorshift generator: each program's back-offs differ without a dependency.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// How one program behaves: its back-off after a rejection, its hold, and in which order it
/// holds and frees.
#[derive(Clone, Copy)]
pub(crate) struct Behaviour {
    pub(crate) back_off: BackOff,
    pub(crate) hold: Duration,
    pub(crate) order: Order,
}

/// One program's loop until `end`.
async fn churn(
    me: usize,
    client: &ArmClient,
    token: String,
    end: Instant,
    behaviour: Behaviour,
    tally: Arc<Tally>,
) -> Samples {
    let mut samples = Samples::default();
    let mut random = 0x9E37_79B9_7F4A_7C15 ^ (me as u64 + 1);
    while Instant::now() < end && !tally.stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let ask = Ask { min: 1, max: 1, wait_s: 0, preemptible: false, key: ac_proto::random_hex(16) };
        let answer = client.request(Request::Get { token: token.clone(), ask }).await;
        let granted = Instant::now();
        samples.requests.push(granted - start);
        if let (Some(times), Ok(Response::Granted { .. })) = (&tally.grant_times, &answer) {
            times.lock().expect("grant times poisoned").push(granted);
        }
        match answer {
            Ok(Response::Granted { set, grants }) => {
                if grants.len() != 1 {
                    tally.error(format!("AC_Get(1) granted {} accelerators", grants.len()));
                }
                let free = || async {
                    let sent = Instant::now();
                    let answer = client.request(Request::Free { token: token.clone(), set, accelerators: None }).await;
                    (answer, sent.elapsed())
                };
                let (freeing, (freed, latency)) = match behaviour.order {
                    Order::HoldThenFree => {
                        hold(behaviour.hold).await;
                        (Instant::now(), free().await)
                    }
                    Order::FreeThenHold => {
                        let freed = free().await;
                        hold(behaviour.hold).await;
                        (Instant::now(), freed)
                    }
                };
                let holdings = grants.iter().map(|g| Holding { accelerator: g.id.clone(), granted, freeing });
                samples.holdings.extend(holdings);
                match freed {
                    Ok(Response::Done) => {
                        samples.requests.push(latency);
                        samples.pairs.push(start.elapsed());
                        tally.pairs.fetch_add(1, Ordering::Relaxed);
                    }
                    other => tally.error(format!("AC_Free answered {other:?}")),
                }
            }
            Ok(Response::Rejected { .. }) => {
                tally.rejections.fetch_add(1, Ordering::Relaxed);
                if let Some(mean) = behaviour.back_off {
                    let spread = next_random(&mut random) % 1000;
                    tokio::time::sleep(mean / 2 + mean * spread as u32 / 1000).await;
                }
            }
            other => tally.error(format!("AC_Get answered {other:?}")),
        }
    }
    samples
}

/// Keeps a grant for `hold` (not even a yield when zero).
async fn hold(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// The load section: each of `plan`'s runs on a fresh manager, one table. Fails after printing
/// it if any run saw an error or a double grant.
pub async fn under_load(plan: &Plan) -> anyhow::Result<()> {
    let (programs, default_seconds) = if plan.quick { (100, 5) } else { (1000, 60) };
    let seconds = plan.seconds.unwrap_or(default_seconds);
    println!(
        "## The manager under load ({programs} programs, each its own QUIC connection, looping AC_Get(1)/AC_Free on {} CPU-device accelerators ({HOSTS} backends x {DEVICES}) for {seconds} s)\n",
        HOSTS as u32 * DEVICES
    );
    let hold = match (plan.order, plan.hold.as_millis()) {
        (Order::FreeThenHold, ms) => format!("Each grant is held {ms} ms after its AC_Free (a fault: the run must fail)."),
        (Order::HoldThenFree, 0) => "Each grant is freed at once: a double grant is seen only if it falls in the microseconds between a grant's answer and its AC_Free (--load-hold-ms widens them).".into(),
        (Order::HoldThenFree, ms) => format!("Each grant is held {ms} ms before its AC_Free."),
    };
    println!(
        "arm-server in its own process; programs are tasks of this process (2 runtime workers). Saturated: a rejected program asks again at once. Paced: it asks again after 100-300 ms, as a program that goes on computing with what it holds. `-3`: the same on three arm-server processes as the replicas of one manager (loopback addresses of their own; every change committed by a majority before it is answered; manager CPU is the three's sum, RSS the largest). {hold}\n"
    );
    // The same runs on three replicas of one manager (`-3`): what replication costs.
    let paced = Some(Duration::from_millis(200));
    let kinds = [("saturated", None, 1), ("paced", paced, 1), ("saturated-3", None, 3), ("paced-3", paced, 3)];
    let names: Vec<&str> = if plan.runs.is_empty() {
        kinds.iter().map(|(name, _, _)| *name).collect()
    } else {
        plan.runs.iter().map(String::as_str).collect()
    };
    let mut done: Vec<(&str, Run)> = Vec::new();
    let mut failures = Vec::new();
    for name in names {
        let Some(&(_, back_off, replicas)) = kinds.iter().find(|(kind, _, _)| *kind == name) else {
            bail!("no load run is named {name:?}: saturated, paced, saturated-3 or paced-3");
        };
        let behaviour = Behaviour { back_off, hold: plan.hold, order: plan.order };
        let manager = if replicas == 1 { Manager::start()? } else { Manager::start_replicas()? };
        let run = run_load(manager, programs, seconds, behaviour).await?;
        if run.errors > 0 || run.double_grants > 0 {
            failures.push(format!(
                "{name}: {} errors (first: {:?}), {} double grants",
                run.errors, run.first_errors, run.double_grants
            ));
        }
        done.push((name, run));
    }
    println!("| measure | {} |", done.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---|".repeat(done.len()));
    for row in 0..done[0].1.rows.len() {
        let cells: Vec<&str> = done.iter().map(|(_, run)| run.rows[row].1.as_str()).collect();
        println!("| {} | {} |", done[0].1.rows[row].0, cells.join(" | "));
    }
    println!();
    print_replication_cost(&done);
    if !failures.is_empty() {
        bail!("the manager under load failed: {}", failures.join("; "));
    }
    Ok(())
}

/// What one run measured and found.
struct Run {
    /// The table's rows (measure, value).
    rows: Vec<(String, String)>,
    errors: u64,
    first_errors: Vec<String>,
    double_grants: u64,
    /// Granted-and-freed pairs per second.
    pairs_per_s: f64,
    /// The request latency's 99th percentile, ms.
    request_p99_ms: f64,
}

/// What three replicas cost against one manager: each run on three replicas (`X-3`) against the
/// run of one manager (`X`) of the same rank (the first `paced-3` against the first `paced`, ...),
/// so that runs alternated (`paced,paced-3,paced-3,paced`) compare the VM as it was then; and
/// the medians over the pairs.
fn print_replication_cost(done: &[(&str, Run)]) {
    let mut lines = Vec::new();
    let (mut pairs_ratios, mut p99_ratios) = (Vec::new(), Vec::new());
    for kind in ["saturated", "paced"] {
        let three = format!("{kind}-3");
        let ones = done.iter().filter(|(name, _)| *name == kind).map(|(_, run)| run);
        let threes = done.iter().filter(|(name, _)| *name == three).map(|(_, run)| run);
        for (rank, (one, three)) in ones.zip(threes).enumerate() {
            let pairs = three.pairs_per_s / one.pairs_per_s.max(f64::MIN_POSITIVE);
            let p99 = three.request_p99_ms / one.request_p99_ms.max(f64::MIN_POSITIVE);
            lines.push(format!(
                "| {kind} #{} | {:.0} / {:.0}, {pairs:.2} | {:.1} / {:.1}, {p99:.2}x |",
                rank + 1,
                one.pairs_per_s,
                three.pairs_per_s,
                one.request_p99_ms,
                three.request_p99_ms
            ));
            pairs_ratios.push(pairs);
            p99_ratios.push(p99);
        }
    }
    if lines.is_empty() {
        return;
    }
    println!(
        "Three replicas against one manager, runs of the same rank (targets: pairs/s >= 0.8, request p99 <= 1.3x):\n"
    );
    println!("| runs | pairs/s one / three, ratio | request p99 one / three, ms, ratio |");
    println!("|---|---|---|");
    for line in lines {
        println!("{line}");
    }
    if pairs_ratios.len() > 1 {
        println!("| median | {:.2} | {:.2}x |", median(pairs_ratios), median(p99_ratios));
    }
    println!();
}

/// One run on a fresh manager.
async fn run_load(manager: Manager, programs: usize, seconds: u64, behaviour: Behaviour) -> anyhow::Result<Run> {
    let admin = ArmClient::connect(manager.admin_options()).await?;
    let _backends = add_hosts(&admin).await?;
    let connect_start = Instant::now();
    let sessions = connect_programs(&manager, &admin, programs).await?;
    let connecting = connect_start.elapsed();
    let load_before = load_average();
    let (cpu_before, rss_before) = manager.usage();
    let client_cpu_before = cpu_seconds(std::process::id());
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let tasks = start_churning(sessions, end, behaviour, &tally);
    let mut samples = Samples::default();
    let mut clients = Vec::with_capacity(programs);
    for task in tasks {
        let (client, mine) = task.await?;
        samples.pairs.extend(mine.pairs);
        samples.requests.extend(mine.requests);
        samples.holdings.extend(mine.holdings);
        clients.push(client);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (cpu_after, rss_after) = manager.usage();
    let client_cpu = cpu_seconds(std::process::id()) - client_cpu_before;
    let load_after = load_average();
    let mut stats = Vec::with_capacity(clients.len());
    for client in &clients {
        stats.extend(client.stats().await);
    }
    let sum = |f: &dyn Fn(&quinn::ConnectionStats) -> u64| stats.iter().map(f).sum::<u64>();
    let (sent, received) = (sum(&|s| s.udp_tx.datagrams), sum(&|s| s.udp_rx.datagrams));
    let stopped = sum(&|s| s.frame_tx.stop_sending + s.frame_rx.stop_sending);
    for client in clients {
        client.close_now().await;
    }
    admin.close_now().await;
    let pairs = tally.pairs.load(Ordering::Relaxed);
    let rejections = tally.rejections.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let double_grants = double_grants(samples.holdings);
    let ms = |(p50, p99): (f64, f64)| format!("{:.2} / {:.2}", p50 / 1e3, p99 / 1e3);
    // Sorting half a million samples is not free: each set is sorted once.
    let requests = (!samples.requests.is_empty()).then(|| percentiles(samples.requests));
    let pair_latency = (!samples.pairs.is_empty()).then(|| percentiles(samples.pairs));
    let request_p99_ms = requests.map_or(0.0, |(_, p99)| p99 / 1e3);
    let pairs_per_s = pairs as f64 / elapsed;
    let manager_cpu = cpu_after - cpu_before;
    let rows = vec![
        ("sessions connected in, s".into(), format!("{:.1}", connecting.as_secs_f64())),
        ("pairs (granted AC_Get + AC_Free)".into(), pairs.to_string()),
        ("pairs per second".into(), format!("{pairs_per_s:.0}")),
        ("request latency p50 / p99, ms (Get or Free, sent to answered)".into(), requests.map_or("-".into(), ms)),
        ("pair latency p50 / p99, ms".into(), pair_latency.map_or("-".into(), ms)),
        ("rejections (pool empty), per second".into(), format!("{rejections}, {:.0}", rejections as f64 / elapsed)),
        (
            "manager requests per second (Get + Free + rejected Get)".into(),
            format!("{:.0}", (2 * pairs + rejections) as f64 / elapsed),
        ),
        ("programs' datagrams per request, sent / received (whole connections, handshakes included)".into(), {
            let requests = (2 * pairs + rejections).max(1) as f64;
            format!("{:.2} / {:.2} ({stopped} STOP_SENDING frames)", sent as f64 / requests, received as f64 / requests)
        }),
        ("errors".into(), errors.to_string()),
        (
            "double grants (an accelerator held by two programs at once, grant answered to AC_Free sent)".into(),
            double_grants.to_string(),
        ),
        (
            format!("manager CPU seconds (of {elapsed:.1} s wall)"),
            format!("{manager_cpu:.1} ({:.0}% of one core)", manager_cpu / elapsed * 100.0),
        ),
        ("client CPU seconds (programs and backends)".into(), format!("{client_cpu:.1}")),
        (
            "manager RSS start / end, MiB".into(),
            format!("{:.1} / {:.1}", rss_before as f64 / 1024.0, rss_after as f64 / 1024.0),
        ),
        ("load average before / after".into(), format!("{load_before} / {load_after}")),
    ];
    let first_errors = std::mem::take(&mut *tally.first_errors.lock().expect("errors poisoned"));
    Ok(Run { rows, errors, first_errors, double_grants, pairs_per_s, request_p99_ms })
}
