//! Bulk lanes: TLS 1.3 over TCP beside the QUIC connections, for the bytes of large copies.
//!
//! Why: a QUIC stream encrypts, sends and receives each ~1,450-byte datagram on its own in user
//! space, which held bulk copies to a fifth of what plain TCP moves on a 1500-byte-MTU link
//! (see "Bulk copies between two hosts" in `BENCHMARKS.md`). Over TCP the kernel moves 64 KiB
//! segments, and TLS encrypts 16 KiB records with AES-GCM at several GB/s a core.
//!
//! A lane is a TCP connection to the port a backend's welcome names
//! ([`crate::backend::Response::Welcome`]), with a TLS 1.3 handshake that verifies the backend's
//! certificate as the QUIC connection does (same CA, same names, ALPN [`ALPN`]). The client then
//! sends the preamble and a [`crate::backend::Hello::Attach`] with the session's secret, and the
//! backend answers with the welcome, exactly as on an attached QUIC connection. After that the
//! lane carries one bulk copy at a time, in the QUIC bulk stream's format: a
//! [`crate::backend::BulkHeader`] frame, the payload (host to device), a reply frame, and the
//! payload (device to host). A copy's order among the session's work is still its header's
//! `after` (see "Order" in [`crate::backend`]): the lane only carries bytes.
//!
//! The bytes travel in TLS 1.3 records of the lane's own record layer ([`record`], [`LaneTls`]):
//! rustls runs the handshake and hands over the traffic secrets, as it does for kernel TLS.
//!
//! The backend drains the payload of a copy it refuses, so that the lane stays in step; a
//! device failure after a device-to-host header closes the lane, and the client opens another.

use bytes::Bytes;
use tokio::io::AsyncReadExt;

use crate::frame::Source;
use crate::pieces::Blank;
use crate::ProtoError;

mod aead;
pub mod record;
mod stream;
mod tcp_info;

pub use stream::{accept, connect, Fill, LaneTls, Take, READ_BUFFER, WRITE_BUFFER};
pub use tcp_info::TcpInfo;
pub use tokio_rustls;

/// The lanes' ALPN: not the QUIC protocol's, so that neither can be mistaken for the other.
pub const ALPN: &[u8] = b"ac-lane/1";

/// A lane's byte stream (the TLS stream over TCP), as a [`Source`] for a
/// [`FrameReader`](crate::frame::FrameReader); writes go to `.0` directly.
#[derive(Debug)]
pub struct LaneStream<T>(pub T);

impl Source for LaneStream<LaneTls> {
    async fn read_some(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        let mut buf = vec![0; max.min(64 << 10)];
        match self.0.read(&mut buf).await? {
            0 => Ok(None),
            n => {
                buf.truncate(n);
                Ok(Some(buf.into()))
            }
        }
    }

    /// Waits for all `max` bytes, so that the device gets pieces of the copy's chunk size, not
    /// of a TLS record's 16 KiB.
    async fn read_payload(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        let mut piece = Blank::new(max);
        self.read_into(piece.bytes_mut()).await?;
        Ok(Some(piece.into_bytes()))
    }

    async fn read_into(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        self.0.read_exact_plain(out).await
    }
}

/// The lanes' server TLS configuration presenting `identity`: TLS 1.3 as for QUIC, no session
/// tickets (nothing may follow the handshake before the ready record, see [`stream`]), and the
/// traffic secrets handed to the lane's record layer.
pub fn server_config(identity: crate::tls::Identity) -> Result<tokio_rustls::TlsAcceptor, ProtoError> {
    let mut config = crate::tls::server_tls(identity, ALPN)?;
    config.send_tls13_tickets = 0;
    config.enable_secret_extraction = true;
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

/// The lanes' client TLS configuration trusting `roots` (the backend's certificate is verified
/// as for QUIC), the traffic secrets handed to the lane's record layer.
pub fn client_config(roots: rustls::RootCertStore) -> Result<tokio_rustls::TlsConnector, ProtoError> {
    let mut config = crate::tls::client_tls(roots, ALPN, None)?;
    config.enable_secret_extraction = true;
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)))
}

/// Sets up a lane's TCP socket (either side): no Nagle delay, since a lane's last segment of a
/// copy and its small reply frames must not wait for acknowledgements. The buffers stay under
/// the kernel's auto-tuning, which sizes them to the path.
pub fn tune(socket: &tokio::net::TcpStream) -> Result<(), ProtoError> {
    socket.set_nodelay(true)?;
    Ok(())
}

/// The lanes a host drives at once by default: one per four cores this process may run on,
/// from one to four. A lane seals or opens its records on a core of its own, so more lanes
/// than cores to spare lose: on 2 cores one lane moved more than two (stop 36), on 16 four
/// moved 2.5-3.2x what one did (`BENCHMARKS.md`, stop 46; "How many lanes" in
/// `ARCHITECTURE.md`). The program's default (`ac_frontend::default_lanes`) and the
/// backend's cap per session (`lanes_per_session`) both start here.
pub fn lanes_here() -> usize {
    // Asked once: on Linux the answer reads the cgroup's files, and every `ConnectOptions`
    // asks.
    static LANES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| lanes_for_cores(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

fn lanes_for_cores(cores: usize) -> usize {
    (cores / 4).clamp(1, 4)
}

#[cfg(test)]
mod count_tests {
    use super::*;

    #[test]
    fn one_lane_per_four_cores_from_one_to_four() {
        let lanes: Vec<usize> = [1, 2, 4, 7, 8, 12, 16, 64].into_iter().map(lanes_for_cores).collect();
        assert_eq!(lanes, [1, 1, 1, 1, 2, 3, 4, 4]);
    }
}
