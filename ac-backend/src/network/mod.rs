//! The daemon: accepts connections, checks preamble and hello, and runs sessions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ac_proto::backend::{close, v4, DeviceInfo, Hello, Preamble, Reply, Response, Status, ALPN};
use ac_proto::frame::{frame_bytes, FrameReader, Source};
use ac_proto::metrics::MetricsServer;
use ac_proto::{lane, tls, transport};
use quinn::{Connection, Endpoint};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::BackendConfig;
use crate::device::health::Board;
use crate::device::Device;
use crate::metrics::Metrics;
use crate::session::fence::Fences;
use crate::session::resume::Outbox;
use crate::session::serve_control::{self, closing_for};
use crate::session::{Limits, Registry, Session};
use crate::BackendError;
use trust::Trust;

pub mod bulk;
mod durable;
mod fencing;
mod lanes;
mod registration;
pub mod trust;

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

struct Shared {
    devices: BTreeMap<u32, Arc<dyn Device>>,
    /// Each device's health, identity and sessions (see [`crate::device::health`]).
    board: Arc<Mutex<Board>>,
    /// Woken when a device's health changes: the manager hears of it at once.
    changed: Arc<tokio::sync::Notify>,
    /// The MPS control daemons, asked to quit at shutdown.
    mps: Mutex<Vec<crate::device::mps::MpsDaemon>>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    trust: Trust,
    config: BackendConfig,
    /// The bulk lanes' TCP port; 0 without lanes.
    lane_port: u16,
    /// How long a session whose connection timed out is held: `session_hold_ms`, or the
    /// registered manager's lease ([`Order::Hold`]).
    hold_ms: std::sync::atomic::AtomicU64,
}

/// A backend serving in this process.
#[derive(Debug)]
pub struct RunningBackend {
    addr: SocketAddr,
    ca_cert: PathBuf,
    endpoint: Endpoint,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    lane_task: Option<JoinHandle<()>>,
    metrics: Option<MetricsServer>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("devices", &self.devices.len()).finish()
    }
}

impl Shared {
    fn device_infos(&self) -> Vec<DeviceInfo> {
        self.devices.values().map(|d| d.info()).collect()
    }

    /// What a registration of protocol 6 reports.
    fn status(&self) -> Status {
        let states = self.board.lock().expect("board").states();
        Status { sessions: self.registry.len() as u32, devices: self.device_infos(), states }
    }

    /// A session slot on device `index`, held until the session ends, or why there is none.
    fn admit(self: &Arc<Self>, index: u32) -> Result<Slot, String> {
        self.board.lock().expect("board").admit(index)?;
        Ok(Slot { shared: self.clone(), index })
    }
}

/// A session's place on its device (see [`Board::admit`]): given back when dropped.
struct Slot {
    shared: Arc<Shared>,
    index: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.board.lock().expect("board").release(self.index);
    }
}

impl RunningBackend {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate clients must trust.
    pub fn ca_cert(&self) -> &std::path::Path {
        &self.ca_cert
    }

    /// Where Prometheus scrapes it (`metrics_listen`), if it serves metrics.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::addr)
    }

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.shared.registry.len()
    }

    /// Free memory of all devices together, bytes.
    pub fn memory_free(&self) -> u64 {
        self.shared.devices.values().map(|d| d.info().memory_free).sum()
    }

    /// The devices served, in index order, with current free memory.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.shared.device_infos()
    }

    /// Each served device's identity, health and sessions, as the manager is told.
    pub fn device_states(&self) -> Vec<ac_proto::backend::DeviceState> {
        self.shared.board.lock().expect("board").states()
    }

    /// Stops accepting, closes every connection and waits for the endpoint to go idle.
    pub async fn shutdown(self) {
        self.endpoint.close(close::NORMAL.into(), b"backend shutting down");
        self.task.abort();
        if let Some(lanes) = self.lane_task {
            lanes.abort();
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
        // Its clients (the workers) are gone with their sessions.
        let daemons = std::mem::take(&mut *self.shared.mps.lock().expect("mps"));
        let _ = tokio::task::spawn_blocking(move || drop(daemons)).await;
    }
}

/// The certificate to present, and the CA file to give clients.
fn identity(config: &BackendConfig) -> Result<(tls::Identity, PathBuf), BackendError> {
    match (&config.cert, &config.key) {
        (Some(cert), Some(key)) => Ok((tls::load_identity(cert, key)?, cert.clone())),
        _ => {
            let names = tls::certificate_names(config.listen, &config.names);
            let files = tls::ensure_self_signed(&config.state_dir, &names, &[])?;
            tracing::info!(?names, "the certificate holds these names; clients must dial one of them");
            Ok((tls::load_identity(&files.cert, &files.key)?, files.ca_cert))
        }
    }
}

/// Starts a backend on the current tokio runtime.
pub async fn start(config: BackendConfig) -> Result<RunningBackend, BackendError> {
    config.validate()?;
    let served = crate::device::served::serve(&config)?;
    let (devices, mps) = (served.devices, Mutex::new(served.mps));
    let board = Arc::new(Mutex::new(served.board));
    let changed = Arc::new(tokio::sync::Notify::new());
    #[cfg(feature = "cuda")]
    if let Some((host, watched)) = served.watch {
        let every = Duration::from_millis(config.health_poll_ms);
        host.watch(watched, board.clone(), changed.clone(), every)?;
    }
    let (identity, ca_cert) = identity(&config)?;
    let acceptor = lane::server_config(identity.clone())?;
    let crypto = tls::server_crypto(identity, ALPN)?;
    let endpoint = transport::server_endpoint(
        config.listen,
        crypto,
        &config.transport,
        Some(&transport::lasting_keys(&config.state_dir)?),
    )?;
    let addr = endpoint.local_addr()?;
    let pinned = match &config.arm_public_key {
        Some(hex) => trust::parse_keys(hex).ok_or_else(|| {
            BackendError::Config(
                "arm_public_key must be 64 hex digits (a replicated manager's: one such key per replica, separated \
                 by commas)"
                    .into(),
            )
        })?,
        None => Vec::new(),
    };
    if !config.open_until_registered && pinned.is_empty() {
        tracing::warn!(
            "open_until_registered = false and no arm_public_key: no manager can register this backend, so it \
             serves nobody; set arm_public_key to what `armctl manager-key` prints"
        );
    }
    let trust = Trust::load_closed(&config.state_dir, pinned, !config.open_until_registered);
    let listener = if config.lanes { Some(lanes::lane_listener(addr, config.listen.port() == 0)?) } else { None };
    let lane_port = match &listener {
        Some(l) => l.local_addr()?.port(),
        None => 0,
    };
    let (registry, metrics) = (Arc::new(Registry::default()), Arc::new(Metrics::default()));
    let metrics_server = match config.metrics_listen {
        Some(listen) => {
            let devices = devices.values().cloned().collect();
            let sessions = Arc::downgrade(&registry);
            let live = Box::new(move || sessions.upgrade().map_or(0, |s| s.len()));
            let served = metrics.registry(devices, live);
            let server = MetricsServer::start(listen, served).await;
            Some(server.map_err(|e| BackendError::Config(format!("cannot serve metrics on {listen}: {e}")))?)
        }
        None => None,
    };
    let hold_ms = std::sync::atomic::AtomicU64::new(config.session_hold_ms);
    let shared =
        Arc::new(Shared { devices, board, changed, mps, registry, metrics, trust, config, lane_port, hold_ms });
    let task = tokio::spawn(accept_loop(endpoint.clone(), shared.clone()));
    let lane_task = listener.map(|l| tokio::spawn(lanes::accept_lanes(l, acceptor, shared.clone())));
    if lane_port != 0 {
        tracing::info!(%addr, lane_port, "serving bulk lanes (TLS over TCP)");
    }
    for info in shared.device_infos() {
        tracing::info!(%addr, index = info.index, device = %info.name, "serving device");
    }
    Ok(RunningBackend { addr, ca_cert, endpoint, shared, task, lane_task, metrics: metrics_server })
}

async fn accept_loop(endpoint: Endpoint, shared: Arc<Shared>) {
    while let Some(incoming) = endpoint.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            match incoming.await {
                Ok(conn) => {
                    let span = tracing::info_span!("connection", peer = %conn.remote_address());
                    serve_connection(conn, shared).instrument(span).await;
                }
                Err(e) => tracing::debug!(error = %e, "handshake failed"),
            }
        });
    }
}

fn refuse(conn: &Connection, code: u32, reason: &str) {
    tracing::info!(code, reason, "closing connection");
    conn.close(code.into(), reason.as_bytes());
}

async fn serve_connection(conn: Connection, shared: Arc<Shared>) {
    let opened = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await;
    let Ok(Ok((send, recv))) = opened else {
        return refuse(&conn, close::PROTOCOL, "no hello stream in time");
    };
    let mut reader = FrameReader::new(recv);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut reader, shared.config.protocols())).await {
        Ok(Ok(hello)) => hello,
        Ok(Err((code, reason))) => return refuse(&conn, code, &reason),
        Err(_) => return refuse(&conn, close::PROTOCOL, "no hello in time"),
    };
    let (hello, version) = hello;
    match hello {
        Hello::Open { capability, device: index } => {
            let Some(device) = shared.devices.get(&index).cloned() else {
                let served: Vec<u32> = shared.devices.keys().copied().collect();
                return refuse(&conn, close::PROTOCOL, &format!("no device {index} here (devices: {served:?})"));
            };
            // Raising the fence syncs a file: off the runtime's workers.
            let admitted = tokio::task::spawn_blocking({
                let shared = shared.clone();
                move || shared.trust.admit_new(&capability, index)
            });
            let grant = match admitted.await.unwrap_or_else(|e| Err(format!("the check failed: {e}"))) {
                Ok(grant) => grant,
                Err(reason) => return refuse(&conn, close::UNAUTHORIZED, &format!("capability refused: {reason}")),
            };
            let slot = match shared.admit(index) {
                Ok(slot) => slot,
                Err(reason) => return refuse(&conn, close::DEVICE_REFUSED, &reason),
            };
            serve_session(conn, shared, (index, device), (send, reader), grant.map(|g| g.id), version, slot).await
        }
        Hello::Register { public_key, host, time, proof } => {
            let registration = trust::Registration { public_key, cluster: &[], host: &host, time, proof: &proof };
            register(conn, shared, (send, reader), registration, version).await;
        }
        Hello::RegisterCluster { public_key, cluster, host, time, proof } => {
            let registration = trust::Registration { public_key, cluster: &cluster, host: &host, time, proof: &proof };
            register(conn, shared, (send, reader), registration, version).await;
        }
        Hello::Attach { session, token } => {
            let Some(session) = shared.registry.find(session, &token) else {
                return refuse(&conn, close::UNAUTHORIZED, "unknown session or wrong token");
            };
            let welcome = welcome(&session, &shared, version);
            let mut send = send;
            if send.write_chunk(welcome).await.is_err() {
                return;
            }
            let _ = send.finish();
            session.attach(conn.clone());
            serve_bulk_streams(conn, session).await;
        }
        Hello::Resume { session, token, capability, replies } => {
            resume_session(conn, &shared, (send, reader), (session, token, capability, replies), version).await;
        }
        Hello::End { session, token, capability } => {
            end_session(conn, &shared, send, (session, token, capability), version).await;
        }
    }
}

/// A resource manager registers this backend (a single manager, or a replica naming its
/// cluster's keys): checked, then the link's reports and orders.
async fn register(
    conn: Connection,
    shared: Arc<Shared>,
    (send, reader): (quinn::SendStream, FrameReader),
    registration: trust::Registration<'_>,
    version: u16,
) {
    if let Err(reason) = shared.trust.register(registration) {
        return refuse(&conn, close::UNAUTHORIZED, &format!("registration refused: {reason}"));
    }
    let keys = registration.cluster.len().max(1);
    tracing::info!(host = registration.host, keys, "registered by a resource manager; sessions now need capabilities");
    registration::serve_registration(conn, shared, send, reader, version).await;
}

/// A client takes its held session onto this connection (protocol 8): it must name a session
/// this backend holds, know its secret, and hold the capability it was opened with, still
/// valid. A session that is not here (ended, its hold run out, or the backend restarted) is
/// not resumable, and the client is told so at once.
async fn resume_session(
    conn: Connection,
    shared: &Arc<Shared>,
    (send, reader): (quinn::SendStream, FrameReader),
    (id, token, capability, replies): (ac_proto::backend::SessionId, [u8; 16], Vec<u8>, u64),
    version: u16,
) {
    if version < 8 {
        return refuse(&conn, close::PROTOCOL, "resumption needs protocol 8");
    }
    let session = match proven_session(shared, id, &token, &capability) {
        Ok(session) => session,
        Err((code, reason)) => return refuse(&conn, code, &reason),
    };
    session.attach(conn.clone());
    let rejoin = crate::session::resume::Rejoin { conn: conn.clone(), send, reader, replies };
    if session.rejoin(rejoin).is_err() {
        return refuse(&conn, close::SESSION_GONE, &format!("session {} has just ended", id.0));
    }
    serve_bulk_streams(conn, session).await;
}

/// Another process of the session's job ends it (protocol 17): its own died without closing it
/// (the CUDA shim's parent ends so a child's that ended with `_exit`). Proven as a resumption
/// is; the session ends as a revoked one does, and the answer ([`Response::Ok`]) goes once it
/// has.
async fn end_session(
    conn: Connection,
    shared: &Arc<Shared>,
    mut send: quinn::SendStream,
    (id, token, capability): (ac_proto::backend::SessionId, [u8; 16], Vec<u8>),
    version: u16,
) {
    if version < 17 {
        return refuse(&conn, close::PROTOCOL, "ending another connection's session needs protocol 17");
    }
    let session = match proven_session(shared, id, &token, &capability) {
        Ok(session) if session.has_ended() => {
            return refuse(&conn, close::SESSION_GONE, &format!("session {} has ended already", id.0))
        }
        Ok(session) => session,
        Err((code, reason)) => return refuse(&conn, code, &reason),
    };
    tracing::info!(session = id.0, "session ended by another process of its job");
    session.close_with(close::NORMAL, "session ended by another process of its job");
    // Its device context goes with its last holder: not this task's wait for the client.
    drop(session);
    let ended = frame_bytes(&Reply { id: 0, response: Response::Ok }).expect("an answer encodes");
    if send.write_chunk(ended).await.is_ok() {
        let _ = send.finish();
        // The client closes once it has read the answer.
        let _ = tokio::time::timeout(HELLO_TIMEOUT, conn.closed()).await;
    }
}

/// The session `id` when the client proved it its own, twice over: its secret token and the
/// capability it was opened with, still valid; else the close code and reason.
fn proven_session(
    shared: &Shared,
    id: ac_proto::backend::SessionId,
    token: &[u8; 16],
    capability: &[u8],
) -> Result<Arc<Session>, (u32, String)> {
    let Some(session) = shared.registry.get(id) else {
        let reason = format!(
            "session {} is not on this backend: it ended, was not resumed within its hold, or the backend restarted (its memory is gone)",
            id.0
        );
        return Err((close::SESSION_GONE, reason));
    };
    if !session.owns(token) {
        return Err((close::UNAUTHORIZED, "wrong session token".into()));
    }
    match shared.trust.admit(capability, session.device) {
        Ok(grant) if grant.as_ref().map(|g| g.id) == session.capability => Ok(session),
        Ok(_) => Err((close::UNAUTHORIZED, "not the capability the session was opened with".into())),
        Err(reason) => Err((close::UNAUTHORIZED, format!("capability refused: {reason}"))),
    }
}

/// Reads and checks the preamble and the hello frame: the hello and the version the connection
/// speaks, one of `spoken` (this build's `MIN_VERSION..=VERSION`).
async fn read_hello<S: Source + Send>(
    reader: &mut FrameReader<S>,
    spoken: std::ops::RangeInclusive<u16>,
) -> Result<(Hello, u16), (u32, String)> {
    let raw = reader.read_exact_raw(4).await.map_err(|e| (close::PROTOCOL, format!("no preamble: {e}")))?;
    let preamble = Preamble::parse(raw[..].try_into().expect("4 bytes"))
        .ok_or((close::MALFORMED, "not an accelerator protocol client (bad magic)".to_string()))?;
    if !spoken.contains(&preamble.version) {
        let (min, max) = spoken.into_inner();
        return Err((
            close::VERSION_MISMATCH,
            format!("protocol version mismatch: backend speaks {min} to {max}, client sent {}", preamble.version),
        ));
    }
    let hello = reader.expect_frame::<Hello>().await.map_err(|e| (close::MALFORMED, format!("bad hello: {e}")))?;
    Ok((hello, preamble.version))
}

/// The welcome of a session's connection, in the connection's protocol `version`.
fn welcome(session: &Session, shared: &Shared, version: u16) -> bytes::Bytes {
    let response = Response::Welcome {
        session: session.id,
        token: session.token,
        info: session.context.info(),
        lane_port: shared.lane_port,
        lanes: shared.config.session_lanes(),
    };
    match version {
        v4::VERSION => frame_bytes(&v4::WelcomeReply::from_current(&response).expect("a welcome")),
        _ => frame_bytes(&Reply { id: 0, response }),
    }
    .expect("welcome encodes")
}

async fn serve_session(
    conn: Connection,
    shared: Arc<Shared>,
    (index, device): (u32, Arc<dyn Device>),
    (send, reader): (quinn::SendStream, FrameReader),
    capability: Option<u64>,
    version: u16,
    slot: Slot,
) {
    // Creating a CUDA context takes a while: keep it off the async threads.
    let sensors = device.clone();
    let context = match tokio::task::spawn_blocking(move || device.open_context()).await {
        Ok(Ok(context)) => context,
        Ok(Err(e)) => return refuse(&conn, close::PROTOCOL, &format!("cannot open a device context: {}", e.message)),
        Err(e) => return refuse(&conn, close::PROTOCOL, &format!("cannot open a device context: {e}")),
    };
    let (fences, fence_requests) = Fences::channel();
    let budget = shared.config.inline_budget_mib.saturating_mul(1 << 20);
    let metrics = shared.metrics.clone();
    let limits = Limits { budget, quota: shared.config.session_memory_mib.map(|mib| mib << 20) };
    let opened = (capability, index, sensors);
    let (session, rejoins) = shared.registry.open(context, shared.config.copy, opened, fences, limits, metrics);
    session.attach(conn.clone());
    tracing::info!(session = session.id.0, "session opened");
    let mut send = send;
    if send.write_chunk(welcome(&session, &shared, version)).await.is_err() {
        return;
    }
    // Sessions of protocol 8 and later are held through an outage, for their client to resume.
    let hold_ms = shared.hold_ms.load(std::sync::atomic::Ordering::Relaxed);
    let hold = if version >= 8 { Duration::from_millis(hold_ms) } else { Duration::ZERO };
    // Kernel output reaches clients of protocol 11 and later; older ones never parse it.
    let outbox = match version >= 11 {
        true => Outbox::new(send).forwarding_printed(session.context.clone()),
        false => Outbox::new(send),
    };
    let line = serve_control::Line { conn: conn.clone(), reader, outbox: Arc::new(outbox), rejoins, hold };
    tokio::spawn(serve_bulk_streams(conn, session.clone()));
    let result = serve_control::serve(session.clone(), line, fence_requests).await;
    shared.registry.remove(session.id);
    match result {
        Ok(()) => session.close(),
        Err(closing) => {
            tracing::info!(code = closing.code, reason = %closing.reason, "closing connection");
            session.close_with(closing.code, &closing.reason);
        }
    }
    drop(slot);
    tracing::info!(session = session.id.0, "session closed");
}

async fn serve_bulk_streams(conn: Connection, session: Arc<Session>) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (conn, session) = (conn.clone(), session.clone());
        tokio::spawn(async move {
            if let Err(e) = bulk::serve_stream(session, send, FrameReader::new(recv)).await {
                if let Some(closing) = closing_for(e) {
                    refuse(&conn, closing.code, &closing.reason);
                }
            }
        });
    }
}
