//! The stand-in's model of the driver: devices, contexts, device memory, pinned host memory,
//! modules, functions, streams and events, and the work queued on streams.
//!
//! Work queued on a stream runs only when someone waits for it (the stream, an event recorded
//! after it, or a call documented to synchronize), as late as the documented contract allows:
//! a host-to-device copy reads host memory then, not when it was queued. A caller that reuses
//! a pageable or pinned source before the copy is known complete sends the new bytes, and the
//! test comparing the data fails.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::mem::MaybeUninit;

use parking_lot::MutexGuard;

use crate::{code, elf, kernels, space};

/// The lock on a driver, as a call holds it.
pub type Guard<'a> = MutexGuard<'a, Driver>;

/// Device memory of each stand-in GPU.
pub const DEVICE_MEMORY: u64 = 4 << 30;
/// Stand-in GPUs.
pub const DEVICES: i32 = 2;
/// Compute capability (major, minor) of every stand-in GPU: an H100's, so that the images
/// nvcc builds for `sm_90` are the ones a fat binary yields.
pub const COMPUTE_CAPABILITY: (u32, u32) = (9, 0);
/// Multiprocessors of each device, and the threads each holds at once, as on an H100.
pub const MULTIPROCESSORS: u64 = 132;
pub const THREADS_PER_MULTIPROCESSOR: u64 = 2048;
/// A context's limits until set (`cuCtxSetLimit`): stack, printf buffer, heap, the driver's
/// defaults.
pub const DEFAULT_LIMITS: [usize; 3] = [1 << 10, 1 << 20, 8 << 20];

pub type Result<T> = std::result::Result<T, u32>;

/// One queued operation.
#[derive(Debug)]
pub enum Op {
    /// Host (a raw address, read when the copy runs) to device.
    HtoD { dst: u64, src: usize, len: usize },
    /// Device to host (written when the copy runs).
    DtoH { dst: usize, src: u64, len: usize },
    /// Device to device.
    DtoD { dst: u64, src: u64, len: usize },
    /// Sets bytes.
    Memset { dst: u64, value: u8, len: usize },
    /// A kernel with its argument bytes (copied at launch, as the driver does), its shape and
    /// its module's variables.
    Launch { name: String, args: Vec<Vec<u8>>, shape: kernels::Shape, variables: Variables },
    /// An event's record: nothing to do but be reached.
    Record,
    /// A stream-ordered free.
    Free { address: u64 },
}

#[derive(Debug)]
pub struct Context {
    pub device: i32,
    pub lost: Option<u32>,
    pub default_stream: u64,
    /// References held through `cuDevicePrimaryCtxRetain` (primary contexts only).
    pub primary_refs: Option<u32>,
    /// What its kernels printed since the last synchronization (the device's printf buffer).
    pub printed: Vec<u8>,
    /// Its stack size, printf buffer and heap (`cuCtxSetLimit`).
    pub limits: [usize; 3],
}

#[derive(Debug)]
pub struct Allocation {
    pub context: u64,
    /// Its contents.
    pub bytes: Storage,
    /// Launches running now that hold host pointers into it (`run::SharedMemory::resolve`).
    pub users: u32,
}

impl Allocation {
    /// `len` stale bytes, and the guard after them.
    pub fn new(context: u64, len: usize) -> Self {
        let mut bytes = Vec::with_capacity(len + GUARD_LEN);
        bytes.resize(len, STALE_BYTE);
        bytes.spare_capacity_mut()[..GUARD_LEN].fill(MaybeUninit::new(GUARD_BYTE));
        Allocation { context, bytes: Storage::Heap(bytes), users: 0 }
    }

    /// Whether the guard past its end still holds [`GUARD_BYTE`]s (a kernel that wrote past
    /// the allocation changed it); restores it.
    pub fn guard_intact(&mut self) -> bool {
        let Storage::Heap(bytes) = &mut self.bytes else { return true };
        let guard = &mut bytes.spare_capacity_mut()[..GUARD_LEN];
        // SAFETY: every guard byte was written in `new` and since only by `fill` below or by a
        // kernel's stores: all initialized.
        let intact = guard.iter().all(|b| unsafe { b.assume_init() } == GUARD_BYTE);
        guard.fill(MaybeUninit::new(GUARD_BYTE));
        intact
    }
}

/// What an allocation's bytes are.
#[derive(Debug)]
pub enum Storage {
    /// Its own; the capacity past them holds [`GUARD_LEN`] guard bytes.
    Heap(Vec<u8>),
    /// A reserved range's, of which only the mapped bytes may be touched (`vmm.rs`).
    Range(space::Space),
    /// A memory file's, shared with other processes (`ipc.rs`).
    Shared(space::Shared),
}

impl std::ops::Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Heap(bytes) => bytes,
            Storage::Range(space) => space.bytes(),
            Storage::Shared(shared) => shared.bytes(),
        }
    }
}

impl std::ops::DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(bytes) => bytes,
            Storage::Range(space) => space.bytes_mut(),
            Storage::Shared(shared) => shared.bytes_mut(),
        }
    }
}

#[derive(Debug)]
pub struct Stream {
    pub context: u64,
    pub queue: VecDeque<(u64, Op)>,
    /// A kernel of this stream is computing on some thread, with the lock released: its
    /// stream's later work waits for it, and so does whoever waits for the stream.
    pub running: bool,
}

impl Stream {
    /// A stream of `context` with nothing queued.
    pub fn new(context: u64) -> Self {
        Self { context, queue: VecDeque::new(), running: false }
    }
}

#[derive(Debug)]
pub struct Event {
    pub context: u64,
    /// The stream and position of its last record.
    pub recorded: Option<(u64, u64)>,
}

/// A module's variables: the address and size of each, by name.
pub type Variables = std::sync::Arc<HashMap<String, (u64, usize)>>;

/// Where a module's variables are, and the allocations that hold them.
#[derive(Debug, Default)]
pub struct Placed {
    /// Each variable.
    pub variables: Variables,
    /// The allocations holding them, freed with the module.
    pub holdings: Vec<u64>,
}

/// Variables placed so far, and the allocations holding them.
type Placing = (HashMap<String, (u64, usize)>, Vec<u64>);

/// Where one of a module's `__managed__` variables starts in their shared allocation: a
/// multiple of this, as for any type's alignment.
const PACKED_ALIGN: usize = 16;

#[derive(Debug)]
pub struct Module {
    pub context: u64,
    pub kernels: Vec<String>,
    /// Its `__device__`, `__constant__` and `__managed__` variables, in allocations of the
    /// module's context that go when the module is unloaded.
    pub variables: Placed,
    /// Its kernels' static shared memory, bytes, by name (none listed: none).
    pub static_shared: HashMap<String, u32>,
}

#[derive(Debug)]
pub struct Function {
    pub context: u64,
    pub module: u64,
    pub name: String,
    /// Its static shared memory, bytes.
    pub static_shared: u32,
    /// The dynamic shared memory a launch may ask for (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    pub max_dynamic_shared: u32,
    /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`: -1 until set.
    pub carveout: i32,
    /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`: clusters of up to 16 blocks.
    pub non_portable: bool,
}

/// Shared memory a block may have unless its kernel opts in to more, bytes.
pub const DEFAULT_SHARED: u32 = 48 << 10;
/// Shared memory a block may have when its kernel opts in, bytes (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` of compute capability 9.0).
pub const OPTIN_SHARED: u32 = 227 << 10;

/// Everything the stand-in holds, behind one lock.
#[derive(Debug, Default)]
pub struct Driver {
    pub initialized: bool,
    next: u64,
    next_address: u64,
    pub contexts: HashMap<u64, Context>,
    pub primaries: HashMap<i32, u64>,
    pub memory: BTreeMap<u64, Allocation>,
    /// Pinned host allocations: address -> (length, the context current when allocated).
    pub pinned: HashMap<usize, (usize, u64)>,
    pub streams: HashMap<u64, Stream>,
    pub events: HashMap<u64, Event>,
    pub modules: HashMap<u64, Module>,
    pub functions: HashMap<u64, Function>,
    /// Contract breaches seen (also printed as they happen).
    pub violations: Vec<String>,
    /// Whether `cuFuncGetParamInfo` answers (a CUDA 12.4+ driver) or not (an older one).
    pub no_param_info: bool,
    /// Whether a fault stays in its context. Off by default: a fault breaks every context of
    /// the process, existing and new, as it did on an H100 (driver 580) and as NVIDIA allows.
    pub fault_confined: bool,
    /// A fault has broken the process (every context answers `CUDA_ERROR_ILLEGAL_ADDRESS`).
    pub process_poisoned: bool,
    /// Bytes of host-to-device copies that still run before one faults (once, then no limit):
    /// a DMA that fails halfway, injected by a test. The fault arrives when the copy runs, not
    /// when it is queued, and loses the context as any fault does. `None`: no limit.
    pub host_to_device_budget: Option<usize>,
    /// Where violations are also appended, one a line, so that a test reads those of every
    /// process that loaded the stand-in (session workers included). `None`: kept in memory only.
    pub violations_file: Option<std::path::PathBuf>,
    /// What `cuInit` answers instead of success: a driver that does not start, for a test of
    /// what a daemon does then. `None`: it starts.
    pub init_error: Option<u32>,
    /// How long each host-to-device and device-to-host copy takes when it runs: a slow device
    /// that does not burn the host's CPU (the thread sleeps, holding the stand-in's lock, as
    /// a process whose driver is busy), so that a test can keep copies in flight for seconds.
    /// `None`: copies run at memory speed.
    pub copy_delay: Option<std::time::Duration>,
    /// Allocations freed while a kernel of another stream still used them (a violation):
    /// kept (with their addresses), since that kernel holds pointers into them.
    pub retired: Vec<(u64, Allocation)>,
    /// Physical memory (`cuMemCreate`) by handle, until released and unmapped.
    pub physical: HashMap<u64, space::Physical>,
    /// CUDA arrays by handle.
    pub arrays: HashMap<u64, crate::textures::Array>,
    /// Texture and surface objects by value.
    pub objects: HashMap<u64, crate::textures::Object>,
}

/// Read when the stand-in is first called: the byte count of
/// `standin_fail_host_to_device_after`, for a stand-in loaded by a process a test cannot call
/// into (a session worker, which inherits the variable).
const FAIL_HOST_TO_DEVICE_AFTER: &str = "CUDA_STANDIN_FAIL_HOST_TO_DEVICE_AFTER";
/// Read when the stand-in is first called: the file [`Driver::violations_file`].
const VIOLATIONS_FILE: &str = "CUDA_STANDIN_VIOLATIONS";
/// Read when the stand-in is first called: [`Driver::init_error`], one of `code::SYSTEM_NOT_READY`
/// (802) and `code::UNKNOWN` (999); other values are ignored (the caller's `CUresult` is an enum,
/// which must never hold a value the driver API lacks).
const INIT_ERROR: &str = "CUDA_STANDIN_INIT_ERROR";
/// Read when the stand-in is first called: [`Driver::copy_delay`], in milliseconds, for the
/// stand-in of a session worker (which inherits it through its program's environment).
const COPY_DELAY_MS: &str = "CUDA_STANDIN_COPY_DELAY_MS";

/// What a new allocation holds: not zeros, as on a GPU, where a fresh allocation holds whatever
/// the memory held last (possibly another process's data). A caller that promises zeroed memory
/// must clear it. All ones: NaN in every floating-point type (binary16 to `f64`) and -1 in
/// every signed integer, so that a computation that reads memory nobody wrote shows in its
/// result (`0xA5` bytes were floats of `1e-16` or less, which a sum hides).
pub const STALE_BYTE: u8 = 0xFF;

/// Bytes kept past each allocation's end, each [`GUARD_BYTE`]: a builtin kernel, which reaches
/// memory through host pointers, that writes past its allocation changes them (and one that
/// reads there reads them), and the launch faults.
pub const GUARD_LEN: usize = 4096;
pub const GUARD_BYTE: u8 = 0x5C;

impl Driver {
    /// The defaults, with a host-to-device fault, a violations file and a failing `cuInit`
    /// from the environment.
    pub fn from_env() -> Self {
        let budget = std::env::var(FAIL_HOST_TO_DEVICE_AFTER).ok().and_then(|bytes| bytes.parse().ok());
        let violations_file = std::env::var_os(VIOLATIONS_FILE).map(Into::into);
        let init_error = std::env::var(INIT_ERROR)
            .ok()
            .and_then(|c| c.parse().ok())
            .filter(|c| [code::SYSTEM_NOT_READY, code::UNKNOWN].contains(c));
        let copy_delay =
            std::env::var(COPY_DELAY_MS).ok().and_then(|ms| ms.parse().ok()).map(std::time::Duration::from_millis);
        Self { host_to_device_budget: budget, violations_file, init_error, copy_delay, ..Self::default() }
    }

    /// A fresh handle, never 0 and never reused.
    pub fn handle(&mut self) -> u64 {
        self.next += 1;
        0x1000 + self.next * 16
    }

    /// Records a breach of the contract, in memory and in the violations file if there is one.
    pub fn violation(&mut self, what: String) {
        eprintln!("cuda-standin: contract violation: {what}");
        if let Some(path) = &self.violations_file {
            use std::io::Write;
            // One write per line with O_APPEND: lines of several processes do not interleave.
            let line = format!("pid {}: {what}\n", std::process::id());
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
            if let Err(e) = written {
                // The record must not be lost silently: the test reading the file would pass. (A
                // panic in the driver's `extern "C"` calls aborts the process: loud, as meant.)
                panic!("cuda-standin: cannot record a violation in {}: {e}", path.display());
            }
        }
        self.violations.push(what);
    }

    /// Creates a context on `device`.
    pub fn create_context(&mut self, device: i32, primary: bool) -> Result<u64> {
        if !self.initialized {
            return Err(code::NOT_INITIALIZED);
        }
        if !(0..DEVICES).contains(&device) {
            return Err(code::INVALID_DEVICE);
        }
        if self.process_poisoned {
            return Err(code::ILLEGAL_ADDRESS);
        }
        let (id, default_stream) = (self.handle(), self.handle());
        self.streams.insert(default_stream, Stream::new(id));
        let primary_refs = primary.then_some(1);
        self.contexts.insert(
            id,
            Context { device, lost: None, default_stream, primary_refs, printed: Vec::new(), limits: DEFAULT_LIMITS },
        );
        Ok(id)
    }

    /// Writes what context `id`'s kernels printed to the process's standard output, as the
    /// driver writes its printf buffer at a synchronization.
    pub fn write_out_printed(&mut self, id: u64) {
        let Some(printed) = self.contexts.get_mut(&id).map(|c| std::mem::take(&mut c.printed)) else { return };
        if !printed.is_empty() {
            let mut out = std::io::stdout().lock();
            // A closed standard output loses the lines, as the driver's would be.
            let _ = out.write_all(&printed).and_then(|()| out.flush());
        }
    }

    /// The context `id`, checked to be alive and not lost.
    pub fn usable(&self, id: u64) -> Result<&Context> {
        let context = self.contexts.get(&id).ok_or(code::CONTEXT_IS_DESTROYED)?;
        if self.process_poisoned {
            return Err(code::ILLEGAL_ADDRESS);
        }
        match context.lost {
            Some(lost) => Err(lost),
            None => Ok(context),
        }
    }

    /// Device memory of `context` in use, bytes.
    pub fn used(&self, device: i32) -> u64 {
        let on_device = |a: &&Allocation| self.contexts.get(&a.context).is_some_and(|c| c.device == device);
        let heap = |a: &Allocation| match &a.bytes {
            Storage::Heap(bytes) => bytes.len() as u64,
            Storage::Shared(shared) if !shared.opened => shared.len as u64,
            // A range's mappings' physical memory is counted; opened memory is its exporter's.
            Storage::Range(_) | Storage::Shared(_) => 0,
        };
        self.memory.values().filter(on_device).map(heap).sum::<u64>() + self.physical_used(device)
    }

    /// The device address of new device memory (an allocation, a reserved range) of `len` bytes
    /// aligned to `alignment`.
    pub fn place_range(&mut self, len: usize, alignment: usize) -> u64 {
        if self.next_address == 0 {
            self.next_address = 0x7f00_0000_0000;
        }
        let address = self.next_address.next_multiple_of(alignment as u64);
        // Never reused, with a gap, as allocations' addresses.
        self.next_address = address + len as u64 + alignment as u64;
        address
    }

    /// Allocates device memory for `context`.
    pub fn alloc(&mut self, context: u64, len: usize) -> Result<u64> {
        let device = self.usable(context)?.device;
        if len == 0 {
            return Err(code::INVALID_VALUE);
        }
        if self.used(device) + len as u64 > DEVICE_MEMORY {
            return Err(code::OUT_OF_MEMORY);
        }
        // Never reused, with a gap: a stale or overrunning address meets no other allocation.
        let address = self.place_range(len.next_multiple_of(4096), 4096);
        self.memory.insert(address, Allocation::new(context, len));
        Ok(address)
    }

    /// Allocates a module's `variables` in `context`, each holding its initial bytes (the first
    /// of a name, should an image repeat one); all or none. Each variable is an allocation of its
    /// own but the `__managed__` ones, which share one, laid out one after another as a driver
    /// lays out a module's managed memory, so that one page holds several.
    pub fn place_variables(&mut self, context: u64, variables: Vec<elf::Variable>) -> Result<Placed> {
        let mut seen = std::collections::HashSet::new();
        let (managed, own): (Vec<_>, Vec<_>) =
            variables.into_iter().filter(|v| seen.insert(v.name.clone())).partition(|v| v.managed);
        let mut placing = (HashMap::new(), Vec::new());
        let result = self
            .place_each(context, own, &mut placing)
            .and_then(|()| self.place_together(context, managed, &mut placing));
        let (variables, holdings) = placing;
        if let Err(e) = result {
            holdings.iter().for_each(|a| self.release(*a));
            return Err(e);
        }
        Ok(Placed { variables: std::sync::Arc::new(variables), holdings })
    }

    /// Allocates each of `variables` on its own.
    fn place_each(&mut self, context: u64, variables: Vec<elf::Variable>, placing: &mut Placing) -> Result<()> {
        let (placed, holdings) = placing;
        for variable in variables {
            let address = self.alloc(context, variable.init.len())?;
            holdings.push(address);
            self.memory.get_mut(&address).expect("just allocated").bytes.copy_from_slice(&variable.init);
            placed.insert(variable.name, (address, variable.init.len()));
        }
        Ok(())
    }

    /// Allocates `variables` in one allocation, each at the next multiple of [`PACKED_ALIGN`].
    fn place_together(&mut self, context: u64, variables: Vec<elf::Variable>, placing: &mut Placing) -> Result<()> {
        let (placed, holdings) = placing;
        let mut offsets = Vec::with_capacity(variables.len());
        let mut end = 0usize;
        for variable in &variables {
            let at = end.next_multiple_of(PACKED_ALIGN);
            offsets.push(at);
            end = at.checked_add(variable.init.len()).ok_or(code::OUT_OF_MEMORY)?;
        }
        if variables.is_empty() {
            return Ok(());
        }
        let address = self.alloc(context, end)?;
        holdings.push(address);
        let bytes = &mut self.memory.get_mut(&address).expect("just allocated").bytes;
        bytes.fill(0);
        for (variable, at) in variables.into_iter().zip(offsets) {
            bytes[at..at + variable.init.len()].copy_from_slice(&variable.init);
            placed.insert(variable.name, (address + at as u64, variable.init.len()));
        }
        Ok(())
    }

    /// Frees the allocation at `address` now; one a running kernel still holds pointers into
    /// is a violation, and is kept (retired) until the stand-in goes.
    pub fn release(&mut self, address: u64) {
        if let Some(a) = self.memory.remove(&address).filter(|a| a.users > 0) {
            self.violation(format!("memory at {address:#x} freed while a kernel still uses it"));
            self.retired.push((address, a));
        }
    }

    /// The allocation of `context` holding `[address, address + len)`, and the offset in it.
    pub fn locate(&mut self, context: u64, address: u64, len: usize) -> Option<(&mut Allocation, usize)> {
        let (&base, allocation) = self.memory.range_mut(..=address).next_back()?;
        let offset = (address - base) as usize;
        let reachable = match &allocation.bytes {
            Storage::Range(space) => space.covers(offset, len),
            Storage::Heap(_) | Storage::Shared(_) => true,
        };
        (allocation.context == context && offset.checked_add(len)? <= allocation.bytes.len() && reachable)
            .then_some((allocation, offset))
    }

    /// The stream `stream` of the current context (0: its default stream).
    pub fn stream(&self, context: u64, stream: u64) -> Result<u64> {
        let id = if stream == 0 { self.usable(context)?.default_stream } else { stream };
        match self.streams.get(&id) {
            Some(s) if s.context == context => Ok(id),
            _ => Err(code::INVALID_HANDLE),
        }
    }

    /// Queues `op` on `stream`; returns its position.
    pub fn queue(&mut self, stream: u64, op: Op) -> u64 {
        let seq = self.handle();
        self.streams.get_mut(&stream).expect("stream checked").queue.push_back((seq, op));
        seq
    }

    /// Whether queued work of any stream still uses the pinned buffer at `[address, +len)`.
    pub fn pinned_in_flight(&self, address: usize, len: usize) -> bool {
        let inside = |p: usize| p >= address && p < address + len;
        self.streams.values().flat_map(|s| &s.queue).any(|(_, op)| match op {
            Op::HtoD { src, .. } => inside(*src),
            Op::DtoH { dst, .. } => inside(*dst),
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_reach_the_file_a_test_names() {
        let dir = std::env::temp_dir().join(format!("standin-violations-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let mut d = Driver { violations_file: Some(dir.clone()), ..Driver::default() };
        d.violation("first".into());
        d.violation("second".into());
        let text = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let pid = std::process::id();
        assert_eq!(text, format!("pid {pid}: first\npid {pid}: second\n"));
        assert_eq!(d.violations, ["first", "second"]);
    }

    #[test]
    fn new_device_memory_holds_stale_bytes() {
        let mut d = Driver { initialized: true, ..Driver::default() };
        let context = d.create_context(0, false).unwrap();
        let address = d.alloc(context, 64).unwrap();
        let (a, at) = d.locate(context, address, 64).unwrap();
        assert!(a.bytes[at..].iter().all(|&b| b == STALE_BYTE));
    }
}
