//! Stream capture's entry points: `cuStreamBeginCapture`, `cuStreamEndCapture`, the capture
//! queries and dependency updates, and the thread's capture mode. The recording itself is
//! [`super::or_record`], called by each call that queues work.
//!
//! The capture modes (global, thread-local, relaxed) are kept, and exchanged per thread, but
//! not enforced: a call CUDA refuses in a global capture because it might synchronize
//! (`cudaMalloc`, a synchronous copy on the legacy stream) is served here as outside one, since
//! none of them waits for a capturing stream's work (which is recorded, not sent).

use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};

use super::{begin, check_edge_data, end, info, update_dependencies, CaptureInfo};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::put;
use crate::stream::{device_of_stream, is_default_stream};

/// `CU_STREAM_CAPTURE_MODE_RELAXED`, the last mode.
const MODE_RELAXED: c_int = 2;

thread_local! {
    /// This thread's capture mode (`CU_STREAM_CAPTURE_MODE_GLOBAL` to begin with).
    static MODE: Cell<c_int> = const { Cell::new(0) };
}

/// Begins capturing stream `handle` (a stream the program created: the legacy stream cannot be
/// captured, and the per-thread default stream is the session's one default stream here), into
/// a new graph or (`into`) the program's, after the nodes of it given.
fn begin_capture(handle: usize, mode: c_int, into: Option<(usize, &[usize])>) -> CuResult<()> {
    device_of_stream(handle)?;
    if !(0..=MODE_RELAXED).contains(&mode) {
        return Err(Error::said(code::INVALID_VALUE, format!("capture mode {mode}")));
    }
    if is_default_stream(handle) {
        return Err(Error::said(
            super::result::CAPTURE_UNSUPPORTED,
            "a default stream cannot be captured on remote accelerators: capture a stream the program created",
        ));
    }
    begin(handle, into)
}

#[no_mangle]
pub extern "C" fn cuStreamBeginCapture(handle: usize) -> u32 {
    guard("cuStreamBeginCapture", || begin_capture(handle, 0, None))
}

#[no_mangle]
pub extern "C" fn cuStreamBeginCapture_v2(handle: usize, mode: c_int) -> u32 {
    guard("cuStreamBeginCapture", || begin_capture(handle, mode, None))
}

/// CUDA 12.3: a capture into the program's graph `graph`, after the `count` nodes of it at
/// `deps`; `cuStreamEndCapture` answers that graph.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph(
    handle: usize,
    graph: usize,
    deps: *const usize,
    edges: *const c_void,
    count: usize,
    mode: c_int,
) -> u32 {
    guard("cuStreamBeginCaptureToGraph", || {
        check_edge_data(edges, count)?;
        super::graph(graph)?;
        begin_capture(handle, mode, Some((graph, super::handles(deps, count)?)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(handle: usize, graph: *mut usize) -> u32 {
    guard("cuStreamEndCapture", || {
        device_of_stream(handle)?;
        if graph.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        // As CUDA's: a failed capture leaves no graph.
        *graph = 0;
        *graph = end(handle)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(handle: usize, status: *mut c_int) -> u32 {
    guard("cuStreamIsCapturing", || {
        device_of_stream(handle)?;
        put(status, info(handle).status)
    })
}

/// The outputs of a `cuStreamGetCaptureInfo` version: those it lacks, or that the caller passes
/// as null (optional ones), are null here and left alone.
struct InfoOut {
    status: *mut c_int,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const usize,
    edges: *mut *const c_void,
    count: *mut usize,
}

impl InfoOut {
    /// No output asked for.
    fn none() -> Self {
        use std::ptr::null_mut;
        InfoOut {
            status: null_mut(),
            id: null_mut(),
            graph: null_mut(),
            deps: null_mut(),
            edges: null_mut(),
            count: null_mut(),
        }
    }
}

/// What the `cuStreamGetCaptureInfo` versions answer: the status (required), and what else the
/// caller asks for. Edge data is never kept (every edge is a plain dependency): null.
unsafe fn capture_info(handle: usize, out: InfoOut) -> CuResult<()> {
    device_of_stream(handle)?;
    let CaptureInfo { status, id, graph, deps, count } = info(handle);
    put(out.status, status)?;
    set_if_given(out.id, id);
    set_if_given(out.graph, graph);
    set_if_given(out.deps, deps);
    set_if_given(out.edges, std::ptr::null());
    set_if_given(out.count, count);
    Ok(())
}

/// Writes `value` to an optional output.
unsafe fn set_if_given<T>(out: *mut T, value: T) {
    if !out.is_null() {
        *out = value;
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(handle: usize, status: *mut c_int, id: *mut u64) -> u32 {
    guard("cuStreamGetCaptureInfo", || capture_info(handle, InfoOut { status, id, ..InfoOut::none() }))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    handle: usize,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const usize,
    count: *mut usize,
) -> u32 {
    guard("cuStreamGetCaptureInfo_v2", || {
        capture_info(handle, InfoOut { status, id, graph, deps, count, ..InfoOut::none() })
    })
}

/// CUDA 12.3's version (the 13.x runtime's `cudaStreamGetCaptureInfo`, which PyTorch asks at
/// its initialisation): the v2 arguments and the dependencies' edge data.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    handle: usize,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const usize,
    edges: *mut *const c_void,
    count: *mut usize,
) -> u32 {
    guard("cuStreamGetCaptureInfo_v3", || {
        // cuda.h: edge data is asked for only with the dependencies it belongs to.
        if !edges.is_null() && deps.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        capture_info(handle, InfoOut { status, id, graph, deps, edges, count })
    })
}

/// `CU_STREAM_ADD_CAPTURE_DEPENDENCIES` and `CU_STREAM_SET_CAPTURE_DEPENDENCIES`.
const ADD_DEPENDENCIES: c_uint = 0;
const SET_DEPENDENCIES: c_uint = 1;

/// Sets or adds to the nodes a capturing stream's next work runs after.
unsafe fn update(handle: usize, deps: *const usize, count: usize, flags: c_uint) -> CuResult<()> {
    device_of_stream(handle)?;
    let deps = match (deps.is_null(), count) {
        (_, 0) => &[][..],
        (false, n) => std::slice::from_raw_parts(deps, n),
        (true, _) => return Err(Error::Code(code::INVALID_VALUE)),
    };
    match flags {
        ADD_DEPENDENCIES => update_dependencies(handle, deps, true),
        SET_DEPENDENCIES => update_dependencies(handle, deps, false),
        _ => Err(Error::said(code::INVALID_VALUE, format!("capture dependency flags {flags:#x}"))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies(
    handle: usize,
    deps: *const usize,
    count: usize,
    flags: c_uint,
) -> u32 {
    guard("cuStreamUpdateCaptureDependencies", || update(handle, deps, count, flags))
}

/// CUDA 12.3's version, with edge data: only plain dependencies (null data) are served.
#[no_mangle]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies_v2(
    handle: usize,
    deps: *const usize,
    edges: *const c_void,
    count: usize,
    flags: c_uint,
) -> u32 {
    guard("cuStreamUpdateCaptureDependencies_v2", || {
        check_edge_data(edges, count)?;
        update(handle, deps, count, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> u32 {
    guard("cuThreadExchangeStreamCaptureMode", || {
        let new = mode.as_ref().copied().ok_or(Error::Code(code::INVALID_VALUE))?;
        if !(0..=MODE_RELAXED).contains(&new) {
            return Err(Error::said(code::INVALID_VALUE, format!("capture mode {new}")));
        }
        *mode = MODE.with(|m| m.replace(new));
        Ok(())
    })
}
