//! CUDA IPC on the stand-in (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`,
//! `cuIpcCloseMemHandle`): what the backend's session workers call to share one session's
//! allocation with another's process. An exported allocation's bytes move into a memory file
//! (`memfd`), mapped where they were read from; the handle names the file by the exporter's
//! process and descriptor, and the importer maps the same file (`/proc/<pid>/fd/<fd>`), so
//! both see every store. As NVIDIA's driver does, a handle is refused in the process that made
//! it, and opened memory is closed, never freed.
// As in lib.rs: C functions taking raw pointers from their caller, as the driver does.
#![allow(unsafe_code)]

use std::ffi::c_uint;
use std::os::fd::AsRawFd;

use crate::space::Shared;
use crate::state::{Allocation, Storage};
use crate::{code, owned, run, with_context};

/// The first bytes of the stand-in's handles.
const MAGIC: [u8; 8] = *b"standin\x01";

/// A `CUipcMemHandle`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    bytes: [u8; 64],
}

/// What a handle says: the exporter's process, its descriptor of the file, the bytes.
fn decode(handle: &IpcHandle) -> Option<(u32, i32, usize)> {
    let b = &handle.bytes;
    let field = |at: usize| b[at..at + 8].try_into().ok().map(u64::from_le_bytes);
    (b[..8] == MAGIC).then_some(())?;
    let (pid, fd, len) = (field(8)?, field(16)?, field(24)?);
    Some((u32::try_from(pid).ok()?, i32::try_from(fd).ok()?, usize::try_from(len).ok()?))
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcGetMemHandle(out: *mut IpcHandle, address: u64) -> u32 {
    with_context("cuIpcGetMemHandle", |d, context| {
        let owner = d.memory.get(&address).map(|a| a.context);
        owned(d, "device allocation", owner, context)?;
        // A running kernel holds host pointers into the bytes about to move: the context's
        // work finishes first.
        run::finish_context(d, context);
        // That work may have freed it (a queued cuMemFreeAsync).
        let Some(allocation) = d.memory.get_mut(&address) else { return Err(code::INVALID_VALUE) };
        if allocation.users != 0 {
            d.violation(format!("cuIpcGetMemHandle of {address:#x} while a kernel still holds it"));
            return Err(code::INVALID_VALUE);
        }
        if let Storage::Heap(bytes) = &allocation.bytes {
            allocation.bytes = Storage::Shared(Shared::copy_of(bytes).ok_or(code::OUT_OF_MEMORY)?);
        }
        let (fd, len) = match &allocation.bytes {
            Storage::Shared(shared) if !shared.opened => (shared.file.as_raw_fd(), shared.len),
            _ => {
                d.violation(format!("cuIpcGetMemHandle of {address:#x}, a range or opened memory"));
                return Err(code::INVALID_VALUE);
            }
        };
        let mut bytes = [0u8; 64];
        bytes[..8].copy_from_slice(&MAGIC);
        for (at, value) in [(8, u64::from(std::process::id())), (16, fd as u64), (24, len as u64)] {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        out.write(IpcHandle { bytes });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(out: *mut u64, handle: IpcHandle, _flags: c_uint) -> u32 {
    with_context("cuIpcOpenMemHandle", |d, context| {
        let Some((pid, fd, len)) = decode(&handle) else {
            d.violation("cuIpcOpenMemHandle of bytes that are no handle".into());
            return Err(code::INVALID_VALUE);
        };
        if pid == std::process::id() {
            d.violation("cuIpcOpenMemHandle in the process that made the handle".into());
            return Err(code::INVALID_CONTEXT);
        }
        let shared = Shared::open(pid, fd, len).ok_or(code::INVALID_HANDLE)?;
        let address = d.place_range(len.next_multiple_of(4096), 4096);
        d.memory.insert(address, Allocation { context, bytes: Storage::Shared(shared), users: 0 });
        out.write(address);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle(out: *mut u64, handle: IpcHandle, flags: c_uint) -> u32 {
    cuIpcOpenMemHandle_v2(out, handle, flags)
}

#[no_mangle]
pub extern "C" fn cuIpcCloseMemHandle(address: u64) -> u32 {
    with_context("cuIpcCloseMemHandle", |d, context| {
        let owner = d.memory.get(&address).map(|a| a.context);
        owned(d, "opened memory", owner, context)?;
        if !matches!(&d.memory[&address].bytes, Storage::Shared(shared) if shared.opened) {
            d.violation(format!("cuIpcCloseMemHandle of {address:#x}, which no handle opened"));
            return Err(code::INVALID_VALUE);
        }
        // As a free: the work queued before still finds the memory, and no texture may read it.
        run::finish_context(d, context);
        let len = d.memory.get(&address).map_or(0, |a| a.bytes.len());
        crate::textures::check_unread(d, address, len);
        d.memory.remove(&address);
        Ok(())
    })
}
