//! Calls shaped for a driver API, which the CUDA shim (`ac-cuda`) makes on behalf of programs
//! written against `libcuda`: an allocation answers its device address (the program's kernels
//! take it as a raw pointer, and the program does arithmetic on it), and a kernel lookup answers
//! the parameters' sizes (`cuLaunchKernel` is given a pointer per parameter and no sizes).
//! Both need backend protocol 7; a module's variables (`__device__`, `__constant__`), which the
//! program reads and writes by address, need protocol 9; a kernel's attributes (what it uses,
//! and the dynamic shared memory it may ask for: `cuFuncSetAttribute`) need protocol 10; a
//! session's context limits (`cuCtxSetLimit`) need protocol 11; thread block clusters 12,
//! tensor maps (`cuTensorMapEncodeTiled`) 13, virtual memory management (`cuMemCreate`,
//! `cuMemMap`: ranges of address space with physical memory mapped into them) 14, and memory
//! shared between the processes of a job (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`) 18, and
//! physical memory shared so (`cuMemExportToShareableHandle`) 19; listing a module's kernels
//! 20, and linking device code on the device's JIT linker (`cuLinkComplete`) 21.

use ac_proto::backend::{
    image_digest, ContextLimit, JitOption, KernelArg, KernelAttributes, KernelSetting, LaunchDims, LinkInput,
    ModuleSource, Request, Response, TensorMapSpec, TENSOR_MAP_BYTES,
};
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, DeviceBuffer, Error, Function, Module, Result, Stream};

/// The backend protocol that serves these calls.
const DRIVER_CALLS: u16 = 7;
/// The backend protocol that serves module variables.
const MODULE_VARIABLES: u16 = 9;
/// The backend protocol that serves kernel attributes and cooperative launches.
const KERNEL_ATTRIBUTES: u16 = 10;
/// The backend protocol that serves context limits.
const CONTEXT_LIMITS: u16 = 11;
/// The backend protocol that serves thread block clusters.
const CLUSTERS: u16 = 12;
/// The backend protocol that serves tensor maps and non-portable cluster sizes.
const TENSOR_MAPS: u16 = 13;
/// The backend protocol that serves virtual memory management.
const VIRTUAL_MEMORY: u16 = 14;
/// The backend protocol that serves memory shared between sessions.
const SHARED_MEMORY: u16 = 18;
/// The backend protocol that serves physical memory shared between sessions.
const SHARED_PHYSICAL: u16 = 19;
/// The backend protocol that lists a module's kernels.
const KERNEL_NAMES: u16 = 20;
/// The backend protocol that links device code.
const LINK: u16 = 21;

/// What the device's JIT linker made ([`Accelerator::link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// The linked image, for the device's architecture (a cubin from a GPU's driver).
    pub image: Bytes,
    /// What the linker logged.
    pub info_log: String,
}

impl Accelerator {
    /// Links `inputs` (each with its bytes, as many as it announces) with the device's JIT
    /// linker, for the device's own architecture: what `cuLinkComplete` makes. A failed link is
    /// [`crate::ErrorKind::ModuleLoad`], with the linker's error log.
    pub async fn link(&self, inputs: &[(LinkInput, &[u8])], options: &[JitOption]) -> Result<Linked> {
        self.needs_protocol(LINK, "linking device code")?;
        if let Some((input, bytes)) = inputs.iter().find(|(input, bytes)| input.len != bytes.len() as u64) {
            let why = format!("link input `{}` announces {} bytes and has {}", input.name, input.len, bytes.len());
            return Err(Error::InvalidArgument(why));
        }
        let (inputs, payload) = ac_proto::backend::jit_link::joined(inputs);
        if payload.len() as u64 > ac_proto::backend::jit_link::MAX_BYTES {
            let why = format!(
                "a link of {} bytes of inputs: at most {} go",
                payload.len(),
                ac_proto::backend::jit_link::MAX_BYTES
            );
            return Err(Error::InvalidArgument(why));
        }
        match self.call(Request::Link { inputs, options: options.to_vec() }, Bytes::from(payload)).await? {
            Answer::Linked { image, info_log } => Ok(Linked { image, info_log }),
            other => Err(unexpected(other)),
        }
    }
}

impl Accelerator {
    /// Refuses a driver-shaped call to a backend too old to serve it.
    fn needs_driver_calls(&self, call: &str) -> Result<()> {
        self.needs_protocol(DRIVER_CALLS, call)
    }

    /// Refuses `call` to a backend that speaks a protocol older than `version`.
    pub(crate) fn needs_protocol(&self, version: u16, call: &str) -> Result<()> {
        if self.inner.version < version {
            return Err(Error::VersionMismatch(format!(
                "{call} needs backend protocol {version}; this backend speaks {} (upgrade ac-backend)",
                self.inner.version
            )));
        }
        Ok(())
    }

    /// Allocates `bytes` (zeroed) and answers the buffer with its device address: where its
    /// first byte lies in this session's device address space.
    pub async fn alloc_addressed(&self, bytes: u64) -> Result<(DeviceBuffer<u8>, u64)> {
        self.needs_driver_calls("an allocation with its address")?;
        let len = usize::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("{bytes} bytes")))?;
        match self.call(Request::MemAllocAt { bytes }, Bytes::new()).await? {
            Answer::Response(Response::BufferAt { buffer, address }) => {
                Ok((DeviceBuffer::adopt(self.clone(), buffer, len), address))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Sets one of this session's context limits (`cuCtxSetLimit`: a GPU thread's stack, the
    /// printf buffer, the in-kernel heap) once the work queued before has finished, and answers
    /// the value in effect. The device refuses what it cannot hold; the memory a limit reserves
    /// counts against the session's quota, as allocations do.
    pub async fn set_limit(&self, limit: ContextLimit, value: u64) -> Result<u64> {
        self.needs_protocol(CONTEXT_LIMITS, "a context limit")?;
        match self.call(Request::SetLimit { limit, value }, Bytes::new()).await? {
            Answer::Response(Response::Limit(value)) => Ok(value),
            other => Err(unexpected(other)),
        }
    }

    /// Has the device's driver encode the tensor map of `spec` (a Hopper GPU's TMA descriptor,
    /// which kernels take as a `CUtensorMap` parameter). The whole tensor must lie in the
    /// buffer `spec.address` points into; the driver refuses what it cannot describe.
    pub async fn encode_tensor_map(&self, spec: TensorMapSpec) -> Result<[u8; TENSOR_MAP_BYTES]> {
        self.needs_protocol(TENSOR_MAPS, "a tensor map")?;
        match self.call(Request::EncodeTensorMap(spec), Bytes::new()).await? {
            Answer::Response(Response::TensorMap(bytes)) => bytes
                .try_into()
                .map_err(|bytes: Vec<u8>| Error::Protocol(format!("a tensor map of {} bytes", bytes.len()))),
            other => Err(unexpected(other)),
        }
    }

    /// Shares `buffer`, an allocation of this session's, with the job's other processes on this
    /// accelerator: the secret that opens it there ([`Accelerator::import_memory`]), the same
    /// each time for the same buffer.
    pub async fn export_memory(&self, buffer: &DeviceBuffer<u8>) -> Result<[u8; 16]> {
        self.needs_protocol(SHARED_MEMORY, "shared memory")?;
        match self.call(Request::ExportMemory { buffer: buffer.id() }, Bytes::new()).await? {
            Answer::Response(Response::Exported(secret)) => Ok(secret),
            other => Err(unexpected(other)),
        }
    }

    /// Opens the memory another session of this job on this accelerator shared (its
    /// [`Accelerator::export_memory`] secret): a buffer over it, its device address and its size.
    /// Dropping the buffer closes it; the memory goes once its owner has freed it and every
    /// process has closed it.
    pub async fn import_memory(&self, secret: [u8; 16]) -> Result<(DeviceBuffer<u8>, u64, u64)> {
        self.needs_protocol(SHARED_MEMORY, "shared memory")?;
        match self.call(Request::ImportMemory { secret }, Bytes::new()).await? {
            Answer::Response(Response::Global { buffer, address, size }) => {
                let len = usize::try_from(size).map_err(|_| Error::Protocol(format!("{size} bytes shared")))?;
                Ok((DeviceBuffer::adopt(self.clone(), buffer, len), address, size))
            }
            other => Err(unexpected(other)),
        }
    }
}

/// Physical device memory (`cuMemCreate`), mapped into reserved ranges with
/// [`Accelerator::map_physical`]. Dropping it releases it: its memory goes once it is unmapped
/// everywhere.
#[derive(Debug)]
pub struct PhysicalMemory {
    acc: Accelerator,
    id: u64,
    bytes: u64,
}

impl PhysicalMemory {
    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether it holds no bytes (never: a creation of 0 bytes is refused).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for PhysicalMemory {
    fn drop(&mut self) {
        self.acc.post_from_drop(Request::ReleasePhysical { physical: self.id });
    }
}

impl Accelerator {
    /// Reserves `bytes` of this session's device address space, aligned to `alignment` (0: the
    /// device's granularity, 2 MiB on NVIDIA's GPUs), as a buffer none of whose bytes may be
    /// touched until physical memory is mapped there ([`Accelerator::map_physical`]). Answers
    /// it with its device address; dropping it unmaps what is mapped and frees the range.
    pub async fn reserve_range(&self, bytes: u64, alignment: u64) -> Result<(DeviceBuffer<u8>, u64)> {
        self.needs_protocol(VIRTUAL_MEMORY, "a reserved range")?;
        let len = usize::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("{bytes} bytes")))?;
        match self.call(Request::ReserveRange { bytes, alignment }, Bytes::new()).await? {
            Answer::Response(Response::BufferAt { buffer, address }) => {
                Ok((DeviceBuffer::adopt(self.clone(), buffer, len), address))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Creates `bytes` of physical device memory, zeroed (a multiple of the granularity); it
    /// counts against the session's quota until released and unmapped.
    pub async fn create_physical(&self, bytes: u64) -> Result<PhysicalMemory> {
        self.needs_protocol(VIRTUAL_MEMORY, "physical memory")?;
        match self.call(Request::CreatePhysical { bytes }, Bytes::new()).await? {
            Answer::Response(Response::Physical(id)) => Ok(PhysicalMemory { acc: self.clone(), id, bytes }),
            other => Err(unexpected(other)),
        }
    }

    /// Shares `physical`, physical memory this session created, with the job's other processes
    /// on this accelerator: the secret that imports it there ([`Accelerator::import_physical`]),
    /// the same each time for the same memory.
    pub async fn export_physical(&self, physical: &PhysicalMemory) -> Result<[u8; 16]> {
        self.needs_protocol(SHARED_PHYSICAL, "shared physical memory")?;
        match self.call(Request::ExportPhysical { physical: physical.id }, Bytes::new()).await? {
            Answer::Response(Response::Exported(secret)) => Ok(secret),
            other => Err(unexpected(other)),
        }
    }

    /// Imports the physical memory another session of this job on this accelerator shared (its
    /// [`Accelerator::export_physical`] secret), to map into this session's ranges. Dropping it
    /// releases it; the memory goes once every process has released and unmapped it.
    pub async fn import_physical(&self, secret: [u8; 16]) -> Result<PhysicalMemory> {
        self.needs_protocol(SHARED_PHYSICAL, "shared physical memory")?;
        match self.call(Request::ImportPhysical { secret }, Bytes::new()).await? {
            Answer::Response(Response::ImportedPhysical { physical, size }) => {
                Ok(PhysicalMemory { acc: self.clone(), id: physical, bytes: size })
            }
            other => Err(unexpected(other)),
        }
    }

    /// Maps the first `bytes` of `physical` at `offset` into `range` (a reserved range),
    /// readable and writable by the device. The mapping holds the physical memory.
    pub async fn map_physical(
        &self,
        range: &DeviceBuffer<u8>,
        offset: u64,
        bytes: u64,
        physical: &PhysicalMemory,
    ) -> Result<()> {
        self.needs_protocol(VIRTUAL_MEMORY, "a mapping")?;
        let request = Request::MapPhysical { range: range.id(), offset, bytes, physical: physical.id };
        match self.call(request, Bytes::new()).await? {
            Answer::Response(Response::Ok) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Unmaps the mappings of `range` within `bytes` at `offset` (whole mappings), after the
    /// work queued before on every stream.
    pub async fn unmap_range(&self, range: &DeviceBuffer<u8>, offset: u64, bytes: u64) -> Result<()> {
        self.needs_protocol(VIRTUAL_MEMORY, "an unmapping")?;
        match self.call(Request::UnmapRange { range: range.id(), offset, bytes }, Bytes::new()).await? {
            Answer::Response(Response::Ok) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

impl Accelerator {
    /// Loads a module image, sending it only if the backend does not hold it for this session's
    /// owner already (by its SHA-256): a framework's images are hundreds of MB, and each of a
    /// job's processes loads the same ones. Answers the module and whether the image was sent.
    pub async fn load_module_cached(&self, source: ModuleSource, image: &[u8]) -> Result<(Module, bool)> {
        self.needs_driver_calls("a module load by digest")?;
        let request = Request::ModuleLoadCached { source: source.clone(), digest: image_digest(image) };
        match self.call(request, Bytes::new()).await? {
            Answer::Response(Response::Module(id)) => Ok((Module::new(self.clone(), id), false)),
            Answer::Response(Response::NotCached) => Ok((self.load_module(source, image).await?, true)),
            other => Err(unexpected(other)),
        }
    }
}

impl Module {
    /// Looks a kernel up by name, with the size in bytes of each of its parameters when the
    /// device knows them.
    pub async fn function_layout(&self, name: &str) -> Result<(Function, Option<Vec<u32>>)> {
        let acc = self.accelerator();
        acc.needs_driver_calls("a kernel lookup with its parameter layout")?;
        let request = Request::FunctionLayout { module: self.id(), name: name.to_string() };
        match acc.call(request, Bytes::new()).await? {
            Answer::Response(Response::FunctionLayout { id, sizes }) => {
                Ok((Function::new(acc.clone(), id, name, None), sizes))
            }
            other => Err(unexpected(other)),
        }
    }
}

impl Module {
    /// The names of the kernels the module holds, in the driver's order.
    pub async fn kernel_names(&self) -> Result<Vec<String>> {
        let acc = self.accelerator();
        acc.needs_protocol(KERNEL_NAMES, "listing a module's kernels")?;
        match acc.call(Request::ModuleKernels { module: self.id() }, Bytes::new()).await? {
            Answer::Response(Response::KernelNames(names)) => Ok(names),
            other => Err(unexpected(other)),
        }
    }
}

/// A module's variable: a buffer over the memory the module holds for it.
#[derive(Debug)]
pub struct Global {
    /// The buffer (the module's: dropping it frees nothing, unloading the module ends it).
    pub buffer: DeviceBuffer<u8>,
    /// Where it starts in the session's device address space.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl Module {
    /// Looks up the module's variable `name` (a CUDA `__device__` or `__constant__` variable):
    /// a buffer over its memory, valid until the module is unloaded.
    pub async fn global(&self, name: &str) -> Result<Global> {
        let acc = self.accelerator();
        acc.needs_protocol(MODULE_VARIABLES, "a module variable")?;
        let request = Request::ModuleGlobal { module: self.id(), name: name.to_string() };
        match acc.call(request, Bytes::new()).await? {
            Answer::Response(Response::Global { buffer, address, size }) => {
                let len = usize::try_from(size).map_err(|_| Error::InvalidArgument(format!("{size} bytes")))?;
                Ok(Global { buffer: DeviceBuffer::borrow(acc.clone(), buffer, len), address, size })
            }
            other => Err(unexpected(other)),
        }
    }
}

impl Function {
    /// What the device says of the kernel: its registers, static shared memory and limits.
    pub async fn attributes(&self) -> Result<KernelAttributes> {
        let acc = self.accelerator();
        acc.needs_protocol(KERNEL_ATTRIBUTES, "a kernel's attributes")?;
        match acc.call(Request::KernelAttributes { function: self.id() }, Bytes::new()).await? {
            Answer::Response(Response::KernelAttributes(attributes)) => Ok(attributes),
            other => Err(unexpected(other)),
        }
    }

    /// Launches on `stream` with every block resident at once, so that they may wait for each
    /// other (a cooperative launch; CUDA's grid-wide synchronization). A grid larger than the
    /// device holds at once fails, at the next synchronizing call as any launch error.
    pub async fn launch_cooperative_on(&self, stream: &Stream, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.check(args)?;
        let acc = self.accelerator();
        acc.needs_protocol(KERNEL_ATTRIBUTES, "a cooperative launch")?;
        let request =
            Request::LaunchCooperative { function: self.id(), dims, args: args.to_vec(), stream: stream.id() };
        acc.post(request, Bytes::new()).await
    }

    /// Launches on `stream` in clusters of `cluster` blocks (x, y, z; each dividing the grid's),
    /// each cluster's blocks resident at once on one GPU processing cluster, sharing their
    /// shared memory (CUDA's thread block clusters, compute capability 9.0 and later). A shape
    /// the device refuses fails, at the next synchronizing call as any launch error.
    pub async fn launch_clustered_on(
        &self,
        stream: &Stream,
        dims: LaunchDims,
        cluster: [u32; 3],
        args: &[KernelArg],
    ) -> Result<()> {
        self.check(args)?;
        let acc = self.accelerator();
        acc.needs_protocol(CLUSTERS, "a launch in thread block clusters")?;
        let request =
            Request::LaunchClustered { function: self.id(), dims, cluster, args: args.to_vec(), stream: stream.id() };
        acc.post(request, Bytes::new()).await
    }

    /// How many clusters of `cluster` blocks of the kernel, launched with `dims`' block and
    /// dynamic shared memory, the device holds at once.
    pub async fn max_active_clusters(&self, dims: LaunchDims, cluster: [u32; 3]) -> Result<u32> {
        let acc = self.accelerator();
        acc.needs_protocol(CLUSTERS, "a cluster occupancy query")?;
        match acc.call(Request::MaxActiveClusters { function: self.id(), dims, cluster }, Bytes::new()).await? {
            Answer::Response(Response::Clusters(count)) => Ok(count),
            other => Err(unexpected(other)),
        }
    }

    /// Sets one of the kernel's attributes for its later launches in this session (after the
    /// work queued before). A value past the device's limits is refused.
    pub async fn set_attribute(&self, setting: KernelSetting) -> Result<()> {
        let acc = self.accelerator();
        acc.needs_protocol(KERNEL_ATTRIBUTES, "setting a kernel's attribute")?;
        if let KernelSetting::NonPortableClusterSizeAllowed(_) = setting {
            acc.needs_protocol(TENSOR_MAPS, "allowing a kernel non-portable cluster sizes")?;
        }
        acc.call_ok(Request::SetKernelAttribute { function: self.id(), setting }).await
    }
}
