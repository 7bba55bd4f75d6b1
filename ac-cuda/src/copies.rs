//! The entry points of copies described by a region (`cuMemcpy2D`, `cuMemcpy2DUnaligned`,
//! `cuMemcpy3D` and their `Async` forms) and of the 1-D copies to and from arrays
//! (`cuMemcpyHtoA`, `AtoH`, `DtoA`, `AtoD`, `AtoA`): a copy between linear memory is
//! [`crate::pitched`]'s, one with an array on either side [`crate::array`]'s. An `Async` form on
//! a capturing stream is recorded (its description as it is now), else queued.

use std::ffi::c_void;

use crate::array;
use crate::error::{code, CuResult, Error};
use crate::graph::{self, Kept, NodeKind};
use crate::guard;
use crate::pitched::{self, memory_type, Memcpy2D, Memcpy3D};

/// The copy `p` describes, on `stream`, waited for if `wait`: [`crate::array`]'s when an array
/// is on either side.
unsafe fn copy_any(p: &Memcpy3D, stream: usize, wait: bool) -> CuResult<()> {
    if array::has_array(p) {
        return array::copy(p, stream, wait);
    }
    pitched::copy_linear(p, stream, wait)
}

/// The copy `p` describes (`as_3d` reads it), on `stream`, waited for if `wait`.
unsafe fn copy_described<T>(p: *const T, as_3d: fn(&T) -> Memcpy3D, stream: usize, wait: bool) -> CuResult<()> {
    let described = p.as_ref().ok_or_else(|| Error::said(code::INVALID_VALUE, "the copy's description is null"))?;
    copy_any(&as_3d(described), stream, wait)
}

/// The copy `p` describes, queued on `stream`, or recorded (its description as it is now) if
/// the stream is capturing.
unsafe fn copy_queued<T>(p: *const T, as_3d: fn(&T) -> Memcpy3D, stream: usize) -> CuResult<()> {
    let described =
        Kept::new(as_3d(p.as_ref().ok_or_else(|| Error::said(code::INVALID_VALUE, "the copy's description is null"))?));
    graph::or_record(stream, NodeKind::Memcpy, move |stream| copy_any(&described.get(), stream, false))
}

/// The copy a `CUDA_MEMCPY3D` describes, queued on `stream` (a graph's copy node).
///
/// # Safety
/// Its host sides are the program's memory, valid for the copy.
pub(crate) unsafe fn copy_3d(described: &Memcpy3D, stream: usize) -> CuResult<()> {
    copy_any(described, stream, false)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2D_v2(p: *const Memcpy2D) -> u32 {
    guard("cuMemcpy2D", || copy_described(p, Memcpy2D::as_3d, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2DUnaligned_v2(p: *const Memcpy2D) -> u32 {
    guard("cuMemcpy2DUnaligned", || copy_described(p, Memcpy2D::as_3d, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(p: *const Memcpy2D, stream: usize) -> u32 {
    guard("cuMemcpy2DAsync", || copy_queued(p, Memcpy2D::as_3d, stream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3D_v2(p: *const Memcpy3D) -> u32 {
    guard("cuMemcpy3D", || copy_described(p, Memcpy3D::clone, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(p: *const Memcpy3D, stream: usize) -> u32 {
    guard("cuMemcpy3DAsync", || copy_queued(p, Memcpy3D::clone, stream))
}

/// The copy of `len` bytes between byte `offset` of row 0 of array `array` and linear memory of
/// `kind` at `address` (the `cuMemcpy?toA` and `cuMemcpyAto?` calls, made for 1-D arrays).
fn row_copy(array: usize, offset: usize, kind: u32, address: u64, len: usize, to_array: bool) -> Memcpy3D {
    // SAFETY: plain integers and null pointers.
    let mut p: Memcpy3D = unsafe { std::mem::zeroed() };
    (p.width, p.height, p.depth) = (len, 1, 1);
    let (host, device) = if kind == memory_type::HOST { (address, 0) } else { (0, address) };
    if to_array {
        (p.dst_type, p.dst_array, p.dst_x) = (memory_type::ARRAY, array, offset);
        (p.src_type, p.src_host, p.src_device) = (kind, host as *const c_void, device);
    } else {
        (p.src_type, p.src_array, p.src_x) = (memory_type::ARRAY, array, offset);
        (p.dst_type, p.dst_host, p.dst_device) = (kind, host as *mut c_void, device);
    }
    p
}

/// Copies `p` now, waited for.
unsafe fn copy_now(p: Memcpy3D) -> CuResult<()> {
    copy_described(&p, Memcpy3D::clone, 0, true)
}

/// Queues `p` on `stream`, or records it if the stream is capturing.
unsafe fn copy_on(p: Memcpy3D, stream: usize) -> CuResult<()> {
    copy_queued(&p, Memcpy3D::clone, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoA_v2(array: usize, offset: usize, src: *const c_void, len: usize) -> u32 {
    guard("cuMemcpyHtoA", || copy_now(row_copy(array, offset, memory_type::HOST, src as u64, len, true)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoAAsync_v2(
    array: usize,
    offset: usize,
    src: *const c_void,
    len: usize,
    stream: usize,
) -> u32 {
    guard("cuMemcpyHtoAAsync", || copy_on(row_copy(array, offset, memory_type::HOST, src as u64, len, true), stream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoH_v2(dst: *mut c_void, array: usize, offset: usize, len: usize) -> u32 {
    guard("cuMemcpyAtoH", || copy_now(row_copy(array, offset, memory_type::HOST, dst as u64, len, false)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoHAsync_v2(
    dst: *mut c_void,
    array: usize,
    offset: usize,
    len: usize,
    stream: usize,
) -> u32 {
    guard("cuMemcpyAtoHAsync", || copy_on(row_copy(array, offset, memory_type::HOST, dst as u64, len, false), stream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoA_v2(array: usize, offset: usize, src: u64, len: usize) -> u32 {
    guard("cuMemcpyDtoA", || copy_now(row_copy(array, offset, memory_type::DEVICE, src, len, true)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoD_v2(dst: u64, array: usize, offset: usize, len: usize) -> u32 {
    guard("cuMemcpyAtoD", || copy_now(row_copy(array, offset, memory_type::DEVICE, dst, len, false)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoA_v2(
    dst: usize,
    dst_offset: usize,
    src: usize,
    src_offset: usize,
    len: usize,
) -> u32 {
    guard("cuMemcpyAtoA", || {
        let mut p = row_copy(src, src_offset, memory_type::ARRAY, 0, len, false);
        (p.dst_array, p.dst_x) = (dst, dst_offset);
        copy_now(p)
    })
}
