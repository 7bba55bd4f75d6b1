//! A kernel node's launch attributes (`cuGraphKernelNodeSetAttribute`, `...GetAttribute`,
//! `...CopyAttributes`), as `cuLaunchKernelEx` takes them: a cooperative launch and a cluster
//! shape change how the node's launch runs its blocks (its mode, `crate::launch::Mode`); the
//! hints (an L2 access policy window, a priority, a scheduling or carveout preference, memory
//! synchronization domains, a preferred cluster shape, NVLink-centric scheduling, the portable
//! cluster size and shared memory modes) are checked as CUDA checks them, kept and read back,
//! and change nothing the remote device computes.

use std::ffi::c_void;

use super::params::{mode_of, set_mode};
use super::{node, Hint, NodeKind};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::launch::Mode;
use crate::stream::attributes::check_window;

/// The `CUlaunchAttributeID`s a kernel node has.
const ACCESS_POLICY_WINDOW: u32 = 1;
const COOPERATIVE: u32 = 2;
const CLUSTER_DIMENSION: u32 = 4;
const CLUSTER_SCHEDULING_POLICY: u32 = 5;
const PRIORITY: u32 = 8;
const MEM_SYNC_DOMAIN_MAP: u32 = 9;
const MEM_SYNC_DOMAIN: u32 = 10;
const PREFERRED_CLUSTER_DIMENSION: u32 = 11;
const DEVICE_UPDATABLE: u32 = 13;
const PREFERRED_SHARED_MEMORY_CARVEOUT: u32 = 14;
const NVLINK_UTIL_CENTRIC_SCHEDULING: u32 = 16;
const PORTABLE_CLUSTER_SIZE_MODE: u32 = 17;
const SHARED_MEMORY_MODE: u32 = 18;

/// The bytes of attribute `id`'s member of the union (a window's 32, a shape's 12, a scalar's
/// 4: what programs pass, whatever the union's size in their CUDA); `CUDA_ERROR_INVALID_VALUE`
/// for an attribute a kernel node does not have.
fn member_len(id: u32) -> CuResult<usize> {
    match id {
        ACCESS_POLICY_WINDOW => Ok(32),
        CLUSTER_DIMENSION | PREFERRED_CLUSTER_DIMENSION => Ok(12),
        COOPERATIVE
        | CLUSTER_SCHEDULING_POLICY
        | PRIORITY
        | MEM_SYNC_DOMAIN_MAP
        | MEM_SYNC_DOMAIN
        | DEVICE_UPDATABLE
        | PREFERRED_SHARED_MEMORY_CARVEOUT
        | NVLINK_UTIL_CENTRIC_SCHEDULING
        | PORTABLE_CLUSTER_SIZE_MODE
        | SHARED_MEMORY_MODE => Ok(4),
        _ => Err(Error::said(code::INVALID_VALUE, format!("launch attribute {id} is not one a kernel node has"))),
    }
}

fn word(value: &Hint, i: usize) -> u32 {
    u32::from_ne_bytes(value[4 * i..4 * i + 4].try_into().expect("4 bytes"))
}

/// Kernel node `handle`, checked to be one.
fn kernel_node(handle: usize) -> CuResult<std::sync::Arc<super::Node>> {
    let node = node(handle)?;
    if node.kind != NodeKind::Kernel {
        return Err(Error::said(code::INVALID_VALUE, format!("a {:?} node, not a kernel node", node.kind)));
    }
    Ok(node)
}

/// The mode a node launching as `mode` runs as once attribute `id` is `value`.
fn mode_with(mode: Mode, id: u32, value: &Hint) -> CuResult<Mode> {
    let cluster = [0, 1, 2].map(|i| word(value, i).max(1));
    let asked = match (id, mode) {
        (COOPERATIVE, Mode::Clustered(_)) if word(value, 0) != 0 => None,
        (COOPERATIVE, _) if word(value, 0) != 0 => Some(Mode::Cooperative),
        (COOPERATIVE, Mode::Cooperative) => Some(Mode::Plain),
        (CLUSTER_DIMENSION, Mode::Cooperative) if cluster != [1, 1, 1] => None,
        (CLUSTER_DIMENSION, _) if cluster != [1, 1, 1] => Some(Mode::Clustered(cluster)),
        (CLUSTER_DIMENSION, Mode::Clustered(_)) => Some(Mode::Plain),
        _ => Some(mode),
    };
    asked.ok_or_else(|| {
        Error::said(code::NOT_SUPPORTED, "a cooperative launch in clusters is not supported on remote accelerators")
    })
}

/// Kernel node `handle`'s attribute `id` is `value` from now on.
fn set(handle: usize, id: u32, value: Hint) -> CuResult<()> {
    let node = kernel_node(handle)?;
    match id {
        COOPERATIVE | CLUSTER_DIMENSION => {
            let mode = mode_of(handle)?;
            let new = mode_with(mode, id, &value)?;
            if new != mode {
                set_mode(handle, new)?;
            }
            return Ok(());
        }
        ACCESS_POLICY_WINDOW => check_window(&value)?,
        DEVICE_UPDATABLE if word(&value, 0) != 0 => {
            return Err(Error::said(
                code::NOT_SUPPORTED,
                "device-updatable kernel nodes are not supported on remote accelerators",
            ));
        }
        MEM_SYNC_DOMAIN if word(&value, 0) > 1 => {
            return Err(Error::said(code::INVALID_VALUE, format!("memory synchronization domain {}", word(&value, 0))));
        }
        _ => {}
    }
    node.hints().insert(id, value);
    Ok(())
}

/// Kernel node `handle`'s attribute `id`: its mode's for a cooperative launch and a cluster
/// shape, else what was set (zeros until then).
fn get(handle: usize, id: u32) -> CuResult<Hint> {
    let node = kernel_node(handle)?;
    let mut value = [0; 64];
    match (id, mode_of(handle)?) {
        (COOPERATIVE, mode) => value[..4].copy_from_slice(&u32::from(mode == Mode::Cooperative).to_ne_bytes()),
        (CLUSTER_DIMENSION, Mode::Clustered(cluster)) => {
            cluster.iter().enumerate().for_each(|(i, c)| value[4 * i..4 * i + 4].copy_from_slice(&c.to_ne_bytes()))
        }
        (CLUSTER_DIMENSION, _) => {}
        (id, _) => value = node.hints().get(&id).copied().unwrap_or(value),
    }
    Ok(value)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetAttribute(handle: usize, id: u32, value: *const c_void) -> u32 {
    guard("cuGraphKernelNodeSetAttribute", || {
        let len = member_len(id)?;
        if value.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let mut given = [0; 64];
        given[..len].copy_from_slice(std::slice::from_raw_parts(value.cast::<u8>(), len));
        set(handle, id, given)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetAttribute(handle: usize, id: u32, out: *mut c_void) -> u32 {
    guard("cuGraphKernelNodeGetAttribute", || {
        let len = member_len(id)?;
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        std::ptr::copy_nonoverlapping(get(handle, id)?.as_ptr(), out.cast::<u8>(), len);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuGraphKernelNodeCopyAttributes(dst: usize, src: usize) -> u32 {
    guard("cuGraphKernelNodeCopyAttributes", || {
        let hints = kernel_node(src)?.hints().clone();
        let target = kernel_node(dst)?;
        let mode = mode_of(src)?;
        if mode_of(dst)? != mode {
            set_mode(dst, mode)?;
        }
        *target.hints() = hints;
        Ok(())
    })
}
