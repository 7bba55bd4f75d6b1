//! Wire types, codec, framing, TLS and transport set-up shared by every crate of the
//! network-attached accelerator manager.
//!
//! # Layout
//! - [`codec`]: the only place that knows the serializer (bincode 2 with a size limit).
//! - [`frame`]: length-prefixed frames on QUIC streams, raw payloads after a header, and the
//!   batching frame writer.
//! - [`backend`]: the frontend <-> backend protocol (session control, bulk copies, kernels), and
//!   the resource manager's registration link to a backend.
//! - [`arm`]: the protocol of the resource manager (programs and `armctl`).
//! - [`capability`]: signed permissions to use one accelerator (Ed25519).
//! - [`tls`]: the self-signed CA, certificates and rustls configurations (TLS 1.3, verified).
//! - [`transport`]: tuned QUIC transport parameters and endpoint construction.
//! - [`lane`]: bulk lanes, TLS 1.3 over TCP beside QUIC for the bytes of large copies.
//! - [`daemon`]: the address file and shutdown signal every daemon uses.
//! - `metrics` (feature `metrics`, the daemons'): the HTTP endpoint Prometheus scrapes.
//! - [`error`]: [`ProtoError`], the crate's one error type.
//!
//! # Invariants
//! - Every decode has an explicit size limit: a frame is at most [`codec::MAX_FRAME`], and what
//!   its decoder may allocate steps with its size (64 KiB for a frame up to 4 KiB, 1 MiB up to
//!   64 KiB, 16 MiB beyond: sixteen times the frame, what any frame within it can count).
//! - Bulk bytes never pass through the serializer: a frame announces their length and they follow
//!   raw on the stream.
//! - No code path builds a TLS configuration that accepts an unverified certificate.

pub mod arm;
pub mod backend;
pub mod capability;
pub mod codec;
pub mod daemon;
pub mod error;
pub mod frame;
pub mod lane;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod pieces;
pub mod tls;
pub mod transport;

pub use error::ProtoError;

/// `bytes` random bytes from the system's generator, as hex: secrets, session tokens and
/// idempotency keys.
pub fn random_hex(bytes: usize) -> String {
    use ring::rand::SecureRandom;
    let mut raw = vec![0u8; bytes];
    ring::rand::SystemRandom::new().fill(&mut raw).expect("system randomness");
    hex(&raw)
}

/// Bytes as lowercase hex, two digits each.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `--version`'s long text for the project's binaries: the release and the protocol versions
/// they speak, which say what they can run beside during a rolling upgrade (docs/admin.md,
/// "Upgrading"). All crates share the workspace's version.
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let (v, min, arm_v, arm_min) = (backend::VERSION, backend::MIN_VERSION, arm::VERSION, arm::MIN_VERSION);
        let version = env!("CARGO_PKG_VERSION");
        format!("{version} (backend protocol {v}, accepts {min}-{v}; ARM protocol {arm_v}, accepts {arm_min}-{arm_v})")
    })
}
