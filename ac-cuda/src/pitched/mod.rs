//! Pitched copies and memsets: `cuMemcpy2D`, `cuMemcpy2DUnaligned` and `cuMemcpy3D` (and
//! their `Async` forms; the entry points are [`crate::copies`]) between host and device memory,
//! linear or pitched (`cudaMemcpy2D`, `cudaMemcpy3D`, `cudaMallocPitch`'s rows), and
//! `cuMemsetD2D8/16/32` (and `Async`; `cudaMemset2D`). A copy with a CUDA array on either side
//! is [`crate::array`]'s, which checks its linear side with [`side`].
//!
//! A region is cut into runs of contiguous bytes ([`runs`]: a row, or rows that touch on both
//! sides, so a copy between two linear buffers is one run), each sent as one of
//! [`crate::memory`]'s one-dimensional copies or memsets, queued on the stream; the
//! synchronous forms then wait for it. A device side's region, first byte to last, must lie in
//! one of the program's allocations, checked before the first run is sent: a region that runs
//! past its allocation fails whole, writing nothing. A device-to-host copy whose rows lie close together in one allocation reads their
//! span once and scatters it: one round trip, not one a row. The 2D memsets are [`memset`].

mod memset;

use std::ffi::{c_uint, c_void};

use crate::error::{code, CuResult, Error};
use crate::managed::{self, Reach};
use crate::memory::{device_to_device, device_to_host, host_to_device_async, is_device, locate};
use crate::state;
use crate::state::Allocation;
use crate::stream::stream_of;

pub(crate) use memset::memset_2d;

/// `CUmemorytype`: where one side of a copy is.
pub(crate) mod memory_type {
    pub const HOST: u32 = 1;
    pub const DEVICE: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const UNIFIED: u32 = 4;
}

/// `CUDA_MEMCPY2D` (`_v2`, `size_t` fields), as `cuda.h` lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: c_uint,
    src_host: *const c_void,
    src_device: u64,
    src_array: usize,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_uint,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: usize,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

/// `CUDA_MEMCPY3D` (`_v2`), as `cuda.h` lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memcpy3D {
    pub(crate) src_x: usize,
    pub(crate) src_y: usize,
    pub(crate) src_z: usize,
    pub(crate) src_lod: usize,
    pub(crate) src_type: c_uint,
    pub(crate) src_host: *const c_void,
    pub(crate) src_device: u64,
    pub(crate) src_array: usize,
    pub(crate) reserved0: *mut c_void,
    pub(crate) src_pitch: usize,
    pub(crate) src_height: usize,
    pub(crate) dst_x: usize,
    pub(crate) dst_y: usize,
    pub(crate) dst_z: usize,
    pub(crate) dst_lod: usize,
    pub(crate) dst_type: c_uint,
    pub(crate) dst_host: *mut c_void,
    pub(crate) dst_device: u64,
    pub(crate) dst_array: usize,
    pub(crate) reserved1: *mut c_void,
    pub(crate) dst_pitch: usize,
    pub(crate) dst_height: usize,
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) depth: usize,
}

/// Which memory one side of a copy is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    Host,
    Device,
}

/// The size of a region: bytes a row, rows a slice, slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) width: u64,
    pub(crate) height: u64,
    pub(crate) depth: u64,
}

impl Extent {
    /// Whether it holds no byte.
    pub(crate) fn is_empty(&self) -> bool {
        self.width == 0 || self.height == 0 || self.depth == 0
    }
}

/// One side of a copy in bytes: the address of the region's first byte, how far apart its
/// rows and its slices begin, and the end of its last byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Side {
    pub(crate) memory: Memory,
    pub(crate) start: u64,
    pub(crate) pitch: u64,
    pub(crate) slice: u64,
    pub(crate) end: u64,
}

/// Bytes contiguous on both sides of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    src: u64,
    dst: u64,
    len: u64,
}

/// A side of a copy as the program described it: its memory type, host pointer, device
/// address, origin (x in bytes, y, z), pitch and rows a slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Described {
    pub(crate) kind: u32,
    host: u64,
    device: u64,
    pub(crate) array: usize,
    pub(crate) origin: [u64; 3],
    pitch: u64,
    pub(crate) rows: u64,
}

impl Described {
    /// A side in memory of type `kind` (its host pointer, device address or array), rows
    /// `pitch` bytes apart, from its base: origin (0, 0, 0), no slices.
    fn at(kind: u32, host: u64, device: u64, array: usize, pitch: usize) -> Self {
        Described { kind, host, device, array, origin: [0; 3], pitch: pitch as u64, rows: 0 }
    }
}

fn invalid(why: String) -> Error {
    Error::said(code::INVALID_VALUE, why)
}

/// The side `d` describes for a region of `extent`, checked as CUDA checks it: a known memory
/// type (an array's not served), a pitch at least the row's end, and (for more than one slice)
/// rows a slice at least the region's last; `which` names it ("source", "destination").
pub(crate) fn side(d: Described, extent: Extent, which: &str) -> CuResult<Side> {
    let (memory, base) = match d.kind {
        memory_type::HOST => (Memory::Host, d.host),
        memory_type::DEVICE => (Memory::Device, d.device),
        memory_type::UNIFIED if is_device(d.device) => (Memory::Device, d.device),
        memory_type::UNIFIED => (Memory::Host, d.device),
        memory_type::ARRAY => {
            let why = format!("the {which} is a CUDA array ({:#x}): not linear memory", d.array);
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        other => return Err(invalid(format!("the {which}'s memory type {other} is none of CUDA's (1 to 4)"))),
    };
    let [x, y, z] = d.origin;
    let mut d = d;
    if d.pitch == 0 && extent.height <= 1 && extent.depth <= 1 && y == 0 && z == 0 {
        // One row with no pitch given: it is never stepped over, and the runtime's
        // one-dimensional copy nodes (`cudaGraphAddMemcpyNode1D`) leave it 0.
        d.pitch = x.saturating_add(extent.width);
    }
    if x.checked_add(extent.width).is_none_or(|end| end > d.pitch) {
        return Err(invalid(format!(
            "the {which}'s pitch {} is less than x {x} plus the width {}",
            d.pitch, extent.width
        )));
    }
    if extent.depth > 1 && y.checked_add(extent.height).is_none_or(|end| end > d.rows) {
        let why = format!("the {which}'s {} rows a slice end before y {y} plus the height {}", d.rows, extent.height);
        return Err(invalid(why));
    }
    if base == 0 && !extent.is_empty() {
        return Err(invalid(format!("the {which}'s address is null")));
    }
    let past_memory = || invalid(format!("the {which}'s region passes the end of memory"));
    let slice = d.pitch.checked_mul(d.rows).ok_or_else(past_memory)?;
    let start = at(base, [x, y, z], d.pitch, slice).ok_or_else(past_memory)?;
    let end = match extent.is_empty() {
        true => start,
        false => {
            at(start, [extent.width, extent.height - 1, extent.depth - 1], d.pitch, slice).ok_or_else(past_memory)?
        }
    };
    Ok(Side { memory, start, pitch: d.pitch, slice, end })
}

/// The address `x` bytes into row `y` of slice `z` from `base`; `None` past the end of memory.
fn at(base: u64, [x, y, z]: [u64; 3], pitch: u64, slice: u64) -> Option<u64> {
    z.checked_mul(slice)?.checked_add(y.checked_mul(pitch)?)?.checked_add(x)?.checked_add(base)
}

/// The runs of a copy of `extent` from `src` to `dst`, in order: a row each, rows that touch on
/// both sides joined. No address passes the end of memory: [`side`] checked each side's end.
fn runs(src: Side, dst: Side, extent: Extent) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    if extent.width == 0 {
        return runs;
    }
    for z in 0..extent.depth {
        for y in 0..extent.height {
            let src = src.start + z * src.slice + y * src.pitch;
            let dst = dst.start + z * dst.slice + y * dst.pitch;
            match runs.last_mut() {
                Some(last) if last.src + last.len == src && last.dst + last.len == dst => last.len += extent.width,
                _ => runs.push(Run { src, dst, len: extent.width }),
            }
        }
    }
    runs
}

/// The allocation holding a device side's region, from its first byte to its last (so every
/// run), and the region's offset in it: on `device`, or the current device's first (as
/// [`locate`]). Found before any run is sent.
fn region(side: Side, device: Option<usize>) -> CuResult<(Allocation, u64)> {
    match device {
        Some(device) => state::shim()?.find(device, side.start, side.end - side.start),
        None => locate(side.start, side.end - side.start),
    }
}

/// Copies `extent` from `src` to `dst` on `stream`; `wait`: then waits for it (the synchronous
/// forms). A copy to the host always waits: its bytes must be there when it returns.
/// The copy `p` describes between linear memory (no array on either side), on `stream`, waited
/// for if `wait`.
///
/// # Safety
/// Its host sides are the program's memory, valid for the copy.
pub(crate) unsafe fn copy_linear(p: &Memcpy3D, stream: usize, wait: bool) -> CuResult<()> {
    let (src, dst, extent) = p.sides()?;
    copy(src, dst, extent, stream, wait)
}

unsafe fn copy(src: Side, dst: Side, extent: Extent, stream: usize, wait: bool) -> CuResult<()> {
    let mut device = None;
    let mut reach = Vec::new();
    for side in [src, dst] {
        if side.memory == Memory::Device && !extent.is_empty() {
            let on = region(side, None)?.0.device;
            device = Some(on);
            reach.push(Reach::Memory(on, side.start));
        } else if side.memory == Memory::Host {
            managed::settle_host(side.start)?;
        }
    }
    let runs = runs(src, dst, extent);
    if runs.is_empty() {
        return Ok(());
    }
    managed::device_work(&reach, || copy_runs(src, dst, &runs, device, stream, wait))?;
    // A copy waited for leaves its device idle: managed memory is the host's again.
    match device.filter(|_| wait || dst.memory == Memory::Host) {
        Some(device) => managed::settle(device, None),
        None => Ok(()),
    }
}

/// Copies `runs` between the sides' kinds of memory ([`copy`]).
unsafe fn copy_runs(
    src: Side,
    dst: Side,
    runs: &[Run],
    device: Option<usize>,
    stream: usize,
    wait: bool,
) -> CuResult<()> {
    match (src.memory, dst.memory) {
        (Memory::Host, Memory::Host) => {
            for run in runs {
                std::ptr::copy(run.src as *const u8, run.dst as *mut u8, run.len as usize);
            }
            Ok(())
        }
        (Memory::Host, Memory::Device) => {
            for run in runs {
                host_to_device_async(run.dst, run.src as *const c_void, run.len as usize, stream)?;
            }
            finish(device, stream, wait)
        }
        (Memory::Device, Memory::Host) => {
            finish(device, stream, true)?;
            read_scattered(runs)
        }
        (Memory::Device, Memory::Device) => {
            for run in runs {
                device_to_device(run.dst, run.src, run.len as usize, stream)?;
            }
            finish(device, stream, wait)
        }
    }
}

/// Waits, if `wait`, for `stream` of `device` (the device of the copy's device side).
fn finish(device: Option<usize>, stream: usize, wait: bool) -> CuResult<()> {
    let Some(device) = device.filter(|_| wait) else {
        return Ok(());
    };
    let shim = state::shim()?;
    Ok(shim.block_on(stream_of(stream, device)?.synchronize())?)
}

/// Gaps a device-to-host copy reads with its rows rather than a round trip a row: as many bytes
/// as the rows hold, at least [`GAP_READ`] and at most [`GAP_READ_MAX`].
const GAP_READ: u64 = 1 << 20;
const GAP_READ_MAX: u64 = 64 << 20;

/// Reads device runs (`src`, in one allocation: [`check_device`]) into host memory (`dst`):
/// their span at once, when its gaps are few enough ([`GAP_READ`]); else a run at a time.
unsafe fn read_scattered(runs: &[Run]) -> CuResult<()> {
    let (first, last) = (runs[0], runs[runs.len() - 1]);
    let span = last.src + last.len - first.src;
    let total: u64 = runs.iter().map(|run| run.len).sum();
    if runs.len() > 1 && span - total <= total.clamp(GAP_READ, GAP_READ_MAX) {
        let mut staged = vec![0u8; span as usize];
        device_to_host(staged.as_mut_ptr().cast(), first.src, staged.len())?;
        for run in runs {
            let from = &staged[(run.src - first.src) as usize..][..run.len as usize];
            std::ptr::copy_nonoverlapping(from.as_ptr(), run.dst as *mut u8, from.len());
        }
        return Ok(());
    }
    runs.iter().try_for_each(|run| device_to_host(run.dst as *mut c_void, run.src, run.len as usize))
}

impl Memcpy2D {
    /// The same copy as a 3D copy of one slice.
    pub(crate) fn as_3d(&self) -> Memcpy3D {
        let null = std::ptr::null_mut();
        Memcpy3D {
            src_x: self.src_x,
            src_y: self.src_y,
            src_z: 0,
            src_lod: 0,
            src_type: self.src_type,
            src_host: self.src_host,
            src_device: self.src_device,
            src_array: self.src_array,
            reserved0: null,
            src_pitch: self.src_pitch,
            src_height: 0,
            dst_x: self.dst_x,
            dst_y: self.dst_y,
            dst_z: 0,
            dst_lod: 0,
            dst_type: self.dst_type,
            dst_host: self.dst_host,
            dst_device: self.dst_device,
            dst_array: self.dst_array,
            reserved1: null,
            dst_pitch: self.dst_pitch,
            dst_height: 0,
            width: self.width,
            height: self.height,
            depth: 1,
        }
    }
}

impl Memcpy3D {
    /// Its source, destination and extent, checked (the reserved fields must be null).
    fn sides(&self) -> CuResult<(Side, Side, Extent)> {
        if !self.reserved0.is_null() || !self.reserved1.is_null() {
            return Err(invalid("a reserved field of CUDA_MEMCPY3D is not null".into()));
        }
        if self.src_lod != 0 || self.dst_lod != 0 {
            return Err(invalid(format!("levels of detail {} and {} (must be 0)", self.src_lod, self.dst_lod)));
        }
        let extent = self.extent();
        Ok((side(self.src(), extent, "source")?, side(self.dst(), extent, "destination")?, extent))
    }

    /// Its region's size.
    pub(crate) fn extent(&self) -> Extent {
        Extent { width: self.width as u64, height: self.height as u64, depth: self.depth as u64 }
    }

    /// Its source as the program described it.
    pub(crate) fn src(&self) -> Described {
        let src = Described::at(self.src_type, self.src_host as u64, self.src_device, self.src_array, self.src_pitch);
        let origin = [self.src_x, self.src_y, self.src_z].map(|v| v as u64);
        Described { origin, rows: self.src_height as u64, ..src }
    }

    /// Its destination as the program described it.
    pub(crate) fn dst(&self) -> Described {
        let dst = Described::at(self.dst_type, self.dst_host as u64, self.dst_device, self.dst_array, self.dst_pitch);
        let origin = [self.dst_x, self.dst_y, self.dst_z].map(|v| v as u64);
        Described { origin, rows: self.dst_height as u64, ..dst }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(start: u64, pitch: u64, slice: u64) -> Side {
        Side { memory: Memory::Device, start, pitch, slice, end: 0 }
    }

    fn described(kind: u32, origin: [u64; 3], pitch: u64, rows: u64) -> Described {
        Described { kind, host: 0x1000, device: 0x10_0000, array: 7, origin, pitch, rows }
    }

    #[test]
    fn a_region_is_cut_into_rows_and_rows_that_touch_on_both_sides_join() {
        let extent = Extent { width: 12, height: 3, depth: 2 };
        // Pitched on both sides: a run a row, each side stepping by its own pitch and slice.
        let rows = runs(device(100, 16, 64), device(1000, 20, 80), extent);
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0], Run { src: 100, dst: 1000, len: 12 });
        assert_eq!(rows[1], Run { src: 116, dst: 1020, len: 12 });
        assert_eq!(rows[3], Run { src: 164, dst: 1080, len: 12 }, "slice 1, row 0");
        // Packed on both sides: one run; packed rows but slices apart: a run a slice.
        assert_eq!(runs(device(0, 12, 36), device(500, 12, 36), extent), [Run { src: 0, dst: 500, len: 72 }]);
        let slices = runs(device(0, 12, 40), device(500, 12, 36), extent);
        assert_eq!(slices, [Run { src: 0, dst: 500, len: 36 }, Run { src: 40, dst: 536, len: 36 }]);
        // Packed on one side only: a run a row.
        assert_eq!(runs(device(0, 12, 36), device(500, 16, 48), extent).len(), 6);
        assert!(runs(device(0, 12, 36), device(0, 12, 36), Extent { width: 0, ..extent }).is_empty());
    }

    #[test]
    fn a_3d_copy_has_no_level_of_detail_and_a_2d_memset_whole_elements() {
        // SAFETY: plain integers and null pointers.
        let mut copy: Memcpy3D = unsafe { std::mem::zeroed() };
        (copy.src_type, copy.src_device, copy.src_pitch, copy.src_height) = (memory_type::DEVICE, 0x1000, 64, 4);
        (copy.dst_type, copy.dst_device, copy.dst_pitch, copy.dst_height) = (memory_type::DEVICE, 0x9000, 32, 4);
        (copy.width, copy.height, copy.depth) = (32, 4, 2);
        let (src, dst, _) = copy.sides().unwrap();
        assert_eq!((src.end, dst.end), (0x1000 + 64 * 4 + 3 * 64 + 32, 0x9000 + 32 * 8));
        copy.dst_lod = 1;
        assert_eq!(copy.sides().unwrap_err().code(), code::INVALID_VALUE);
        // 32-bit elements: the address and the pitch (read for more than one row) are whole ones.
        let refused = |dst: u64, pitch: usize, height: usize| {
            memset_2d((dst, None), pitch, 0, 4, [2, height], 0, true).unwrap_err().code()
        };
        assert_eq!(refused(0x1002, 16, 2), code::INVALID_VALUE);
        assert_eq!(refused(0x1000, 18, 2), code::INVALID_VALUE);
    }

    #[test]
    fn a_side_starts_at_its_origin_and_is_checked_as_cuda_checks_it() {
        let extent = Extent { width: 8, height: 4, depth: 3 };
        let at = side(described(memory_type::HOST, [4, 2, 1], 16, 10), extent, "source").unwrap();
        let start = 0x1000 + 160 + 32 + 4;
        // The last byte: slice 1 + 2, row 2 + 3, x 4 + 7.
        let end = 0x1000 + 3 * 160 + 5 * 16 + 4 + 8;
        assert_eq!(at, Side { memory: Memory::Host, start, pitch: 16, slice: 160, end });
        let on_device = side(described(memory_type::DEVICE, [0; 3], 8, 4), extent, "source").unwrap();
        assert_eq!((on_device.memory, on_device.start, on_device.end), (Memory::Device, 0x10_0000, 0x10_0000 + 96));
        let refused = |d: Described, extent: Extent| side(d, extent, "destination").unwrap_err().code();
        // A row past the pitch; rows a slice ending before the region's (only for slices).
        assert_eq!(refused(described(memory_type::DEVICE, [9, 0, 0], 16, 10), extent), code::INVALID_VALUE);
        assert_eq!(refused(described(memory_type::DEVICE, [0, 7, 0], 16, 10), extent), code::INVALID_VALUE);
        let flat = Extent { depth: 1, ..extent };
        assert!(side(described(memory_type::DEVICE, [0, 7, 0], 16, 0), flat, "source").is_ok());
        // An array is not linear memory; an unknown memory type; a null address; an origin past memory.
        assert_eq!(refused(described(memory_type::ARRAY, [0; 3], 16, 10), extent), code::INVALID_VALUE);
        assert_eq!(refused(described(5, [0; 3], 16, 10), extent), code::INVALID_VALUE);
        let null = Described { device: 0, ..described(memory_type::DEVICE, [0; 3], 16, 10) };
        assert_eq!(refused(null, extent), code::INVALID_VALUE);
        assert_eq!(
            refused(described(memory_type::DEVICE, [0, 0, u64::MAX / 100], 16, 10), extent),
            code::INVALID_VALUE
        );
        let endless = Extent { width: 8, height: u64::MAX / 8, depth: 1 };
        assert_eq!(refused(described(memory_type::DEVICE, [0; 3], 16, 0), endless), code::INVALID_VALUE);
        // An empty region: its null address is not read.
        let empty = Extent { width: 0, ..extent };
        assert!(
            side(Described { device: 0, ..described(memory_type::DEVICE, [0; 3], 16, 10) }, empty, "source").is_ok()
        );
    }
}
