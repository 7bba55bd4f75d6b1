//! The client's bulk lanes: TLS over TCP to the backend for the bytes of large copies (see
//! `ac_proto::lane` for the why and the format).
//!
//! Lanes are dialed at an accelerator's first large copy, not when it connects: `AC_Init` pays
//! no extra handshakes, and a program that only launches kernels never opens one. A lane carries
//! one copy at a time; a copy takes its lane out of its slot for the duration, so a copy given up
//! halfway (its future dropped) leaves the slot empty and the half-used lane is closed, never
//! reused. The next copy dials a new one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ac_proto::backend::{BulkHeader, ErrorKind, Hello, Reply, Response};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::lane::tokio_rustls::rustls::pki_types::ServerName;
use ac_proto::lane::tokio_rustls::TlsConnector;
use ac_proto::lane::{self, LaneStream, LaneTls};
use ac_proto::{tls, ProtoError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::link::ConnectOptions;
use crate::{Error, Result};

/// How long dialing a lane (TCP, TLS, hello) may take before copies go over QUIC instead.
const DIAL_LIMIT: Duration = Duration::from_secs(3);

/// One open lane.
type Lane = FrameReader<LaneStream<LaneTls>>;

/// The slot of the lane a stripe runs on: claimed before the copy started, or waited for by it.
pub(crate) enum Slot<'a> {
    /// Held already ([`Lanes::claim`]).
    Claimed(tokio::sync::MutexGuard<'a, Option<Lane>>),
    /// Slot `index`, locked when the stripe starts.
    Index(usize),
}

/// What a lane failure was: the copy's outcome is unknown and the lane is closed.
#[derive(Debug)]
pub(crate) struct Broken(pub(crate) ProtoError);

/// An accelerator's lanes and how to dial more.
pub(crate) struct Lanes {
    addr: SocketAddr,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    /// The preamble and the attach hello, sent first on every lane.
    opening: Vec<u8>,
    /// The protocol version of the session, in which lanes say hello.
    version: u16,
    slots: Vec<tokio::sync::Mutex<Option<Lane>>>,
    /// Set when a dial failed: copies use QUIC streams from then on.
    unreachable: AtomicBool,
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes").field("addr", &self.addr).field("slots", &self.slots.len()).finish_non_exhaustive()
    }
}

impl Lanes {
    /// `count` lanes to port `port` of the backend of `options`, for the session `attach`
    /// joins; `None` when there are to be none (`count` 0 or no port).
    /// `version`: the protocol version the session speaks.
    pub(crate) fn new(
        options: &ConnectOptions,
        port: u16,
        count: usize,
        attach: &Hello,
        version: u16,
    ) -> Result<Option<Self>> {
        if port == 0 || count == 0 {
            return Ok(None);
        }
        let roots = match &options.ca_pem {
            Some(pem) => tls::roots_from_pem(pem.as_bytes())?,
            None => tls::load_roots(&options.ca_cert)?,
        };
        let server_name = ServerName::try_from(options.server_name.clone())
            .map_err(|e| Error::Setup(format!("server name {:?}: {e}", options.server_name)))?;
        let opening = crate::link::opening(attach, version)?;
        Ok(Some(Self {
            addr: SocketAddr::new(options.addr.ip(), port),
            server_name,
            connector: lane::client_config(roots)?,
            opening,
            version,
            slots: (0..count).map(|_| tokio::sync::Mutex::new(None)).collect(),
            unreachable: AtomicBool::new(false),
        }))
    }

    /// How many lanes a copy may stripe over: none once one could not be dialed.
    pub(crate) fn usable(&self) -> usize {
        if self.unreachable.load(Ordering::Relaxed) {
            0
        } else {
            self.slots.len()
        }
    }

    /// Starts the lanes afresh after the session resumed from an outage. Every lane is dropped:
    /// the backend ended the session's lanes when it resumed it (bytes a lost lane's kernel
    /// sends again after the outage must not land after the copies run since), so the next
    /// copies dial new ones. And a dial that failed during the outage (the network was down,
    /// not the lane port shut) must not leave every later copy on QUIC streams.
    ///
    /// The copies that held lanes were on the lost connection: they end at once, and with them
    /// their hold on the slots (a dial in progress, at most its `DIAL_LIMIT`).
    pub(crate) async fn renew(&self) {
        for slot in &self.slots {
            *slot.lock().await = None;
        }
        self.unreachable.store(false, Ordering::Relaxed);
    }

    /// Dials the lanes whose slots are empty and not in use; whether copies can use lanes (a
    /// failed dial says they cannot: copies then use QUIC streams).
    pub(crate) async fn ready(&self) -> bool {
        let dials = self.slots.iter().filter_map(|slot| {
            let mut slot = slot.try_lock().ok()?;
            slot.is_none().then_some(async move {
                if let Ok(lane) = self.dial().await {
                    *slot = Some(lane);
                }
            })
        });
        futures_util::future::join_all(dials).await;
        self.usable() > 0
    }

    /// Whether an idle lane was closed by the peer, with no copy on it. A live backend closes
    /// lanes only when the session ends, after its QUIC connections, or when it shuts down; a
    /// killed one's kernel closes them at once. So the port watch asks the lane port itself (a
    /// refused TCP connect: the process is gone; an accept: it may have come back as a new one)
    /// before it believes it. Such lanes are dropped.
    pub(crate) fn closed_by_peer(&self) -> bool {
        let mut closed = false;
        for slot in &self.slots {
            let Ok(mut slot) = slot.try_lock() else { continue };
            let Some(lane) = slot.as_mut() else { continue };
            let tcp = lane.stream_mut().0.tcp();
            match tcp.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                // End of stream, a reset, or bytes nobody asked for: the lane is done either way.
                Ok(0) | Err(_) => closed = true,
                Ok(_) => {}
            }
            *slot = None;
        }
        closed
    }

    /// Whether the backend's host refuses a connection to the lane port: no process listens on
    /// it. A lane that broke under a copy asks this, since the port watch may take a probe
    /// interval or more to learn it (a copy keeps the connections busy, and the host's ICMP
    /// answers are rate-limited).
    pub(crate) async fn port_refuses(&self) -> bool {
        let dialed = tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(self.addr)).await;
        matches!(dialed, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    }

    /// The first `count` slots, if no copy holds any of them now: a copy that holds all its
    /// slots before it starts waits for nothing else of this program's (see `stripes.rs`).
    pub(crate) fn claim(&self, count: usize) -> Option<Vec<Slot<'_>>> {
        let slots = self.slots.get(..count)?;
        slots.iter().map(|slot| slot.try_lock().ok().map(Slot::Claimed)).collect()
    }

    /// Runs a copy on the lane of `slot`, dialing it first when the slot is empty. `Ok(Err(_))`:
    /// the backend refused or failed the copy (or no lane could be dialed) and the lane goes on;
    /// `Err(Broken)`: the lane broke. The lane goes back to its slot only if the copy left it in
    /// step.
    pub(crate) async fn copy(
        &self,
        slot: Slot<'_>,
        header: BulkHeader,
        payload: Payload<'_>,
    ) -> std::result::Result<Result<()>, Broken> {
        let mut slot = match slot {
            Slot::Claimed(slot) => slot,
            Slot::Index(index) => self.slots[index].lock().await,
        };
        // A lane whose keys could not carry the whole copy is closed: a fresh one has fresh keys.
        let mut lane = match slot.take().filter(|lane| lane.stream().0.fits(header.len)) {
            Some(lane) => lane,
            None => match self.dial().await {
                Ok(lane) => lane,
                Err(e) => return Ok(Err(e)),
            },
        };
        let outcome = match payload {
            Payload::ToDevice(data) => write_on(&mut lane, header, data).await,
            Payload::FromDevice(out) => read_on(&mut lane, header, out).await,
        };
        if outcome.is_ok() {
            *slot = Some(lane);
        }
        outcome
    }

    /// Dials a lane: TCP, TLS (the backend's certificate verified as for QUIC), the attach
    /// hello and the backend's welcome. A failure marks the lanes unreachable.
    ///
    /// A backend that counts the session's lanes full is asked again for a while: the lanes
    /// this program gave up (a copy cut halfway) count there until the backend sees them close,
    /// which takes a moment, or as long as a copy waiting on its fence. Past `DIAL_LIMIT` the
    /// lanes are given up as for any failure, and copies use QUIC streams.
    async fn dial(&self) -> Result<Lane> {
        let dialed = tokio::time::timeout(DIAL_LIMIT, async {
            let mut pause = Duration::from_millis(5);
            loop {
                match self.dial_once().await {
                    Err(e) if e.kind() == Some(ErrorKind::InvalidArgument) => {
                        tracing::debug!(error = %e, "the session's lanes are full at the backend; dialing again");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(200));
                    }
                    dialed => return dialed,
                }
            }
        })
        .await;
        let failure = match dialed {
            Ok(Ok(lane)) => return Ok(lane),
            Ok(Err(e)) => e,
            Err(_) => Error::Timeout(format!("dialing {} took over {DIAL_LIMIT:?}", self.addr)),
        };
        if !self.unreachable.swap(true, Ordering::Relaxed) {
            tracing::warn!(addr = %self.addr, error = %failure, "no bulk lane to the backend: large copies use QUIC streams");
        }
        Err(failure)
    }

    async fn dial_once(&self) -> Result<Lane> {
        let socket = TcpStream::connect(self.addr)
            .await
            .map_err(|e| Error::Setup(format!("cannot reach the bulk lane port {}: {e}", self.addr)))?;
        lane::tune(&socket)?;
        let mut stream = lane::connect(socket, &self.connector, self.server_name.clone())
            .await
            .map_err(|e| Error::Setup(format!("bulk lane to {}: TLS: {e}", self.addr)))?;
        stream.write_all(&self.opening).await.map_err(ProtoError::from)?;
        stream.flush().await.map_err(ProtoError::from)?;
        let mut lane = FrameReader::new(LaneStream(stream));
        let reply = crate::link::read_welcome(&mut lane, self.version).await?;
        match reply.response {
            Response::Welcome { .. } => Ok(lane),
            Response::Error(e) => Err(e.into()),
            other => Err(Error::Protocol(format!("expected a lane welcome, got {other:?}"))),
        }
    }
}

/// A copy's bytes.
#[derive(Debug)]
pub(crate) enum Payload<'a> {
    /// Host to device: the bytes to send.
    ToDevice(&'a [u8]),
    /// Device to host: where the bytes go.
    FromDevice(&'a mut [u8]),
}

/// The lane's raw stream, to write to.
fn stream(lane: &mut Lane) -> &mut LaneTls {
    &mut lane.stream_mut().0
}

async fn write_on(lane: &mut Lane, header: BulkHeader, data: &[u8]) -> std::result::Result<Result<()>, Broken> {
    let sent = async {
        let stream = stream(lane);
        stream.write_all(&frame_bytes(&header)?).await?;
        stream.write_all(data).await?;
        stream.flush().await?;
        Ok::<_, ProtoError>(())
    };
    sent.await.map_err(Broken)?;
    let reply: Reply = lane.expect_frame().await.map_err(Broken)?;
    Ok(match reply.response {
        Response::Ok => Ok(()),
        Response::Error(e) => Err(e.into()),
        other => return Err(Broken(ProtoError::Malformed(format!("unexpected bulk reply {other:?}")))),
    })
}

async fn read_on(lane: &mut Lane, header: BulkHeader, out: &mut [u8]) -> std::result::Result<Result<()>, Broken> {
    let sent = async {
        let stream = stream(lane);
        stream.write_all(&frame_bytes(&header)?).await?;
        stream.flush().await?;
        Ok::<_, ProtoError>(())
    };
    sent.await.map_err(Broken)?;
    let reply: Reply = lane.expect_frame().await.map_err(Broken)?;
    match reply.response {
        Response::Data { len } if len == out.len() as u64 => {
            lane.read_payload_into(out).await.map_err(Broken)?;
            Ok(Ok(()))
        }
        Response::Error(e) => Ok(Err(e.into())),
        other => Err(Broken(ProtoError::Malformed(format!("unexpected bulk reply {other:?}")))),
    }
}
