//! The graph API's entry points: graphs built (empty and child-graph nodes, dependencies),
//! queried, cloned, instantiated, updated, launched and destroyed. A launch on a capturing
//! stream is recorded as a child graph node.
//!
//! Kernel, copy, memset, host and event nodes are [`super::params`]'s; memory allocation and free nodes
//! [`super::memory`]'s.
//!
//! Not served (each answers `CUDA_ERROR_NOT_SUPPORTED` and names itself once): external
//! semaphore, batched memory and conditional nodes, a child graph node's parameters, edge data,
//! device launches. The generic node API is [`super::generic`]'s.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use super::params::add;
use super::{
    add_dependency, clone_graph, destroy_exec, destroy_graph, exec, graph_nodes, handles, instantiate,
    instantiate_child, new_graph, node, or_record_with, refuse_edge_data, refuse_if_capturing, result, Exec, NodeKind,
    Params, Work,
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
pub extern "C" fn cuGraphDestroy(graph: usize) -> u32 {
    guard("cuGraphDestroy", || destroy_graph(graph))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphClone(out: *mut usize, graph: usize) -> u32 {
    guard("cuGraphClone", || put(out, clone_graph(graph)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(out: *mut usize, graph: usize, deps: *const usize, count: usize) -> u32 {
    guard("cuGraphAddEmptyNode", || add(out, graph, deps, count, NodeKind::Empty, Work::default()))
}

/// A child graph node's work: the graph's executable form made now, as CUDA copies a child
/// graph when the node is added, kept as the node's parameters too (so that a parent knows
/// whether a child holds user objects).
pub(super) fn child_work(graph: usize) -> CuResult<Work> {
    let handle = instantiate_child(graph)?;
    let exec = exec(handle)?;
    // The node alone holds it (and the user objects it holds), going with the node.
    destroy_exec(handle)?;
    Ok(launch_work(exec))
}

/// The work of a node launching `exec`, kept as its parameters.
fn launch_work(exec: Arc<Exec>) -> Work {
    let params: Params = exec.clone();
    Work { replay: Some(Arc::new(move |stream| exec.replay(stream))), params: Some(params) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    child: usize,
) -> u32 {
    guard("cuGraphAddChildGraphNode", || add(out, graph, deps, count, NodeKind::Graph, child_work(child)?))
}

/// Makes each `to[i]` of `graph` run after `from[i]`.
unsafe fn add_dependencies(graph: usize, from: *const usize, to: *const usize, count: usize) -> CuResult<()> {
    let (from, to) = (handles(from, count)?, handles(to, count)?);
    from.iter().zip(to).try_for_each(|(&f, &t)| add_dependency(graph, f, t))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddDependencies(
    graph: usize,
    from: *const usize,
    to: *const usize,
    count: usize,
) -> u32 {
    guard("cuGraphAddDependencies", || add_dependencies(graph, from, to, count))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddDependencies_v2(
    graph: usize,
    from: *const usize,
    to: *const usize,
    edges: *const c_void,
    count: usize,
) -> u32 {
    guard("cuGraphAddDependencies", || {
        refuse_edge_data(edges)?;
        add_dependencies(graph, from, to, count)
    })
}

/// Answers `list` the driver's way: with `out` null, how many there are; else up to `*count`
/// of them, `*count` then how many were written.
unsafe fn list_out(list: &[usize], out: *mut usize, count: *mut usize) -> CuResult<()> {
    let count = count.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
    if out.is_null() {
        *count = list.len();
        return Ok(());
    }
    let n = (*count).min(list.len());
    std::ptr::copy_nonoverlapping(list.as_ptr(), out, n);
    *count = n;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(graph: usize, out: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphGetNodes", || list_out(&graph_nodes(graph)?, out, count))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetRootNodes(graph: usize, out: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphGetRootNodes", || {
        let roots: Vec<usize> =
            graph_nodes(graph)?.into_iter().filter(|&n| node(n).is_ok_and(|n| n.dependencies().is_empty())).collect();
        list_out(&roots, out, count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(handle: usize, kind: *mut c_int) -> u32 {
    guard("cuGraphNodeGetType", || put(kind, node(handle)?.kind.code()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependencies(handle: usize, out: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphNodeGetDependencies", || list_out(&node(handle)?.dependencies(), out, count))
}

/// CUDA 12.3's version, with edge data, which is never kept (null).
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependencies_v2(
    handle: usize,
    out: *mut usize,
    edges: *mut c_void,
    count: *mut usize,
) -> u32 {
    guard("cuGraphNodeGetDependencies", || {
        refuse_edge_data(edges)?;
        list_out(&node(handle)?.dependencies(), out, count)
    })
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`, `..._UPLOAD`,
/// `..._DEVICE_LAUNCH` and `..._USE_NODE_PRIORITY`: every flag CUDA 13 defines. Priorities
/// change nothing here (one order); an upload is a no-op; device launch is not served.
const FLAGS: u64 = 1 | 2 | 4 | 8;
const AUTO_FREE_ON_LAUNCH: u64 = 1;
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
    put(out, instantiate(graph, flags & AUTO_FREE_ON_LAUNCH != 0)?)
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
        let work = launch_work(exec);
        let params = work.params.clone();
        let replay = work.replay.expect("a launch's work");
        or_record_with(stream, NodeKind::Graph, || params, move |stream| replay(stream))
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

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(handle: usize, graph: usize, info: *mut UpdateResultInfo) -> u32 {
    guard("cuGraphExecUpdate", || {
        let info = info.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
        *info = UpdateResultInfo { result: UPDATED, error_node: 0, error_from_node: 0 };
        let updated = exec(handle)?.update(graph);
        if matches!(&updated, Err(e) if e.code() == result::EXEC_UPDATE_FAILURE) {
            info.result = TOPOLOGY_CHANGED;
        }
        updated
    })
}
