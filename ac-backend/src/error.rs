//! The crate's error type for daemon-level failures. Errors of single requests travel to the
//! caller as [`ac_proto::backend::WireError`] and never end the daemon.

/// What can stop the backend from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Setting up the network, TLS or certificates failed.
    #[error(transparent)]
    Proto(#[from] ac_proto::ProtoError),
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// `--device cuda` was asked for and no CUDA device is usable.
    #[error("no usable CUDA device: {0}")]
    NoCuda(String),
    /// A local I/O operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
