//! A stream's attributes (`cuStreamSetAttribute`, `cuStreamGetAttribute`,
//! `cuStreamCopyAttributes`), kept here: checked as CUDA checks them and answered back. What
//! they ask of the GPU (an L2 access policy window, how a host thread waits for the stream, a
//! priority, a memory synchronization domain) is how the device runs the stream's work, not
//! what the work computes: the remote device runs it as it would without, so no result differs,
//! and a program that sets a window (TensorRT, CUTLASS's examples) runs unchanged.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::{device_of_stream, is_default_stream, streams};
use crate::error::{code, CuResult, Error};
use crate::guard;

/// `CUlaunchAttributeValue`: a union of 64 bytes.
pub type Value = [u8; 64];

/// A stream's attributes that were set, by `CUlaunchAttributeID`.
#[derive(Debug, Default, Clone)]
pub struct Attributes(HashMap<u32, Value>);

/// The `CUlaunchAttributeID`s valid for streams.
const ACCESS_POLICY_WINDOW: u32 = 1;
const SYNCHRONIZATION_POLICY: u32 = 3;
const PRIORITY: u32 = 8;
const MEM_SYNC_DOMAIN_MAP: u32 = 9;
const MEM_SYNC_DOMAIN: u32 = 10;
const NVLINK_UTIL_CENTRIC_SCHEDULING: u32 = 16;

/// `CU_SYNC_POLICY_AUTO`, a stream's synchronization policy until one is set.
const SYNC_POLICY_AUTO: u32 = 1;

/// The largest access policy window, bytes (`CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE`,
/// the same on Ampere and Hopper).
pub const MAX_WINDOW: usize = 134_213_632;

fn u32_at(value: &Value, at: usize) -> u32 {
    u32::from_ne_bytes(value[at..at + 4].try_into().expect("4 bytes"))
}

fn refused(why: String) -> Error {
    Error::said(code::INVALID_VALUE, why)
}

/// Refuses an attribute id that is not a stream's.
fn stream_attribute(id: u32) -> CuResult<()> {
    match id {
        ACCESS_POLICY_WINDOW
        | SYNCHRONIZATION_POLICY
        | PRIORITY
        | MEM_SYNC_DOMAIN_MAP
        | MEM_SYNC_DOMAIN
        | NVLINK_UTIL_CENTRIC_SCHEDULING => Ok(()),
        _ => Err(refused(format!("launch attribute {id} is not one a stream has"))),
    }
}

/// `value` for attribute `id` as the stream keeps it, or why CUDA refuses it.
fn checked(id: u32, mut value: Value) -> CuResult<Value> {
    stream_attribute(id)?;
    match id {
        ACCESS_POLICY_WINDOW => check_window(&value)?,
        SYNCHRONIZATION_POLICY if !(1..=4).contains(&u32_at(&value, 0)) => {
            return Err(refused(format!("synchronization policy {} is not 1 to 4", u32_at(&value, 0))));
        }
        // Clamped to the devices' priority range, which is 0 alone (`cuCtxGetStreamPriorityRange`).
        PRIORITY => value[..4].copy_from_slice(&0i32.to_ne_bytes()),
        MEM_SYNC_DOMAIN if u32_at(&value, 0) > 1 => {
            return Err(refused(format!("memory synchronization domain {} is not 0 or 1", u32_at(&value, 0))));
        }
        _ => {}
    }
    Ok(value)
}

/// Refuses an access policy window CUDA refuses: `CUaccessPolicyWindow` is the base address,
/// the bytes, the hit ratio, and the properties of hits and misses.
pub(crate) fn check_window(value: &Value) -> CuResult<()> {
    let bytes = usize::from_ne_bytes(value[8..16].try_into().expect("8 bytes"));
    let hit_ratio = f32::from_ne_bytes(value[16..20].try_into().expect("4 bytes"));
    let (hit, miss) = (u32_at(value, 20), u32_at(value, 24));
    if !(0.0..=1.0).contains(&hit_ratio) {
        return Err(refused(format!("an access policy window's hit ratio is {hit_ratio}, not 0 to 1")));
    }
    // Normal, streaming or persisting; a miss is never persisting.
    if hit > 2 || miss > 1 {
        return Err(refused(format!("an access policy window's hit and miss properties are {hit} and {miss}")));
    }
    if bytes > MAX_WINDOW {
        return Err(refused(format!("an access policy window of {bytes} bytes: at most {MAX_WINDOW}")));
    }
    Ok(())
}

/// The attributes of the default streams, by device (they have no record of their own).
fn defaults() -> MutexGuard<'static, HashMap<usize, Attributes>> {
    static DEFAULTS: OnceLock<Mutex<HashMap<usize, Attributes>>> = OnceLock::new();
    DEFAULTS.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on stream `handle`'s attributes.
fn with_attributes<T>(handle: usize, f: impl FnOnce(&mut Attributes) -> T) -> CuResult<T> {
    let device = device_of_stream(handle)?;
    if is_default_stream(handle) {
        return Ok(f(defaults().entry(device).or_default()));
    }
    let record = streams().get(handle)?;
    let mut attributes = record.attributes.lock().unwrap_or_else(|p| p.into_inner());
    Ok(f(&mut attributes))
}

/// The bytes of attribute `id`'s member of the union: a window's 32, a scalar's 4 (CUDA 11's
/// `CUstreamAttrValue`, which programs built then pass, is 32 bytes, not 64).
fn member_len(id: u32) -> usize {
    if id == ACCESS_POLICY_WINDOW {
        32
    } else {
        4
    }
}

/// Attribute `id` of a stream that never set it: what CUDA answers then.
fn unset(id: u32) -> Value {
    let mut value = [0; 64];
    if id == SYNCHRONIZATION_POLICY {
        value[..4].copy_from_slice(&SYNC_POLICY_AUTO.to_ne_bytes());
    }
    value
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSetAttribute(handle: usize, id: u32, value: *const c_void) -> u32 {
    guard("cuStreamSetAttribute", || {
        stream_attribute(id)?;
        if value.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let mut given = [0; 64];
        let len = member_len(id);
        given[..len].copy_from_slice(std::slice::from_raw_parts(value.cast::<u8>(), len));
        let value = checked(id, given)?;
        with_attributes(handle, |a| a.0.insert(id, value)).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetAttribute(handle: usize, id: u32, out: *mut c_void) -> u32 {
    guard("cuStreamGetAttribute", || {
        stream_attribute(id)?;
        let value = with_attributes(handle, |a| a.0.get(&id).copied())?.unwrap_or_else(|| unset(id));
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let len = member_len(id);
        std::ptr::copy_nonoverlapping(value.as_ptr(), out.cast::<u8>(), len);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamCopyAttributes(dst: usize, src: usize) -> u32 {
    guard("cuStreamCopyAttributes", || {
        let copied = with_attributes(src, |a| a.clone())?;
        with_attributes(dst, |a| *a = copied)
    })
}
