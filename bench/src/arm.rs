//! Resource-manager latencies (issue 3): AC_Init and AC_Get as a program sees them, including
//! the connections to the granted backends, against the paper's Fig. 7-9.

use std::time::{Duration, Instant};

use ac_backend::CopySettings;
use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{GetRequest, Session, SessionOptions};
use ac_proto::arm::{Ask, JobAuth, Request, Response};
use ac_proto::transport::Tuning;

use crate::setup::{percentiles, Child_, InProcess};

pub(crate) struct Cluster {
    pub(crate) arm: arm_server::RunningArm,
    _backends: Vec<InProcess>,
    _children: Vec<Child_>,
    _state: tempfile::TempDir,
    admin: ArmClient,
}

impl Cluster {
    /// A manager with `n` backends, all in this process.
    pub(crate) async fn start(n: usize) -> anyhow::Result<Self> {
        let mut cluster = Self::manager().await?;
        for i in 0..n {
            let b = InProcess::start(64, Tuning::default(), CopySettings::default()).await?;
            cluster.add_host(i, b.backend.addr(), b.backend.ca_cert()).await?;
            cluster._backends.push(b);
        }
        Ok(cluster)
    }

    /// A manager in this process with `n` backends in processes of their own, as on a cluster.
    pub(crate) async fn with_backend_processes(n: usize) -> anyhow::Result<Self> {
        let mut cluster = Self::manager().await?;
        for i in 0..n {
            let b = Child_::start(256)?;
            cluster.add_host(i, b.options.addr, b.options.ca_cert.clone()).await?;
            cluster._children.push(b);
        }
        Ok(cluster)
    }

    async fn manager() -> anyhow::Result<Self> {
        let state = tempfile::tempdir()?;
        let config = arm_server::ArmConfig {
            listen: "127.0.0.1:0".parse()?,
            state_dir: state.path().to_path_buf(),
            ..arm_server::ArmConfig::default()
        };
        let arm = arm_server::start(config).await?;
        let mut options = ArmOptions::new(arm.addr(), arm.ca_cert());
        options.identity = Some(arm.admin_identity());
        let admin = ArmClient::connect(options).await?;
        Ok(Self { arm, _backends: Vec::new(), _children: Vec::new(), _state: state, admin })
    }

    async fn add_host(
        &self,
        i: usize,
        addr: std::net::SocketAddr,
        ca: impl AsRef<std::path::Path>,
    ) -> anyhow::Result<()> {
        let request = Request::HostAdd {
            addr,
            name: format!("h{i}"),
            server_name: "127.0.0.1".into(),
            ca_pem: std::fs::read_to_string(ca)?,
            labels: vec![],
        };
        self.admin.request(request).await?;
        Ok(())
    }

    pub(crate) async fn submit(&self, id: &str, acpn: u32) -> anyhow::Result<String> {
        let request = Request::JobSubmit {
            id: id.into(),
            nodes: vec!["n1".into()],
            acpn,
            user: "bench".into(),
            walltime_s: 0,
            group: None,
            reservation: None,
            peak: None,
        };
        match self.admin.request(request).await? {
            Response::Submitted { credential, .. } => Ok(credential),
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }

    fn options(&self, job: &str, credential: &str) -> SessionOptions {
        SessionOptions {
            arm: ArmOptions::new(self.arm.addr(), self.arm.ca_cert()),
            job: JobAuth::Credential { job: job.into(), secret: credential.into() },
            node: "n1".into(),
            init_timeout: Some(Duration::from_secs(10)),
            stripes: 1,
            progress: false,
        }
    }

    async fn end(&self, id: &str) -> anyhow::Result<()> {
        self.admin.request(Request::JobEnd { id: id.into() }).await?;
        Ok(())
    }
}

/// What `AC_Init` of `n` accelerators cannot avoid: a handshake and a request to the manager,
/// then a handshake and a hello with each backend, all in parallel, over one endpoint.
async fn init_floor(cluster: &Cluster, n: usize) -> anyhow::Result<Duration> {
    let options: Vec<_> = cluster._backends.iter().take(n).map(|b| b.options(1, &Tuning::default())).collect();
    let start = Instant::now();
    // As `Session::init` does: the backends' endpoint is made while the manager's handshake runs.
    let (client, endpoint) =
        tokio::join!(ArmClient::connect(ArmOptions::new(cluster.arm.addr(), cluster.arm.ca_cert())), async {
            ac_proto::transport::client_endpoint(options[0].addr, None, &Tuning::default())
        });
    let (client, endpoint) = (client?, endpoint?);
    // Any request: an unknown session is refused after one round trip.
    let _ = client.request(Request::Poll { token: ac_proto::random_hex(32) }).await;
    let hello = ac_proto::backend::Hello::Open { capability: vec![], device: 0 };
    let opens = options.iter().map(|o| async {
        let crypto = ac_proto::backend::link::client_crypto(o)?;
        // Refused (no capability), after the same handshake and hello a real open costs.
        let _ = ac_proto::backend::link::open_on(o, crypto, &hello, Some(&endpoint)).await;
        Ok::<_, ac_frontend::Error>(())
    });
    futures_util::future::try_join_all(opens).await?;
    let elapsed = start.elapsed();
    client.close_now().await;
    Ok(elapsed)
}

/// Lets the previous sample's connections and sessions wind down, so that each sample starts
/// on a quiet machine.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(30)).await;
}

fn row(label: &str, samples: Vec<Duration>) -> (f64, f64) {
    let (p50, p99) = percentiles(samples);
    println!("| {label} | {:.2} | {:.2} |", p50 / 1e3, p99 / 1e3);
    (p50, p99)
}

async fn timed_get(session: &Session, n: u32) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let set = session.get(n).await?.ok_or_else(|| anyhow::anyhow!("get({n}) rejected"))?;
    let elapsed = start.elapsed();
    session.free(set).await?;
    Ok(elapsed)
}

pub async fn latencies(quick: bool) -> anyhow::Result<()> {
    let reps = if quick { 5 } else { 30 };
    let cluster = Cluster::start(7).await?;
    println!("## Resource manager (ARM and 7 CPU-device backends in-process, loopback)\n");
    println!("Times include connecting to the granted backends (one QUIC handshake each, in parallel), as a program sees them. {reps} repetitions.\n");
    println!("| operation | p50 ms | p99 ms |");
    println!("|---|---|---|");
    let mut job = 0;
    let (mut finalizes, mut floors, mut inits) = (Vec::new(), Vec::new(), (0.0, 0.0));
    for x in 1..=6u32 {
        let mut samples = Vec::new();
        for _ in 0..reps {
            job += 1;
            let id = format!("init-{job}");
            let credential = cluster.submit(&id, x).await?;
            settle().await;
            let start = Instant::now();
            let session = Session::init(cluster.options(&id, &credential)).await?;
            samples.push(start.elapsed());
            anyhow::ensure!(session.accelerators().len() == x as usize, "wrong handle count");
            let start = Instant::now();
            session.finalize().await?;
            let finalized = start.elapsed();
            cluster.end(&id).await?;
            if x == 6 {
                finalizes.push(finalized);
                // Interleaved with the inits it bounds, so that the machine's drift falls on both.
                settle().await;
                floors.push(init_floor(&cluster, 6).await?);
            }
        }
        inits = row(&format!("AC_Init, {x} static accelerator(s)"), samples);
    }
    row("AC_Finalize, 6 static accelerators", finalizes);
    let floor = row(
        "the floor of AC_Init of 6: one handshake and request to the ARM, then 6 handshakes and hellos in parallel",
        floors,
    );
    println!("| ... AC_Init of 6 / its floor | {:.2} | |", inits.0 / floor.0);
    let credential = cluster.submit("dyn", 1).await?;
    let session = Session::init(cluster.options("dyn", &credential)).await?;
    let mut lone = (0.0, 0.0);
    for n in 1..=6u32 {
        let mut samples = Vec::new();
        for _ in 0..reps {
            samples.push(timed_get(&session, n).await?);
        }
        let r = row(&format!("AC_Get of {n}"), samples);
        if n == 1 {
            lone = r;
        }
    }
    // Three programs calling AC_Get at the same moment.
    let mut others = Vec::new();
    for i in 0..2 {
        let id = format!("trio-{i}");
        let credential = cluster.submit(&id, 1).await?;
        others.push(Session::init(cluster.options(&id, &credential)).await?);
    }
    let mut slowest = Vec::new();
    for _ in 0..reps {
        let (a, b, c) = tokio::join!(timed_get(&session, 1), timed_get(&others[0], 1), timed_get(&others[1], 1));
        slowest.push(a?.max(b?).max(c?));
    }
    let (p50, _) = row("three simultaneous AC_Get of 1: the slowest", slowest);
    println!("| ... ratio to a lone AC_Get of 1 | {:.2} | |", p50 / lone.0);
    for (i, other) in others.into_iter().enumerate() {
        other.finalize().await?;
        cluster.end(&format!("trio-{i}")).await?;
    }
    // Queued static jobs that cannot start (each wants the whole pool).
    let mut queued = 0;
    for target in [20usize, 1000] {
        while queued < target {
            queued += 1;
            cluster.submit(&format!("queued-{queued}"), 7).await?;
        }
        let mut samples = Vec::new();
        for _ in 0..reps {
            samples.push(timed_get(&session, 1).await?);
        }
        let (p50, _) = row(&format!("AC_Get of 1 with {target} static jobs queued"), samples);
        println!("| ... ratio to AC_Get of 1 idle | {:.2} | |", p50 / lone.0);
    }
    session.finalize().await?;
    println!();
    Ok(())
}

/// A program's raw client with a bound session, for the protocol-level measurements.
async fn raw_program(cluster: &Cluster, job: &str, credential: &str) -> anyhow::Result<(ArmClient, String)> {
    let client = ArmClient::connect(ArmOptions::new(cluster.arm.addr(), cluster.arm.ca_cert())).await?;
    let token = ac_proto::random_hex(32);
    let auth = JobAuth::Credential { job: job.into(), secret: credential.into() };
    client.request(Request::Init { auth, node: "n1".into(), token: token.clone() }).await?;
    Ok((client, token))
}

fn ask(min: u32, max: u32, wait_s: u64) -> Ask {
    Ask { min, max, wait_s, preemptible: false, key: ac_proto::random_hex(16) }
}

/// The scheduler API (issue 10): a `min..max` request against an all-or-nothing one of the same
/// size, how soon a waiting request is granted once accelerators are released, and how long a
/// restart with a large store takes to serve again.
pub async fn scheduler_api(quick: bool) -> anyhow::Result<()> {
    let reps = if quick { 5 } else { 100 };
    let cluster = Cluster::start(7).await?;
    println!("## Scheduler API (ARM and 7 CPU-device backends in-process, loopback, {reps} repetitions)\n");
    println!("| operation | p50 ms | p99 ms |");
    println!("|---|---|---|");
    let credential = cluster.submit("dyn", 1).await?;
    let session = Session::init(cluster.options("dyn", &credential)).await?;
    let (mut exact, mut ranged) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        exact.push(timed_get(&session, 4).await?);
        let start = Instant::now();
        let set = session.get_with(GetRequest::new(4).at_least(1)).await?.ok_or_else(|| anyhow::anyhow!("rejected"))?;
        ranged.push(start.elapsed());
        anyhow::ensure!(set.handles.len() == 4, "a partial grant with 6 idle");
        session.free(set).await?;
    }
    let (exact, _) = row("AC_Get of 4, all or nothing", exact);
    let (ranged, _) = row("AC_Get of 1..4 (4 idle and granted)", ranged);
    println!("| ... ratio | {:.2} | |", ranged / exact);
    session.finalize().await?;
    cluster.end("dyn").await?;

    // Two programs hold every accelerator but one; `holder` takes it, `waiter` waits for it.
    let holder_credential = cluster.submit("holder", 3).await?;
    let waiter_credential = cluster.submit("waiter", 3).await?;
    let (holder, holder_token) = raw_program(&cluster, "holder", &holder_credential).await?;
    let (waiter, waiter_token) = raw_program(&cluster, "waiter", &waiter_credential).await?;
    let waiter = std::sync::Arc::new(waiter);
    let (mut after_release, mut release_alone) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let Response::Granted { set, .. } =
            holder.request(Request::Get { token: holder_token.clone(), ask: ask(1, 1, 0) }).await?
        else {
            anyhow::bail!("the holder was not granted the idle accelerator");
        };
        let Response::Waiting { request, .. } =
            waiter.request(Request::Get { token: waiter_token.clone(), ask: ask(1, 1, 60) }).await?
        else {
            anyhow::bail!("the waiter did not wait");
        };
        let (client, token) = (waiter.clone(), waiter_token.clone());
        let granted = tokio::spawn(async move {
            loop {
                match client.request(Request::AwaitGet { token: token.clone(), request }).await? {
                    Response::Granted { set, .. } => return Ok::<_, anyhow::Error>((Instant::now(), set)),
                    Response::Waiting { .. } => continue,
                    other => anyhow::bail!("unexpected {other:?}"),
                }
            }
        });
        // Let the AwaitGet reach the manager before the release.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = Instant::now();
        holder.request(Request::Free { token: holder_token.clone(), set, accelerators: None }).await?;
        release_alone.push(start.elapsed());
        let (at, set) = granted.await??;
        after_release.push(at - start);
        waiter.request(Request::Free { token: waiter_token.clone(), set, accelerators: None }).await?;
    }
    row("AC_Free of 1 (the release itself, a round trip)", release_alone);
    row("a waiting AC_Get: from the release's start to its grant", after_release);
    println!();
    restart_with_large_store(quick).await
}

/// Builds a store with `ended` ended and `live` queued jobs, then times a restart until the first
/// request is answered.
async fn restart_with_large_store(quick: bool) -> anyhow::Result<()> {
    use arm_server::core::{Core, Durable, Key};
    use arm_server::model::{Device, Host, Job, JobState};
    let (ended, live) = if quick { (1_000, 100) } else { (10_000, 1_000) };
    let state = tempfile::tempdir()?;
    let mut durable = Durable::default();
    let mut keys = std::collections::BTreeSet::new();
    let host = Host {
        name: "h0".into(),
        addr: "127.0.0.1:9".parse()?,
        server_name: "127.0.0.1".into(),
        ca_pem: String::new(),
        labels: vec![],
        draining: false,
        up: false,
        devices: (0..8).map(|i| Device { index: i, name: "cpu".into(), memory: 1, holder: None }).collect(),
        mismatch: None,
        states: Default::default(),
    };
    keys.insert(Key::Host(host.name.clone()));
    durable.hosts.insert(host.name.clone(), host);
    let now = ac_proto::capability::unix_now();
    for i in 0..ended + live {
        let id = format!("job-{i}");
        let job = Job {
            id: id.clone(),
            user: format!("user{}", i % 50),
            group: format!("group{}", i % 5),
            nodes: vec!["n1".into()],
            acpn: 1,
            walltime_s: 3600,
            submitted: now,
            started: (i < ended).then_some(now),
            ended: (i < ended).then_some(now),
            state: if i < ended { JobState::Ended } else { JobState::Queued },
            credential_hash: arm_server::keys::hash(&id),
            seq: i as u64,
            ad_hoc: false,
            reservation: None,
            peak: None,
            batch: None,
        };
        keys.insert(Key::Job(id.clone()));
        durable.jobs.insert(id, job);
    }
    {
        let store = arm_server::store::Store::open(state.path())?;
        store.commit(&arm_server::store::Store::snapshot(&Core::restore(durable), &keys)?)?;
    }
    let config = arm_server::ArmConfig {
        listen: "127.0.0.1:0".parse()?,
        state_dir: state.path().to_path_buf(),
        ..arm_server::ArmConfig::default()
    };
    let start = Instant::now();
    let arm = arm_server::start(config).await?;
    let mut options = ArmOptions::new(arm.addr(), arm.ca_cert());
    options.identity = Some(arm.admin_identity());
    let admin = ArmClient::connect(options).await?;
    admin.request(Request::JobShow { id: format!("job-{}", ended + live - 1) }).await?;
    let serving = start.elapsed();
    println!("| restart with {ended} ended and {live} queued jobs | serving again after | ms |");
    println!("|---|---|---|");
    println!("| store of {} KiB | first answer | {:.1} |", dir_size(state.path()) >> 10, serving.as_secs_f64() * 1e3);
    println!();
    arm.shutdown().await;
    Ok(())
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map_or(0, |entries| entries.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
}
