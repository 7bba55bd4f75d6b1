//! The generic node API: `cuGraphAddNode` (CUDA 12.2; with edge data 12.3 and 13.4),
//! `cuGraphNodeSetParams`, `cuGraphExecNodeSetParams` and `cuGraphNodeGetParams` (13.2), as
//! CUDA 13's samples and newer programs build graphs. A `CUgraphNodeParams` names a node type
//! and holds that type's parameters in a union; each type served is the typed call's node
//! ([`super::params`]: kernel, copy, memset, host, event record and wait; [`super::memory`]:
//! allocation and free; [`super::calls`]: empty; [`super::child`]: child graph), so a node made
//! either way is the same node. The union's newer layouts begin with the older ones' fields (a
//! kernel's `_v3` is `_v2`; a memset's and host's `_v2` are `_v1` and a context), so the typed
//! calls read them in place. Not served, each answering `CUDA_ERROR_NOT_SUPPORTED` with its
//! name: external semaphore, batched memory operation, conditional and batched copy nodes.

use std::ffi::{c_int, c_void};

use super::calls::cuGraphAddEmptyNode;
use super::child::{add_child, cuGraphExecChildGraphNodeSetParams, embedded_graph, set_child};
use super::memory::{
    cuGraphAddMemAllocNode, cuGraphAddMemFreeNode, cuGraphMemAllocNodeGetParams, cuGraphMemFreeNodeGetParams,
    AllocNodeParams,
};
use super::params::*;
use super::{check_edge_data, node, NodeKind};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::pitched::Memcpy3D;
use crate::state::put;

/// `CUgraphNodeParams`: the type, three reserved ints, the parameters' union (232 bytes), and
/// one more reserved word.
#[repr(C)]
#[derive(Debug)]
pub struct NodeParams {
    kind: c_int,
    reserved: [c_int; 3],
    union: [u64; 29],
    reserved_end: i64,
}

/// `CUgraphNodeType`s served here, beyond [`NodeKind`]'s codes.
const KERNEL: c_int = 0;
const MEMCPY: c_int = 1;
const MEMSET: c_int = 2;
const HOST: c_int = 3;
const GRAPH: c_int = 4;
const EMPTY: c_int = 5;
const WAIT_EVENT: c_int = 6;
const EVENT_RECORD: c_int = 7;
const MEM_ALLOC: c_int = 10;
const MEM_FREE: c_int = 11;

/// The names of the types not served, for their refusal.
fn unserved(kind: c_int) -> Error {
    let name = match kind {
        8 => "an external semaphore signal node",
        9 => "an external semaphore wait node",
        12 => "a batched memory operation node",
        13 => "a conditional node",
        14 => "a batched copy node",
        17 => "an external engine node",
        18 => "a fabric copy batch node",
        _ => return Error::said(code::INVALID_VALUE, format!("graph node type {kind} is none of CUDA's")),
    };
    Error::said(code::NOT_SUPPORTED, format!("{name} is not supported on remote accelerators"))
}

/// The typed call's result as this call's.
fn served(result: u32) -> CuResult<()> {
    match result {
        0 => Ok(()),
        e => Err(Error::Code(e)),
    }
}

impl NodeParams {
    /// The union read as `T` (a layout of CUDA's that fits in it).
    fn union_as<T>(&mut self) -> *mut T {
        self.union.as_mut_ptr().cast()
    }

    /// The word at `index` of the union.
    fn word(&self, index: usize) -> u64 {
        self.union[index]
    }

    /// `CUDA_MEMCPY_NODE_PARAMS`: flags and a reserved int (word 0, both zero), the context
    /// (word 1), and the copy's description from word 2.
    fn copy(&mut self) -> CuResult<(*mut Memcpy3D, usize)> {
        if self.word(0) != 0 {
            return Err(Error::said(code::INVALID_VALUE, "a copy node's flags and reserved field must be zero"));
        }
        let context = self.word(1) as usize;
        Ok((self.union[2..].as_mut_ptr().cast(), context))
    }

    /// `CUDA_MEMSET_NODE_PARAMS_v2`: `_v1` (five words: the destination, pitch, value and
    /// element size, width, height) and its context (word 5).
    /// A child graph node's graph, and whether it is moved into the node
    /// (`CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`) rather than copied.
    fn ownership(&self) -> CuResult<(usize, bool)> {
        match self.word(1) as u32 {
            ownership @ (0 | 1) => Ok((self.word(0) as usize, ownership == 1)),
            other => Err(Error::said(code::INVALID_VALUE, format!("child graph ownership {other}"))),
        }
    }

    fn memset(&mut self) -> (*mut MemsetNodeParams, usize) {
        let context = self.word(5) as usize;
        (self.union_as(), context)
    }
}

/// The parameters the program gave, checked: not null, the reserved fields zero.
unsafe fn given<'a>(p: *mut NodeParams) -> CuResult<&'a mut NodeParams> {
    let p = p.as_mut().ok_or_else(|| Error::said(code::INVALID_VALUE, "the node's parameters are null"))?;
    if p.reserved != [0; 3] || p.reserved_end != 0 {
        return Err(Error::said(code::INVALID_VALUE, "the node's parameters' reserved fields are not zero"));
    }
    Ok(p)
}

/// Adds the node `p` describes to `graph` after the `count` nodes at `deps`.
unsafe fn add_node(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    p: *mut NodeParams,
) -> CuResult<()> {
    let p = given(p)?;
    served(match p.kind {
        KERNEL => cuGraphAddKernelNode_v2(out, graph, deps, count, p.union_as()),
        MEMCPY => {
            let (copy, context) = p.copy()?;
            cuGraphAddMemcpyNode(out, graph, deps, count, copy, context)
        }
        MEMSET => {
            let (memset, context) = p.memset();
            cuGraphAddMemsetNode(out, graph, deps, count, memset, context)
        }
        HOST => cuGraphAddHostNode(out, graph, deps, count, p.union_as()),
        // The child graph (word 0) is copied into the node, or moved in
        // (`CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`): the node's from then on.
        GRAPH => {
            let (child, moved) = p.ownership()?;
            return add_child(out, graph, deps, count, child, moved);
        }
        EMPTY => cuGraphAddEmptyNode(out, graph, deps, count),
        WAIT_EVENT => cuGraphAddEventWaitNode(out, graph, deps, count, p.word(0) as usize),
        EVENT_RECORD => cuGraphAddEventRecordNode(out, graph, deps, count, p.word(0) as usize),
        MEM_ALLOC => cuGraphAddMemAllocNode(out, graph, deps, count, p.union_as::<AllocNodeParams>()),
        MEM_FREE => cuGraphAddMemFreeNode(out, graph, deps, count, p.word(0)),
        kind => return Err(unserved(kind)),
    })
}

/// Node `handle`'s parameters from now on, as `p` describes them (of the node's type).
unsafe fn set_node(handle: usize, p: *mut NodeParams) -> CuResult<()> {
    let p = given(p)?;
    served(match p.kind {
        KERNEL => cuGraphKernelNodeSetParams_v2(handle, p.union_as()),
        MEMCPY => cuGraphMemcpyNodeSetParams(handle, p.copy()?.0),
        MEMSET => cuGraphMemsetNodeSetParams(handle, p.memset().0),
        HOST => cuGraphHostNodeSetParams(handle, p.union_as()),
        WAIT_EVENT => cuGraphEventWaitNodeSetEvent(handle, p.word(0) as usize),
        EVENT_RECORD => cuGraphEventRecordNodeSetEvent(handle, p.word(0) as usize),
        GRAPH => return set_child(handle, p.ownership()?),
        EMPTY if node(handle)?.kind == NodeKind::Empty => 0,
        kind => return Err(refused_change(kind)),
    })
}

/// Node `node`'s step in executable graph `exec`, as `p` describes it, from its next launch.
unsafe fn set_step(exec: usize, node: usize, p: *mut NodeParams) -> CuResult<()> {
    let p = given(p)?;
    served(match p.kind {
        KERNEL => cuGraphExecKernelNodeSetParams_v2(exec, node, p.union_as()),
        MEMCPY => {
            let (copy, context) = p.copy()?;
            cuGraphExecMemcpyNodeSetParams(exec, node, copy, context)
        }
        MEMSET => {
            let (memset, context) = p.memset();
            cuGraphExecMemsetNodeSetParams(exec, node, memset, context)
        }
        HOST => cuGraphExecHostNodeSetParams(exec, node, p.union_as()),
        WAIT_EVENT => cuGraphExecEventWaitNodeSetEvent(exec, node, p.word(0) as usize),
        EVENT_RECORD => cuGraphExecEventRecordNodeSetEvent(exec, node, p.word(0) as usize),
        GRAPH => cuGraphExecChildGraphNodeSetParams(exec, node, p.word(0) as usize),
        EMPTY if super::node(node)?.kind == NodeKind::Empty => 0,
        kind => return Err(refused_change(kind)),
    })
}

/// The refusal of a change to a node of type `kind` that is not served or that CUDA refuses
/// (memory nodes, an empty node: nothing to change).
fn refused_change(kind: c_int) -> Error {
    match kind {
        EMPTY | MEM_ALLOC | MEM_FREE => {
            Error::said(code::INVALID_VALUE, format!("a node of type {kind} has no parameters to change"))
        }
        kind => unserved(kind),
    }
}

/// Node `handle`'s type and parameters, written to `out`.
unsafe fn get_node(handle: usize, out: *mut NodeParams) -> CuResult<()> {
    let kind = node(handle)?.kind;
    let p = out.as_mut().ok_or_else(|| Error::said(code::INVALID_VALUE, "the parameters' place is null"))?;
    std::ptr::write_bytes(p as *mut NodeParams, 0, 1);
    p.kind = kind.code();
    let word = p.union_as::<usize>();
    served(match kind {
        NodeKind::Kernel => cuGraphKernelNodeGetParams_v2(handle, p.union_as()),
        NodeKind::Memcpy => cuGraphMemcpyNodeGetParams(handle, p.copy()?.0),
        NodeKind::Memset => cuGraphMemsetNodeGetParams(handle, p.memset().0),
        NodeKind::Host => cuGraphHostNodeGetParams(handle, p.union_as()),
        NodeKind::EventWait => cuGraphEventWaitNodeGetEvent(handle, word),
        NodeKind::EventRecord => cuGraphEventRecordNodeGetEvent(handle, word),
        NodeKind::MemAlloc => cuGraphMemAllocNodeGetParams(handle, p.union_as()),
        NodeKind::MemFree => cuGraphMemFreeNodeGetParams(handle, p.union_as()),
        NodeKind::Empty => 0,
        // The graph the node owns, and `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_INVALID` (-1), as CUDA
        // answers, so that the answer given back as parameters is refused, not cloned.
        NodeKind::Graph => {
            put(word, embedded_graph(handle)?)?;
            p.union[1] = u64::from((-1i32) as u32);
            return Ok(());
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *mut NodeParams,
) -> u32 {
    guard("cuGraphAddNode", || add_node(out, graph, deps, count, params))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddNode_v2(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    edges: *const c_void,
    count: usize,
    params: *mut NodeParams,
) -> u32 {
    guard("cuGraphAddNode", || {
        check_edge_data(edges, count)?;
        add_node(out, graph, deps, count, params)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddNode_v3(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    edges: *const c_void,
    count: usize,
    params: *mut NodeParams,
) -> u32 {
    cuGraphAddNode_v2(out, graph, deps, edges, count, params)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeSetParams(handle: usize, params: *mut NodeParams) -> u32 {
    guard("cuGraphNodeSetParams", || set_node(handle, params))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeSetParams_v2(handle: usize, params: *mut NodeParams) -> u32 {
    cuGraphNodeSetParams(handle, params)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecNodeSetParams(exec: usize, handle: usize, params: *mut NodeParams) -> u32 {
    guard("cuGraphExecNodeSetParams", || set_step(exec, handle, params))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetParams(handle: usize, params: *mut NodeParams) -> u32 {
    guard("cuGraphNodeGetParams", || get_node(handle, params))
}
