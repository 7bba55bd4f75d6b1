//! Bulk lanes (TLS over TCP beside QUIC, `ac_proto::lane`): their listener on the QUIC port's
//! number, and each lane's handshake and hello, which attach it to a session's copies.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ac_proto::backend::{ErrorKind, Hello, Reply, Response, WireError};
use ac_proto::frame::{frame_bytes, FrameReader, Source};
use ac_proto::lane::{self, tokio_rustls::TlsAcceptor, LaneStream};
use tracing::Instrument;

use super::{bulk, read_hello, welcome, Shared, HELLO_TIMEOUT};
use crate::metrics::Metrics;
use crate::BackendError;

/// The lanes' TCP listener: on the QUIC port's number, so that one port (UDP and TCP) is all a
/// firewall must open; on any free port when the QUIC port was picked freely and its TCP twin
/// is taken.
pub(super) fn lane_listener(quic: SocketAddr, picked: bool) -> Result<tokio::net::TcpListener, BackendError> {
    let bind = |addr: SocketAddr| -> std::io::Result<tokio::net::TcpListener> {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(256)
    };
    match bind(quic) {
        Ok(listener) => Ok(listener),
        Err(_) if picked => Ok(bind(SocketAddr::new(quic.ip(), 0))?),
        Err(e) => Err(BackendError::Config(format!(
            "cannot listen for bulk lanes on TCP port {} ({e}); free it or set `lanes = false`",
            quic.port()
        ))),
    }
}

pub(super) async fn accept_lanes(listener: tokio::net::TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::warn!(error = %e, "cannot accept a bulk lane");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        let span = tracing::info_span!("lane", %peer);
        tokio::spawn(accept_lane(socket, acceptor, shared).instrument(span));
    }
}

/// A lane: the TLS handshake, a hello that attaches it to a session, then copies until either
/// side closes it, the session ends, or the session resumes on a new connection (the program
/// dials new lanes then: see [`crate::session::Session::retire_lanes`]).
async fn accept_lane(socket: tokio::net::TcpStream, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    let opened = async {
        lane::tune(&socket).map_err(|e| e.to_string())?;
        let stream = lane::accept(socket, &acceptor).await.map_err(|e| format!("TLS handshake: {e}"))?;
        let mut reader = FrameReader::new(LaneStream(stream));
        let hello = read_hello(&mut reader, shared.config.protocols()).await.map_err(|(_, reason)| reason)?;
        Ok::<_, String>((hello, reader))
    };
    let ((hello, version), mut reader) = match tokio::time::timeout(HELLO_TIMEOUT, opened).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(reason)) => return tracing::info!(reason, "lane refused"),
        Err(_) => return tracing::info!("lane refused: no hello in time"),
    };
    let session = match hello {
        Hello::Attach { session, token } => shared.registry.find(session, &token),
        _ => None,
    };
    let Some(session) = session else {
        let refusal = WireError::new(ErrorKind::Unauthorized, "unknown session or wrong token: a lane only attaches");
        refuse_lane(&mut reader, refusal, &shared.metrics).await;
        return tracing::info!("lane refused: unknown session or wrong token");
    };
    // Twice the lanes the welcome names: room for a program's replacements of lanes it gave
    // up, which the backend may not have seen close yet (a copy waiting on its fence).
    let most = 2 * shared.config.session_lanes() as usize;
    let Some(mut ticket) = session.attach_lane(most) else {
        let refusal = WireError::new(
            ErrorKind::InvalidArgument,
            format!("the session has {most} lanes already, twice what this backend serves one (lanes_per_session)"),
        );
        refuse_lane(&mut reader, refusal, &shared.metrics).await;
        return tracing::info!(session = session.id.0, most, "lane refused: the session has all its lanes");
    };
    if lane_reply(&mut reader, welcome(&session, &shared, version)).await.is_err() {
        return;
    }
    tracing::debug!(session = session.id.0, "lane attached");
    tokio::select! {
        served = bulk::serve_lane(session.clone(), reader) => {
            if let Err(e) = served {
                tracing::info!(session = session.id.0, error = %e, "lane closed");
            }
        }
        () = session.ended() => {}
        () = ticket.retired() => tracing::debug!(session = session.id.0, "lane retired: the session resumed on a new connection"),
    }
    // Only now, the lane's copy dropped with `serve_lane`, may a resumption go on.
    drop(ticket);
}

/// Answers a lane with `error` instead of a welcome, and counts it; the lane then closes.
async fn refuse_lane<T: tokio::io::AsyncWrite + Unpin>(
    reader: &mut FrameReader<LaneStream<T>>,
    error: WireError,
    metrics: &Metrics,
) where
    LaneStream<T>: Source + Send,
{
    metrics.lane_refused();
    let refusal = frame_bytes(&Reply { id: 0, response: Response::Error(error) }).expect("a refusal encodes");
    let _ = lane_reply(reader, refusal).await;
}

/// Writes `bytes` to a lane and flushes them.
async fn lane_reply<T: tokio::io::AsyncWrite + Unpin>(
    reader: &mut FrameReader<LaneStream<T>>,
    bytes: bytes::Bytes,
) -> std::io::Result<()>
where
    LaneStream<T>: Source + Send,
{
    use tokio::io::AsyncWriteExt;
    let stream = &mut reader.stream_mut().0;
    stream.write_all(&bytes).await?;
    stream.flush().await
}
