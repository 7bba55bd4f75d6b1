//! Knowing that a backend *process* died, from positive signals, without waiting for the idle
//! timeout.
//!
//! Silence is not death: a network outage shorter than the idle timeout is survived with every
//! result intact. But a host that is up and has no process on the backend's port says so: its
//! kernel answers every datagram with ICMP "port unreachable". quinn's socket is unconnected and
//! never sees those answers, so each accelerator has a small *connected* UDP socket of its own
//! that, whenever the backend has been silent for a probe interval, sends it one empty datagram.
//! A live backend's QUIC endpoint drops it unread (an empty datagram is no QUIC packet); a dead
//! one's host answers with the ICMP error, which a connected socket reports as
//! `ECONNREFUSED`, and the watch closes the accelerator's connections with the reason. (A backend
//! that came back as a new process on the same port answers the old connection with a stateless
//! reset to the connection's next packet instead, which quinn reports by itself: its reset key
//! outlives it, `ac_proto::transport::reset_key`. The watch provokes that packet when no refusal
//! comes, [`provoke_reset`], and so does a copy cut on its lane: `accelerator.rs`, `session_end`.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use quinn::Connection;
use tokio::net::UdpSocket;

use crate::error::GONE;
use crate::lane::Lanes;
use crate::task::Owned;

/// How often a silent backend is probed. Several probes must go unanswered by the backend
/// (while the host refuses them) before the program learns of it, within a few intervals.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// How often the watch looks at its connections and lanes: a lane closed by a kill, or a
/// connection fallen silent, is acted on within this (not a whole probe interval later).
const TICK: Duration = Duration::from_millis(50);

/// How many of the program's calls wait on one accelerator's backend now (a request for its
/// answer, a copy for its bytes). The watch baits a restarted backend only while one does: an
/// idle program's next call draws the reset by itself, and a live backend need not answer baits
/// while nobody waits.
#[derive(Debug, Clone, Default)]
pub(crate) struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    /// Counts a call as waiting until the guard drops.
    pub(crate) fn enter(&self) -> WaitGuard<'_> {
        self.0.fetch_add(1, Ordering::Relaxed);
        WaitGuard(&self.0)
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// A waiting call, counted in [`Waiting`] while it lives.
pub(crate) struct WaitGuard<'a>(&'a AtomicUsize);

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The watch of one accelerator's connections; it stops when dropped.
#[derive(Debug)]
pub(crate) struct PortWatch {
    _task: Owned<()>,
}

impl PortWatch {
    /// Starts watching `addr` for the connections of one accelerator (the control one first),
    /// its bulk lanes, and the calls `waiting` on it. `None` when no probe socket can be made
    /// (then only the idle timeout and the lanes tell).
    pub(crate) fn start(
        addr: SocketAddr,
        connections: Vec<Connection>,
        lanes: Option<Arc<Lanes>>,
        waiting: Waiting,
    ) -> Option<Self> {
        let local: SocketAddr =
            if addr.is_ipv6() { "[::]:0".parse().expect("addr") } else { "0.0.0.0:0".parse().expect("addr") };
        let std_socket = std::net::UdpSocket::bind(local).ok()?;
        std_socket.set_nonblocking(true).ok()?;
        std_socket.connect(addr).ok()?;
        let socket = UdpSocket::from_std(std_socket).ok()?;
        Some(Self { _task: Owned::spawn(watch(socket, connections, lanes, waiting)) })
    }
}

/// Probes while the backend is silent; closes every connection on a refusal. Idle lanes closed
/// under it tell too: their TCP closes are not rate-limited as the host's ICMP answers are (about
/// one a second per peer once a burst is spent, shared with QUIC's own retransmissions).
///
/// A backend restarted on the same port accepts the probes, and the old connections learn of
/// the restart only from a stateless reset, which it sends in answer to a QUIC packet. A
/// connection waiting for an answer (a long kernel) sends none until its keep-alive, seconds
/// later; so the watch provokes the reset: when idle lanes close with the port accepting, and,
/// while a call waits, when a probe of a silent backend met no refusal within a round trip.
async fn watch(socket: UdpSocket, connections: Vec<Connection>, lanes: Option<Arc<Lanes>>, waiting: Waiting) {
    let received = |conns: &[Connection]| conns.iter().map(|c| c.stats().udp_rx.datagrams).sum::<u64>();
    let mut heard = received(&connections);
    let mut heard_at = Instant::now();
    let mut probed_at = Instant::now();
    let mut unanswered_probe = false;
    let mut buf = [0u8; 16];
    loop {
        let refused = tokio::select! {
            // Nothing but an error ever arrives on this socket: the backend never answers it.
            result = socket.recv(&mut buf) => is_refusal(result.err()),
            () = tokio::time::sleep(TICK) => false,
        };
        if connections.iter().all(|c| c.close_reason().is_some()) {
            return;
        }
        let now = received(&connections);
        if now != heard {
            (heard, heard_at, unanswered_probe) = (now, Instant::now(), false);
        }
        let mut gone = refused;
        // A refusal comes within a round trip of the probe (and a tick here): none came, so
        // the port has a listener, maybe a new process.
        if !gone && unanswered_probe && probed_at.elapsed() >= TICK.max(connections[0].rtt() * 3 / 2) {
            unanswered_probe = false;
            if waiting.any() {
                provoke_reset(&connections[0]);
            }
        }
        let silent = heard_at.elapsed() >= PROBE_INTERVAL && probed_at.elapsed() >= PROBE_INTERVAL;
        if !gone && silent {
            probed_at = Instant::now();
            gone = is_refusal(socket.send(&[]).await.err());
            unanswered_probe = !gone;
        }
        if let Some(lanes) = lanes.as_deref().filter(|lanes| !gone && lanes.closed_by_peer()) {
            gone = lanes.port_refuses().await;
            if !gone {
                provoke_reset(&connections[0]);
            }
        }
        if gone {
            tracing::warn!(peer = %socket.peer_addr().map(|a| a.to_string()).unwrap_or_default(), "{GONE}");
            close_gone(&connections);
            return;
        }
    }
}

/// Sends the control connection `conn` a small QUIC datagram. A backend restarted on the same
/// port answers it with a stateless reset, which ends the connection ("reset by peer") and so the
/// session; a live one acknowledges it unread (and keeps at most a few unread ones:
/// `ac_proto::transport::DATAGRAM_BUFFER`).
pub(crate) fn provoke_reset(conn: &Connection) {
    let _ = conn.send_datagram(Bytes::from_static(&RESET_BAIT));
}

/// The bait's bytes. A packet must be larger than a reset (a token and 5 bytes of padding) to
/// earn one; these with the packet's header and tag make it so.
const RESET_BAIT: [u8; ac_proto::transport::RESET_BAIT_LEN] = [0; ac_proto::transport::RESET_BAIT_LEN];

/// Closes an accelerator's connections with [`crate::error::GONE`]: its backend's process is known dead.
pub(crate) fn close_gone(connections: &[Connection]) {
    for conn in connections {
        conn.close(ac_proto::backend::close::BACKEND_GONE.into(), GONE.as_bytes());
    }
}

/// Whether the host of `addr` answers an empty datagram with "port unreachable" within a short
/// while: no process listens there (asked while a lost session is dialed again, since QUIC's
/// own socket never hears those answers).
pub(crate) async fn port_refused(addr: SocketAddr) -> bool {
    let local: SocketAddr =
        if addr.is_ipv6() { "[::]:0".parse().expect("addr") } else { "0.0.0.0:0".parse().expect("addr") };
    let Ok(socket) = UdpSocket::bind(local).await else { return false };
    if socket.connect(addr).await.is_err() {
        return false;
    }
    if let Err(e) = socket.send(&[]).await {
        return is_refusal(Some(e));
    }
    let answer = tokio::time::timeout(Duration::from_millis(200), socket.recv(&mut [0u8; 16])).await;
    matches!(answer, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Only "connection refused" (port unreachable) is a death; other errors (no route, host
/// unreachable) may be a network that comes back.
fn is_refusal(error: Option<std::io::Error>) -> bool {
    error.is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}
