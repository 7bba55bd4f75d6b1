//! 2D memsets: `cuMemsetD2D8/16/32` and their `Async` forms (`cudaMemset2D`), a region cut
//! into [`super`]'s runs, each one of [`crate::memory`]'s memsets.

use super::{finish, invalid, memory_type, region, runs, side, Described, Extent};
use crate::error::CuResult;
use crate::graph::{self, NodeKind};
use crate::guard;
use crate::managed::{self, Reach};
use crate::memory::memset_in;

/// Sets `width` elements of `bytes` bytes in each of `height` rows `pitch` bytes apart at `dst`
/// (in `device`'s memory, or the current device's first) to `pattern`, on `stream`; `wait`:
/// then waits for it.
#[allow(clippy::too_many_arguments)] // the driver's arguments, and where
pub(crate) fn memset_2d(
    (dst, device): (u64, Option<usize>),
    pitch: usize,
    pattern: u32,
    bytes: u64,
    [width, height]: [usize; 2],
    stream: usize,
    wait: bool,
) -> CuResult<()> {
    let row = (width as u64).checked_mul(bytes).ok_or_else(|| invalid("a row passes the end of memory".into()))?;
    // The pitch is not read for one row (cuda.h); the address and pitch are whole elements.
    let pitch = if height > 1 { pitch } else { row as usize };
    if !dst.is_multiple_of(bytes) || !(pitch as u64).is_multiple_of(bytes) {
        return Err(invalid(format!("{dst:#x} or pitch {pitch} is not a multiple of the element's {bytes} bytes")));
    }
    let described = Described::at(memory_type::DEVICE, 0, dst, 0, pitch);
    let extent = Extent { width: row, height: height as u64, depth: 1 };
    let side = side(described, extent, "destination")?;
    if extent.is_empty() {
        return Ok(());
    }
    let (alloc, offset) = region(side, device)?;
    let device = alloc.device;
    managed::device_work(&[Reach::Memory(device, side.start)], || {
        for run in runs(side, side, extent) {
            let at = (alloc.clone(), offset + (run.dst - side.start));
            memset_in(at, pattern, bytes as usize, run.len as usize, stream)?;
        }
        finish(Some(device), stream, wait)
    })?;
    if wait {
        managed::settle(device, None)?;
    }
    Ok(())
}

/// A 2D memset queued on `stream` ([`memset_2d`]), or recorded if the stream is capturing.
fn memset_queued(dst: u64, pitch: usize, pattern: u32, bytes: u64, extent: [usize; 2], stream: usize) -> CuResult<()> {
    graph::or_record(stream, NodeKind::Memset, move |s| memset_2d((dst, None), pitch, pattern, bytes, extent, s, false))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D8_v2(dst: u64, pitch: usize, value: u8, width: usize, height: usize) -> u32 {
    guard("cuMemsetD2D8", || memset_2d((dst, None), pitch, value.into(), 1, [width, height], 0, true))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D8Async(
    dst: u64,
    pitch: usize,
    value: u8,
    width: usize,
    height: usize,
    stream: usize,
) -> u32 {
    guard("cuMemsetD2D8Async", || memset_queued(dst, pitch, value.into(), 1, [width, height], stream))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D16_v2(dst: u64, pitch: usize, value: u16, width: usize, height: usize) -> u32 {
    guard("cuMemsetD2D16", || memset_2d((dst, None), pitch, value.into(), 2, [width, height], 0, true))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D16Async(
    dst: u64,
    pitch: usize,
    value: u16,
    width: usize,
    height: usize,
    stream: usize,
) -> u32 {
    guard("cuMemsetD2D16Async", || memset_queued(dst, pitch, value.into(), 2, [width, height], stream))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D32_v2(dst: u64, pitch: usize, value: u32, width: usize, height: usize) -> u32 {
    guard("cuMemsetD2D32", || memset_2d((dst, None), pitch, value, 4, [width, height], 0, true))
}

#[no_mangle]
pub extern "C" fn cuMemsetD2D32Async(
    dst: u64,
    pitch: usize,
    value: u32,
    width: usize,
    height: usize,
    stream: usize,
) -> u32 {
    guard("cuMemsetD2D32Async", || memset_queued(dst, pitch, value, 4, [width, height], stream))
}
