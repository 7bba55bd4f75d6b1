//! Resource-manager latencies (issue 3): AC_Init and AC_Get as a program sees them, including
//! the connections to the granted backends, against the paper's Fig. 7-9.

use std::time::{Duration, Instant};

use ac_backend::CopySettings;
use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{Session, SessionOptions};
use ac_proto::arm::{JobAuth, Request, Response};
use ac_proto::transport::Tuning;

use crate::setup::{percentiles, InProcess};

struct Cluster {
    arm: arm_server::RunningArm,
    _backends: Vec<InProcess>,
    _state: tempfile::TempDir,
    admin: ArmClient,
}

impl Cluster {
    async fn start(n: usize) -> anyhow::Result<Self> {
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
        let mut backends = Vec::new();
        for i in 0..n {
            let b = InProcess::start(64, Tuning::default(), CopySettings::default()).await?;
            admin
                .request(Request::HostAdd {
                    addr: b.backend.addr(),
                    name: format!("h{i}"),
                    server_name: "127.0.0.1".into(),
                    ca_pem: std::fs::read_to_string(b.backend.ca_cert())?,
                    labels: vec![],
                })
                .await?;
            backends.push(b);
        }
        Ok(Self { arm, _backends: backends, _state: state, admin })
    }

    async fn submit(&self, id: &str, acpn: u32) -> anyhow::Result<String> {
        let request = Request::JobSubmit {
            id: id.into(),
            nodes: vec!["n1".into()],
            acpn,
            user: "bench".into(),
            walltime_s: 0,
            group: None,
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
    for x in 1..=6u32 {
        let mut samples = Vec::new();
        for _ in 0..reps {
            job += 1;
            let id = format!("init-{job}");
            let credential = cluster.submit(&id, x).await?;
            let start = Instant::now();
            let session = Session::init(cluster.options(&id, &credential)).await?;
            samples.push(start.elapsed());
            anyhow::ensure!(session.accelerators().len() == x as usize, "wrong handle count");
            session.finalize().await?;
            cluster.end(&id).await?;
        }
        row(&format!("AC_Init, {x} static accelerator(s)"), samples);
    }
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
