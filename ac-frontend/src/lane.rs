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

use ac_proto::backend::{BulkHeader, Hello, Preamble, Reply, Response};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::lane::tokio_rustls::rustls::pki_types::ServerName;
use ac_proto::lane::tokio_rustls::TlsConnector;
use ac_proto::lane::{self, Batch, LaneStream, LaneTls};
use ac_proto::{tls, ProtoError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::link::ConnectOptions;
use crate::task::Owned;
use crate::{Error, Result};

/// How long dialing a lane (TCP, TLS, hello) may take before copies go over QUIC instead.
const DIAL_LIMIT: Duration = Duration::from_secs(3);

/// One open lane.
type Lane = FrameReader<LaneStream<LaneTls>>;

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
    pub(crate) fn new(options: &ConnectOptions, port: u16, count: usize, attach: &Hello) -> Result<Option<Self>> {
        if port == 0 || count == 0 {
            return Ok(None);
        }
        let roots = match &options.ca_pem {
            Some(pem) => tls::roots_from_pem(pem.as_bytes())?,
            None => tls::load_roots(&options.ca_cert)?,
        };
        let server_name = ServerName::try_from(options.server_name.clone())
            .map_err(|e| Error::Setup(format!("server name {:?}: {e}", options.server_name)))?;
        let mut opening = Preamble::CURRENT.to_bytes().to_vec();
        opening.extend_from_slice(&frame_bytes(attach)?);
        Ok(Some(Self {
            addr: SocketAddr::new(options.addr.ip(), port),
            server_name,
            connector: lane::client_config(roots)?,
            opening,
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

    /// Whether an idle lane found its backend gone: closed by the peer with no copy on it. A
    /// live backend closes lanes only when the session ends, after its QUIC connections, or
    /// when it shuts down; a killed one's kernel closes them at once. So the port watch asks
    /// the lane port itself (a refused TCP connect) before it believes it. Such lanes are
    /// dropped.
    pub(crate) async fn backend_gone(&self) -> bool {
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
        if !closed {
            return false;
        }
        let dialed = tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(self.addr)).await;
        matches!(dialed, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    }

    /// Runs a copy on lane `index`, dialing it first when its slot is empty. `Ok(Err(_))`: the
    /// backend refused or failed the copy (or no lane could be dialed) and the lane goes on;
    /// `Err(Broken)`: the lane broke. The lane goes back to its slot only if the copy left it in
    /// step.
    pub(crate) async fn copy(
        &self,
        index: usize,
        header: BulkHeader,
        payload: Payload<'_>,
    ) -> std::result::Result<Result<()>, Broken> {
        let mut slot = self.slots[index].lock().await;
        // A lane whose keys could not carry the whole copy is closed: a fresh one has fresh keys.
        let mut lane = match slot.take().filter(|lane| lane.stream().0.fits(header.len)) {
            Some(lane) => lane,
            None => match self.dial().await {
                Ok(lane) => lane,
                Err(e) => return Ok(Err(e)),
            },
        };
        let outcome = match payload {
            Payload::ToDevice(data) => write_on(&mut lane, header, data).await.map(|outcome| (outcome, lane)),
            Payload::FromDevice(out) => read_on(lane, header, out).await,
        };
        let (outcome, lane) = outcome?;
        *slot = Some(lane);
        Ok(outcome)
    }

    /// Dials a lane: TCP, TLS (the backend's certificate verified as for QUIC), the attach
    /// hello and the backend's welcome. A failure marks the lanes unreachable.
    async fn dial(&self) -> Result<Lane> {
        let dialed = tokio::time::timeout(DIAL_LIMIT, self.dial_once()).await;
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
        let reply: Reply = lane.expect_frame().await?;
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

async fn read_on(
    mut lane: Lane,
    header: BulkHeader,
    out: &mut [u8],
) -> std::result::Result<(Result<()>, Lane), Broken> {
    let sent = async {
        let stream = stream(&mut lane);
        stream.write_all(&frame_bytes(&header)?).await?;
        stream.flush().await?;
        Ok::<_, ProtoError>(())
    };
    sent.await.map_err(Broken)?;
    let reply: Reply = lane.expect_frame().await.map_err(Broken)?;
    match reply.response {
        Response::Data { len } if len == out.len() as u64 => {
            Ok((Ok(()), read_payload(lane, out).await.map_err(Broken)?))
        }
        Response::Error(e) => Ok((Err(e.into()), lane)),
        other => Err(Broken(ProtoError::Malformed(format!("unexpected bulk reply {other:?}")))),
    }
}

/// Payloads from this size on may be read by [`read_payload`]'s two tasks; smaller ones are
/// read by the caller alone, which saves the hand-overs.
const OPENER_MIN: usize = 1 << 20;

/// Whether a payload of `len` bytes is read on a task of its own ([`read_payload`]): when it is
/// large and the caller blocks a thread that is not one of a multi-threaded runtime's workers
/// (`block_on` runs no task). A caller that is a task already reads on a worker, and handing
/// batches over between two tasks cost 8% on the 2-core VM (`BENCHMARKS.md`, "Issue 25, stop
/// 35"); a current-thread runtime has no other thread to open on.
fn opener_pays(len: usize) -> bool {
    len >= OPENER_MIN
        && tokio::task::try_id().is_none()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|rt| rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Batches of opened records on their way from a lane's opener to the caller: with the one being
/// opened and the one being copied, a lane holds at most four read buffers.
const BATCHES_IN_FLIGHT: usize = 2;

/// Reads a copy's payload into `out`. When [`opener_pays`], a task of the runtime's opens the
/// lane's records, batch by batch ([`LaneTls::read_batch`]), while the caller copies their
/// plaintext into place.
///
/// Why: the blocking API, the C ABI and `#[tokio::main]` block a thread of their own on the
/// copy, not a worker of the runtime. Every time the socket had bytes, a worker woke from the
/// I/O driver only to wake that thread, and that one thread opened every record of every lane.
/// Reading on a worker keeps the socket's wake-ups on the thread that reads it, and opens the
/// lanes' records on as many cores as there are lanes (`BENCHMARKS.md`, "Issue 25, stop 35").
/// The batches are the buffers the records were read into, handed over and back: no copy is
/// added.
///
/// Dropping the read (a copy given up) aborts the opener and with it the lane.
async fn read_payload(mut lane: Lane, out: &mut [u8]) -> std::result::Result<Lane, ProtoError> {
    if !opener_pays(out.len()) {
        lane.read_payload_into(out).await?;
        return Ok(lane);
    }
    let mut at = 0;
    while let Some(bytes) = lane.take_buffered(out.len() - at) {
        out[at..at + bytes.len()].copy_from_slice(&bytes);
        at += bytes.len();
    }
    let (batches, mut opened) = tokio::sync::mpsc::channel::<Batch>(BATCHES_IN_FLIGHT);
    let (spares, mut returned) = tokio::sync::mpsc::unbounded_channel::<Box<[u8]>>();
    let mut left = (out.len() - at) as u64;
    let opener = Owned::spawn(async move {
        while left > 0 {
            let spare = returned.try_recv().unwrap_or_default();
            let batch = stream(&mut lane).read_batch(left, spare).await?;
            left -= batch.len() as u64;
            if batches.send(batch).await.is_err() {
                // The caller is gone: the copy was given up, and the lane goes with it.
                return Err(ProtoError::UnexpectedEnd);
            }
        }
        Ok(lane)
    });
    while let Some(batch) = opened.recv().await {
        for piece in batch.pieces() {
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        // The opener may have finished and dropped its end: the buffer then goes too.
        let _ = spares.send(batch.into_buffer());
    }
    let lane =
        opener.join().await.map_err(|e| ProtoError::Io(std::io::Error::other(format!("lane opener: {e}"))))??;
    debug_assert_eq!(at, out.len(), "the opener reads the whole payload");
    Ok(lane)
}
