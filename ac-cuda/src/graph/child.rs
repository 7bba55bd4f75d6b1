//! Child graph nodes: a node that owns a graph (a copy of the program's, or the program's own,
//! moved into it), which the program may still read and change through
//! `cuGraphChildGraphNodeGetGraph`, and which is made executable with its parent graph, as it
//! stands then. An executable graph's child step can launch another graph of the same shape
//! (`cuGraphExecChildGraphNodeSetParams`).
//!
//! A graph launched on a capturing stream is recorded as a child graph node too, launching the
//! executable graph itself: that node owns no graph to read back.
//!
//! Invariant: a graph is embedded in at most one node, and never in itself or in a graph it
//! embeds (a move that would close such a loop is refused): instantiation recurses into
//! embedded graphs and ends.

use std::sync::Arc;

use super::{
    add_node_with, clone_graph, destroy_exec, destroy_graph, exec, graph, graph_nodes, handles, instantiate_child,
    node, refuse_memory_nodes, refuse_moved, set_work, Exec, NodeKind, Owner, Params, Work,
};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::put;

/// The graph a child graph node owns: it goes with the node.
#[derive(Debug)]
pub struct Embedded(usize);

impl Drop for Embedded {
    fn drop(&mut self) {
        let _ = destroy_graph(self.0);
    }
}

/// The work of a node owning `child`: a copy of it, or (`moved`) the graph itself, which is
/// then the node's.
pub(super) fn embedding(child: usize, moved: bool) -> CuResult<Work> {
    refuse_memory_nodes(child, "a child graph")?;
    let embedded = if moved { child } else { clone_graph(child)? };
    let owner = if moved { Owner::Moved } else { Owner::Node };
    if !graph(embedded)?.take(owner) {
        return Err(Error::said(code::INVALID_VALUE, "the graph is another child graph node's already"));
    }
    let params: Params = Arc::new(Embedded(embedded));
    Ok(Work { replay: None, params: Some(params) })
}

/// `work`, for a clone of its node: a child graph node's graph copied, anything else shared
/// (a node's parameters are read-only once made).
pub(super) fn cloned(work: &Work) -> CuResult<Work> {
    match work.params.as_ref().and_then(|p| p.downcast_ref::<Embedded>()) {
        Some(Embedded(child)) => embedding(*child, false),
        None => Ok(work.clone()),
    }
}

/// The executable graph a child graph node with `params` launches: its graph's, made now, or
/// the executable graph a captured launch launches.
pub(super) fn executable(params: Option<Params>) -> CuResult<Arc<Exec>> {
    let params = params.ok_or(Error::said(code::INVALID_VALUE, "a child graph node without its graph"))?;
    if let Some(Embedded(child)) = params.downcast_ref::<Embedded>() {
        return made_executable(*child);
    }
    params.downcast::<Exec>().map_err(|_| Error::said(code::INVALID_VALUE, "a child graph node without its graph"))
}

/// An executable graph of `child`, held by its caller alone.
fn made_executable(child: usize) -> CuResult<Arc<Exec>> {
    let handle = instantiate_child(child)?;
    let exec = exec(handle)?;
    destroy_exec(handle)?;
    Ok(exec)
}

/// The graph child graph node `handle` owns.
pub fn embedded_graph(handle: usize) -> CuResult<usize> {
    let node = node(handle)?;
    if node.kind != NodeKind::Graph {
        return Err(Error::said(code::INVALID_VALUE, format!("a {:?} node, not a child graph node", node.kind)));
    }
    match node.params().as_ref().and_then(|p| p.downcast_ref::<Embedded>()) {
        Some(Embedded(child)) => Ok(*child),
        None => Err(Error::said(
            code::NOT_SUPPORTED,
            "a graph launched into a capture is recorded as its executable graph: there is no graph to read back",
        )),
    }
}

/// Whether `inner` is `outer` or a graph embedded in it, at any depth.
fn embeds(outer: usize, inner: usize) -> bool {
    outer == inner
        || graph_nodes(outer).unwrap_or_default().into_iter().any(|n| embedded_graph(n).is_ok_and(|g| embeds(g, inner)))
}

/// Gives `put` (which makes or changes a node of `parent`) the work of a node owning `child`
/// (`moved` in, or a copy).
fn embed_in(parent: usize, child: usize, moved: bool, put: impl FnOnce(Work) -> CuResult<()>) -> CuResult<()> {
    graph(parent)?;
    if moved && embeds(child, parent) {
        return Err(Error::said(code::INVALID_VALUE, "a graph cannot be moved into itself or into a graph it holds"));
    }
    refuse_moved(child, "added to another graph")?;
    let work = embedding(child, moved)?;
    let done = put(work.clone());
    if done.is_err() && moved {
        // A refused call leaves the program its graph.
        disown(work);
    }
    done
}

/// Adds a child graph node owning `child` (`moved` in, or a copy) to `parent`, after the
/// `count` nodes at `deps`.
pub(super) unsafe fn add_child(
    out: *mut usize,
    parent: usize,
    deps: *const usize,
    count: usize,
    child: usize,
    moved: bool,
) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let deps = handles(deps, count)?;
    embed_in(parent, child, moved, |work| put(out, add_node_with(parent, NodeKind::Graph, deps, work, None)?))
}

/// Child graph node `handle` owns `child` (`moved` in, or a copy) from now on
/// (`cuGraphNodeSetParams`); its graph goes, and executable graphs made before keep theirs.
pub(super) fn set_child(handle: usize, (child, moved): (usize, bool)) -> CuResult<()> {
    embed_in(node(handle)?.graph(), child, moved, |work| set_work(handle, NodeKind::Graph, work))
}

/// Gives a moved graph back to the program: `work`'s node was not added.
fn disown(work: Work) {
    let embedded = work.params.and_then(|p| p.downcast::<Embedded>().ok()).and_then(|e| Arc::try_unwrap(e).ok());
    if let Some(embedded) = embedded {
        if let Ok(record) = graph(embedded.0) {
            record.give_back();
        }
        std::mem::forget(embedded);
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    child: usize,
) -> u32 {
    guard("cuGraphAddChildGraphNode", || add_child(out, graph, deps, count, child, false))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphChildGraphNodeGetGraph(handle: usize, out: *mut usize) -> u32 {
    guard("cuGraphChildGraphNodeGetGraph", || put(out, embedded_graph(handle)?))
}

#[no_mangle]
pub extern "C" fn cuGraphExecChildGraphNodeSetParams(handle: usize, node: usize, child: usize) -> u32 {
    guard("cuGraphExecChildGraphNodeSetParams", || exec(handle)?.set_child(node, made_executable(child)?))
}

#[cfg(test)]
mod tests {
    use super::super::{add_node, new_graph, NodeKind};
    use super::*;

    #[test]
    fn a_moved_graph_is_the_nodes_and_never_holds_itself() {
        let (parent, child) = (new_graph(), new_graph());
        add_node(child, NodeKind::Empty, &[], None).unwrap();
        let mut node = 0;
        unsafe { add_child(&mut node, parent, std::ptr::null(), 0, child, true) }.unwrap();
        assert_eq!(embedded_graph(node).unwrap(), child, "moved, not copied");
        assert_eq!(graph(child).unwrap().owner(), Owner::Moved);
        assert_eq!(super::super::calls::cuGraphDestroy(child), code::INVALID_VALUE, "the node's, not the program's");
        let inner = new_graph();
        let refused = unsafe { add_child(&mut 0, child, std::ptr::null(), 0, parent, true) };
        assert_eq!(refused.unwrap_err().code(), code::INVALID_VALUE, "the parent moved into its own child");
        let bad_dep = [0xdead_usize];
        let refused = unsafe { add_child(&mut 0, parent, bad_dep.as_ptr(), 1, inner, true) };
        assert!(refused.is_err());
        assert_eq!(graph(inner).unwrap().owner(), Owner::Program, "a refused move leaves the program its graph");
        let refused = unsafe { add_child(&mut 0, inner, std::ptr::null(), 0, child, false) };
        assert_eq!(refused.unwrap_err().code(), code::INVALID_VALUE, "a moved graph added to another parent");
        let mut exec = 0;
        let alone = unsafe { super::super::calls::cuGraphInstantiateWithFlags(&mut exec, child, 0) };
        assert_eq!(alone, code::INVALID_VALUE, "a moved graph instantiated alone");
        destroy_graph(parent).unwrap();
        assert!(graph(child).is_err(), "the moved graph went with its node");
        assert!(graph(inner).is_ok());
    }

    #[test]
    fn a_clone_copies_a_child_graph_nodes_graph() {
        let (parent, child) = (new_graph(), new_graph());
        let mut node = 0;
        unsafe { add_child(&mut node, parent, std::ptr::null(), 0, child, false) }.unwrap();
        let copy = clone_graph(parent).unwrap();
        let copied = graph_nodes(copy).unwrap()[0];
        let (mine, its) = (embedded_graph(node).unwrap(), embedded_graph(copied).unwrap());
        assert!(mine != child && its != child && mine != its, "each node owns a graph of its own");
        destroy_graph(copy).unwrap();
        assert!(graph(its).is_err() && graph(mine).is_ok());
    }
}
