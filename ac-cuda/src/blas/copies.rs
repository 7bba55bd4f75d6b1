//! cuBLAS's copies between host and device: `cublasSetVector`, `cublasGetVector`,
//! `cublasSetMatrix`, `cublasGetMatrix` (synchronous, as cuBLAS's are), over the shim's own
//! copies; and their `Async` forms, which copy as the others do: a synchronous copy starts
//! after the work queued before it on every stream (ARCHITECTURE.md, "Order"), their stream's
//! included, and is done when it returns (cuBLAS's may still be running then; a program
//! assumes neither). On a capturing stream they are refused: a copy made at once is not
//! recorded. A vector strided on the device side is not served: cuBLAS writes only every
//! `inc`-th element, which a copy of the whole span would not.

use std::ffi::{c_int, c_void};

use super::guard;
use crate::error::{code, CuResult, Error};
use crate::graph;
use crate::managed::calls::at_device_memory;
use crate::memory::{device_to_host, host_to_device};
use crate::stream::device_of_stream;

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    ToDevice,
    ToHost,
}

/// Copies `cols` columns of `rows` elements of `size` bytes between `host` (leading dimension
/// `ld_host`) and device address `device` (leading dimension `ld_device`): one copy when both
/// are packed, else one a column.
unsafe fn copy_matrix(
    way: Way,
    [rows, cols, size]: [c_int; 3],
    host: *mut c_void,
    ld_host: c_int,
    device: u64,
    ld_device: c_int,
) -> CuResult<()> {
    if rows < 0 || cols < 0 || size <= 0 || ld_host < rows.max(1) || ld_device < rows.max(1) {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("rows {rows}, cols {cols}, element size {size}, leading dimensions {ld_host} and {ld_device}"),
        ));
    }
    if host.is_null() || device == 0 {
        return Err(Error::said(code::INVALID_VALUE, "a null matrix"));
    }
    let [rows, cols, size, ld_host, ld_device] = [rows, cols, size, ld_host, ld_device].map(|v| v as u64);
    let too_large = || Error::said(code::INVALID_VALUE, "a matrix beyond memory");
    let bytes = |elements: u64| elements.checked_mul(size).ok_or_else(too_large);
    let (runs, len) =
        if ld_host == rows && ld_device == rows { (1, bytes(rows * cols)?) } else { (cols, bytes(rows)?) };
    // Host memory that is managed memory is the device's until its work is done.
    crate::managed::settle_host(host as u64)?;
    at_device_memory(device, || {
        for j in 0..runs {
            let (h, d) = (bytes(j * ld_host)?, bytes(j * ld_device)?);
            let (h, d) = ((host as *mut u8).add(h as usize), device.checked_add(d).ok_or_else(too_large)?);
            let len = len as usize;
            match way {
                Way::ToDevice => host_to_device(d, h as *const c_void, len)?,
                Way::ToHost => device_to_host(h as *mut c_void, d, len)?,
            }
        }
        Ok(())
    })
}

/// Copies a vector of `n` elements: a strided host side is gathered or scattered here, a
/// strided device side is refused.
unsafe fn copy_vector(
    way: Way,
    n: c_int,
    size: c_int,
    host: *mut c_void,
    inc_host: c_int,
    device: u64,
    inc_device: c_int,
) -> CuResult<()> {
    if n < 0 || size <= 0 || inc_host <= 0 || inc_device <= 0 {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("n {n}, element size {size}, increments {inc_host} and {inc_device}"),
        ));
    }
    if inc_device != 1 {
        return Err(Error::said(code::NOT_SUPPORTED, "a vector strided in device memory (incy or incx above 1 there)"));
    }
    if inc_host == 1 {
        return copy_matrix(way, [n, 1, size], host, n.max(1), device, n.max(1));
    }
    let (n, size, inc) = (n as usize, size as usize, inc_host as usize);
    // Every element's offset below fits: the host span itself does.
    n.checked_mul(inc)
        .and_then(|e| e.checked_mul(size))
        .ok_or_else(|| Error::said(code::INVALID_VALUE, "a vector beyond memory"))?;
    let element = |i: usize| (host as *mut u8).add(i * inc * size);
    crate::managed::settle_host(host as u64)?;
    let mut packed = vec![0u8; n * size];
    match way {
        Way::ToDevice => {
            for (i, chunk) in packed.chunks_exact_mut(size).enumerate() {
                chunk.copy_from_slice(std::slice::from_raw_parts(element(i), size));
            }
            at_device_memory(device, || host_to_device(device, packed.as_ptr().cast(), packed.len()))
        }
        Way::ToHost => {
            at_device_memory(device, || device_to_host(packed.as_mut_ptr().cast(), device, packed.len()))?;
            for (i, chunk) in packed.chunks_exact(size).enumerate() {
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), element(i), size);
            }
            Ok(())
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetVector(
    n: c_int,
    size: c_int,
    x: *const c_void,
    incx: c_int,
    y: u64,
    incy: c_int,
) -> u32 {
    guard("cublasSetVector", || copy_vector(Way::ToDevice, n, size, x.cast_mut(), incx, y, incy))
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetVector(
    n: c_int,
    size: c_int,
    x: u64,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
) -> u32 {
    guard("cublasGetVector", || copy_vector(Way::ToHost, n, size, y, incy, x, incx))
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetMatrix(
    rows: c_int,
    cols: c_int,
    size: c_int,
    a: *const c_void,
    lda: c_int,
    b: u64,
    ldb: c_int,
) -> u32 {
    guard("cublasSetMatrix", || copy_matrix(Way::ToDevice, [rows, cols, size], a.cast_mut(), lda, b, ldb))
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetMatrix(
    rows: c_int,
    cols: c_int,
    size: c_int,
    a: u64,
    lda: c_int,
    b: *mut c_void,
    ldb: c_int,
) -> u32 {
    guard("cublasGetMatrix", || copy_matrix(Way::ToHost, [rows, cols, size], b, ldb, a, lda))
}

/// Checks an `Async` copy's stream: a known one, not capturing (the copy is made at once,
/// which a graph would not record: refused, the capture invalidated, as other unrecorded work
/// is).
fn on_stream(stream: usize, what: &str) -> CuResult<()> {
    device_of_stream(stream)?;
    graph::refuse_if_capturing(stream, what)
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetVectorAsync(
    n: c_int,
    size: c_int,
    x: *const c_void,
    incx: c_int,
    y: u64,
    incy: c_int,
    stream: usize,
) -> u32 {
    guard("cublasSetVectorAsync", || {
        on_stream(stream, "cublasSetVectorAsync")?;
        copy_vector(Way::ToDevice, n, size, x.cast_mut(), incx, y, incy)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetVectorAsync(
    n: c_int,
    size: c_int,
    x: u64,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
    stream: usize,
) -> u32 {
    guard("cublasGetVectorAsync", || {
        on_stream(stream, "cublasGetVectorAsync")?;
        copy_vector(Way::ToHost, n, size, y, incy, x, incx)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasSetMatrixAsync(
    rows: c_int,
    cols: c_int,
    size: c_int,
    a: *const c_void,
    lda: c_int,
    b: u64,
    ldb: c_int,
    stream: usize,
) -> u32 {
    guard("cublasSetMatrixAsync", || {
        on_stream(stream, "cublasSetMatrixAsync")?;
        copy_matrix(Way::ToDevice, [rows, cols, size], a.cast_mut(), lda, b, ldb)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasGetMatrixAsync(
    rows: c_int,
    cols: c_int,
    size: c_int,
    a: u64,
    lda: c_int,
    b: *mut c_void,
    ldb: c_int,
    stream: usize,
) -> u32 {
    guard("cublasGetMatrixAsync", || {
        on_stream(stream, "cublasGetMatrixAsync")?;
        copy_matrix(Way::ToHost, [rows, cols, size], b, ldb, a, lda)
    })
}
