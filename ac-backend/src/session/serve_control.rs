//! The control stream of a session: requests in order, replies and deferred errors.

use std::sync::Arc;

use ac_proto::backend::{
    close, DevicePtr, Direction, Envelope, ErrorKind, FunctionId, KernelArg, LaunchDims, ModuleId, ModuleSource, Reply,
    Request, Response, StreamId, WireError,
};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::ProtoError;
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::device::stream_workers::{barrier_reached, StreamOp, StreamWorker};
use crate::device::{check_signature, validate_dims, DeviceArg, DeviceModule, Kernel};
use crate::metrics::Metrics;
use crate::network::bulk;
use crate::session::fence::{Fence, FenceRequest, Waiting};
use crate::session::resume::{Outbox, Rejoin};
use crate::session::Session;

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
    streams: HashMap<StreamId, StreamWorker>,
    /// First failure of an asynchronous call rejected before reaching a stream.
    pending: Option<WireError>,
    next_id: u64,
    /// Envelopes handled so far: the position of the last one.
    handled: u64,
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
        streams: HashMap::from_iter([(StreamId(0), worker)]),
        pending: None,
        next_id: 1,
        handled: 0,
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
            Request::Launch { function, dims, args, stream } => {
                Outcome::Now(self.enqueue_launch(function, dims, &args, stream).await)
            }
            Request::StreamCreate => Outcome::Now(self.create_stream()),
            Request::StreamDestroy { stream } => Outcome::Now(self.destroy_stream(stream).await),
            Request::Synchronize { stream } => Outcome::Now(self.synchronize(stream).await),
        };
        Ok(outcome)
    }

    /// Reads an inline payload under the session's budget, so that queued asynchronous writes
    /// cannot hold more than the budget in memory (read replies waiting to leave share it).
    async fn read_inline(
        &mut self,
        reader: &mut FrameReader,
        len: u64,
    ) -> Result<(bytes::Bytes, tokio::sync::OwnedSemaphorePermit), Halt> {
        if len > MAX_INLINE {
            return Err(Halt::Close(Closing::protocol(format!(
                "inline payload of {len} bytes exceeds the limit of {MAX_INLINE}; use a bulk copy"
            ))));
        }
        // The payload may take a while to arrive, and the budget to free up.
        let permit = self.reserve_inline(len).await;
        let data =
            reader.read_exact_raw(len as usize).await.map_err(|e| closing_for(e).map_or(Halt::Lost, Halt::Close))?;
        Ok((data, permit))
    }

    /// Takes `len` bytes of the session's payload budget, once the operations staged so far
    /// are on their streams (they may be what holds the budget).
    async fn reserve_inline(&mut self, len: u64) -> tokio::sync::OwnedSemaphorePermit {
        self.hand_over_staged().await;
        self.session.reserve(len).await
    }

    async fn enqueue_write(
        &mut self,
        dst: DevicePtr,
        (data, budget): (bytes::Bytes, tokio::sync::OwnedSemaphorePermit),
        stream: StreamId,
    ) -> Response {
        match self.session.resolve(dst, data.len() as u64) {
            Ok(alloc) => {
                // Counted as it is queued: the stream's worker reports its failure, if any.
                self.session.metrics.copied(Direction::HostToDevice, data.len() as u64, None);
                self.enqueue_on(stream, StreamOp::Write { dst: alloc, offset: dst.offset, data, _budget: budget }).await
            }
            Err(e) => Response::Error(e),
        }
    }

    /// A synchronous write: behind a fence at this position, then straight to device memory,
    /// off the control loop.
    async fn write_sync(
        &mut self,
        dst: DevicePtr,
        (data, budget): (bytes::Bytes, tokio::sync::OwnedSemaphorePermit),
        id: u64,
    ) -> Outcome {
        if id == 0 {
            return Outcome::Now(error(ErrorKind::InvalidArgument, "a synchronous write needs a request id"));
        }
        let alloc = match self.session.resolve(dst, data.len() as u64) {
            Ok(alloc) => alloc,
            Err(e) => return Outcome::Now(Response::Error(e)),
        };
        let (fence, session, replies) = (self.fence().await, self.session.clone(), self.replies.clone());
        tokio::spawn(async move {
            let metrics = session.metrics.clone();
            let len = data.len() as u64;
            let written = match fence.passed().await {
                Ok(()) => {
                    let write = move || bulk::write_whole(&session, &alloc, dst.offset, &data);
                    counted_copy(&metrics, Direction::HostToDevice, len, write).await
                }
                Err(e) => Err(e),
            };
            drop(budget);
            let response = written.map_or_else(Response::Error, |()| Response::Ok);
            metrics.answered(&response);
            replies.send_frame(&Reply { id, response }).await;
        });
        Outcome::Later
    }

    /// A synchronous read: behind a fence at this position, answered off the control loop.
    async fn read_sync(&mut self, src: DevicePtr, len: u64, id: u64) -> Outcome {
        if id == 0 {
            return Outcome::Now(error(ErrorKind::InvalidArgument, "a read needs a request id to answer"));
        }
        if len > MAX_INLINE {
            return Outcome::Now(error(
                ErrorKind::InvalidArgument,
                format!("read of {len} bytes: use a bulk copy above {MAX_INLINE}"),
            ));
        }
        let alloc = match self.session.resolve(src, len) {
            Ok(alloc) => alloc,
            Err(e) => return Outcome::Now(Response::Error(e)),
        };
        // The data waits in memory until the client takes it: a client that asks and never
        // reads must stall its own session, not fill the host's memory.
        let budget = self.reserve_inline(len).await;
        let (fence, session, replies) = (self.fence().await, self.session.clone(), self.replies.clone());
        tokio::spawn(async move {
            let metrics = session.metrics.clone();
            let read = match fence.passed().await {
                Ok(()) => {
                    let read = move || bulk::read_whole(&session, &alloc, src.offset, len);
                    counted_copy(&metrics, Direction::DeviceToHost, len, read).await
                }
                Err(e) => Err(e),
            };
            match read {
                Ok(data) => {
                    let frame = frame_bytes(&Reply { id, response: Response::Data { len } }).expect("reply encodes");
                    replies.send_with_payload(frame, data).await;
                }
                Err(e) => {
                    let response = Response::Error(e);
                    metrics.answered(&response);
                    replies.send_frame(&Reply { id, response }).await;
                }
            }
            drop(budget);
        });
        Outcome::Later
    }

    async fn enqueue_copy(&mut self, dst: DevicePtr, src: DevicePtr, len: u64, stream: StreamId) -> Response {
        match self.session.resolve(dst, len).and_then(|d| Ok((d, self.session.resolve(src, len)?))) {
            Ok((dst_alloc, src_alloc)) => {
                let op = StreamOp::Copy {
                    dst: dst_alloc,
                    dst_offset: dst.offset,
                    src: src_alloc,
                    src_offset: src.offset,
                    len,
                };
                self.enqueue_on(stream, op).await
            }
            Err(e) => Response::Error(e),
        }
    }

    async fn enqueue_memset(&mut self, dst: DevicePtr, len: u64, value: u8, stream: StreamId) -> Response {
        match self.session.resolve(dst, len) {
            Ok(alloc) => self.enqueue_on(stream, StreamOp::Memset { dst: alloc, offset: dst.offset, len, value }).await,
            Err(e) => Response::Error(e),
        }
    }

    async fn load_module(&mut self, source: ModuleSource, image: bytes::Bytes) -> Response {
        let device = self.session.context.clone();
        let (images, owner) = (self.session.images.clone(), self.session.image_owner());
        // Compiling (NVRTC, large images) and hashing may take long: off the async threads.
        let loaded = tokio::task::spawn_blocking(move || {
            let module = device.load_module(&source, &image)?;
            // What loaded is kept by content, for this owner's next processes.
            if matches!(source, ModuleSource::Ptx | ModuleSource::Cubin) {
                images.put(owner, ac_proto::backend::image_digest(&image), image);
            }
            Ok(module)
        })
        .await;
        match loaded {
            Ok(Ok(module)) => {
                let id = ModuleId(self.fresh_id());
                self.modules.insert(id, module);
                Response::Module(id)
            }
            Ok(Err(e)) => Response::Error(e),
            Err(e) => error(ErrorKind::Internal, format!("module load panicked: {e}")),
        }
    }

    async fn unload_module(&mut self, module: ModuleId) -> Response {
        let Some(device_module) = self.modules.remove(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        self.drain_streams().await;
        // Its functions die with it, here and in the context: a later launch is an error, never
        // a dead handle handed to the device.
        let dead: Vec<FunctionId> = self.kernels.iter().filter(|(_, (m, _))| *m == module).map(|(f, _)| *f).collect();
        for function in dead {
            self.kernels.remove(&function);
            self.unloaded.insert(function, module);
        }
        self.session.context.unload_module(device_module);
        Response::Ok
    }

    fn lookup(&mut self, module: ModuleId, name: &str) -> Response {
        let Some(&device_module) = self.modules.get(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        match self.session.context.kernel(device_module, name) {
            Ok(kernel) => {
                let id = FunctionId(self.fresh_id());
                let params = kernel.params.clone();
                self.kernels.insert(id, (module, Arc::new(kernel)));
                Response::Function { id, params }
            }
            Err(e) => Response::Error(e),
        }
    }

    async fn enqueue_launch(
        &mut self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
        stream: StreamId,
    ) -> Response {
        match self.prepare_launch(function, dims, args, stream) {
            Ok(op) => {
                self.session.metrics.launched();
                self.enqueue_on(stream, op).await
            }
            Err(e) => Response::Error(e),
        }
    }

    /// Checks a launch completely before it is queued: kernel, signature, shape, buffers.
    fn prepare_launch(
        &self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
        stream: StreamId,
    ) -> Result<StreamOp, WireError> {
        let kernel = self.kernels.get(&function).map(|(_, k)| k.clone()).ok_or_else(|| {
            let message = match self.unloaded.get(&function) {
                Some(module) => format!("function {} belongs to module {}, which was unloaded", function.0, module.0),
                None => format!("function {} does not exist in this session", function.0),
            };
            WireError::new(ErrorKind::InvalidFunction, message)
        })?;
        check_signature(&kernel, args)?;
        validate_dims(&dims)?;
        if !self.streams.contains_key(&stream) {
            return Err(no_stream(stream));
        }
        let mut hold = Vec::new();
        let mut device_args = Vec::with_capacity(args.len());
        for arg in args {
            device_args.push(match arg {
                KernelArg::Ptr(ptr) => {
                    let alloc = self.session.resolve_pointer(*ptr)?;
                    let arg = DeviceArg::Mem { mem: alloc.mem, offset: ptr.offset, len: alloc.size - ptr.offset };
                    hold.push(alloc);
                    arg
                }
                scalar => DeviceArg::Scalar(*scalar),
            });
        }
        Ok(StreamOp::Launch { kernel, dims, args: device_args, _hold: hold })
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
