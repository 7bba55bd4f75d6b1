//! Peer access between the program's devices. They are remote GPUs, often on different hosts,
//! and none maps another's memory: peer access is unsupported, as CUDA says of two GPUs without
//! a peer link (`cuDeviceCanAccessPeer` 0, `cuCtxEnablePeerAccess`
//! `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`), and `cuMemcpyPeer` goes through the host, as CUDA's
//! own does without a link. Each address is found on the device its context names: two remote
//! GPUs may hand out the same addresses.

use std::ffi::{c_int, c_uint};

use crate::context::{context_of, current_device};
use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::guard;
use crate::managed::{self, Reach};
use crate::memory::copy_between;
use crate::state::{self, put};
use crate::stream::stream_of;

/// `CUdevice_P2PAttribute`'s last value (CUDA 13's `ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED`); the
/// first is 1.
const LAST_P2P_ATTRIBUTE: c_int = 5;

/// The ordinals of two devices of the program, checked.
fn devices(a: c_int, b: c_int) -> CuResult<()> {
    let shim = state::shim()?;
    shim.device(a)?;
    shim.device(b)?;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> u32 {
    guard("cuDeviceCanAccessPeer", || {
        devices(device, peer)?;
        put(can, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(value: *mut c_int, attribute: c_int, src: c_int, dst: c_int) -> u32 {
    guard("cuDeviceGetP2PAttribute", || {
        devices(src, dst)?;
        if src == dst {
            return Err(Error::said(code::INVALID_DEVICE, "a device's peer attribute with itself"));
        }
        if !(1..=LAST_P2P_ATTRIBUTE).contains(&attribute) {
            return Err(Error::said(code::INVALID_VALUE, format!("peer attribute {attribute} is none of CUDA's")));
        }
        // No rank, no access, no atomics, no arrays: every attribute 0.
        put(value, 0)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxEnablePeerAccess(peer: usize, flags: c_uint) -> u32 {
    guard("cuCtxEnablePeerAccess", || {
        let (peer, current) = (context_of(peer)?.device, current_device()?);
        if flags != 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("peer access flags {flags:#x} (must be 0)")));
        }
        if peer == current {
            return Err(Error::said(code::INVALID_CONTEXT, "peer access to the current context itself"));
        }
        let why = format!(
            "device {current} cannot map device {peer}'s memory: they are remote accelerators (copies between them go through the host)"
        );
        Err(Error::said(code::PEER_ACCESS_UNSUPPORTED, why))
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDisablePeerAccess(peer: usize) -> u32 {
    guard("cuCtxDisablePeerAccess", || {
        context_of(peer)?;
        current_device()?;
        Err(Error::Code(code::PEER_ACCESS_NOT_ENABLED))
    })
}

/// `len` bytes from `src` in `src_context`'s device memory to `dst` in `dst_context`'s, on
/// `stream` where the two are one device.
fn copy_peer(dst: u64, dst_context: usize, src: u64, src_context: usize, len: usize, stream: usize) -> CuResult<()> {
    let (to, from) = (context_of(dst_context)?.device, context_of(src_context)?.device);
    if len == 0 {
        return Ok(());
    }
    let shim = state::shim()?;
    let (to_at, from_at) = (shim.find(to, dst, len as u64)?, shim.find(from, src, len as u64)?);
    managed::device_work(&[Reach::Memory(to, dst), Reach::Memory(from, src)], || {
        copy_between(to_at, from_at, len, stream)
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeer(dst: u64, dst_context: usize, src: u64, src_context: usize, len: usize) -> u32 {
    guard("cuMemcpyPeer", || {
        copy_peer(dst, dst_context, src, src_context, len, 0)?;
        let shim = state::shim()?;
        let device = context_of(dst_context)?.device;
        shim.block_on(stream_of(0, device)?.synchronize())?;
        managed::settle(device, None)?;
        managed::settle(context_of(src_context)?.device, None)
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeerAsync(
    dst: u64,
    dst_context: usize,
    src: u64,
    src_context: usize,
    len: usize,
    stream: usize,
) -> u32 {
    guard("cuMemcpyPeerAsync", || {
        graph::or_record(stream, NodeKind::Memcpy, move |s| copy_peer(dst, dst_context, src, src_context, len, s))
    })
}
