//! cuFFT for programs linked against it (`libcufft.so.11`/`.12`, links to the shim as
//! `libcublas` is): plans (`cufftPlan1d/2d/3d/Many`, `cufftCreate` with `cufftMakePlan*`,
//! `cufftXtMakePlanMany` as PyTorch makes them), streams, and executions
//! ([`exec`]: `cufftExecC2C` ... `cufftExecZ2D`, `cufftXtExec`) on `f32` and `f64` data, and
//! (`cufftXtMakePlanMany`, `cufftXtExec`) binary16 and bfloat16 data computed in `f32`, of rank 1
//! to 3, batched, in the basic or the advanced data layout, in place or not.
//!
//! NVIDIA's cuFFT runs on the driver only through private tables (as cuBLAS does), so the shim
//! answers cuFFT itself: an execution is one launch of the backend's builtin `dft_f32`,
//! `dft_f64` or (half precision) `dft_ex` per dimension ([`transform`] plans the passes), each output element a direct sum:
//! correct, not cuFFT's speed (O(n) an element, not O(log n)). A plan keeps two scratch
//! buffers of its own on the device, made at its first execution; it needs no work area of
//! the program's (it answers a work size of 0, before a plan is made too: [`sizing`]). Every other function of `cufft.h` and
//! `cufftXt.h` is exported too (`fft_generated.rs`) and answers `CUFFT_NOT_SUPPORTED`.

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ac_frontend::DeviceBuffer;

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::state::{self, put};
use crate::stream::device_of_stream;

mod exec;
mod sizing;
mod transform;

use transform::{Domain, Layout, Precision, Transform};

/// `cufftResult`.
pub mod result {
    pub const SUCCESS: u32 = 0x0;
    pub const INVALID_PLAN: u32 = 0x1;
    pub const ALLOC_FAILED: u32 = 0x2;
    pub const INVALID_TYPE: u32 = 0x3;
    pub const INVALID_VALUE: u32 = 0x4;
    pub const INTERNAL_ERROR: u32 = 0x5;
    pub const EXEC_FAILED: u32 = 0x6;
    pub const INVALID_SIZE: u32 = 0x8;
    pub const NOT_SUPPORTED: u32 = 0x10;
}

/// The answer of a cuFFT function the shim does not implement: `CUFFT_NOT_SUPPORTED`, its name
/// on stderr the first time.
pub fn not_supported(name: &'static str) -> u32 {
    crate::say_unsupported_once(name, "CUFFT_NOT_SUPPORTED");
    result::NOT_SUPPORTED
}

/// The cuFFT version answered (CUDA 13.0's, 12.0.0, as `CUFFT_VERSION` counts).
const VERSION: c_int = 12_000;

/// A `cufftHandle`'s plan: its device, stream, what it transforms once made, and its scratch.
#[derive(Debug)]
struct Plan {
    device: usize,
    /// A `CUstream` (0: the default stream).
    stream: AtomicUsize,
    transform: Mutex<Option<Transform>>,
    /// Two buffers of the transform's complex elements, made at the first execution.
    scratch: Mutex<Option<[DeviceBuffer<u8>; 2]>>,
    /// `cufftSetPlanPropertyInt64`'s values.
    properties: Mutex<sizing::Properties>,
}

/// The live plans, by handle (an `int`, as cuFFT's).
fn plans() -> &'static Mutex<HashMap<c_int, Arc<Plan>>> {
    static PLANS: OnceLock<Mutex<HashMap<c_int, Arc<Plan>>>> = OnceLock::new();
    PLANS.get_or_init(Mutex::default)
}

/// Plan `handle`; a destroyed or forged one is `CUFFT_INVALID_PLAN`.
fn plan(handle: c_int) -> CuResult<Arc<Plan>> {
    let plans = plans().lock().unwrap_or_else(|p| p.into_inner());
    plans
        .get(&handle)
        .cloned()
        .ok_or_else(|| Error::said(code::INVALID_HANDLE, format!("{handle} is not a cuFFT plan")))
}

/// Runs a cuFFT entry point's body as [`crate::guard`] does a driver call's, answering a
/// `cufftResult`.
fn guard(call: &str, body: impl FnOnce() -> CuResult<()>) -> u32 {
    match crate::guard(call, body) {
        code::SUCCESS => result::SUCCESS,
        code::INVALID_VALUE => result::INVALID_VALUE,
        code::INVALID_HANDLE | code::INVALID_CONTEXT | code::NOT_INITIALIZED => result::INVALID_PLAN,
        code::OUT_OF_MEMORY => result::ALLOC_FAILED,
        code::NOT_SUPPORTED => result::NOT_SUPPORTED,
        code::UNKNOWN => result::INTERNAL_ERROR,
        _ => result::EXEC_FAILED,
    }
}

/// A new plan on the current device (device 0 for a program that made no context yet), made
/// by nothing yet.
fn create() -> CuResult<c_int> {
    static NEXT: AtomicI32 = AtomicI32::new(1);
    let device = current_device().unwrap_or(0);
    state::init()?.device(device as c_int)?;
    let plan = Plan {
        device,
        stream: AtomicUsize::new(0),
        transform: Mutex::new(None),
        scratch: Mutex::new(None),
        properties: Mutex::default(),
    };
    let handle = NEXT.fetch_add(1, Ordering::Relaxed);
    plans().lock().unwrap_or_else(|p| p.into_inner()).insert(handle, Arc::new(plan));
    Ok(handle)
}

/// `cufftType`'s transforms: its domain and precision.
fn of_type(kind: c_int) -> CuResult<(Domain, Precision)> {
    Ok(match kind {
        0x29 => (Domain::ComplexToComplex, Precision::Single),
        0x2a => (Domain::RealToComplex, Precision::Single),
        0x2c => (Domain::ComplexToReal, Precision::Single),
        0x69 => (Domain::ComplexToComplex, Precision::Double),
        0x6a => (Domain::RealToComplex, Precision::Double),
        0x6c => (Domain::ComplexToReal, Precision::Double),
        other => return Err(Error::said(code::INVALID_VALUE, format!("cufftType {other:#x}"))),
    })
}

/// `cudaDataType`'s real and complex types of each precision (`CUDA_R_32F`, `CUDA_C_32F`, ...).
const DATA_TYPES: [(c_int, c_int, Precision); 4] =
    [(0, 4, Precision::Single), (1, 5, Precision::Double), (2, 6, Precision::Half), (14, 15, Precision::Bfloat16)];

/// The transform of `cufftXtMakePlanMany`'s types (input, output, execution): complex to
/// complex, real to complex or complex to real, all of one precision, executed in its complex
/// type (as cuFFT takes them).
fn of_xt_types(types: [c_int; 3]) -> CuResult<(Domain, Precision)> {
    for (real, complex, precision) in DATA_TYPES {
        let domains = [
            ([complex; 3], Domain::ComplexToComplex),
            ([real, complex, complex], Domain::RealToComplex),
            ([complex, real, complex], Domain::ComplexToReal),
        ];
        if let Some((_, domain)) = domains.into_iter().find(|(named, _)| *named == types) {
            return Ok((domain, precision));
        }
    }
    let why = format!(
        "data types {types:?} (input, output, execution): one precision (f32, f64, f16 or bf16) throughout, \
         executed in its complex type"
    );
    Err(Error::said(code::NOT_SUPPORTED, why))
}

/// `count` values at `p`, each widened to `u64` (a negative or zero one refused as `what`).
unsafe fn sizes<T: Copy + Into<i64>>(p: *const T, count: usize, what: &str) -> CuResult<Option<Vec<u64>>> {
    if p.is_null() {
        return Ok(None);
    }
    let values = std::slice::from_raw_parts(p, count).iter().map(|&v| v.into());
    let sizes: Vec<u64> = values.map(|v: i64| u64::try_from(v).unwrap_or(0)).collect();
    if sizes.contains(&0) {
        return Err(Error::said(code::INVALID_VALUE, format!("{what} {sizes:?}: every size must be at least 1")));
    }
    Ok(Some(sizes))
}

/// The arguments of a `…PlanMany`, widened.
struct Many {
    n: Vec<u64>,
    layouts: [Layout; 2],
    batch: u64,
}

/// Reads `cufftPlanMany`'s layout arguments, in `int` or `long long` (sizes and a batch beyond
/// 32 bits refused).
#[allow(clippy::too_many_arguments)] // cuFFT's arguments
unsafe fn many<T: Copy + Into<i64>>(
    rank: c_int,
    n: *const T,
    inembed: *const T,
    istride: T,
    idist: T,
    onembed: *const T,
    ostride: T,
    odist: T,
    batch: T,
) -> CuResult<Many> {
    if !(1..=3).contains(&rank) || n.is_null() {
        return Err(Error::said(code::INVALID_VALUE, format!("rank {rank}: 1 to 3 are served")));
    }
    let rank = rank as usize;
    let n = sizes(n, rank, "n")?.expect("not null");
    let layout = |embed: Option<Vec<u64>>, stride: T, dist: T| -> CuResult<Layout> {
        let (stride, dist): (i64, i64) = (stride.into(), dist.into());
        match embed {
            None => Ok(Layout::basic()),
            Some(_) if stride < 1 || dist < 0 => {
                Err(Error::said(code::INVALID_VALUE, format!("stride {stride} and distance {dist}")))
            }
            Some(embed) => Ok(Layout { embed: Some(embed), stride: stride as u64, dist: dist as u64 }),
        }
    };
    let input = layout(sizes(inembed, rank, "inembed")?, istride, idist)?;
    let output = layout(sizes(onembed, rank, "onembed")?, ostride, odist)?;
    let batch: i64 = batch.into();
    if batch < 1 {
        return Err(Error::said(code::INVALID_VALUE, format!("batch {batch}")));
    }
    if n.iter().any(|&n| n > u32::MAX as u64) || batch > i64::from(u32::MAX) {
        return Err(Error::said(code::INVALID_VALUE, format!("sizes {n:?}, batch {batch}: beyond 32 bits")));
    }
    Ok(Many { n, layouts: [input, output], batch: batch as u64 })
}

/// Makes plan `handle` compute `many` in `domain`, answering a work size of 0.
unsafe fn make(handle: c_int, many: Many, (domain, precision): (Domain, Precision), work: *mut usize) -> CuResult<()> {
    let plan = plan(handle)?;
    let [input, output] = many.layouts;
    let transform = Transform { precision, domain, n: many.n, batch: many.batch, input, output };
    *plan.transform.lock().unwrap_or_else(|p| p.into_inner()) = Some(transform);
    // A plan made again gets scratch of its new size at its next execution.
    *plan.scratch.lock().unwrap_or_else(|p| p.into_inner()) = None;
    if !work.is_null() {
        put(work, 0usize)?;
    }
    Ok(())
}

/// A `cufftPlan*`: a new plan, made.
unsafe fn plan_new(out: *mut c_int, make_it: impl FnOnce(c_int) -> CuResult<()>) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let handle = create()?;
    if let Err(e) = make_it(handle) {
        plans().lock().unwrap_or_else(|p| p.into_inner()).remove(&handle);
        return Err(e);
    }
    put(out, handle)
}

/// The arguments of a plan of `dims` in the basic layout.
fn basic(dims: &[c_int], batch: c_int) -> CuResult<Many> {
    let dims: Vec<i32> = dims.to_vec();
    // Sound: `many` reads `dims.len()` values from `dims`, and no embed.
    unsafe { many::<i32>(dims.len() as c_int, dims.as_ptr(), std::ptr::null(), 1, 0, std::ptr::null(), 1, 0, batch) }
}

#[no_mangle]
pub unsafe extern "C" fn cufftCreate(out: *mut c_int) -> u32 {
    guard("cufftCreate", || {
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        put(out, create()?)
    })
}

#[no_mangle]
pub extern "C" fn cufftDestroy(handle: c_int) -> u32 {
    guard("cufftDestroy", || {
        let removed = plans().lock().unwrap_or_else(|p| p.into_inner()).remove(&handle);
        // Its scratch is freed by the backend after the work queued before it.
        removed.map(drop).ok_or(Error::Code(code::INVALID_HANDLE))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftPlan1d(out: *mut c_int, nx: c_int, kind: c_int, batch: c_int) -> u32 {
    guard("cufftPlan1d", || plan_new(out, |h| make(h, basic(&[nx], batch)?, of_type(kind)?, std::ptr::null_mut())))
}

#[no_mangle]
pub unsafe extern "C" fn cufftPlan2d(out: *mut c_int, nx: c_int, ny: c_int, kind: c_int) -> u32 {
    guard("cufftPlan2d", || plan_new(out, |h| make(h, basic(&[nx, ny], 1)?, of_type(kind)?, std::ptr::null_mut())))
}

#[no_mangle]
pub unsafe extern "C" fn cufftPlan3d(out: *mut c_int, nx: c_int, ny: c_int, nz: c_int, kind: c_int) -> u32 {
    guard("cufftPlan3d", || plan_new(out, |h| make(h, basic(&[nx, ny, nz], 1)?, of_type(kind)?, std::ptr::null_mut())))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftPlanMany(
    out: *mut c_int,
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
) -> u32 {
    guard("cufftPlanMany", || {
        plan_new(out, |h| {
            let many = many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch)?;
            make(h, many, of_type(kind)?, std::ptr::null_mut())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftMakePlan1d(h: c_int, nx: c_int, kind: c_int, batch: c_int, work: *mut usize) -> u32 {
    guard("cufftMakePlan1d", || make(h, basic(&[nx], batch)?, of_type(kind)?, work))
}

#[no_mangle]
pub unsafe extern "C" fn cufftMakePlan2d(h: c_int, nx: c_int, ny: c_int, kind: c_int, work: *mut usize) -> u32 {
    guard("cufftMakePlan2d", || make(h, basic(&[nx, ny], 1)?, of_type(kind)?, work))
}

#[no_mangle]
pub unsafe extern "C" fn cufftMakePlan3d(
    h: c_int,
    nx: c_int,
    ny: c_int,
    nz: c_int,
    kind: c_int,
    work: *mut usize,
) -> u32 {
    guard("cufftMakePlan3d", || make(h, basic(&[nx, ny, nz], 1)?, of_type(kind)?, work))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftMakePlanMany(
    h: c_int,
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
    guard("cufftMakePlanMany", || {
        make(h, many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch)?, of_type(kind)?, work)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftMakePlanMany64(
    h: c_int,
    rank: c_int,
    n: *const c_longlong,
    inembed: *const c_longlong,
    istride: c_longlong,
    idist: c_longlong,
    onembed: *const c_longlong,
    ostride: c_longlong,
    odist: c_longlong,
    kind: c_int,
    batch: c_longlong,
    work: *mut usize,
) -> u32 {
    guard("cufftMakePlanMany64", || {
        make(h, many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch)?, of_type(kind)?, work)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuFFT's signature
pub unsafe extern "C" fn cufftXtMakePlanMany(
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
    guard("cufftXtMakePlanMany", || {
        let types = of_xt_types([input_type, output_type, execution_type])?;
        make(h, many(rank, n, inembed, istride, idist, onembed, ostride, odist, batch)?, types, work)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetSize(h: c_int, work: *mut usize) -> u32 {
    guard("cufftGetSize", || {
        plan(h)?;
        put(work, 0usize)
    })
}

#[no_mangle]
pub extern "C" fn cufftSetWorkArea(h: c_int, _area: *mut c_void) -> u32 {
    // The plan's scratch is its own: the program's work area is not needed.
    guard("cufftSetWorkArea", || plan(h).map(drop))
}

#[no_mangle]
pub extern "C" fn cufftSetAutoAllocation(h: c_int, _automatic: c_int) -> u32 {
    guard("cufftSetAutoAllocation", || plan(h).map(drop))
}

#[no_mangle]
pub extern "C" fn cufftSetStream(h: c_int, stream: usize) -> u32 {
    guard("cufftSetStream", || {
        let plan = plan(h)?;
        if stream != 0 && device_of_stream(stream)? != plan.device {
            return Err(Error::said(code::INVALID_VALUE, "a stream of another device than the plan's"));
        }
        plan.stream.store(stream, Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetVersion(version: *mut c_int) -> u32 {
    guard("cufftGetVersion", || put(version, VERSION))
}

#[no_mangle]
pub unsafe extern "C" fn cufftGetProperty(property: c_int, value: *mut c_int) -> u32 {
    // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL.
    guard("cufftGetProperty", || match property {
        0 => put(value, VERSION / 1000),
        1 => put(value, VERSION / 100 % 10),
        2 => put(value, VERSION % 100),
        _ => Err(Error::Code(code::INVALID_VALUE)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_map_to_transforms_of_one_precision() {
        assert_eq!(of_type(0x2a).unwrap(), (Domain::RealToComplex, Precision::Single));
        assert_eq!(of_type(0x6c).unwrap(), (Domain::ComplexToReal, Precision::Double));
        assert_eq!(of_type(0x2b).unwrap_err().code(), code::INVALID_VALUE);
        assert_eq!(of_xt_types([0, 4, 4]).unwrap(), (Domain::RealToComplex, Precision::Single));
        assert_eq!(of_xt_types([5, 1, 5]).unwrap(), (Domain::ComplexToReal, Precision::Double));
        assert_eq!(of_xt_types([6, 6, 6]).unwrap(), (Domain::ComplexToComplex, Precision::Half));
        assert_eq!(of_xt_types([2, 6, 6]).unwrap(), (Domain::RealToComplex, Precision::Half));
        assert_eq!(of_xt_types([15, 14, 15]).unwrap(), (Domain::ComplexToReal, Precision::Bfloat16));
        // Mixed precisions, an execution in another type, a real-to-real transform.
        for refused in [[6, 4, 4], [2, 6, 4], [2, 6, 2], [0, 0, 4], [14, 6, 6]] {
            assert_eq!(of_xt_types(refused).unwrap_err().code(), code::NOT_SUPPORTED, "{refused:?}");
        }
    }

    #[test]
    fn a_layout_is_read_only_where_it_is_given() {
        let n = [4i32, 6];
        let embed = [4i32, 8];
        let m = unsafe { many::<i32>(2, n.as_ptr(), embed.as_ptr(), 2, 64, std::ptr::null(), 9, 9, 3) }.unwrap();
        assert_eq!((m.n, m.batch), (vec![4, 6], 3));
        assert_eq!(m.layouts[0], Layout { embed: Some(vec![4, 8]), stride: 2, dist: 64 });
        assert_eq!(m.layouts[1], Layout::basic(), "no onembed: the basic layout, its stride ignored");
        let zero = [4i32, 0];
        assert!(unsafe { many::<i32>(2, zero.as_ptr(), std::ptr::null(), 1, 0, std::ptr::null(), 1, 0, 1) }.is_err());
        assert!(unsafe { many::<i32>(4, n.as_ptr(), std::ptr::null(), 1, 0, std::ptr::null(), 1, 0, 1) }.is_err());
    }
}
