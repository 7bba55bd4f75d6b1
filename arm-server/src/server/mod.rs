//! The daemon: the QUIC API, leases, and the glue between the core, the store and the backend
//! links. Every change is committed to the store before the request is answered.
//!
//! # Layout
//! - this file: the shared state ([`Arm`]), start-up, connections, and each request's way to
//!   its handler (`handle`);
//! - `program.rs`: programs' requests (`AC_Init`, `AC_Get`, frees, notices);
//! - `admin.rs`: admin and batch requests, their authorization and audit;
//! - `batch.rs`: the manager beside Slurm (prolog bindings, license records, reconciliation);
//! - `commit.rs`: group commit and rollback; `lease.rs`: programs' leases; `ticks.rs`: what
//!   time alone changes; `hosts.rs`: backends' registration and link events;
//! - `views.rs`, `devices.rs`, `accounting.rs`, `metrics.rs`: what admins and Prometheus see;
//! - `replicated.rs`: one replica of a replicated manager (only the leader serves).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_proto::arm::{ArmError, ArmErrorKind, ArmRequest, ArmResponse, Request, Response, ALPN};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::metrics::MetricsServer;
use ac_proto::{tls, transport};
use quinn::{Connection, Endpoint};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::ArmConfig;
use crate::core::Core;
use crate::keys;
use crate::links::Links;
use crate::roles::{self, Caller, Revocations};
use crate::store::Store;
use crate::ArmServerError;

mod accounting;
mod admin;
mod batch;
mod commit;
mod devices;
mod hosts;
mod lease;
mod metrics;
mod program;
mod replicated;
#[cfg(test)]
mod tests;
mod ticks;
mod views;

pub use metrics::{mark_reserved, ACCELERATOR_STATES};

use lease::{program_tuning, Leases, Link};

type Answer = Result<Response, ArmError>;

fn err(kind: ArmErrorKind, message: impl Into<String>) -> ArmError {
    ArmError::new(kind, message)
}

/// The resource manager's shared state.
#[derive(Debug)]
pub struct Arm {
    core: Mutex<Core>,
    store: Arc<Store>,
    commits: Mutex<commit::Commits>,
    /// Held by the committer task for each group commit ([`Arm::commit_queued`]), and by what
    /// must not interleave with one (a rollback, a reload, member records).
    committing: tokio::sync::Mutex<()>,
    /// Bumped as each group commit ends (or a reload drops what was queued): callers waiting for
    /// their change to be durable look again.
    groups_ended: tokio::sync::watch::Sender<u64>,
    keys: Arc<keys::ManagerKeys>,
    /// Client certificates revoked before they expire (`revoked-certs`).
    revocations: Revocations,
    links: Links,
    leases: Mutex<Leases>,
    /// Woken after every change, for requests that wait on the state (`AwaitGet`).
    changed: tokio::sync::Notify,
    /// Slurm's commands, when the ARM works beside a Slurm controller.
    slurm: Option<crate::slurm::Slurm>,
    /// Grants are recorded in Slurm one at a time, so that each read-back of the pool's use
    /// judges one update; it guards the licenses the lent reservation holds, as last set.
    slurm_grants: tokio::sync::Mutex<u32>,
    /// Itself, for work a request hands to a task of its own.
    me: std::sync::Weak<Arm>,
    /// `AC_Get`s between their decision and their record in Slurm.
    grants_in_flight: std::sync::atomic::AtomicUsize,
    /// What the last reconciliation with Slurm found wrong (`armctl health`).
    slurm_problems: Mutex<Vec<String>>,
    /// What Prometheus scrapes (`metrics.rs`); counted whether or not it is served.
    metrics: metrics::Metrics,
    /// This replica, when the manager is replicated (`[replication]`).
    replication: Option<replicated::Replication>,
    config: ArmConfig,
}

/// A resource manager serving in this process.
#[derive(Debug)]
pub struct RunningArm {
    addr: SocketAddr,
    dir: PathBuf,
    endpoint: Endpoint,
    arm: Arc<Arm>,
    tasks: Vec<JoinHandle<()>>,
    metrics: Option<MetricsServer>,
}

impl RunningArm {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where Prometheus scrapes it (`metrics_listen`), if it serves metrics.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::addr)
    }

    /// The CA clients must trust.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The admin client certificate and key created on first start.
    pub fn admin_identity(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("admin.pem"), self.dir.join("admin.key"))
    }

    /// Free, usable accelerators (for tests and metrics).
    pub fn free_accelerators(&self) -> usize {
        let core = self.arm.core.lock().expect("core poisoned");
        core.usable_free()
    }

    /// Accelerators a job holds (granted and not yet freed, released or revoked), whether or
    /// not their hosts could grant them now.
    pub fn held_accelerators(&self) -> usize {
        let core = self.arm.core.lock().expect("core poisoned");
        core.hosts().values().map(|h| h.devices.iter().filter(|d| d.holder.is_some()).count()).sum()
    }

    /// Stops serving, the store untouched but for a replica's deferred applies, written out.
    pub async fn shutdown(self) {
        self.endpoint.close(0u32.into(), b"resource manager shutting down");
        for task in &self.tasks {
            task.abort();
        }
        for host in self.arm.core.lock().expect("core poisoned").hosts().keys() {
            self.arm.links.stop(host);
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
        // A replica's store, complete for whoever copies it next (a backup).
        let store = self.arm.store.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.write_deferred()).await {
            tracing::warn!(error = %e, "the applies deferred were not written: the log gives them back at the next start");
        }
    }
}

/// Starts the resource manager on the current tokio runtime.
pub async fn start(config: ArmConfig) -> Result<RunningArm, ArmServerError> {
    let dir = config.state_dir.clone();
    let mut names = tls::certificate_names(config.listen, &config.names);
    if let Some(replication) = &config.replication {
        // The other replicas dial its Raft address and check it against the certificate.
        let raft = replication.me()?.raft.ip().to_string();
        if !names.contains(&raft) {
            names.push(raft);
        }
    }
    let files = tls::ensure_self_signed(&dir, &names, &["admin"])?;
    tracing::info!(?names, "the certificate holds these names; programs and armctl must dial one of them");
    let identity = tls::load_identity(&files.cert, &files.key)?;
    let crypto = tls::server_crypto_with_clients(identity, ALPN, tls::load_roots(&files.ca_cert)?)?;
    let lasting = transport::lasting_keys(&dir)?;
    let endpoint = transport::server_endpoint(config.listen, crypto, &program_tuning(&config), Some(&lasting))?;
    let addr = endpoint.local_addr()?;
    let store = Arc::new(Store::open(&dir)?);
    let replication = match &config.replication {
        Some(replication) => {
            Some(replicated::Replication::start(replication, &dir, store.clone(), &config.transport, &lasting).await?)
        }
        None => None,
    };
    let mut core = store.load()?;
    core.configure(config.scheduler.clone(), config.preemption_grace_s);
    let signer = keys::signer(&dir)?;
    // What each backend's `arm_public_key` names (also `armctl manager-key`).
    tracing::info!(public_key = keys::hex(&signer.public_key()), "the manager's public key");
    let cluster = match &config.replication {
        Some(replication) => replication.keys(signer.public_key())?,
        None => Vec::new(),
    };
    let keys = Arc::new(keys::ManagerKeys::new(signer, cluster));
    let (events, event_rx) = mpsc::unbounded_channel();
    let links = Links::new(
        keys.clone(),
        events,
        (Duration::from_millis(config.backend_timeout_ms), Duration::from_millis(config.lease_ms)),
        config.transport.clone(),
    );
    // A replica starts its links when it takes the lead.
    if replication.is_none() {
        for host in core.hosts().values() {
            links.start(host);
        }
    }
    // Revocations the backends had not acknowledged go out again when each link comes up
    // (`host_events`), after a restart as after a reconnection.
    let mut leases = Leases::default();
    let grace = Instant::now() + Duration::from_millis(config.lease_ms);
    for token in core.sessions().keys() {
        // After a restart every program gets one lease to come back.
        leases.deadline.insert(token.clone(), grace);
    }
    let arm = Arc::new_cyclic(|me| Arm {
        core: Mutex::new(core),
        store,
        commits: Mutex::default(),
        committing: tokio::sync::Mutex::new(()),
        groups_ended: tokio::sync::watch::Sender::new(0),
        keys,
        revocations: Revocations::new(&dir),
        links,
        leases: Mutex::new(leases),
        changed: tokio::sync::Notify::new(),
        slurm: config.slurm.enabled.then(|| crate::slurm::Slurm::new(config.slurm.clone())),
        slurm_grants: tokio::sync::Mutex::new(0),
        me: me.clone(),
        grants_in_flight: std::sync::atomic::AtomicUsize::new(0),
        slurm_problems: Mutex::default(),
        metrics: metrics::Metrics::default(),
        replication,
        config,
    });
    // Holders and intervals were stored together; what a migrated store or a host removed
    // while the manager was down leaves out of step is put right now (`account_all`; a
    // replica does it when it takes the lead).
    if arm.replication.is_none() {
        arm.mutate(|core, _| {
            core.account_all(accounting::unix_now_ms());
            Ok(())
        })
        .await
        .map_err(|e| ArmServerError::Store(e.to_string()))?;
    }
    let metrics = match arm.config.metrics_listen {
        Some(listen) => Some(
            MetricsServer::start(listen, arm.metrics.registry(Arc::downgrade(&arm)))
                .await
                .map_err(|e| ArmServerError::Config(format!("cannot serve metrics on {listen}: {e}")))?,
        ),
        None => None,
    };
    let mut tasks = vec![
        tokio::spawn(accept_loop(endpoint.clone(), arm.clone())),
        tokio::spawn(accounting::purge_loop(arm.clone())),
        tokio::spawn(hosts::host_events(arm.clone(), event_rx)),
        tokio::spawn(ticks::expire_loop(arm.clone())),
        tokio::spawn(replicated::leadership_loop(arm.clone())),
    ];
    if arm.slurm.is_some() {
        tasks.push(tokio::spawn(batch::reconcile_loop(arm.clone())));
    }
    tracing::info!(%addr, "resource manager listening");
    Ok(RunningArm { addr, dir, endpoint, arm, tasks, metrics })
}

async fn accept_loop(endpoint: Endpoint, arm: Arc<Arm>) {
    while let Some(incoming) = endpoint.accept().await {
        let arm = arm.clone();
        tokio::spawn(async move {
            if let Ok(conn) = incoming.await {
                let span = tracing::info_span!("client", peer = %conn.remote_address());
                serve_connection(arm, conn).instrument(span).await;
            }
        });
    }
}

async fn serve_connection(arm: Arc<Arm>, conn: Connection) {
    let caller = Arc::new(caller_of(&conn));
    let link = Arc::new(Link::new());
    while let Ok((mut send, recv)) = conn.accept_bi().await {
        let (arm, link, conn, caller) = (arm.clone(), link.clone(), conn.clone(), caller.clone());
        tokio::spawn(async move {
            let mut reader = FrameReader::new(recv);
            let request: ArmRequest = match reader.expect_frame().await {
                Ok(request) => request,
                Err(e) => {
                    conn.close(2u32.into(), format!("malformed request: {e}").as_bytes());
                    return;
                }
            };
            let spoken = arm.config.protocols();
            let answer = if !spoken.contains(&request.version) {
                Err(err(
                    ArmErrorKind::VersionMismatch,
                    format!(
                        "protocol version mismatch: the resource manager speaks {} to {}, the client {}",
                        spoken.start(),
                        spoken.end(),
                        request.version
                    ),
                ))
            } else {
                let span = tracing::debug_span!("request", caller = caller.name, role = ?caller.role);
                let (call, start) = (metrics::call_label(&request.request), Instant::now());
                let answer = arm.handle(request.request, &caller, &link).instrument(span).await;
                if let Some(call) = call {
                    arm.metrics.answered(call, start.elapsed());
                }
                answer
            };
            let reply = match answer {
                Ok(response) => ArmResponse::Ok(response),
                // A client older than protocol 9 knows no such kind: the words say it.
                Err(e) if e.kind == ArmErrorKind::NotLeader && request.version < 9 => {
                    ArmResponse::Err(err(ArmErrorKind::Internal, e.message))
                }
                Err(e) => ArmResponse::Err(e),
            };
            if let Ok(frame) = frame_bytes(&reply) {
                let _ = send.write_all(&frame).await;
                let _ = send.finish();
            }
            // A client always ends its request's stream; one that does not keeps only this
            // task, and one of its connection's few stream slots, until it closes.
            let _ = reader.read_end().await;
        });
    }
    arm.connection_closed(&conn, &link);
}

/// The client of `conn`, from the certificate it presented (none: a program).
fn caller_of(conn: &Connection) -> Caller {
    let chain =
        conn.peer_identity().and_then(|id| id.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>().ok());
    Caller::from_certificate(chain.as_ref().and_then(|c| c.first()).map(|c| c.as_ref()))
}

impl Arm {
    /// Answers one request: a program's, or, once its caller's role allows it, an admin's or a
    /// batch system's.
    async fn handle(&self, request: Request, caller: &Caller, link: &Link) -> Answer {
        if let Some(refusal) = self.refuse_unless_leading(&request) {
            return Err(refusal);
        }
        match roles::needs(&request) {
            None => self.program_request(request, link).await,
            Some(needed) => {
                self.authorize(&request, caller, needed)?;
                self.admin_request(request).await
            }
        }
    }
}
