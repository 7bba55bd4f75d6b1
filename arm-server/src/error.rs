//! The crate's error type for daemon-level failures. Errors of single requests travel to the
//! caller as [`ac_proto::arm::ArmError`].

/// What can stop the resource manager from starting or persisting.
#[derive(Debug, thiserror::Error)]
pub enum ArmServerError {
    /// Setting up the network, TLS, certificates or keys failed.
    #[error(transparent)]
    Proto(#[from] ac_proto::ProtoError),
    /// The durable store failed.
    #[error("store error: {0}")]
    Store(String),
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// This replica of a replicated manager is not the leader (the leader's address for
    /// programs, when known).
    #[error("not the leader")]
    NotLeader(Option<std::net::SocketAddr>),
    /// Replication failed: the replica could not start, or a change was not committed (no
    /// majority reached).
    #[error("replication: {0}")]
    Replication(String),
    /// A local I/O operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
