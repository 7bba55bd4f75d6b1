//! What a plan would need before it is made, and its properties: `cufftEstimate1d/2d/3d/Many`
//! and `cufftGetSize1d/2d/3d/Many/Many64`, `cufftXtGetSizeMany` (the work area a plan of those
//! arguments needs: 0, since a plan's scratch is its own; the arguments are checked as making
//! the plan checks them; `cufftXtSetWorkArea` and `cufftXtSetWorkAreaPolicy` take what they are
//! given, needing none), and `cufftSetPlanPropertyInt64`, `cufftGetPlanPropertyInt64`,
//! `cufftResetPlanProperty` (kept and answered: patient JIT compilation and the host threads a
//! plan may use to make itself, which the shim's plans, made by no compiler, never need).

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong, c_void};

use super::{basic, guard, many, of_type, of_xt_types, plan, Domain, Many, Precision};
use crate::error::{code, CuResult, Error};
use crate::state::put;

/// `NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT`: 1 to let a plan take longer compiling faster code.
const PATIENT_JIT: c_int = 0x1;
/// `NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS`: how many host threads a plan may use.
const MAX_NUM_HOST_THREADS: c_int = 0x2;

/// A plan's properties, as set (an absent one has its default).
pub(super) type Properties = HashMap<c_int, i64>;

/// The default of `property`, or its refusal as unknown.
fn default_of(property: c_int) -> CuResult<i64> {
    match property {
        PATIENT_JIT => Ok(0),
        MAX_NUM_HOST_THREADS => Ok(std::thread::available_parallelism().map_or(1, |n| n.get() as i64)),
        other => Err(Error::said(code::INVALID_VALUE, format!("plan property {other}"))),
    }
}

/// Refuses a value `property` cannot take.
fn check_value(property: c_int, value: i64) -> CuResult<()> {
    let fine = match property {
        PATIENT_JIT => (0..=1).contains(&value),
        _ => value >= 1,
    };
    if fine {
        Ok(())
    } else {
        Err(Error::said(code::INVALID_VALUE, format!("plan property {property} = {value}")))
    }
}

/// Answers the work area of a plan of `many` in `types`' domain: 0, once the arguments are ones
/// a plan takes.
unsafe fn no_work_area(many: CuResult<Many>, types: CuResult<(Domain, Precision)>, work: *mut usize) -> CuResult<()> {
    many?;
    types?;
    if work.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "a null work size"));
    }
    put(work, 0usize)
}

#[no_mangle]
pub unsafe extern "C" fn cufftEstimate1d(nx: c_int, kind: c_int, batch: c_int, work: *mut usize) -> u32 {
    guard("cufftEstimate1d", || no_work_area(basic(&[nx], batch), of_type(kind), work))
}

#[no_mangle]
pub unsafe extern "C" fn cufftEstimate2d(nx: c_int, ny: c_int, kind: c_int, work: *mut usize) -> u32 {
    guard("cufftEstimate2d", || no_work_area(basic(&[nx, ny], 1), of_type(kind), work))
}

#[no_mangle]
pub unsafe extern "C" fn cufftEstimate3d(nx: c_int, ny: c_int, nz: c_int, kind: c_int, work: *mut usize) -> u32 {
    guard("cufftEstimate3d", || no_work_area(basic(&[nx, ny, nz], 1), of_type(kind), work))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftEstimateMany(
    rank: c_int,
    n: *const c_int,
    inembed: *const c_int,
    istride: c_int,
    idist: c_int,
    onembed: *const c_int,
    ostride: c_int,
    odist: c_int,
    kind: c_int,
    batch: c_int,
    work: *mut usize,
) -> u32 {
    let many = many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch);
    guard("cufftEstimateMany", || no_work_area(many, of_type(kind), work))
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetSize1d(h: c_int, nx: c_int, kind: c_int, batch: c_int, work: *mut usize) -> u32 {
    guard("cufftGetSize1d", || {
        plan(h)?;
        no_work_area(basic(&[nx], batch), of_type(kind), work)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetSize2d(h: c_int, nx: c_int, ny: c_int, kind: c_int, work: *mut usize) -> u32 {
    guard("cufftGetSize2d", || {
        plan(h)?;
        no_work_area(basic(&[nx, ny], 1), of_type(kind), work)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetSize3d(
    h: c_int,
    nx: c_int,
    ny: c_int,
    nz: c_int,
    kind: c_int,
    work: *mut usize,
) -> u32 {
    guard("cufftGetSize3d", || {
        plan(h)?;
        no_work_area(basic(&[nx, ny, nz], 1), of_type(kind), work)
    })
}

/// Defines `cufftGetSizeMany` (`int` sizes) or `cufftGetSizeMany64` (`long long`): `$int`.
macro_rules! get_size_many {
    ($name:ident, $int:ty) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuFFT's signature
        pub unsafe extern "C" fn $name(
            h: c_int,
            rank: c_int,
            n: *const $int,
            inembed: *const $int,
            istride: $int,
            idist: $int,
            onembed: *const $int,
            ostride: $int,
            odist: $int,
            kind: c_int,
            batch: $int,
            work: *mut usize,
        ) -> u32 {
            guard(stringify!($name), || {
                plan(h)?;
                let many = many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch);
                no_work_area(many, of_type(kind), work)
            })
        }
    };
}

get_size_many!(cufftGetSizeMany, c_int);
get_size_many!(cufftGetSizeMany64, c_longlong);

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftXtGetSizeMany(
    h: c_int,
    rank: c_int,
    n: *const c_longlong,
    inembed: *const c_longlong,
    istride: c_longlong,
    idist: c_longlong,
    input_type: c_int,
    onembed: *const c_longlong,
    ostride: c_longlong,
    odist: c_longlong,
    output_type: c_int,
    batch: c_longlong,
    work: *mut usize,
    execution_type: c_int,
) -> u32 {
    guard("cufftXtGetSizeMany", || {
        plan(h)?;
        let many = many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch);
        no_work_area(many, of_xt_types([input_type, output_type, execution_type]), work)
    })
}

#[no_mangle]
pub extern "C" fn cufftXtSetWorkArea(h: c_int, _areas: *mut *mut c_void) -> u32 {
    // A plan's scratch is its own: the work areas (one a GPU of a multi-GPU plan) are not needed.
    guard("cufftXtSetWorkArea", || plan(h).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cufftXtSetWorkAreaPolicy(h: c_int, policy: c_int, work: *mut usize) -> u32 {
    // MINIMAL, USER (work the most allowed), PERFORMANCE: the shim's plans need none of the
    // program's work area under any of them.
    guard("cufftXtSetWorkAreaPolicy", || {
        plan(h)?;
        match policy {
            0 | 2 => Ok(()),
            1 if !work.is_null() => Ok(()),
            _ => Err(Error::said(code::INVALID_VALUE, format!("work area policy {policy}"))),
        }
    })
}

#[no_mangle]
pub extern "C" fn cufftSetPlanPropertyInt64(h: c_int, property: c_int, value: c_longlong) -> u32 {
    guard("cufftSetPlanPropertyInt64", || {
        let plan = plan(h)?;
        default_of(property)?;
        check_value(property, value)?;
        plan.properties.lock().unwrap_or_else(|p| p.into_inner()).insert(property, value);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetPlanPropertyInt64(h: c_int, property: c_int, value: *mut c_longlong) -> u32 {
    guard("cufftGetPlanPropertyInt64", || {
        let plan = plan(h)?;
        let set = plan.properties.lock().unwrap_or_else(|p| p.into_inner()).get(&property).copied();
        put(value, set.map_or_else(|| default_of(property), Ok)?)
    })
}

#[no_mangle]
pub extern "C" fn cufftResetPlanProperty(h: c_int, property: c_int) -> u32 {
    guard("cufftResetPlanProperty", || {
        let plan = plan(h)?;
        default_of(property)?;
        plan.properties.lock().unwrap_or_else(|p| p.into_inner()).remove(&property);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_have_defaults_and_take_only_their_values() {
        assert_eq!(default_of(PATIENT_JIT).unwrap(), 0);
        assert!(default_of(MAX_NUM_HOST_THREADS).unwrap() >= 1);
        assert_eq!(default_of(3).unwrap_err().code(), code::INVALID_VALUE);
        assert!(check_value(PATIENT_JIT, 1).is_ok());
        assert!(check_value(PATIENT_JIT, 2).is_err());
        assert!(check_value(MAX_NUM_HOST_THREADS, 4).is_ok());
        assert!(check_value(MAX_NUM_HOST_THREADS, 0).is_err());
    }

    #[test]
    fn a_work_area_is_answered_only_for_arguments_a_plan_takes() {
        let mut work = 7usize;
        unsafe { no_work_area(basic(&[8], 2), of_type(0x29), &mut work) }.unwrap();
        assert_eq!(work, 0);
        let wrong = unsafe { no_work_area(basic(&[0], 1), of_type(0x29), &mut work) };
        assert_eq!(wrong.unwrap_err().code(), code::INVALID_VALUE);
        let unknown = unsafe { no_work_area(basic(&[8], 1), of_type(0x2b), &mut work) };
        assert_eq!(unknown.unwrap_err().code(), code::INVALID_VALUE);
        // A batch beyond 32 bits, which a plan refuses, through the 64-bit arguments.
        let (n, null) = ([8i64], std::ptr::null());
        let wide = unsafe { many::<i64>(1, n.as_ptr(), null, 1, 8, null, 1, 8, 1 << 33) };
        let refused = unsafe { no_work_area(wide, of_type(0x29), &mut work) };
        assert_eq!(refused.unwrap_err().code(), code::INVALID_VALUE);
    }
}
