//! A graph's shape, read and changed: its nodes and edges, a node's dependencies and
//! dependents, edges added and removed, nodes removed, a clone's nodes found, and the ids that
//! CUDA's tools name graphs and nodes by (the DOT file's, [`super::dot`]).
//!
//! Every edge here is a plain dependency: edge data is taken if it is the default (zeroed) one,
//! as a null pointer asks, and answered as such, so a query is never lossy.

use std::ffi::{c_int, c_uint, c_void};

use std::sync::{Arc, Weak};

use super::{
    add_dependency, check_edge_data, check_members, exec, graph, graph_nodes, graphs, handles, lock, node, nodes,
    put_edge_data, refuse_memory_nodes,
};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::put;

/// Checks `edges` of `graph` as CUDA's edge calls do: nodes of the graph, no node on both ends,
/// no edge twice, and each edge `present` in the graph or not.
fn check_edges(graph: usize, edges: &[(usize, usize)], present: bool) -> CuResult<()> {
    for (i, &(from, to)) in edges.iter().enumerate() {
        check_members(graph, &[from, to])?;
        let there = nodes().get(to)?.dependencies().contains(&from);
        let why = if from == to {
            "a node cannot depend on itself"
        } else if edges[..i].contains(&(from, to)) {
            "the same edge twice"
        } else if there != present {
            if present {
                "no such edge"
            } else {
                "the edge is there already"
            }
        } else {
            continue;
        };
        return Err(Error::said(code::INVALID_VALUE, format!("{why}: node {from:#x} to node {to:#x}")));
    }
    Ok(())
}

/// Adds the `(from, to)` dependencies to `graph`, all or none: none may be there already, as
/// CUDA's.
fn add_edges(graph: usize, edges: &[(usize, usize)]) -> CuResult<()> {
    check_edges(graph, edges, false)?;
    edges.iter().try_for_each(|&(from, to)| add_dependency(graph, from, to))
}

/// Removes the `(from, to)` dependencies of `graph`, all or none: each must be an edge of it,
/// and a graph with memory nodes keeps its edges, as CUDA's.
pub fn remove_dependencies(graph: usize, edges: &[(usize, usize)]) -> CuResult<()> {
    refuse_change_with_memory(graph)?;
    check_edges(graph, edges, true)?;
    for &(from, to) in edges {
        lock(&nodes().get(to)?.deps).retain(|&d| d != from);
    }
    Ok(())
}

/// `CUDA_ERROR_INVALID_VALUE` if `graph` has memory nodes: its edges and nodes stay, as CUDA's.
fn refuse_change_with_memory(graph: usize) -> CuResult<()> {
    refuse_memory_nodes(graph, "changed")
        .map_err(|_| Error::said(code::INVALID_VALUE, "a graph with memory nodes keeps its edges and nodes"))
}

/// The nodes of its graph that run after node `handle`, in the order they were added.
pub fn dependents(handle: usize) -> CuResult<Vec<usize>> {
    let graph = nodes().get(handle)?.graph;
    let depends = |&n: &usize| nodes().get(n).is_ok_and(|n| n.dependencies().contains(&handle));
    Ok(graph_nodes(graph)?.into_iter().filter(depends).collect())
}

/// `graph`'s edges `(from, to)`: each node's dependencies, the nodes in the order they were
/// added.
pub fn edges(graph: usize) -> CuResult<Vec<(usize, usize)>> {
    let mut edges = Vec::new();
    for to in graph_nodes(graph)? {
        edges.extend(nodes().get(to)?.dependencies().into_iter().map(|from| (from, to)));
    }
    Ok(edges)
}

/// Removes node `handle` from its graph, and every dependency on it; a graph with memory
/// nodes keeps its nodes, as CUDA's.
pub fn destroy_node(handle: usize) -> CuResult<()> {
    let graph = nodes().get(handle)?.graph;
    refuse_change_with_memory(graph)?;
    let record = graphs().get(graph)?;
    lock(&record.nodes).retain(|&n| n != handle);
    for other in graph_nodes(graph)? {
        lock(&nodes().get(other)?.deps).retain(|&d| d != handle);
    }
    nodes().remove(handle).map(drop)
}

/// The node of clone `clone` made from node `original` of the graph it was cloned from.
pub fn find_in_clone(original: usize, clone: usize) -> CuResult<usize> {
    let node = nodes().get(original)?;
    let found = lock(&graphs().get(clone)?.originals).get(&original).cloned();
    let same = found.filter(|(was, _)| Weak::ptr_eq(was, &Arc::downgrade(&node))).map(|(_, copy)| copy);
    let live = same.filter(|n| nodes().get(*n).is_ok_and(|n| n.graph == clone));
    live.ok_or_else(|| Error::said(code::INVALID_VALUE, "the node is not one the graph was cloned from"))
}

/// The `(from[i], to[i])` pairs of the `count` at `from` and `to`.
unsafe fn pairs(from: *const usize, to: *const usize, count: usize) -> CuResult<Vec<(usize, usize)>> {
    let (from, to) = (handles(from, count)?, handles(to, count)?);
    Ok(from.iter().copied().zip(to.iter().copied()).collect())
}

/// Makes each `to[i]` of `graph` run after `from[i]`: all or none, none there already.
unsafe fn add_dependencies(graph: usize, from: *const usize, to: *const usize, count: usize) -> CuResult<()> {
    add_edges(graph, &pairs(from, to, count)?)
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
        check_edge_data(edges, count)?;
        add_dependencies(graph, from, to, count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphRemoveDependencies(
    graph: usize,
    from: *const usize,
    to: *const usize,
    count: usize,
) -> u32 {
    guard("cuGraphRemoveDependencies", || remove_dependencies(graph, &pairs(from, to, count)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphRemoveDependencies_v2(
    graph: usize,
    from: *const usize,
    to: *const usize,
    edges: *const c_void,
    count: usize,
) -> u32 {
    guard("cuGraphRemoveDependencies", || {
        // An edge with other data than the default is none of this graph's.
        check_edge_data(edges, count).map_err(|_| Error::said(code::INVALID_VALUE, "no edge has that edge data"))?;
        remove_dependencies(graph, &pairs(from, to, count)?)
    })
}

/// The room the program gave for a list: with `out` null, none (it asks how many there are);
/// else `*count` entries.
unsafe fn room<'a>(out: *mut usize, count: *mut usize) -> CuResult<(Option<&'a mut [usize]>, &'a mut usize)> {
    let count = count.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
    let out = (!out.is_null()).then(|| std::slice::from_raw_parts_mut(out, *count));
    Ok((out, count))
}

/// Answers `list` the driver's way: with `out` null, how many there are; else up to `*count`
/// of them, the rest of the room nulled, `*count` then how many were written. Edge data, asked
/// for with the list, is the default for each entry written.
unsafe fn list_out(list: &[usize], out: *mut usize, edges: *mut c_void, count: *mut usize) -> CuResult<()> {
    if !edges.is_null() && out.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "edge data is asked for with the nodes it belongs to"));
    }
    let (room, count) = room(out, count)?;
    let Some(room) = room else {
        *count = list.len();
        return Ok(());
    };
    let n = room.len().min(list.len());
    room.fill(0);
    room[..n].copy_from_slice(&list[..n]);
    put_edge_data(edges, n);
    *count = n;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(graph: usize, out: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphGetNodes", || list_out(&graph_nodes(graph)?, out, std::ptr::null_mut(), count))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetRootNodes(graph: usize, out: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphGetRootNodes", || {
        let roots: Vec<usize> =
            graph_nodes(graph)?.into_iter().filter(|&n| node(n).is_ok_and(|n| n.dependencies().is_empty())).collect();
        list_out(&roots, out, std::ptr::null_mut(), count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(handle: usize, kind: *mut c_int) -> u32 {
    guard("cuGraphNodeGetType", || put(kind, node(handle)?.kind.code()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependencies(handle: usize, out: *mut usize, count: *mut usize) -> u32 {
    cuGraphNodeGetDependencies_v2(handle, out, std::ptr::null_mut(), count)
}

/// CUDA 12.3's version, with edge data.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependencies_v2(
    handle: usize,
    out: *mut usize,
    edges: *mut c_void,
    count: *mut usize,
) -> u32 {
    guard("cuGraphNodeGetDependencies", || list_out(&node(handle)?.dependencies(), out, edges, count))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes(handle: usize, out: *mut usize, count: *mut usize) -> u32 {
    cuGraphNodeGetDependentNodes_v2(handle, out, std::ptr::null_mut(), count)
}

/// CUDA 12.3's version, with edge data.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes_v2(
    handle: usize,
    out: *mut usize,
    edges: *mut c_void,
    count: *mut usize,
) -> u32 {
    guard("cuGraphNodeGetDependentNodes", || list_out(&dependents(handle)?, out, edges, count))
}

/// `graph`'s edges, the driver's way: `from` and `to` both null ask how many there are; else
/// up to `*count` edges are written, the rest of the room nulled, with default edge data if
/// asked for.
unsafe fn edges_out(
    graph: usize,
    from: *mut usize,
    to: *mut usize,
    data: *mut c_void,
    count: *mut usize,
) -> CuResult<()> {
    let edges = edges(graph)?;
    if from.is_null() != to.is_null() || (!data.is_null() && from.is_null()) {
        return Err(Error::said(code::INVALID_VALUE, "both ends of the edges are asked for, or neither"));
    }
    let (froms, tos): (Vec<usize>, Vec<usize>) = edges.into_iter().unzip();
    let mut n = count.as_ref().copied().ok_or(Error::Code(code::INVALID_VALUE))?;
    list_out(&tos, to, std::ptr::null_mut(), &mut n)?;
    list_out(&froms, from, data, count)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetEdges(graph: usize, from: *mut usize, to: *mut usize, count: *mut usize) -> u32 {
    guard("cuGraphGetEdges", || edges_out(graph, from, to, std::ptr::null_mut(), count))
}

/// CUDA 12.3's version, with edge data.
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetEdges_v2(
    graph: usize,
    from: *mut usize,
    to: *mut usize,
    data: *mut c_void,
    count: *mut usize,
) -> u32 {
    guard("cuGraphGetEdges", || edges_out(graph, from, to, data, count))
}

#[no_mangle]
pub extern "C" fn cuGraphDestroyNode(handle: usize) -> u32 {
    guard("cuGraphDestroyNode", || destroy_node(handle))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeFindInClone(out: *mut usize, original: usize, clone: usize) -> u32 {
    guard("cuGraphNodeFindInClone", || put(out, find_in_clone(original, clone)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetContainingGraph(handle: usize, out: *mut usize) -> u32 {
    guard("cuGraphNodeGetContainingGraph", || put(out, node(handle)?.graph()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetLocalId(handle: usize, out: *mut c_uint) -> u32 {
    guard("cuGraphNodeGetLocalId", || put(out, node(handle)?.id))
}

/// A node's id for tools: its graph's id and its own, which name it uniquely together.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetToolsId(handle: usize, out: *mut u64) -> u32 {
    guard("cuGraphNodeGetToolsId", || {
        let node = node(handle)?;
        put(out, u64::from(graph(node.graph())?.id) << 32 | u64::from(node.id))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphGetId(handle: usize, out: *mut c_uint) -> u32 {
    guard("cuGraphGetId", || put(out, graph(handle)?.id))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecGetId(handle: usize, out: *mut c_uint) -> u32 {
    guard("cuGraphExecGetId", || put(out, exec(handle)?.id))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecGetFlags(handle: usize, out: *mut u64) -> u32 {
    guard("cuGraphExecGetFlags", || put(out, exec(handle)?.flags))
}
