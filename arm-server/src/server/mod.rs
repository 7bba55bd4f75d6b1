//! The daemon: the QUIC API, leases, and the glue between the core, the store and the backend
//! links. Every change is committed to the store before the request is answered.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_frontend::link::{self, ConnectOptions};
use ac_proto::arm::{
    AcceleratorView, ArmError, ArmErrorKind, ArmRequest, ArmResponse, Ask, Grant, HostView, JobAuth, JobView, Request,
    ReservationView, Response, Route, SessionState, ALPN, MIN_TOKEN_LEN,
};
use ac_proto::backend::{register_message, Hello};
use ac_proto::capability::{self, unix_now, Signer};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::metrics::MetricsServer;
use ac_proto::{tls, transport};
use quinn::{Connection, Endpoint};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::ArmConfig;
use crate::core::{Core, GetOutcome, ReservationOwner, StaticState};
use crate::keys;
use crate::links::{LinkEvent, Links};
use crate::model::{Device, Holder, Host, Job, JobState, Reservation};
use crate::roles::{self, Caller, Revocations, Role};
use crate::store::{Change, Store};
use crate::ArmServerError;

mod accounting;
mod batch;
mod devices;
mod lease;
mod metrics;

pub use metrics::{mark_reserved, ACCELERATOR_STATES};

use lease::{lease_deadline, program_tuning, Leases};

type Answer = Result<Response, ArmError>;

fn err(kind: ArmErrorKind, message: impl Into<String>) -> ArmError {
    ArmError::new(kind, message)
}

/// Changes waiting to be committed, in the order the core made them (group commit).
#[derive(Debug, Default)]
struct Commits {
    pending: Vec<Change>,
    /// Sequence number of the last change queued.
    queued: u64,
    /// Sequence number of the last change durable.
    durable: u64,
    /// The changes through this sequence number were rolled back: their commit failed.
    failed: u64,
    /// What their callers are told.
    failure: String,
    /// Memory holds changes the store lacks: a rollback could not read the store back. No
    /// change is made until it can (`reload_if_stale`).
    stale: bool,
}

/// How long after its last failed write a store is tried again, changes or not (`expire_loop`).
const STORE_RETRY: Duration = Duration::from_secs(5);

/// What a caller is told of a failed commit: the store's words, without "store error: ".
fn store_failure(e: ArmServerError) -> ArmError {
    match e {
        ArmServerError::Store(message) => err(ArmErrorKind::Internal, message),
        other => err(ArmErrorKind::Internal, other.to_string()),
    }
}

/// The resource manager's shared state.
#[derive(Debug)]
pub struct Arm {
    core: Mutex<Core>,
    store: Arc<Store>,
    commits: Mutex<Commits>,
    /// Held by the request that commits for everyone queued; the others wait on it, off the
    /// runtime's threads.
    committing: tokio::sync::Mutex<()>,
    signer: Arc<Signer>,
    /// Client certificates revoked before they expire (`revoked-certs`).
    revocations: Revocations,
    links: Links,
    leases: Mutex<Leases>,
    /// Woken after every change, for requests that wait on the state (`AwaitGet`).
    changed: tokio::sync::Notify,
    /// Slurm's commands, when the ARM works beside a Slurm controller.
    slurm: Option<crate::slurm::Slurm>,
    /// Grants are recorded in Slurm one at a time, so that each read-back of the pool's use
    /// judges one update.
    slurm_grants: tokio::sync::Mutex<()>,
    /// Itself, for work a request hands to a task of its own.
    me: std::sync::Weak<Arm>,
    /// `AC_Get`s between their decision and their record in Slurm.
    grants_in_flight: std::sync::atomic::AtomicUsize,
    /// What the last reconciliation with Slurm found wrong (`armctl health`).
    slurm_problems: Mutex<Vec<String>>,
    /// What Prometheus scrapes (`metrics.rs`); counted whether or not it is served.
    metrics: metrics::Metrics,
    config: ArmConfig,
}

/// How long one `AwaitGet` waits before answering "still waiting" (under the client's
/// request timeout).
const AWAIT_LIMIT: Duration = Duration::from_secs(1);

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
        crate::policy::usable_free(&core.hosts)
    }

    /// Stops serving (as a crash would, without touching the store).
    pub async fn shutdown(self) {
        self.endpoint.close(0u32.into(), b"resource manager shutting down");
        for task in &self.tasks {
            task.abort();
        }
        for host in self.arm.core.lock().expect("core poisoned").hosts.keys() {
            self.arm.links.stop(host);
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
    }
}

/// Starts the resource manager on the current tokio runtime.
pub async fn start(config: ArmConfig) -> Result<RunningArm, ArmServerError> {
    let dir = config.state_dir.clone();
    let names = tls::certificate_names(config.listen, &config.names);
    let files = tls::ensure_self_signed(&dir, &names, &["admin"])?;
    tracing::info!(?names, "the certificate holds these names; programs and armctl must dial one of them");
    let identity = tls::load_identity(&files.cert, &files.key)?;
    let crypto = tls::server_crypto_with_clients(identity, ALPN, tls::load_roots(&files.ca_cert)?)?;
    let endpoint = transport::server_endpoint(
        config.listen,
        crypto,
        &program_tuning(&config),
        Some(&transport::lasting_keys(&dir)?),
    )?;
    let addr = endpoint.local_addr()?;
    let store = Store::open(&dir)?;
    let mut core = store.load()?;
    core.scheduling = config.scheduler.clone();
    core.preemption_grace_s = config.preemption_grace_s;
    let signer = Arc::new(keys::signer(&dir)?);
    // What each backend's `arm_public_key` names (also `armctl manager-key`).
    tracing::info!(public_key = keys::hex(&signer.public_key()), "the manager's public key");
    let (events, event_rx) = mpsc::unbounded_channel();
    let links = Links::new(
        signer.clone(),
        events,
        (Duration::from_millis(config.backend_timeout_ms), Duration::from_millis(config.lease_ms)),
        config.transport.clone(),
    );
    for host in core.hosts.values() {
        links.start(host);
    }
    // Revocations the backends had not acknowledged go out again when each link comes up
    // (`host_events`), after a restart as after a reconnection.
    let mut leases = Leases::default();
    let grace = Instant::now() + Duration::from_millis(config.lease_ms);
    for token in core.sessions.keys() {
        // After a restart every program gets one lease to come back.
        leases.deadline.insert(token.clone(), grace);
    }
    let arm = Arc::new_cyclic(|me| Arm {
        core: Mutex::new(core),
        store: Arc::new(store),
        commits: Mutex::default(),
        committing: tokio::sync::Mutex::new(()),
        signer,
        revocations: Revocations::new(&dir),
        links,
        leases: Mutex::new(leases),
        changed: tokio::sync::Notify::new(),
        slurm: config.slurm.enabled.then(|| crate::slurm::Slurm::new(config.slurm.clone())),
        slurm_grants: tokio::sync::Mutex::new(()),
        me: me.clone(),
        grants_in_flight: std::sync::atomic::AtomicUsize::new(0),
        slurm_problems: Mutex::default(),
        metrics: metrics::Metrics::default(),
        config,
    });
    // Holders and intervals were stored together; what a migrated store or a host removed
    // while the manager was down leaves out of step is put right now (`account_all`).
    arm.mutate(|core, _| {
        core.account_all(accounting::unix_now_ms());
        Ok(())
    })
    .await
    .map_err(|e| ArmServerError::Store(e.to_string()))?;
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
        tokio::spawn(host_events(arm.clone(), event_rx)),
        tokio::spawn(expire_loop(arm.clone())),
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

async fn host_events(arm: Arc<Arm>, mut events: mpsc::UnboundedReceiver<LinkEvent>) {
    let mut next = events.recv().await;
    while let Some(event) = next.take() {
        match event {
            LinkEvent::Up { host, up } => {
                if up {
                    resend_unacked(&arm, &host);
                }
                let _ = arm
                    .mutate(|core, now| {
                        core.set_up(&host, up, now);
                        Ok(())
                    })
                    .await;
            }
            LinkEvent::Served { host, devices } => {
                let changed = arm.mutate(|core, now| Ok(core.set_served(&host, &devices, now))).await;
                if changed.unwrap_or(false) {
                    match arm.core.lock().expect("core poisoned").hosts.get(&host).and_then(|h| h.mismatch.clone()) {
                        Some(m) => tracing::warn!(
                            host,
                            differences = %m.differences.join("; "),
                            "the backend serves other devices than it was registered with: those are not granted"
                        ),
                        None => tracing::info!(host, "the backend serves the devices it was registered with"),
                    }
                }
            }
            LinkEvent::States { host, states } => {
                let changed = arm.mutate(|core, now| Ok(core.set_states(&host, states, now))).await;
                if changed.unwrap_or(false) {
                    let core = arm.core.lock().expect("core poisoned");
                    for (h, d) in core.hosts.get(&host).iter().flat_map(|h| h.devices.iter().map(move |d| (*h, d))) {
                        match h.unhealthy(d.index) {
                            Some(reason) => {
                                tracing::error!(accelerator = h.accelerator_id(d.index), reason, "not granted")
                            }
                            None => tracing::info!(accelerator = h.accelerator_id(d.index), "grantable"),
                        }
                    }
                }
            }
            LinkEvent::Revoked { host, capability } => {
                // One acknowledgement comes per freed accelerator: those already queued commit
                // together rather than one transaction each.
                let mut acks = vec![(host, capability)];
                loop {
                    match events.try_recv() {
                        Ok(LinkEvent::Revoked { host, capability }) => acks.push((host, capability)),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = arm
                    .mutate(|core, _| {
                        acks.iter().for_each(|(host, capability)| core.acknowledge(host, *capability));
                        Ok(())
                    })
                    .await;
            }
        }
        if next.is_none() {
            next = events.recv().await;
        }
    }
}

/// What `host` had not acknowledged (it may have died before storing it) goes out again on its
/// new link.
fn resend_unacked(arm: &Arm, host: &str) {
    let unacked: Vec<u64> = {
        let core = arm.core.lock().expect("core poisoned");
        core.unacked.iter().filter(|(h, _)| h == host).map(|(_, c)| *c).collect()
    };
    let expires = unix_now() + arm.config.capability_ttl_s + 86_400;
    for capability in unacked {
        arm.links.revoke(host, capability, expires);
    }
}

async fn expire_loop(arm: Arc<Arm>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        // Health turns good again once space is back, without a change to commit.
        if arm.store.trouble().is_some_and(|t| t.last.elapsed().is_ok_and(|d| d >= STORE_RETRY)) {
            arm.retry_store().await;
        }
        let expired: Vec<String> = {
            let mut leases = arm.leases.lock().expect("leases poisoned");
            let now = Instant::now();
            let gone: Vec<String> =
                leases.deadline.iter().filter(|(_, d)| **d <= now).map(|(t, _)| t.clone()).collect();
            for token in &gone {
                leases.deadline.remove(token);
            }
            gone
        };
        for token in expired {
            tracing::info!("a program's lease ran out: releasing its dynamic accelerators");
            arm.metrics.lease_expired();
            let job = arm.batch_job_for_release(&token);
            let _ = arm.mutate(|core, now| core.finalize(&token, now)).await;
            arm.record_release(job).await;
        }
        let (grace, retention) = (arm.config.walltime_grace_s, arm.config.job_retention_s);
        let _ = arm
            .mutate(|core, now| {
                for job in core.expire_walltimes(now, grace) {
                    tracing::info!(job, "walltime passed: job ended");
                }
                // A pass only when time alone decides something: a deadline or a reservation's start.
                core.tick(now);
                core.revoke_due(now);
                let purged = core.purge_ended(now, retention);
                if purged > 0 {
                    tracing::info!(purged, "ended jobs past their retention purged");
                }
                Ok(())
            })
            .await;
    }
}

async fn serve_connection(arm: Arc<Arm>, conn: Connection) {
    let caller = Arc::new(caller_of(&conn));
    let tokens: Arc<Mutex<HashSet<String>>> = Arc::default();
    while let Ok((mut send, recv)) = conn.accept_bi().await {
        let (arm, tokens, conn, caller) = (arm.clone(), tokens.clone(), conn.clone(), caller.clone());
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
                let answer = arm.handle(request.request, &caller, &tokens).instrument(span).await;
                if let Some(call) = call {
                    arm.metrics.answered(call, start.elapsed());
                }
                answer
            };
            let reply = match answer {
                Ok(response) => ArmResponse::Ok(response),
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
    // The connection is gone: its sessions' leases run from the program's last sign of life.
    let idle = Duration::from_millis(program_tuning(&arm.config).idle_timeout_ms);
    let lease = Duration::from_millis(arm.config.lease_ms);
    let deadline = lease_deadline(conn.close_reason().as_ref(), Instant::now(), idle, lease);
    let mut leases = arm.leases.lock().expect("leases poisoned");
    for token in tokens.lock().expect("tokens poisoned").drain() {
        let live = leases.live.entry(token.clone()).or_default();
        *live = live.saturating_sub(1);
        if *live == 0 {
            leases.live.remove(&token);
            leases.deadline.insert(token, deadline);
        }
    }
}

/// The client of `conn`, from the certificate it presented (none: a program).
fn caller_of(conn: &Connection) -> Caller {
    let chain =
        conn.peer_identity().and_then(|id| id.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>().ok());
    Caller::from_certificate(chain.as_ref().and_then(|c| c.first()).map(|c| c.as_ref()))
}

/// What an admin or batch request asks, for the audit log: its arguments, never a secret or a
/// certificate.
fn audit_summary(request: &Request) -> String {
    match request {
        Request::HostAdd { addr, name, labels, .. } => format!("host add {name} at {addr} {labels:?}"),
        Request::HostDrain { name, drain } => format!("host {} {name}", if *drain { "drain" } else { "undrain" }),
        Request::HostRemove { name, force } => format!("host remove {name} (force {force})"),
        Request::JobSubmit { id, nodes, acpn, user, .. } => {
            format!("job submit {id} user {user} acpn {acpn} on {nodes:?}")
        }
        Request::JobBind { id, nodes, acpn, user, .. } => format!("job bind {id} user {user} acpn {acpn} on {nodes:?}"),
        Request::JobEnd { id } => format!("job end {id}"),
        Request::ReservationCreate { count, user, .. } => format!("reservation create of {count} for {user:?}"),
        Request::ReservationDelete { id } => format!("reservation delete {id}"),
        Request::ClearDevice { accelerator } => format!("device clear {accelerator}"),
        other => roles::request_name(other).to_string(),
    }
}

impl Arm {
    /// Runs a change on the core, waits until what it touched is durable, then sends its
    /// revocations. The core lock is not held while the disk syncs, nor is a runtime thread
    /// blocked: concurrent requests queue their changes, and whoever commits next writes them
    /// all in one transaction. A failed commit rolls memory back (`roll_back`): the change is
    /// not made, its revocations are not sent, and the caller is told why.
    async fn mutate<T>(&self, change: impl FnOnce(&mut Core, u64) -> Result<T, ArmError>) -> Result<T, ArmError> {
        let now_ms = accounting::unix_now_ms();
        let now = now_ms / 1000;
        let internal = |e: ArmServerError| err(ArmErrorKind::Internal, e.to_string());
        self.reload_if_stale().await;
        let (result, revocations, mine, changed) = {
            let mut core = self.core.lock().expect("core poisoned");
            {
                let commits = self.commits.lock().expect("commits poisoned");
                if commits.stale {
                    return Err(err(ArmErrorKind::Internal, commits.failure.clone()));
                }
            }
            let result = change(&mut core, now);
            // The accounting intervals of what the change granted or released commit with it.
            core.account(now_ms);
            let dirty = core.take_dirty();
            let changed = !dirty.is_empty();
            let changes = Store::snapshot(&core, &dirty).map_err(internal)?;
            // Queued under the core lock, so the commit order is the order of the changes.
            let mut commits = self.commits.lock().expect("commits poisoned");
            commits.pending.extend(changes);
            commits.queued += 1;
            (result, core.take_revocations(), commits.queued, changed)
        };
        self.commit_through(mine).await.map_err(store_failure)?;
        // Only a change can answer a long poll; waking them for nothing would make them spin.
        if changed {
            self.changed.notify_waiters();
        }
        let expires = now + self.config.capability_ttl_s + 86_400;
        for revocation in revocations {
            self.links.revoke(&revocation.host, revocation.capability, expires);
        }
        result
    }

    /// Returns once change `seq` is durable, committing everything queued if nobody else is;
    /// fails if it was rolled back.
    async fn commit_through(&self, seq: u64) -> Result<(), ArmServerError> {
        let _committer = self.committing.lock().await;
        let (batch, last) = {
            let mut commits = self.commits.lock().expect("commits poisoned");
            if commits.durable >= seq {
                return Ok(());
            }
            if commits.failed >= seq {
                return Err(ArmServerError::Store(commits.failure.clone()));
            }
            (std::mem::take(&mut commits.pending), commits.queued)
        };
        let store = self.store.clone();
        let written = tokio::task::spawn_blocking(move || store.commit(&batch))
            .await
            .unwrap_or_else(|e| Err(ArmServerError::Store(format!("the commit did not finish: {e}"))));
        match written {
            Ok(()) => {
                self.commits.lock().expect("commits poisoned").durable = last;
                Ok(())
            }
            Err(e) => Err(self.roll_back(e).await),
        }
    }

    /// After a failed commit, puts memory back to what the store holds: every change queued
    /// since the last durable one (the whole group, and those queued meanwhile) is dropped, and
    /// each of their callers gets the returned error. Called with `committing` held.
    async fn roll_back(&self, error: ArmServerError) -> ArmServerError {
        let failure = format!("{}; the change was not made", store_failure(error).message);
        self.commits.lock().expect("commits poisoned").failure = failure.clone();
        match self.reload().await {
            Ok(()) => tracing::warn!(failure, "memory rolled back to what the store holds"),
            Err(e) => tracing::error!(
                failure,
                error = %e,
                "the store cannot be read back: no change is made until it can"
            ),
        }
        self.changed.notify_waiters();
        ArmServerError::Store(failure)
    }

    /// Replaces memory with what the store holds, keeping what is never stored (whether each
    /// host's link is up and what its backend serves, the scheduler's settings, Slurm's queue, notices not yet told).
    /// Called with `committing` held: nothing commits meanwhile, so what is read is durable,
    /// and whatever is queued was made on the memory being dropped: it fails.
    async fn reload(&self) -> Result<(), ArmServerError> {
        let store = self.store.clone();
        let loaded = tokio::task::spawn_blocking(move || store.load())
            .await
            .unwrap_or_else(|e| Err(ArmServerError::Store(format!("reading the store did not finish: {e}"))));
        let mut core = self.core.lock().expect("core poisoned");
        let mut commits = self.commits.lock().expect("commits poisoned");
        commits.pending.clear();
        commits.failed = commits.queued;
        let mut fresh = match loaded {
            Ok(fresh) => fresh,
            Err(e) => {
                commits.stale = true;
                return Err(e);
            }
        };
        commits.stale = false;
        for (name, host) in &mut fresh.hosts {
            if let Some(old) = core.hosts.get_mut(name) {
                host.up = old.up;
                host.mismatch = old.mismatch.take();
                host.states = std::mem::take(&mut old.states);
            }
        }
        fresh.scheduling = std::mem::take(&mut core.scheduling);
        fresh.preemption_grace_s = core.preemption_grace_s;
        fresh.batch_queue = std::mem::take(&mut core.batch_queue);
        fresh.notices = std::mem::take(&mut core.notices);
        *core = fresh;
        Ok(())
    }

    /// Reads the store back if a rollback could not.
    async fn reload_if_stale(&self) {
        if !self.commits.lock().expect("commits poisoned").stale {
            return;
        }
        let _committer = self.committing.lock().await;
        if self.commits.lock().expect("commits poisoned").stale && self.reload().await.is_ok() {
            tracing::info!("memory read back from the store");
            self.changed.notify_waiters();
        }
    }

    /// Tries a store that cannot write again: reads memory back if it must, then writes a
    /// probe, whose success clears the store's trouble.
    async fn retry_store(&self) {
        self.reload_if_stale().await;
        let _committer = self.committing.lock().await;
        let store = self.store.clone();
        let _ = tokio::task::spawn_blocking(move || store.probe()).await;
    }

    /// What is wrong with the store, as `armctl health` says it; `None`: it writes.
    fn store_health(&self) -> Option<String> {
        let trouble = self.store.trouble()?;
        let since = trouble.since.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let ago = trouble.since.elapsed().map_or(0, |d| d.as_secs());
        let stale = if self.commits.lock().expect("commits poisoned").stale {
            "; memory could not be read back from it, so no change is made"
        } else {
            ""
        };
        Some(format!(
            "store: {} cannot write since Unix time {since} ({ago} s ago): {}; changes fail until it writes again \
             (tried every {} s){stale}",
            self.store.path().display(),
            trouble.error,
            STORE_RETRY.as_secs()
        ))
    }

    /// Ties a session to a connection: its lease runs only while none is connected.
    fn attach(&self, token_hash: &str, tokens: &Mutex<HashSet<String>>) {
        if tokens.lock().expect("tokens poisoned").insert(token_hash.to_string()) {
            let mut leases = self.leases.lock().expect("leases poisoned");
            *leases.live.entry(token_hash.to_string()).or_default() += 1;
            leases.deadline.remove(token_hash);
        }
    }

    fn grant(&self, core: &Core, accel: &str, holder: &Holder, now: u64) -> Grant {
        let (host_name, index) = accel.rsplit_once('/').expect("accelerator ids are host/index");
        let host = &core.hosts[host_name];
        let job = core.jobs.get(&holder.job);
        let ttl_end = now + self.config.capability_ttl_s;
        let expires = match job {
            Some(j) if j.walltime_s > 0 => {
                (j.started.unwrap_or(now) + j.walltime_s + self.config.walltime_grace_s).min(ttl_end)
            }
            _ => ttl_end,
        };
        let device = index.parse().expect("accelerator ids end in a device index");
        let grant = capability::Grant {
            id: holder.capability,
            job: holder.job.clone(),
            host: host_name.to_string(),
            device,
            expires,
        };
        Grant {
            id: accel.to_string(),
            device,
            node: holder.node.clone(),
            addr: host.addr,
            server_name: host.server_name.clone(),
            ca_pem: host.ca_pem.clone(),
            capability: self.signer.issue(&grant),
        }
    }

    fn session_answer(&self, token: String, token_hash: &str) -> Answer {
        let core = self.core.lock().expect("core poisoned");
        let job = core.session(token_hash)?.job.clone();
        let state = match core.static_state(token_hash, unix_now())? {
            StaticState::Queued { position, needed, free, expected_start } => {
                SessionState::Queued { position, needed, free, expected_start }
            }
            StaticState::Bound(ids) => {
                let now = unix_now();
                let held = core.held_by(&job);
                let grants = ids
                    .iter()
                    .filter_map(|id| held.iter().find(|(a, _)| a == id).map(|(a, h)| self.grant(&core, a, h, now)))
                    .collect();
                SessionState::Bound(grants)
            }
        };
        Ok(Response::Session { token, job, state })
    }

    fn granted(&self, set: u64, node: Option<&str>) -> Answer {
        let core = self.core.lock().expect("core poisoned");
        let now = unix_now();
        let grants = core.set_members(set, node).iter().map(|(a, h)| self.grant(&core, a, h, now)).collect();
        Ok(Response::Granted { set, grants })
    }

    async fn handle(&self, request: Request, caller: &Caller, tokens: &Mutex<HashSet<String>>) -> Answer {
        if let Some(needed) = roles::needs(&request) {
            let (call, role) = (roles::request_name(&request), caller.role.map(Role::unit));
            let revoked = self.revocations.revoked(&caller.fingerprint);
            if revoked || !caller.may(&request) {
                let why = match (revoked, caller.role) {
                    (true, _) => "its certificate was revoked".to_string(),
                    (false, None) => format!("it needs a client certificate of role {}", needed.unit()),
                    (false, Some(role)) => {
                        format!("the {} role may not make it (role {} may)", role.unit(), needed.unit())
                    }
                };
                tracing::warn!(target: "audit", who = caller.name, ?role, call, why, "request refused");
                return Err(err(ArmErrorKind::Unauthorized, format!("{call} refused: {why}")));
            }
            // Who did what: every admin and batch request, at info (`target: audit`).
            let cert = caller.fingerprint.get(..16).unwrap_or("");
            tracing::info!(target: "audit", who = caller.name, ?role, cert, "{}", audit_summary(&request));
        }
        match request {
            Request::ManagerKey => Ok(Response::ManagerKey(crate::keys::hex(&self.signer.public_key()))),
            Request::Init { auth, node, token } => {
                if matches!(auth, JobAuth::AdHoc { .. }) && !self.config.ad_hoc_allowed() {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        "ad-hoc jobs are disabled (allow_ad_hoc = false, the default with [slurm]): run inside a \
                         batch job",
                    ));
                }
                if token.len() < MIN_TOKEN_LEN {
                    return Err(err(
                        ArmErrorKind::Invalid,
                        format!("a session token has {MIN_TOKEN_LEN} characters or more"),
                    ));
                }
                let token_hash = keys::hash(&token);
                match &auth {
                    JobAuth::Munge { job, credential } => {
                        self.open_munge_session(&token_hash, job, credential, &node).await?;
                    }
                    _ => self
                        .mutate(|core, now| core.open_session(token_hash.clone(), &auth, &node, now))
                        .await
                        .map(drop)?,
                }
                self.attach(&token_hash, tokens);
                self.session_answer(token, &token_hash)
            }
            Request::Routes { auth, node } => {
                let core = self.core.lock().expect("core poisoned");
                let routes = core.routes(&auth, &node)?;
                Ok(Response::Routes(
                    routes
                        .into_iter()
                        .map(|(id, host)| Route {
                            id,
                            addr: host.addr,
                            server_name: host.server_name.clone(),
                            ca_pem: host.ca_pem.clone(),
                        })
                        .collect(),
                ))
            }
            Request::Poll { token } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                self.session_answer(token, &token_hash)
            }
            Request::Get { token, ask } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self.mutate(|core, now| core.get(&token_hash, &[], false, &ask, now)).await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, ask.max)
            }
            Request::GetElastic { token, ask, notice_s } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self.mutate(|core, now| core.get_elastic(&token_hash, &ask, notice_s, now)).await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, ask.max)
            }
            Request::CollectiveGet { token, parts, key } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let total = parts.iter().map(|(_, n)| n).sum();
                let ask = Ask::exactly(total, key);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self.mutate(|core, now| core.get(&token_hash, &parts, true, &ask, now)).await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, true, total)
            }
            Request::AwaitGet { token, request } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let decided = self
                    .long_poll(|core| {
                        let outcome = core.peek_get(&token_hash, request)?;
                        Ok((!matches!(outcome, GetOutcome::Waiting(_))).then_some(()))
                    })
                    .await?;
                // Granted, or rejected (then forgotten, durably, once told); or still waiting.
                let outcome = match decided {
                    Some(()) => self.mutate(|core, _| core.await_get(&token_hash, request)).await?,
                    None => GetOutcome::Waiting(request),
                };
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, 0)
            }
            Request::CancelGet { token, request } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let outcome = self.mutate(|core, now| core.cancel_get(&token_hash, request, now)).await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, 0)
            }
            Request::Notices { token } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let notices = self
                    .long_poll(|core| {
                        let notices = core.take_notices(&token_hash)?;
                        Ok((!notices.is_empty()).then_some(notices))
                    })
                    .await?;
                Ok(Response::Notices(notices.unwrap_or_default()))
            }
            Request::JoinSet { token, set } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, tokens);
                let node = {
                    let core = self.core.lock().expect("core poisoned");
                    core.own_set(&token_hash, set)?;
                    core.session(&token_hash)?.node.clone()
                };
                self.granted(set, Some(&node))
            }
            Request::Free { token, set, accelerators } => {
                let token_hash = keys::hash(&token);
                let job = self.batch_job_for_release(&token_hash);
                self.mutate(|core, now| core.free(&token_hash, set, accelerators.as_deref(), now)).await?;
                self.record_release(job).await;
                Ok(Response::Done)
            }
            Request::Finalize { token } => {
                let token_hash = keys::hash(&token);
                let job = self.batch_job_for_release(&token_hash);
                self.mutate(|core, now| core.finalize(&token_hash, now)).await?;
                self.leases.lock().expect("leases poisoned").deadline.remove(&token_hash);
                self.record_release(job).await;
                Ok(Response::Done)
            }
            Request::HostAdd { addr, name, server_name, ca_pem, labels } => {
                let host = self.probe(addr, name, server_name, ca_pem, labels).await?;
                self.mutate(|core, _| core.add_host(host.clone())).await?;
                // Only a live link marks a host up; answer once it is (or say it is not, yet).
                self.links.start(&host);
                for _ in 0..150 {
                    if self.core.lock().expect("core poisoned").hosts.get(&host.name).is_some_and(|h| h.up) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let core = self.core.lock().expect("core poisoned");
                Ok(Response::Host(host_view(&core.hosts[&host.name])))
            }
            Request::HostList => {
                let core = self.core.lock().expect("core poisoned");
                Ok(Response::Hosts(core.hosts.values().map(host_view).collect()))
            }
            Request::HostDrain { name, drain } => {
                self.mutate(|core, now| core.drain(&name, drain, now)).await?;
                Ok(Response::Done)
            }
            Request::HostRemove { name, force } => {
                self.mutate(|core, _| core.remove_host(&name, force)).await?;
                self.links.stop(&name);
                Ok(Response::Done)
            }
            Request::JobSubmit { id, nodes, acpn, user, walltime_s, group, reservation, peak } => {
                let credential = keys::random_secret();
                let group = group.or_else(|| self.config.accounts.get(&user).cloned()).unwrap_or_else(|| user.clone());
                let job = Job {
                    credential_hash: keys::hash(&credential),
                    reservation,
                    peak,
                    ..Job::queued(id.clone(), user, group, nodes, acpn, walltime_s)
                };
                self.mutate(|core, now| core.submit(job, now)).await?;
                Ok(Response::Submitted { id, credential })
            }
            Request::JobBind { id, nodes, acpn, user, uid, walltime_s } => {
                self.bind_job(id, nodes, acpn, user, uid, walltime_s).await?;
                Ok(Response::Done)
            }
            Request::JobEnd { id } => {
                self.end_job(id).await?;
                Ok(Response::Done)
            }
            Request::Health => Ok(Response::Health(self.health())),
            Request::Devices => self.devices(),
            Request::ClearDevice { accelerator } => self.clear_device(&accelerator),
            Request::Accounting { since_ms, until_ms, by } => self.accounting(since_ms, until_ms, by).await,
            Request::JobList { all } => {
                let core = self.core.lock().expect("core poisoned");
                let starts = core.expected_starts(unix_now());
                let view = |j: &Job| job_view(&core, j, starts.get(&j.id).copied().flatten());
                let shown = core.jobs.values().filter(|j| all || j.state != JobState::Ended);
                Ok(Response::Jobs(shown.map(view).collect()))
            }
            Request::ReservationCreate { count, start, duration_s, user, job } => {
                let owner = match (user, job) {
                    (Some(user), None) => ReservationOwner::User(user),
                    (None, Some(job)) => ReservationOwner::Job(job),
                    _ => return Err(err(ArmErrorKind::Invalid, "a reservation is for a user or for a job")),
                };
                let id = self.mutate(|core, now| core.reserve(count, start, duration_s, owner, now)).await?;
                let core = self.core.lock().expect("core poisoned");
                let reservation =
                    core.reservations.get(&id).ok_or_else(|| err(ArmErrorKind::NotFound, "deleted meanwhile"))?;
                Ok(Response::Reservation(reservation_view(&core, reservation, unix_now())))
            }
            Request::ReservationList => {
                let core = self.core.lock().expect("core poisoned");
                let now = unix_now();
                Ok(Response::Reservations(
                    core.reservations.values().map(|r| reservation_view(&core, r, now)).collect(),
                ))
            }
            Request::ReservationDelete { id } => {
                self.mutate(|core, now| core.unreserve(id, now)).await?;
                Ok(Response::Done)
            }
            Request::JobShow { id } => {
                let core = self.core.lock().expect("core poisoned");
                let job = core.jobs.get(&id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
                let start = core.expected_start(&id, unix_now());
                Ok(Response::Job(Box::new(job_view(&core, job, start))))
            }
        }
    }

    /// Looks at the core (`look`) until it finds something, waking at each change, for at most
    /// [`AWAIT_LIMIT`]; `None` when nothing came.
    async fn long_poll<T>(
        &self,
        mut look: impl FnMut(&mut Core) -> Result<Option<T>, ArmError>,
    ) -> Result<Option<T>, ArmError> {
        let until = tokio::time::Instant::now() + AWAIT_LIMIT;
        loop {
            // Armed before looking, so that a change in between is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(found) = look(&mut self.core.lock().expect("core poisoned"))? {
                return Ok(Some(found));
            }
            if tokio::time::Instant::now() >= until {
                return Ok(None);
            }
            let _ = tokio::time::timeout_at(until, changed).await;
        }
    }

    /// The answer to an `AC_Get`: this node's share of a granted set (every node's for a
    /// collective one), the rejection, or where a waiting request stands.
    fn get_answer(&self, outcome: GetOutcome, token_hash: &str, collective: bool, asked: u32) -> Answer {
        match &outcome {
            GetOutcome::Granted(_) => self.metrics.granted(),
            GetOutcome::Rejected(reason) => self.metrics.rejected(reason),
            GetOutcome::Waiting(_) => {}
        }
        match outcome {
            GetOutcome::Granted(set) => {
                let node = self.core.lock().expect("core poisoned").session(token_hash)?.node.clone();
                self.granted(set, (!collective).then_some(node.as_str()))
            }
            GetOutcome::Rejected(reason) if asked > 0 => Ok(self.rejection(asked, &reason)),
            GetOutcome::Rejected(reason) => Ok(Response::Rejected { reason }),
            GetOutcome::Waiting(request) => {
                let core = self.core.lock().expect("core poisoned");
                let deadline = core.pending.get(&request).map_or(0, |g| g.deadline);
                Ok(Response::Waiting {
                    request,
                    idle: crate::policy::usable_free(&core.hosts) as u32,
                    ahead: core.waiting_ahead(request),
                    deadline,
                })
            }
        }
    }

    fn rejection(&self, count: u32, why: &str) -> Response {
        let free = crate::policy::usable_free(&self.core.lock().expect("core poisoned").hosts);
        Response::Rejected { reason: format!("{count} accelerator(s) asked, {free} free: {why}") }
    }

    /// Connects to a backend, registers this manager with it and learns its device.
    async fn probe(
        &self,
        addr: SocketAddr,
        name: String,
        server_name: String,
        ca_pem: String,
        labels: Vec<(String, String)>,
    ) -> Result<Host, ArmError> {
        let backend = |e: ac_frontend::Error| err(ArmErrorKind::Backend, format!("backend {addr}: {e}"));
        let mut options = ConnectOptions::new(addr, "");
        options.server_name = server_name.clone();
        options.ca_pem = Some(ca_pem.clone());
        let crypto = link::client_crypto(&options).map_err(backend)?;
        let time = unix_now();
        let hello = Hello::Register {
            public_key: self.signer.public_key(),
            host: name.clone(),
            time,
            proof: self.signer.sign(&register_message(&name, time)),
        };
        let probe = tokio::time::timeout(Duration::from_secs(5), link::open(&options, crypto, &hello))
            .await
            .map_err(|_| err(ArmErrorKind::Backend, format!("backend {addr} did not answer in 5 s")))?
            .map_err(backend)?;
        let ac_proto::backend::Response::Devices(infos) = &probe.welcome else {
            return Err(err(ArmErrorKind::Backend, "backend did not list its devices"));
        };
        let devices = infos
            .iter()
            .map(|info| Device { index: info.index, name: info.name.clone(), memory: info.memory_total, holder: None })
            .collect();
        probe.connection.close(0u32.into(), b"probe done");
        Ok(Host {
            name,
            addr,
            server_name,
            ca_pem,
            labels,
            draining: false,
            up: false,
            devices,
            mismatch: None,
            states: Default::default(),
        })
    }
}

fn host_view(host: &Host) -> HostView {
    let state = if !host.up {
        "down"
    } else if host.draining {
        "draining"
    } else if host.mismatch.is_some() {
        // Its backend serves other devices than registered: `armctl health` says which.
        "mismatch"
    } else {
        "up"
    };
    HostView {
        name: host.name.clone(),
        addr: host.addr,
        state: state.into(),
        labels: host.labels.clone(),
        accelerators: host
            .devices
            .iter()
            .map(|d| AcceleratorView {
                id: host.accelerator_id(d.index),
                device: d.name.clone(),
                memory: d.memory,
                state: match (&d.holder, host.up && !host.unserved(d.index), host.draining) {
                    (_, false, _) => "down",
                    (Some(_), _, _) => "allocated",
                    (None, _, true) => "draining",
                    (None, _, false) if host.unhealthy(d.index).is_some() => "unhealthy",
                    (None, _, false) => "free",
                }
                .into(),
                holder: d.holder.as_ref().map(|h| h.job.clone()),
            })
            .collect(),
    }
}

fn reservation_view(core: &Core, r: &Reservation, now: u64) -> ReservationView {
    ReservationView {
        id: r.id,
        count: r.count,
        start: r.start,
        duration_s: r.duration,
        user: r.user.clone(),
        jobs: core.jobs.values().filter(|j| j.reservation == Some(r.id)).map(|j| j.id.clone()).collect(),
        state: if r.start > now { "planned" } else { "active" }.into(),
    }
}

fn job_view(core: &Core, job: &Job, expected_start: Option<u64>) -> JobView {
    let held = core.held_by(&job.id);
    JobView {
        id: job.id.clone(),
        user: job.user.clone(),
        group: job.group.clone(),
        nodes: job.nodes.clone(),
        acpn: job.acpn,
        state: match job.state {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Ended => "ended",
        }
        .into(),
        submitted: job.submitted,
        walltime_s: job.walltime_s,
        expected_start,
        static_accelerators: held
            .iter()
            .filter(|(_, h)| h.set.is_none())
            .map(|(a, h)| (h.node.clone(), a.clone()))
            .collect(),
        dynamic_accelerators: held.iter().filter_map(|(a, h)| h.set.map(|s| (s, a.clone()))).collect(),
        waiting_requests: core.pending.values().filter(|g| g.job == job.id && g.rejected.is_none()).count() as u32,
        reservation: job.reservation,
        peak: job.peak,
        preallocated_unused: core
            .owned_by(&job.id)
            .into_iter()
            .filter(|(_, h)| h.spare() || h.loan.is_some())
            .map(|(a, _)| a)
            .collect(),
    }
}
