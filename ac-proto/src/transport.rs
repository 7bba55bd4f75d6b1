//! QUIC transport tuning and endpoint construction.
//!
//! Measured on a 2-core loopback (see `BENCHMARKS.md`): quinn's defaults move about 0.2 of a
//! plain TCP stream; a 6,400-byte MTU with GSO (and `max_udp_payload_size` raised on both ends so
//! the peer accepts it) is the biggest single gain. Windows matter on real links, not on
//! loopback: one stream moves at most `stream_window / RTT`.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use quinn::{Endpoint, EndpointConfig, IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use crate::ProtoError;

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
        }
    }
}

impl Tuning {
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
        t.max_concurrent_bidi_streams(VarInt::from_u32(1024));
        t.max_concurrent_uni_streams(VarInt::from_u32(0));
        t.max_idle_timeout(IdleTimeout::try_from(Duration::from_millis(self.idle_timeout_ms)).ok());
        t.keep_alive_interval(Some(Duration::from_millis(self.keep_alive_ms)));
        t.enable_segmentation_offload(true);
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

/// A server endpoint on `addr`.
pub fn server_endpoint(
    addr: SocketAddr,
    crypto: quinn::crypto::rustls::QuicServerConfig,
    tuning: &Tuning,
) -> Result<Endpoint, ProtoError> {
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(tuning.transport_config()));
    let socket = tuning.bind(addr)?;
    Ok(Endpoint::new(tuning.endpoint_config(), Some(server), socket, Arc::new(quinn::TokioRuntime))?)
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
