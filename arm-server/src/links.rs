//! Links to the registered backends: the ARM registers itself (so backends accept only its
//! capabilities), reads heartbeats to know they are up and which devices they serve, sends
//! revocations and reads their acknowledgements. A link that breaks or goes silent marks the
//! host down and is dialled again until the host returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ac_proto::backend::link::{self, ConnectOptions};
use ac_proto::backend::{close, DeviceInfo, DeviceState, Order, Report, Response, Revoke};

use crate::keys::ManagerKeys;
use ac_proto::frame::frames_bytes;
use ac_proto::transport::Tuning;
use ac_proto::ProtoError;
use tokio::sync::mpsc;

use crate::model::Host;

/// What a link tells the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// A host went up (heartbeats arrive) or down.
    Up {
        /// The host.
        host: String,
        /// Up or down.
        up: bool,
    },
    /// The devices a host's backend serves: sent as its link comes up (before `Up`) and when a
    /// heartbeat lists other devices (free memory aside), for the manager to compare with what
    /// it registered.
    Served {
        /// The host.
        host: String,
        /// Its devices.
        devices: Vec<DeviceInfo>,
    },
    /// A device's health, faults, compute mode or identity changed, as a protocol-6 backend
    /// reports them (sessions aside: [`Links::states`] has the latest).
    States {
        /// The host.
        host: String,
        /// Every device's state.
        states: Vec<DeviceState>,
    },
    /// A host stored a revocation: the manager may forget it.
    Revoked {
        /// The host.
        host: String,
        /// The capability.
        capability: u64,
    },
}

struct Handle {
    orders: mpsc::UnboundedSender<Order>,
    queue: Arc<tokio::sync::Mutex<Queue>>,
    /// Tells the task to end (its link is started again): see [`Links::start`].
    retire: Arc<tokio::sync::Notify>,
}

/// A link's orders: the channel they come by, and those taken from it and not yet written.
/// Both outlive the link's task: when a link is started again (the replicas changed, the
/// manager took the lead), the new task takes them over once the old one is gone, so that an
/// order not yet written (an admin's fault clear queued while the backend was unreachable) is
/// not lost with the old task. One written just before is delivered by the old task, which
/// ends its stream and waits for the backend to have read it (`close_delivered`); one written
/// to a link that breaks is lost with it, and revocations are sent again (`resend_unacked`).
struct Queue {
    orders: mpsc::UnboundedReceiver<Order>,
    pending: Vec<Order>,
}

/// Every backend link.
pub struct Links {
    keys: Arc<ManagerKeys>,
    events: mpsc::UnboundedSender<LinkEvent>,
    timeout: Duration,
    /// How long backends hold a session whose program lost its connection: the lease.
    hold: Duration,
    tuning: Tuning,
    handles: Mutex<HashMap<String, Handle>>,
    /// Each host's devices as its backend last reported them, sessions included.
    latest: Arc<Mutex<HashMap<String, Vec<DeviceState>>>>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").field("hosts", &self.handles.lock().expect("links poisoned").len()).finish()
    }
}

impl Links {
    /// Links that report to `events`, a backend silent for `timeout` being down; backends
    /// hold a session that lost its connection for `hold` (the lease).
    pub fn new(
        keys: Arc<ManagerKeys>,
        events: mpsc::UnboundedSender<LinkEvent>,
        (timeout, hold): (Duration, Duration),
        tuning: Tuning,
    ) -> Self {
        let handles = Mutex::new(HashMap::new());
        Self { keys, events, timeout, hold, tuning, handles, latest: Default::default() }
    }

    /// Starts (or restarts) the link to `host`. A link running already is retired: it ends
    /// once the backend read what it wrote (at most the backend timeout, after which a silent
    /// backend is down anyway), and the new one takes its queue.
    pub fn start(&self, host: &Host) {
        let mut options = ConnectOptions::new(host.addr, "");
        options.server_name = host.server_name.clone();
        options.ca_pem = Some(host.ca_pem.clone());
        options.tuning = Tuning { idle_timeout_ms: self.timeout.as_millis() as u64, ..self.tuning.clone() };
        let report = Reporting { events: self.events.clone(), latest: self.latest.clone() };
        let timing = (self.timeout, self.hold);
        let mut handles = self.handles.lock().expect("links poisoned");
        let (orders, queue) = match handles.remove(&host.name) {
            Some(old) => {
                old.retire.notify_one();
                (old.orders, old.queue)
            }
            None => {
                let (orders, rx) = mpsc::unbounded_channel();
                (orders, Arc::new(tokio::sync::Mutex::new(Queue { orders: rx, pending: Vec::new() })))
            }
        };
        let retire = Arc::new(tokio::sync::Notify::new());
        let link = Task { host: host.name.clone(), options, keys: self.keys.clone(), reporting: report, timing };
        tokio::spawn(run(link, queue.clone(), retire.clone()));
        handles.insert(host.name.clone(), Handle { orders, queue, retire });
    }

    /// Stops the link to `host` once its pending revocations are delivered.
    pub fn stop(&self, host: &str) {
        // Dropping the sender lets the task deliver what is queued, then end.
        drop(self.handles.lock().expect("links poisoned").remove(host));
        self.latest.lock().expect("links poisoned").remove(host);
    }

    /// `host`'s devices as its backend last reported them (empty: not reported, or a backend
    /// older than protocol 6).
    pub fn states(&self, host: &str) -> Vec<DeviceState> {
        self.latest.lock().expect("links poisoned").get(host).cloned().unwrap_or_default()
    }

    /// Tells `host`'s backend that an admin cleared device `index`'s faults; sent now, or when
    /// the host is back. Whether the host is linked.
    pub fn clear_faults(&self, host: &str, index: u32) -> bool {
        match self.handles.lock().expect("links poisoned").get(host) {
            Some(handle) => handle.orders.send(Order::ClearFaults { index }).is_ok(),
            None => false,
        }
    }

    /// Queues a revocation for `host`; it is sent now, or when the host is back.
    pub fn revoke(&self, host: &str, capability: u64, expires: u64) {
        if let Some(handle) = self.handles.lock().expect("links poisoned").get(host) {
            let _ = handle.orders.send(Order::Revoke(Revoke { capability, expires }));
        }
    }
}

/// How long one dial of a backend may take. A dial into a partition would otherwise wait for
/// its idle timeout (seconds) and hold back the next one; with these two, a host whose link
/// heals is up again within `DIAL_LIMIT + REDIAL_PAUSE` plus one handshake (under a second on a
/// LAN, where a handshake takes a few milliseconds).
const DIAL_LIMIT: Duration = Duration::from_millis(500);
/// The pause between two dials of a host that is down.
const REDIAL_PAUSE: Duration = Duration::from_millis(200);
/// What a link's task is given.
struct Task {
    host: String,
    options: ConnectOptions,
    keys: Arc<ManagerKeys>,
    reporting: Reporting,
    /// A backend silent this long is down; the lease backends hold sessions for.
    timing: (Duration, Duration),
}

/// Ends a link whose orders are all written: the stream is finished, and the connection closed
/// once the backend, having read every order, closes it (the backend's way; at most `limit`),
/// so that nothing written and not yet delivered (a lossy network's retransmissions) is
/// dropped with the connection. Whether the backend closed it in time.
async fn close_delivered(link: &mut link::Link, reason: &'static [u8], limit: Duration) -> bool {
    let _ = link.send.finish();
    let closed = tokio::time::timeout(limit, link.connection.closed()).await.is_ok();
    link.connection.close(0u32.into(), reason);
    closed
}

/// Writes `orders` on `link`, failing if the backend takes them in no sooner than `limit` (a
/// backend that stops reading but keeps its connection would hold the link, and every link
/// started after it, forever).
async fn write_orders(host: &str, link: &mut link::Link, orders: &[Order], limit: Duration) -> bool {
    let bytes = orders_bytes(host, orders, link.version);
    matches!(tokio::time::timeout(limit, link.send.write_all(&bytes)).await, Ok(Ok(())))
}

/// Where a link reports.
struct Reporting {
    events: mpsc::UnboundedSender<LinkEvent>,
    latest: Arc<Mutex<HashMap<String, Vec<DeviceState>>>>,
}

impl Reporting {
    /// A backend's status: the latest kept, and an event when more than sessions changed.
    fn status(&self, host: &str, states: Vec<DeviceState>) {
        let unloaded = |s: &[DeviceState]| -> Vec<DeviceState> {
            s.iter().map(|d| DeviceState { sessions: 0, ..d.clone() }).collect()
        };
        let mut latest = self.latest.lock().expect("links poisoned");
        let before = latest.insert(host.to_string(), states.clone());
        if before.as_deref().map(unloaded) != Some(unloaded(&states)) {
            let _ = self.events.send(LinkEvent::States { host: host.to_string(), states });
        }
    }
}

/// `orders` as the link's protocol `version` sends them: protocol 5 and before know bare
/// revocations only.
fn orders_bytes(host: &str, orders: &[Order], version: u16) -> Vec<u8> {
    if version >= 6 {
        return frames_bytes(orders).expect("encodes").to_vec();
    }
    let revokes: Vec<Revoke> = orders
        .iter()
        .filter_map(|order| match order {
            Order::Revoke(revoke) => Some(*revoke),
            Order::ClearFaults { index } => {
                tracing::warn!(
                    host,
                    device = index,
                    "the backend is older than protocol 6: it keeps no faults to clear"
                );
                None
            }
            Order::Hold { .. } => None,
        })
        .collect();
    frames_bytes(&revokes).expect("encodes").to_vec()
}

async fn run(task: Task, queue: Arc<tokio::sync::Mutex<Queue>>, retire: Arc<tokio::sync::Notify>) {
    let Task { host, options, keys, reporting, timing: (timeout, hold) } = task;
    // Held for the task's life: a task started in this one's place waits until it is gone.
    // Retired before it took the queue over (started again twice in a row): it never links.
    let mut queue = tokio::select! {
        biased;
        () = retire.notified() => return,
        queue = queue.lock_owned() => queue,
    };
    let Queue { orders: revokes, pending } = &mut *queue;
    let events = reporting.events.clone();
    let mut warned = false;
    // One endpoint for every dial of this host: a new one per dial allocates its receive
    // buffer again (mtu x 64 GRO segments x 32 datagrams: 12.5 MiB by default), and memory the
    // allocator recycles is zeroed for it, so resident, after each restart of the backend.
    let mut endpoint: Option<quinn::Endpoint> = None;
    loop {
        let hello = keys.registration(&host);
        // The CA was checked at registration; a store edited since must not bring the task down.
        let opened = match link::client_crypto(&options) {
            Ok(crypto) => {
                if endpoint.is_none() {
                    // No default client configuration: each dial passes the crypto it reads now.
                    endpoint = match ac_proto::transport::client_endpoint(options.addr, None, &options.tuning) {
                        Ok(made) => Some(made),
                        Err(e) => {
                            tracing::warn!(host, error = %e, "cannot make a QUIC endpoint; one per dial instead");
                            None
                        }
                    };
                }
                match tokio::time::timeout(DIAL_LIMIT, link::open_on(&options, crypto, &hello, endpoint.as_ref())).await
                {
                    Ok(opened) => opened.map_err(DialError::Failed),
                    Err(_) => Err(DialError::Silent),
                }
            }
            Err(e) => Err(DialError::Failed(e)),
        };
        match opened {
            Ok(mut link) => {
                warned = false;
                // What it serves is known before it is up, so nothing it lacks is granted.
                let mut served = match &link.welcome {
                    Response::Devices(devices) => shape(devices),
                    _ => Vec::new(),
                };
                let _ = events.send(LinkEvent::Served { host: host.clone(), devices: served.clone() });
                let _ = events.send(LinkEvent::Up { host: host.clone(), up: true });
                tracing::info!(host, "backend link up");
                // Programs' sessions are held as long as their grants (protocol 8 on).
                if link.version >= 8 {
                    pending.insert(0, Order::Hold { ms: hold.as_millis() as u64 });
                }
                'serve: loop {
                    // Whatever is pending goes in one write: one packet for a burst of frees.
                    while let Ok(revoke) = revokes.try_recv() {
                        pending.push(revoke);
                    }
                    if !pending.is_empty() {
                        if !write_orders(&host, &mut link, pending, timeout).await {
                            break 'serve;
                        }
                        pending.clear();
                    }
                    tokio::select! {
                        report = tokio::time::timeout(timeout, link.reader.read_frame::<Report>()) => match report {
                            Ok(Ok(Some(Report::Heartbeat(beat)))) => {
                                let devices = shape(&beat.devices);
                                if devices != served {
                                    served = devices;
                                    let _ = events.send(LinkEvent::Served { host: host.clone(), devices: served.clone() });
                                }
                            }
                            Ok(Ok(Some(Report::Status(status)))) => {
                                let devices = shape(&status.devices);
                                if devices != served {
                                    served = devices;
                                    let _ = events.send(LinkEvent::Served { host: host.clone(), devices: served.clone() });
                                }
                                reporting.status(&host, status.states);
                            }
                            Ok(Ok(Some(Report::Revoked { capability }))) => {
                                let _ = events.send(LinkEvent::Revoked { host: host.clone(), capability });
                            }
                            _ => break 'serve,
                        },
                        revoke = revokes.recv() => match revoke {
                            Some(revoke) => pending.push(revoke),
                            None => {
                                // Removed: deliver what is pending, then leave.
                                write_orders(&host, &mut link, pending, timeout).await;
                                close_delivered(&mut link, b"host removed", timeout).await;
                                return;
                            }
                        },
                        // Started again: what this link wrote is read before it goes; orders
                        // still in the channel are the new link's.
                        () = retire.notified() => {
                            if !close_delivered(&mut link, b"link restarted", timeout).await {
                                // Silent as long as a down backend is: the new link finds out.
                                let _ = events.send(LinkEvent::Up { host: host.clone(), up: false });
                            }
                            return;
                        }
                    }
                }
                // A backend that shuts down in order closes its connections with NORMAL: that
                // is no fault, and neither are the refused redials that follow.
                let orderly = matches!(
                    link.connection.close_reason(),
                    Some(quinn::ConnectionError::ApplicationClosed(c)) if c.error_code == close::NORMAL.into()
                );
                link.connection.close(0u32.into(), b"link lost");
                let _ = events.send(LinkEvent::Up { host: host.clone(), up: false });
                if orderly {
                    tracing::info!(host, "the backend shut down; its link is closed");
                    warned = true;
                } else {
                    tracing::warn!(host, "backend link down");
                }
            }
            Err(e) => {
                // An endpoint whose socket failed answers every dial with a setup error: make a
                // new one for the next dial rather than keep the host down until a restart.
                if matches!(
                    e,
                    DialError::Failed(
                        ProtoError::Connect(_) | ProtoError::Io(_) | ProtoError::Certificate(_) | ProtoError::Tls(_)
                    )
                ) {
                    endpoint = None;
                }
                // Also when the link never came up: the host may have been marked up before.
                let _ = events.send(LinkEvent::Up { host: host.clone(), up: false });
                if !warned {
                    tracing::warn!(host, error = %e, "cannot reach backend");
                    warned = true;
                }
            }
        }
        let retry = tokio::time::sleep(REDIAL_PAUSE);
        tokio::pin!(retry);
        loop {
            tokio::select! {
                _ = &mut retry => break,
                revoke = revokes.recv() => match revoke {
                    Some(revoke) => pending.push(revoke),
                    None => return,
                },
                // Started again: the pending orders are the new link's.
                () = retire.notified() => return,
            }
        }
    }
}

/// `devices` without their free memory, which changes with every allocation: what is left
/// changes only when the backend serves other devices.
fn shape(devices: &[DeviceInfo]) -> Vec<DeviceInfo> {
    devices.iter().map(|d| DeviceInfo { memory_free: 0, ..d.clone() }).collect()
}

/// Why a registration link did not open.
#[derive(Debug)]
enum DialError {
    /// Dialing, the handshake or the hello failed.
    Failed(ProtoError),
    /// The backend did not answer within [`DIAL_LIMIT`].
    Silent,
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Failed(e) => e.fmt(f),
            DialError::Silent => write!(f, "no answer in {DIAL_LIMIT:?}"),
        }
    }
}

#[cfg(test)]
mod tests;
