//! Connecting to a backend: TLS, transport tuning, preamble and hello. The SDK's sessions and
//! the manager's registration links both connect so (the SDK re-exports [`ConnectOptions`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use quinn::{Connection, Endpoint, SendStream};

use super::{v4, Hello, Preamble, Reply, Response, ALPN, MIN_VERSION, VERSION};
use crate::frame::{frame_bytes, FrameReader};
use crate::transport::Tuning;
use crate::{tls, transport, ProtoError};

type Result<T> = std::result::Result<T, ProtoError>;

/// How to reach one backend.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The backend's address.
    pub addr: SocketAddr,
    /// The name its certificate must carry (defaults to the address's IP).
    pub server_name: String,
    /// The CA certificate to trust (PEM file).
    pub ca_cert: PathBuf,
    /// The CA certificate to trust, as PEM text; takes precedence over `ca_cert` (the resource
    /// manager hands it out with each grant).
    pub ca_pem: Option<String>,
    /// Capability from the resource manager, or empty.
    pub capability: Vec<u8>,
    /// The device on the backend (its index; a capability names the same one).
    pub device: u32,
    /// QUIC transport settings.
    pub tuning: Tuning,
    /// Connections over which large copies are striped (1 = no striping), when the backend has
    /// no bulk lanes or `lanes` is 0.
    pub stripes: usize,
    /// Bulk lanes (TLS over TCP, see `ac_proto::lane`) over which large copies are striped; 0:
    /// QUIC streams only. With more than one, on a multi-thread runtime, a striped copy seals or
    /// opens each lane's records on a thread of its own (see the SDK's `stripes.rs`): for nodes with cores
    /// to spare. By default [`default_lanes`], by this node's cores.
    pub lanes: usize,
    /// A client endpoint to reuse for the first connection. Creating one (a socket, its
    /// buffers, a driver task) costs about as much as a handshake's crypto, so a session that
    /// connects to many accelerators shares one. Striping connections always get their own, so
    /// that each can use another core.
    pub endpoint: Option<Endpoint>,
    /// The protocol version to say hello in first (this build's `VERSION`); a backend that
    /// refuses it is greeted again one version lower each time, down to `MIN_VERSION` (a backend
    /// not yet upgraded).
    pub protocol: u16,
    /// How long a session whose connection timed out (a network outage) tries to resume it;
    /// its calls wait meanwhile, and fail with a timeout past it. Zero: the session
    /// ends with its connection. 60 s by default (`AC_RESUME_MS`), as long as the manager's lease
    /// and the backend's hold by default.
    pub resume: std::time::Duration,
}

/// How long a session tries to resume unless told otherwise (see [`ConnectOptions::resume`]).
pub const DEFAULT_RESUME: std::time::Duration = std::time::Duration::from_secs(60);

impl ConnectOptions {
    /// Options for `addr`, trusting `ca_cert`, with measured defaults.
    pub fn new(addr: SocketAddr, ca_cert: impl Into<PathBuf>) -> Self {
        Self {
            addr,
            server_name: addr.ip().to_string(),
            ca_cert: ca_cert.into(),
            ca_pem: None,
            capability: Vec::new(),
            device: 0,
            tuning: Tuning::default(),
            stripes: 2,
            lanes: env_number("AC_LANES").unwrap_or_else(default_lanes),
            endpoint: None,
            protocol: VERSION,
            resume: env_number("AC_RESUME_MS").map_or(DEFAULT_RESUME, std::time::Duration::from_millis),
        }
    }

    /// Options from `AC_BACKEND_ADDR`, `AC_CA_CERT` and optionally `AC_SERVER_NAME`,
    /// `AC_DEVICE` (the device index on the backend, default 0), `AC_STRIPES`, `AC_LANES` and the transport
    /// settings of [`crate::transport::ENV_SETTINGS`].
    pub fn from_env() -> Result<Self> {
        let var = |name: &'static str| {
            std::env::var(name).map_err(|_| ProtoError::Setting { name, message: "not set".into() })
        };
        let invalid =
            |name: &'static str| move |e: &dyn std::fmt::Display| ProtoError::Setting { name, message: e.to_string() };
        let addr = var("AC_BACKEND_ADDR")?.parse().map_err(|e| invalid("AC_BACKEND_ADDR")(&e))?;
        let mut options = Self::new(addr, var("AC_CA_CERT")?);
        options.tuning = Tuning::default().with_env()?;
        if let Ok(name) = std::env::var("AC_SERVER_NAME") {
            options.server_name = name;
        }
        if let Ok(device) = std::env::var("AC_DEVICE") {
            options.device = device.parse().map_err(|e| invalid("AC_DEVICE")(&e))?;
        }
        if let Ok(stripes) = std::env::var("AC_STRIPES") {
            options.stripes = stripes.parse().map_err(|e| invalid("AC_STRIPES")(&e))?;
        }
        if let Ok(lanes) = std::env::var("AC_LANES") {
            options.lanes = lanes.parse().map_err(|e| invalid("AC_LANES")(&e))?;
        }
        Ok(options)
    }
}

/// The number the environment variable `name` holds, when it is set to one (a program's
/// accelerators from a session read their settings so, as those of [`ConnectOptions::from_env`]).
fn env_number<T: std::str::FromStr<Err: std::fmt::Display>>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(number) => Some(number),
        Err(e) => {
            tracing::warn!(name, value, error = %e, "not a number; ignored");
            None
        }
    }
}

/// The bulk lanes a copy uses unless told otherwise: one per four cores this process may run
/// on, from one to four ([`crate::lane::lanes_here`]), and no more than the backend serves
/// a session (its welcome says how many).
pub fn default_lanes() -> usize {
    crate::lane::lanes_here()
}

/// A connection that said hello, with its first stream still open.
#[derive(Debug)]
pub struct Link {
    /// The endpoint (one per connection, so that each connection's I/O can use its own core,
    /// unless a shared one was given).
    pub endpoint: Endpoint,
    /// Whether `endpoint` was made for this link alone (then closing waits for it to be idle).
    pub owns_endpoint: bool,
    /// The connection.
    pub connection: Connection,
    /// The first stream's sending half.
    pub send: SendStream,
    /// The first stream's receiving half, positioned after the welcome.
    pub reader: FrameReader,
    /// The welcome ([`Response::Welcome`] for a session, [`Response::Devices`] for a
    /// registration).
    pub welcome: Response,
    /// The protocol version the connection speaks.
    pub version: u16,
}

/// Client TLS set-up for a backend, built once per options.
pub fn client_crypto(options: &ConnectOptions) -> Result<Arc<quinn::crypto::rustls::QuicClientConfig>> {
    let roots = match &options.ca_pem {
        Some(pem) => tls::roots_from_pem(pem.as_bytes())?,
        None => tls::load_roots(&options.ca_cert)?,
    };
    Ok(Arc::new(tls::client_crypto(roots, ALPN)?))
}

/// Connects and says `hello`; returns once the backend welcomed us.
pub async fn open(
    options: &ConnectOptions,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    hello: &Hello,
) -> Result<Link> {
    open_on(options, crypto, hello, None).await
}

/// [`open`], on `endpoint` when given (else on a new one).
pub async fn open_on(
    options: &ConnectOptions,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    hello: &Hello,
    endpoint: Option<&Endpoint>,
) -> Result<Link> {
    let owns_endpoint = endpoint.is_none();
    let endpoint = match endpoint {
        Some(shared) => shared.clone(),
        None => transport::client_endpoint(options.addr, Some(crypto.clone()), &options.tuning)?,
    };
    let mut version = options.protocol;
    loop {
        let connection = dial(options, crypto.clone(), &endpoint).await?;
        match greet(endpoint.clone(), owns_endpoint, connection, hello, version).await {
            // A backend of an older version (a rolling upgrade) closed the connection: greeted
            // again one version down.
            Err(refused) if refused.is_version_refusal() && version > MIN_VERSION => {
                version -= 1;
                tracing::info!(addr = %options.addr, reason = %refused, version, "greeting the backend in an older version");
            }
            greeted => return greeted,
        }
    }
}

/// A connection that has run its QUIC handshake with a backend and said nothing yet, with the
/// TLS set-up it was made with (for the session's further connections).
pub struct Dialed {
    /// The connection.
    pub connection: Connection,
    /// Its TLS set-up.
    pub crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
}

impl std::fmt::Debug for Dialed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialed").field("connection", &self.connection).finish_non_exhaustive()
    }
}

/// Runs the QUIC handshake with the backend of `options` on `endpoint`: a connection that has
/// said nothing yet (see [`greet`]).
pub async fn dial(
    options: &ConnectOptions,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    endpoint: &Endpoint,
) -> Result<Connection> {
    let mut client = quinn::ClientConfig::new(crypto);
    client.transport_config(Arc::new(options.tuning.transport_config()));
    Ok(endpoint.connect_with(client, options.addr, &options.server_name)?.await?)
}

/// The opening of a connection: the preamble of protocol `version`, then `hello`.
pub fn opening(hello: &Hello, version: u16) -> Result<Vec<u8>> {
    let mut opening = Preamble { version }.to_bytes().to_vec();
    opening.extend_from_slice(&frame_bytes(hello)?);
    Ok(opening)
}

/// Reads the reply to a hello said in protocol `version`, in this version's form.
pub async fn read_welcome<S: crate::frame::Source + Send>(reader: &mut FrameReader<S>, version: u16) -> Result<Reply> {
    if version != v4::VERSION {
        return reader.expect_frame().await;
    }
    // Protocol 4 leaves the session's lanes to the client: its own count.
    let bytes = reader.expect_frame_body().await?;
    match crate::codec::decode::<v4::WelcomeReply>(&bytes) {
        Ok(welcome) => Ok(Reply { id: 0, response: welcome.into_current(default_lanes() as u16) }),
        Err(_) => crate::codec::decode(&bytes),
    }
}

/// Says `hello` on a dialed connection in protocol `version`; returns once the backend
/// welcomed us.
pub async fn greet(
    endpoint: Endpoint,
    owns_endpoint: bool,
    connection: Connection,
    hello: &Hello,
    version: u16,
) -> Result<Link> {
    let (mut send, recv) = connection.open_bi().await?;
    send.write_all(&opening(hello, version)?).await.map_err(|e| map_write(e, &connection))?;
    let mut reader = FrameReader::new(recv);
    let reply = match read_welcome(&mut reader, version).await {
        Ok(reply) => reply,
        // A refused hello closes the connection: report the backend's reason.
        Err(e) => return Err(connection.close_reason().map(ProtoError::Connection).unwrap_or(e)),
    };
    match reply.response {
        // `Ok`: a session ended by another process (`Hello::End`).
        welcome @ (Response::Welcome { .. } | Response::Devices(_) | Response::Resumed { .. } | Response::Ok) => {
            Ok(Link { endpoint, owns_endpoint, connection, send, reader, welcome, version })
        }
        Response::Error(e) => Err(ProtoError::Refused(e)),
        other => Err(ProtoError::Malformed(format!("expected a welcome, got {other:?}"))),
    }
}

/// A write failure, explained by the connection's close reason when there is one.
pub fn map_write(e: quinn::WriteError, connection: &Connection) -> ProtoError {
    connection.close_reason().map(ProtoError::Connection).unwrap_or_else(|| ProtoError::from(e))
}
