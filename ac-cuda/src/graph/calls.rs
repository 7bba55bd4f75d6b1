//! The graph API's entry points: graphs made (with empty nodes), cloned, instantiated,
//! updated, launched and destroyed. A launch on a capturing stream is recorded as a child graph
//! node.
//!
//! Kernel, copy, memset, host and event nodes are [`super::params`]'s; memory allocation and
//! free nodes [`super::memory`]'s; child graph nodes [`super::child`]'s; edges and queries
//! [`super::topology`]'s. The generic node API is [`super::generic`]'s.
//!
//! Not served (each answers `CUDA_ERROR_NOT_SUPPORTED` and names itself once): external
//! semaphore, batched memory and conditional nodes, edge data other than the default, device
//! launches.

use std::ffi::{c_char, c_int, c_uint};

use super::params::add;
use super::{
    clone_graph, destroy_exec, destroy_graph, exec, graph, instantiate, launching, new_graph, or_record_with,
    refuse_if_capturing, refuse_moved, result, NodeKind, Owner, Params, Work,
};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::put;
use crate::stream::device_of_stream;

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(out: *mut usize, flags: c_uint) -> u32 {
    guard("cuGraphCreate", || {
        if flags != 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("graph flags {flags:#x} (must be 0)")));
        }
        put(out, new_graph())
    })
}

#[no_mangle]
pub extern "C" fn cuGraphDestroy(handle: usize) -> u32 {
    guard("cuGraphDestroy", || {
        if graph(handle)?.owner() != Owner::Program {
            return Err(Error::said(code::INVALID_VALUE, "the graph is a child graph node's: it goes with its node"));
        }
        destroy_graph(handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphClone(out: *mut usize, graph: usize) -> u32 {
    guard("cuGraphClone", || put(out, clone_graph(graph)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(out: *mut usize, graph: usize, deps: *const usize, count: usize) -> u32 {
    guard("cuGraphAddEmptyNode", || add(out, graph, deps, count, NodeKind::Empty, Work::default()))
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`, `..._UPLOAD`,
/// `..._DEVICE_LAUNCH` and `..._USE_NODE_PRIORITY`: every flag CUDA 13 defines. Priorities
/// change nothing here (one order); an upload is a no-op; device launch is not served.
const FLAGS: u64 = 1 | 2 | 4 | 8;
const DEVICE_LAUNCH: u64 = 4;

/// An executable graph of `graph` written to `out`, after `flags` are checked.
unsafe fn instantiate_with(out: *mut usize, graph: usize, flags: u64) -> CuResult<()> {
    if out.is_null() || flags & !FLAGS != 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    if flags & DEVICE_LAUNCH != 0 {
        return Err(Error::said(
            code::NOT_SUPPORTED,
            "graphs launched from the device are not supported on remote accelerators",
        ));
    }
    refuse_moved(graph, "instantiated alone")?;
    put(out, instantiate(graph, flags)?)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(out: *mut usize, graph: usize, flags: u64) -> u32 {
    guard("cuGraphInstantiate", || instantiate_with(out, graph, flags))
}

/// CUDA 11's form: an error node and log buffer, which a failure here leaves alone but for an
/// empty log.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    out: *mut usize,
    graph: usize,
    error_node: *mut usize,
    log: *mut c_char,
    log_size: usize,
) -> u32 {
    guard("cuGraphInstantiate", || {
        if !error_node.is_null() {
            *error_node = 0;
        }
        if !log.is_null() && log_size > 0 {
            *log = 0;
        }
        instantiate_with(out, graph, 0)
    })
}

// CUDA 10.0's name, of the same signature (`cuda.h` maps it to the `_v2` form since 11.0).
crate::per_thread_aliases! {
    cuGraphInstantiate => cuGraphInstantiate_v2,
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
#[derive(Debug)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: usize,
    error_node: usize,
    result: c_int,
}

/// `CUDA_GRAPH_INSTANTIATE_SUCCESS` and `..._ERROR`.
const INSTANTIATED: c_int = 0;
const INSTANTIATE_ERROR: c_int = 1;

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    out: *mut usize,
    graph: usize,
    params: *mut InstantiateParams,
) -> u32 {
    guard("cuGraphInstantiateWithParams", || {
        let params = params.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
        params.error_node = 0;
        let made = instantiate_with(out, graph, params.flags);
        params.result = if made.is_ok() { INSTANTIATED } else { INSTANTIATE_ERROR };
        made
    })
}

#[no_mangle]
pub extern "C" fn cuGraphExecDestroy(handle: usize) -> u32 {
    guard("cuGraphExecDestroy", || {
        // Its user objects go after its launches are done, as CUDA's: their work is waited for
        // (without refusing a stream that captures again meanwhile).
        for stream in exec(handle)?.launched_on() {
            let _ = crate::stream::wait_for_work(stream);
        }
        destroy_exec(handle)
    })
}

#[no_mangle]
pub extern "C" fn cuGraphUpload(handle: usize, stream: usize) -> u32 {
    // Nothing to upload: a graph's work is sent when it is launched.
    guard("cuGraphUpload", || {
        exec(handle)?;
        device_of_stream(stream).map(drop)
    })
}

#[no_mangle]
pub extern "C" fn cuGraphLaunch(handle: usize, stream: usize) -> u32 {
    guard("cuGraphLaunch", || {
        let exec = exec(handle)?;
        device_of_stream(stream)?;
        if exec.has_memory() {
            // As CUDA's: a graph with memory nodes is not a child of another.
            refuse_if_capturing(stream, "a launch of a graph with memory nodes")?;
        }
        let params: Params = exec.clone();
        let replay = launching(exec);
        or_record_with(stream, NodeKind::Graph, || Some(params), move |stream| replay(stream))
    })
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
#[derive(Debug)]
pub struct UpdateResultInfo {
    result: c_int,
    error_node: usize,
    error_from_node: usize,
}

/// `CU_GRAPH_EXEC_UPDATE_SUCCESS` and `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`.
const UPDATED: c_int = 0;
const TOPOLOGY_CHANGED: c_int = 2;

/// CUDA 10.2's form: the node that forbade the update and the verdict written to two places.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate(
    handle: usize,
    graph: usize,
    error_node: *mut usize,
    result: *mut c_int,
) -> u32 {
    if error_node.is_null() || result.is_null() {
        return guard("cuGraphExecUpdate", || Err(Error::Code(code::INVALID_VALUE)));
    }
    let mut info = UpdateResultInfo { result: UPDATED, error_node: 0, error_from_node: 0 };
    let answered = cuGraphExecUpdate_v2(handle, graph, &mut info);
    (*error_node, *result) = (info.error_node, info.result);
    answered
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(handle: usize, graph: usize, info: *mut UpdateResultInfo) -> u32 {
    guard("cuGraphExecUpdate", || {
        let info = info.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
        *info = UpdateResultInfo { result: UPDATED, error_node: 0, error_from_node: 0 };
        refuse_moved(graph, "an executable graph's update")?;
        let updated = exec(handle)?.update(graph);
        if matches!(&updated, Err(e) if e.code() == result::EXEC_UPDATE_FAILURE) {
            info.result = TOPOLOGY_CHANGED;
        }
        updated
    })
}
