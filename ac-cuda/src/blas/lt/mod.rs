//! cuBLASLt for programs linked against it (`libcublasLt.so.12`/`.13`, links to the shim as
//! `libcublas` is): handles, the three descriptors and their attributes, and
//! `cublasLtMatmul` with its heuristic ([`matmul`]), served on the builtin gemm kernels, and the
//! lower-level algorithm API ([`algo`]) for programs that configure one themselves.
//!
//! A descriptor lives in memory the caller gives, as NVIDIA's "semi-opaque" ones do: a
//! `cublasLtMatmulDescInit` on the program's stack and a `cublasLtMatmulDescCreate` (memory
//! allocated here) hold the same record, marked so that an uninitialized one is refused. A
//! cuBLASLt handle is a cuBLAS handle (NVIDIA allows casting one to the other).

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::{Mutex, OnceLock};

use super::{cublasCreate_v2, cublasDestroy_v2, guard, status_text, Target, VERSION};
use crate::error::{code, CuResult, Error};
use crate::state::put;
use crate::stream::device_of_stream;

mod algo;
mod epilogue;
mod matmul;
mod transform;

/// Bytes NVIDIA's header gives each descriptor (`cublasLtMatmulDescOpaque_t` and the others).
const MATMUL_DESC_BYTES: usize = 32 * 8;
const LAYOUT_BYTES: usize = 8 * 8;
const PREFERENCE_BYTES: usize = 8 * 8;

/// Marks of an initialized record, one per kind.
const MATMUL_DESC_MARK: u32 = u32::from_le_bytes(*b"acLm");
const LAYOUT_MARK: u32 = u32::from_le_bytes(*b"acLl");
const PREFERENCE_MARK: u32 = u32::from_le_bytes(*b"acLp");

/// A `cublasLtMatmulDesc_t`'s record.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct MatmulDesc {
    mark: u32,
    compute_type: i32,
    scale_type: i32,
    pointer_mode: i32,
    trans: [i32; 2],
    epilogue: u32,
    /// `cudaDataType` of the bias, -1 for D's.
    bias_type: i32,
    bias: u64,
    bias_batch_stride: i64,
    /// A `cublasLtEmulationDesc_t`: kept (the builtin gemm never emulates).
    emulation: u64,
    /// The epilogue's auxiliary matrix: its address, leading dimension and batch stride (in
    /// bits, for ReLU's mask), and its `cudaDataType` (-1 for D's).
    aux: u64,
    aux_ld: i64,
    aux_batch_stride: i64,
    aux_type: i32,
}

/// A `cublasLtMatrixLayout_t`'s record.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    mark: u32,
    data_type: u32,
    order: i32,
    batch_count: i32,
    rows: u64,
    cols: u64,
    ld: i64,
    batch_offset: i64,
    plane_offset: i64,
}

/// A `cublasLtMatmulPreference_t`'s record: kept and answered, not used (one algorithm, no
/// workspace).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Preference {
    mark: u32,
    search_mode: u32,
    reduction_mask: u32,
    min_alignment: [u32; 4],
    max_waves: f32,
    max_workspace: u64,
    impl_mask: u64,
}

const _: () = assert!(size_of::<MatmulDesc>() <= MATMUL_DESC_BYTES);
const _: () = assert!(size_of::<Layout>() <= LAYOUT_BYTES);
const _: () = assert!(size_of::<Preference>() <= PREFERENCE_BYTES);

/// A record kept in the caller's memory.
trait Record: Copy + Default {
    /// Its mark.
    const MARK: u32;
    /// Bytes NVIDIA's header gives it.
    const BYTES: usize;
    /// What it is called in messages.
    const NAME: &'static str;
    /// The bytes of attribute `attr`, or why it is refused.
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]>;
}

/// The bytes of `value`, for [`Record::field`].
fn bytes_of<T: Copy>(value: &mut T) -> &mut [u8] {
    // Sound: the fields are plain integers and floats, every bit pattern valid.
    unsafe { std::slice::from_raw_parts_mut((value as *mut T).cast::<u8>(), size_of::<T>()) }
}

/// Refused as not served (what the builtin kernels cannot run), with why: a matmul's plan and
/// its epilogue's.
fn not_served<T>(why: String) -> CuResult<T> {
    Err(Error::said(code::NOT_SUPPORTED, why))
}

/// An attribute this shim keeps no value of.
fn unserved<'a>(what: &str, attr: c_int) -> CuResult<&'a mut [u8]> {
    Err(Error::said(code::NOT_SUPPORTED, format!("{what} attribute {attr} is not served")))
}

impl Record for MatmulDesc {
    const MARK: u32 = MATMUL_DESC_MARK;
    const BYTES: usize = MATMUL_DESC_BYTES;
    const NAME: &'static str = "cublasLtMatmulDesc";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => bytes_of(&mut self.compute_type),
            1 => bytes_of(&mut self.scale_type),
            2 => bytes_of(&mut self.pointer_mode),
            3 => bytes_of(&mut self.trans[0]),
            4 => bytes_of(&mut self.trans[1]),
            7 => bytes_of(&mut self.epilogue),
            8 => bytes_of(&mut self.bias),
            10 => bytes_of(&mut self.bias_batch_stride),
            11 => bytes_of(&mut self.aux),
            12 => bytes_of(&mut self.aux_ld),
            13 => bytes_of(&mut self.aux_batch_stride),
            22 => bytes_of(&mut self.aux_type),
            26 => bytes_of(&mut self.bias_type),
            38 => bytes_of(&mut self.emulation),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

impl Record for Layout {
    const MARK: u32 = LAYOUT_MARK;
    const BYTES: usize = LAYOUT_BYTES;
    const NAME: &'static str = "cublasLtMatrixLayout";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => bytes_of(&mut self.data_type),
            1 => bytes_of(&mut self.order),
            2 => bytes_of(&mut self.rows),
            3 => bytes_of(&mut self.cols),
            4 => bytes_of(&mut self.ld),
            5 => bytes_of(&mut self.batch_count),
            6 => bytes_of(&mut self.batch_offset),
            7 => bytes_of(&mut self.plane_offset),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

impl Record for Preference {
    const MARK: u32 = PREFERENCE_MARK;
    const BYTES: usize = PREFERENCE_BYTES;
    const NAME: &'static str = "cublasLtMatmulPreference";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => bytes_of(&mut self.search_mode),
            1 => bytes_of(&mut self.max_workspace),
            3 => bytes_of(&mut self.reduction_mask),
            5..=8 => bytes_of(&mut self.min_alignment[attr as usize - 5]),
            9 => bytes_of(&mut self.max_waves),
            12 => bytes_of(&mut self.impl_mask),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

/// Reads the record at `at`; an uninitialized one is refused.
unsafe fn read<R: Record>(at: *const c_void) -> CuResult<R> {
    if at.is_null() {
        return Err(Error::said(code::INVALID_VALUE, format!("a null {}", R::NAME)));
    }
    let record = std::ptr::read_unaligned(at.cast::<R>());
    let mark = std::ptr::read_unaligned(at.cast::<u32>());
    if mark != R::MARK {
        return Err(Error::said(code::NOT_INITIALIZED, format!("not an initialized {}", R::NAME)));
    }
    Ok(record)
}

/// Writes `record` at `at`, marked.
unsafe fn write<R: Record>(at: *mut c_void, record: R) {
    std::ptr::write_unaligned(at.cast::<R>(), record);
    std::ptr::write_unaligned(at.cast::<u32>(), R::MARK);
}

/// Records made by a `Create` (their memory is this library's to free).
fn created() -> &'static Mutex<HashSet<usize>> {
    static CREATED: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    CREATED.get_or_init(Mutex::default)
}

/// `…Init_internal`: `record` into the caller's `size` bytes at `at`.
unsafe fn init<R: Record>(at: *mut c_void, size: usize, record: R) -> CuResult<()> {
    if at.is_null() || size < size_of::<R>() {
        return Err(Error::said(code::INVALID_VALUE, format!("{} bytes for a {}", size, R::NAME)));
    }
    write(at, record);
    Ok(())
}

/// `…Create`: `record` in memory of NVIDIA's size allocated here, its address into `out`.
unsafe fn create<R: Record>(out: *mut *mut c_void, record: R) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let at = Box::into_raw(vec![0u64; R::BYTES / 8].into_boxed_slice()).cast::<c_void>();
    write(at, record);
    created().lock().unwrap_or_else(|p| p.into_inner()).insert(at as usize);
    put(out, at)
}

/// `…Destroy`: frees what `…Create` made; anything else is refused.
unsafe fn destroy<R: Record>(at: *mut c_void) -> CuResult<()> {
    if at.is_null() {
        return Ok(());
    }
    if !created().lock().unwrap_or_else(|p| p.into_inner()).remove(&(at as usize)) {
        return Err(Error::said(code::INVALID_VALUE, format!("not a {} this library created", R::NAME)));
    }
    std::ptr::write_unaligned(at.cast::<u32>(), 0);
    drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(at.cast::<u64>(), R::BYTES / 8)));
    Ok(())
}

/// `…SetAttribute`: `size` bytes at `buf` into attribute `attr` of the record at `at`.
unsafe fn set_attribute<R: Record>(at: *mut c_void, attr: c_int, buf: *const c_void, size: usize) -> CuResult<()> {
    let mut record: R = read(at)?;
    let field = record.field(attr)?;
    if buf.is_null() || size != field.len() {
        let why = format!("{} attribute {attr} takes {} bytes, given {size}", R::NAME, field.len());
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    field.copy_from_slice(std::slice::from_raw_parts(buf.cast::<u8>(), size));
    write(at, record);
    Ok(())
}

/// `…GetAttribute`: attribute `attr` into `size` bytes at `buf`; its size into `written` (only
/// the size when `size` is 0).
unsafe fn get_attribute<R: Record>(
    at: *const c_void,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> CuResult<()> {
    let mut record: R = read(at)?;
    let field = record.field(attr)?;
    if size == 0 && !written.is_null() {
        return put(written, field.len());
    }
    if buf.is_null() || size < field.len() {
        return Err(Error::said(code::INVALID_VALUE, format!("{size} bytes for {} attribute {attr}", R::NAME)));
    }
    std::ptr::copy_nonoverlapping(field.as_ptr(), buf.cast::<u8>(), field.len());
    if !written.is_null() {
        put(written, field.len())?;
    }
    Ok(())
}

fn matmul_desc(compute_type: c_int, scale_type: c_int) -> MatmulDesc {
    MatmulDesc { compute_type, scale_type, epilogue: 1, bias_type: -1, aux_type: -1, ..MatmulDesc::default() }
}

fn layout(data_type: u32, rows: u64, cols: u64, ld: i64) -> Layout {
    Layout { data_type, rows, cols, ld, batch_count: 1, ..Layout::default() }
}

fn preference() -> Preference {
    Preference { reduction_mask: u32::MAX, min_alignment: [256; 4], impl_mask: u64::MAX, ..Preference::default() }
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtCreate(out: *mut usize) -> u32 {
    cublasCreate_v2(out)
}

#[no_mangle]
pub extern "C" fn cublasLtDestroy(h: usize) -> u32 {
    cublasDestroy_v2(h)
}

#[no_mangle]
pub extern "C" fn cublasLtGetVersion() -> usize {
    VERSION as usize
}

#[no_mangle]
pub extern "C" fn cublasLtGetCudartVersion() -> usize {
    super::cublasGetCudartVersion()
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtGetProperty(property: c_int, value: *mut c_int) -> u32 {
    super::cublasGetProperty(property, value)
}

#[no_mangle]
pub extern "C" fn cublasLtGetStatusName(s: u32) -> *const std::ffi::c_char {
    status_text(s).0.as_ptr()
}

#[no_mangle]
pub extern "C" fn cublasLtGetStatusString(s: u32) -> *const std::ffi::c_char {
    status_text(s).1.as_ptr()
}

#[no_mangle]
pub extern "C" fn cublasLtDisableCpuInstructionsSetMask(_mask: u32) -> u32 {
    // No CPU kernels here: the previous mask is always none.
    0
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulDescCreate(out: *mut *mut c_void, compute: c_int, scale: c_int) -> u32 {
    guard("cublasLtMatmulDescCreate", || create(out, matmul_desc(compute, scale)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulDescInit_internal(
    at: *mut c_void,
    size: usize,
    compute: c_int,
    scale: c_int,
) -> u32 {
    guard("cublasLtMatmulDescInit", || init(at, size, matmul_desc(compute, scale)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatrixLayoutCreate(
    out: *mut *mut c_void,
    data_type: u32,
    rows: u64,
    cols: u64,
    ld: i64,
) -> u32 {
    guard("cublasLtMatrixLayoutCreate", || create(out, layout(data_type, rows, cols, ld)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatrixLayoutInit_internal(
    at: *mut c_void,
    size: usize,
    data_type: u32,
    rows: u64,
    cols: u64,
    ld: i64,
) -> u32 {
    guard("cublasLtMatrixLayoutInit", || init(at, size, layout(data_type, rows, cols, ld)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulPreferenceCreate(out: *mut *mut c_void) -> u32 {
    guard("cublasLtMatmulPreferenceCreate", || create(out, preference()))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulPreferenceInit_internal(at: *mut c_void, size: usize) -> u32 {
    guard("cublasLtMatmulPreferenceInit", || init(at, size, preference()))
}

/// Defines a record's `Destroy`, `SetAttribute` and `GetAttribute` entry points.
macro_rules! record_entry_points {
    ($record:ty, $destroy:ident, $set:ident, $get:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $destroy(at: *mut c_void) -> u32 {
            guard(stringify!($destroy), || $crate::blas::lt::destroy::<$record>(at))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $set(at: *mut c_void, attr: c_int, buf: *const c_void, size: usize) -> u32 {
            guard(stringify!($set), || $crate::blas::lt::set_attribute::<$record>(at, attr, buf, size))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $get(
            at: *const c_void,
            attr: c_int,
            buf: *mut c_void,
            size: usize,
            written: *mut usize,
        ) -> u32 {
            guard(stringify!($get), || $crate::blas::lt::get_attribute::<$record>(at, attr, buf, size, written))
        }
    };
}

pub(crate) use record_entry_points;

/// Where a call runs: a handle's `device`, `stream` (one of that device's), `pointer_mode`.
fn on_stream(device: usize, stream: usize, pointer_mode: c_int) -> CuResult<Target> {
    if stream != 0 && device_of_stream(stream)? != device {
        return Err(Error::said(code::INVALID_VALUE, "a stream of another device than the handle's"));
    }
    Ok(Target { device, stream, pointer_mode })
}

record_entry_points!(
    MatmulDesc,
    cublasLtMatmulDescDestroy,
    cublasLtMatmulDescSetAttribute,
    cublasLtMatmulDescGetAttribute
);
record_entry_points!(
    Layout,
    cublasLtMatrixLayoutDestroy,
    cublasLtMatrixLayoutSetAttribute,
    cublasLtMatrixLayoutGetAttribute
);
record_entry_points!(
    Preference,
    cublasLtMatmulPreferenceDestroy,
    cublasLtMatmulPreferenceSetAttribute,
    cublasLtMatmulPreferenceGetAttribute
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_set_reads_back_and_an_uninitialized_one_is_refused() {
        let mut memory = [0u64; LAYOUT_BYTES / 8];
        let at = memory.as_mut_ptr().cast::<c_void>();
        unsafe {
            assert_eq!(read::<Layout>(at).unwrap_err().code(), code::NOT_INITIALIZED);
            init(at, LAYOUT_BYTES, layout(0, 4, 3, 4)).unwrap();
            let batches: i32 = 5;
            set_attribute::<Layout>(at, 5, (&batches as *const i32).cast(), 4).unwrap();
            // A wrong size is refused and changes nothing.
            let e = set_attribute::<Layout>(at, 5, (&batches as *const i32).cast(), 8).unwrap_err();
            assert_eq!(e.code(), code::INVALID_VALUE);
            let (mut out, mut written) = (0i32, 0usize);
            get_attribute::<Layout>(at, 5, (&mut out as *mut i32).cast(), 4, &mut written).unwrap();
            assert_eq!((out, written), (5, 4));
            let read_back: Layout = read(at).unwrap();
            assert_eq!((read_back.rows, read_back.cols, read_back.ld, read_back.batch_count), (4, 3, 4, 5));
            // Too small a caller's buffer for the record.
            assert_eq!(init(at, 16, layout(0, 1, 1, 1)).unwrap_err().code(), code::INVALID_VALUE);
        }
    }

    #[test]
    fn only_created_records_are_destroyed() {
        let mut made: *mut c_void = std::ptr::null_mut();
        let mut stack = [0u64; PREFERENCE_BYTES / 8];
        unsafe {
            create(&mut made, preference()).unwrap();
            init(stack.as_mut_ptr().cast(), PREFERENCE_BYTES, preference()).unwrap();
            assert_eq!(destroy::<Preference>(stack.as_mut_ptr().cast()).unwrap_err().code(), code::INVALID_VALUE);
            destroy::<Preference>(made).unwrap();
            assert!(destroy::<Preference>(made).is_err(), "twice");
        }
    }
}
