//! CUDA arrays (`cuArrayCreate`, `cuArray3DCreate`, their descriptors, `cuArrayDestroy`) and
//! the copies to and from them (`cuMemcpy2D`, `cuMemcpy3D` and their `Async` forms with an
//! array on either side, `cuMemcpyHtoA`, `AtoH`, `DtoA`, `AtoD`, `AtoA`; the runtime's
//! `cudaMallocArray`, `cudaMemcpy2DToArray`, ...): backend protocol 16. The texture and surface
//! objects that kernels read them through are [`objects`].
//!
//! An array lives on the backend, laid out as its GPU likes; its handle here is a record of the
//! program's (its device, its shape, the session's array). Its bytes move only between it and
//! device memory, on the device: a copy with device memory names the program's allocation; a
//! copy with host memory goes through a buffer of the region's packed bytes (written from the
//! host, then copied into the array on the same stream; or copied out of the array, waited
//! for, and read); a copy between two arrays goes through such a buffer on the device.

pub mod objects;

use std::ffi::c_void;
use std::sync::{Arc, LazyLock};

use ac_frontend::{ArrayCopy, ArrayId, ArraySpec, CudaArray, DeviceBuffer};

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::managed::{self, Reach};
use crate::pitched::{self, memory_type, Described, Extent, Memcpy3D, Memory, Side};
use crate::state::{self, put, Registry};
use crate::stream::stream_of;

/// A CUDA array of the program: a `CUarray`.
#[derive(Debug)]
pub struct ArrayRecord {
    /// The device it is on.
    pub device: usize,
    /// The session's array.
    pub array: CudaArray,
}

static ARRAYS: LazyLock<Registry<ArrayRecord>> = LazyLock::new(Registry::default);

/// The record of array handle `handle`.
pub fn array_record(handle: usize) -> CuResult<Arc<ArrayRecord>> {
    ARRAYS
        .get(handle)
        .map_err(|_| Error::said(code::INVALID_HANDLE, format!("{handle:#x} is no CUDA array of this program")))
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ArrayDescriptor {
    width: usize,
    height: usize,
    format: u32,
    channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Array3DDescriptor {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

/// Creates an array of `spec` on the current device.
fn create(out: *mut usize, spec: ArraySpec) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    if let Some(why) = spec.misshapen() {
        // A format CUDA has but the pool does not serve (block-compressed, NV12, ...).
        let known = ac_frontend::ArraySpec { format: 0x20, channels: 1, ..spec }.misshapen().is_none();
        return Err(Error::said(if known { code::NOT_SUPPORTED } else { code::INVALID_VALUE }, why));
    }
    let device = current_device()?;
    let shim = state::shim()?;
    let acc = &shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc;
    let array = shim.block_on(acc.create_array(spec))?;
    // SAFETY: checked non-null above.
    unsafe { put(out, ARRAYS.insert(ArrayRecord { device, array })) }
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate_v2(out: *mut usize, descriptor: *const ArrayDescriptor) -> u32 {
    guard("cuArrayCreate", || {
        let d = descriptor.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        let (width, height) = (d.width as u64, d.height as u64);
        create(out, ArraySpec { width, height, depth: 0, format: d.format, channels: d.channels, flags: 0 })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(out: *mut usize, descriptor: *const Array3DDescriptor) -> u32 {
    guard("cuArray3DCreate", || {
        let d = descriptor.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        let [width, height, depth] = [d.width, d.height, d.depth].map(|n| n as u64);
        create(out, ArraySpec { width, height, depth, format: d.format, channels: d.channels, flags: d.flags })
    })
}

#[no_mangle]
pub extern "C" fn cuArrayDestroy(array: usize) -> u32 {
    guard("cuArrayDestroy", || {
        // The backend destroys it once no object reads it and the work before has run.
        ARRAYS.remove(array).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayGetDescriptor_v2(out: *mut ArrayDescriptor, array: usize) -> u32 {
    guard("cuArrayGetDescriptor", || {
        let s = array_record(array)?.array.spec();
        let (width, height) = (s.width as usize, s.height as usize);
        put(out, ArrayDescriptor { width, height, format: s.format, channels: s.channels })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DGetDescriptor_v2(out: *mut Array3DDescriptor, array: usize) -> u32 {
    guard("cuArray3DGetDescriptor", || {
        let s = array_record(array)?.array.spec();
        let [width, height, depth] = [s.width, s.height, s.depth].map(|n| n as usize);
        put(out, Array3DDescriptor { width, height, depth, format: s.format, channels: s.channels, flags: s.flags })
    })
}

// ---- Copies ----

/// One end of a copy with an array: an array at an origin, or linear memory, checked as
/// [`pitched::side`] checks it, with its rows a slice as the program gave them.
enum End {
    Array(Arc<ArrayRecord>, [u64; 3]),
    Linear(Side, u64),
}

/// The end `d` describes for a region of `extent`; `which` names it.
fn end(d: Described, extent: Extent, which: &str) -> CuResult<End> {
    Ok(match d.kind {
        memory_type::ARRAY => End::Array(array_record(d.array)?, d.origin),
        _ => End::Linear(pitched::side(d, extent, which)?, d.rows),
    })
}

/// Whether `p` has an array on either side (else [`crate::pitched`] copies it).
pub(crate) fn has_array(p: &Memcpy3D) -> bool {
    p.src_type == memory_type::ARRAY || p.dst_type == memory_type::ARRAY
}

/// Copies what `p` describes (an array on one side or both) on `stream`; `wait`: then waits
/// (a copy to the host always waits: its bytes must be there when it returns).
///
/// # Safety
/// Its host side is the program's memory, valid for the copy.
pub(crate) unsafe fn copy(p: &Memcpy3D, stream: usize, wait: bool) -> CuResult<()> {
    if p.src_lod != 0 || p.dst_lod != 0 {
        return Err(Error::said(
            code::INVALID_VALUE,
            "a copy with a level of detail (mipmapped arrays are not served)",
        ));
    }
    let extent = p.extent();
    if extent.is_empty() {
        return Ok(());
    }
    let size = [extent.width, extent.height, extent.depth];
    let (src, dst) = (end(p.src(), extent, "source")?, end(p.dst(), extent, "destination")?);
    let target = match (&src, &dst) {
        (End::Array(a, _), _) | (_, End::Array(a, _)) => a.clone(),
        _ => unreachable!("one side is an array"),
    };
    match (src, dst) {
        (End::Array(a, origin), End::Linear(side, rows)) if side.memory == Memory::Device => {
            with_device(&a, origin, size, side, rows, false, stream)?
        }
        (End::Linear(side, rows), End::Array(a, origin)) if side.memory == Memory::Device => {
            with_device(&a, origin, size, side, rows, true, stream)?
        }
        (End::Linear(side, rows), End::Array(a, origin)) => {
            managed::settle_host(side.start)?;
            from_host(&a, origin, size, side, rows, stream)?
        }
        (End::Array(a, origin), End::Linear(side, rows)) => {
            managed::settle_host(side.start)?;
            return to_host(&a, origin, size, side, rows, stream);
        }
        (End::Array(from, src_origin), End::Array(to, dst_origin)) => {
            between_arrays(&from, src_origin, &to, dst_origin, size, stream)?
        }
        (End::Linear(..), End::Linear(..)) => unreachable!("one side is an array"),
    }
    if wait {
        let shim = state::shim()?;
        shim.block_on(stream_of(stream, target.device)?.synchronize())?;
    }
    Ok(())
}

/// The copy between array `a` (its region at `origin` of `size`) and linear memory at `at` (an
/// address, or an offset in a staging buffer) with rows `pitch` bytes apart, `rows` a slice
/// (for a single slice, any), checked as CUDA checks it at the call.
fn region(
    a: &ArrayRecord,
    origin: [u64; 3],
    size: [u64; 3],
    at: u64,
    pitch: u64,
    rows: u64,
    to_array: bool,
) -> CuResult<ArrayCopy<ArrayId, u64>> {
    let slice_rows = if size[2] == 1 { rows.max(size[1]) } else { rows };
    let copy = ArrayCopy { array: a.array.id(), origin, extent: size, linear: at, pitch, slice_rows, to_array };
    match copy.misfit(&a.array.spec()) {
        Some(why) => Err(Error::said(code::INVALID_VALUE, why)),
        None => Ok(copy),
    }
}

/// Queues the copy between array `a` and the program's device memory `side` on `stream`.
fn with_device(
    a: &ArrayRecord,
    origin: [u64; 3],
    size: [u64; 3],
    side: Side,
    rows: u64,
    to_array: bool,
    stream: usize,
) -> CuResult<()> {
    let copy = region(a, origin, size, side.start, side.pitch, rows, to_array)?;
    let shim = state::shim()?;
    let (alloc, offset) = shim.find(a.device, side.start, side.end - side.start).map_err(|_| {
        let why = format!("{} bytes at {:#x} are not memory of the array's device", side.end - side.start, side.start);
        Error::said(code::INVALID_VALUE, why)
    })?;
    let copy = copy.between(copy.array, alloc.buffer.device_ptr(offset));
    let on = stream_of(stream, a.device)?;
    managed::device_work(&[Reach::Memory(a.device, side.start)], || {
        Ok(shim.block_on(accelerator(a)?.copy_array(&on, copy))?)
    })
}

/// The session of `a`'s device.
fn accelerator(a: &ArrayRecord) -> CuResult<&'static ac_frontend::Accelerator> {
    Ok(&state::shim()?.devices.get(a.device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc)
}

/// A buffer on `a`'s device for a region of `size`, packed, on its way; it goes when dropped,
/// after the work queued on it (the backend's queued copies hold it).
fn staging(a: &ArrayRecord, size: [u64; 3]) -> CuResult<DeviceBuffer<u8>> {
    let bytes = size.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or(Error::Code(code::INVALID_VALUE))?;
    let len = usize::try_from(bytes).map_err(|_| Error::Code(code::INVALID_VALUE))?;
    Ok(state::shim()?.block_on(accelerator(a)?.alloc::<u8>(len))?)
}

/// The rows of a region of `size` on the host `side`, in order: each row's address (inside the
/// side's checked span).
fn host_rows(side: Side, size: [u64; 3]) -> impl Iterator<Item = u64> {
    (0..size[2]).flat_map(move |z| (0..size[1]).map(move |y| side.start + z * side.slice + y * side.pitch))
}

/// Host memory to array `a`: the region's rows packed into a staging buffer, then copied into
/// the array, both on `stream`.
unsafe fn from_host(
    a: &ArrayRecord,
    origin: [u64; 3],
    size: [u64; 3],
    side: Side,
    rows: u64,
    stream: usize,
) -> CuResult<()> {
    let copy = region(a, origin, size, 0, size[0], size[1], true)?;
    region(a, origin, size, side.start, side.pitch, rows, true)?;
    let buffer = staging(a, size)?;
    let mut bytes = Vec::with_capacity(buffer.len());
    for row in host_rows(side, size) {
        bytes.extend_from_slice(std::slice::from_raw_parts(row as *const u8, size[0] as usize));
    }
    let shim = state::shim()?;
    let on = stream_of(stream, a.device)?;
    shim.block_on(buffer.copy_from_host_async(&on, 0, &bytes))?;
    Ok(shim.block_on(accelerator(a)?.copy_array(&on, copy.between(copy.array, buffer.device_ptr(0))))?)
}

/// Array `a` to host memory: the region copied into a staging buffer on `stream`, waited for,
/// read, and its rows written where the program's pitch puts them.
unsafe fn to_host(
    a: &ArrayRecord,
    origin: [u64; 3],
    size: [u64; 3],
    side: Side,
    rows: u64,
    stream: usize,
) -> CuResult<()> {
    let copy = region(a, origin, size, 0, size[0], size[1], false)?;
    region(a, origin, size, side.start, side.pitch, rows, false)?;
    let buffer = staging(a, size)?;
    let shim = state::shim()?;
    let on = stream_of(stream, a.device)?;
    shim.block_on(accelerator(a)?.copy_array(&on, copy.between(copy.array, buffer.device_ptr(0))))?;
    shim.block_on(on.synchronize())?;
    let bytes = shim.block_on(buffer.to_vec())?;
    for (row, from) in host_rows(side, size).zip(bytes.chunks_exact(size[0] as usize)) {
        std::ptr::copy_nonoverlapping(from.as_ptr(), row as *mut u8, from.len());
    }
    Ok(())
}

/// Array to array on one device, through a staging buffer on `stream`.
fn between_arrays(
    from: &ArrayRecord,
    src_origin: [u64; 3],
    to: &ArrayRecord,
    dst_origin: [u64; 3],
    size: [u64; 3],
    stream: usize,
) -> CuResult<()> {
    if from.device != to.device {
        let why = "a copy between arrays of two devices (each is a remote GPU of its own)";
        return Err(Error::said(code::NOT_SUPPORTED, why));
    }
    let out = region(from, src_origin, size, 0, size[0], size[1], false)?;
    let into = region(to, dst_origin, size, 0, size[0], size[1], true)?;
    let buffer = staging(from, size)?;
    let shim = state::shim()?;
    let on = stream_of(stream, from.device)?;
    let acc = accelerator(from)?;
    shim.block_on(acc.copy_array(&on, out.between(out.array, buffer.device_ptr(0))))?;
    Ok(shim.block_on(acc.copy_array(&on, into.between(into.array, buffer.device_ptr(0))))?)
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

/// Copies `p` now, waited for ([`pitched::copy_described`]).
unsafe fn copy_now(p: Memcpy3D) -> CuResult<()> {
    pitched::copy_described(&p, Memcpy3D::clone, 0, true)
}

/// Queues `p` on `stream`, or records it if the stream is capturing ([`pitched::copy_queued`]).
unsafe fn copy_on(p: Memcpy3D, stream: usize) -> CuResult<()> {
    pitched::copy_queued(&p, Memcpy3D::clone, stream)
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
