//! QUIC transport tuning and endpoint construction.
//!
//! Measured on a 2-core loopback (see `BENCHMARKS.md`): quinn's defaults move about 0.2 of a
//! plain TCP stream; a 6,400-byte MTU with GSO (and `max_udp_payload_size` raised on both ends so
//! the peer accepts it) is the biggest single gain. Windows matter on real links, not on
//! loopback: one stream moves at most `stream_window / RTT`.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::HmacKey;
use quinn::{Endpoint, EndpointConfig, IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use crate::ProtoError;

/// The bytes of the datagram the SDK sends a silent backend to draw a restarted process's
/// stateless reset (`ac_frontend`'s `watch.rs`).
pub const RESET_BAIT_LEN: usize = 32;

/// The bytes of unread QUIC datagrams a connection keeps. quinn counts each with its own record
/// (32 bytes on 64-bit targets), drops the oldest beyond this, and calls one that alone exceeds
/// it a protocol violation: room for several baits.
pub const DATAGRAM_BUFFER: usize = 256;

const _: () = assert!(RESET_BAIT_LEN + 64 <= DATAGRAM_BUFFER, "a bait and a record fit with room to spare");

/// Transport settings; the defaults are the measured choices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tuning {
    /// Initial and maximum UDP payload size. 6,400 bytes keeps a GSO batch of 10 segments under
    /// 64 KiB. MTU discovery falls back when the path cannot carry it.
    pub mtu: u16,
    /// Per-stream receive window, bytes. 16 MiB carries 1.6 GB/s at a 10 ms RTT.
    pub stream_window: u64,
    /// Per-connection receive and send window, bytes.
    pub connection_window: u64,
    /// UDP socket send and receive buffers, bytes (capped by the kernel's `rmem_max`).
    pub socket_buffer: usize,
    /// A peer silent this long is dead, milliseconds.
    pub idle_timeout_ms: u64,
    /// Keep-alive interval, milliseconds.
    pub keep_alive_ms: u64,
    /// Streams the peer may have open at once. quinn keeps (and recycles) the receive state of
    /// every stream slot it has used on a connection, so this also bounds a connection's memory.
    pub concurrent_streams: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            mtu: 6400,
            stream_window: 16 << 20,
            connection_window: 64 << 20,
            socket_buffer: 4 << 20,
            idle_timeout_ms: 10_000,
            keep_alive_ms: 2_000,
            concurrent_streams: 1024,
        }
    }
}

/// The program-side settings read from the environment by [`Tuning::with_env`]: variable, what
/// it sets. The same names serve Rust programs and `libac`.
pub const ENV_SETTINGS: [(&str, &str); 6] = [
    ("AC_MTU", "initial and largest UDP payload, bytes (1200..=65527; 1452 on a 1500-byte link)"),
    ("AC_IDLE_TIMEOUT_MS", "a peer silent this long is dead, ms"),
    ("AC_KEEP_ALIVE_MS", "keep-alive interval, ms"),
    ("AC_STREAM_WINDOW", "per-stream receive window, bytes"),
    ("AC_CONNECTION_WINDOW", "per-connection receive and send window, bytes"),
    ("AC_SOCKET_BUFFER", "UDP socket buffers, bytes"),
];

impl Tuning {
    /// These settings, overridden by the variables of [`ENV_SETTINGS`] that are set.
    pub fn with_env(self) -> Result<Self, ProtoError> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// [`Tuning::with_env`] over any source of variables.
    pub fn with_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self, ProtoError> {
        fn parse<T: std::str::FromStr>(name: &'static str, value: &str) -> Result<T, ProtoError>
        where
            T::Err: std::fmt::Display,
        {
            value.trim().parse().map_err(|e: T::Err| ProtoError::Setting { name, message: format!("{value:?}: {e}") })
        }
        let [mtu, idle, keep, stream, conn, socket] = ENV_SETTINGS.map(|(name, _)| name);
        if let Some(v) = var(mtu) {
            self.mtu = parse(mtu, &v)?;
            if !(1200..=65527).contains(&self.mtu) {
                return Err(ProtoError::Setting { name: mtu, message: format!("{v} is outside 1200..=65527") });
            }
        }
        if let Some(v) = var(idle) {
            self.idle_timeout_ms = parse(idle, &v)?;
        }
        if let Some(v) = var(keep) {
            self.keep_alive_ms = parse(keep, &v)?;
        }
        if let Some(v) = var(stream) {
            self.stream_window = parse(stream, &v)?;
        }
        if let Some(v) = var(conn) {
            self.connection_window = parse(conn, &v)?;
        }
        if let Some(v) = var(socket) {
            self.socket_buffer = parse(socket, &v)?;
        }
        if self.keep_alive_ms == 0 || self.keep_alive_ms >= self.idle_timeout_ms {
            return Err(ProtoError::Setting {
                name: keep,
                message: format!(
                    "the keep-alive ({} ms) must be positive and shorter than the idle timeout ({} ms)",
                    self.keep_alive_ms, self.idle_timeout_ms
                ),
            });
        }
        Ok(self)
    }

    /// quinn's defaults with the same timeouts: the baseline of the benchmark.
    pub fn quinn_defaults() -> Self {
        Self {
            mtu: 1200,
            stream_window: 1_250_000,
            connection_window: 1_250_000 * 4,
            socket_buffer: 0,
            ..Self::default()
        }
    }

    /// The transport parameters for a connection.
    pub fn transport_config(&self) -> TransportConfig {
        let mut t = TransportConfig::default();
        if self.mtu > 1200 {
            t.initial_mtu(self.mtu);
            let mut mtud = MtuDiscoveryConfig::default();
            mtud.upper_bound(self.mtu);
            t.mtu_discovery_config(Some(mtud));
        }
        t.stream_receive_window(VarInt::from_u64(self.stream_window).unwrap_or(VarInt::MAX));
        t.receive_window(VarInt::from_u64(self.connection_window).unwrap_or(VarInt::MAX));
        t.send_window(self.connection_window);
        t.max_concurrent_bidi_streams(VarInt::from_u32(self.concurrent_streams));
        t.max_concurrent_uni_streams(VarInt::from_u32(0));
        t.max_idle_timeout(IdleTimeout::try_from(Duration::from_millis(self.idle_timeout_ms)).ok());
        t.keep_alive_interval(Some(Duration::from_millis(self.keep_alive_ms)));
        t.enable_segmentation_offload(true);
        // Datagrams carry nothing: the SDK sends a backend small ones only to provoke a
        // restarted process's stateless reset (`ac_frontend`'s `watch.rs`). None is ever read,
        // so the buffer that keeps unread ones is a few bytes, not quinn's megabyte.
        t.datagram_receive_buffer_size(Some(DATAGRAM_BUFFER));
        t
    }

    /// The endpoint configuration: accept datagrams as large as our MTU.
    pub fn endpoint_config(&self) -> EndpointConfig {
        let mut e = EndpointConfig::default();
        if self.mtu > 1200 {
            e.max_udp_payload_size(self.mtu.max(1200)).expect("mtu >= 1200 is valid");
        }
        e
    }

    /// A UDP socket bound to `addr` with the configured buffers.
    pub fn bind(&self, addr: SocketAddr) -> Result<UdpSocket, ProtoError> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if self.socket_buffer > 0 {
            // Best effort: the kernel caps these at rmem_max / wmem_max.
            let _ = socket.set_recv_buffer_size(self.socket_buffer);
            let _ = socket.set_send_buffer_size(self.socket_buffer);
        }
        socket.bind(&addr.into())?;
        Ok(socket.into())
    }
}

/// The keys a server derives its connection ids and stateless-reset tokens from, kept so that
/// they outlive the process: a daemon that comes back on the same port recognises its previous
/// life's connection ids and answers their packets with a reset the peers accept, so they learn
/// at once that the process they talked to is gone (instead of after their idle timeout).
#[derive(Clone)]
pub struct LastingKeys {
    reset: Arc<dyn HmacKey>,
    cid: u64,
}

impl std::fmt::Debug for LastingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastingKeys(..)")
    }
}

impl LastingKeys {
    /// Signs `data` with the reset key (for tests: equal keys sign alike).
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; self.reset.signature_len()];
        self.reset.sign(data, &mut out);
        out
    }

    /// Keys of their own for another endpoint of the same daemon (`label` names it), derived
    /// from these: as lasting, but a reset token one endpoint would answer is never one the
    /// other issued (RFC 9000, 21.11: a packet of one endpoint's connection sent to the
    /// other's port must not draw a reset that ends it).
    pub fn derived(&self, label: &str) -> LastingKeys {
        from_secret(&self.sign(format!("derived keys: {label}").as_bytes()))
    }

    fn apply(&self, config: &mut EndpointConfig) {
        config.reset_key(self.reset.clone());
        let cid = self.cid;
        config.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid)));
    }
}

/// The [`LastingKeys`] kept in `dir` (`reset.key`, owner only), made on first use.
pub fn lasting_keys(dir: &Path) -> Result<LastingKeys, ProtoError> {
    let path = dir.join("reset.key");
    let secret = match std::fs::read_to_string(&path) {
        Ok(hex) => decode_hex(hex.trim()).ok_or_else(|| {
            ProtoError::Certificate(format!("{}: not 64 hex digits; remove it to make a new one", path.display()))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut secret = [0u8; 32];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
                .map_err(|_| ProtoError::Certificate("no randomness for the reset key".into()))?;
            std::fs::create_dir_all(dir)?;
            let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
            crate::tls::write_file(&path, &hex, true)?;
            secret
        }
        Err(e) => return Err(e.into()),
    };
    Ok(from_secret(&secret))
}

/// The keys derived from `secret`.
fn from_secret(secret: &[u8]) -> LastingKeys {
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    // The connection-id key is derived from the same secret, apart from the reset tokens.
    let tag = ring::hmac::sign(&reset, b"connection ids");
    let cid = u64::from_le_bytes(tag.as_ref()[..8].try_into().expect("8 bytes"));
    LastingKeys { reset: Arc::new(reset), cid }
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A server endpoint on `addr`; with `keys`, its connection ids and stateless resets survive
/// restarts (see [`LastingKeys`]).
pub fn server_endpoint(
    addr: SocketAddr,
    crypto: quinn::crypto::rustls::QuicServerConfig,
    tuning: &Tuning,
    keys: Option<&LastingKeys>,
) -> Result<Endpoint, ProtoError> {
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(tuning.transport_config()));
    let socket = tuning.bind(addr)?;
    let mut config = tuning.endpoint_config();
    if let Some(keys) = keys {
        keys.apply(&mut config);
    }
    Ok(Endpoint::new(config, Some(server), socket, Arc::new(quinn::TokioRuntime))?)
}

/// A client endpoint able to reach `peer`, with `crypto` as its default configuration when given
/// (otherwise every connection names its own with `connect_with`).
pub fn client_endpoint(
    peer: SocketAddr,
    crypto: Option<Arc<quinn::crypto::rustls::QuicClientConfig>>,
    tuning: &Tuning,
) -> Result<Endpoint, ProtoError> {
    let local: SocketAddr =
        if peer.is_ipv6() { "[::]:0".parse().expect("addr") } else { "0.0.0.0:0".parse().expect("addr") };
    let socket = tuning.bind(local)?;
    let mut endpoint = Endpoint::new(tuning.endpoint_config(), None, socket, Arc::new(quinn::TokioRuntime))?;
    if let Some(crypto) = crypto {
        let mut client = quinn::ClientConfig::new(crypto);
        client.transport_config(Arc::new(tuning.transport_config()));
        endpoint.set_default_client_config(client);
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_the_environment_override_and_are_checked() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let t = Tuning::default().with_vars(vars(&[("AC_MTU", "1452"), ("AC_IDLE_TIMEOUT_MS", "4000")])).unwrap();
        assert_eq!((t.mtu, t.idle_timeout_ms, t.keep_alive_ms), (1452, 4000, Tuning::default().keep_alive_ms));
        let e = Tuning::default().with_vars(vars(&[("AC_MTU", "9x")])).unwrap_err().to_string();
        assert!(e.starts_with("AC_MTU: \"9x\""), "{e}");
        let e = Tuning::default().with_vars(vars(&[("AC_MTU", "800")])).unwrap_err().to_string();
        assert!(e.contains("outside 1200..=65527"), "{e}");
        let e = Tuning::default().with_vars(vars(&[("AC_KEEP_ALIVE_MS", "20000")])).unwrap_err().to_string();
        assert!(e.contains("shorter than the idle timeout"), "{e}");
    }

    #[test]
    fn the_lasting_keys_are_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("ac-reset-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = lasting_keys(&dir).unwrap();
        let file = std::fs::read_to_string(dir.join("reset.key")).unwrap();
        let again = lasting_keys(&dir).unwrap();
        assert_eq!(file, std::fs::read_to_string(dir.join("reset.key")).unwrap());
        assert_eq!(first.sign(b"connection id"), again.sign(b"connection id"), "alike after a restart");
        assert_eq!(first.cid, again.cid);
        // Another endpoint's keys: alike after a restart, apart from these.
        let (raft, raft_again) = (first.derived("raft"), again.derived("raft"));
        assert_eq!(raft.sign(b"connection id"), raft_again.sign(b"connection id"));
        assert_ne!(raft.sign(b"connection id"), first.sign(b"connection id"));
        assert_ne!(raft.cid, first.cid);
        std::fs::write(dir.join("reset.key"), "zz").unwrap();
        assert!(lasting_keys(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
