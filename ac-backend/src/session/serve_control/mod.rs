//! The control stream of a session: requests in order, replies and deferred errors.

use std::sync::Arc;

use ac_proto::backend::{
    close, BufferId, ContextLimit, Direction, Envelope, ErrorKind, FunctionId, ModuleId, Reply, Request, Response,
    StreamId, TextureResource, WireError,
};
use ac_proto::frame::FrameReader;
use ac_proto::ProtoError;
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::device::stream_workers::{barrier_reached, StreamOp, StreamWorker};
use crate::device::{DeviceModule, Kernel, LaunchMode, Limited};
use crate::metrics::Metrics;
use crate::session::fence::{Fence, FenceRequest, Waiting};
use crate::session::resume::{Outbox, Rejoin};
use crate::session::Session;

mod arrays;
mod copies;
mod ipc;
mod limits;
mod link;
mod modules;
mod tensor_maps;
#[cfg(test)]
mod tests;
mod vmm;

/// Largest payload carried inline on the control stream (async writes, module images, reads).
pub const MAX_INLINE: u64 = 64 << 20;

/// Why a control stream ends the connection: a close code and a reason for the peer.
#[derive(Debug)]
pub struct Closing {
    /// Application close code (see [`ac_proto::backend::close`]).
    pub code: u32,
    /// Human-readable reason.
    pub reason: String,
}

impl Closing {
    fn protocol(reason: impl Into<String>) -> Self {
        Self { code: close::PROTOCOL, reason: reason.into() }
    }
}

/// Maps a read failure to the close it deserves; `None` when the peer is already gone.
pub fn closing_for(error: ProtoError) -> Option<Closing> {
    match error {
        ProtoError::Malformed(_) | ProtoError::FrameTooLarge { .. } => {
            Some(Closing { code: close::MALFORMED, reason: error.to_string() })
        }
        ProtoError::UnexpectedEnd => Some(Closing::protocol("stream ended inside a frame")),
        _ => None,
    }
}

/// A session's control-stream state: modules, kernels and streams are touched only here.
///
/// The maps hash with Fx, not SipHash: their keys are ids this backend hands out in sequence,
/// so a client cannot choose colliding keys, and a launch looks several of them up.
struct Control {
    session: Arc<Session>,
    replies: Arc<Outbox>,
    modules: HashMap<ModuleId, DeviceModule>,
    /// Each function with the module it was looked up in.
    kernels: HashMap<FunctionId, (ModuleId, Arc<Kernel>)>,
    /// Functions whose module was unloaded, so that a launch of one says so.
    unloaded: HashMap<FunctionId, ModuleId>,
    /// Module variables looked up, with the buffer over each, its address and size: a second
    /// lookup answers the same.
    variables: HashMap<(ModuleId, String), (BufferId, u64, u64)>,
    streams: HashMap<StreamId, StreamWorker>,
    /// First failure of an asynchronous call rejected before reaching a stream.
    pending: Option<WireError>,
    next_id: u64,
    /// Envelopes handled so far: the position of the last one.
    handled: u64,
    /// The context limits the session set, as the device set them.
    limits: HashMap<ContextLimit, Limited>,
}

/// What a request produced.
enum Outcome {
    /// Answer now (or, for an asynchronous call, record the error).
    Now(Response),
    /// A stream will answer.
    Later,
}

/// How a session's control loop reaches its client, and how long it holds the session for a
/// client whose connection timed out (see [`crate::session::resume`]).
#[derive(Debug)]
pub struct Line {
    /// The control connection.
    pub conn: quinn::Connection,
    /// Its control stream's envelopes, past the hello.
    pub reader: FrameReader,
    /// Where replies go (and are logged).
    pub outbox: Arc<Outbox>,
    /// The new connections of resumptions.
    pub rejoins: mpsc::UnboundedReceiver<Rejoin>,
    /// How long a session whose connection timed out waits for its client to resume it;
    /// zero: it ends at once.
    pub hold: std::time::Duration,
}

/// Why a request's handling stopped the control loop.
enum Halt {
    /// The client broke the protocol: the connection closes.
    Close(Closing),
    /// The connection was lost in the middle of the request (its payload): the request was
    /// not handled.
    Lost,
}

impl From<Closing> for Halt {
    fn from(closing: Closing) -> Self {
        Halt::Close(closing)
    }
}

/// Serves a session's control stream until the client closes it; returns why the connection
/// must close when the client broke the protocol. Meanwhile it admits the fences that bulk copies
/// ask for on `fences`, each once the envelopes before its position have been handled. A
/// connection that times out is held for `line.hold`: a resumption's new connection takes its
/// place, and handling goes on from the first envelope not handled.
pub async fn serve(
    session: Arc<Session>,
    mut line: Line,
    mut fences: mpsc::UnboundedReceiver<FenceRequest>,
) -> Result<(), Closing> {
    let default_stream = session.context.create_stream().map_err(|e| Closing::protocol(e.message))?;
    let worker = StreamWorker::spawn(session.context.clone(), default_stream, format!("ac-s{}-0", session.id.0))
        .map_err(|e| Closing::protocol(format!("cannot start stream: {e}")))?;
    let mut control = Control {
        session,
        replies: line.outbox.clone(),
        modules: HashMap::default(),
        kernels: HashMap::default(),
        unloaded: HashMap::default(),
        variables: HashMap::default(),
        streams: HashMap::from_iter([(StreamId(0), worker)]),
        pending: None,
        next_id: 1,
        handled: 0,
        limits: HashMap::default(),
    };
    let mut waiting = Waiting::default();
    loop {
        if !line.reader.frame_buffered() {
            // About to wait for the network: the workers get what is staged now.
            control.hand_over_staged().await;
        }
        // Every branch is cancel-safe: a frame is consumed only once whole.
        let read = tokio::select! {
            biased;
            Some(request) = fences.recv() => {
                control.fence_asked(request, &mut waiting).await;
                continue;
            }
            // The client resumed before this side saw its old connection time out.
            Some(rejoin) = line.rejoins.recv() => {
                control.take(rejoin, &mut line).await?;
                continue;
            }
            read = line.reader.read_frame::<Envelope>() => read,
        };
        let envelope = match read {
            Ok(Some(envelope)) => envelope,
            Ok(None) => return Ok(()),
            Err(e) => match closing_for(e) {
                Some(closing) => return Err(closing),
                None if control.hold(&mut line, &mut fences, &mut waiting).await? => continue,
                None => return Ok(()),
            },
        };
        let id = envelope.id;
        let span = tracing::debug_span!("request", session = control.session.id.0, id);
        let outcome = match control.handle(envelope.request, id, &mut line.reader).instrument(span).await {
            Ok(outcome) => outcome,
            Err(Halt::Close(closing)) => return Err(closing),
            Err(Halt::Lost) if control.hold(&mut line, &mut fences, &mut waiting).await? => continue,
            Err(Halt::Lost) => return Ok(()),
        };
        control.handled += 1;
        match outcome {
            Outcome::Now(response) if id != 0 => {
                control.session.metrics.answered(&response);
                control.replies.send_frame(&Reply { id, response }).await;
            }
            Outcome::Now(Response::Error(e)) => {
                tracing::debug!(error = %e, "asynchronous call failed");
                control.pending.get_or_insert(e);
            }
            Outcome::Now(_) | Outcome::Later => {}
        }
        for admitted in waiting.due(control.handled) {
            control.admit(admitted).await;
        }
    }
}

/// Runs a synchronous inline copy of `len` bytes (behind its fence) off the async threads, and
/// counts it once done.
async fn counted_copy<T: Send + 'static>(
    metrics: &Metrics,
    way: Direction,
    len: u64,
    copy: impl FnOnce() -> Result<T, WireError> + Send + 'static,
) -> Result<T, WireError> {
    let start = std::time::Instant::now();
    let done = blocking(copy).await;
    if done.is_ok() {
        metrics.copied(way, len, Some(start.elapsed()));
    }
    done
}

/// Runs a device copy off the async threads (it may take a while: up to `MAX_INLINE` bytes).
async fn blocking<T: Send + 'static>(
    copy: impl FnOnce() -> Result<T, WireError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(copy)
        .await
        .unwrap_or_else(|e| Err(WireError::new(ErrorKind::Internal, format!("copy panicked: {e}"))))
}

fn no_stream(id: StreamId) -> WireError {
    WireError::new(ErrorKind::InvalidStream, format!("stream {} does not exist in this session", id.0))
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
    Response::Error(WireError::new(kind, message))
}

impl Control {
    /// A bulk copy asks for its fence: admitted now if the envelopes before it are handled.
    async fn fence_asked(&mut self, request: FenceRequest, waiting: &mut Waiting) {
        if request.after <= self.handled {
            self.admit(request.admitted).await;
        } else {
            waiting.hold(request);
        }
    }

    /// The control connection is gone. A connection that timed out (silence, not a close) is
    /// held for `line.hold`, admitting fences meanwhile, until a resumption brings a new one
    /// (`true`); otherwise, or when the hold runs out or the session is revoked, the session
    /// ends (`false`, or why the resumption was refused).
    async fn hold(
        &mut self,
        line: &mut Line,
        fences: &mut mpsc::UnboundedReceiver<FenceRequest>,
        waiting: &mut Waiting,
    ) -> Result<bool, Closing> {
        let timed_out = matches!(line.conn.close_reason(), Some(quinn::ConnectionError::TimedOut));
        if !timed_out || line.hold.is_zero() {
            return Ok(false);
        }
        self.replies.detach().await;
        self.hand_over_staged().await;
        self.session.metrics.session_held();
        tracing::info!(
            session = self.session.id.0,
            hold_ms = line.hold.as_millis() as u64,
            "connection lost; session held"
        );
        let session = self.session.clone();
        let held = tokio::time::sleep(line.hold);
        tokio::pin!(held);
        loop {
            tokio::select! {
                biased;
                () = session.ended() => return Ok(false),
                Some(request) = fences.recv() => self.fence_asked(request, waiting).await,
                Some(rejoin) = line.rejoins.recv() => return self.take(rejoin, line).await.map(|()| true),
                () = &mut held => {
                    tracing::info!(session = self.session.id.0, "not resumed within its hold; session ends");
                    return Ok(false);
                }
            }
        }
    }

    /// Makes a resumption's connection the control connection: the old one (if still open)
    /// closes, the client learns how many envelopes were handled, and gets again the replies it
    /// lacks. A session that cannot be resumed exactly once ends with the reason.
    async fn take(&mut self, rejoin: Rejoin, line: &mut Line) -> Result<(), Closing> {
        let Rejoin { conn, send, reader, replies } = rejoin;
        line.conn.close(close::NORMAL.into(), b"the session resumed on another connection");
        self.replies.detach().await;
        line.conn = conn;
        line.reader = reader;
        // Before the program learns it resumed, and so before it runs its cut copies again.
        self.session.retire_lanes().await;
        let handled = self.handled;
        self.replies.rejoin(send, handled, replies).await.map_err(|reason| {
            tracing::warn!(session = self.session.id.0, reason, "cannot resume exactly once");
            Closing {
                code: close::SESSION_GONE,
                reason: format!("the session cannot be resumed exactly once: {reason}"),
            }
        })?;
        self.session.metrics.session_resumed();
        tracing::info!(session = self.session.id.0, handled, replies, "session resumed");
        Ok(())
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn stream(&mut self, id: StreamId) -> Result<&mut StreamWorker, WireError> {
        self.streams.get_mut(&id).ok_or_else(|| no_stream(id))
    }

    /// Stages `op` on `stream`, handing the staged work over when that is due.
    async fn enqueue_on(&mut self, stream: StreamId, op: StreamOp) -> Response {
        match self.stream(stream) {
            Ok(worker) => {
                if worker.stage(op) {
                    self.hand_over_staged().await;
                }
                Response::Ok
            }
            Err(e) => Response::Error(e),
        }
    }

    /// Hands every stream's staged operations to its worker: first to every worker with room,
    /// then, waiting, to the others. Called before the control loop waits for anything, so
    /// that no stream's work waits behind another's (streams may overlap, and a kernel may
    /// wait for one on another stream).
    async fn hand_over_staged(&mut self) {
        let mut full = Vec::new();
        for (id, worker) in self.streams.iter_mut() {
            if !worker.try_hand_over() {
                full.push(*id);
            }
        }
        for id in full {
            if let Some(worker) = self.streams.get_mut(&id) {
                worker.hand_over().await;
            }
        }
    }

    /// Stages a barrier on every stream and hands everything over.
    async fn barriers(&mut self) -> Vec<tokio::sync::oneshot::Receiver<Option<WireError>>> {
        let barriers = self.streams.values_mut().map(StreamWorker::stage_barrier).collect();
        self.hand_over_staged().await;
        barriers
    }

    async fn handle(&mut self, request: Request, id: u64, reader: &mut FrameReader) -> Result<Outcome, Halt> {
        let outcome = match request {
            Request::Ping => Outcome::Now(Response::Ok),
            Request::DeviceInfo => Outcome::Now(Response::Info(self.session.context.info())),
            Request::Telemetry => {
                Outcome::Now(self.session.telemetry().map_or_else(Response::Error, Response::Telemetry))
            }
            Request::MemAlloc { bytes } => {
                Outcome::Now(self.session.alloc(bytes).map_or_else(Response::Error, Response::Buffer))
            }
            Request::MemFree { buffer } => {
                // As cudaFree: wait for queued work, so a free never races a launch.
                self.drain_streams().await;
                Outcome::Now(self.session.free(buffer).map_or_else(Response::Error, |()| Response::Ok))
            }
            Request::MemWrite { dst, len, stream } => {
                let data = self.read_inline(reader, len).await?;
                Outcome::Now(self.enqueue_write(dst, data, stream).await)
            }
            Request::MemWriteSync { dst, len } => {
                let data = self.read_inline(reader, len).await?;
                self.write_sync(dst, data, id).await
            }
            Request::MemReadSync { src, len } => self.read_sync(src, len, id).await,
            Request::MemCopy { dst, src, len, stream } => Outcome::Now(self.enqueue_copy(dst, src, len, stream).await),
            Request::Memset { dst, len, value, stream } => {
                Outcome::Now(self.enqueue_memset(dst, len, value, stream).await)
            }
            Request::ModuleLoad { source, len } => {
                let (image, _permit) = self.read_inline(reader, len).await?;
                Outcome::Now(self.load_module(source, image).await)
            }
            Request::ModuleUnload { module } => Outcome::Now(self.unload_module(module).await),
            Request::FunctionLookup { module, name } => Outcome::Now(self.lookup(module, &name)),
            Request::ModuleLoadCached { source, digest } => {
                let owner = self.session.image_owner();
                Outcome::Now(match self.session.images.get(owner, &digest) {
                    Some(image) => self.load_module(source, image).await,
                    None => Response::NotCached,
                })
            }
            Request::MemAllocAt { bytes } => Outcome::Now(
                self.session
                    .alloc_at(bytes)
                    .map_or_else(Response::Error, |(buffer, address)| Response::BufferAt { buffer, address }),
            ),
            Request::FunctionLayout { module, name } => Outcome::Now(match self.lookup(module, &name) {
                Response::Function { id, .. } => {
                    let sizes = self.kernels[&id].1.sizes.as_ref().map(|s| s.iter().map(|&b| b as u32).collect());
                    Response::FunctionLayout { id, sizes }
                }
                other => other,
            }),
            Request::ModuleGlobal { module, name } => Outcome::Now(self.variable(module, name)),
            Request::ModuleKernels { module } => Outcome::Now(self.kernel_names(module)),
            Request::Link { inputs, options } => self.link(reader, inputs, options, id).await?,
            Request::KernelAttributes { function } => Outcome::Now(self.kernel_attributes(function)),
            Request::SetKernelAttribute { function, setting } => {
                Outcome::Now(self.set_kernel_attribute(function, setting).await)
            }
            Request::Launch { function, dims, args, stream } => {
                Outcome::Now(self.enqueue_launch(function, dims, &args, stream, LaunchMode::Plain).await)
            }
            Request::LaunchCooperative { function, dims, args, stream } => {
                Outcome::Now(self.enqueue_launch(function, dims, &args, stream, LaunchMode::Cooperative).await)
            }
            Request::LaunchClustered { function, dims, cluster, args, stream } => {
                Outcome::Now(self.enqueue_launch(function, dims, &args, stream, LaunchMode::Clustered(cluster)).await)
            }
            Request::MaxActiveClusters { function, dims, cluster } => {
                Outcome::Now(self.max_active_clusters(function, dims, cluster).await)
            }
            Request::EncodeTensorMap(spec) => Outcome::Now(self.encode_tensor_map(spec).await),
            Request::CreateArray(spec) => Outcome::Now(self.create_array(spec).await),
            Request::DestroyArray(id) => Outcome::Now(self.destroy_array(id)),
            Request::CopyArray { copy, stream } => Outcome::Now(self.enqueue_array_copy(copy, stream).await),
            Request::CreateTexture { resource, sampler } => {
                Outcome::Now(self.create_object(resource, Some(sampler)).await)
            }
            Request::CreateSurface(id) => Outcome::Now(self.create_object(TextureResource::Array(id), None).await),
            Request::DestroyObject { object, surface } => Outcome::Now(self.destroy_object(object, surface).await),
            Request::ReserveRange { bytes, alignment } => Outcome::Now(self.reserve_range(bytes, alignment).await),
            Request::CreatePhysical { bytes } => Outcome::Now(self.create_physical(bytes).await),
            Request::ReleasePhysical { physical } => Outcome::Now(self.release_physical(physical)),
            Request::MapPhysical { range, offset, bytes, physical } => {
                Outcome::Now(self.map_physical(range, offset, bytes, physical).await)
            }
            Request::UnmapRange { range, offset, bytes } => Outcome::Now(self.unmap_range(range, offset, bytes).await),
            Request::ExportMemory { buffer } => Outcome::Now(self.export_memory(buffer)),
            Request::ImportMemory { secret } => Outcome::Now(self.import_memory(secret).await),
            Request::ExportPhysical { physical } => Outcome::Now(self.export_physical(physical).await),
            Request::ImportPhysical { secret } => Outcome::Now(self.import_physical(secret).await),
            Request::StreamCreate => Outcome::Now(self.create_stream()),
            Request::StreamDestroy { stream } => Outcome::Now(self.destroy_stream(stream).await),
            Request::Synchronize { stream } => Outcome::Now(self.synchronize(stream).await),
            Request::SetLimit { limit, value } => Outcome::Now(self.set_limit(limit, value).await),
        };
        Ok(outcome)
    }

    fn create_stream(&mut self) -> Response {
        let id = StreamId(self.fresh_id());
        let created = self.session.context.create_stream().and_then(|s| {
            StreamWorker::spawn(self.session.context.clone(), s, format!("ac-s{}-{}", self.session.id.0, id.0))
                .map_err(|e| WireError::new(ErrorKind::Internal, format!("cannot start stream: {e}")))
        });
        match created {
            Ok(worker) => {
                self.streams.insert(id, worker);
                Response::Stream(id)
            }
            Err(e) => Response::Error(e),
        }
    }

    async fn destroy_stream(&mut self, stream: StreamId) -> Response {
        if stream == StreamId(0) {
            return error(ErrorKind::InvalidStream, "the default stream cannot be destroyed");
        }
        let Some(mut worker) = self.streams.remove(&stream) else {
            return Response::Error(no_stream(stream));
        };
        let barrier = worker.stage_barrier();
        self.hand_over_staged().await;
        worker.hand_over().await;
        barrier_reached(barrier).await.map_or(Response::Ok, Response::Error)
    }

    /// Hands a fence to the copy that asked; if the copy is gone meanwhile, its pending error
    /// stays pending for the next synchronizing call.
    async fn admit(&mut self, admitted: tokio::sync::oneshot::Sender<Fence>) {
        if let Err(fence) = admitted.send(self.fence().await) {
            if let Some(e) = fence.pending {
                self.pending.get_or_insert(e);
            }
            // A barrier already answered (settled on the control loop) holds its stream's
            // error; the others give theirs back to their stream when their send fails.
            for mut barrier in fence.barriers {
                if let Ok(Some(e)) = barrier.try_recv() {
                    self.pending.get_or_insert(e);
                }
            }
        }
    }

    /// A fence behind everything handled so far: a barrier on every stream, and the pending
    /// error, which the fence now reports.
    async fn fence(&mut self) -> Fence {
        let barriers = self.barriers().await;
        Fence { pending: self.pending.take(), barriers }
    }

    /// Waits for every stream, keeping their errors pending for the next synchronize. Every
    /// barrier is handed over before any is waited for: the streams drain together.
    async fn drain_streams(&mut self) {
        for barrier in self.barriers().await {
            if let Some(e) = barrier_reached(barrier).await {
                self.pending.get_or_insert(e);
            }
        }
    }

    async fn synchronize(&mut self, stream: Option<StreamId>) -> Response {
        let first = match stream {
            None => {
                self.drain_streams().await;
                self.pending.take()
            }
            Some(id) => match self.stream(id).map(StreamWorker::stage_barrier) {
                Ok(barrier) => {
                    self.hand_over_staged().await;
                    let stream_error = barrier_reached(barrier).await;
                    match self.pending.take() {
                        // Report the older error now and keep the stream's for the next call.
                        Some(older) => {
                            self.pending = stream_error;
                            Some(older)
                        }
                        None => stream_error,
                    }
                }
                Err(e) => Some(e),
            },
        };
        first.map_or(Response::Ok, Response::Error)
    }
}
