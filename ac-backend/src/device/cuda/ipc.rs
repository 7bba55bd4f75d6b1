//! Memory shared with another session's process (`session::ipc`): allocations by the driver's
//! IPC handles (protocol 18: `cuIpcGetMemHandle`, `cuIpcOpenMemHandle`, `cuIpcCloseMemHandle`),
//! physical memory by its shareable handles (protocol 19: `cuMemExportToShareableHandle` and
//! `cuMemImportFromShareableHandle` of a POSIX descriptor, which the session workers pass
//! through the backend). Only a session worker's context has a process of its own; contexts
//! sharing the daemon's process refuse (the driver refuses an IPC handle in the process that
//! made it, and a mapping there is every session's context's to reach).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use ac_proto::backend::{ErrorKind, WireError};
use cudarc::driver::sys;

use super::context::{CudaContext, Region};
use super::driver::blocking;
use crate::device::{DeviceMem, DeviceResult, NO_PROCESS_OF_ITS_OWN};

/// Bytes of a driver's IPC memory handle.
const HANDLE_BYTES: usize = 64;

impl CudaContext {
    /// Refuses, saying `why`, what only a context with a process of its own may do (a session
    /// worker's, not one sharing the daemon's process: `isolation = "context"`).
    pub(super) fn own_process(&self, why: &str) -> DeviceResult<()> {
        match self.owned {
            true => Err(WireError::new(ErrorKind::NeedsCuda, why)),
            false => Ok(()),
        }
    }

    /// `cuIpcGetMemHandle` of one of the context's allocations.
    pub(super) fn export_on_gpu(&self, mem: DeviceMem) -> DeviceResult<Vec<u8>> {
        self.own_process(NO_PROCESS_OF_ITS_OWN)?;
        self.address(mem, 0, 0)?;
        self.enter()?;
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; HANDLE_BYTES] };
        // SAFETY: valid out-pointer; `mem` is an allocation of this context (checked above).
        self.check("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut handle, mem.0) })?;
        Ok(handle.reserved.iter().map(|&b| b as u8).collect())
    }

    /// `cuIpcOpenMemHandle` of another process's allocation of `size` bytes: its address here,
    /// recorded as an opened region.
    pub(super) fn open_on_gpu(&self, handle: &[u8], size: u64) -> DeviceResult<DeviceMem> {
        self.own_process(NO_PROCESS_OF_ITS_OWN)?;
        let reserved: [u8; HANDLE_BYTES] = handle.try_into().map_err(|_| {
            WireError::new(ErrorKind::InvalidArgument, format!("an IPC handle of {} bytes", handle.len()))
        })?;
        self.enter()?;
        let handle = sys::CUipcMemHandle_st { reserved: reserved.map(|b| b as std::ffi::c_char) };
        let mut ptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: valid out-pointer; the handle is the exporter's driver's.
        self.check("cuIpcOpenMemHandle", unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, handle, flags) })?;
        let region = Region { size, module: None, reserved: false, opened: true };
        self.allocations.lock().expect("allocations poisoned").insert(ptr, region);
        Ok(DeviceMem(ptr))
    }

    /// `cuMemExportToShareableHandle` of physical memory as a POSIX descriptor of this process.
    pub(super) fn export_physical_on_gpu(&self, handle: u64) -> DeviceResult<OwnedFd> {
        self.own_process(NO_PROCESS_OF_ITS_OWN)?;
        self.enter()?;
        let mut fd: std::ffi::c_int = -1;
        let kind = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        // SAFETY: the out-pointer is a C int, as the POSIX descriptor type asks; the handle is
        // the session's, created with that handle type (`allocation_prop`).
        let code = unsafe { sys::cuMemExportToShareableHandle((&raw mut fd).cast(), handle, kind, 0) };
        self.check("cuMemExportToShareableHandle", code)?;
        // SAFETY: the driver opened it for this call's caller alone.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `cuMemImportFromShareableHandle` of another process's physical memory of `size` bytes
    /// by its descriptor: its handle here, released by `release_on_gpu` as one created here.
    pub(super) fn import_physical_on_gpu(&self, shareable: BorrowedFd<'_>, _size: u64) -> DeviceResult<u64> {
        self.own_process(NO_PROCESS_OF_ITS_OWN)?;
        self.enter()?;
        let mut handle = 0;
        let kind = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        // The POSIX type takes the descriptor itself, cast to a pointer (cuda.h).
        let os_handle = shareable.as_raw_fd() as usize as *mut std::ffi::c_void;
        // SAFETY: valid out-pointer; the descriptor is open for this call and stays the caller's.
        let code = unsafe { sys::cuMemImportFromShareableHandle(&mut handle, os_handle, kind) };
        self.check("cuMemImportFromShareableHandle", code)?;
        Ok(handle)
    }

    /// `cuIpcCloseMemHandle` of an opened region after the context's queued work (a kernel
    /// queued before the close still reads it), before it returns: the exporter's free follows.
    pub(super) fn close_on_gpu(&self, mem: DeviceMem) {
        {
            let mut allocations = self.allocations.lock().expect("allocations poisoned");
            if !allocations.get(&mem.0).is_some_and(|r| r.opened) {
                return;
            }
            allocations.remove(&mem.0);
        }
        // A lost context keeps its mappings until it is destroyed.
        if self.enter().is_ok() {
            // SAFETY: the context is current on this thread.
            blocking(|| unsafe { sys::cuCtxSynchronize() });
            // SAFETY: opened by `open_on_gpu` and forgotten above: closed once, after its work.
            unsafe { sys::cuIpcCloseMemHandle(mem.0) };
        }
    }
}
