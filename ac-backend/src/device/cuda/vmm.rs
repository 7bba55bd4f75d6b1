//! Virtual memory management on the GPU's driver (protocol 14): ranges of the context's address
//! space (`cuMemAddressReserve`), physical memory (`cuMemCreate`) and mappings between them
//! (`cuMemMap`, `cuMemSetAccess`). The session layer has checked each map against the session's
//! own ranges and mappings (`session::vmm`); here the driver is called, and what releases memory
//! runs on the janitor thread after the context's queued work, as frees do.

use cudarc::driver::sys::{self, CUresult};

use super::context::CudaContext;
use super::driver::{self, bind};
use crate::device::{DeviceMem, DeviceResult};

impl CudaContext {
    /// `cuMemAddressReserve`: the range's start (the context records it as a region).
    pub(super) fn reserve_on_gpu(&self, bytes: u64, alignment: u64) -> DeviceResult<u64> {
        self.enter()?;
        let mut ptr = 0;
        // SAFETY: valid out-pointer; no hint address, no flags.
        let code = unsafe { sys::cuMemAddressReserve(&mut ptr, bytes as usize, alignment as usize, 0, 0) };
        self.check("cuMemAddressReserve", code)?;
        Ok(ptr)
    }

    /// `cuMemCreate` of `bytes` on this GPU, zeroed: physical memory holds whatever it held
    /// last, possibly another session's data.
    pub(super) fn create_on_gpu(&self, bytes: u64) -> DeviceResult<u64> {
        self.enter()?;
        let prop = self.allocation_prop();
        let mut handle = 0;
        // SAFETY: valid out-pointer and properties.
        let mut code = unsafe { sys::cuMemCreate(&mut handle, bytes as usize, &prop, 0) };
        if code == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            // Releases run on the janitor thread: once those in flight are done, try again.
            driver::blocking(|| self.gpu.janitor.flush());
            self.enter()?;
            // SAFETY: as above.
            code = unsafe { sys::cuMemCreate(&mut handle, bytes as usize, &prop, 0) };
        }
        self.check("cuMemCreate", code)?;
        if let Err(e) = self.zero_physical(handle, bytes) {
            // SAFETY: created just above and known to nobody else.
            unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        Ok(handle)
    }

    /// Zeroes physical memory through a mapping of its own, gone again before it returns.
    fn zero_physical(&self, handle: u64, bytes: u64) -> DeviceResult<()> {
        let ptr = self.reserve_on_gpu(bytes, 0)?;
        let zeroed = self.map_on_gpu(ptr, bytes, handle).and_then(|()| {
            let zeroed = self.zero(ptr, bytes);
            // SAFETY: mapped just above; the memset was waited for.
            unsafe { sys::cuMemUnmap(ptr, bytes as usize) };
            zeroed
        });
        // SAFETY: reserved just above, nothing mapped in it any more.
        unsafe { sys::cuMemAddressFree(ptr, bytes as usize) };
        zeroed
    }

    /// `cuMemMap` of `bytes` of `handle` at `at`, then `cuMemSetAccess` for this GPU (a mapping
    /// that cannot be made accessible is unmapped again).
    pub(super) fn map_on_gpu(&self, at: u64, bytes: u64, handle: u64) -> DeviceResult<()> {
        self.enter()?;
        // SAFETY: `at` lies in a range of this context's (the session layer checked it is its
        // own and unmapped); the handle is the session's.
        self.check("cuMemMap", unsafe { sys::cuMemMap(at, bytes as usize, 0, handle, 0) })?;
        let access = sys::CUmemAccessDesc {
            location: self.allocation_prop().location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: mapped just above; one descriptor.
        let code = unsafe { sys::cuMemSetAccess(at, bytes as usize, &access, 1) };
        if let Err(e) = self.check("cuMemSetAccess", code) {
            // SAFETY: mapped just above, and never made accessible.
            unsafe { sys::cuMemUnmap(at, bytes as usize) };
            return Err(e);
        }
        Ok(())
    }

    /// `cuMemUnmap` once the context's queued work is done (CUDA's unmap does not wait for
    /// it), before it returns, so that the bytes may be mapped again at once.
    pub(super) fn unmap_on_gpu(&self, range: DeviceMem, offset: u64, bytes: u64) -> DeviceResult<()> {
        self.enter()?;
        // SAFETY: the session's context, current on this thread.
        self.check("cuCtxSynchronize", driver::blocking(|| unsafe { sys::cuCtxSynchronize() }))?;
        // SAFETY: a mapping the session layer recorded, unmapped once (it forgets it now).
        self.check("cuMemUnmap", unsafe { sys::cuMemUnmap(range.0 + offset, bytes as usize) })
    }

    /// As [`CudaContext::unmap_on_gpu`], on the janitor thread (a range dropped, perhaps on an
    /// async thread), in order with the releases and frees queued after it.
    pub(super) fn unmap_on_janitor(&self, range: DeviceMem, offset: u64, bytes: u64) {
        let raw = self.raw;
        self.gpu.janitor.defer(move || {
            if bind(raw).is_ok() {
                // SAFETY: the session's context, current on this thread.
                unsafe { sys::cuCtxSynchronize() };
            }
            // SAFETY: a mapping the session layer recorded and has forgotten: unmapped once.
            unsafe { sys::cuMemUnmap(range.0 + offset, bytes as usize) };
        });
    }

    /// `cuMemRelease`, after the unmaps queued before it.
    pub(super) fn release_on_gpu(&self, handle: u64) {
        // SAFETY: a handle the session layer has forgotten: released once.
        self.gpu.janitor.defer(move || unsafe {
            sys::cuMemRelease(handle);
        });
    }

    /// `cuMemAddressFree` of a range, after the unmaps queued before it and the context's work.
    pub(super) fn free_range_on_gpu(&self, ptr: u64, bytes: u64) {
        let raw = self.raw;
        self.gpu.janitor.defer(move || {
            if bind(raw).is_ok() {
                // SAFETY: the session's context, current on this thread.
                unsafe { sys::cuCtxSynchronize() };
            }
            // SAFETY: a range this context reserved, removed from its table: freed once.
            unsafe { sys::cuMemAddressFree(ptr, bytes as usize) };
        });
    }

    /// Refuses virtual memory management to a context that shares its process with other
    /// sessions' (`isolation = "context"`): a mapping is the process's, reachable from every
    /// context on the GPU, where an allocation is its context's alone. A session worker's
    /// context (the GPU's primary one in a process of its own) may.
    pub(super) fn vmm_allowed(&self) -> DeviceResult<()> {
        let why = "virtual memory management needs session workers (isolation = \"process\", a GPU's default): with isolation = \"context\" sessions share one process, whose mappings every context on the GPU reaches";
        self.own_process(why)
    }

    /// Pinned memory on this GPU, exportable as a POSIX descriptor where the GPU allows (another
    /// session worker imports it: `ipc::export_physical_on_gpu`).
    fn allocation_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct, for which all zeroes is valid (no handle types, no flags).
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.gpu.device;
        if self.shareable_as_descriptor() {
            prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        prop
    }

    /// Whether the GPU's physical memory may be exported as a POSIX descriptor
    /// (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`); where it may not,
    /// memory is created without, and its export (`session::ipc`'s, which asks the driver at
    /// once) fails with the driver's reason.
    fn shareable_as_descriptor(&self) -> bool {
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED;
        driver::attribute(self.gpu.device, attribute).is_ok_and(|value| value == 1)
    }
}
