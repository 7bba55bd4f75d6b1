//! The process's state: the session with the resource manager, the devices it gave, and the
//! handles the program holds.
//!
//! The session opens at `cuInit` (the CUDA runtime calls it first) or `nvmlInit`, and is
//! finalized when the process exits (`atexit`), so that a program that never frees anything
//! leaves nothing held. A child forked after CUDA started cannot use it (NVIDIA's driver refuses
//! one too); a child forked when only NVML had opened it forgets its parent's and opens its own,
//! as NVIDIA's NVML starts no CUDA (PyTorch's `device_count` asks NVML so that its
//! `DataLoader` and its users' workers may fork and then use CUDA).
//! Handles the program gets are the addresses of records kept in a [`Registry`]: every call
//! looks its handles up there first.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Once};

use ac_frontend::{Accelerator, DeviceBuffer, DeviceInfo, DeviceKind, Session, SessionOptions};
use ac_proto::arm::JobAuth;
use tokio::runtime::Runtime;

use crate::error::{code, CuResult, Error};

/// One CUDA device of the program: an accelerator of its job.
#[derive(Debug)]
pub struct Device {
    /// The accelerator's id (`host/device`).
    pub id: String,
    /// Its connection.
    pub acc: Accelerator,
    /// What the session learned at open.
    pub info: DeviceInfo,
    /// A UUID for it, stable for the accelerator's id.
    pub uuid: [u8; 16],
    /// Its place among the job's accelerators on this node ([`Shim::node`]).
    pub slot: usize,
    /// Its primary context (the only kind of context the shim keeps).
    pub context: Arc<Context>,
}

/// One of the job's accelerators on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Its id (`host/device`).
    pub id: String,
    /// Its CUDA ordinal in this process: `None` where `CUDA_VISIBLE_DEVICES` leaves it out (the
    /// process holds no session on it) or it is not a CUDA device.
    pub ordinal: Option<usize>,
}

/// A context: the shim keeps one per device, its primary context.
#[derive(Debug)]
pub struct Context {
    /// The device's ordinal.
    pub device: usize,
    /// Context-local storage of the runtime (its export table), by key.
    pub storage: Mutex<HashMap<usize, usize>>,
}

/// One allocation, by its device address.
#[derive(Debug, Clone)]
pub struct Allocation {
    /// The device's ordinal.
    pub device: usize,
    /// Bytes.
    pub size: u64,
    /// The buffer (freed when the last reference goes, unless it is a module's variable).
    pub buffer: Arc<DeviceBuffer<u8>>,
    /// The image (module or library handle) whose variable this is: `cuMemFree` refuses it,
    /// and it goes when the image is unloaded. `None`: an allocation of the program's.
    pub variable_of: Option<usize>,
    /// The context the program created (`cuCtxCreate`) that was current when `cuMemAlloc` made
    /// it: it goes when that context is destroyed. `None`: a primary context's, or no context's.
    pub context: Option<usize>,
}

/// The session and everything opened with it.
#[derive(Debug)]
pub struct Shim {
    /// Drives every connection; program threads block on it.
    pub rt: Runtime,
    /// The program's CUDA devices, in ordinal order.
    pub devices: Vec<Device>,
    /// The job's accelerators on this node, as NVML lists a node's GPUs: all of them, whichever
    /// this process sees (`AC_Init`'s in its order, then `AC_GET`'s).
    pub node: Vec<Slot>,
    /// The session, until the process exits.
    session: Mutex<Option<(Session, Option<ac_frontend::DynamicSet>)>>,
    /// The session's token where its job is the program's own (an ad-hoc job, `ARM_ACPN`, or
    /// one joined with a token): a child forked before CUDA started joins the same job with
    /// it, as an MPI rank joins rank 0's, rather than making a job of its own. Read without a
    /// lock, in the fork's child handler.
    job_token: Option<String>,
    /// Allocations, by (device, start address).
    pub memory: Mutex<BTreeMap<(usize, u64), Allocation>>,
}

/// How long the exit may spend giving the job's accelerators back; past it, the manager's
/// lease (or the backend's hold) reclaims them, and the program still exits.
const EXIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The session as it opened, or why it could not: `(code, why)`.
type Opened = Result<Shim, (u32, String)>;

/// The opened session (leaked: it lives until the process ends), null until it opens. Not a
/// `OnceLock`: a child forked before CUDA started clears it ([`after_fork_in_child`]).
static SHIM: AtomicPtr<Opened> = AtomicPtr::new(std::ptr::null_mut());
/// Whether the session is [`CLOSED`], [`OPENING`] (one thread opens it, the others wait) or
/// [`OPEN`]. An atomic rather than a lock: a child forked while a thread of its parent opened
/// the session has no such thread, and a lock it held would never be released.
static STATE: AtomicU8 = AtomicU8::new(CLOSED);
const CLOSED: u8 = 0;
const OPENING: u8 = 1;
const OPEN: u8 = 2;
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// Set when CUDA starts in this process (`cuInit`, or a library's handle made for a device): a
/// child forked after it cannot open a session of its own, as NVIDIA's driver refuses a child
/// forked after CUDA started (cuBLAS, cuFFT and PyTorch count on that refusal being CUDA's
/// `NOT_INITIALIZED`). NVML alone does not set it.
static CUDA_STARTED: AtomicBool = AtomicBool::new(false);
/// Set in a child forked after CUDA started (`pthread_atfork`): it has the parent's sockets but
/// none of its runtime's threads, so the session is not its to use or to close.
static FORKED: AtomicBool = AtomicBool::new(false);
/// In a child forked before CUDA started: the token of its parent's session, where the
/// parent's job was its own (`Shim::job_token`); the child's session joins that job.
static PARENT_JOB_TOKEN: AtomicPtr<String> = AtomicPtr::new(std::ptr::null_mut());
/// Set in a child forked before CUDA started whose parent had opened the session: it opens
/// the job's static accelerators alone (`AC_GET` was its parent's to ask: a pool of workers
/// asking N more each would take N a worker).
static FORKED_FROM_SESSION: AtomicBool = AtomicBool::new(false);

/// The child's half of `fork`: refused CUDA if its parent had started CUDA; otherwise (NVML
/// alone, or nothing, had opened the session) it forgets the parent's session, which stays the
/// parent's (never closed or freed here), and opens its own when it first asks.
extern "C" fn after_fork_in_child() {
    // Children forked at once would otherwise draw the same random numbers on this thread,
    // where quinn draws its connection ids: two such children's handshakes with one manager
    // share an id, and one of them is lost. Nothing uses the generator during the fork; reseeding
    // reads the system's random bytes (a system call) and may allocate its thread-local state
    // once, which glibc's allocator allows in a child after `fork`.
    let _ = rand::rng().reseed();
    crate::children::in_child();
    if CUDA_STARTED.load(Ordering::Acquire) {
        FORKED.store(true, Ordering::Release);
    } else {
        // Lock-free reads only: a parent's thread may have held any lock at the fork.
        if let Some(Ok(parent)) = opened_so_far() {
            FORKED_FROM_SESSION.store(true, Ordering::Release);
            if let Some(token) = &parent.job_token {
                PARENT_JOB_TOKEN.store(token as *const String as *mut String, Ordering::Release);
            }
        }
        SHIM.store(std::ptr::null_mut(), Ordering::Release);
        STATE.store(CLOSED, Ordering::Release);
    }
}

/// The fork's prepare handler: a pipe for a child that may open a session of its own, through
/// which its parent learns of its death ([`crate::children`]).
extern "C" fn before_fork() {
    if children_open_their_own().is_some() {
        crate::children::prepare_pipe();
    }
}

/// The fork's parent handler: the child's pipe watched on the session's runtime.
extern "C" fn after_fork_in_parent() {
    let parent = children_open_their_own().map(|shim| shim as &'static dyn crate::children::Parent);
    crate::children::keep_reading_end(parent);
}

/// The options of this process's session: the environment's, except that a child forked from
/// a program with a job of its own joins that job (the environment would make it a new ad-hoc
/// job, which would wait for accelerators its parent holds).
fn session_options() -> Result<SessionOptions, String> {
    let mut options = SessionOptions::from_env().map_err(|e| format!("no accelerators: {e}"))?;
    // SAFETY: null, or a string of the parent's leaked `Shim`, which is never freed.
    let parent = unsafe { PARENT_JOB_TOKEN.load(Ordering::Acquire).as_ref() };
    if let (JobAuth::AdHoc { .. }, Some(token)) = (&options.job, parent) {
        options.job = JobAuth::SameJob { token: token.clone() };
    }
    Ok(options)
}

/// Registers the fork and exit handlers, once per process (a forked child inherits both).
fn register_handlers() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registering plain `extern "C" fn`s with the C library, once.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child));
            libc::atexit(finalize_at_exit);
        }
    });
}

/// The refusal of every call in a forked child.
fn forked() -> Error {
    Error::said(code::NOT_INITIALIZED, "a child forked after CUDA started cannot use its parent's session")
}

/// Starts CUDA: opens the session (once), the job's static accelerators plus `AC_GET=N` more.
pub fn init() -> CuResult<&'static Shim> {
    CUDA_STARTED.store(true, Ordering::Release);
    open_session()
}

/// Opens the session for NVML (once), without starting CUDA: a child forked after it opens
/// its own.
pub fn init_for_nvml() -> CuResult<&'static Shim> {
    open_session()
}

fn open_session() -> CuResult<&'static Shim> {
    if FORKED.load(Ordering::Acquire) {
        return Err(forked());
    }
    match opened() {
        Ok(shim) => Ok(shim),
        Err((code, why)) => Err(Error::said(*code, why.clone())),
    }
}

/// The session as opened, by this call if it is the first.
fn opened() -> &'static Opened {
    let mut wait = std::time::Duration::from_millis(1);
    loop {
        match STATE.compare_exchange(CLOSED, OPENING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // A panic in the opening (a bug) is an answer too: waiters must not wait for ever.
                let outcome = std::panic::catch_unwind(open).unwrap_or_else(|_| {
                    Err((
                        code::NO_DEVICE,
                        "the session's opening failed (a bug in the shim: see its panic above)".into(),
                    ))
                });
                let opened: &'static Opened = Box::leak(Box::new(outcome));
                SHIM.store(opened as *const Opened as *mut Opened, Ordering::Release);
                STATE.store(OPEN, Ordering::Release);
                if let Ok(shim) = opened {
                    let tickets = shim.devices.iter().map(|d| d.acc.ticket()).collect();
                    crate::children::report_opened(tickets, shim.session_token());
                }
                return opened;
            }
            // SAFETY: set before `OPEN` is, to a leaked box that is never freed.
            Err(OPEN) => return unsafe { &*SHIM.load(Ordering::Acquire) },
            // Another thread opens it: network I/O, perhaps a wait in the manager's queue.
            Err(_) => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// The session as opened, if it was.
fn opened_so_far() -> Option<&'static Opened> {
    // SAFETY: null, or a leaked box that is never freed.
    unsafe { SHIM.load(Ordering::Acquire).as_ref() }
}

/// The shim while a child forked now may open a session of its own: the session is open (NVML
/// opened it), CUDA has not started, and the process is not exiting.
fn children_open_their_own() -> Option<&'static Shim> {
    let quiet =
        !CUDA_STARTED.load(Ordering::Acquire) && !FORKED.load(Ordering::Acquire) && !FINALIZED.load(Ordering::Acquire);
    match opened_so_far() {
        Some(Ok(shim)) if quiet => Some(shim),
        _ => None,
    }
}

/// The shim, once `cuInit` succeeded and before the process's exit finalized it.
pub fn shim() -> CuResult<&'static Shim> {
    if FINALIZED.load(Ordering::Acquire) {
        return Err(Error::Code(code::DEINITIALIZED));
    }
    if FORKED.load(Ordering::Acquire) {
        return Err(forked());
    }
    match opened_so_far() {
        Some(Ok(shim)) => Ok(shim),
        _ => Err(Error::Code(code::NOT_INITIALIZED)),
    }
}

fn open() -> Opened {
    register_handlers();
    ac_frontend::set_kernel_output(ac_frontend::print_through_c_stdout);
    let no_device = |why: String| (code::NO_DEVICE, why);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ac-cuda")
        .enable_all()
        .build()
        .map_err(|e| no_device(format!("cannot start the I/O runtime: {e}")))?;
    if std::env::var_os("ARM_ADDR").is_none() && std::env::var_os("AC_BACKEND_ADDR").is_some() {
        return open_direct(rt);
    }
    let options = session_options().map_err(no_device)?;
    let own_job = matches!(options.job, JobAuth::AdHoc { .. } | JobAuth::SameJob { .. });
    // Read before the session opens: a bad value leaves nothing held at the manager.
    let wanted_extra = requested_extra().map_err(no_device)?;
    let wanted_extra = if FORKED_FROM_SESSION.load(Ordering::Acquire) { 0 } else { wanted_extra };
    // Sessions only on the accelerators `CUDA_VISIBLE_DEVICES` names, in its order; the node's
    // others are kept by id for NVML.
    let mut node = Vec::new();
    let session = match crate::visible::from_env() {
        None => rt.block_on(Session::init(options)),
        Some(spec) => rt.block_on(Session::init_selecting(options, |ids| {
            node = ids.to_vec();
            crate::visible::select(&spec, ids)
        })),
    };
    let session = session.map_err(|e| no_device(format!("AC_Init failed: {e}")))?;
    let mut handles: Vec<(String, Accelerator)> =
        session.accelerators().iter().map(|h| (h.id.clone(), h.acc.clone())).collect();
    if node.is_empty() {
        node = handles.iter().map(|(id, _)| id.clone()).collect();
    }
    let extra = match wanted_extra {
        0 => None,
        n => match rt.block_on(session.get_or_why(ac_frontend::GetRequest::new(n))) {
            Ok(Ok(set)) => {
                handles.extend(set.handles.iter().map(|h| (h.id.clone(), h.acc.clone())));
                Some(set)
            }
            Ok(Err(why)) => {
                eprintln!("ac-cuda: AC_GET={n}: rejected: {why}");
                None
            }
            Err(e) => {
                eprintln!("ac-cuda: AC_GET={n}: {e}");
                None
            }
        },
    };
    if let Some(set) = &extra {
        node.extend(set.handles.iter().map(|h| h.id.clone()));
    }
    let (devices, node) = place(handles, node);
    if devices.is_empty() {
        let _ = rt.block_on(session.finalize());
        return Err(no_device(
            "the job holds no CUDA accelerator on this node (AC_Init gave none; AC_GET asks for more)".into(),
        ));
    }
    let job_token = own_job.then(|| session.token().to_string());
    Ok(Shim { rt, devices, node, session: Mutex::new(Some((session, extra))), job_token, memory: Mutex::default() })
}

/// The program's CUDA devices, in the order of `opened` (the accelerators it holds sessions on),
/// and the node's slots (`node`: every accelerator of the job here, by id), each with the
/// ordinal its device got. An opened accelerator that is not a CUDA device has no slot, as a
/// node's NVML lists GPUs alone (one the process did not open is listed: its kind is not known).
fn place(opened: Vec<(String, Accelerator)>, node: Vec<String>) -> (Vec<Device>, Vec<Slot>) {
    let mut slots: Vec<Slot> = node.into_iter().map(|id| Slot { id, ordinal: None }).collect();
    let mut devices: Vec<Device> = Vec::new();
    for (id, acc) in opened {
        if acc.info().kind != DeviceKind::Cuda {
            slots.retain(|s| s.id != id);
            continue;
        }
        let ordinal = devices.len();
        let slot = match slots.iter().position(|s| s.id == id && s.ordinal.is_none()) {
            Some(slot) => slot,
            None => {
                slots.push(Slot { id: id.clone(), ordinal: None });
                slots.len() - 1
            }
        };
        slots[slot].ordinal = Some(ordinal);
        let context = Arc::new(Context { device: ordinal, storage: Mutex::default() });
        devices.push(Device { uuid: crate::uuid::of(&id), info: acc.info().clone(), id, slot, acc, context });
    }
    (devices, slots)
}

/// One backend's device, named by the environment (`AC_BACKEND_ADDR`, `AC_CA_CERT`, `AC_DEVICE`,
/// as the SDK's `ConnectOptions::from_env`), with no resource manager: for a workstation or a
/// check of a GPU host (`scripts/gpu-check`), where the backend serves whoever reaches it.
fn open_direct(rt: Runtime) -> Opened {
    let no_device = |why: String| (code::NO_DEVICE, why);
    let options = ac_frontend::ConnectOptions::from_env().map_err(|e| no_device(format!("AC_BACKEND_ADDR: {e}")))?;
    let acc = rt.block_on(Accelerator::connect(&options)).map_err(|e| no_device(format!("{}: {e}", options.addr)))?;
    if acc.info().kind != DeviceKind::Cuda {
        return Err(no_device(format!("the device at {} is not a CUDA device", options.addr)));
    }
    let id = format!("{}/{}", options.addr, acc.info().index);
    if let Some(spec) = crate::visible::from_env() {
        crate::visible::select(&spec, std::slice::from_ref(&id)).map_err(no_device)?;
    }
    let (devices, node) = place(vec![(id.clone(), acc)], vec![id]);
    Ok(Shim { rt, devices, node, session: Mutex::new(None), job_token: None, memory: Mutex::default() })
}

/// `AC_GET`: how many accelerators to ask for at start, beyond the static ones.
fn requested_extra() -> Result<u32, String> {
    match std::env::var("AC_GET") {
        Err(_) => Ok(0),
        Ok(v) if v.trim().is_empty() => Ok(0),
        Ok(v) => v.trim().parse().map_err(|_| format!("AC_GET={v}: not a count of accelerators")),
    }
}

/// The process exits: frees what the job was given for it (`AC_Free`, `AC_Finalize`), or closes
/// its sessions on a backend reached directly. Calls
/// after this (the runtime's own exit handlers) answer `CUDA_ERROR_DEINITIALIZED`.
extern "C" fn finalize_at_exit() {
    FINALIZED.store(true, Ordering::Release);
    let Some(Ok(shim)) = opened_so_far() else { return };
    if FORKED.load(Ordering::Acquire) {
        return;
    }
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let finalize = async move {
        // As a context's destruction does: what the kernels printed since the program's last
        // synchronization comes out now, every device at once, within half the exit's time (a
        // device that does not answer by then, or a session in an outage, is left).
        let mut synchronizing = tokio::task::JoinSet::new();
        for device in &shim.devices {
            let acc = device.acc.clone();
            synchronizing.spawn(async move { acc.synchronize().await });
        }
        let synchronized =
            tokio::time::timeout(EXIT_LIMIT / 2, async { while synchronizing.join_next().await.is_some() {} });
        // Meanwhile children forked after NVML that died without closing their sessions are
        // ended, through this process's session at the manager (taken only then).
        let _ = tokio::join!(synchronized, crate::children::settle_at_exit(EXIT_LIMIT / 2));
        let taken = shim.session.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some((session, extra)) => {
                if let Some(set) = extra {
                    let _ = session.free(set).await;
                }
                match session.finalize().await {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("ac-cuda: AC_Finalize at exit: {e}");
                        false
                    }
                }
            }
            // No manager (`AC_BACKEND_ADDR`): the backend learns of the exit from the
            // connection's close; unclosed, it would hold the session for a resumption that
            // never comes, and a device serving its session limit would refuse the next run.
            None => {
                for device in &shim.devices {
                    device.acc.clone().close().await;
                }
                true
            }
        }
    };
    // On a thread of its own: the exiting thread's thread-locals (the runtime's among them)
    // are already destroyed when atexit handlers run.
    let limited = async move {
        match tokio::time::timeout(EXIT_LIMIT, finalize).await {
            // A child forked after NVML: its parent has nothing left to end.
            Ok(true) => crate::children::report_closed(),
            Ok(false) => {}
            Err(_) => {
                eprintln!(
                    "ac-cuda: giving the accelerators back at exit took over {EXIT_LIMIT:?}: left to their leases"
                )
            }
        }
    };
    let finished = std::thread::spawn(move || shim.rt.block_on(limited)).join();
    if finished.is_err() {
        eprintln!("ac-cuda: AC_Finalize at exit failed");
    }
}

impl Shim {
    /// The token of the process's session at the resource manager (none without one).
    pub(crate) fn session_token(&self) -> Option<String> {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.as_ref().map(|(s, _)| s.token().to_string())
    }

    /// Device `ordinal`, or `CUDA_ERROR_INVALID_DEVICE`.
    pub fn device(&self, ordinal: i32) -> CuResult<&Device> {
        usize::try_from(ordinal).ok().and_then(|i| self.devices.get(i)).ok_or(Error::Code(code::INVALID_DEVICE))
    }

    /// Runs `future` to its end on the shim's runtime (from a program thread).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.rt.block_on(future)
    }

    /// The allocation holding `address` on `device` and the offset into it, if `len` bytes
    /// from there lie inside it.
    pub fn find(&self, device: usize, address: u64, len: u64) -> CuResult<(Allocation, u64)> {
        let memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        let (&(_, start), alloc) = memory.range((device, 0)..=(device, address)).next_back().ok_or_else(|| {
            Error::said(code::INVALID_VALUE, format!("{address:#x} is not device memory of this program"))
        })?;
        let offset = address - start;
        if offset.checked_add(len).is_none_or(|end| end > alloc.size) {
            return Err(Error::said(
                code::INVALID_VALUE,
                format!("{len} bytes at {address:#x} run past the allocation of {} bytes at {start:#x}", alloc.size),
            ));
        }
        Ok((alloc.clone(), offset))
    }

    /// The device whose memory holds `address` (the current device first: two remote GPUs may
    /// hand out the same addresses).
    pub fn device_of(&self, address: u64, preferred: Option<usize>) -> Option<usize> {
        let memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        let holds =
            |d: usize| memory.range((d, 0)..=(d, address)).next_back().is_some_and(|(&(_, s), a)| address < s + a.size);
        preferred.filter(|&d| holds(d)).or_else(|| (0..self.devices.len()).find(|&d| holds(d)))
    }
}

impl crate::children::Parent for Shim {
    fn runtime(&self) -> &Runtime {
        &self.rt
    }

    fn finalize_other(&self, token: String) -> Option<crate::children::Finalizing> {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.as_ref().map(|(s, _)| Box::pin(s.finalize_other(token)) as crate::children::Finalizing)
    }
}

/// Records the program holds by handle: the handle is the record's address, and is looked up
/// here before use, so a stale or forged handle is an error, never a dereference.
#[derive(Debug)]
pub struct Registry<T> {
    live: Mutex<HashMap<usize, Arc<T>>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self { live: Mutex::default() }
    }
}

impl<T> Registry<T> {
    /// Keeps `record` and answers its handle.
    pub fn insert(&self, record: T) -> usize {
        let record = Arc::new(record);
        let handle = Self::handle_of(&record);
        self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(handle, record);
        handle
    }

    /// The record of `handle`, or `CUDA_ERROR_INVALID_HANDLE`.
    pub fn get(&self, handle: usize) -> CuResult<Arc<T>> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&handle)
            .cloned()
            .ok_or(Error::Code(code::INVALID_HANDLE))
    }

    /// The handle a kept record answers to.
    pub fn handle_of(record: &Arc<T>) -> usize {
        Arc::as_ptr(record) as usize
    }

    /// Every record kept, with its handle.
    pub fn all(&self) -> Vec<(usize, Arc<T>)> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(&h, r)| (h, r.clone())).collect()
    }

    /// Keeps `record` again under its handle (a record released by the program that still
    /// lived elsewhere, and is taken back).
    pub fn reinsert(&self, record: Arc<T>) -> usize {
        let handle = Self::handle_of(&record);
        self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(handle, record);
        handle
    }

    /// Forgets `handle`, answering its record.
    pub fn remove(&self, handle: usize) -> CuResult<Arc<T>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&handle).ok_or(Error::Code(code::INVALID_HANDLE))
    }
}

/// Writes `value` through an out-pointer from the program, or answers `CUDA_ERROR_INVALID_VALUE`
/// for a null one.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    out.write(value);
    Ok(())
}
