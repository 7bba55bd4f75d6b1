//! Batches of copies (`cuMemcpyBatchAsync`, CUDA 12.8, and its `_v2` of 13.0 without the
//! failure index; `cuMemcpyWithAttributesAsync`, one copy), as key-value cache offload makes
//! them: each copy is the unified-addressing copy `cuMemcpyAsync` makes, queued on the batch's
//! stream in the batch's order (CUDA runs a batch's copies in any order, so this is one it may
//! choose) or recorded if the stream captures.
//!
//! The attributes: every source order is kept. A host source is read before the call returns
//! (its bytes go with the call, or the copy is synchronous), as each order allows; a device
//! source read "during the call" is, because the call waits for its stream after queuing the
//! batch, and such a batch cannot be captured (a replay would read the source long after). The
//! location hints are for managed or pageable memory a device reaches in place, which a remote
//! device never does, so they are not read; the overlap flag is a hint, checked and let be. A
//! batch is checked whole (attributes, and each copy's device memory) before any copy of it is
//! queued.

use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::memory::{copy_async, locate};
use crate::{guard, stream};

/// `CUmemcpyAttributes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemcpyAttributes {
    src_access_order: u32,
    /// `CUmemLocation`s (type, id): hints for memory without a fixed place.
    src_loc_hint: [i32; 2],
    dst_loc_hint: [i32; 2],
    flags: u32,
}

/// `CUmemcpySrcAccessOrder`: in stream order, during the call, at any time.
const ORDER_STREAM: u32 = 1;
const ORDER_DURING_API_CALL: u32 = 2;
const ORDER_ANY: u32 = 3;
/// `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, the one flag.
const FLAG_PREFER_OVERLAP_WITH_COMPUTE: u32 = 1;

/// One copy of a batch: destination, source, bytes, and whether its source is read during the
/// call.
#[derive(Debug, Clone, Copy)]
struct Copy {
    dst: u64,
    src: u64,
    len: usize,
    during_call: bool,
}

/// The refusal of a malformed batch (`CUDA_ERROR_INVALID_VALUE`) and why.
fn malformed(why: impl Into<String>) -> Error {
    Error::said(code::INVALID_VALUE, why)
}

/// Whether `a` is attributes CUDA accepts, and if so whether its source is read during the call.
fn during_call(a: &MemcpyAttributes) -> CuResult<bool> {
    if ![ORDER_STREAM, ORDER_DURING_API_CALL, ORDER_ANY].contains(&a.src_access_order) {
        return Err(malformed(format!("a copy's source access order is {}, not 1, 2 or 3", a.src_access_order)));
    }
    if a.flags & !FLAG_PREFER_OVERLAP_WITH_COMPUTE != 0 {
        return Err(malformed(format!("a copy's flags are {:#x}: only 1 is one", a.flags)));
    }
    Ok(a.src_access_order == ORDER_DURING_API_CALL)
}

/// Which attributes each of `count` copies has: `starts[k]` is the first copy `attrs[k]` applies
/// to (0 first, then increasing, each below `count`).
fn attributes_of_copies(count: usize, attrs: &[MemcpyAttributes], starts: &[usize]) -> CuResult<Vec<bool>> {
    if starts[0] != 0 {
        return Err(malformed("the first attributes must apply from copy 0"));
    }
    if starts.windows(2).any(|w| w[1] <= w[0]) || starts[starts.len() - 1] >= count {
        return Err(malformed("the attributes' first copies must increase, each below the batch's count"));
    }
    let mut during = Vec::with_capacity(count);
    for (k, a) in attrs.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(count);
        during.resize(end, during_call(a)?);
    }
    Ok(during)
}

/// Refuses a copy whose device side is not `len` bytes of this program's device memory.
fn check_copy(c: &Copy) -> CuResult<()> {
    for address in [c.dst, c.src] {
        if crate::memory::is_device(address) {
            locate(address, c.len as u64)?;
        }
    }
    Ok(())
}

/// Queues (or records) `copies` on `stream`, checked first; `failed` is told the index of the
/// copy refused, if one was.
fn run_batch(copies: &[Copy], stream: usize, failed: &mut Option<usize>) -> CuResult<()> {
    for (i, c) in copies.iter().enumerate() {
        check_copy(c).inspect_err(|_| *failed = Some(i))?;
    }
    let read_during_call = copies.iter().any(|c| c.during_call);
    if read_during_call {
        graph::refuse_if_capturing(stream, "a copy whose source is read during the call")?;
    }
    for &Copy { dst, src, len, .. } in copies {
        graph::or_record(stream, NodeKind::Memcpy, move |s| copy_async(dst, src, len, s))?;
    }
    // A device source read during the call: its copy is done before the call returns.
    if copies.iter().any(|c| c.during_call && crate::memory::is_device(c.src)) {
        stream::wait_for_work(stream)?;
    }
    Ok(())
}

/// The batch the program's arrays describe, checked.
///
/// # Safety
/// Each array as long as `count` (`attrs` and `starts` as `num_attrs`), or null.
unsafe fn batch_of(
    (dsts, srcs, sizes): (*const u64, *const u64, *const usize),
    count: usize,
    (attrs, starts, num_attrs): (*const MemcpyAttributes, *const usize, usize),
) -> CuResult<Vec<Copy>> {
    if count == 0 || dsts.is_null() || srcs.is_null() || sizes.is_null() || attrs.is_null() || starts.is_null() {
        return Err(malformed("a batch needs at least one copy, and its arrays"));
    }
    if num_attrs == 0 || num_attrs > count {
        return Err(malformed(format!("{num_attrs} attributes for {count} copies: 1 to {count}")));
    }
    let attrs = std::slice::from_raw_parts(attrs, num_attrs);
    let during = attributes_of_copies(count, attrs, std::slice::from_raw_parts(starts, num_attrs))?;
    let (dsts, srcs, sizes) = (
        std::slice::from_raw_parts(dsts, count),
        std::slice::from_raw_parts(srcs, count),
        std::slice::from_raw_parts(sizes, count),
    );
    Ok((0..count).map(|i| Copy { dst: dsts[i], src: srcs[i], len: sizes[i], during_call: during[i] }).collect())
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
const LEGACY: usize = 1;
const PER_THREAD: usize = 2;

/// The stream a batch names, as its form reads it (the `_ptsz` forms read the NULL stream as the
/// per-thread default stream); the legacy default stream is refused, as CUDA refuses it.
fn batch_stream(stream: usize, per_thread: bool) -> CuResult<usize> {
    match stream {
        0 if per_thread => Ok(PER_THREAD),
        0 | LEGACY => Err(malformed("a batch of copies may not go on the legacy default stream")),
        stream => Ok(stream),
    }
}

/// `cuMemcpyBatchAsync` in all its forms: `fail_index`, if not null, is told the copy refused
/// (`SIZE_MAX` where the refusal is not one copy's).
unsafe fn memcpy_batch(
    copies: (*const u64, *const u64, *const usize),
    count: usize,
    attributes: (*const MemcpyAttributes, *const usize, usize),
    fail_index: *mut usize,
    (stream, per_thread): (usize, bool),
) -> u32 {
    guard("cuMemcpyBatchAsync", || {
        let mut failed = None;
        let ran = batch_stream(stream, per_thread).and_then(|stream| {
            batch_of(copies, count, attributes).and_then(|batch| run_batch(&batch, stream, &mut failed))
        });
        if ran.is_err() && !fail_index.is_null() {
            *fail_index = failed.unwrap_or(usize::MAX);
        }
        ran
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuMemcpyBatchAsync(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    starts: *const usize,
    num_attrs: usize,
    fail_index: *mut usize,
    stream: usize,
) -> u32 {
    memcpy_batch((dsts, srcs, sizes), count, (attrs, starts, num_attrs), fail_index, (stream, false))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuMemcpyBatchAsync_ptsz(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    starts: *const usize,
    num_attrs: usize,
    fail_index: *mut usize,
    stream: usize,
) -> u32 {
    memcpy_batch((dsts, srcs, sizes), count, (attrs, starts, num_attrs), fail_index, (stream, true))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuMemcpyBatchAsync_v2(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    starts: *const usize,
    num_attrs: usize,
    stream: usize,
) -> u32 {
    memcpy_batch((dsts, srcs, sizes), count, (attrs, starts, num_attrs), std::ptr::null_mut(), (stream, false))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuMemcpyBatchAsync_v2_ptsz(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    starts: *const usize,
    num_attrs: usize,
    stream: usize,
) -> u32 {
    memcpy_batch((dsts, srcs, sizes), count, (attrs, starts, num_attrs), std::ptr::null_mut(), (stream, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyWithAttributesAsync(
    dst: u64,
    src: u64,
    len: usize,
    attr: *const MemcpyAttributes,
    stream: usize,
) -> u32 {
    guard("cuMemcpyWithAttributesAsync", || {
        let attr = attr.as_ref().ok_or_else(|| malformed("the copy's attributes are null"))?;
        let copy = Copy { dst, src, len, during_call: during_call(attr)? };
        run_batch(&[copy], stream, &mut None)
    })
}
