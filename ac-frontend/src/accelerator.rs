//! A connected accelerator: the control channel, replies, and the bulk copy path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{
    BulkHeader, DeviceInfo, DevicePtr, Direction, Envelope, ErrorKind, Hello, Reply, Request, Response, SessionId,
};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::pieces;
use bytes::Bytes;
use futures_util::future::try_join_all;
use quinn::{Connection, Endpoint};
use tokio::sync::watch;

use crate::lane::{Broken, Lanes, Payload, Slot};
use crate::link::{self, map_write, ConnectOptions, Link};
pub(crate) use crate::replies::Answer;
use crate::replies::Replies;
use crate::resume::{Credentials, Phase, Resumed, Resumes};
use crate::send_control::ControlStream;
use crate::stripes::{self, CopyOptions};
use crate::task::Owned;
use crate::watch::{PortWatch, Waiting};
use crate::{Error, Result};

/// State shared by every handle to one accelerator.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The session's connections now: replaced when it resumes after an outage.
    wire: Mutex<Arc<Wire>>,
    _endpoints: Vec<Endpoint>,
    control_stream: Arc<ControlStream>,
    replies: Replies,
    next_id: AtomicU64,
    info: DeviceInfo,
    session: SessionId,
    copy: Mutex<CopyOptions>,
    /// Bulk lanes (TLS over TCP) for large copies, when the backend serves them.
    lanes: Option<Arc<Lanes>>,
    /// The calls that wait on the backend now (the port watch baits a restarted one for them).
    waiting: Waiting,
    /// The protocol version the backend answered in.
    pub(crate) version: u16,
    /// How to reach the session again after an outage.
    credentials: Credentials,
    /// Where the session stands (see [`crate::resume`]).
    phase: Arc<watch::Sender<Phase>>,
    /// Resumes the session when its connection times out.
    _lifeline: Owned<()>,
}

/// The connections of one accelerator's session, from one connection of its control stream
/// (an epoch) to the next.
#[derive(Debug)]
struct Wire {
    control: Connection,
    /// Connections for bulk copies: the control connection first, then attached ones.
    data: Vec<Connection>,
    epoch: u64,
    /// Closes the connections when the backend's host says its process is gone.
    _watch: Option<crate::watch::PortWatch>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for conn in &self.wire.lock().expect("wire poisoned").data {
            conn.close(0u32.into(), b"client finished");
        }
    }
}

impl Resumes for Inner {
    fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    fn version(&self) -> u16 {
        self.version
    }

    fn replies_read(&self) -> u64 {
        self.replies.read()
    }

    async fn resumed(&self, resumed: Resumed, epoch: u64) -> Result<()> {
        let Resumed { link, handled } = resumed;
        let control = link.connection.clone();
        if let Err(reason) = self.control_stream.resume(link.send, handled).await {
            control.close(0u32.into(), b"cannot resume exactly once");
            return Err(Error::Disconnected(format!("the session cannot be resumed exactly once: {reason}")));
        }
        self.replies.resume(link.reader, epoch).await;
        if let Some(lanes) = &self.lanes {
            lanes.renew().await;
        }
        let Credentials { options, crypto, session, token, .. } = &self.credentials;
        let stripes = if self.lanes.is_some() { 1 } else { options.stripes.max(1) };
        let attach = Hello::Attach { session: *session, token: *token };
        let extra = try_join_all((1..stripes).map(|_| link::open(options, crypto.clone(), &attach))).await?;
        let data: Vec<Connection> =
            std::iter::once(control.clone()).chain(extra.into_iter().map(|link| link.connection)).collect();
        let watch = PortWatch::start(control.remote_address(), data.clone(), self.lanes.clone(), self.waiting.clone());
        *self.wire.lock().expect("wire poisoned") = Arc::new(Wire { control, data, epoch, _watch: watch });
        Ok(())
    }
}

/// A handle to one remote accelerator. Cloning is cheap and shares the connection.
#[derive(Debug, Clone)]
pub struct Accelerator {
    pub(crate) inner: Arc<Inner>,
}

impl Accelerator {
    /// Connects to a backend, opens a session and attaches the striping connections.
    pub async fn connect(options: &ConnectOptions) -> Result<Self> {
        Self::connect_via(options, None).await
    }

    /// [`connect`](Self::connect), opening the session on `dialed` when given: a connection to
    /// the same backend that has run its handshake on `options.endpoint` and said nothing yet.
    pub(crate) async fn connect_via(options: &ConnectOptions, dialed: Option<link::Dialed>) -> Result<Self> {
        let hello = Hello::Open { capability: options.capability.clone(), device: options.device };
        let (crypto, link) = match (dialed, &options.endpoint) {
            (Some(dialed), Some(shared)) => {
                let greeted = link::greet(shared.clone(), false, dialed.connection, &hello, options.protocol).await;
                match greeted {
                    // A backend of the version before: dialed again, and greeted in its version.
                    Err(refused) if refused.is_version_refusal() => {
                        (dialed.crypto.clone(), link::open_on(options, dialed.crypto, &hello, Some(shared)).await?)
                    }
                    greeted => (dialed.crypto, greeted?),
                }
            }
            _ => {
                let crypto = link::client_crypto(options)?;
                (crypto.clone(), link::open_on(options, crypto, &hello, options.endpoint.as_ref()).await?)
            }
        };
        let Response::Welcome { session, token, info, lane_port, lanes } = link.welcome.clone() else {
            return Err(Error::Protocol(format!("expected a session welcome, got {:?}", link.welcome)));
        };
        let attach = Hello::Attach { session, token };
        // The session's connections all speak the version its backend answered in.
        let version = link.version;
        let options = &ConnectOptions { protocol: version, ..options.clone() };
        // No more lanes than the backend serves a session: it refuses the rest.
        let lanes = Lanes::new(options, lane_port, options.lanes.min(lanes as usize), &attach, version)?;
        // With lanes, the QUIC connections carry control and small copies only: one is enough.
        let stripes = if lanes.is_some() { 1 } else { options.stripes.max(1) };
        let extra = try_join_all((1..stripes).map(|_| link::open(options, crypto.clone(), &attach))).await?;
        let credentials =
            Credentials { options: options.clone(), crypto, endpoint: link.endpoint.clone(), session, token };
        Ok(Self::from_links(link, extra, credentials, info, lanes))
    }

    fn from_links(
        control: Link,
        extra: Vec<Link>,
        credentials: Credentials,
        info: DeviceInfo,
        lanes: Option<Lanes>,
    ) -> Self {
        let mut data = vec![control.connection.clone()];
        // Only endpoints made for this accelerator are waited for on close: a shared one stays
        // busy with the session's other accelerators.
        let mut endpoints: Vec<Endpoint> = control.owns_endpoint.then_some(control.endpoint).into_iter().collect();
        for link in extra {
            data.push(link.connection);
            endpoints.extend(link.owns_endpoint.then_some(link.endpoint));
        }
        let lanes = lanes.map(Arc::new);
        let waiting = Waiting::default();
        let watch = PortWatch::start(control.connection.remote_address(), data.clone(), lanes.clone(), waiting.clone());
        let phase = Arc::new(watch::Sender::new(Phase::Up(0)));
        let conn = control.connection.clone();
        let inner = Arc::new_cyclic(|owner| Inner {
            wire: Mutex::new(Arc::new(Wire { control: control.connection, data, epoch: 0, _watch: watch })),
            _endpoints: endpoints,
            control_stream: Arc::new(ControlStream::new(control.send)),
            replies: Replies::new(control.reader, phase.subscribe()),
            next_id: AtomicU64::new(1),
            info,
            session: credentials.session,
            copy: Mutex::new(CopyOptions::default()),
            lanes,
            waiting,
            version: control.version,
            credentials,
            _lifeline: Owned::spawn(crate::resume::lifeline(owner.clone(), conn, 0, phase.clone())),
            phase,
        });
        Self { inner }
    }

    /// The session's connections now.
    fn wire(&self) -> Arc<Wire> {
        self.inner.wire.lock().expect("wire poisoned").clone()
    }

    /// The device as the backend described it when the session opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The backend protocol the session speaks: what the backend serves of newer calls.
    pub fn protocol(&self) -> u16 {
        self.inner.version
    }

    /// The bulk lanes large copies stripe over (TLS over TCP), 0 when they use QUIC streams
    /// (no lane port, `lanes` 0, or a lane that could not be dialed): how a program tells a
    /// fast path from its fallback.
    pub fn bulk_lanes(&self) -> usize {
        self.inner.lanes.as_deref().map_or(0, Lanes::usable)
    }

    /// The backend session.
    pub fn session(&self) -> SessionId {
        self.inner.session
    }

    /// Current device description, with up-to-date free memory.
    pub async fn device_info(&self) -> Result<DeviceInfo> {
        match self.call(Request::DeviceInfo, Bytes::new()).await? {
            Answer::Response(Response::Info(info)) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// A round trip with no device work.
    pub async fn ping(&self) -> Result<()> {
        self.call_ok(Request::Ping).await
    }

    /// Changes how copies travel.
    pub fn set_copy_options(&self, options: CopyOptions) {
        *self.inner.copy.lock().expect("copy options poisoned") = options;
    }

    /// How copies travel.
    pub fn copy_options(&self) -> CopyOptions {
        self.inner.copy.lock().expect("copy options poisoned").clone()
    }

    /// Waits until every stream has finished; returns the first error of asynchronous work
    /// (launches, memsets, asynchronous copies) since the last synchronize.
    pub async fn synchronize(&self) -> Result<()> {
        self.call_ok(Request::Synchronize { stream: None }).await
    }

    /// Closes the session, waiting briefly so the backend learns at once.
    pub async fn close(self) {
        // Calls still queued (launches, frees from `Drop`) leave before the connection closes.
        let _ = self.inner.control_stream.position().await;
        let conns = self.wire().data.clone();
        let endpoints = self.inner._endpoints.clone();
        drop(self);
        for conn in &conns {
            conn.close(0u32.into(), b"client finished");
        }
        // Long enough for the close to leave; no need to sit out the whole draining period.
        for endpoint in endpoints {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(100), endpoint.wait_idle()).await;
        }
    }

    /// Why the session is over: the reason its lifeline gave, else its connection's.
    fn disconnected(&self) -> Error {
        if let Phase::Ended(e) = &*self.inner.phase.borrow() {
            return e.clone();
        }
        self.wire()
            .control
            .close_reason()
            .map(Error::from)
            .unwrap_or_else(|| Error::Disconnected("the session's reply stream ended".into()))
    }

    /// Whether the session went on past the connection of `epoch`, which is lost: waits for
    /// its lifeline to resume it or give up.
    async fn outlived(&self, epoch: u64) -> bool {
        crate::resume::resumed_since(self.inner.phase.subscribe(), epoch).await
    }

    /// After a copy on the connections of `wire` failed with `e`: `Ok` when it may run again
    /// (they were lost, and the session resumed on new ones); else the error to report: the
    /// session's end when it has ended (whatever the copy saw of it), else `e`.
    async fn run_again(&self, wire: &Wire, e: Error) -> Result<()> {
        if wire.control.close_reason().is_some() && self.outlived(wire.epoch).await {
            return Ok(());
        }
        match &*self.inner.phase.borrow() {
            Phase::Ended(ended) => Err(ended.clone()),
            _ => Err(e),
        }
    }

    /// Sends a request and waits for its answer; a remote error becomes `Err`. Through an
    /// outage it waits for the session to resume (the envelope is sent again if the backend
    /// lacks it, the reply if this side does).
    pub(crate) async fn call(&self, request: Request, payload: Bytes) -> Result<Answer> {
        let _waiting = self.inner.waiting.enter();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = self.inner.replies.register(id);
        let epoch = self.wire().epoch;
        let position = match self.inner.control_stream.send(&Envelope { id, request }, payload).await {
            Ok((position, Ok(()))) => position,
            Ok((position, Err(_))) if self.outlived(epoch).await => position,
            Ok((_, Err(e))) | Err(e) => {
                self.inner.replies.forget(id);
                return Err(self.send_failed(e));
            }
        };
        let answer = self.inner.replies.wait(id, rx).await.ok_or_else(|| self.disconnected())?;
        self.inner.control_stream.handled_through(position);
        match answer {
            Answer::Response(Response::Error(e)) => Err(e.into()),
            answer => Ok(answer),
        }
    }

    /// Sends a request whose answer must be `Ok`.
    pub(crate) async fn call_ok(&self, request: Request) -> Result<()> {
        match self.call(request, Bytes::new()).await? {
            Answer::Response(Response::Ok) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Sends an asynchronous request: no round trip, errors surface at the next synchronizing
    /// call.
    /// A write lost with its connection is no error while the session may resume: the
    /// envelope is logged and sent again.
    pub(crate) async fn post(&self, request: Request, payload: Bytes) -> Result<()> {
        match self.inner.control_stream.post(&Envelope { id: 0, request }, payload).await {
            Ok(()) => Ok(()),
            Err(e @ (ac_proto::ProtoError::Encode(_) | ac_proto::ProtoError::FrameTooLarge { .. })) => Err(e.into()),
            Err(e) => match &*self.inner.phase.borrow() {
                Phase::Ended(ended) => Err(ended.clone()),
                _ if self.inner.credentials.options.resume.is_zero() || self.inner.version < 8 => {
                    Err(self.send_failed(e))
                }
                _ => Ok(()),
            },
        }
    }

    /// A request that could not be encoded is the caller's error; any other failure to write
    /// means the connection is gone.
    fn send_failed(&self, e: ac_proto::ProtoError) -> Error {
        match e {
            ac_proto::ProtoError::Encode(_) | ac_proto::ProtoError::FrameTooLarge { .. } => e.into(),
            _ => self.disconnected(),
        }
    }

    /// Sends an asynchronous request without waiting (from `Drop`): it goes ahead of every call
    /// made after this one returns.
    pub(crate) fn post_from_drop(&self, request: Request) {
        self.inner.control_stream.defer(&Envelope { id: 0, request });
    }

    /// The position a synchronous bulk copy starting now follows (see `send_control.rs`), once
    /// every envelope before it is written (on a resumed connection, if the one of `epoch` is
    /// lost meanwhile).
    async fn copy_position(&self, epoch: u64) -> Result<u64> {
        match self.inner.control_stream.position().await {
            (position, Ok(())) => Ok(position),
            (position, Err(_)) if self.outlived(epoch).await => Ok(position),
            (_, Err(_)) => Err(self.disconnected()),
        }
    }

    /// Copies host bytes to device memory and waits until they are there. The backend starts
    /// the copy after all work sent before it (see "Order" in `ac_proto::backend`). A bulk copy
    /// cut by an outage runs again, whole, once the session has resumed.
    pub(crate) async fn write_bytes(&self, dst: DevicePtr, data: &[u8]) -> Result<()> {
        let _waiting = self.inner.waiting.enter();
        let options = self.copy_options();
        if data.len() <= options.inline_max {
            let request = Request::MemWriteSync { dst, len: data.len() as u64 };
            return match self.call(request, Bytes::copy_from_slice(data)).await? {
                Answer::Response(Response::Ok) => Ok(()),
                other => Err(unexpected(other)),
            };
        }
        loop {
            let wire = self.wire();
            match self.write_bulk(&wire, dst, data, &options).await {
                Ok(()) => return Ok(()),
                Err(e) => self.run_again(&wire, e).await?,
            }
        }
    }

    /// One try of a bulk host-to-device copy, on the connections (or lanes) of `wire`.
    async fn write_bulk(&self, wire: &Wire, dst: DevicePtr, data: &[u8], options: &CopyOptions) -> Result<()> {
        let after = self.copy_position(wire.epoch).await?;
        if let Some(lanes) = self.lanes().await {
            let stripes = stripes::split(lanes.usable(), Direction::HostToDevice, dst, data.len(), options, after);
            let (slots, claimed) = stripes::slots(lanes, stripes.len());
            let copies = stripes.into_iter().zip(slots).map(|((range, header), slot)| {
                self.lane_copy(wire, lanes, slot, header, Payload::ToDevice(&data[range]))
            });
            return stripes::run(copies.collect(), claimed).await;
        }
        let stripes = stripes::split(wire.data.len(), Direction::HostToDevice, dst, data.len(), options, after);
        let copies =
            stripes.into_iter().enumerate().map(|(i, (range, header))| bulk_write(&wire.data[i], header, &data[range]));
        try_join_all(copies).await?;
        Ok(())
    }

    /// The lanes, when copies can use them (dialed at the first copy that asks).
    async fn lanes(&self) -> Option<&Lanes> {
        let lanes = self.inner.lanes.as_deref().filter(|lanes| lanes.usable() > 0)?;
        lanes.ready().await.then_some(lanes)
    }

    /// One stripe of a copy on lane `index`. A lane that breaks is explained by the session's
    /// end when that is the cause (the backend closes the QUIC connection, with its reason,
    /// before the lanes).
    ///
    /// A partition stalls a lane's TCP for minutes of retransmissions, where the session's QUIC
    /// connection gives up within its idle timeout: the copy ends with that connection, its lane
    /// dropped (closed, never reused), and runs again if the session resumes.
    async fn lane_copy(
        &self,
        wire: &Wire,
        lanes: &Lanes,
        slot: Slot<'_>,
        header: BulkHeader,
        payload: Payload<'_>,
    ) -> Result<()> {
        let copied = tokio::select! {
            biased;
            copied = lanes.copy(slot, header, payload) => copied,
            reason = wire.control.closed() => return Err(reason.into()),
        };
        match copied {
            Ok(outcome) => outcome,
            Err(Broken(e)) => Err(match session_end(wire, lanes).await {
                Some(reason) => reason,
                None => Error::Remote {
                    kind: ErrorKind::Device,
                    message: format!("copy failed: the bulk lane to the backend broke: {e}"),
                },
            }),
        }
    }

    /// Copies device memory into host bytes, after all work sent before it. A bulk copy cut
    /// by an outage runs again, whole, once the session has resumed.
    pub(crate) async fn read_bytes(&self, src: DevicePtr, out: &mut [u8]) -> Result<()> {
        let _waiting = self.inner.waiting.enter();
        let options = self.copy_options();
        if out.len() <= options.inline_max {
            let request = Request::MemReadSync { src, len: out.len() as u64 };
            return match self.call(request, Bytes::new()).await? {
                Answer::Data(bytes) if bytes.len() == out.len() => {
                    out.copy_from_slice(&bytes);
                    Ok(())
                }
                other => Err(unexpected(other)),
            };
        }
        loop {
            let wire = self.wire();
            match self.read_bulk(&wire, src, out, &options).await {
                Ok(()) => return Ok(()),
                Err(e) => self.run_again(&wire, e).await?,
            }
        }
    }

    /// One try of a bulk device-to-host copy, on the connections (or lanes) of `wire`.
    async fn read_bulk(&self, wire: &Wire, src: DevicePtr, out: &mut [u8], options: &CopyOptions) -> Result<()> {
        let after = self.copy_position(wire.epoch).await?;
        let Some(lanes) = self.lanes().await else {
            let stripes = stripes::split(wire.data.len(), Direction::DeviceToHost, src, out.len(), options, after);
            let copies =
                each_part(out, stripes).enumerate().map(|(i, (head, header))| bulk_read(&wire.data[i], header, head));
            return try_join_all(copies).await.map(drop);
        };
        let stripes = stripes::split(lanes.usable(), Direction::DeviceToHost, src, out.len(), options, after);
        let (slots, claimed) = stripes::slots(lanes, stripes.len());
        let copies = each_part(out, stripes)
            .zip(slots)
            .map(|((head, header), slot)| self.lane_copy(wire, lanes, slot, header, Payload::FromDevice(head)));
        stripes::run(copies.collect(), claimed).await
    }
}

/// `out` cut into the parts that `stripes` cover, each with its stripe's header.
fn each_part(
    mut out: &mut [u8],
    stripes: Vec<(std::ops::Range<usize>, BulkHeader)>,
) -> impl Iterator<Item = (&mut [u8], BulkHeader)> {
    stripes.into_iter().map(move |(range, header)| {
        let (head, tail) = std::mem::take(&mut out).split_at_mut(range.len());
        out = tail;
        (head, header)
    })
}

/// The session's end that explains a lane broken under a copy, if it ended; `None` when the
/// backend lives (the lane itself failed).
async fn session_end(wire: &Wire, lanes: &Lanes) -> Option<Error> {
    // The session's own reason first (an orderly shutdown closes QUIC before lanes).
    if let Some(reason) = close_reason_within(&wire.control, LANE_REASON_WAIT).await {
        return Some(reason);
    }
    // A killed backend's kernel cuts the lane at once; the port watch may learn it a probe
    // interval or more later, while the copy keeps the connections busy (a third of the copies
    // cut by a kill once said only "the lane broke"). Ask now.
    if lanes.port_refuses().await {
        crate::watch::close_gone(&wire.data);
        return Some(wire.control.closed().await.into());
    }
    // The port accepts: the backend lives, or came back as a new process. A new one answers the
    // old connection's next packet with a stateless reset, but an idle connection sends nothing
    // until its keep-alive (seconds); so which error the program saw depended on timing. A
    // datagram makes it send now: a live backend never reads datagrams. Several, since an
    // endpoint sends at most one reset per 20 ms (quinn's `min_reset_interval`).
    for _ in 0..RESET_PROBES {
        crate::watch::provoke_reset(&wire.control);
        if let Some(reason) = close_reason_within(&wire.control, RESET_PROBE_WAIT).await {
            return Some(reason);
        }
    }
    None
}

/// The connection's close reason, if it closes within `limit`.
async fn close_reason_within(conn: &Connection, limit: std::time::Duration) -> Option<Error> {
    tokio::time::timeout(limit, conn.closed()).await.ok().map(Error::from)
}

/// How long a broken lane waits for the session's close reason, which explains it better.
const LANE_REASON_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Datagrams a broken lane sends to provoke a restarted backend's stateless reset.
const RESET_PROBES: usize = 4;

/// How long a broken lane waits for that reset after each datagram.
const RESET_PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

pub(crate) fn unexpected(answer: Answer) -> Error {
    Error::Protocol(format!("unexpected answer {answer:?}"))
}

fn copy_failed(e: impl std::fmt::Display, conn: &Connection) -> Error {
    conn.close_reason()
        .map(Error::from)
        .unwrap_or_else(|| Error::Remote { kind: ErrorKind::Device, message: format!("copy failed: {e}") })
}

/// Writes `data` to `send` in recycled pieces (see [`ac_proto::pieces`]): the copy overlaps the
/// sending, and no piece is a fresh allocation.
async fn write_pieces(send: &mut quinn::SendStream, data: &[u8]) -> std::result::Result<(), quinn::WriteError> {
    for piece in data.chunks(pieces::PIECE) {
        send.write_chunk(pieces::copy_of(piece)).await?;
    }
    Ok(())
}

async fn bulk_write(conn: &Connection, header: BulkHeader, data: &[u8]) -> Result<()> {
    let (mut send, recv) = conn.open_bi().await?;
    send.write_all(&frame_bytes(&header)?).await.map_err(|e| map_write(e, conn))?;
    let written = write_pieces(&mut send, data).await;
    let _ = send.finish();
    let mut reader = FrameReader::new(recv);
    // The reply explains a refusal (the backend stops the stream, failing our write).
    let reply: Reply = match reader.expect_frame().await {
        Ok(reply) => reply,
        Err(e) => return Err(written.err().map(|w| map_write(w, conn).into()).unwrap_or_else(|| copy_failed(e, conn))),
    };
    match reply.response {
        Response::Ok => written.map_err(|e| map_write(e, conn).into()),
        Response::Error(e) => Err(e.into()),
        other => Err(Error::Protocol(format!("unexpected bulk reply {other:?}"))),
    }
}

async fn bulk_read(conn: &Connection, header: BulkHeader, out: &mut [u8]) -> Result<()> {
    let (mut send, recv) = conn.open_bi().await?;
    send.write_all(&frame_bytes(&header)?).await.map_err(|e| map_write(e, conn))?;
    let _ = send.finish();
    let mut reader = FrameReader::new(recv);
    let reply: Reply = reader.expect_frame().await.map_err(|e| copy_failed(e, conn))?;
    match reply.response {
        Response::Data { len } if len == out.len() as u64 => {
            reader.read_payload_into(out).await.map_err(|e| copy_failed(e, conn))
        }
        Response::Error(e) => Err(e.into()),
        other => Err(Error::Protocol(format!("unexpected bulk reply {other:?}"))),
    }
}
