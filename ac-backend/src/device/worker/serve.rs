//! The worker process's side: one context on one device, its calls served from stdin to its reply
//! descriptor (the stdout it started with; [`super::printed`] takes descriptor 1 over).
//!
//! Calls run on a pool of threads that grows whenever every thread is busy, so that a call never
//! waits behind another (a `synchronize` that blocks on one stream must not hold up a launch on
//! another; the backend's stream workers call concurrently), up to [`MAX_CALL_THREADS`]; past
//! it a call waits for a thread. Replies go out as calls finish. A bulk copy (the context's
//! `upload` or `download`, which borrows the context) runs on a thread of its own, which gets the
//! copy's calls in the order they came; a copy past [`MAX_COPIES`] running at once is refused.
//! So a session's threads are bounded whatever its program does (the unit's `TasksMax` counts
//! every worker's).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use ac_proto::backend::jit_link::with_bytes;
use ac_proto::backend::{ErrorKind, WireError};

use super::fds;
use super::printed::{self, Printed};
use super::shared::Region;
use super::wire::{read_frame, write_frame, Call, Frame, Reply, Shared};
use crate::device::{Context, Device, DeviceResult, Download, LaunchMode, Upload};

/// Where replies go: the reply descriptor, each frame written whole under its lock, and what
/// the session's kernels printed, sent ahead of the next reply ([`printed`]).
struct Outbound {
    wire: Mutex<BufWriter<File>>,
    printed: Arc<Printed>,
}

type Out = Arc<Outbound>;

/// The worker process's work: opens GPU `index` as `config` says and serves one session's
/// calls on it, bulk copies through the shared region the backend handed down as descriptor
/// `shared`, if any. A device that cannot be opened is reported as the first frame.
pub fn run_worker(config: &crate::BackendConfig, index: u32, shared: Option<i32>, fds: Option<i32>) -> io::Result<()> {
    let region = shared.map(Region::inherited).transpose()?.map(Arc::new);
    if let Some(fd) = fds {
        super::fds::adopt(fd)?;
    }
    let failed = |why: String| Reply::Failed(WireError::new(ErrorKind::Device, why));
    // Before the driver loads: whatever it prints from now on is kept apart from the replies.
    let (replies, printed) = match printed::redirect_stdout() {
        Ok(redirected) => redirected,
        Err(e) => {
            let mut stdout = io::stdout().lock();
            write_frame(&mut stdout, 0, &failed(format!("cannot capture kernel output: {e}")), &[])?;
            return stdout.flush();
        }
    };
    let out = Arc::new(Outbound { wire: Mutex::new(BufWriter::with_capacity(1 << 20, replies)), printed });
    match open_gpu(config, index) {
        Ok(device) => serve(device, region, out),
        Err(why) => send(&out, 0, &failed(why), &[], false),
    }
}

#[cfg(feature = "cuda")]
fn open_gpu(config: &crate::BackendConfig, index: u32) -> Result<Arc<dyn Device>, String> {
    use crate::device::cuda;
    if let Some(path) = &config.cuda_driver {
        cuda::driver::load_from(path)?;
    }
    let mut gpus = cuda::discover(Some(&[index]), config.staging_mib << 20, config.copy)?;
    let mut gpu = gpus.pop().ok_or("no GPU")?;
    gpu.serve_one_session();
    Ok(Arc::new(gpu))
}

#[cfg(not(feature = "cuda"))]
fn open_gpu(_config: &crate::BackendConfig, _index: u32) -> Result<Arc<dyn Device>, String> {
    Err("this ac-backend was built without the `cuda` feature".into())
}

/// Opens a context on `device` and serves calls from stdin until it closes (the session
/// ended), answering on `out`, bulk copies' pieces through `region` where a call names a slot
/// of it. The context is released before this returns.
fn serve(device: Arc<dyn Device>, region: Option<Arc<Region>>, out: Out) -> io::Result<()> {
    let context = match device.open_context() {
        Ok(context) => context,
        Err(e) => return send(&out, 0, &Reply::Failed(e), &[], false),
    };
    send(&out, 0, &Reply::Opened { finishes_in_call: context.finishes_in_call() }, &[], false)?;
    let pool = Pool::new(context.clone(), out.clone());
    let transfers = Transfers::default();
    let mut input = BufReader::with_capacity(1 << 20, io::stdin().lock());
    while let Some(frame) = read_frame::<Call>(&mut input)? {
        match (&frame.header, frame.header.transfer()) {
            (_, Some(transfer)) => transfers.forward(transfer, frame, &out),
            (Call::UploadStart { transfer, .. } | Call::DownloadStart { transfer, .. }, None) => {
                transfers.start(*transfer, frame, &context, region.clone(), &out)
            }
            // A launch only queues work: run it here, sparing a thread hand-over on the path
            // whose latency users see most.
            (Call::Launch { .. }, None) => answer_hot(&out, frame.id, execute(&*context, frame)),
            // What a dropped range lets go only queues on the GPU's janitor, and must queue in
            // the order it came: every unmap before the range's free (a pool thread each could
            // free the range first).
            (
                Call::UnmapLater { .. }
                | Call::Free { .. }
                | Call::ReleasePhysical { .. }
                | Call::DestroyArray { .. }
                | Call::DestroyObject { .. },
                None,
            ) => answer_hot(&out, frame.id, execute(&*context, frame)),
            _ => pool.run(frame),
        }
    }
    Ok(())
}

/// Threads the call pool grows to: more calls than this at once wait for one to finish (the
/// backend's callers are a session's stream workers and control loop: a few per stream).
pub const MAX_CALL_THREADS: usize = 64;

/// Bulk copies one session runs at once; one more is refused with the reason. Above what a
/// program stripes over (up to 64 lanes, each replaced once after a copy given up halfway, and
/// its QUIC streams).
pub const MAX_COPIES: usize = 256;

/// The bulk copies in progress, each on its thread, by id.
#[derive(Clone, Default)]
struct Transfers(Arc<Mutex<HashMap<u32, Sender<Frame<Call>>>>>);

impl Transfers {
    /// Starts the copy that `frame` asks for on a thread of its own.
    fn start(
        &self,
        transfer: u32,
        frame: Frame<Call>,
        context: &Arc<dyn Context>,
        region: Option<Arc<Region>>,
        out: &Out,
    ) {
        let (tx, rx) = channel();
        {
            let mut running = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if running.len() >= MAX_COPIES {
                let why = format!("this session runs {MAX_COPIES} bulk copies already: wait for one to finish");
                let refused = WireError::new(ErrorKind::InvalidArgument, why);
                return answer(out, frame.id, (Reply::Failed(refused), Vec::new()));
            }
            running.insert(transfer, tx);
        }
        let (this, context, out) = (self.clone(), context.clone(), out.clone());
        let started = std::thread::Builder::new().name("ac-worker-copy".into()).spawn(move || {
            run_transfer(&*context, frame, rx, region.as_deref(), &out);
            this.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&transfer);
        });
        if let Err(e) = started {
            tracing::error!("cannot start a thread: {e}");
            std::process::exit(3);
        }
    }

    /// Hands a call to its copy's thread, or answers that the copy is not there.
    fn forward(&self, transfer: u32, frame: Frame<Call>, out: &Out) {
        let id = frame.id;
        let sent = match self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&transfer) {
            Some(tx) => tx.send(frame).is_ok(),
            None => false,
        };
        if !sent && id != 0 {
            let gone = WireError::new(ErrorKind::Internal, format!("no bulk copy {transfer}"));
            answer(out, id, (Reply::Failed(gone), Vec::new()));
        }
    }
}

/// Runs one bulk copy: its start, then the calls for it until it finishes or ends.
fn run_transfer(
    context: &dyn Context,
    start: Frame<Call>,
    calls: Receiver<Frame<Call>>,
    region: Option<&Region>,
    out: &Out,
) {
    let started = match start.header {
        Call::UploadStart { dst, offset, len, .. } => {
            context.upload(dst, offset, len).map(|upload| serve_upload(upload, &calls, region, out, start.id))
        }
        Call::DownloadStart { src, offset, len, .. } => {
            context.download(src, offset, len).map(|download| serve_download(download, &calls, region, out, start.id))
        }
        _ => Ok(()),
    };
    if let Err(e) = started {
        answer(out, start.id, (Reply::Failed(e), Vec::new()));
    }
}

/// Answers the upload's start (call `id`), then its pieces, until it finishes or ends.
fn serve_upload(
    mut upload: Box<dyn Upload + '_>,
    calls: &Receiver<Frame<Call>>,
    region: Option<&Region>,
    out: &Out,
    id: u32,
) {
    answer(out, id, (Reply::Done, Vec::new()));
    while let Ok(call) = calls.recv() {
        let pushed = match call.header {
            Call::UploadPiece { at, shared: None, .. } => upload.push(at, &call.payload),
            Call::UploadPiece { at, shared: Some(Shared { slot, len }), .. } => {
                // SAFETY: the backend wrote the slot before this call and leaves it alone until
                // the answer (`shared`'s protocol).
                #[allow(unsafe_code)]
                let piece = unsafe { slot_of(region, slot, len as u64) };
                piece.and_then(|piece| upload.push(at, piece))
            }
            Call::UploadFinish { .. } => return answer(out, call.id, done(upload.finish())),
            _ => return,
        };
        answer_hot(out, call.id, done(pushed));
    }
}

/// Answers the download's start (call `id`), then its pieces, each into its slot or as the
/// reply's payload, until it ends.
fn serve_download(
    mut download: Box<dyn Download + '_>,
    calls: &Receiver<Frame<Call>>,
    region: Option<&Region>,
    out: &Out,
    id: u32,
) {
    answer(out, id, (Reply::Done, Vec::new()));
    while let Ok(call) = calls.recv() {
        let Call::DownloadNext { len, slot, .. } = call.header else { return };
        let reply = match slot {
            Some(slot) => {
                // SAFETY: the backend leaves the slot alone from this call until its answer
                // (`shared`'s protocol).
                #[allow(unsafe_code)]
                let piece = unsafe { slot_of(region, slot, len) };
                done(piece.and_then(|piece| download.next_into(piece)))
            }
            None => {
                let mut bytes = vec![0u8; len as usize]; // at most a piece: the backend asks
                match download.next_into(&mut bytes) {
                    Ok(()) => (Reply::Done, bytes),
                    Err(e) => (Reply::Failed(e), Vec::new()),
                }
            }
        };
        answer_hot(out, call.id, reply)
    }
}

/// The first `len` bytes of slot `slot` of `region`, or why there are none.
///
/// # Safety
/// As [`Region::slot`]: the call being served holds the slot.
#[allow(unsafe_code, clippy::mut_from_ref)]
unsafe fn slot_of(region: Option<&Region>, slot: u32, len: u64) -> DeviceResult<&mut [u8]> {
    let internal = |why: String| WireError::new(ErrorKind::Internal, why);
    let region = region.ok_or_else(|| internal("a piece in shared memory, but this worker has none".into()))?;
    let len = usize::try_from(len).map_err(|_| internal(format!("a piece of {len} bytes")))?;
    // SAFETY: the caller's contract.
    unsafe { region.slot(slot as usize, len) }
        .ok_or_else(|| internal(format!("no slot {slot} of {len} bytes in the shared region")))
}

/// A reply with no value, or the error.
fn done(result: DeviceResult<()>) -> (Reply, Vec<u8>) {
    match result {
        Ok(()) => (Reply::Done, Vec::new()),
        Err(e) => (Reply::Failed(e), Vec::new()),
    }
}

/// Sends the answer to call `id` after what the session's kernels printed since the last
/// answer; a backend that is gone leaves nobody to answer, and the worker exits.
fn answer(out: &Out, id: u32, (reply, payload): (Reply, Vec<u8>)) {
    if id != 0 && send(out, id, &reply, &payload, true).is_err() {
        std::process::exit(0);
    }
}

/// Sends the answer to a launch or to a bulk copy's piece, the calls whose latency users see:
/// what kernels printed waits for the next [`answer`] (a synchronization's takes it).
fn answer_hot(out: &Out, id: u32, (reply, payload): (Reply, Vec<u8>)) {
    if id != 0 && send(out, id, &reply, &payload, false).is_err() {
        std::process::exit(0);
    }
}

/// Writes one frame and flushes it, with `with_printed` after what the session's kernels
/// printed since the last one (taken under the lock: a call that synchronized finds its output
/// ahead of its reply, whichever thread took it). Never ahead of the first frame (id 0), which
/// the backend reads as the worker's opening.
fn send(out: &Out, id: u32, reply: &Reply, payload: &[u8], with_printed: bool) -> io::Result<()> {
    let mut wire = out.wire.lock().unwrap_or_else(|p| p.into_inner());
    let printed = if with_printed && id != 0 { out.printed.take() } else { Vec::new() };
    if !printed.is_empty() {
        write_frame(&mut *wire, 0, &Reply::Printed, &printed)?;
    }
    write_frame(&mut *wire, id, reply, payload)?;
    wire.flush()
}

/// Threads that run calls, one more whenever all are busy.
struct Pool {
    jobs: Sender<Frame<Call>>,
    queue: Arc<Mutex<Receiver<Frame<Call>>>>,
    /// Threads waiting for a job and not yet promised one.
    idle: Arc<AtomicUsize>,
    /// Threads started.
    threads: AtomicUsize,
    context: Arc<dyn Context>,
    out: Out,
}

impl Pool {
    fn new(context: Arc<dyn Context>, out: Out) -> Self {
        let (jobs, queue) = channel();
        let idle = Arc::new(AtomicUsize::new(0));
        Self { jobs, queue: Arc::new(Mutex::new(queue)), idle, threads: AtomicUsize::new(0), context, out }
    }

    /// Hands `frame` to an idle thread, or to a new one.
    fn run(&self, frame: Frame<Call>) {
        let promised = self.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        let room = || {
            self.threads.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_CALL_THREADS).then_some(n + 1))
        };
        // At the bound the call queues: the next thread to finish takes it.
        if !promised && room().is_ok() {
            self.spawn();
        }
        // The receiver lives as long as a thread does; the send only fails if none could start,
        // and then the call's reply is lost with the worker, which exits below.
        if self.jobs.send(frame).is_err() {
            std::process::exit(3);
        }
    }

    fn spawn(&self) {
        let (queue, idle, context, out) =
            (self.queue.clone(), self.idle.clone(), self.context.clone(), self.out.clone());
        let started = std::thread::Builder::new().name("ac-worker-call".into()).spawn(move || loop {
            let job = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
            let Ok(frame) = job else { return };
            let id = frame.id;
            answer(&out, id, execute(&*context, frame));
            idle.fetch_add(1, Ordering::AcqRel);
        });
        if let Err(e) = started {
            tracing::error!("cannot start a thread: {e}");
            std::process::exit(3);
        }
    }
}

/// Runs one call on the context.
fn execute(context: &dyn Context, frame: Frame<Call>) -> (Reply, Vec<u8>) {
    let unit = |r: DeviceResult<()>| r.map(|()| Reply::Done);
    let handle = |r: DeviceResult<u64>| r.map(Reply::Handle);
    let mut payload = Vec::new();
    let reply = match frame.header {
        Call::Info => Ok(Reply::Info(context.info())),
        Call::Alloc { bytes } => handle(context.alloc(bytes).map(|m| m.0)),
        Call::Free { mem } => {
            context.free(mem);
            Ok(Reply::Done)
        }
        Call::Write { dst, offset, stream } => unit(context.write(dst, offset, &frame.payload, stream)),
        Call::Read { src, offset, len, stream } => match usize::try_from(len) {
            Ok(len) => {
                payload = vec![0u8; len];
                unit(context.read(src, offset, &mut payload, stream))
            }
            Err(_) => Err(WireError::new(ErrorKind::OutOfBounds, "read too large")),
        },
        Call::Copy { dst, dst_offset, src, src_offset, len, stream } => {
            unit(context.copy(dst, dst_offset, src, src_offset, len, stream))
        }
        Call::Memset { dst, offset, len, value, stream } => unit(context.memset(dst, offset, len, value, stream)),
        Call::LoadModule { source } => handle(context.load_module(&source, &frame.payload).map(|m| m.0)),
        Call::UnloadModule { module } => {
            context.unload_module(module);
            Ok(Reply::Done)
        }
        Call::Kernel { module, name } => context.kernel(module, &name).map(Reply::Kernel),
        Call::Global { module, name } => context.global(module, &name).map(|(mem, size)| Reply::Global { mem, size }),
        Call::KernelNames { module } => context.kernel_names(module).map(Reply::Names),
        Call::Link { inputs, options } => match with_bytes(&inputs, &frame.payload) {
            Some(inputs) => context.link(&inputs, &options).map(|linked| {
                payload = linked.image;
                Reply::Linked { info_log: linked.info_log }
            }),
            None => Err(WireError::new(ErrorKind::InvalidArgument, "a link's inputs do not add up to its payload")),
        },
        Call::LaunchCooperative { kernel, dims, args, stream } => {
            unit(context.launch_as(&kernel, &dims, &args, stream, LaunchMode::Cooperative))
        }
        Call::LaunchClustered { kernel, dims, args, stream, cluster } => {
            unit(context.launch_as(&kernel, &dims, &args, stream, LaunchMode::Clustered(cluster)))
        }
        Call::MaxActiveClusters { kernel, dims, cluster } => {
            handle(context.max_active_clusters(&kernel, &dims, cluster).map(u64::from))
        }
        Call::EncodeTensorMap { spec } => context.encode_tensor_map(&spec).map(|map| {
            payload = map;
            Reply::Done
        }),
        Call::ReserveRange { bytes, alignment } => handle(context.reserve_range(bytes, alignment).map(|m| m.0)),
        Call::CreatePhysical { bytes } => handle(context.create_physical(bytes)),
        Call::ReleasePhysical { handle } => {
            context.release_physical(handle);
            Ok(Reply::Done)
        }
        Call::Map { range, offset, bytes, handle } => unit(context.map(range, offset, bytes, handle)),
        Call::Unmap { range, offset, bytes } => unit(context.unmap(range, offset, bytes)),
        Call::UnmapLater { range, offset, bytes } => {
            context.unmap_later(range, offset, bytes);
            Ok(Reply::Done)
        }
        Call::CreateArray { spec } => handle(context.create_array(&spec)),
        Call::DestroyArray { array } => {
            context.destroy_array(array);
            Ok(Reply::Done)
        }
        Call::CopyArray { copy, stream } => unit(context.copy_array(&copy, stream)),
        Call::CreateObject { resource, sampler } => handle(context.create_object(&resource, sampler.as_ref())),
        Call::DestroyObject { object, surface } => {
            context.destroy_object(object, surface);
            Ok(Reply::Done)
        }
        Call::ExportAllocation { mem } => context.export_allocation(mem).map(|handle| {
            payload = handle;
            Reply::Done
        }),
        Call::OpenAllocation { size } => handle(context.open_allocation(&frame.payload, size).map(|m| m.0)),
        Call::CloseOpened { mem } => {
            context.close_opened(mem);
            Ok(Reply::Done)
        }
        Call::ExportPhysical { handle } => {
            unit(context.export_physical(handle).and_then(|fd| fds::send_to_backend(fd.as_fd())))
        }
        Call::ImportPhysical { size } => {
            handle(fds::receive_from_backend().and_then(|fd| context.import_physical(fd.as_fd(), size)))
        }
        Call::KernelAttributes { kernel } => context.kernel_attributes(&kernel).map(Reply::KernelAttributes),
        Call::SetKernelAttribute { kernel, setting } => unit(context.set_kernel_attribute(&kernel, setting)),
        Call::SetLimit { limit, value } => context.set_limit(limit, value).map(Reply::Limited),
        Call::Launch { kernel, dims, args, stream } => unit(context.launch(&kernel, &dims, &args, stream)),
        Call::CreateStream => handle(context.create_stream().map(|s| s.0)),
        Call::DestroyStream { stream } => {
            context.destroy_stream(stream);
            Ok(Reply::Done)
        }
        Call::Synchronize { stream } => unit(context.synchronize(stream)),
        _ => Err(WireError::new(ErrorKind::Internal, "a bulk copy's call outside its copy")),
    };
    match reply {
        Ok(reply) => (reply, payload),
        Err(e) => (Reply::Failed(e), Vec::new()),
    }
}
