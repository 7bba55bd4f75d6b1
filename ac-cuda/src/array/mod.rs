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
use crate::memory::is_device;
use crate::pitched::{memory_type, Memcpy3D};
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

/// One side of a copy with an array: an array at an origin, or device or host memory from an
/// address (the origin added) with rows `pitch` bytes apart and `rows` rows a slice.
enum End {
    Array(Arc<ArrayRecord>, [u64; 3]),
    Device(Linear),
    Host(Linear),
}

/// Linear memory of a copy: its first byte, pitch and rows a slice.
#[derive(Clone, Copy)]
struct Linear {
    at: u64,
    pitch: u64,
    rows: u64,
}

/// The end of a copy that `kind` describes (`address`: its host pointer or device address).
fn end(kind: u32, address: u64, array: usize, origin: [u64; 3], pitch: u64, rows: u64) -> CuResult<End> {
    let [x, y, z] = origin;
    let at = || z.checked_mul(rows)?.checked_add(y)?.checked_mul(pitch)?.checked_add(x)?.checked_add(address);
    let linear = || {
        let at = at().ok_or_else(|| Error::said(code::INVALID_VALUE, "a copy's side passes the end of memory"))?;
        Ok::<_, Error>(Linear { at, pitch, rows })
    };
    Ok(match kind {
        memory_type::ARRAY => End::Array(array_record(array)?, origin),
        memory_type::DEVICE => End::Device(linear()?),
        memory_type::UNIFIED if is_device(address) => End::Device(linear()?),
        memory_type::HOST | memory_type::UNIFIED => End::Host(linear()?),
        other => {
            return Err(Error::said(code::INVALID_VALUE, format!("a copy's memory type {other} is none of CUDA's")))
        }
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
    if p.width == 0 || p.height == 0 || p.depth == 0 {
        return Ok(());
    }
    let extent = [p.width, p.height, p.depth].map(|n| n as u64);
    let host_or_device = |kind, host: u64, device| if kind == memory_type::HOST { host } else { device };
    let (src_at, dst_at) = (
        host_or_device(p.src_type, p.src_host as u64, p.src_device),
        host_or_device(p.dst_type, p.dst_host as u64, p.dst_device),
    );
    let src_origin = [p.src_x, p.src_y, p.src_z].map(|v| v as u64);
    let dst_origin = [p.dst_x, p.dst_y, p.dst_z].map(|v| v as u64);
    let src = end(p.src_type, src_at, p.src_array, src_origin, p.src_pitch as u64, p.src_height as u64)?;
    let dst = end(p.dst_type, dst_at, p.dst_array, dst_origin, p.dst_pitch as u64, p.dst_height as u64)?;
    match (src, dst) {
        (End::Array(a, origin), End::Device(linear)) => {
            with_device(&a, origin, extent, linear, false, stream)?;
            finish(&a, stream, wait)
        }
        (End::Device(linear), End::Array(a, origin)) => {
            with_device(&a, origin, extent, linear, true, stream)?;
            finish(&a, stream, wait)
        }
        (End::Host(linear), End::Array(a, origin)) => {
            from_host(&a, origin, extent, linear, stream)?;
            finish(&a, stream, wait)
        }
        (End::Array(a, origin), End::Host(linear)) => to_host(&a, origin, extent, linear, stream),
        (End::Array(from, src_origin), End::Array(to, dst_origin)) => {
            between_arrays(&from, src_origin, &to, dst_origin, extent, stream)?;
            finish(&to, stream, wait)
        }
        _ => unreachable!("one side is an array"),
    }
}

/// Waits, if `wait`, for `stream` on `a`'s device.
fn finish(a: &ArrayRecord, stream: usize, wait: bool) -> CuResult<()> {
    if wait {
        let shim = state::shim()?;
        shim.block_on(stream_of(stream, a.device)?.synchronize())?;
    }
    Ok(())
}

/// The copy between array `a` (its region at `origin` of `extent`) and linear memory at
/// `linear.at` (an address, or an offset in a buffer), checked here as CUDA checks it at the
/// call: a pitch of 0 is a packed row, and a single slice needs no rows a slice.
fn region(
    a: &ArrayRecord,
    origin: [u64; 3],
    extent: [u64; 3],
    linear: Linear,
    to_array: bool,
) -> CuResult<ArrayCopy<ArrayId, u64>> {
    let pitch = if linear.pitch == 0 && extent[1] == 1 && extent[2] == 1 { extent[0] } else { linear.pitch };
    let slice_rows = if extent[2] == 1 { linear.rows.max(extent[1]) } else { linear.rows };
    let copy = ArrayCopy { array: a.array.id(), origin, extent, linear: linear.at, pitch, slice_rows, to_array };
    match copy.misfit(&a.array.spec()) {
        Some(why) => Err(Error::said(code::INVALID_VALUE, why)),
        None => Ok(copy),
    }
}

/// Queues the copy between array `a` and the program's device memory at `linear` on `stream`.
fn with_device(
    a: &ArrayRecord,
    origin: [u64; 3],
    extent: [u64; 3],
    linear: Linear,
    to_array: bool,
    stream: usize,
) -> CuResult<()> {
    let copy = region(a, origin, extent, linear, to_array)?;
    let span =
        copy.linear_span().ok_or_else(|| Error::said(code::INVALID_VALUE, "a copy's device side spans no memory"))?;
    let shim = state::shim()?;
    let (alloc, offset) = shim.find(a.device, linear.at, span).map_err(|_| {
        Error::said(
            code::INVALID_VALUE,
            format!("{span} bytes at {:#x} are not memory of the array's device", linear.at),
        )
    })?;
    let copy = copy.between(copy.array, alloc.buffer.device_ptr(offset));
    let stream = stream_of(stream, a.device)?;
    Ok(shim.block_on(accelerator(a)?.copy_array(&stream, copy))?)
}

/// The session of `a`'s device.
fn accelerator(a: &ArrayRecord) -> CuResult<&'static ac_frontend::Accelerator> {
    Ok(&state::shim()?.devices.get(a.device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc)
}

/// A buffer of `bytes` on `a`'s device for a region's packed bytes on their way; it goes when
/// dropped, after the work queued on it.
fn staging(a: &ArrayRecord, bytes: u64) -> CuResult<DeviceBuffer<u8>> {
    let len = usize::try_from(bytes).map_err(|_| Error::Code(code::INVALID_VALUE))?;
    Ok(state::shim()?.block_on(accelerator(a)?.alloc::<u8>(len))?)
}

/// The packed linear side of a region of `extent` at offset 0 of a staging buffer.
fn packed(extent: [u64; 3]) -> Linear {
    Linear { at: 0, pitch: extent[0], rows: extent[1] }
}

/// Bytes of a region of `extent`, packed.
fn packed_bytes(extent: [u64; 3]) -> CuResult<u64> {
    extent.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or(Error::Code(code::INVALID_VALUE))
}

/// The rows of a region of `extent` in host memory at `linear`, in order: each row's address.
fn host_rows(linear: Linear, extent: [u64; 3]) -> impl Iterator<Item = u64> {
    let slice = linear.pitch * linear.rows.max(extent[1]);
    (0..extent[2]).flat_map(move |z| (0..extent[1]).map(move |y| linear.at + z * slice + y * linear.pitch))
}

/// Host memory to array `a`: the region's rows packed into a staging buffer, then copied into
/// the array, both on `stream`.
unsafe fn from_host(
    a: &ArrayRecord,
    origin: [u64; 3],
    extent: [u64; 3],
    linear: Linear,
    stream: usize,
) -> CuResult<()> {
    let copy = region(a, origin, extent, packed(extent), true)?;
    region(a, origin, extent, linear, true)?; // the host side's pitch holds the rows
    let mut bytes = Vec::with_capacity(packed_bytes(extent)? as usize);
    for row in host_rows(linear, extent) {
        bytes.extend_from_slice(std::slice::from_raw_parts(row as *const u8, extent[0] as usize));
    }
    let buffer = staging(a, bytes.len() as u64)?;
    let shim = state::shim()?;
    let on = stream_of(stream, a.device)?;
    shim.block_on(buffer.copy_from_host_async(&on, 0, &bytes))?;
    let copy = copy.between(copy.array, buffer.device_ptr(0));
    Ok(shim.block_on(accelerator(a)?.copy_array(&on, copy))?)
}

/// Array `a` to host memory: the region copied into a staging buffer on `stream`, waited for,
/// read, and its rows written where the program's pitch puts them.
unsafe fn to_host(a: &ArrayRecord, origin: [u64; 3], extent: [u64; 3], linear: Linear, stream: usize) -> CuResult<()> {
    let copy = region(a, origin, extent, packed(extent), false)?;
    region(a, origin, extent, linear, false)?;
    let buffer = staging(a, packed_bytes(extent)?)?;
    let shim = state::shim()?;
    let on = stream_of(stream, a.device)?;
    shim.block_on(accelerator(a)?.copy_array(&on, copy.between(copy.array, buffer.device_ptr(0))))?;
    shim.block_on(on.synchronize())?;
    let bytes = shim.block_on(buffer.to_vec())?;
    for (row, from) in host_rows(linear, extent).zip(bytes.chunks_exact(extent[0] as usize)) {
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
    extent: [u64; 3],
    stream: usize,
) -> CuResult<()> {
    if from.device != to.device {
        let why = "a copy between arrays of two devices (each is a remote GPU of its own)";
        return Err(Error::said(code::NOT_SUPPORTED, why));
    }
    let out = region(from, src_origin, extent, packed(extent), false)?;
    let into = region(to, dst_origin, extent, packed(extent), true)?;
    let buffer = staging(from, packed_bytes(extent)?)?;
    let shim = state::shim()?;
    let on = stream_of(stream, from.device)?;
    let acc = accelerator(from)?;
    shim.block_on(acc.copy_array(&on, out.between(out.array, buffer.device_ptr(0))))?;
    Ok(shim.block_on(acc.copy_array(&on, into.between(into.array, buffer.device_ptr(0))))?)
}

/// A copy of `len` bytes between the start of row 0 of array `array` at byte `offset` and
/// linear memory of `kind` at `address` (the `cuMemcpy?toA`/`Ato?` calls, for 1-D arrays).
unsafe fn row_copy(
    array: usize,
    offset: usize,
    kind: u32,
    address: u64,
    len: usize,
    to_array: bool,
    stream: usize,
    wait: bool,
) -> CuResult<()> {
    let mut p: Memcpy3D = std::mem::zeroed();
    (p.width, p.height, p.depth) = (len, 1, 1);
    if to_array {
        (p.dst_type, p.dst_array, p.dst_x) = (memory_type::ARRAY, array, offset);
        (p.src_type, p.src_host, p.src_device) = (kind, address as *const c_void, address);
    } else {
        (p.src_type, p.src_array, p.src_x) = (memory_type::ARRAY, array, offset);
        (p.dst_type, p.dst_host, p.dst_device) = (kind, address as *mut c_void, address);
    }
    if kind == memory_type::HOST {
        (p.src_device, p.dst_device) = (0, 0);
    } else {
        (p.src_host, p.dst_host) = (std::ptr::null(), std::ptr::null_mut());
    }
    copy(&p, stream, wait)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoA_v2(array: usize, offset: usize, src: *const c_void, len: usize) -> u32 {
    guard("cuMemcpyHtoA", || row_copy(array, offset, memory_type::HOST, src as u64, len, true, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoAAsync_v2(
    array: usize,
    offset: usize,
    src: *const c_void,
    len: usize,
    stream: usize,
) -> u32 {
    guard("cuMemcpyHtoAAsync", || row_copy(array, offset, memory_type::HOST, src as u64, len, true, stream, false))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoH_v2(dst: *mut c_void, array: usize, offset: usize, len: usize) -> u32 {
    guard("cuMemcpyAtoH", || row_copy(array, offset, memory_type::HOST, dst as u64, len, false, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoHAsync_v2(
    dst: *mut c_void,
    array: usize,
    offset: usize,
    len: usize,
    stream: usize,
) -> u32 {
    guard("cuMemcpyAtoHAsync", || row_copy(array, offset, memory_type::HOST, dst as u64, len, false, stream, false))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoA_v2(array: usize, offset: usize, src: u64, len: usize) -> u32 {
    guard("cuMemcpyDtoA", || row_copy(array, offset, memory_type::DEVICE, src, len, true, 0, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAtoD_v2(dst: u64, array: usize, offset: usize, len: usize) -> u32 {
    guard("cuMemcpyAtoD", || row_copy(array, offset, memory_type::DEVICE, dst, len, false, 0, true))
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
        let mut p: Memcpy3D = std::mem::zeroed();
        (p.width, p.height, p.depth) = (len, 1, 1);
        (p.src_type, p.src_array, p.src_x) = (memory_type::ARRAY, src, src_offset);
        (p.dst_type, p.dst_array, p.dst_x) = (memory_type::ARRAY, dst, dst_offset);
        copy(&p, 0, true)
    })
}
