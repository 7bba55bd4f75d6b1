//! `acMemAlloc`, `acMemCpy`, `acMemset`, `acMemFree`.

use std::ffi::{c_int, c_void};

use ac_frontend::blocking;

use crate::devices::{acDevice, DEVICES};
use crate::error::{acError, ffi, Failure, Outcome};
use crate::handles::{handle, value, write_out, Table};

/// Device memory on one accelerator. In `acMemCpy` an `acMem` stands where CUDA has a
/// device pointer.
#[allow(non_camel_case_types)]
pub type acMem = *mut acMem_st;

/// Never defined: a handle's value is a tagged number, not an address (opaque to C).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct acMem_st {
    _never: [u8; 0],
}

/// The direction of an `acMemCpy`, as CUDA's `cudaMemcpyKind`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum acMemcpyKind {
    /// `src` is host memory, `dst` an `acMem`.
    acMemcpyHostToDevice = 1,
    /// `src` is an `acMem`, `dst` host memory.
    acMemcpyDeviceToHost = 2,
    /// Both are `acMem`s of the same accelerator; queued on its default stream.
    acMemcpyDeviceToDevice = 3,
}

/// Device memory and the accelerator it lives on.
#[derive(Debug)]
pub(crate) struct MemEntry {
    pub(crate) device: u64,
    pub(crate) buffer: blocking::DeviceBuffer<u8>,
    acc: blocking::Accelerator,
}

pub(crate) static MEMS: Table<MemEntry> = Table::new(0xac03, "acMem");

/// Forgets the memory on `device` (the accelerator frees it with the session).
pub(crate) fn forget_on(device: u64) {
    MEMS.remove_where(|m| m.device == device);
}

fn failure(code: acError, message: impl Into<String>) -> Failure {
    Failure::new(code, message)
}

/// Allocates `bytes` of zeroed memory on `device`.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `mem`),
/// `AC_ERROR_OUT_OF_MEMORY`, and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acMemAlloc(device: acDevice, bytes: usize, mem: *mut acMem) -> acError {
    ffi(|| {
        if mem.is_null() {
            return Err(failure(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the new acMem"));
        }
        let acc = DEVICES.get(value(device))?.acc.clone();
        let buffer = acc.alloc::<u8>(bytes)?;
        write_out(mem, handle(MEMS.insert(MemEntry { device: value(device), buffer, acc })), "the new acMem")
    })
}

/// Frees device memory. Work queued before on the accelerator still sees it.
///
/// Errors: `AC_ERROR_INVALID_HANDLE` (NULL, or freed already), and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acMemFree(mem: acMem) -> acError {
    ffi(|| {
        let entry = MEMS.remove(value(mem))?;
        // Freed now if no other thread is using it, else by the last one (queued in order).
        match std::sync::Arc::try_unwrap(entry) {
            Ok(entry) => Ok(entry.buffer.free()?),
            Err(_) => Ok(()),
        }
    })
}

/// Copies `bytes` bytes from `src` to `dst` in direction `kind` (one of `acMemcpyKind`), as
/// `cudaMemcpy`: host-to-device and device-to-host copies return when done and see all work
/// queued before them; device-to-device copies are queued.
///
/// Errors: `AC_ERROR_INVALID_HANDLE` (a released `acMem`), `AC_ERROR_INVALID_DIRECTION` (a host
/// pointer where `kind` wants an `acMem`, or the reverse), `AC_ERROR_INVALID_ARGUMENT` (an
/// unknown `kind`, a NULL host pointer, `acMem`s of two accelerators), `AC_ERROR_OUT_OF_RANGE`
/// (past the end of an `acMem`), the first error of work queued before a host copy, and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acMemCpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> acError {
    acMemCpyAt(dst, 0, src, 0, bytes, kind)
}

/// `acMemCpy` at byte offsets into `dst` and `src` (an offset into host memory is added to the
/// pointer).
///
/// Errors: as `acMemCpy`.
#[no_mangle]
pub extern "C" fn acMemCpyAt(
    dst: *mut c_void,
    dst_offset: usize,
    src: *const c_void,
    src_offset: usize,
    bytes: usize,
    kind: c_int,
) -> acError {
    ffi(|| {
        let (dst, src) = (dst as usize as u64, src as usize as u64);
        match kind {
            k if k == acMemcpyKind::acMemcpyHostToDevice as c_int => {
                let target = device_operand(dst, "destination", "acMemcpyHostToDevice")?;
                let from = host_operand(src, src_offset, bytes, "source", "acMemcpyHostToDevice")?;
                in_range(&target, dst_offset, bytes)?;
                // SAFETY: C hands `bytes` readable bytes at `src + src_offset`, as the header asks.
                let data = unsafe { std::slice::from_raw_parts(from as *const u8, bytes) };
                Ok(target.buffer.copy_from_host_at(dst_offset, data)?)
            }
            k if k == acMemcpyKind::acMemcpyDeviceToHost as c_int => {
                let source = device_operand(src, "source", "acMemcpyDeviceToHost")?;
                let into = host_operand(dst, dst_offset, bytes, "destination", "acMemcpyDeviceToHost")?;
                in_range(&source, src_offset, bytes)?;
                // SAFETY: C hands `bytes` writable bytes at `dst + dst_offset`, as the header asks.
                let data = unsafe { std::slice::from_raw_parts_mut(into as *mut u8, bytes) };
                Ok(source.buffer.copy_to_host_at(src_offset, data)?)
            }
            k if k == acMemcpyKind::acMemcpyDeviceToDevice as c_int => {
                let target = device_operand(dst, "destination", "acMemcpyDeviceToDevice")?;
                let source = device_operand(src, "source", "acMemcpyDeviceToDevice")?;
                if target.device != source.device {
                    return Err(failure(
                        acError::AC_ERROR_INVALID_ARGUMENT,
                        "a device-to-device copy stays on one accelerator: copy through the host",
                    ));
                }
                in_range(&target, dst_offset, bytes)?;
                in_range(&source, src_offset, bytes)?;
                let stream = target.acc.default_stream();
                Ok(target.buffer.copy_from_device_at(&stream, dst_offset, &source.buffer, src_offset, bytes)?)
            }
            other => Err(failure(acError::AC_ERROR_INVALID_ARGUMENT, format!("{other} is not an acMemcpyKind"))),
        }
    })
}

/// Sets `bytes` bytes of `mem` from `offset` to `value_byte` (0 to 255; queued on the default
/// stream).
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_OUT_OF_RANGE`, `AC_ERROR_INVALID_ARGUMENT`
/// (`value_byte` outside 0..255), and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acMemset(mem: acMem, value_byte: c_int, offset: usize, bytes: usize) -> acError {
    ffi(|| {
        let entry = MEMS.get(value(mem))?;
        in_range(&entry, offset, bytes)?;
        let byte = u8::try_from(value_byte)
            .map_err(|_| failure(acError::AC_ERROR_INVALID_ARGUMENT, format!("{value_byte} is not a byte value")))?;
        Ok(entry.buffer.memset_range(&entry.acc.default_stream(), offset, bytes, byte)?)
    })
}

/// The device memory behind a copy operand that must be an `acMem`.
fn device_operand(raw: u64, which: &str, kind: &str) -> Outcome<std::sync::Arc<MemEntry>> {
    if raw != 0 && !MEMS.tagged(raw) {
        return Err(failure(
            acError::AC_ERROR_INVALID_DIRECTION,
            format!("the {which} of {kind} must be an acMem, not a host pointer"),
        ));
    }
    MEMS.get(raw)
}

/// The address of a copy operand that must be host memory.
fn host_operand(raw: u64, offset: usize, bytes: usize, which: &str, kind: &str) -> Outcome<u64> {
    if MEMS.tagged(raw) {
        return Err(failure(
            acError::AC_ERROR_INVALID_DIRECTION,
            format!("the {which} of {kind} must be host memory, not an acMem"),
        ));
    }
    if raw == 0 && bytes > 0 {
        return Err(failure(acError::AC_ERROR_INVALID_ARGUMENT, format!("NULL {which}")));
    }
    raw.checked_add(offset as u64)
        .filter(|start| start.checked_add(bytes as u64).is_some())
        .ok_or_else(|| failure(acError::AC_ERROR_OUT_OF_RANGE, format!("the {which} range wraps around")))
}

/// Checks that `offset..offset + bytes` lies inside `mem`.
pub(crate) fn in_range(mem: &MemEntry, offset: usize, bytes: usize) -> Outcome {
    match offset.checked_add(bytes) {
        Some(end) if end <= mem.buffer.len() => Ok(()),
        _ => Err(failure(
            acError::AC_ERROR_OUT_OF_RANGE,
            format!("bytes {offset}..{offset}+{bytes} are outside an acMem of {} bytes", mem.buffer.len()),
        )),
    }
}
