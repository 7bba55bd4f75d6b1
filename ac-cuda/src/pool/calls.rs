//! The memory pool API: pools by device and by location, creation and destruction, attributes,
//! access and trimming. The stream-ordered allocations themselves are [`crate::memory`]'s
//! (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`), which take from here.

use std::ffi::{c_int, c_uint, c_void};

use super::{current_pool, default_pool, pools, set_current, Pool};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put};

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Location {
    kind: c_int,
    id: c_int,
}

/// `CUmemPoolProps` (CUDA 12.2 and later; earlier ones have zeros where `max_size` is).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PoolProps {
    alloc_type: c_int,
    handle_types: c_int,
    location: Location,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    usage: u16,
    gpu_direct_rdma_capable: u8,
    reserved: [u8; 53],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Debug)]
pub struct AccessDesc {
    location: Location,
    flags: c_uint,
}

const LOCATION_DEVICE: c_int = 1;
const ALLOCATION_PINNED: c_int = 1;
const ACCESS_NONE: c_uint = 0;
const ACCESS_READWRITE: c_uint = 3;

impl PoolProps {
    /// The properties of a pool of pinned memory on device `device`, no more.
    pub fn device_pinned(device: usize) -> Self {
        PoolProps {
            alloc_type: ALLOCATION_PINNED,
            handle_types: 0,
            location: Location { kind: LOCATION_DEVICE, id: device as c_int },
            win32_security_attributes: std::ptr::null_mut(),
            max_size: 0,
            usage: 0,
            gpu_direct_rdma_capable: 0,
            reserved: [0; 53],
        }
    }
}

/// An attribute's value: an `int` (flags, types, ids) or a `cuuint64_t` (sizes).
enum Value {
    Int(c_int),
    U64(u64),
}

/// `CUmemPool_attribute`.
mod attribute {
    pub const REUSE_FOLLOW_EVENT_DEPENDENCIES: i32 = 1;
    pub const REUSE_ALLOW_INTERNAL_DEPENDENCIES: i32 = 3;
    pub const RELEASE_THRESHOLD: i32 = 4;
    pub const RESERVED_MEM_CURRENT: i32 = 5;
    pub const RESERVED_MEM_HIGH: i32 = 6;
    pub const USED_MEM_CURRENT: i32 = 7;
    pub const USED_MEM_HIGH: i32 = 8;
    pub const ALLOCATION_TYPE: i32 = 9;
    pub const EXPORT_HANDLE_TYPES: i32 = 10;
    pub const LOCATION_ID: i32 = 11;
    pub const LOCATION_TYPE: i32 = 12;
    pub const MAX_POOL_SIZE: i32 = 13;
    pub const HW_DECOMPRESS_ENABLED: i32 = 14;
    pub const LOCALITY_DOMAIN_ID: i32 = 15;
}

/// The device a location names, if it is one of the program's devices and the memory is the
/// kind served (pinned device memory); host and managed memory pools are refused.
///
/// # Safety
/// `location` is null or valid for a read.
unsafe fn device_at(location: *const Location, alloc_type: c_int) -> CuResult<usize> {
    let location = location.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    if location.kind != LOCATION_DEVICE || alloc_type != ALLOCATION_PINNED {
        return Err(Error::said(
            code::NOT_SUPPORTED,
            format!(
                "memory pools of location type {} and allocation type {alloc_type}: only device pools of pinned memory are served",
                location.kind
            ),
        ));
    }
    state::shim()?.device(location.id)?;
    Ok(location.id as usize)
}

/// A device ordinal of the program, checked.
pub fn device_of(ordinal: c_int) -> CuResult<usize> {
    state::shim()?.device(ordinal)?;
    Ok(ordinal as usize)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut usize, device: c_int) -> u32 {
    guard("cuDeviceGetDefaultMemPool", || put(pool, default_pool(device_of(device)?)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut usize, device: c_int) -> u32 {
    guard("cuDeviceGetMemPool", || put(pool, current_pool(device_of(device)?)?))
}

#[no_mangle]
pub extern "C" fn cuDeviceSetMemPool(device: c_int, pool: usize) -> u32 {
    guard("cuDeviceSetMemPool", || set_current(device_of(device)?, pool))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetDefaultMemPool(pool: *mut usize, location: *mut Location, kind: c_int) -> u32 {
    guard("cuMemGetDefaultMemPool", || put(pool, default_pool(device_at(location, kind)?)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetMemPool(pool: *mut usize, location: *mut Location, kind: c_int) -> u32 {
    guard("cuMemGetMemPool", || put(pool, current_pool(device_at(location, kind)?)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetMemPool(location: *mut Location, kind: c_int, pool: usize) -> u32 {
    guard("cuMemSetMemPool", || set_current(device_at(location, kind)?, pool))
}

/// The device of pool properties `props`, if they are served: pinned memory of one of the
/// program's devices, not shared with other processes.
///
/// # Safety
/// None beyond `props` being a valid reference (a `CUmemPoolProps` the program passed).
pub unsafe fn device_of_props(props: &PoolProps) -> CuResult<usize> {
    let device = device_at(&props.location, props.alloc_type)?;
    if props.handle_types != 0 {
        return Err(Error::said(
            code::NOT_SUPPORTED,
            format!(
                "memory pools shared with other processes (handle types {:#x}): the device is remote",
                props.handle_types
            ),
        ));
    }
    if props.usage != 0 {
        return Err(Error::said(code::NOT_SUPPORTED, format!("memory pool usage {:#x}", props.usage)));
    }
    Ok(device)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut usize, props: *const PoolProps) -> u32 {
    guard("cuMemPoolCreate", || {
        let props = props.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        let device = device_of_props(props)?;
        put(pool, pools().insert(Pool::new(device, false, props.max_size as u64)))
    })
}

#[no_mangle]
pub extern "C" fn cuMemPoolDestroy(pool: usize) -> u32 {
    guard("cuMemPoolDestroy", || super::destroy(pool))
}

#[no_mangle]
pub extern "C" fn cuMemPoolTrimTo(pool: usize, keep: usize) -> u32 {
    guard("cuMemPoolTrimTo", || {
        drop(pools().get(pool)?.lock().cache.trim_to(keep as u64));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(pool: usize, attr: c_int, value: *mut c_void) -> u32 {
    guard("cuMemPoolSetAttribute", || {
        let pool = pools().get(pool)?;
        if value.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let mut state = pool.lock();
        match attr {
            attribute::REUSE_FOLLOW_EVENT_DEPENDENCIES..=attribute::REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                state.reuse[(attr - 1) as usize] = *(value as *const c_int)
            }
            attribute::RELEASE_THRESHOLD => state.threshold = *(value as *const u64),
            attribute::RESERVED_MEM_HIGH | attribute::USED_MEM_HIGH if *(value as *const u64) != 0 => {
                return Err(Error::said(code::INVALID_VALUE, "a high-water mark can only be reset, to 0"))
            }
            attribute::RESERVED_MEM_HIGH => state.cache.reset_reserved_high(),
            attribute::USED_MEM_HIGH => state.cache.reset_used_high(),
            _ => return Err(Error::said(code::INVALID_VALUE, format!("memory pool attribute {attr} cannot be set"))),
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: usize, attr: c_int, value: *mut c_void) -> u32 {
    guard("cuMemPoolGetAttribute", || {
        let pool = pools().get(pool)?;
        if value.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let state = pool.lock();
        let counters = state.cache.counters();
        let answer = match attr {
            attribute::REUSE_FOLLOW_EVENT_DEPENDENCIES..=attribute::REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                Value::Int(state.reuse[(attr - 1) as usize])
            }
            attribute::RELEASE_THRESHOLD => Value::U64(state.threshold),
            attribute::RESERVED_MEM_CURRENT => Value::U64(counters.reserved),
            attribute::RESERVED_MEM_HIGH => Value::U64(counters.reserved_high),
            attribute::USED_MEM_CURRENT => Value::U64(counters.used),
            attribute::USED_MEM_HIGH => Value::U64(counters.used_high),
            attribute::ALLOCATION_TYPE => Value::Int(ALLOCATION_PINNED),
            attribute::EXPORT_HANDLE_TYPES | attribute::HW_DECOMPRESS_ENABLED => Value::Int(0),
            attribute::LOCATION_ID => Value::Int(pool.device as c_int),
            attribute::LOCATION_TYPE => Value::Int(LOCATION_DEVICE),
            attribute::MAX_POOL_SIZE => Value::U64(pool.max_size),
            attribute::LOCALITY_DOMAIN_ID => Value::Int(-1),
            _ => return Err(Error::said(code::INVALID_VALUE, format!("memory pool attribute {attr}"))),
        };
        match answer {
            Value::Int(v) => *(value as *mut c_int) = v,
            Value::U64(v) => *(value as *mut u64) = v,
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: usize, map: *const AccessDesc, count: usize) -> u32 {
    guard("cuMemPoolSetAccess", || {
        let pool = pools().get(pool)?;
        if map.is_null() && count > 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let descs = if count == 0 { &[][..] } else { std::slice::from_raw_parts(map, count) };
        check_access(pool.device, descs)
    })
}

/// `CUDA_ERROR_INVALID_VALUE` unless access descriptors `descs` for memory of device `owner`
/// leave it as it is: its own device keeps read-write access; the others are remote GPUs that
/// map no other's memory (`crate::peer`), so have none.
///
/// # Safety
/// None beyond `descs` being the program's descriptors.
pub unsafe fn check_access(owner: usize, descs: &[AccessDesc]) -> CuResult<()> {
    for desc in descs {
        let device = device_at(&desc.location, ALLOCATION_PINNED)?;
        let allowed = if device == owner { ACCESS_READWRITE } else { ACCESS_NONE };
        if desc.flags != allowed {
            return Err(if device == owner {
                Error::said(code::INVALID_VALUE, "memory's own device keeps read-write access")
            } else {
                Error::said(
                    code::INVALID_VALUE,
                    format!("device {device} cannot reach device {owner}'s memory (no peer access)"),
                )
            });
        }
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(flags: *mut c_uint, pool: usize, location: *mut Location) -> u32 {
    guard("cuMemPoolGetAccess", || {
        let pool = pools().get(pool)?;
        let device = device_at(location, ALLOCATION_PINNED)?;
        put(flags, if device == pool.device { ACCESS_READWRITE } else { ACCESS_NONE })
    })
}
