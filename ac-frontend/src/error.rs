//! The SDK's error type.

use ac_proto::backend::{ErrorKind, WireError};
use ac_proto::ProtoError;

/// Everything an SDK call can fail with. (Serializable so that MPI ranks can share one.)
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Error {
    /// The accelerator refused or failed the call; the session goes on.
    #[error("accelerator error ({kind:?}): {message}")]
    Remote {
        /// The category.
        kind: ErrorKind,
        /// The backend's explanation.
        message: String,
    },
    /// The resource manager refused or failed the request.
    #[error("resource manager: {kind:?}: {message}")]
    Manager {
        /// The category.
        kind: ac_proto::arm::ArmErrorKind,
        /// The manager's explanation.
        message: String,
    },
    /// The resource manager cannot be reached (down, wrong address, network) or stopped
    /// answering.
    #[error("the resource manager at {addr} cannot be reached: {reason}")]
    ManagerUnreachable {
        /// Where it was asked.
        addr: std::net::SocketAddr,
        /// What failed.
        reason: String,
    },
    /// The backend speaks another protocol version.
    #[error("version mismatch: {0}")]
    VersionMismatch(String),
    /// The connection to the accelerator failed or was closed; the message says why.
    #[error("connection to the accelerator lost: {0}")]
    Disconnected(String),
    /// The accelerator's daemon ended or refused this program's use of it on the resource
    /// manager's word: the capability was revoked (the set was freed, a preemptible loan's owner
    /// took it back, the job ended, its host was removed). Its handles no longer work.
    #[error("the accelerator was taken back: {0}")]
    Revoked(String),
    /// The accelerator refuses a new session: its backend's session limit, a GPU in
    /// `EXCLUSIVE_PROCESS` compute mode already in use, or its health. The message says which.
    #[error("the accelerator refuses a new session: {0}")]
    DeviceRefused(String),
    /// The backend sent something this SDK does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The call was refused before being sent (sizes, signatures).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Waiting took longer than allowed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Local set-up failed: certificates, configuration, sockets.
    #[error("setup failed: {0}")]
    Setup(String),
}

impl Error {
    /// The remote error category, when the backend refused the call.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Remote { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Error::Remote { kind: e.kind, message: e.message }
    }
}

impl From<quinn::ConnectionError> for Error {
    fn from(e: quinn::ConnectionError) -> Self {
        use ac_proto::backend::close;
        match &e {
            quinn::ConnectionError::ApplicationClosed(c) if c.error_code == close::VERSION_MISMATCH.into() => {
                Error::VersionMismatch(String::from_utf8_lossy(&c.reason).into_owned())
            }
            quinn::ConnectionError::ApplicationClosed(c) if c.error_code == close::UNAUTHORIZED.into() => {
                Error::Revoked(String::from_utf8_lossy(&c.reason).into_owned())
            }
            quinn::ConnectionError::ApplicationClosed(c) if c.error_code == close::DEVICE_REFUSED.into() => {
                Error::DeviceRefused(String::from_utf8_lossy(&c.reason).into_owned())
            }
            quinn::ConnectionError::ApplicationClosed(c) => {
                Error::Disconnected(String::from_utf8_lossy(&c.reason).into_owned())
            }
            quinn::ConnectionError::ConnectionClosed(c) if c.reason.as_ref() == ac_proto::error::ALPN_REFUSED => {
                Error::VersionMismatch("the backend does not speak this protocol (ALPN)".into())
            }
            // Only the port watch closes a connection that still has calls in flight.
            quinn::ConnectionError::LocallyClosed => Error::Disconnected(GONE.into()),
            quinn::ConnectionError::TransportError(t) if t.to_string().contains("not valid for name") => {
                Error::Setup(format!("{e}; {}", ac_proto::tls::ADD_NAME_HINT))
            }
            _ => Error::Disconnected(e.to_string()),
        }
    }
}

impl From<ProtoError> for Error {
    fn from(e: ProtoError) -> Self {
        match e {
            ProtoError::Connection(c) => c.into(),
            ProtoError::Read(quinn::ReadError::ConnectionLost(c)) => c.into(),
            ProtoError::Write(quinn::WriteError::ConnectionLost(c)) => c.into(),
            ProtoError::VersionMismatch { .. } => Error::VersionMismatch(e.to_string()),
            ProtoError::Refused(refusal) => refusal.into(),
            ProtoError::Malformed(_) | ProtoError::FrameTooLarge { .. } => Error::Protocol(e.to_string()),
            ProtoError::Certificate(_)
            | ProtoError::Tls(_)
            | ProtoError::Io(_)
            | ProtoError::Connect(_)
            | ProtoError::Setting { .. } => Error::Setup(e.to_string()),
            other => Error::Disconnected(other.to_string()),
        }
    }
}

/// The close reason the program sees when its backend's port is closed.
pub(crate) const GONE: &str = "the backend process is gone: its host answers that no process listens on its port; \
    device memory and handles of this session are lost";

/// Result of an SDK call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
