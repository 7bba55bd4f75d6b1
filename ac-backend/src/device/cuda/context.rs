//! One session's CUDA context: its memory, modules, kernels and streams.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{
    ArrayCopy, ArraySpec, ContextLimit, DeviceInfo, ErrorKind, JitOption, KernelAttributes, KernelSetting, LaunchDims,
    LinkInput, ModuleSource, Sampler, TensorMapSpec, TextureResource, WireError,
};
use cudarc::driver::sys::{self, CUresult};

use super::driver::{self, bind, blocking, Handle};
use super::signature::{self, Signatures};
use super::staging::{self, StagingContext, StagingPool};
use super::{args, function, image, tensor_map, Gpu};
use crate::device::{
    builtin, validate_dims, Context, DeviceArg, DeviceMem, DeviceModule, DeviceResult, DeviceStream, Download, Kernel,
    LaunchMode, Limited, Linked, Upload,
};

/// The error for a kernel whose module is gone.
fn unloaded_kernel() -> WireError {
    WireError::new(ErrorKind::InvalidFunction, "kernel not loaded (or its module unloaded)")
}

pub(super) struct Module {
    pub(super) raw: Handle<sys::CUmodule>,
    pub(super) builtin: bool,
    /// Its kernels' parameter sizes as the image declares them (see [`signature`]).
    pub(super) signatures: Signatures,
}

/// Device memory the context can address: an allocation of its own, a module's variable, or
/// another process's allocation it opened.
#[derive(Clone, Copy)]
pub(super) struct Region {
    pub(super) size: u64,
    /// The module whose variable it is (its memory goes with the module); `None`: an
    /// allocation or a reserved range, freed by [`Context::free`].
    pub(super) module: Option<u64>,
    /// A reserved range (`cuMemAddressReserve`), whose mappings the session layer keeps.
    pub(super) reserved: bool,
    /// Another process's allocation, opened by its IPC handle (`super::ipc`): closed by
    /// [`Context::close_opened`], never freed.
    pub(super) opened: bool,
}

struct Function {
    raw: Handle<sys::CUfunction>,
    /// Parameter sizes: the driver's when it reports them, else the image's; `None`: unknown,
    /// and the kernel is never launched.
    sizes: Option<Vec<usize>>,
    builtin: bool,
    /// The module it belongs to: unloading that module removes it.
    module: u64,
}

/// A session's own CUDA context on one GPU. Dropping it destroys the context, and with it
/// everything the session allocated, loaded or queued; unless it is the GPU's primary context
/// (a session worker's one session), which goes when the GPU does.
pub struct CudaContext {
    pub(super) gpu: Arc<Gpu>,
    pub(super) raw: Handle<sys::CUcontext>,
    /// Whether `raw` was created for this session (else it is the GPU's primary context).
    pub(super) owned: bool,
    pub(super) allocations: Mutex<HashMap<u64, Region>>,
    pub(super) modules: Mutex<HashMap<u64, Module>>,
    kernels: Mutex<HashMap<u64, Function>>,
    streams: Mutex<HashMap<u64, Handle<sys::CUstream>>>,
    pub(super) next: AtomicU64,
    /// The fault that made the context unusable, returned by every later call.
    lost: Mutex<Option<WireError>>,
}

impl std::fmt::Debug for CudaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaContext").field("gpu", &self.gpu.index).finish()
    }
}

impl Drop for CudaContext {
    fn drop(&mut self) {
        if !self.owned {
            return; // the primary context: released, with what it holds, when the GPU goes
        }
        let raw = self.raw;
        // On the GPU's janitor thread, after the frees handed over before: destroying waits for
        // the context's work, and this drop may run on an async thread.
        self.gpu.janitor.defer(move || {
            // The whole `Send` handle, not its pointer.
            let raw: Handle<sys::CUcontext> = raw;
            // SAFETY: the context was created by `open` and nothing uses it any more (every
            // user held an `Arc` to this value). Destroying it frees its memory, modules and streams.
            unsafe { sys::cuCtxDestroy_v2(raw.0) };
        });
    }
}

impl CudaContext {
    /// Creates a context of its own on `gpu`, unless the GPU failed its check after a fault.
    pub fn open(gpu: Arc<Gpu>) -> DeviceResult<Self> {
        gpu.usable()?;
        let mut raw = std::ptr::null_mut();
        // Blocking sync: a thread waiting for the GPU sleeps instead of spinning (see the
        // module documentation of `cuda`, "Waiting").
        let flags = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;
        // SAFETY: valid out-pointer and device.
        driver::check("cuCtxCreate", unsafe { sys::cuCtxCreate_v2(&mut raw, flags, gpu.device) })?;
        Ok(Self::around(gpu, Handle(raw), true))
    }

    /// The session in the GPU's primary context: for a session worker, whose process serves one
    /// session, so that it needs no second context (half its device memory, and its time).
    pub fn in_primary(gpu: Arc<Gpu>) -> Self {
        let primary = gpu.primary;
        Self::around(gpu, primary, false)
    }

    fn around(gpu: Arc<Gpu>, raw: Handle<sys::CUcontext>, owned: bool) -> Self {
        Self {
            gpu,
            raw,
            owned,
            allocations: Mutex::new(HashMap::new()),
            modules: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            lost: Mutex::new(None),
        }
    }

    /// Makes the context current on this thread, unless a fault has lost it.
    pub(super) fn enter(&self) -> DeviceResult<()> {
        if let Some(lost) = self.lost.lock().expect("lost poisoned").clone() {
            return Err(lost);
        }
        bind(self.raw)
    }

    /// Checks a driver result, remembering a fault that loses the context.
    pub(super) fn check(&self, call: &str, code: CUresult) -> DeviceResult<()> {
        driver::check(call, code).inspect_err(|e| {
            if e.kind == ErrorKind::ContextLost {
                self.lost.lock().expect("lost poisoned").get_or_insert_with(|| e.clone());
                self.gpu.after_fault();
            }
        })
    }

    /// The device address of `len` bytes at `offset` into `mem`, checked against its size.
    pub(super) fn address(&self, mem: DeviceMem, offset: u64, len: u64) -> DeviceResult<u64> {
        let size = self
            .allocations
            .lock()
            .expect("allocations poisoned")
            .get(&mem.0)
            .ok_or_else(|| {
                WireError::new(ErrorKind::InvalidBuffer, "device memory was freed (or its module unloaded)")
            })?
            .size;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(mem.0 + offset),
            _ => Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!("range {offset}+{len} outside an allocation of {size} bytes"),
            )),
        }
    }

    /// The driver's handle of a kernel looked up in this context.
    fn function(&self, kernel: &Kernel) -> DeviceResult<sys::CUfunction> {
        let kernels = self.kernels.lock().expect("kernels poisoned");
        let f = kernels.get(&kernel.handle).ok_or_else(unloaded_kernel)?;
        Ok(f.raw.0)
    }

    fn stream(&self, stream: DeviceStream) -> DeviceResult<sys::CUstream> {
        self.streams
            .lock()
            .expect("streams poisoned")
            .get(&stream.0)
            .map(|s| s.0)
            .ok_or_else(|| WireError::new(ErrorKind::InvalidStream, "device stream does not exist"))
    }
}

impl Context for CudaContext {
    fn info(&self) -> DeviceInfo {
        self.gpu.info()
    }

    fn alloc(&self, bytes: u64) -> DeviceResult<DeviceMem> {
        if bytes == 0 {
            return Err(WireError::new(ErrorKind::InvalidArgument, "cannot allocate 0 bytes"));
        }
        self.enter()?;
        let mut ptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        let mut code = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) };
        if code == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            // Frees run on the janitor thread: once those in flight are done, try again.
            blocking(|| self.gpu.janitor.flush());
            self.enter()?;
            // SAFETY: as above.
            code = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) };
        }
        if let Err(mut e) = self.check("cuMemAlloc", code) {
            if e.kind == ErrorKind::OutOfMemory {
                let free = driver::memory_free().unwrap_or(0);
                e.message = format!("out of device memory: {bytes} bytes requested, {free} free ({})", e.message);
            }
            return Err(e);
        }
        if let Err(e) = self.zero(ptr, bytes) {
            // SAFETY: allocated just above in this context and known to nobody else.
            unsafe { sys::cuMemFree_v2(ptr) };
            return Err(e);
        }
        self.allocations
            .lock()
            .expect("allocations poisoned")
            .insert(ptr, Region { size: bytes, module: None, reserved: false, opened: false });
        Ok(DeviceMem(ptr))
    }

    fn free(&self, mem: DeviceMem) {
        {
            let mut allocations = self.allocations.lock().expect("allocations poisoned");
            // A module's variable is never freed here: its memory goes with the module.
            match allocations.get(&mem.0) {
                Some(r) if r.module.is_none() && r.reserved => {
                    let size = r.size;
                    allocations.remove(&mem.0);
                    return self.free_range_on_gpu(mem.0, size);
                }
                Some(r) if r.module.is_none() && !r.opened => allocations.remove(&mem.0),
                _ => return,
            };
        }
        // On the janitor thread: cuMemFree waits for the device, and frees come from drops
        // on async threads. The context is destroyed after this job (same queue), not before.
        let raw = self.raw;
        self.gpu.janitor.defer(move || {
            if bind(raw).is_ok() {
                // SAFETY: allocated by cuMemAlloc in this context and removed from the table,
                // so freed once. A lost context keeps its memory until it is destroyed.
                unsafe { sys::cuMemFree_v2(mem.0) };
            }
        });
    }

    fn write(&self, dst: DeviceMem, offset: u64, data: &[u8], stream: DeviceStream) -> DeviceResult<()> {
        self.enter()?;
        let address = self.address(dst, offset, data.len() as u64)?;
        let stream = self.stream(stream)?;
        // SAFETY: the range is inside the allocation; `data` outlives the copy, which is waited
        // for below.
        let code = unsafe { sys::cuMemcpyHtoDAsync_v2(address, data.as_ptr() as *const c_void, data.len(), stream) };
        self.check("cuMemcpyHtoDAsync", code)?;
        // `data` is pageable and the caller reuses it once this returns: the driver may still
        // be staging it after the call (finding 6), so the copy is waited for.
        // SAFETY: a stream of this context.
        self.check("cuStreamSynchronize", blocking(|| unsafe { sys::cuStreamSynchronize(stream) }))
    }

    fn read(&self, src: DeviceMem, offset: u64, out: &mut [u8], stream: DeviceStream) -> DeviceResult<()> {
        self.enter()?;
        let address = self.address(src, offset, out.len() as u64)?;
        let stream = self.stream(stream)?;
        // SAFETY: the range is inside the allocation and `out` outlives the copy: the stream is
        // synchronized before returning.
        unsafe {
            self.check(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut c_void, address, out.len(), stream),
            )?;
            self.check("cuStreamSynchronize", blocking(|| sys::cuStreamSynchronize(stream)))
        }
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
        self.enter()?;
        let to = self.address(dst, dst_offset, len)?;
        let from = self.address(src, src_offset, len)?;
        let stream = self.stream(stream)?;
        if len == 0 {
            return Ok(());
        }
        if dst == src && from < to + len && to < from + len {
            return self.copy_overlapping(to, from, len, stream);
        }
        // SAFETY: both ranges are inside their allocations and do not overlap.
        self.check("cuMemcpyDtoDAsync", unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, len as usize, stream) })
    }

    fn memset(&self, dst: DeviceMem, offset: u64, len: u64, value: u8, stream: DeviceStream) -> DeviceResult<()> {
        self.enter()?;
        let address = self.address(dst, offset, len)?;
        let stream = self.stream(stream)?;
        // SAFETY: the range is inside the allocation.
        self.check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(address, value, len as usize, stream) })
    }

    fn upload(&self, dst: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Upload + '_>> {
        self.enter()?;
        let address = self.address(dst, offset, len)?;
        Ok(Box::new(staging::PinnedUpload::start(self, address, len)?))
    }

    fn download(&self, src: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Download + '_>> {
        self.enter()?;
        let address = self.address(src, offset, len)?;
        Ok(Box::new(staging::PinnedDownload::start(self, address, len)?))
    }

    fn load_module(&self, source: &ModuleSource, payload: &[u8]) -> DeviceResult<DeviceModule> {
        self.enter()?;
        match source {
            ModuleSource::Builtin(name) if name == builtin::MODULE => {
                let cubin = self.gpu.builtin.clone()?;
                let signatures = builtin::KERNELS
                    .iter()
                    .map(|(name, params)| (name.to_string(), params.iter().map(|&p| args::kind_width(p)).collect()))
                    .collect();
                self.load_image(&cubin, true, signatures)
            }
            ModuleSource::Builtin(name) => Err(WireError::new(
                ErrorKind::ModuleLoad,
                format!("no builtin module `{name}` (the CUDA device has `{}`)", builtin::MODULE),
            )),
            ModuleSource::Ptx => self.load_image(&image::ptx_text(payload)?, false, signature::from_ptx(payload)),
            ModuleSource::Cubin => {
                image::check_binary(payload)?;
                self.load_image(payload, false, signature::from_cubin(payload))
            }
            ModuleSource::CudaC { options } => {
                let source = std::str::from_utf8(payload)
                    .map_err(|_| WireError::new(ErrorKind::ModuleLoad, "CUDA C source is not UTF-8"))?;
                let cubin = self.gpu.compiler.compile(source, options, self.gpu.properties.capability)?;
                self.load_image(&cubin, false, signature::from_cubin(&cubin))
            }
        }
    }

    fn unload_module(&self, module: DeviceModule) {
        let Some(unloaded) = self.modules.lock().expect("modules poisoned").remove(&module.0) else {
            return;
        };
        // Its functions and variables die with it: a launch of one, or a copy to one, is an
        // error, never a dead handle or address handed to the driver.
        self.kernels.lock().expect("kernels poisoned").retain(|_, f| f.module != module.0);
        self.allocations.lock().expect("allocations poisoned").retain(|_, r| r.module != Some(module.0));
        let module = unloaded;
        if bind(self.raw).is_ok() {
            // SAFETY: loaded in this context, removed from the table, so unloaded once.
            unsafe { sys::cuModuleUnload(module.raw.0) };
        }
    }

    fn kernel(&self, module: DeviceModule, name: &str) -> DeviceResult<Kernel> {
        self.enter()?;
        let (raw_module, is_builtin, declared) = {
            let modules = self.modules.lock().expect("modules poisoned");
            let m =
                modules.get(&module.0).ok_or_else(|| WireError::new(ErrorKind::InvalidModule, "module unloaded"))?;
            (m.raw, m.builtin, m.signatures.get(name).cloned())
        };
        let params = if is_builtin {
            let (_, params) = builtin::lookup(name).ok_or_else(|| {
                WireError::new(ErrorKind::UnknownKernel, format!("no kernel `{name}` in module `{}`", builtin::MODULE))
            })?;
            Some(params.to_vec())
        } else {
            None
        };
        let c_name = CString::new(name)
            .map_err(|_| WireError::new(ErrorKind::UnknownKernel, "a kernel name cannot contain a NUL byte"))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the module is loaded in this context; the name is NUL-terminated.
        let code = unsafe { sys::cuModuleGetFunction(&mut raw, raw_module.0, c_name.as_ptr()) };
        if code == CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(WireError::new(ErrorKind::UnknownKernel, format!("no kernel `{name}` in the module")));
        }
        self.check("cuModuleGetFunction", code)?;
        let sizes = function::param_sizes(raw).or(declared);
        let handle = self.next.fetch_add(1, Ordering::Relaxed);
        let function = Function { raw: Handle(raw), sizes: sizes.clone(), builtin: is_builtin, module: module.0 };
        self.kernels.lock().expect("kernels poisoned").insert(handle, function);
        Ok(Kernel { handle, name: name.to_string(), params, sizes })
    }

    fn global(&self, module: DeviceModule, name: &str) -> DeviceResult<(DeviceMem, u64)> {
        self.global_of(module, name)
    }

    fn kernel_names(&self, module: DeviceModule) -> DeviceResult<Vec<String>> {
        self.kernel_names_of(module)
    }

    fn link(&self, inputs: &[(LinkInput, &[u8])], options: &[JitOption]) -> DeviceResult<Linked> {
        self.link_inputs(inputs, options)
    }

    fn kernel_attributes(&self, kernel: &Kernel) -> DeviceResult<KernelAttributes> {
        self.enter()?;
        function::attributes(self.function(kernel)?)
    }

    fn set_kernel_attribute(&self, kernel: &Kernel, setting: KernelSetting) -> DeviceResult<()> {
        self.enter()?;
        function::set_attribute(self.function(kernel)?, setting)
    }

    fn set_limit(&self, limit: ContextLimit, value: u64) -> DeviceResult<Limited> {
        self.enter()?;
        super::limit::set(self.gpu.device, limit, value)
    }

    fn launch(&self, kernel: &Kernel, dims: &LaunchDims, args: &[DeviceArg], stream: DeviceStream) -> DeviceResult<()> {
        self.launch_as(kernel, dims, args, stream, LaunchMode::Plain)
    }

    fn launch_as(
        &self,
        kernel: &Kernel,
        dims: &LaunchDims,
        args: &[DeviceArg],
        stream: DeviceStream,
        mode: LaunchMode,
    ) -> DeviceResult<()> {
        self.enter()?;
        validate_dims(dims)?;
        // Checked and laid out under the lock, so the launch path copies no parameter list.
        let (raw, mut slots) = {
            let kernels = self.kernels.lock().expect("kernels poisoned");
            let f = kernels.get(&kernel.handle).ok_or_else(unloaded_kernel)?;
            if f.builtin {
                builtin::check_footprint(&kernel.name, args)?;
            }
            (f.raw, args::pack(&kernel.name, args, f.sizes.as_deref())?)
        };
        let base = slots.slots.as_mut_ptr();
        // SAFETY: every start is an index into `slots` (`pack` made them from its count).
        let mut params: Vec<*mut c_void> =
            slots.starts.iter().map(|&i| unsafe { base.add(i) } as *mut c_void).collect();
        let stream = self.stream(stream)?;
        let (call, code) = function::launch(raw.0, dims, stream, &mut params, mode);
        self.check(call, code)
    }

    fn max_active_clusters(&self, kernel: &Kernel, dims: &LaunchDims, cluster: [u32; 3]) -> DeviceResult<u32> {
        self.enter()?;
        function::max_active_clusters(self.function(kernel)?, dims, cluster)
    }

    fn encode_tensor_map(&self, spec: &TensorMapSpec<u64>) -> DeviceResult<Vec<u8>> {
        self.enter()?; // the driver may check the address against the current context
        tensor_map::encode(spec)
    }

    fn reserve_range(&self, bytes: u64, alignment: u64) -> DeviceResult<DeviceMem> {
        self.vmm_allowed()?;
        let ptr = self.reserve_on_gpu(bytes, alignment)?;
        let region = Region { size: bytes, module: None, reserved: true, opened: false };
        self.allocations.lock().expect("allocations poisoned").insert(ptr, region);
        Ok(DeviceMem(ptr))
    }

    fn create_physical(&self, bytes: u64) -> DeviceResult<u64> {
        self.vmm_allowed()?;
        self.create_on_gpu(bytes)
    }

    fn release_physical(&self, handle: u64) {
        self.release_on_gpu(handle);
    }

    fn map(&self, range: DeviceMem, offset: u64, bytes: u64, handle: u64) -> DeviceResult<()> {
        self.map_on_gpu(self.address(range, offset, bytes)?, bytes, handle)
    }

    fn unmap(&self, range: DeviceMem, offset: u64, bytes: u64) -> DeviceResult<()> {
        self.unmap_on_gpu(range, offset, bytes)
    }

    fn unmap_later(&self, range: DeviceMem, offset: u64, bytes: u64) {
        self.unmap_on_janitor(range, offset, bytes);
    }

    fn create_array(&self, spec: &ArraySpec) -> DeviceResult<u64> {
        self.create_array_on_gpu(spec)
    }

    fn destroy_array(&self, array: u64) {
        self.destroy_array_later(array);
    }

    fn copy_array(&self, copy: &ArrayCopy<u64, u64>, stream: DeviceStream) -> DeviceResult<()> {
        self.enter()?;
        let stream = self.stream(stream)?;
        self.copy_array_on(copy, stream)
    }

    fn create_object(&self, resource: &TextureResource<u64, u64>, sampler: Option<&Sampler>) -> DeviceResult<u64> {
        self.create_object_on_gpu(resource, sampler)
    }

    fn destroy_object(&self, object: u64, surface: bool) {
        self.destroy_object_later(object, surface);
    }

    fn export_allocation(&self, mem: DeviceMem) -> DeviceResult<Vec<u8>> {
        self.export_on_gpu(mem)
    }

    fn open_allocation(&self, handle: &[u8], size: u64) -> DeviceResult<DeviceMem> {
        self.open_on_gpu(handle, size)
    }

    fn close_opened(&self, mem: DeviceMem) {
        self.close_on_gpu(mem);
    }

    fn export_physical(&self, handle: u64) -> DeviceResult<OwnedFd> {
        self.export_physical_on_gpu(handle)
    }

    fn import_physical(&self, shareable: BorrowedFd<'_>, size: u64) -> DeviceResult<u64> {
        self.import_physical_on_gpu(shareable, size)
    }

    fn create_stream(&self) -> DeviceResult<DeviceStream> {
        self.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer. Non-blocking: no implicit ordering with the legacy
        // default stream, as the protocol's streams are independent.
        let code = unsafe { sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
        self.check("cuStreamCreate", code)?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.streams.lock().expect("streams poisoned").insert(id, Handle(raw));
        Ok(DeviceStream(id))
    }

    fn destroy_stream(&self, stream: DeviceStream) {
        let Some(raw) = self.streams.lock().expect("streams poisoned").remove(&stream.0) else {
            return;
        };
        if bind(self.raw).is_ok() {
            // SAFETY: created in this context, removed from the table, so destroyed once.
            unsafe { sys::cuStreamDestroy_v2(raw.0) };
        }
    }

    fn synchronize(&self, stream: DeviceStream) -> DeviceResult<()> {
        self.enter()?;
        let stream = self.stream(stream)?;
        // SAFETY: a stream of this context.
        self.check("cuStreamSynchronize", blocking(|| unsafe { sys::cuStreamSynchronize(stream) }))
    }
}

impl StagingContext for CudaContext {
    fn enter(&self) -> DeviceResult<()> {
        CudaContext::enter(self)
    }

    fn check(&self, call: &str, code: CUresult) -> DeviceResult<()> {
        CudaContext::check(self, call, code)
    }

    fn raw(&self) -> Handle<sys::CUcontext> {
        self.raw
    }

    fn pool(&self) -> &StagingPool {
        &self.gpu.pool
    }

    fn depth(&self) -> usize {
        self.gpu.depth
    }
}
