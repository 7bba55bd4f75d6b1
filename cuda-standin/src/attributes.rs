//! A kernel's attributes (`cuFuncGetAttribute`, `cuFuncSetAttribute`): its static shared memory
//! as its cubin declares it, and the dynamic shared memory its launches may ask for, which a
//! kernel raises past the default (48 KiB less its static shared memory) up to the device's
//! opt-in limit, as the driver allows.

use std::ffi::c_int;

use crate::state::{self, Function};
use crate::{code, id, owned, with_context, Handle};

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const MAX_DYNAMIC_SHARED: c_int = 8;
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`.
const CARVEOUT: c_int = 9;
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
const NON_PORTABLE: c_int = 14;

/// The function `function` names, checked to be the current context's.
fn function_of(d: &mut state::Driver, function: Handle, context: u64) -> Result<&mut Function, u32> {
    let owner = d.functions.get(&id(function)).map(|f| f.context);
    owned(d, "function", owner, context)?;
    Ok(d.functions.get_mut(&id(function)).expect("owned above"))
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, function: Handle) -> u32 {
    with_context("cuFuncGetAttribute", |d, context| {
        let f = function_of(d, function, context)?;
        let (major, minor) = state::COMPUTE_CAPABILITY;
        *value = match attribute {
            0 => 1024,                              // max threads per block
            1 => f.static_shared as c_int,          // static shared memory
            2 | 3 => 0,                             // constant and local memory
            4 => 32,                                // registers per thread
            5 | 6 => (major * 10 + minor) as c_int, // PTX and binary versions
            7 => 0,                                 // cache mode
            MAX_DYNAMIC_SHARED => f.max_dynamic_shared as c_int,
            CARVEOUT => f.carveout,
            NON_PORTABLE => f.non_portable as c_int,
            _ => return Err(code::INVALID_VALUE),
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(function: Handle, attribute: c_int, value: c_int) -> u32 {
    with_context("cuFuncSetAttribute", |d, context| {
        let f = function_of(d, function, context)?;
        match attribute {
            MAX_DYNAMIC_SHARED => {
                let most = state::OPTIN_SHARED.saturating_sub(f.static_shared);
                f.max_dynamic_shared = u32::try_from(value).ok().filter(|&v| v <= most).ok_or(code::INVALID_VALUE)?;
            }
            CARVEOUT if (-1..=100).contains(&value) => f.carveout = value,
            NON_PORTABLE => f.non_portable = value != 0,
            // The read-only attributes, a carveout out of range; the other cluster attributes,
            // which the stand-in does not model.
            _ => return Err(code::INVALID_VALUE),
        }
        Ok(())
    })
}
