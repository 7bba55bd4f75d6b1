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
//! The backend drains the payload of a copy it refuses, so that the lane stays in step; a
//! device failure after a device-to-host header closes the lane, and the client opens another.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::frame::Source;
use crate::pieces::Blank;
use crate::ProtoError;

pub use tokio_rustls;

/// The lanes' ALPN: not the QUIC protocol's, so that neither can be mistaken for the other.
pub const ALPN: &[u8] = b"ac-lane/1";

/// A lane's byte stream (the TLS stream over TCP), as a [`Source`] for a
/// [`FrameReader`](crate::frame::FrameReader); writes go to `.0` directly.
#[derive(Debug)]
pub struct LaneStream<T>(pub T);

impl<T: AsyncRead + Unpin + Send> Source for LaneStream<T> {
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
        match self.0.read_exact(out).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ProtoError::UnexpectedEnd),
            Err(e) => Err(e.into()),
        }
    }
}

/// A lane's socket under its TLS layer: reads go through a buffer, because rustls asks the
/// socket for 4 KiB at a time (a system call each); the buffer asks for up to [`READ_BUFFER`].
pub type Socket = tokio::io::BufReader<tokio::net::TcpStream>;

/// How much one read from a lane's socket may bring.
pub const READ_BUFFER: usize = 256 << 10;

/// Wraps a connected, tuned socket for its TLS layer.
pub fn buffered(socket: tokio::net::TcpStream) -> Socket {
    tokio::io::BufReader::with_capacity(READ_BUFFER, socket)
}

/// Sets up a lane's TCP socket (either side): no Nagle delay, since a lane's last segment of a
/// copy and its small reply frames must not wait for acknowledgements. The buffers stay under
/// the kernel's auto-tuning, which sizes them to the path.
pub fn tune(socket: &tokio::net::TcpStream) -> Result<(), ProtoError> {
    socket.set_nodelay(true)?;
    Ok(())
}
