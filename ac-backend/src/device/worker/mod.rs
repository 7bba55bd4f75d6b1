//! Process isolation: each session's context lives in a worker process of its own.
//!
//! # Why
//! On a GPU, a kernel fault (an illegal address, a trap) is sticky for the whole process, not
//! only for the CUDA context it happened in: on an H100 (driver 580.159.04, `scripts/gpu-check`,
//! 2026-11-26) the fault in one session's context made the next `cuMemAlloc` of another
//! session's context, and `cuCtxCreate` itself, fail with `CUDA_ERROR_ILLEGAL_ADDRESS`, as
//! NVIDIA's documentation allows ("the process must be terminated and relaunched"). Contexts of
//! one process therefore cannot keep one session's fault from the others; processes can.
//!
//! # How
//! [`WorkerDevice`] wraps the backend's own [`Device`] (which answers `info` and opens nothing
//! else). Each `open_context` starts `ac-backend --session-worker INDEX` with the device's
//! settings; the worker opens one context ([`serve`]) and answers [`wire::Call`]s on its stdin
//! and stdout. [`WorkerContext`] is the session's [`Context`]: each call is a frame to the
//! worker and, unless it is a release, a wait for the reply; calls from several threads are in
//! flight at once (ids match replies to callers). A bulk copy runs in the worker through its
//! context's own `upload` or `download` (the CUDA device's pinned pipeline); its pieces cross a
//! shared memory region ([`shared`], [`transfer`]), several in flight at once.
//!
//! When the session ends its context is dropped: the worker's stdin closes, the worker releases
//! its context and exits, and is killed if it has not after [`EXIT_GRACE`] (a kernel that never
//! ends). When the worker dies, every call in flight and every later one answers
//! `ContextLost`, naming how it ended; nothing else in the backend notices.
//!
//! # A worker dies with its daemon
//! A daemon that crashes (or is killed with SIGKILL) cleans nothing up, and a worker that is
//! not reading its input (its reading thread runs launches, which wait in the driver behind a
//! hung GPU's full queue) would never see it close, and keep its GPU memory. Each worker is
//! therefore started with `PR_SET_PDEATHSIG(SIGKILL)` (`start.rs`), and checks in
//! the child, after that `prctl`, that its parent is still the daemon (which may have died
//! between the fork and the `prctl`). The kernel sends that signal when the *thread* that
//! forked the child ends (prctl(2)), not the process: workers are forked by one thread that
//! lives as long as the daemon (`start::spawner`), never by the blocking-pool thread that opens the
//! session, which Tokio ends after 10 s idle.
//!
//! # No waits on the async threads
//! The backend calls a [`Context`] from async code too (`session/serve_control/`: device info, alloc,
//! kernel lookup, stream creation; `network/bulk/` through [`transfer`]: copies, their pieces and
//! their end, which waits for the device to finish). Every call here waits, for the worker's
//! reply or for room in its pipe, and goes through [`blocking`]: on a Tokio worker thread,
//! `block_in_place` first hands the thread's other tasks to another thread, so that many
//! sessions waiting for a slow device (32 copying at once in `tests/tests/e2e/worker_path.rs`) do
//! not stall the host's network handling and every other session's calls. The trait stays
//! synchronous (the CPU device and CUDA's stream workers call it from plain threads, where
//! [`blocking`] is a plain call); an async reply channel would have had to change every caller.
//!
//! # Cost
//! Per session: a process start and the driver's initialization (the session runs in the
//! worker's primary context, so no more device memory than a context; measured by
//! `scripts/gpu-check`, see `BENCHMARKS.md`). Per call: a round trip over two pipes, and from a
//! Tokio worker thread a `block_in_place` hand-over (once per call or per 1 MiB piece). Per byte
//! copied: one more copy on the host than with the context in the backend's process (into or
//! out of a shared slot); through the pipes, before the shared region, it was three more
//! (`BENCHMARKS.md`, "Session workers' copies through shared memory").

mod ending;
mod fds;
mod printed;
mod replies;
pub mod serve;
pub mod shared;
mod start;
mod transfer;
pub mod wire;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ac_proto::backend::{
    ArrayCopy, ArraySpec, ContextLimit, DeviceInfo, ErrorKind, JitOption, KernelAttributes, KernelSetting, LaunchDims,
    LinkInput, ModuleSource, Sampler, Telemetry, TensorMapSpec, TextureResource, WireError,
};

use self::ending::how_it_ended;
use self::fds::Lane;
use self::replies::deliver_replies;
use self::shared::Bays;
use self::start::{hand_down, spawn, tie_to_this_process, widen_pipe};
use self::transfer::{WorkerDownload, WorkerUpload};
use self::wire::{expect_done, fill, read_frame, unexpected, worker_gone, write_frame, Call, Frame, Reply};

use crate::device::{
    blocking, Context, Device, DeviceArg, DeviceMem, DeviceModule, DeviceResult, DeviceStream, Download, Kernel,
    LaunchMode, Limited, Linked, Upload,
};

/// How long a worker may take to exit once its session has ended before it is killed.
pub const EXIT_GRACE: Duration = Duration::from_secs(10);

/// How to start a worker: the `ac-backend` program and the arguments that give it the
/// backend's device settings (`--session-worker INDEX` is added per device).
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The `ac-backend` executable.
    pub program: PathBuf,
    /// Device settings, as flags.
    pub args: Vec<OsString>,
    /// Variables added to the worker's environment (an MPS client's, `crate::device::mps`).
    pub env: Vec<(OsString, OsString)>,
}

/// A device whose sessions each run in a worker process.
#[allow(missing_debug_implementations)] // holds a `dyn Device`
pub struct WorkerDevice {
    inner: Arc<dyn Device>,
    index: u32,
    command: WorkerCommand,
}

impl WorkerDevice {
    /// Serves `inner`'s sessions (device `index`) from workers started with `command`.
    pub fn new(inner: Arc<dyn Device>, index: u32, command: WorkerCommand) -> Self {
        Self { inner, index, command }
    }
}

impl Device for WorkerDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    /// Starts a worker and waits for its context: the backend calls this on a blocking task;
    /// [`blocking`] covers any other caller.
    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        let started = blocking(|| WorkerContext::start(&self.command, self.index, self.inner.info()));
        Ok(Arc::new(started?))
    }

    fn telemetry(&self) -> DeviceResult<Telemetry> {
        self.inner.telemetry()
    }
}

/// A reply, or why none will come.
type Answer = DeviceResult<(Reply, Vec<u8>)>;

/// Callers waiting for replies, and whether the worker has ended.
#[derive(Default)]
struct Waiters {
    by_id: HashMap<u32, SyncSender<Answer>>,
    /// Why the worker ended, once it has.
    ended: Option<String>,
    /// What the session's kernels printed and the session has not taken yet, once it forwards
    /// it ([`Context::forward_printed`]; else it is dropped).
    printed: Option<printed::Kept>,
}

/// One session's context, in a worker process.
#[allow(missing_debug_implementations)] // pipes and channels: nothing to show
pub struct WorkerContext {
    input: Mutex<Option<BufWriter<ChildStdin>>>,
    waiters: Arc<Mutex<Waiters>>,
    child: Arc<Mutex<Child>>,
    next_id: AtomicU32,
    /// The shared region bulk copies cross (none if it could not be made: the pipes carry them).
    bays: Option<Arc<Bays>>,
    /// The socket shareable handles' descriptors cross (none if it could not be made).
    fds: Option<Lane>,
    finishes_in_call: bool,
    /// What `info` answers if the worker cannot.
    last_info: DeviceInfo,
}

impl WorkerContext {
    /// Starts a worker for device `index` and waits until its context is open.
    fn start(command: &WorkerCommand, index: u32, last_info: DeviceInfo) -> DeviceResult<Self> {
        let cannot = |why: String| WireError::new(ErrorKind::Device, format!("cannot start a session worker: {why}"));
        let mut worker = Command::new(&command.program);
        worker.args(&command.args).arg("--session-worker").arg(index.to_string()).envs(command.env.iter().cloned());
        let bays = match Bays::create() {
            Ok(bays) => {
                hand_down(&mut worker, "--session-shared", bays.fd());
                Some(Arc::new(bays))
            }
            Err(e) => {
                tracing::warn!("no shared memory for a session worker's copies ({e}): they go through its pipes");
                None
            }
        };
        let fds = match Lane::pair() {
            Ok((lane, theirs)) => {
                hand_down(&mut worker, "--session-fds", theirs.as_raw_fd());
                Some((lane, theirs))
            }
            Err(e) => {
                tracing::warn!(
                    "no socket for a session worker's shareable handles ({e}): it cannot share physical memory"
                );
                None
            }
        };
        tie_to_this_process(&mut worker);
        worker.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = spawn(worker).map_err(|e| cannot(format!("{}: {e}", command.program.display())))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(cannot("no pipes".into()));
        };
        widen_pipe(&stdin);
        widen_pipe(&stdout);
        let mut output = BufReader::with_capacity(1 << 20, stdout);
        let finishes_in_call = match read_frame::<Reply>(&mut output) {
            Ok(Some(Frame { header: Reply::Opened { finishes_in_call }, .. })) => finishes_in_call,
            Ok(Some(Frame { header: Reply::Failed(e), .. })) => {
                let _ = child.wait();
                return Err(e);
            }
            other => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(cannot(format!("it answered {other:?} ({status})")));
            }
        };
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let child = Arc::new(Mutex::new(child));
        let (w, c) = (waiters.clone(), child.clone());
        std::thread::Builder::new()
            .name("ac-worker-replies".into())
            .spawn(move || deliver_replies(output, w, c))
            .map_err(|e| cannot(format!("no thread: {e}")))?;
        Ok(Self {
            input: Mutex::new(Some(BufWriter::with_capacity(1 << 20, stdin))),
            waiters,
            child,
            next_id: AtomicU32::new(1),
            bays,
            // The worker's end closes here once the worker has its own.
            fds: fds.map(|(lane, _theirs)| lane),
            finishes_in_call,
            last_info,
        })
    }

    /// A fresh id for a call or a bulk copy (never 0, which means "no reply").
    fn new_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed).max(1)
    }

    /// Sends `call`; with `reply`, returns where its answer will come.
    fn send(&self, call: &Call, payload: &[u8], reply: bool) -> DeviceResult<Option<Receiver<Answer>>> {
        let (id, answer) = if reply {
            let id = self.new_id();
            let (tx, rx) = sync_channel(1);
            let mut waiters = lock(&self.waiters);
            if let Some(why) = &waiters.ended {
                return Err(worker_gone(why));
            }
            waiters.by_id.insert(id, tx);
            (id, Some(rx))
        } else {
            (0, None)
        };
        let written = match lock(&self.input).as_mut() {
            Some(input) => write_frame(input, id, call, payload).and_then(|()| input.flush()),
            None => Err(std::io::Error::other("the session has ended")),
        };
        if let Err(e) = written {
            lock(&self.waiters).by_id.remove(&id);
            // A closed pipe means the worker is exiting: say how it ended.
            return Err(worker_gone(&how_it_ended(&self.child).unwrap_or_else(|| e.to_string())));
        }
        Ok(answer)
    }

    /// Sends `call` and returns where its answer will come, without waiting for it.
    fn ask(&self, call: &Call, payload: &[u8]) -> DeviceResult<Receiver<Answer>> {
        Ok(self.send(call, payload, true)?.expect("a reply was asked for"))
    }

    /// Sends `call` and waits for its answer, off the async threads ([`blocking`]).
    fn call(&self, call: &Call, payload: &[u8]) -> Answer {
        blocking(|| wait(&self.ask(call, payload)?))
    }

    /// The socket for descriptors, or why there is none.
    fn fds(&self) -> DeviceResult<&Lane> {
        let why = "this session's worker has no socket for shareable handles (see the backend's log)";
        self.fds.as_ref().ok_or_else(|| WireError::new(ErrorKind::Device, why))
    }

    /// Sends a call that returns nothing and waits for it.
    fn call_done(&self, call: &Call, payload: &[u8]) -> DeviceResult<()> {
        self.call(call, payload).and_then(|(reply, _)| expect_done(reply))
    }

    /// Sends a call that returns a handle and waits for it.
    fn call_handle(&self, call: &Call) -> DeviceResult<u64> {
        match self.call(call, &[])?.0 {
            Reply::Handle(h) => Ok(h),
            other => Err(unexpected(other)),
        }
    }

    /// Sends a release: nothing to wait for, nothing to report (the worker may be gone). The
    /// write may still wait (for the input's lock while another caller writes a large frame, or
    /// for room in the pipe), so it too goes through [`blocking`].
    fn release(&self, call: &Call) {
        blocking(|| {
            let _ = self.send(call, &[], false);
        });
    }
}

/// Waits for an answer. Its callers already hold [`blocking`] around their writes as well;
/// the wait says so again (nested, it costs nothing) so that no new caller can forget.
fn wait(answer: &Receiver<Answer>) -> Answer {
    let (reply, payload) = blocking(|| answer.recv()).unwrap_or_else(|_| Err(worker_gone("no answer")))?;
    match reply {
        Reply::Failed(e) => Err(e),
        reply => Ok((reply, payload)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Context for WorkerContext {
    fn info(&self) -> DeviceInfo {
        match self.call(&Call::Info, &[]) {
            Ok((Reply::Info(info), _)) => info,
            _ => self.last_info.clone(),
        }
    }

    fn alloc(&self, bytes: u64) -> DeviceResult<DeviceMem> {
        self.call_handle(&Call::Alloc { bytes }).map(DeviceMem)
    }

    fn free(&self, mem: DeviceMem) {
        self.release(&Call::Free { mem });
    }

    fn write(&self, dst: DeviceMem, offset: u64, data: &[u8], stream: DeviceStream) -> DeviceResult<()> {
        self.call_done(&Call::Write { dst, offset, stream }, data)
    }

    fn read(&self, src: DeviceMem, offset: u64, out: &mut [u8], stream: DeviceStream) -> DeviceResult<()> {
        let (reply, payload) = self.call(&Call::Read { src, offset, len: out.len() as u64, stream }, &[])?;
        expect_done(reply)?;
        fill(out, &payload)
    }

    fn copy(
        &self,
        dst: DeviceMem,
        dst_offset: u64,
        src: DeviceMem,
        src_offset: u64,
        len: u64,
        stream: DeviceStream,
    ) -> DeviceResult<()> {
        self.call_done(&Call::Copy { dst, dst_offset, src, src_offset, len, stream }, &[])
    }

    fn memset(&self, dst: DeviceMem, offset: u64, len: u64, value: u8, stream: DeviceStream) -> DeviceResult<()> {
        self.call_done(&Call::Memset { dst, offset, len, value, stream }, &[])
    }

    fn upload(&self, dst: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Upload + '_>> {
        let transfer = self.new_id();
        self.call_done(&Call::UploadStart { transfer, dst, offset, len }, &[])?;
        Ok(Box::new(WorkerUpload::new(self, transfer)))
    }

    fn download(&self, src: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Download + '_>> {
        let transfer = self.new_id();
        self.call_done(&Call::DownloadStart { transfer, src, offset, len }, &[])?;
        Ok(Box::new(WorkerDownload::new(self, transfer, len)))
    }

    fn load_module(&self, source: &ModuleSource, image: &[u8]) -> DeviceResult<DeviceModule> {
        let (reply, _) = self.call(&Call::LoadModule { source: source.clone() }, image)?;
        match reply {
            Reply::Handle(h) => Ok(DeviceModule(h)),
            other => Err(unexpected(other)),
        }
    }

    fn unload_module(&self, module: DeviceModule) {
        self.release(&Call::UnloadModule { module });
    }

    fn kernel(&self, module: DeviceModule, name: &str) -> DeviceResult<Kernel> {
        match self.call(&Call::Kernel { module, name: name.to_owned() }, &[])?.0 {
            Reply::Kernel(kernel) => Ok(kernel),
            other => Err(unexpected(other)),
        }
    }

    fn global(&self, module: DeviceModule, name: &str) -> DeviceResult<(DeviceMem, u64)> {
        match self.call(&Call::Global { module, name: name.to_owned() }, &[])?.0 {
            Reply::Global { mem, size } => Ok((mem, size)),
            other => Err(unexpected(other)),
        }
    }

    fn kernel_names(&self, module: DeviceModule) -> DeviceResult<Vec<String>> {
        match self.call(&Call::KernelNames { module }, &[])?.0 {
            Reply::Names(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    fn link(&self, inputs: &[(LinkInput, &[u8])], options: &[JitOption]) -> DeviceResult<Linked> {
        let (inputs, payload) = ac_proto::backend::jit_link::joined(inputs);
        match self.call(&Call::Link { inputs, options: options.to_vec() }, &payload)? {
            (Reply::Linked { info_log }, image) => Ok(Linked { image, info_log }),
            (other, _) => Err(unexpected(other)),
        }
    }

    fn launch_as(
        &self,
        kernel: &Kernel,
        dims: &LaunchDims,
        args: &[DeviceArg],
        stream: DeviceStream,
        mode: LaunchMode,
    ) -> DeviceResult<()> {
        let (kernel, dims, args) = (kernel.clone(), *dims, args.to_vec());
        let call = match mode {
            LaunchMode::Plain => Call::Launch { kernel, dims, args, stream },
            LaunchMode::Cooperative => Call::LaunchCooperative { kernel, dims, args, stream },
            LaunchMode::Clustered(cluster) => Call::LaunchClustered { kernel, dims, args, stream, cluster },
        };
        self.call_done(&call, &[])
    }

    fn encode_tensor_map(&self, spec: &TensorMapSpec<u64>) -> DeviceResult<Vec<u8>> {
        let (reply, map) = self.call(&Call::EncodeTensorMap { spec: spec.clone() }, &[])?;
        expect_done(reply).map(|()| map)
    }

    fn reserve_range(&self, bytes: u64, alignment: u64) -> DeviceResult<DeviceMem> {
        self.call_handle(&Call::ReserveRange { bytes, alignment }).map(DeviceMem)
    }

    fn create_physical(&self, bytes: u64) -> DeviceResult<u64> {
        self.call_handle(&Call::CreatePhysical { bytes })
    }

    fn release_physical(&self, handle: u64) {
        self.release(&Call::ReleasePhysical { handle });
    }

    fn export_allocation(&self, mem: DeviceMem) -> DeviceResult<Vec<u8>> {
        let (reply, handle) = self.call(&Call::ExportAllocation { mem }, &[])?;
        expect_done(reply).map(|()| handle)
    }

    fn open_allocation(&self, handle: &[u8], size: u64) -> DeviceResult<DeviceMem> {
        match self.call(&Call::OpenAllocation { size }, handle)?.0 {
            Reply::Handle(mem) => Ok(DeviceMem(mem)),
            other => Err(unexpected(other)),
        }
    }

    fn close_opened(&self, mem: DeviceMem) {
        // Waited for: the exporter's free, which follows, must find the mapping closed. A
        // worker that is gone has closed it with its process.
        let _ = self.call_done(&Call::CloseOpened { mem }, &[]);
    }

    fn export_physical(&self, handle: u64) -> DeviceResult<OwnedFd> {
        self.fds()?.export(|| self.call_done(&Call::ExportPhysical { handle }, &[]))
    }

    fn import_physical(&self, shareable: BorrowedFd<'_>, size: u64) -> DeviceResult<u64> {
        self.fds()?.import(shareable, || self.call_handle(&Call::ImportPhysical { size }))
    }

    fn map(&self, range: DeviceMem, offset: u64, bytes: u64, handle: u64) -> DeviceResult<()> {
        self.call_done(&Call::Map { range, offset, bytes, handle }, &[])
    }

    fn unmap(&self, range: DeviceMem, offset: u64, bytes: u64) -> DeviceResult<()> {
        self.call_done(&Call::Unmap { range, offset, bytes }, &[])
    }

    fn unmap_later(&self, range: DeviceMem, offset: u64, bytes: u64) {
        self.release(&Call::UnmapLater { range, offset, bytes });
    }

    fn create_array(&self, spec: &ArraySpec) -> DeviceResult<u64> {
        self.call_handle(&Call::CreateArray { spec: *spec })
    }

    fn destroy_array(&self, array: u64) {
        self.release(&Call::DestroyArray { array });
    }

    fn copy_array(&self, copy: &ArrayCopy<u64, u64>, stream: DeviceStream) -> DeviceResult<()> {
        self.call_done(&Call::CopyArray { copy: *copy, stream }, &[])
    }

    fn create_object(&self, resource: &TextureResource<u64, u64>, sampler: Option<&Sampler>) -> DeviceResult<u64> {
        self.call_handle(&Call::CreateObject { resource: *resource, sampler: sampler.copied() })
    }

    fn destroy_object(&self, object: u64, surface: bool) {
        self.release(&Call::DestroyObject { object, surface });
    }

    fn max_active_clusters(&self, kernel: &Kernel, dims: &LaunchDims, cluster: [u32; 3]) -> DeviceResult<u32> {
        match self.call(&Call::MaxActiveClusters { kernel: kernel.clone(), dims: *dims, cluster }, &[])?.0 {
            Reply::Handle(count) => Ok(u32::try_from(count).unwrap_or(u32::MAX)),
            other => Err(unexpected(other)),
        }
    }

    fn kernel_attributes(&self, kernel: &Kernel) -> DeviceResult<KernelAttributes> {
        match self.call(&Call::KernelAttributes { kernel: kernel.clone() }, &[])?.0 {
            Reply::KernelAttributes(attributes) => Ok(attributes),
            other => Err(unexpected(other)),
        }
    }

    fn set_kernel_attribute(&self, kernel: &Kernel, setting: KernelSetting) -> DeviceResult<()> {
        self.call_done(&Call::SetKernelAttribute { kernel: kernel.clone(), setting }, &[])
    }

    fn set_limit(&self, limit: ContextLimit, value: u64) -> DeviceResult<Limited> {
        match self.call(&Call::SetLimit { limit, value }, &[])?.0 {
            Reply::Limited(limited) => Ok(limited),
            other => Err(unexpected(other)),
        }
    }

    fn launch(&self, kernel: &Kernel, dims: &LaunchDims, args: &[DeviceArg], stream: DeviceStream) -> DeviceResult<()> {
        let call = Call::Launch { kernel: kernel.clone(), dims: *dims, args: args.to_vec(), stream };
        self.call_done(&call, &[])
    }

    fn create_stream(&self) -> DeviceResult<DeviceStream> {
        self.call_handle(&Call::CreateStream).map(DeviceStream)
    }

    fn destroy_stream(&self, stream: DeviceStream) {
        self.release(&Call::DestroyStream { stream });
    }

    fn synchronize(&self, stream: DeviceStream) -> DeviceResult<()> {
        self.call_done(&Call::Synchronize { stream }, &[])
    }

    fn finishes_in_call(&self) -> bool {
        self.finishes_in_call
    }

    fn forward_printed(&self) {
        lock(&self.waiters).printed.get_or_insert_with(printed::Kept::default);
    }

    fn take_printed(&self) -> Vec<u8> {
        lock(&self.waiters).printed.as_mut().map(printed::Kept::take).unwrap_or_default()
    }
}
