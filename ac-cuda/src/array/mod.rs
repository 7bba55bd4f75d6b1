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
        // A format or flag the pool does not serve (block-compressed, NV12, sparse, ...): 801.
        return Err(Error::said(if spec.served() { code::INVALID_VALUE } else { code::NOT_SUPPORTED }, why));
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
        let why = "a copy with a level of detail (mipmapped arrays are not served)";
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    let extent = p.extent();
    if extent.is_empty() {
        return Ok(());
    }
    let size = [extent.width, extent.height, extent.depth];
    let region = |a, origin| Region { a, origin, size };
    let (src, dst) = (end(p.src(), extent, "source")?, end(p.dst(), extent, "destination")?);
    let device = match (&src, &dst) {
        (End::Array(a, _), _) | (_, End::Array(a, _)) => a.device,
        _ => unreachable!("one side is an array"),
    };
    match (&src, &dst) {
        (End::Array(a, origin), End::Linear(side, rows)) if side.memory == Memory::Device => {
            region(a, *origin).with_device(*side, *rows, false, stream)?
        }
        (End::Linear(side, rows), End::Array(a, origin)) if side.memory == Memory::Device => {
            region(a, *origin).with_device(*side, *rows, true, stream)?
        }
        (End::Linear(side, rows), End::Array(a, origin)) => {
            managed::settle_host(side.start)?;
            region(a, *origin).write_from_host(*side, *rows, stream)?
        }
        (End::Array(a, origin), End::Linear(side, rows)) => {
            managed::settle_host(side.start)?;
            return region(a, *origin).read_to_host(*side, *rows, stream);
        }
        (End::Array(from, src_origin), End::Array(to, dst_origin)) => {
            region(from, *src_origin).copy_to_array(&region(to, *dst_origin), stream)?
        }
        (End::Linear(..), End::Linear(..)) => unreachable!("one side is an array"),
    }
    if wait {
        let shim = state::shim()?;
        shim.block_on(stream_of(stream, device)?.synchronize())?;
        // A copy waited for leaves its device idle: managed memory is the host's again.
        managed::settle(device, None)?;
    }
    Ok(())
}

/// A region of an array: its first element's byte in a row, row and slice, and its bytes a
/// row, rows and slices.
struct Region<'a> {
    a: &'a ArrayRecord,
    origin: [u64; 3],
    size: [u64; 3],
}

impl Region<'_> {
    /// The copy between the region and linear memory at `at` (an address, or an offset in a
    /// staging buffer) with rows `pitch` bytes apart, `rows` a slice (any, for a single slice),
    /// checked as CUDA checks it at the call.
    fn copy(&self, at: u64, pitch: u64, rows: u64, to_array: bool) -> CuResult<ArrayCopy<ArrayId, u64>> {
        let size = self.size;
        let slice_rows = if size[2] == 1 { rows.max(size[1]) } else { rows };
        let array = self.a.array.id();
        let copy = ArrayCopy { array, origin: self.origin, extent: size, linear: at, pitch, slice_rows, to_array };
        match copy.misfit(&self.a.array.spec()) {
            Some(why) => Err(Error::said(code::INVALID_VALUE, why)),
            None => Ok(copy),
        }
    }

    /// The copy between the region and a staging buffer holding it packed, and that buffer
    /// (on the array's device; it goes when dropped, after the work queued on it: the backend's
    /// queued copies hold it).
    fn staged(&self, to_array: bool) -> CuResult<(ArrayCopy, DeviceBuffer<u8>)> {
        let copy = self.copy(0, self.size[0], self.size[1], to_array)?;
        let bytes =
            self.size.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or(Error::Code(code::INVALID_VALUE))?;
        let len = usize::try_from(bytes).map_err(|_| Error::Code(code::INVALID_VALUE))?;
        let buffer = state::shim()?.block_on(self.accelerator()?.alloc::<u8>(len))?;
        Ok((copy.between(copy.array, buffer.device_ptr(0)), buffer))
    }

    /// The session of the array's device.
    fn accelerator(&self) -> CuResult<&'static ac_frontend::Accelerator> {
        Ok(&state::shim()?.devices.get(self.a.device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc)
    }

    /// Queues `copy` on `stream` of the array's device.
    fn queue(&self, copy: ArrayCopy, stream: &ac_frontend::Stream) -> CuResult<()> {
        Ok(state::shim()?.block_on(self.accelerator()?.copy_array(stream, copy))?)
    }

    /// Queues the copy between the region and the program's device memory `side` on `stream`.
    fn with_device(&self, side: Side, rows: u64, to_array: bool, stream: usize) -> CuResult<()> {
        let copy = self.copy(side.start, side.pitch, rows, to_array)?;
        let (device, span) = (self.a.device, side.end - side.start);
        let (alloc, offset) = state::shim()?.find(device, side.start, span).map_err(|_| {
            let why = format!("{span} bytes at {:#x} are not memory of the array's device", side.start);
            Error::said(code::INVALID_VALUE, why)
        })?;
        let on = stream_of(stream, device)?;
        managed::device_work(&[Reach::Memory(device, side.start)], || {
            self.queue(copy.between(copy.array, alloc.buffer.device_ptr(offset)), &on)
        })
    }

    /// Host memory to the region: its rows packed into a staging buffer, then copied into the
    /// array, both on `stream`.
    unsafe fn write_from_host(&self, side: Side, rows: u64, stream: usize) -> CuResult<()> {
        self.copy(side.start, side.pitch, rows, true)?;
        let (copy, buffer) = self.staged(true)?;
        let mut bytes = Vec::with_capacity(buffer.len());
        for row in host_rows(side, self.size) {
            bytes.extend_from_slice(std::slice::from_raw_parts(row as *const u8, self.size[0] as usize));
        }
        let on = stream_of(stream, self.a.device)?;
        state::shim()?.block_on(buffer.copy_from_host_async(&on, 0, &bytes))?;
        self.queue(copy, &on)
    }

    /// The region to host memory: copied into a staging buffer on `stream`, waited for, read,
    /// and its rows written where the program's pitch puts them.
    unsafe fn read_to_host(&self, side: Side, rows: u64, stream: usize) -> CuResult<()> {
        self.copy(side.start, side.pitch, rows, false)?;
        let (copy, buffer) = self.staged(false)?;
        let on = stream_of(stream, self.a.device)?;
        self.queue(copy, &on)?;
        let shim = state::shim()?;
        shim.block_on(on.synchronize())?;
        let bytes = shim.block_on(buffer.to_vec())?;
        for (row, from) in host_rows(side, self.size).zip(bytes.chunks_exact(self.size[0] as usize)) {
            std::ptr::copy_nonoverlapping(from.as_ptr(), row as *mut u8, from.len());
        }
        Ok(())
    }

    /// The region into region `to` of an array of the same device, through a staging buffer on
    /// `stream`.
    fn copy_to_array(&self, to: &Region, stream: usize) -> CuResult<()> {
        if self.a.device != to.a.device {
            let why = "a copy between arrays of two devices (each is a remote GPU of its own)";
            return Err(Error::said(code::NOT_SUPPORTED, why));
        }
        let into = to.copy(0, self.size[0], self.size[1], true)?;
        let (out, buffer) = self.staged(false)?;
        let on = stream_of(stream, self.a.device)?;
        self.queue(out, &on)?;
        self.queue(into.between(into.array, buffer.device_ptr(0)), &on)
    }
}

/// The rows of a region of `size` on the host `side`, in order: each row's address (inside the
/// side's checked span).
fn host_rows(side: Side, size: [u64; 3]) -> impl Iterator<Item = u64> {
    (0..size[2]).flat_map(move |z| (0..size[1]).map(move |y| side.start + z * side.slice + y * side.pitch))
}
