//! Physical memory shared between processes by a POSIX descriptor
//! (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`): what the backend's
//! session workers call to share one session's physical memory with another's process. The
//! descriptor is one of the memory file itself, so the importer's mappings show the exporter's
//! stores. As NVIDIA's driver does, only memory created asking for the descriptor type exports,
//! and an import is new physical memory of the importer's, released and mapped as any.
// As in lib.rs: C functions taking raw pointers from their caller, as the driver does.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use crate::space::Physical;
use crate::state::Driver;
use crate::vmm::{GRANULARITY, POSIX_DESCRIPTOR};
use crate::{code, with_context};

#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: u64,
    handle_type: u32,
    flags: u64,
) -> u32 {
    with_context("cuMemExportToShareableHandle", |d, _| {
        if shareable.is_null() || flags != 0 || handle_type != POSIX_DESCRIPTOR {
            return Err(code::INVALID_VALUE);
        }
        let physical = match d.physical.get(&handle) {
            Some(p) if !p.released => p,
            _ => {
                d.violation(format!("cuMemExportToShareableHandle of {handle:#x}, which is no live physical memory"));
                return Err(code::INVALID_VALUE);
            }
        };
        if !physical.exportable {
            d.violation(format!("cuMemExportToShareableHandle of {handle:#x}, created without the descriptor type"));
            return Err(code::INVALID_VALUE);
        }
        let fd = physical.file.try_clone().map_err(|_| code::OUT_OF_MEMORY)?;
        // The caller owns and closes it.
        *shareable.cast::<c_int>() = std::os::fd::IntoRawFd::into_raw_fd(fd);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(handle: *mut u64, os_handle: *mut c_void, kind: u32) -> u32 {
    with_context("cuMemImportFromShareableHandle", |d, context| {
        if handle.is_null() || kind != POSIX_DESCRIPTOR {
            return Err(code::INVALID_VALUE);
        }
        // The descriptor type passes the descriptor itself as the pointer (cuda.h).
        let fd = os_handle as usize as c_int;
        let Some((file, len)) = physical_file(fd) else {
            d.violation(format!("cuMemImportFromShareableHandle of descriptor {fd}, no physical memory's"));
            return Err(code::INVALID_VALUE);
        };
        let device = device_of(d, context)?;
        let id = d.handle();
        let physical = Physical { device, len, file, released: false, mappings: 0, exportable: true, imported: true };
        d.physical.insert(id, physical);
        *handle = id;
        Ok(())
    })
}

/// The device of `context`.
fn device_of(d: &Driver, context: u64) -> Result<i32, u32> {
    d.contexts.get(&context).map(|c| c.device).ok_or(code::INVALID_CONTEXT)
}

/// A descriptor of its own of the physical memory's file `fd` opens, and its size: `None`
/// unless `fd` is open on a memory file the stand-in made for physical memory.
fn physical_file(fd: c_int) -> Option<(OwnedFd, usize)> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    if !link.to_string_lossy().starts_with("/memfd:cuda-standin-physical") {
        return None;
    }
    // SAFETY: open (its link was just read) and only borrowed to duplicate it.
    let file = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().ok()?;
    // SAFETY: a zeroed stat is valid to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out-pointer.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut stat) } != 0 {
        return None;
    }
    let len = usize::try_from(stat.st_size).ok().filter(|&l| l > 0 && l.is_multiple_of(GRANULARITY))?;
    Some((file, len))
}
