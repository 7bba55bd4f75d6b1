//! Helpers for the end-to-end tests: a real backend on a loopback port chosen by the OS, real
//! clients, and a raw QUIC client that can send what the SDK never would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ac_backend::{BackendConfig, RunningBackend};
use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::backend::{Preamble, ALPN};
use ac_proto::transport::Tuning;
use ac_proto::{tls, transport};

/// A backend serving in this process, with its state directory.
#[derive(Debug)]
pub struct TestBackend {
    /// The running daemon.
    pub backend: RunningBackend,
    _state: tempfile::TempDir,
}

/// Transport settings that notice dead peers quickly.
pub fn quick_tuning() -> Tuning {
    Tuning { idle_timeout_ms: 1_500, keep_alive_ms: 300, ..Tuning::default() }
}

impl TestBackend {
    /// Starts a CPU-device backend with `memory_mib` of device memory.
    pub async fn start(memory_mib: u64) -> Self {
        Self::start_with(|c| c.memory_mib = memory_mib).await
    }

    /// Starts a backend after `adjust` changed the test defaults.
    pub async fn start_with(adjust: impl FnOnce(&mut BackendConfig)) -> Self {
        let state = tempfile::tempdir().expect("temp dir");
        let mut config = BackendConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            state_dir: state.path().to_path_buf(),
            memory_mib: 256,
            transport: quick_tuning(),
            ..BackendConfig::default()
        };
        adjust(&mut config);
        let backend = ac_backend::start(config).await.expect("backend starts");
        Self { backend, _state: state }
    }

    /// Options to connect to it.
    pub fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new(self.backend.addr(), self.backend.ca_cert());
        options.tuning = quick_tuning();
        options
    }

    /// A connected SDK client.
    pub async fn connect(&self) -> Accelerator {
        Accelerator::connect(&self.options()).await.expect("client connects")
    }

    /// Waits until `check` holds, for at most `limit`.
    pub async fn eventually(&self, limit: Duration, check: impl Fn(&RunningBackend) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if check(&self.backend) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check(&self.backend)
    }

    /// A raw QUIC connection with the backend's ALPN and no hello sent yet.
    pub async fn raw_connection(&self) -> quinn::Connection {
        let roots = tls::load_roots(self.backend.ca_cert()).expect("CA");
        let crypto = Arc::new(tls::client_crypto(roots, ALPN).expect("client TLS"));
        let endpoint = transport::client_endpoint(self.backend.addr(), crypto, &quick_tuning()).expect("endpoint");
        endpoint.connect(self.backend.addr(), "127.0.0.1").expect("connect").await.expect("handshake")
    }

    /// A raw connection whose first stream has sent the preamble and `hello_frame` bytes.
    pub async fn raw_session(
        &self,
        after_preamble: &[u8],
    ) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
        let conn = self.raw_connection().await;
        let (mut send, recv) = conn.open_bi().await.expect("stream");
        let mut bytes = Preamble::CURRENT.to_bytes().to_vec();
        bytes.extend_from_slice(after_preamble);
        send.write_all(&bytes).await.expect("write");
        (conn, send, recv)
    }
}

/// Waits for `conn` to be closed by the peer and returns (code, reason).
pub async fn closed_by_peer(conn: &quinn::Connection) -> (u64, String) {
    match tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("closed in time") {
        quinn::ConnectionError::ApplicationClosed(c) => {
            (c.error_code.into_inner(), String::from_utf8_lossy(&c.reason).into_owned())
        }
        other => panic!("expected an application close, got {other}"),
    }
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 10_007) as f32 * 0.25).collect()
}
