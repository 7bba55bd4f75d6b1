// shape: the backend protocol's session messages in one file (the registration link's and
// protocol 4's have their own), so that what a version changes is read in one place.
//! The frontend <-> backend protocol, version [`VERSION`].
//!
//! # Connections and streams
//! Every connection uses ALPN [`ALPN`]. Its first bidirectional stream starts with the
//! [`Preamble`] (magic and version, checked before anything is decoded), then a [`Hello`] frame:
//! - [`Hello::Open`] makes this connection a session's **control** connection, on one device of
//!   the backend (a backend serves every device of its host, by index). The stream then
//!   carries [`Envelope`] requests one way and [`Reply`] frames the other. Closing the connection
//!   frees every resource of the session.
//! - [`Hello::Attach`] joins an existing session, so that bulk copies can be striped over several
//!   connections (one QUIC connection is bound to one core).
//!
//! Every further bidirectional stream, on either kind of connection, carries one **bulk copy**:
//! a [`BulkHeader`] frame, the raw payload (host to device), and one [`Reply`] frame (followed by
//! the raw payload for device to host).
//!
//! # Synchronous and asynchronous calls
//! A request with a non-zero [`Envelope::id`] gets exactly one [`Reply`] with that id. Requests
//! sent with id 0 (launches, memsets, stream-ordered copies) get none: they run in order on their
//! device stream, and the first error a stream meets is kept and returned by the next
//! [`Request::Synchronize`] that covers that stream, as in CUDA.
//!
//! # Order
//! The envelopes of a control stream are numbered 1, 2, 3... in the order they are sent; a
//! request's number is its **position**. The backend handles them in that order. A
//! **synchronous copy** ([`Request::MemWriteSync`], [`Request::MemReadSync`], or a bulk copy
//! whose [`BulkHeader::after`] names a position) starts only once the work of every request
//! before its position has finished, on every stream; it answers the first pending error of that
//! work instead of copying, as a synchronous `cudaMemcpy` does. A bulk copy travels on a stream
//! of its own, so it carries its position explicitly: the number of envelopes the client had
//! written to the control stream when it started the copy.
//!
//! # Versions
//! Each connection's preamble names the version it speaks; the backend answers in that version
//! when it is one of [`MIN_VERSION`]`..=`[`VERSION`] and closes with
//! [`close::VERSION_MISMATCH`] otherwise. A new version may add messages and change existing
//! ones; whatever it changes, the encoding of the version before is kept (in a module named
//! for it, like [`v4`]) and used on connections that speak it. Protocol 5 differs from 4 in the
//! welcome only: [`Response::Welcome`] names the session's lanes. Protocol 6 adds
//! [`Report::Status`], which a backend sends instead of [`Report::Heartbeat`] on a registration
//! that speaks 6: every device's identity, health, compute mode and session count; and the
//! manager sends [`Order`] frames on such a registration instead of bare [`Revoke`]s.
//! Protocol 7 adds the two requests the CUDA driver shim (`ac-cuda`) needs, appended so that
//! everything else encodes as in 6: [`Request::MemAllocAt`] (an allocation with its device
//! address, which the program's kernels take as raw pointers) and [`Request::FunctionLayout`]
//! (a lookup that also answers the parameter sizes, since `cuLaunchKernel` passes none), and
//! [`Request::ModuleLoadCached`] (a module image named by its digest, sent only if the backend
//! does not hold it already).
//! Protocol 8 adds resumption, appended likewise: [`Hello::Resume`] takes a session whose
//! control connection was lost (a network outage) onto a new connection, the backend answers
//! [`Response::Resumed`] or closes with [`close::SESSION_GONE`]; see "Resumption" below. The
//! manager sends [`Order::Hold`] first on a registration of protocol 8.
//! Protocol 9 adds module variables, appended likewise: [`Request::ModuleGlobal`] answers a
//! buffer over a module's `__device__` or `__constant__` variable ([`Response::Global`]), which
//! the CUDA shim's programs read and write by address (`cudaMemcpyToSymbol`).
//! Protocol 10 adds a kernel's attributes, appended likewise: [`Request::KernelAttributes`]
//! answers what the device says a kernel uses ([`Response::KernelAttributes`]: registers,
//! static shared memory, its dynamic shared memory limit) and [`Request::SetKernelAttribute`]
//! raises that limit past the default 48 KiB (`cudaFuncSetAttribute`), which the device checks
//! at every launch; [`Request::LaunchCooperative`] launches a kernel whose blocks may wait for
//! each other (`cuLaunchCooperativeKernel`: every block resident at once).
//! Protocol 11 adds what a session's kernels print (CUDA's device-side `printf`), appended
//! likewise: [`Response::Printed`], a reply frame with id 0 that the backend sends, before the
//! next reply it sends on the control stream, whenever the device wrote kernel output (the
//! driver writes it out at synchronizations). It answers no request and counts as a reply
//! frame for resumption; a client of protocol 10 or older is never sent one. It also adds
//! [`Request::SetLimit`], a session's context limits (`cuCtxSetLimit`: the stack a GPU thread
//! has, the printf buffer, the heap of in-kernel `malloc`), answered [`Response::Limit`].
//! Protocol 12 adds thread block clusters, appended likewise: [`Request::LaunchClustered`]
//! launches a kernel in clusters of blocks (`cuLaunchKernelEx` with a cluster dimension: the
//! blocks of a cluster run at once on one GPU processing cluster and share their shared
//! memory), and [`Request::MaxActiveClusters`] asks how many such clusters the device holds at
//! once (`cuOccupancyMaxActiveClusters`), answered [`Response::Clusters`].
//! Protocol 13 adds tensor maps, appended likewise: [`Request::EncodeTensorMap`] has the
//! device's driver encode the descriptor of a tensor in the session's memory that a Hopper
//! GPU's tensor memory accelerator copies boxes of (`cuTensorMapEncodeTiled`, `Im2col`),
//! answered [`Response::TensorMap`] ([`tensor_map`]); and
//! [`KernelSetting::NonPortableClusterSizeAllowed`], clusters of more than 8 blocks.
//! Protocol 14 adds virtual memory management (CUDA's `cuMemAddressReserve`, `cuMemCreate`,
//! `cuMemMap`), appended likewise: [`Request::ReserveRange`] reserves device address space as a
//! buffer none of whose bytes may be touched until mapped, [`Request::CreatePhysical`] creates
//! physical memory (answered [`Response::Physical`]) that [`Request::MapPhysical`] maps into a
//! range and [`Request::UnmapRange`] unmaps; [`Request::ReleasePhysical`] lets it go once no
//! mapping holds it, and [`Request::MemFree`] of the range frees the range (unmapping what is
//! still mapped). A copy, memset or tensor map over a range must lie wholly in mapped bytes.
//! Protocol 15 adds a device's sensors, appended likewise: [`Request::Telemetry`] answers
//! [`Response::Telemetry`] ([`telemetry`]: utilization, temperature, power, energy, clocks,
//! performance state, as the GPU host's NVML reads them, and the memory the session holds).
//! Protocol 16 adds CUDA arrays and the texture and surface objects that read them, appended
//! likewise ([`array`]): [`Request::CreateArray`] (answered [`Response::Array`], zeroed, counted
//! against the session's quota), [`Request::CopyArray`] between an array and the session's
//! linear memory, queued on a stream, [`Request::CreateTexture`] over an array or linear memory
//! and [`Request::CreateSurface`] over an array (answered [`Response::Object`], the device's
//! value that kernels take), [`Request::DestroyArray`] and [`Request::DestroyObject`]. An object
//! holds what it reads: an array or buffer destroyed first goes when its last object does.
//! Protocol 17 adds [`Hello::End`], appended likewise: another process ends a session, proving
//! it as a resumption does (the session's secret and the capability it was opened with), and the
//! backend answers [`Response::Ok`] once it has ended it, or closes with
//! [`close::SESSION_GONE`] when it had already ended. The CUDA shim's parent ends so the session
//! of a child that died without closing it (`_exit`, a signal), rather than leaving it held.
//! Protocol 18 adds memory shared between sessions (CUDA's IPC handles), appended likewise:
//! [`Request::ExportMemory`] answers a secret naming one of the session's allocations
//! ([`Response::Exported`]), and [`Request::ImportMemory`] of that secret, by another session of
//! the same capability on the same device, answers a buffer over the same memory
//! ([`Response::Global`]; [`Request::MemFree`] of it closes it). The memory goes when the
//! exporter has freed it and every importer has closed it.
//! Protocol 19 adds physical memory shared likewise (virtual memory management's shareable
//! handles: `cuMemExportToShareableHandle`), appended: [`Request::ExportPhysical`] answers a
//! secret naming one of the session's physical memories ([`Response::Exported`]), and
//! [`Request::ImportPhysical`] of it answers physical memory of the importer's over the same
//! memory ([`Response::ImportedPhysical`]; [`Request::ReleasePhysical`] lets it go).
//! Protocol 20 adds a module's kernel names, appended likewise: [`Request::ModuleKernels`]
//! answers the names of the kernels a module holds ([`Response::KernelNames`]), as the driver
//! lists them (`cuModuleEnumerateFunctions`): the CUDA shim's `cuLibraryGetKernelCount`.
//! Protocol 21 adds linking on the device's JIT linker, appended likewise: [`Request::Link`]
//! carries the inputs ([`jit_link`]: PTX, cubins, fat binaries, objects, archives) and answers
//! the linked image ([`Response::Linked`], its bytes following as the payload, and the
//! linker's log): the CUDA shim's `cuLinkComplete`.
//!
//! # Resumption
//! A session whose control connection times out (silence: a partition, a cable) is **held**
//! by its backend for its hold time (the manager's lease, `session_hold_ms` unmanaged): its
//! memory, modules, streams and queued work stay, and its streams go on running. Within it the
//! client may resume it with [`Hello::Resume`], proving it owns it twice over: the session's
//! secret token (from its welcome, never sent to anyone else) and the capability it was opened
//! with (still valid: not expired, not revoked). Every call then runs exactly once:
//! - The backend answers [`Response::Resumed`] with the number of envelopes it has handled
//!   (its position); the client sends again every envelope after it, from a log of the ones it
//!   sent that the backend may not have had whole. An envelope cut off by the outage, or whose
//!   payload was, was never handled.
//! - [`Hello::Resume::replies`] counts the reply frames the client has read on the session's
//!   control streams; the backend sends again every reply frame after that many, from a log of
//!   what it sent. Replies are numbered by the order they leave in, one stream after another,
//!   so those the client lacks are always the last ones.
//! - Bulk copies in flight fail with their connection or lane, and the client runs them again,
//!   with a fresh position (the envelopes written by then), once the session is back.
//! - Every lane attached before the resumption is ended before [`Response::Resumed`] is sent,
//!   and the client dials new ones: a lost lane's TCP connection may still deliver, seconds
//!   after the outage, bytes its kernel sends again, which would land on the copies run since.
//!
//! Both logs keep at least twice the default stream window (a peer cannot have more than one
//! stream window of the other's bytes unread); a resume whose envelopes or replies fell out of
//! a log is refused with a reason, never carried out twice or skipped.
//!
//! # Errors
//! A request that fails gets [`Response::Error`]; the session goes on. Bytes that do not parse,
//! an oversized frame or a wrong version close the connection with one of the [`close`] codes and
//! a readable reason.

use serde::{Deserialize, Serialize};

pub mod array;
pub mod builtin;
pub mod device_code;
pub mod jit_link;
pub mod link;
mod registration;
pub mod telemetry;
pub mod tensor_map;
pub mod v4;

pub use array::{ArrayCopy, ArrayId, ArraySpec, Sampler, TextureResource};
pub use jit_link::{JitOption, LinkInput, LinkInputKind};
pub use registration::*;
pub use telemetry::{Clocks, Telemetry};
pub use tensor_map::{TensorMapLayout, TensorMapSpec, TENSOR_MAP_BYTES};

/// The protocol version spoken by this build.
pub const VERSION: u16 = 21;
/// The oldest version this build still speaks, so that backends and programs can be upgraded
/// one at a time (a rolling upgrade): a backend serves clients of `MIN_VERSION..=VERSION`, and
/// a client whose backend refuses [`VERSION`] says hello again in `MIN_VERSION`. Everything a
/// version changes is kept for the one before in [`v4`]; see "Versions" above.
pub const MIN_VERSION: u16 = 4;
/// The ALPN of the backend service.
pub const ALPN: &[u8] = b"ac-backend";
/// The preamble's magic bytes.
pub const MAGIC: [u8; 2] = *b"AC";

/// Application close codes used on backend connections.
pub mod close {
    /// The connection ended normally.
    pub const NORMAL: u32 = 0;
    /// The peer speaks another protocol version.
    pub const VERSION_MISMATCH: u32 = 1;
    /// The peer sent bytes that do not parse, or a frame over the size limit.
    pub const MALFORMED: u32 = 2;
    /// The peer broke the protocol's rules (e.g. a bulk stream before hello).
    pub const PROTOCOL: u32 = 3;
    /// The peer is not allowed to do this (unknown session, wrong token).
    pub const UNAUTHORIZED: u32 = 4;
    /// Stop code for a bulk stream whose copy was refused.
    pub const COPY_REFUSED: u32 = 5;
    /// The client closed its connections because the backend's host said no process listens
    /// on the backend's port (never sent by a backend).
    pub const BACKEND_GONE: u32 = 6;
    /// The device refuses a new session: its session limit, its compute mode (one process at a
    /// time), or its health. The reason says which. Other devices of the backend may serve.
    pub const DEVICE_REFUSED: u32 = 7;
    /// *Protocol 8.* A [`super::Hello::Resume`] named a session this backend does not hold: it
    /// ended, its hold ran out, or the backend restarted (its memory is gone). Not resumable.
    pub const SESSION_GONE: u32 = 8;
}

/// The four bytes opening a connection's first stream: magic, then the version, little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    /// The sender's protocol version.
    pub version: u16,
}

impl Preamble {
    /// The preamble of this build.
    pub const CURRENT: Preamble = Preamble { version: VERSION };

    /// Whether this build speaks the preamble's version.
    pub fn spoken(self) -> bool {
        (MIN_VERSION..=VERSION).contains(&self.version)
    }

    /// Its four bytes.
    pub fn to_bytes(self) -> [u8; 4] {
        let v = self.version.to_le_bytes();
        [MAGIC[0], MAGIC[1], v[0], v[1]]
    }

    /// Parses four bytes; `None` when the magic is wrong.
    pub fn parse(bytes: [u8; 4]) -> Option<Self> {
        (bytes[..2] == MAGIC).then(|| Preamble { version: u16::from_le_bytes([bytes[2], bytes[3]]) })
    }
}

/// A session on one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);
/// A device allocation, valid only in the session that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BufferId(pub u64);
/// A loaded module, valid only in its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleId(pub u64);
/// A kernel looked up in a module, valid only in its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionId(pub u64);
/// A device stream. Stream 0 is the session's default stream and always exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct StreamId(pub u64);

/// A position in device memory: a buffer and a byte offset into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DevicePtr {
    /// The buffer.
    pub buffer: BufferId,
    /// Byte offset into the buffer.
    pub offset: u64,
}

/// First frame of a connection's first stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    /// Start a new session on this connection. `capability` is checked by backends that require
    /// one (the resource manager issues them); it may be empty otherwise.
    Open {
        /// A capability issued by the resource manager, or empty.
        capability: Vec<u8>,
        /// The device (its index on the backend) the session runs on; a capability names the
        /// same one.
        device: u32,
    },
    /// The resource manager registers this backend: from now on sessions need capabilities
    /// signed by `public_key`. The backend answers [`Response::Devices`]; the stream then
    /// carries [`Report`]s to the manager and [`Revoke`]s from it.
    Register {
        /// The manager's Ed25519 public key.
        public_key: [u8; 32],
        /// The name the manager knows this backend by (capabilities name it).
        host: String,
        /// Unix time of the request (the proof covers it, so it cannot be replayed later).
        time: u64,
        /// Signature by the key over [`register_message`].
        proof: Vec<u8>,
    },
    /// A replicated resource manager registers this backend: from now on sessions need
    /// capabilities signed by one of `cluster`, the keys of its replicas (each signs with its
    /// own). `public_key`, one of them, signs the proof; a backend that trusts it takes
    /// `cluster` as the set it trusts (a membership change). Answered as [`Hello::Register`].
    /// Sent only by a replicated manager; backends of releases before it refuse it as malformed.
    RegisterCluster {
        /// The key of the replica that registers, one of `cluster`.
        public_key: [u8; 32],
        /// Every replica's key.
        cluster: Vec<[u8; 32]>,
        /// The name the manager knows this backend by (capabilities name it).
        host: String,
        /// Unix time of the request (the proof covers it, so it cannot be replayed later).
        time: u64,
        /// Signature by `public_key` over [`register_cluster_message`].
        proof: Vec<u8>,
    },
    /// Join an existing session for bulk copies.
    Attach {
        /// The session to join.
        session: SessionId,
        /// The secret returned in [`Response::Welcome`].
        token: [u8; 16],
    },
    /// *Protocol 8.* Take over a held session (see "Resumption"): this connection becomes its
    /// control connection. Answered by [`Response::Resumed`].
    Resume {
        /// The session.
        session: SessionId,
        /// The secret returned in [`Response::Welcome`].
        token: [u8; 16],
        /// The capability the session was opened with (empty when it was opened without).
        capability: Vec<u8>,
        /// Reply frames the client has read on the session's control streams so far, the
        /// welcome not counted.
        replies: u64,
    },
    /// *Protocol 17.* End a session this connection does not carry (its process died without
    /// closing it), proven as [`Hello::Resume`] proves it. Answered by [`Response::Ok`] once
    /// the session has ended (its memory freed, its connections closed).
    End {
        /// The session.
        session: SessionId,
        /// The secret returned in [`Response::Welcome`].
        token: [u8; 16],
        /// The capability the session was opened with (empty when it was opened without).
        capability: Vec<u8>,
    },
}

/// The kind of one kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParamKind {
    /// 32-bit unsigned integer.
    U32,
    /// 32-bit signed integer.
    I32,
    /// 64-bit unsigned integer.
    U64,
    /// 64-bit signed integer.
    I64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// A pointer into device memory.
    Ptr,
}

/// One kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum KernelArg {
    /// 32-bit unsigned integer.
    U32(u32),
    /// 32-bit signed integer.
    I32(i32),
    /// 64-bit unsigned integer.
    U64(u64),
    /// 64-bit signed integer.
    I64(i64),
    /// 32-bit float.
    F32(f32),
    /// 64-bit float.
    F64(f64),
    /// A pointer into one of the session's buffers.
    Ptr(DevicePtr),
}

impl KernelArg {
    /// The parameter kind this argument fills.
    pub fn kind(&self) -> ParamKind {
        match self {
            KernelArg::U32(_) => ParamKind::U32,
            KernelArg::I32(_) => ParamKind::I32,
            KernelArg::U64(_) => ParamKind::U64,
            KernelArg::I64(_) => ParamKind::I64,
            KernelArg::F32(_) => ParamKind::F32,
            KernelArg::F64(_) => ParamKind::F64,
            KernelArg::Ptr(_) => ParamKind::Ptr,
        }
    }
}

macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for KernelArg {
            fn from(value: $t) -> Self {
                KernelArg::$v(value)
            }
        }
    )*};
}
scalar_from!(u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64);

impl From<DevicePtr> for KernelArg {
    fn from(ptr: DevicePtr) -> Self {
        KernelArg::Ptr(ptr)
    }
}

/// Grid, block and shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem: u32,
}

impl LaunchDims {
    /// A one-dimensional launch covering `n` threads with blocks of `block` threads.
    pub fn linear(n: u64, block: u32) -> Self {
        let blocks = n.div_ceil(block.max(1) as u64).clamp(1, u32::MAX as u64) as u32;
        Self { grid: [blocks, 1, 1], block: [block.max(1), 1, 1], shared_mem: 0 }
    }

    /// A launch of `grid` blocks of `block` threads, as CUDA's `<<<grid, block>>>`.
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> Self {
        Self { grid, block, shared_mem: 0 }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem = bytes;
        self
    }
}

/// *Protocol 10.* What a device says of one of its kernels (CUDA's `cuFuncGetAttribute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelAttributes {
    /// Threads per block the kernel may be launched with, at most (its registers bound it).
    pub max_threads_per_block: u32,
    /// Statically allocated shared memory per block, bytes.
    pub static_shared: u32,
    /// Constant memory the kernel uses, bytes.
    pub constant: u32,
    /// Local memory per thread, bytes.
    pub local: u32,
    /// Registers per thread.
    pub registers: u32,
    /// The PTX virtual architecture it was compiled for, major * 10 + minor.
    pub ptx_version: u32,
    /// The architecture of its binary, major * 10 + minor.
    pub binary_version: u32,
    /// Dynamic shared memory a launch may ask for, bytes: the default, or what
    /// [`Request::SetKernelAttribute`] set.
    pub max_dynamic_shared: u32,
    /// The preferred split of L1 cache and shared memory, percent of the most shared memory;
    /// -1 for no preference.
    pub preferred_carveout: i32,
}

/// *Protocol 10.* A kernel attribute a program may set ([`Request::SetKernelAttribute`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelSetting {
    /// The dynamic shared memory a launch may ask for, bytes (CUDA's
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`): at most the device's opt-in limit
    /// less the kernel's static shared memory.
    MaxDynamicShared(u32),
    /// The preferred shared memory carveout, percent (0 to 100) or -1 (CUDA's
    /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`).
    PreferredCarveout(i32),
    /// *Protocol 13.* Whether the kernel's launches may run in clusters of more than the
    /// portable 8 blocks (CUDA's `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`; 16 on
    /// an H100).
    NonPortableClusterSizeAllowed(bool),
}

/// *Protocol 11.* A context limit a session may set ([`Request::SetLimit`]; CUDA's `CUlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ContextLimit {
    /// The stack each GPU thread has, bytes (`CU_LIMIT_STACK_SIZE`; 1 KiB by default).
    StackSize,
    /// The buffer kernels' `printf` writes into, bytes (`CU_LIMIT_PRINTF_FIFO_SIZE`; 1 MiB).
    PrintfFifoSize,
    /// The heap of in-kernel `malloc`, bytes (`CU_LIMIT_MALLOC_HEAP_SIZE`; 8 MiB).
    MallocHeapSize,
}

impl ContextLimit {
    /// What a CUDA context's limit is until a program sets it (the driver's default).
    pub fn default_value(self) -> u64 {
        match self {
            ContextLimit::StackSize => 1 << 10,
            ContextLimit::PrintfFifoSize => 1 << 20,
            ContextLimit::MallocHeapSize => 8 << 20,
        }
    }
}

/// What a module is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModuleSource {
    /// A module built into the backend, by name (`builtin`).
    Builtin(String),
    /// PTX text; the bytes follow as the payload.
    Ptx,
    /// A cubin or fatbin image; the bytes follow as the payload.
    Cubin,
    /// CUDA C source, compiled by NVRTC on the backend; the source follows as the payload.
    /// A failed compile answers [`ErrorKind::ModuleLoad`] with the compiler's log.
    CudaC {
        /// NVRTC options, e.g. `-DN=4`, `--use_fast_math` (the architecture is the device's).
        options: Vec<String>,
    },
}

/// Direction of a bulk copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// The payload follows the header and is written to device memory.
    HostToDevice,
    /// The device memory is read and follows the reply.
    DeviceToHost,
}

/// The header frame of a bulk copy stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkHeader {
    /// Which way the bytes go.
    pub direction: Direction,
    /// Where in device memory.
    pub ptr: DevicePtr,
    /// How many bytes.
    pub len: u64,
    /// Whether the backend overlaps network and device copies (on by default; off for
    /// measurements).
    pub pipelined: bool,
    /// The copy's position in the control stream: it starts after the work of the first `after`
    /// envelopes has finished (see the module's "Order").
    pub after: u64,
}

/// A request on a control stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Correlates the reply; 0 means "no reply" (asynchronous call).
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// Requests on a control stream. Those marked *payload* are followed by raw bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Round trip with no device work. Replies [`Response::Ok`].
    Ping,
    /// Replies [`Response::Info`].
    DeviceInfo,
    /// Allocates device memory. Replies [`Response::Buffer`].
    MemAlloc {
        /// Size in bytes.
        bytes: u64,
    },
    /// Frees a buffer after all streams finished the work queued before it. Replies
    /// [`Response::Ok`]; sent with id 0 (a dropped handle), a failure is kept as a pending error.
    MemFree {
        /// The buffer.
        buffer: BufferId,
    },
    /// *Payload.* Writes `len` bytes at `dst`, in order on `stream`.
    MemWrite {
        /// Destination.
        dst: DevicePtr,
        /// Payload length.
        len: u64,
        /// Stream that orders the write.
        stream: StreamId,
    },
    /// *Payload.* Synchronous copy: writes `len` bytes at `dst` once the work of every earlier
    /// request has finished. Replies [`Response::Ok`], or the first pending error of that work
    /// (then nothing is written).
    MemWriteSync {
        /// Destination.
        dst: DevicePtr,
        /// Payload length.
        len: u64,
    },
    /// Synchronous copy: reads `len` bytes at `src` once the work of every earlier request has
    /// finished. Replies [`Response::Data`] + payload, or the first pending error of that work.
    MemReadSync {
        /// Source.
        src: DevicePtr,
        /// Bytes to read.
        len: u64,
    },
    /// Copies device to device on this accelerator, in order on `stream`.
    MemCopy {
        /// Destination.
        dst: DevicePtr,
        /// Source.
        src: DevicePtr,
        /// Bytes to copy.
        len: u64,
        /// Stream that orders the copy.
        stream: StreamId,
    },
    /// Sets `len` bytes at `dst` to `value`, in order on `stream`.
    Memset {
        /// Destination.
        dst: DevicePtr,
        /// Bytes to set.
        len: u64,
        /// The byte value.
        value: u8,
        /// Stream that orders the memset.
        stream: StreamId,
    },
    /// *Payload* for PTX, cubin and CUDA C. Replies [`Response::Module`].
    ModuleLoad {
        /// What the module is made of.
        source: ModuleSource,
        /// Payload length (0 for builtin).
        len: u64,
    },
    /// Unloads a module. Replies [`Response::Ok`].
    ModuleUnload {
        /// The module.
        module: ModuleId,
    },
    /// Looks a kernel up by name. Replies [`Response::Function`].
    FunctionLookup {
        /// The module.
        module: ModuleId,
        /// The kernel's name.
        name: String,
    },
    /// Launches a kernel, in order on `stream`.
    Launch {
        /// The kernel.
        function: FunctionId,
        /// Launch shape.
        dims: LaunchDims,
        /// Arguments, in parameter order.
        args: Vec<KernelArg>,
        /// The stream.
        stream: StreamId,
    },
    /// Creates a stream. Replies [`Response::Stream`].
    StreamCreate,
    /// Waits for a stream, then destroys it. Replies [`Response::Ok`] or its pending error.
    StreamDestroy {
        /// The stream.
        stream: StreamId,
    },
    /// Waits until `stream` (or every stream when `None`) has finished its work. Replies
    /// [`Response::Ok`] or the first error met by asynchronous work since the last synchronize.
    Synchronize {
        /// The stream, or all.
        stream: Option<StreamId>,
    },
    /// *Protocol 7.* Allocates device memory as [`Request::MemAlloc`] does and answers its
    /// device address too ([`Response::BufferAt`]): the CUDA shim hands programs addresses, which
    /// their kernels take as raw pointers (a kernel reaches nothing outside its own context).
    MemAllocAt {
        /// Size in bytes.
        bytes: u64,
    },
    /// *Protocol 7.* Looks a kernel up by name as [`Request::FunctionLookup`] does and answers
    /// its parameter sizes too ([`Response::FunctionLayout`]).
    FunctionLayout {
        /// The module.
        module: ModuleId,
        /// The kernel's name.
        name: String,
    },
    /// *Protocol 7.* Loads the image whose [`image_digest`] is `digest`, if the backend holds it
    /// for this session's owner (the capability it was opened with; the session itself without
    /// one) from an earlier [`Request::ModuleLoad`]: replies [`Response::Module`], or
    /// [`Response::NotCached`] (then send it with `ModuleLoad`). A framework's images are
    /// hundreds of MB; each of its processes sends them once.
    ModuleLoadCached {
        /// What the module is made of (PTX or cubin).
        source: ModuleSource,
        /// SHA-256 of the image's bytes.
        digest: [u8; 32],
    },
    /// *Protocol 9.* Looks a module's variable up by name (a CUDA `__device__` or `__constant__`
    /// variable: the module holds its memory): replies [`Response::Global`], a buffer over it,
    /// which copies and kernels use as any other. The buffer is the module's: freeing it only
    /// forgets the id, and unloading the module ends it.
    ModuleGlobal {
        /// The module.
        module: ModuleId,
        /// The variable's name, as the image's symbol table spells it.
        name: String,
    },
    /// *Protocol 10.* What the device says of a kernel: replies [`Response::KernelAttributes`].
    KernelAttributes {
        /// The kernel.
        function: FunctionId,
    },
    /// *Protocol 10.* Sets one of a kernel's attributes, as `cuFuncSetAttribute` does: replies
    /// [`Response::Ok`], or the device's refusal (a value past its limits). Every launch of the
    /// kernel's function in this session is then checked against it.
    SetKernelAttribute {
        /// The kernel.
        function: FunctionId,
        /// The attribute and its value.
        setting: KernelSetting,
    },
    /// *Protocol 10.* Launches a kernel as [`Request::Launch`] does, with every block resident
    /// at once so that they may wait for each other (a cooperative launch: CUDA's grid-wide
    /// synchronization). A grid larger than the device holds at once fails the launch.
    LaunchCooperative {
        /// The kernel.
        function: FunctionId,
        /// Launch shape.
        dims: LaunchDims,
        /// Arguments, in parameter order.
        args: Vec<KernelArg>,
        /// The stream.
        stream: StreamId,
    },
    /// *Protocol 11.* Sets one of the session's context limits, as `cuCtxSetLimit` does, once
    /// the work queued before has finished: replies [`Response::Limit`] with the value in effect
    /// (the driver may round it), or the refusal (a value the device refuses; memory past the
    /// session's quota, which counts what the limit reserves on the device).
    SetLimit {
        /// Which limit.
        limit: ContextLimit,
        /// Its new value, bytes.
        value: u64,
    },
    /// *Protocol 12.* Launches a kernel as [`Request::Launch`] does, its blocks in clusters of
    /// `cluster` blocks (x, y, z; each dividing the grid's), each cluster's blocks resident at
    /// once on one GPU processing cluster. A shape the device refuses fails the launch.
    LaunchClustered {
        /// The kernel.
        function: FunctionId,
        /// Launch shape.
        dims: LaunchDims,
        /// Blocks of a cluster in x, y, z.
        cluster: [u32; 3],
        /// Arguments, in parameter order.
        args: Vec<KernelArg>,
        /// The stream.
        stream: StreamId,
    },
    /// *Protocol 12.* How many clusters of `cluster` blocks of the kernel, launched with
    /// `dims`' block and shared memory, the device holds at once: replies
    /// [`Response::Clusters`].
    MaxActiveClusters {
        /// The kernel.
        function: FunctionId,
        /// The launch's shape (its block and dynamic shared memory count).
        dims: LaunchDims,
        /// Blocks of a cluster in x, y, z.
        cluster: [u32; 3],
    },
    /// *Protocol 13.* Encodes the tensor map of a tensor in the session's memory (the whole
    /// tensor must lie in one of its buffers): replies [`Response::TensorMap`]. Nothing queued
    /// waits: the descriptor depends on the arguments alone.
    EncodeTensorMap(TensorMapSpec),
    /// *Protocol 14.* Reserves `bytes` of the session's device address space, aligned to
    /// `alignment` (0: the device's granularity), as a buffer of that size whose bytes may be
    /// touched only where memory is mapped ([`Request::MapPhysical`]): replies
    /// [`Response::BufferAt`]. [`Request::MemFree`] of it unmaps what is mapped and frees it.
    ReserveRange {
        /// Size in bytes, a multiple of the device's granularity.
        bytes: u64,
        /// Alignment of its start, a power of two or 0.
        alignment: u64,
    },
    /// *Protocol 14.* Creates `bytes` of physical device memory (zeroed), which counts against
    /// the session's quota until released and unmapped: replies [`Response::Physical`].
    CreatePhysical {
        /// Size in bytes, a multiple of the device's granularity.
        bytes: u64,
    },
    /// *Protocol 14.* Releases physical memory: it goes once no mapping holds it. Replies
    /// [`Response::Ok`].
    ReleasePhysical {
        /// The physical memory ([`Response::Physical`]).
        physical: u64,
    },
    /// *Protocol 14.* Maps the first `bytes` of physical memory at `offset` into a range
    /// ([`Request::ReserveRange`]), readable and writable by the device: replies
    /// [`Response::Ok`]. The bytes must not be mapped already.
    MapPhysical {
        /// The range.
        range: BufferId,
        /// Where in the range, bytes.
        offset: u64,
        /// Bytes mapped, at most the physical memory's size.
        bytes: u64,
        /// The physical memory.
        physical: u64,
    },
    /// *Protocol 14.* Unmaps every mapping of a range within `[offset, offset + bytes)`, which
    /// must each lie wholly inside it, after the work queued before on every stream: replies
    /// [`Response::Ok`].
    UnmapRange {
        /// The range.
        range: BufferId,
        /// Where in the range, bytes.
        offset: u64,
        /// Bytes unmapped.
        bytes: u64,
    },
    /// *Protocol 15.* What the device's sensors read now: replies [`Response::Telemetry`].
    /// Nothing queued waits.
    Telemetry,
    /// *Protocol 16.* Creates a CUDA array, zeroed, which counts against the session's quota:
    /// replies [`Response::Array`].
    CreateArray(ArraySpec),
    /// *Protocol 16.* Lets an array go: it goes once no texture or surface object reads it and
    /// the work queued before has run. Replies [`Response::Ok`].
    DestroyArray(ArrayId),
    /// *Protocol 16.* Queues a copy between an array and the session's linear memory (the
    /// whole region inside both) on `stream`.
    CopyArray {
        /// The copy.
        copy: ArrayCopy,
        /// Where it runs.
        stream: StreamId,
    },
    /// *Protocol 16.* Creates a texture object over an array or the session's linear memory:
    /// replies [`Response::Object`].
    CreateTexture {
        /// What it reads.
        resource: TextureResource,
        /// How.
        sampler: Sampler,
    },
    /// *Protocol 16.* Creates a surface object over an array (made for surface loads and
    /// stores): replies [`Response::Object`].
    CreateSurface(ArrayId),
    /// *Protocol 16.* Destroys a texture or surface object of the session once the work queued
    /// before has run. Replies [`Response::Ok`].
    DestroyObject {
        /// The object's value.
        object: u64,
        /// Whether it is a surface object (a texture and a surface may share a value).
        surface: bool,
    },
    /// *Protocol 18.* Shares one of the session's allocations (made by [`Request::MemAlloc`] or
    /// [`Request::MemAllocAt`]) with the session's other processes: replies
    /// [`Response::Exported`], the same secret each time for the same buffer.
    ExportMemory {
        /// The allocation.
        buffer: BufferId,
    },
    /// *Protocol 18.* Opens memory another session of the same capability on the same device
    /// shared ([`Request::ExportMemory`]) as a buffer of this one: replies [`Response::Global`].
    /// [`Request::MemFree`] of the buffer closes it.
    ImportMemory {
        /// The exporter's secret.
        secret: [u8; 16],
    },
    /// *Protocol 19.* Shares physical memory of the session's ([`Request::CreatePhysical`])
    /// with the session's other processes: replies [`Response::Exported`], the same secret each
    /// time for the same physical memory.
    ExportPhysical {
        /// The physical memory.
        physical: u64,
    },
    /// *Protocol 19.* Opens physical memory another session of the same capability on the same
    /// device shared ([`Request::ExportPhysical`]) as physical memory of this one, to map into its
    /// ranges: replies [`Response::ImportedPhysical`]. [`Request::ReleasePhysical`] lets it go.
    ImportPhysical {
        /// The exporter's secret.
        secret: [u8; 16],
    },
    /// *Protocol 20.* The names of the kernels `module` holds: replies
    /// [`Response::KernelNames`].
    ModuleKernels {
        /// The module.
        module: ModuleId,
    },
    /// *Protocol 21. Payload:* the inputs' bytes, in order. Links them with the device's JIT
    /// linker for its own architecture: replies [`Response::Linked`]; a failed link answers
    /// [`ErrorKind::ModuleLoad`] with the linker's error log.
    Link {
        /// The inputs, at most [`jit_link::MAX_INPUTS`].
        inputs: Vec<LinkInput>,
        /// Options for the whole link ([`jit_link::is_forwarded`] ones only).
        options: Vec<JitOption>,
    },
}

/// The digest under which a backend keeps a module image (SHA-256 of its bytes).
pub fn image_digest(image: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, image);
    digest.as_ref().try_into().expect("32 bytes")
}

/// A reply on a control stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The id of the request answered (0 for the hello reply).
    pub id: u64,
    /// The answer.
    pub response: Response,
}

/// Answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The hello was accepted.
    Welcome {
        /// The session (new or joined).
        session: SessionId,
        /// Secret to attach more connections to the session.
        token: [u8; 16],
        /// The device this session runs on.
        info: DeviceInfo,
        /// The TCP port of the backend's bulk lanes ([`crate::lane`]) on the address the
        /// client dialed; 0 when it has none (copies then use QUIC streams only).
        lane_port: u16,
        /// The most lanes the session may attach at once (the backend's `lanes_per_session`);
        /// a client stripes over no more, and a lane past them is refused.
        lanes: u16,
    },
    /// Done.
    Ok,
    /// Device description.
    Info(DeviceInfo),
    /// A new buffer.
    Buffer(BufferId),
    /// A loaded module.
    Module(ModuleId),
    /// A kernel; `params` is its signature where the device knows it.
    Function {
        /// The kernel's id.
        id: FunctionId,
        /// The parameter kinds, when known.
        params: Option<Vec<ParamKind>>,
    },
    /// A new stream.
    Stream(StreamId),
    /// The devices of a backend (the answer to [`Hello::Register`]).
    Devices(Vec<DeviceInfo>),
    /// Data follows: `len` raw bytes.
    Data {
        /// Payload length.
        len: u64,
    },
    /// The request failed.
    Error(WireError),
    /// *Protocol 7.* A new buffer and its device address.
    BufferAt {
        /// The buffer.
        buffer: BufferId,
        /// Where it starts in the session's device address space.
        address: u64,
    },
    /// *Protocol 7.* A kernel and its parameter layout.
    FunctionLayout {
        /// The kernel's id.
        id: FunctionId,
        /// The size in bytes of each parameter, in order, when the device knows them (a
        /// launch of a kernel whose sizes are unknown is refused).
        sizes: Option<Vec<u32>>,
    },
    /// *Protocol 7.* The backend does not hold the image a [`Request::ModuleLoadCached`] named.
    NotCached,
    /// *Protocol 8.* The answer to [`Hello::Resume`]: the session is back on this connection.
    /// The reply frames the client lacks follow it, then replies as usual.
    Resumed {
        /// Envelopes the backend has handled: the client sends again every one after it.
        handled: u64,
    },
    /// *Protocol 9.* A module variable: a buffer over its memory, where it lies and its size.
    Global {
        /// The buffer.
        buffer: BufferId,
        /// Where the variable starts in the session's device address space.
        address: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// *Protocol 10.* A kernel's attributes.
    KernelAttributes(KernelAttributes),
    /// *Protocol 11.* What the session's kernels printed (device-side `printf`), as the device
    /// wrote it out: sent with id 0, before the reply that follows it, at most
    /// [`MAX_PRINTED`] bytes a frame. Answers no request.
    Printed(Vec<u8>),
    /// *Protocol 11.* The value a context limit has now ([`Request::SetLimit`]).
    Limit(u64),
    /// *Protocol 12.* Clusters the device holds at once ([`Request::MaxActiveClusters`]).
    Clusters(u32),
    /// *Protocol 13.* An encoded tensor map, [`TENSOR_MAP_BYTES`] bytes ([`Request::EncodeTensorMap`]).
    TensorMap(Vec<u8>),
    /// *Protocol 14.* Physical device memory ([`Request::CreatePhysical`]): its id in the session.
    Physical(u64),
    /// *Protocol 15.* What the device's sensors read ([`Request::Telemetry`]).
    Telemetry(Telemetry),
    /// *Protocol 16.* A CUDA array ([`Request::CreateArray`]).
    Array(ArrayId),
    /// *Protocol 16.* A texture or surface object: the device's value, which kernels take.
    Object(u64),
    /// *Protocol 18.* The secret that opens a shared allocation ([`Request::ExportMemory`]).
    Exported([u8; 16]),
    /// *Protocol 19.* Physical memory opened from another session's ([`Request::ImportPhysical`]).
    ImportedPhysical {
        /// Its id in this session.
        physical: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// *Protocol 20.* The names of a module's kernels ([`Request::ModuleKernels`]), in the
    /// driver's order.
    KernelNames(Vec<String>),
    /// *Protocol 21.* The linked image ([`Request::Link`]): `len` bytes follow.
    Linked {
        /// The image's length.
        len: u64,
        /// What the linker logged (`CU_JIT_INFO_LOG_BUFFER`).
        info_log: String,
    },
}

/// The most kernel output one [`Response::Printed`] frame carries; more goes in several.
pub const MAX_PRINTED: usize = 64 << 10;

/// Error categories a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// Not enough device memory.
    OutOfMemory,
    /// The buffer does not exist in this session (never allocated, freed, or another session's).
    InvalidBuffer,
    /// An access outside a buffer's bounds.
    OutOfBounds,
    /// The module does not exist in this session.
    InvalidModule,
    /// No kernel (or, for [`Request::ModuleGlobal`], no variable) of that name in the module.
    UnknownKernel,
    /// The function id does not exist in this session.
    InvalidFunction,
    /// The stream does not exist in this session.
    InvalidStream,
    /// Wrong argument count or types, or an invalid launch shape.
    InvalidArgument,
    /// The operation needs a CUDA device (e.g. loading PTX on the CPU device).
    NeedsCuda,
    /// A module failed to load or compile; the message holds the log.
    ModuleLoad,
    /// The device failed while executing (driver error).
    Device,
    /// A kernel fault (illegal address, trap) left the session's device context unusable:
    /// every further call of this session fails; open a new session to go on. Other sessions
    /// are not affected.
    ContextLost,
    /// The request is not allowed (capability missing or wrong).
    Unauthorized,
    /// Anything else.
    Internal,
}

/// An error as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct WireError {
    /// The category.
    pub kind: ErrorKind,
    /// What happened, for humans.
    pub message: String,
}

impl WireError {
    /// Builds an error.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_roundtrip_and_bad_magic() {
        let p = Preamble { version: 513 };
        assert_eq!(Preamble::parse(p.to_bytes()), Some(p));
        assert_eq!(Preamble::parse(*b"XY\x01\x00"), None);
    }

    #[test]
    fn launch_envelope_is_small() {
        let env = Envelope {
            id: 0,
            request: Request::Launch {
                function: FunctionId(3),
                dims: LaunchDims { grid: [256, 1, 1], block: [256, 1, 1], shared_mem: 0 },
                args: vec![
                    KernelArg::F32(2.0),
                    KernelArg::Ptr(DevicePtr { buffer: BufferId(1), offset: 0 }),
                    KernelArg::Ptr(DevicePtr { buffer: BufferId(2), offset: 0 }),
                    KernelArg::U64(1 << 20),
                ],
                stream: StreamId(0),
            },
        };
        let bytes = crate::frame::frame_bytes(&env).unwrap();
        assert!(bytes.len() < 64, "a launch frame is {} bytes", bytes.len());
    }
}
