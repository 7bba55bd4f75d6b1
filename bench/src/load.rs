//! The manager under load (issue 27, item 3): many connected programs loop `AC_Get(1)` /
//! `AC_Free` on a pool of 64 accelerators, and the manager's side is measured: the request and
//! its answer over each program's own QUIC connection, not the handshakes with the backends
//! (the programs speak the manager's protocol through `ArmClient`, as `Session` does, and never
//! dial the granted backends).

use std::collections::HashMap;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_backend::{BackendConfig, DeviceChoice};
use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_proto::arm::{Ask, JobAuth, Request, Response};
use anyhow::bail;

use crate::setup::{cpu_seconds, percentiles, spawn_daemon, InProcess};

const HOSTS: usize = 8;
const DEVICES: u32 = 8;

/// The `arm-server` binary in a process of its own, so that its CPU time and memory are its own.
struct Manager {
    child: Child,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl Manager {
    fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let (child, addr) = spawn_daemon("arm-server", &[], &dir.path().join("arm"))?;
        Ok(Self { child, addr, dir })
    }

    fn options(&self) -> ArmOptions {
        ArmOptions::new(self.addr, self.dir.path().join("arm/ca.pem"))
    }

    fn admin_options(&self) -> ArmOptions {
        let mut options = self.options();
        let arm = self.dir.path().join("arm");
        options.identity = Some((arm.join("admin.pem"), arm.join("admin.key")));
        options
    }

    /// CPU seconds so far and resident memory in KiB.
    fn usage(&self) -> (f64, u64) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        (cpu_seconds(pid), rss)
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every program counts.
#[derive(Default)]
struct Tally {
    pairs: AtomicU64,
    rejections: AtomicU64,
    errors: AtomicU64,
    double_grants: AtomicU64,
}

/// Which program holds each accelerator, by the grant answers, and whether it has sent its
/// `AC_Free` yet. A grant of an accelerator whose holder has not sent its `AC_Free` is a double
/// grant; one whose holder's `AC_Free` is on its way may be a legitimate grant after it, so it
/// is not counted.
type Holders = Mutex<HashMap<String, (usize, bool)>>;

/// Moves each of `grants` that is still in state `from` to `to` (`None`: forgotten).
fn mark(holders: &Holders, grants: &[ac_proto::arm::Grant], from: (usize, bool), to: Option<(usize, bool)>) {
    let mut held = holders.lock().expect("holders poisoned");
    for grant in grants {
        if held.get(&grant.id) == Some(&from) {
            match to {
                Some(state) => held.insert(grant.id.clone(), state),
                None => held.remove(&grant.id),
            };
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn add_hosts(admin: &ArmClient) -> anyhow::Result<Vec<InProcess>> {
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

/// What one program measured: each granted-and-freed pair, and each request (granted,
/// rejected or freed) from its sending to its answer.
#[derive(Default)]
struct Samples {
    pairs: Vec<Duration>,
    requests: Vec<Duration>,
}

/// After a rejection, how long a program waits before it asks again: `None` asks again at
/// once; `Some(mean)` waits between half and one and a half times `mean` (a program that goes
/// on computing with what it holds and asks again later).
type BackOff = Option<Duration>;

/// A small xorshift generator: each program's back-offs differ without a dependency.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One program's loop until `end`.
async fn churn(
    me: usize,
    client: &ArmClient,
    token: String,
    end: Instant,
    back_off: BackOff,
    tally: Arc<Tally>,
    holders: Arc<Holders>,
) -> Samples {
    let mut samples = Samples::default();
    let mut random = 0x9E37_79B9_7F4A_7C15 ^ (me as u64 + 1);
    while Instant::now() < end {
        let start = Instant::now();
        let ask = Ask { min: 1, max: 1, wait_s: 0, preemptible: false, key: ac_proto::random_hex(16) };
        let answer = client.request(Request::Get { token: token.clone(), ask }).await;
        samples.requests.push(start.elapsed());
        match answer {
            Ok(Response::Granted { set, grants }) => {
                for grant in &grants {
                    let previous = holders.lock().expect("holders poisoned").insert(grant.id.clone(), (me, false));
                    // Held by a program that has not sent its AC_Free yet: granted twice.
                    if matches!(previous, Some((_, false))) {
                        tally.double_grants.fetch_add(1, Ordering::Relaxed);
                    }
                }
                mark(&holders, &grants, (me, false), Some((me, true)));
                let freeing = Instant::now();
                match client.request(Request::Free { token: token.clone(), set, accelerators: None }).await {
                    Ok(Response::Done) => {
                        samples.requests.push(freeing.elapsed());
                        samples.pairs.push(start.elapsed());
                        tally.pairs.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                mark(&holders, &grants, (me, true), None);
            }
            Ok(Response::Rejected { .. }) => {
                tally.rejections.fetch_add(1, Ordering::Relaxed);
                if let Some(mean) = back_off {
                    let spread = next_random(&mut random) % 1000;
                    tokio::time::sleep(mean / 2 + mean * spread as u32 / 1000).await;
                }
            }
            _ => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    samples
}

pub async fn under_load(quick: bool, only: &[String], seconds: Option<u64>) -> anyhow::Result<()> {
    let (programs, default_seconds) = if quick { (100, 5) } else { (1000, 60) };
    let seconds = seconds.unwrap_or(default_seconds);
    println!(
        "## The manager under load ({programs} programs, each its own QUIC connection, looping AC_Get(1)/AC_Free on {} CPU-device accelerators ({HOSTS} backends x {DEVICES}) for {seconds} s)\n",
        HOSTS as u32 * DEVICES
    );
    println!(
        "arm-server in its own process; programs are tasks of this process (2 runtime workers). Saturated: a rejected program asks again at once. Paced: it asks again after 100-300 ms, as a program that goes on computing with what it holds.\n"
    );
    let runs = [("saturated", None), ("paced", Some(Duration::from_millis(200)))];
    let mut tables = Vec::new();
    for (name, back_off) in runs.into_iter().filter(|(name, _)| only.is_empty() || only.iter().any(|o| o == name)) {
        tables.push((name, run_load(programs, seconds, back_off).await?));
    }
    if tables.is_empty() {
        bail!("no load run is named {only:?}: saturated or paced");
    }
    println!("| measure | {} |", tables.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---|".repeat(tables.len()));
    for row in 0..tables[0].1.len() {
        let cells: Vec<&str> = tables.iter().map(|(_, rows)| rows[row].1.as_str()).collect();
        println!("| {} | {} |", tables[0].1[row].0, cells.join(" | "));
    }
    println!();
    Ok(())
}

/// One run on a fresh manager: the table's rows (measure, value).
async fn run_load(programs: usize, seconds: u64, back_off: BackOff) -> anyhow::Result<Vec<(String, String)>> {
    let manager = Manager::start()?;
    let admin = ArmClient::connect(manager.admin_options()).await?;
    let _backends = add_hosts(&admin).await?;
    let connect_start = Instant::now();
    let mut sessions = Vec::with_capacity(programs);
    // A few dozen handshakes at a time, as programs starting on a cluster would.
    for chunk in (0..programs).collect::<Vec<_>>().chunks(50) {
        let batch = chunk.iter().map(|&i| program(&manager, &admin, i));
        sessions.extend(futures_util::future::try_join_all(batch).await?);
    }
    let connecting = connect_start.elapsed();
    let load_before = load_average();
    let (cpu_before, rss_before) = manager.usage();
    let client_cpu_before = cpu_seconds(std::process::id());
    let tally = Arc::new(Tally::default());
    let holders = Arc::new(Holders::default());
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(me, (client, token))| {
            let (tally, holders) = (tally.clone(), holders.clone());
            tokio::spawn(async move {
                let samples = churn(me, &client, token, end, back_off, tally, holders).await;
                (client, samples)
            })
        })
        .collect();
    let mut samples = Samples::default();
    let mut clients = Vec::with_capacity(programs);
    for task in tasks {
        let (client, mine) = task.await?;
        samples.pairs.extend(mine.pairs);
        samples.requests.extend(mine.requests);
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
    let ms = |(p50, p99): (f64, f64)| format!("{:.2} / {:.2}", p50 / 1e3, p99 / 1e3);
    let or_none = |v: Vec<Duration>| if v.is_empty() { "-".to_string() } else { ms(percentiles(v)) };
    let manager_cpu = cpu_after - cpu_before;
    Ok(vec![
        ("sessions connected in, s".into(), format!("{:.1}", connecting.as_secs_f64())),
        ("pairs (granted AC_Get + AC_Free)".into(), pairs.to_string()),
        ("pairs per second".into(), format!("{:.0}", pairs as f64 / elapsed)),
        ("request latency p50 / p99, ms (Get or Free, sent to answered)".into(), or_none(samples.requests)),
        ("pair latency p50 / p99, ms".into(), or_none(samples.pairs)),
        ("rejections (pool empty), per second".into(), format!("{rejections}, {:.0}", rejections as f64 / elapsed)),
        (
            "manager requests per second (Get + Free + rejected Get)".into(),
            format!("{:.0}", (2 * pairs + rejections) as f64 / elapsed),
        ),
        ("programs' datagrams per request, sent / received (whole connections, handshakes included)".into(), {
            let requests = (2 * pairs + rejections).max(1) as f64;
            format!("{:.2} / {:.2} ({stopped} STOP_SENDING frames)", sent as f64 / requests, received as f64 / requests)
        }),
        ("errors".into(), tally.errors.load(Ordering::Relaxed).to_string()),
        ("double grants".into(), tally.double_grants.load(Ordering::Relaxed).to_string()),
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
    ])
}
