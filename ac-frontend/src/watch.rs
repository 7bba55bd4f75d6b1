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
//! outlives it, `ac_proto::transport::reset_key`. A copy cut on its lane provokes that packet:
//! `accelerator.rs`, `session_end`.)

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use quinn::Connection;
use tokio::net::UdpSocket;

use crate::error::GONE;
use crate::lane::Lanes;
use crate::task::Owned;

/// How often a silent backend is probed. Several probes must go unanswered by the backend
/// (while the host refuses them) before the program learns of it, within a few intervals.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// The watch of one accelerator's connections; it stops when dropped.
#[derive(Debug)]
pub(crate) struct PortWatch {
    _task: Owned<()>,
}

impl PortWatch {
    /// Starts watching `addr` for the connections of one accelerator (the control one first),
    /// and its bulk lanes. `None` when no probe socket can be made (then only the idle timeout
    /// and the lanes tell).
    pub(crate) fn start(addr: SocketAddr, connections: Vec<Connection>, lanes: Option<Arc<Lanes>>) -> Option<Self> {
        let local: SocketAddr =
            if addr.is_ipv6() { "[::]:0".parse().expect("addr") } else { "0.0.0.0:0".parse().expect("addr") };
        let std_socket = std::net::UdpSocket::bind(local).ok()?;
        std_socket.set_nonblocking(true).ok()?;
        std_socket.connect(addr).ok()?;
        let socket = UdpSocket::from_std(std_socket).ok()?;
        Some(Self { _task: Owned::spawn(watch(socket, connections, lanes)) })
    }
}

/// Probes while the backend is silent; closes every connection on a refusal. Idle lanes closed
/// under it tell too: their TCP closes are not rate-limited as the host's ICMP answers are (about
/// one a second per peer once a burst is spent, shared with QUIC's own retransmissions).
async fn watch(socket: UdpSocket, connections: Vec<Connection>, lanes: Option<Arc<Lanes>>) {
    let received = |conns: &[Connection]| conns.iter().map(|c| c.stats().udp_rx.datagrams).sum::<u64>();
    let mut heard = received(&connections);
    let mut buf = [0u8; 16];
    loop {
        let refused = tokio::select! {
            // Nothing but an error ever arrives on this socket: the backend never answers it.
            result = socket.recv(&mut buf) => is_refusal(result.err()),
            () = tokio::time::sleep(PROBE_INTERVAL) => false,
        };
        if connections.iter().all(|c| c.close_reason().is_some()) {
            return;
        }
        let now = received(&connections);
        if refused || (now == heard && is_refusal(socket.send(&[]).await.err())) || lanes_gone(&lanes).await {
            tracing::warn!(peer = %socket.peer_addr().map(|a| a.to_string()).unwrap_or_default(), "{GONE}");
            close_gone(&connections);
            return;
        }
        heard = now;
    }
}

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

/// Whether the lanes found the backend's process gone.
async fn lanes_gone(lanes: &Option<Arc<Lanes>>) -> bool {
    match lanes {
        Some(lanes) => lanes.backend_gone().await,
        None => false,
    }
}
