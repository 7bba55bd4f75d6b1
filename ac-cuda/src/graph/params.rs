//! Kernel, copy, memset, host and event nodes: added to a graph (`cuGraphAdd*Node`), their parameters
//! read back (`cuGraph*NodeGetParams`), changed in the graph (`cuGraph*NodeSetParams`) or in an
//! executable graph only (`cuGraphExec*NodeSetParams`), and a node's step in an executable graph
//! turned off and on (`cuGraphNodeSetEnabled`). A node's call is checked and its arguments read
//! when it is added or changed, as CUDA reads them; its work is sent at each launch.
//!
//! What a node was made from is kept with it ([`super::Params`]): a kernel node's prepared
//! launch (`crate::launch::Prepared`, whose parameters' copies `cuGraphKernelNodeGetParams`
//! points to), a memset's or copy's descriptor, a host function and its argument, an event.

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use ac_frontend::LaunchDims;

use super::{exec, handles, node, set_work, EventOf, Kept, NodeKind, Params, Replay, Work};
use crate::copies::copy_3d;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::launch::{prepare, Mode, Prepared};
use crate::pitched::{memset_2d, Memcpy3D};
use crate::state::put;
use crate::stream::{check_event, record, run_host_function, wait_for, HostFn};

/// Adds a node doing `work` to `graph` after the `count` nodes at `deps`, its handle written to
/// `out`.
pub(super) unsafe fn add(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    kind: NodeKind,
    work: Work,
) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let handle = super::add_node_with(graph, kind, handles(deps, count)?, work, None)?;
    put(out, handle)
}

/// What node `handle` (of `kind`) was made from, as `T`.
fn params_of<T: Send + Sync + 'static>(handle: usize, kind: NodeKind) -> CuResult<Arc<T>> {
    let node = node(handle)?;
    if node.kind != kind {
        return Err(Error::said(code::INVALID_VALUE, format!("a {:?} node, not a {kind:?} node", node.kind)));
    }
    let params = node.params().ok_or(Error::said(code::INVALID_VALUE, "the node's parameters are not kept"))?;
    params.downcast::<T>().map_err(|_| Error::said(code::INVALID_VALUE, "the node's parameters are of another kind"))
}

/// `CUDA_KERNEL_NODE_PARAMS_v1`: what the calls without `_v2` take.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelNodeParamsV1 {
    function: usize,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2`, the layout `cuGraphAddKernelNode` takes since CUDA 12):
/// `_v1`'s fields, then the kernel and context.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelNodeParams {
    v1: KernelNodeParamsV1,
    kernel: usize,
    context: usize,
}

/// A kernel node's work from `_v1` parameters, run as `mode` says.
unsafe fn kernel_work_v1(p: *const KernelNodeParamsV1, mode: Mode) -> CuResult<Work> {
    let v1 = *p.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    kernel_work(&KernelNodeParams { v1, kernel: 0, context: 0 }, mode)
}

/// A kernel node's work, its arguments read now, run as `mode` says (a node's new parameters
/// keep its launch's mode: cooperative, or its clusters); the function is `kernel` when
/// `function` is null.
unsafe fn kernel_work(p: *const KernelNodeParams, mode: Mode) -> CuResult<Work> {
    let KernelNodeParams { v1: p, kernel, .. } = *p.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    let function = if p.function == 0 { kernel } else { p.function };
    let dims = LaunchDims { grid: p.grid, block: p.block, shared_mem: p.shared };
    let launch = Arc::new(prepare(function, dims, p.params, p.extra)?.run_as(mode)?);
    let params: Params = launch.clone();
    Ok(Work { replay: Some(Arc::new(move |stream| launch.send(stream))), params: Some(params) })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *const KernelNodeParamsV1,
) -> u32 {
    guard("cuGraphAddKernelNode", || {
        add(out, graph, deps, count, NodeKind::Kernel, kernel_work_v1(params, Mode::Plain)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *const KernelNodeParams,
) -> u32 {
    guard("cuGraphAddKernelNode", || add(out, graph, deps, count, NodeKind::Kernel, kernel_work(params, Mode::Plain)?))
}

/// The name of kernel node `handle`'s kernel.
pub(super) fn kernel_name(handle: usize) -> Option<String> {
    let (function, _) = params_of::<Prepared>(handle, NodeKind::Kernel).ok()?.function_and_dims();
    Some(crate::module::kernels().get(function).ok()?.name.to_string_lossy().into_owned())
}

/// How kernel node `handle`'s launch runs its blocks.
pub(super) fn mode_of(handle: usize) -> CuResult<Mode> {
    Ok(params_of::<Prepared>(handle, NodeKind::Kernel)?.mode())
}

/// Kernel node `handle`'s launch runs its blocks as `mode` says from now on, its arguments
/// the same (`cuGraphKernelNodeSetAttribute`).
pub(super) fn set_mode(handle: usize, mode: Mode) -> CuResult<()> {
    // The node keeps the copies `kernel_params` points to until its work is replaced.
    let work = unsafe { kernel_work(&kernel_params(handle)?, mode)? };
    set_work(handle, NodeKind::Kernel, work)
}

/// Kernel node `handle`'s parameters (`_v2`'s layout). `kernelParams` points to copies of the
/// arguments, valid while the node keeps them.
fn kernel_params(handle: usize) -> CuResult<KernelNodeParams> {
    let launch = params_of::<Prepared>(handle, NodeKind::Kernel)?;
    let (function, dims) = launch.function_and_dims();
    let v1 = KernelNodeParamsV1 {
        function,
        grid: dims.grid,
        block: dims.block,
        shared: dims.shared_mem,
        params: launch.parameter_pointers(),
        extra: std::ptr::null_mut(),
    };
    // The runtime finds its kernel by this handle (the shim's kernels and functions are one).
    Ok(KernelNodeParams { v1, kernel: function, context: 0 })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams(handle: usize, out: *mut KernelNodeParamsV1) -> u32 {
    guard("cuGraphKernelNodeGetParams", || put(out, kernel_params(handle)?.v1))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(handle: usize, out: *mut KernelNodeParams) -> u32 {
    guard("cuGraphKernelNodeGetParams", || put(out, kernel_params(handle)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams(handle: usize, params: *const KernelNodeParamsV1) -> u32 {
    guard("cuGraphKernelNodeSetParams", || {
        set_work(handle, NodeKind::Kernel, kernel_work_v1(params, mode_of(handle)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(handle: usize, params: *const KernelNodeParams) -> u32 {
    guard("cuGraphKernelNodeSetParams", || set_work(handle, NodeKind::Kernel, kernel_work(params, mode_of(handle)?)?))
}

/// Node `node`'s step in executable graph `handle` does `work` from its next launch.
fn set_step(handle: usize, node: usize, kind: NodeKind, work: Work) -> CuResult<()> {
    let replay = work.replay.ok_or(Error::Code(code::INVALID_VALUE))?;
    exec(handle)?.set_replay(node, kind, replay)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams(
    handle: usize,
    node: usize,
    params: *const KernelNodeParamsV1,
) -> u32 {
    guard("cuGraphExecKernelNodeSetParams", || {
        set_step(handle, node, NodeKind::Kernel, kernel_work_v1(params, mode_of(node)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    handle: usize,
    node: usize,
    params: *const KernelNodeParams,
) -> u32 {
    guard("cuGraphExecKernelNodeSetParams", || {
        set_step(handle, node, NodeKind::Kernel, kernel_work(params, mode_of(node)?)?)
    })
}

/// `CUDA_MEMSET_NODE_PARAMS`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemsetNodeParams {
    dst: u64,
    pitch: usize,
    value: c_uint,
    element: c_uint,
    width: usize,
    height: usize,
}

/// A memset node's work, its descriptor checked and kept.
unsafe fn memset_work(params: *const MemsetNodeParams) -> CuResult<Work> {
    let p = *params.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    if ![1, 2, 4].contains(&p.element) {
        return Err(Error::said(code::INVALID_VALUE, format!("a memset element of {} bytes", p.element)));
    }
    let replay: Replay = Arc::new(move |stream| {
        memset_2d((p.dst, None), p.pitch, p.value, p.element.into(), [p.width, p.height], stream, false)
    });
    Ok(Work { replay: Some(replay), params: Some(Arc::new(p)) })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *const MemsetNodeParams,
    _context: usize,
) -> u32 {
    guard("cuGraphAddMemsetNode", || add(out, graph, deps, count, NodeKind::Memset, memset_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemsetNodeGetParams(handle: usize, out: *mut MemsetNodeParams) -> u32 {
    guard("cuGraphMemsetNodeGetParams", || put(out, *params_of::<MemsetNodeParams>(handle, NodeKind::Memset)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemsetNodeSetParams(handle: usize, params: *const MemsetNodeParams) -> u32 {
    guard("cuGraphMemsetNodeSetParams", || set_work(handle, NodeKind::Memset, memset_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecMemsetNodeSetParams(
    handle: usize,
    node: usize,
    params: *const MemsetNodeParams,
    _context: usize,
) -> u32 {
    guard("cuGraphExecMemsetNodeSetParams", || set_step(handle, node, NodeKind::Memset, memset_work(params)?))
}

/// A copy node's work, its descriptor kept (host memory is read when it runs).
unsafe fn memcpy_work(params: *const Memcpy3D) -> CuResult<Work> {
    let described = Kept::new(*params.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?);
    // SAFETY: the program keeps a graph's host memory valid while the graph may run.
    let replay: Replay = Arc::new(move |stream| unsafe { copy_3d(&described.get(), stream) });
    Ok(Work { replay: Some(replay), params: Some(Arc::new(described)) })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *const Memcpy3D,
    _context: usize,
) -> u32 {
    guard("cuGraphAddMemcpyNode", || add(out, graph, deps, count, NodeKind::Memcpy, memcpy_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemcpyNodeGetParams(handle: usize, out: *mut Memcpy3D) -> u32 {
    guard("cuGraphMemcpyNodeGetParams", || put(out, params_of::<Kept<Memcpy3D>>(handle, NodeKind::Memcpy)?.get()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemcpyNodeSetParams(handle: usize, params: *const Memcpy3D) -> u32 {
    guard("cuGraphMemcpyNodeSetParams", || set_work(handle, NodeKind::Memcpy, memcpy_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecMemcpyNodeSetParams(
    handle: usize,
    node: usize,
    params: *const Memcpy3D,
    _context: usize,
) -> u32 {
    guard("cuGraphExecMemcpyNodeSetParams", || set_step(handle, node, NodeKind::Memcpy, memcpy_work(params)?))
}

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HostNodeParams {
    function: Option<HostFn>,
    data: *mut c_void,
}

/// A host node's work: the program's function and argument, kept.
unsafe fn host_work(params: *const HostNodeParams) -> CuResult<Work> {
    let p = *params.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    if p.function.is_none() {
        return Err(Error::said(code::INVALID_VALUE, "the host function is null"));
    }
    let kept = Kept::new(p);
    // SAFETY: the program's function and argument, called as it asked.
    let replay: Replay =
        Arc::new(move |stream| unsafe { run_host_function(stream, kept.get().function, kept.get().data) });
    Ok(Work { replay: Some(replay), params: Some(Arc::new(kept)) })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddHostNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *const HostNodeParams,
) -> u32 {
    guard("cuGraphAddHostNode", || add(out, graph, deps, count, NodeKind::Host, host_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphHostNodeGetParams(handle: usize, out: *mut HostNodeParams) -> u32 {
    guard("cuGraphHostNodeGetParams", || put(out, params_of::<Kept<HostNodeParams>>(handle, NodeKind::Host)?.get()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphHostNodeSetParams(handle: usize, params: *const HostNodeParams) -> u32 {
    guard("cuGraphHostNodeSetParams", || set_work(handle, NodeKind::Host, host_work(params)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecHostNodeSetParams(
    handle: usize,
    node: usize,
    params: *const HostNodeParams,
) -> u32 {
    guard("cuGraphExecHostNodeSetParams", || set_step(handle, node, NodeKind::Host, host_work(params)?))
}

/// An event record node's work (`wait`: a wait node's): the event's record on the launch's
/// stream, or a wait for it (the host waits, as `cuStreamWaitEvent` outside a capture does).
fn event_work(event: usize, wait: bool) -> CuResult<Work> {
    check_event(event)?;
    let replay: Replay =
        if wait { Arc::new(move |_| wait_for(event)) } else { Arc::new(move |stream| record(event, stream)) };
    Ok(Work { replay: Some(replay), params: Some(Arc::new(EventOf(event))) })
}

/// The kind of an event node: a wait or a record.
fn event_kind(wait: bool) -> NodeKind {
    if wait {
        NodeKind::EventWait
    } else {
        NodeKind::EventRecord
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventRecordNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    event: usize,
) -> u32 {
    guard("cuGraphAddEventRecordNode", || {
        add(out, graph, deps, count, NodeKind::EventRecord, event_work(event, false)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventWaitNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    event: usize,
) -> u32 {
    guard("cuGraphAddEventWaitNode", || add(out, graph, deps, count, NodeKind::EventWait, event_work(event, true)?))
}

/// Writes event node `handle`'s event to `out`.
unsafe fn event_out(handle: usize, wait: bool, out: *mut usize) -> CuResult<()> {
    put(out, params_of::<EventOf>(handle, event_kind(wait))?.0)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphEventRecordNodeGetEvent(handle: usize, out: *mut usize) -> u32 {
    guard("cuGraphEventRecordNodeGetEvent", || event_out(handle, false, out))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphEventWaitNodeGetEvent(handle: usize, out: *mut usize) -> u32 {
    guard("cuGraphEventWaitNodeGetEvent", || event_out(handle, true, out))
}

#[no_mangle]
pub extern "C" fn cuGraphEventRecordNodeSetEvent(handle: usize, event: usize) -> u32 {
    guard("cuGraphEventRecordNodeSetEvent", || set_work(handle, NodeKind::EventRecord, event_work(event, false)?))
}

#[no_mangle]
pub extern "C" fn cuGraphEventWaitNodeSetEvent(handle: usize, event: usize) -> u32 {
    guard("cuGraphEventWaitNodeSetEvent", || set_work(handle, NodeKind::EventWait, event_work(event, true)?))
}

#[no_mangle]
pub extern "C" fn cuGraphExecEventRecordNodeSetEvent(handle: usize, node: usize, event: usize) -> u32 {
    guard("cuGraphExecEventRecordNodeSetEvent", || {
        set_step(handle, node, NodeKind::EventRecord, event_work(event, false)?)
    })
}

#[no_mangle]
pub extern "C" fn cuGraphExecEventWaitNodeSetEvent(handle: usize, node: usize, event: usize) -> u32 {
    guard("cuGraphExecEventWaitNodeSetEvent", || set_step(handle, node, NodeKind::EventWait, event_work(event, true)?))
}

#[no_mangle]
pub extern "C" fn cuGraphNodeSetEnabled(handle: usize, node: usize, enabled: c_uint) -> u32 {
    guard("cuGraphNodeSetEnabled", || exec(handle)?.set_enabled(node, enabled != 0))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetEnabled(handle: usize, node: usize, enabled: *mut c_uint) -> u32 {
    guard("cuGraphNodeGetEnabled", || put(enabled, c_uint::from(exec(handle)?.is_enabled(node)?)))
}

#[cfg(test)]
mod tests {
    use super::super::add_node;
    use super::*;

    #[test]
    fn a_node_changed_in_an_executable_graph_changes_there_alone() {
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let step = |tag: &'static str| {
            let ran = ran.clone();
            Work::of(Arc::new(move |_| {
                ran.lock().unwrap().push(tag);
                Ok(())
            }))
        };
        let g = super::super::new_graph();
        let a = super::super::add_node_with(g, NodeKind::Kernel, &[], step("a"), None).unwrap();
        let b = super::super::add_node_with(g, NodeKind::Memset, &[a], step("b"), None).unwrap();
        let e = super::super::instantiate(g, 0).unwrap();
        set_step(e, a, NodeKind::Kernel, step("a2")).unwrap();
        assert_eq!(set_step(e, a, NodeKind::Memset, step("x")).unwrap_err().code(), code::INVALID_VALUE);
        exec(e).unwrap().set_enabled(b, false).unwrap();
        exec(e).unwrap().replay(0).unwrap();
        assert_eq!(*ran.lock().unwrap(), ["a2"], "the new kernel step ran and the disabled memset did not");
        // The graph's own node is unchanged: a new executable graph runs what it had.
        let again = super::super::instantiate(g, 0).unwrap();
        exec(again).unwrap().replay(0).unwrap();
        assert_eq!(*ran.lock().unwrap(), ["a2", "a", "b"]);
        let later = add_node(g, NodeKind::Kernel, &[], None).unwrap();
        assert!(exec(again).unwrap().set_enabled(later, false).is_err(), "a node the executable graph lacks");
    }
}
