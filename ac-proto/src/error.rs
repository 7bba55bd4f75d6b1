//! The crate's error type.

use std::io;

/// Everything that can go wrong while encoding, framing or setting up a link.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// A frame or message could not be decoded: the peer sent malformed bytes.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A length prefix announced more than the allowed maximum.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The announced length.
        len: u64,
        /// The limit it broke.
        limit: u64,
    },
    /// A message could not be encoded (should not happen for well-formed types).
    #[error("cannot encode message: {0}")]
    Encode(String),
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: we speak {ours}, the peer {theirs}")]
    VersionMismatch {
        /// Our protocol version.
        ours: u16,
        /// The peer's protocol version.
        theirs: u16,
    },
    /// The stream ended before a complete frame or payload arrived.
    #[error("stream ended unexpectedly")]
    UnexpectedEnd,
    /// Reading from a QUIC stream failed.
    #[error("read failed: {0}")]
    Read(#[from] quinn::ReadError),
    /// Writing to a QUIC stream failed.
    #[error("write failed: {0}")]
    Write(#[from] quinn::WriteError),
    /// The QUIC connection failed or was closed.
    #[error("connection lost: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// Connecting failed before the handshake started.
    #[error("cannot connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// A certificate or key could not be created, read or parsed.
    #[error("certificate error: {0}")]
    Certificate(String),
    /// A TLS configuration could not be built.
    #[error("TLS configuration error: {0}")]
    Tls(#[from] rustls::Error),
    /// A setting from the environment could not be understood.
    #[error("{name}: {message}")]
    Setting {
        /// The variable.
        name: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// A local I/O operation failed (socket, certificate files).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// A backend refused a hello with an error (not by closing the connection).
    #[error("the backend refused: {0:?}")]
    Refused(crate::backend::WireError),
}

impl ProtoError {
    /// Whether the peer refused the protocol version this side spoke: a preamble of another
    /// version, a connection closed with [`crate::backend::close::VERSION_MISMATCH`], or an ALPN
    /// it does not serve. A client may then try an older version.
    pub fn is_version_refusal(&self) -> bool {
        use quinn::ConnectionError::{ApplicationClosed, ConnectionClosed};
        match self {
            ProtoError::VersionMismatch { .. } => true,
            ProtoError::Connection(ApplicationClosed(c)) => {
                c.error_code == crate::backend::close::VERSION_MISMATCH.into()
            }
            ProtoError::Connection(ConnectionClosed(c)) => c.reason.as_ref() == ALPN_REFUSED,
            _ => false,
        }
    }

    /// The application's close code ([`crate::backend::close`]) when the peer closed the
    /// connection with one.
    pub fn close_code(&self) -> Option<u32> {
        match self {
            ProtoError::Connection(quinn::ConnectionError::ApplicationClosed(c)) => {
                u32::try_from(c.error_code.into_inner()).ok()
            }
            _ => None,
        }
    }
}

/// What quinn says of a connection whose peer serves none of the ALPNs offered.
pub const ALPN_REFUSED: &[u8] = b"peer doesn't support any known protocol";
