//! CUDA graphs, kept here: a graph is its nodes and their dependencies, each node a replay (the
//! call that made it, run again on the stream a launch names) and a kind; stream capture
//! records a capturing stream's work as nodes instead of sending it; an executable graph is its
//! nodes' replays in an order their dependencies allow, and a launch sends them on its stream
//! one after another, as the program would have. Nothing of a graph goes to the backend until
//! it is launched: a launch costs what its calls would.
//!
//! This module holds the graphs and nodes (`exec`: the executable graphs; `capturing`: the
//! capturing streams), and imports none of the modules whose calls it records (they call [`or_record`]);
//! the entry points are [`calls`] (building, instantiating and launching graphs), [`params`]
//! (kernel, copy, memset, host and event nodes: made, their parameters read and changed),
//! [`capture`] (stream capture), [`memory`] (graph memory: allocation and free nodes),
//! [`child`] (child graph nodes and the graphs they own), [`topology`] (edges, dependents,
//! removals, clones' nodes, ids), [`dot`] (the DOT file), [`kernel_attributes`] (a kernel
//! node's launch attributes), [`users`] (user objects) and [`generic`] (the generic node API).
//!
//! Invariants: a node belongs to one graph and depends only on nodes of that graph; a
//! capturing stream's work is either recorded ([`or_record`]) or refused with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture then invalidated
//! ([`refuse_if_capturing`], which every path that sends work to a stream passes): nothing runs
//! on a capturing stream.

pub mod calls;
pub mod capture;
mod capturing;
pub mod child;
mod dot;
mod exec;
pub mod generic;
pub mod kernel_attributes;
pub mod memory;
pub mod params;
pub mod topology;
pub mod users;

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::error::{code, CuResult, Error};
use crate::state::Registry;

pub use capturing::{
    begin, end, info, is_capturing, join, mark, or_record, or_record_with, record, refuse_if_capturing,
    stream_destroyed, update_dependencies, CaptureInfo, Mark,
};
use exec::Step;
pub use exec::{destroy_exec, exec, instantiate, instantiate_child, launching, Exec};
use memory::GraphAlloc;

/// `CUDA_ERROR_ILLEGAL_STATE` and the stream-capture and graph `CUresult`s (cuda.h).
pub mod result {
    pub const ILLEGAL_STATE: u32 = 401;
    pub const CAPTURE_UNSUPPORTED: u32 = 900;
    pub const CAPTURE_INVALIDATED: u32 = 901;
    pub const CAPTURE_MERGE: u32 = 902;
    pub const CAPTURE_UNMATCHED: u32 = 903;
    pub const CAPTURE_UNJOINED: u32 = 904;
    pub const CAPTURED_EVENT: u32 = 907;
    pub const EXEC_UPDATE_FAILURE: u32 = 910;
}

/// A node's work again, on the stream (the program's handle) a launch of its graph names.
pub type Replay = Arc<dyn Fn(usize) -> CuResult<()> + Send + Sync>;

/// What a node was made from, kept for its `cuGraph*NodeGetParams`: each kind's own type (a
/// kernel's prepared launch, a memset's or copy's descriptor, a host function), which the
/// modules making the nodes know ([`params`], `crate::launch`).
pub type Params = Arc<dyn Any + Send + Sync>;

/// A node's work and what it was made from.
#[derive(Clone, Default)]
#[allow(missing_debug_implementations)] // closures and `dyn Any`
pub struct Work {
    /// Its work; none for an empty node.
    pub replay: Option<Replay>,
    /// What it was made from, where its parameters can be read back.
    pub params: Option<Params>,
}

impl Work {
    /// `replay`, with nothing to read back.
    pub fn of(replay: Replay) -> Self {
        Work { replay: Some(replay), params: None }
    }
}

/// A pointer or descriptor from the program that a node keeps to use at each launch, as CUDA's
/// graphs do (the program keeps it valid while the graph may run).
#[derive(Debug, Clone, Copy)]
pub struct Kept<T>(T);

// SAFETY: only the program's own addresses and descriptors, used on whichever thread launches
// the graph, as CUDA uses them.
unsafe impl<T> Send for Kept<T> {}
unsafe impl<T> Sync for Kept<T> {}

impl<T: Copy> Kept<T> {
    /// Keeps `value`.
    pub fn new(value: T) -> Self {
        Kept(value)
    }

    /// The value kept (a method, so that a closure captures the whole `Kept`).
    pub fn get(&self) -> T {
        self.0
    }
}

/// `CUgraphNodeType`, of the kinds served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A kernel launch.
    Kernel,
    /// A copy.
    Memcpy,
    /// A memset.
    Memset,
    /// A host function.
    Host,
    /// Another graph, launched.
    Graph,
    /// Nothing: a join point.
    Empty,
    /// A wait for an event.
    EventWait,
    /// An event's record.
    EventRecord,
    /// An allocation of graph memory.
    MemAlloc,
    /// A free of graph memory.
    MemFree,
}

impl NodeKind {
    /// Its `CUgraphNodeType` value.
    pub fn code(self) -> c_int {
        match self {
            NodeKind::Kernel => 0,
            NodeKind::Memcpy => 1,
            NodeKind::Memset => 2,
            NodeKind::Host => 3,
            NodeKind::Graph => 4,
            NodeKind::Empty => 5,
            NodeKind::EventWait => 6,
            NodeKind::EventRecord => 7,
            NodeKind::MemAlloc => 10,
            NodeKind::MemFree => 11,
        }
    }
}

/// A node of a graph.
pub struct Node {
    /// The graph it belongs to.
    graph: usize,
    /// Its id in that graph (`cuGraphNodeGetLocalId`, the DOT file's).
    pub id: u32,
    /// What it does.
    pub kind: NodeKind,
    /// The nodes it runs after.
    deps: Mutex<Vec<usize>>,
    /// Its work and what it was made from (changed by `cuGraph*NodeSetParams`).
    work: Mutex<Work>,
    /// The graph memory an allocation or free node allocates or frees.
    pub memory: Option<Arc<GraphAlloc>>,
    /// A kernel node's launch attributes that were set and change nothing here (hints:
    /// [`kernel_attributes`]), by `CUlaunchAttributeID`.
    hints: Mutex<HashMap<u32, Hint>>,
}

/// A launch attribute's value (`CUlaunchAttributeValue`, 64 bytes).
pub type Hint = [u8; 64];

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("graph", &self.graph).field("kind", &self.kind).field("deps", &self.deps).finish()
    }
}

impl Node {
    /// The graph it belongs to.
    pub fn graph(&self) -> usize {
        self.graph
    }

    /// The nodes it runs after.
    pub fn dependencies(&self) -> Vec<usize> {
        lock(&self.deps).clone()
    }

    /// What it was made from, if that is kept.
    pub fn params(&self) -> Option<Params> {
        lock(&self.work).params.clone()
    }

    /// Its launch attributes that were set as hints.
    pub fn hints(&self) -> MutexGuard<'_, HashMap<u32, Hint>> {
        lock(&self.hints)
    }
}

/// The event of an event record or wait node, kept as its parameters.
#[derive(Debug, Clone, Copy)]
pub struct EventOf(pub usize);

/// A graph: its nodes in the order they were added, and the references it holds on user
/// objects ([`users`]).
#[derive(Debug)]
pub struct Graph {
    nodes: Mutex<Vec<usize>>,
    users: Mutex<users::Held>,
    /// Its id (`cuGraphGetId`, the DOT file's): one sequence for graphs and executable graphs.
    pub id: u32,
    /// The id its next node takes.
    next_node: AtomicU32,
    /// Who owns it ([`Owner`]).
    owner: AtomicU8,
    /// For a clone, its nodes by the original's handles, each with the original node (a handle
    /// reused by a new node finds nothing): `cuGraphNodeFindInClone`.
    originals: Mutex<HashMap<usize, (Weak<Node>, usize)>>,
}

/// Who owns a graph: the program, or a child graph node ([`child`]), which took a copy or the
/// program's graph itself (moved in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Owner {
    /// The program.
    Program = 0,
    /// A child graph node, a copy of the program's: it takes no memory nodes, and the program
    /// does not destroy it.
    Node = 1,
    /// A child graph node, the program's graph moved in: as `Node`, and neither instantiated
    /// nor updated from alone, nor added to another parent (`CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`).
    Moved = 2,
}

impl Graph {
    fn new(users: users::Held) -> Self {
        Graph {
            nodes: Mutex::default(),
            users: Mutex::new(users),
            id: next_id(),
            next_node: AtomicU32::new(0),
            owner: AtomicU8::new(Owner::Program as u8),
            originals: Mutex::default(),
        }
    }

    /// Who owns it.
    pub fn owner(&self) -> Owner {
        match self.owner.load(Ordering::Acquire) {
            0 => Owner::Program,
            1 => Owner::Node,
            _ => Owner::Moved,
        }
    }

    /// A child graph node takes it (as `owner`), if the program still owns it: whether it did.
    pub fn take(&self, owner: Owner) -> bool {
        let program = Owner::Program as u8;
        self.owner.compare_exchange(program, owner as u8, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The program owns it again (a move that was refused).
    pub fn give_back(&self) {
        self.owner.store(Owner::Program as u8, Ordering::Release);
    }
}

/// `CUDA_ERROR_INVALID_VALUE` if `graph` was moved into a child graph node: `what` is the
/// program's to do with its own graphs only.
pub fn refuse_moved(graph: usize, what: &str) -> CuResult<()> {
    if graphs().get(graph)?.owner() == Owner::Moved {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("a graph moved into a child graph node cannot be {what}"),
        ));
    }
    Ok(())
}

/// The next id of a graph or executable graph (from 1, as CUDA's).
pub fn next_id() -> u32 {
    static IDS: AtomicU32 = AtomicU32::new(1);
    IDS.fetch_add(1, Ordering::Relaxed)
}

/// The `count` handles (or other elements) at `p` (none when `count` is 0; `p` null otherwise
/// is refused).
pub unsafe fn handles<'a, T>(p: *const T, count: usize) -> CuResult<&'a [T]> {
    match (p.is_null(), count) {
        (_, 0) => Ok(&[]),
        (false, n) => Ok(std::slice::from_raw_parts(p, n)),
        (true, _) => Err(Error::Code(code::INVALID_VALUE)),
    }
}

/// The size of `CUgraphEdgeData` (ports, a type and reserved bytes).
const EDGE_DATA: usize = 8;

/// `CUDA_ERROR_NOT_SUPPORTED` for the `count` edge data (`CUgraphEdgeData`) at `edges` unless
/// each is the default (zeroed) one, as a null pointer is: every edge here is a plain
/// dependency (no ports, no programmatic launch).
///
/// # Safety
/// `edges` is null or valid for `count` edge data.
pub unsafe fn check_edge_data(edges: *const std::ffi::c_void, count: usize) -> CuResult<()> {
    if edges.is_null() || std::slice::from_raw_parts(edges as *const u8, count * EDGE_DATA).iter().all(|&b| b == 0) {
        return Ok(());
    }
    Err(Error::said(
        code::NOT_SUPPORTED,
        "graph edge data other than the default (ports, programmatic dependencies) is not supported on remote accelerators",
    ))
}

/// Writes `count` default edge data to `out`, if it is not null: what every edge here has.
///
/// # Safety
/// `out` is null or valid for `count` edge data.
pub unsafe fn put_edge_data(out: *mut std::ffi::c_void, count: usize) {
    if !out.is_null() {
        std::ptr::write_bytes(out as *mut u8, 0, count * EDGE_DATA);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn graphs() -> &'static Registry<Graph> {
    static GRAPHS: OnceLock<Registry<Graph>> = OnceLock::new();
    GRAPHS.get_or_init(Registry::default)
}

fn nodes() -> &'static Registry<Node> {
    static NODES: OnceLock<Registry<Node>> = OnceLock::new();
    NODES.get_or_init(Registry::default)
}

/// A new, empty graph's handle.
pub fn new_graph() -> usize {
    graphs().insert(Graph::new(users::Held::default()))
}

/// Graph `handle`.
pub fn graph(handle: usize) -> CuResult<Arc<Graph>> {
    graphs().get(handle)
}

/// Forgets graph `handle` and its nodes, and lets go of its user objects (executable graphs
/// made from it keep their steps and references).
pub fn destroy_graph(handle: usize) -> CuResult<()> {
    let graph = graphs().remove(handle)?;
    for node in lock(&graph.nodes).drain(..) {
        let _ = nodes().remove(node);
    }
    users::release_all(&mut lock(&graph.users));
    Ok(())
}

/// New references on the user objects graph `handle` holds (for a clone, an executable graph).
fn users_of(handle: usize) -> CuResult<users::Held> {
    Ok(users::retain_all(&lock(&graphs().get(handle)?.users)))
}

/// Graph `handle`'s nodes, in the order they were added.
pub fn graph_nodes(handle: usize) -> CuResult<Vec<usize>> {
    Ok(lock(&graphs().get(handle)?.nodes).clone())
}

/// Node `handle`.
pub fn node(handle: usize) -> CuResult<Arc<Node>> {
    nodes().get(handle)
}

/// Adds a node to `graph` after `deps` (nodes of that graph), answering its handle.
pub fn add_node(graph: usize, kind: NodeKind, deps: &[usize], replay: Option<Replay>) -> CuResult<usize> {
    add_node_with(graph, kind, deps, Work { replay, params: None }, None)
}

/// Adds a node doing `work` to `graph` after `deps`, holding `memory` (an allocation or free
/// node's).
pub fn add_node_with(
    graph: usize,
    kind: NodeKind,
    deps: &[usize],
    work: Work,
    memory: Option<Arc<GraphAlloc>>,
) -> CuResult<usize> {
    let record = graphs().get(graph)?;
    check_members(graph, deps)?;
    if memory.is_some() && record.owner() != Owner::Program {
        return Err(Error::said(code::INVALID_VALUE, "a child graph node's graph takes no memory nodes"));
    }
    let id = record.next_node.fetch_add(1, Ordering::Relaxed);
    let (deps, work, hints) = (Mutex::new(dedup(deps)), Mutex::new(work), Mutex::default());
    let node = Node { graph, id, kind, deps, work, memory, hints };
    let handle = nodes().insert(node);
    lock(&record.nodes).push(handle);
    Ok(handle)
}

/// Node `handle` (of `kind`) does `work` from now on (`cuGraph*NodeSetParams`): executable
/// graphs made before keep what they had.
pub fn set_work(handle: usize, kind: NodeKind, work: Work) -> CuResult<()> {
    let node = nodes().get(handle)?;
    if node.kind != kind {
        return Err(Error::said(code::INVALID_VALUE, format!("a {:?} node, not a {kind:?} node", node.kind)));
    }
    *lock(&node.work) = work;
    Ok(())
}

/// `CUDA_ERROR_NOT_SUPPORTED` if `graph` has memory nodes: such a graph is not cloned, nor a
/// child of another, as CUDA's.
fn refuse_memory_nodes(graph: usize, what: &str) -> CuResult<()> {
    let handles = graph_nodes(graph)?;
    if handles.iter().any(|&h| nodes().get(h).is_ok_and(|n| n.memory.is_some())) {
        return Err(Error::said(code::NOT_SUPPORTED, format!("a graph with memory nodes cannot be {what}")));
    }
    Ok(())
}

/// `CUDA_ERROR_INVALID_VALUE` unless every one of `handles` is a node of `graph`.
fn check_members(graph: usize, handles: &[usize]) -> CuResult<()> {
    for &handle in handles {
        if !nodes().get(handle).is_ok_and(|n| n.graph == graph) {
            return Err(Error::said(code::INVALID_VALUE, format!("node {handle:#x} is not a node of this graph")));
        }
    }
    Ok(())
}

fn dedup(handles: &[usize]) -> Vec<usize> {
    let mut seen = HashSet::new();
    handles.iter().copied().filter(|h| seen.insert(*h)).collect()
}

/// Makes node `to` of `graph` run after node `from` of it (a dependency it has already is
/// kept once: capture's joins add them freely).
pub fn add_dependency(graph: usize, from: usize, to: usize) -> CuResult<()> {
    check_members(graph, &[from, to])?;
    let to = nodes().get(to)?;
    let mut deps = lock(&to.deps);
    if !deps.contains(&from) {
        deps.push(from);
    }
    Ok(())
}

/// A copy of `graph`: new nodes, the same work and dependencies, and references on the same
/// user objects.
pub fn clone_graph(graph: usize) -> CuResult<usize> {
    refuse_memory_nodes(graph, "cloned")?;
    let copy = graphs().insert(Graph::new(users_of(graph)?));
    let (mut renamed, mut originals) = (HashMap::new(), HashMap::new());
    for old in graph_nodes(graph)? {
        let node = nodes().get(old)?;
        // Added in the original's order: a dependency added later may point forward, so the
        // dependencies are renamed once every node has its new handle.
        let work = child::cloned(&lock(&node.work))?;
        let new = add_node_with(copy, node.kind, &[], work, None)?;
        *nodes().get(new)?.hints() = node.hints().clone();
        renamed.insert(old, new);
        originals.insert(old, (Arc::downgrade(&node), new));
    }
    for (old, new) in &renamed {
        let deps: Vec<usize> = nodes().get(*old)?.dependencies().iter().map(|d| renamed[d]).collect();
        *lock(&nodes().get(*new)?.deps) = deps;
    }
    *lock(&graphs().get(copy)?.originals) = originals;
    Ok(copy)
}

/// `graph`'s steps in an order its dependencies allow (the order nodes were added, where the
/// dependencies leave a choice); a cycle is `CUDA_ERROR_INVALID_VALUE`.
fn ordered(graph: usize) -> CuResult<Vec<Step>> {
    let handles = graph_nodes(graph)?;
    let records = handles.iter().map(|&h| nodes().get(h)).collect::<CuResult<Vec<_>>>()?;
    let index: HashMap<usize, usize> = handles.iter().enumerate().map(|(i, &h)| (h, i)).collect();
    let deps: Vec<Vec<usize>> = records.iter().map(|n| n.dependencies().iter().map(|d| index[d]).collect()).collect();
    let mut done = vec![false; handles.len()];
    let mut order = Vec::with_capacity(handles.len());
    while order.len() < handles.len() {
        let next = (0..handles.len()).find(|&i| !done[i] && deps[i].iter().all(|&d| done[d]));
        let Some(i) = next else {
            return Err(Error::said(code::INVALID_VALUE, "the graph's dependencies make a cycle"));
        };
        done[i] = true;
        let n = &records[i];
        // A child graph node's graph is made executable with its parent, as it is now.
        let child = if n.kind == NodeKind::Graph { Some(child::executable(n.params())?) } else { None };
        let replay = match &child {
            Some(exec) => Some(launching(exec.clone())),
            None => lock(&n.work).replay.clone(),
        };
        let node = Arc::downgrade(n);
        order.push(Step { node, kind: n.kind, replay, memory: n.memory.clone(), child, enabled: true });
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Option<Replay> {
        Some(Arc::new(|_| Ok(())))
    }

    #[test]
    fn steps_follow_dependencies_added_after_their_nodes() {
        let g = new_graph();
        let a = add_node(g, NodeKind::Kernel, &[], noop()).unwrap();
        let b = add_node(g, NodeKind::Memset, &[], noop()).unwrap();
        let c = add_node(g, NodeKind::Host, &[], noop()).unwrap();
        add_dependency(g, c, a).unwrap();
        add_dependency(g, b, c).unwrap();
        let kinds: Vec<NodeKind> = ordered(g).unwrap().iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [NodeKind::Memset, NodeKind::Host, NodeKind::Kernel]);
        add_dependency(g, a, b).unwrap();
        assert_eq!(ordered(g).err().map(|e| e.code()), Some(code::INVALID_VALUE), "a cycle");
        destroy_graph(g).unwrap();
        assert!(node(a).is_err(), "a destroyed graph's nodes are gone");
    }

    #[test]
    fn a_node_depends_only_on_nodes_of_its_graph() {
        let (g, h) = (new_graph(), new_graph());
        let a = add_node(g, NodeKind::Empty, &[], None).unwrap();
        assert!(add_node(h, NodeKind::Empty, &[a], None).is_err());
        let b = add_node(h, NodeKind::Empty, &[], None).unwrap();
        assert!(add_dependency(g, b, a).is_err());
    }

    #[test]
    fn a_clone_keeps_forward_dependencies() {
        let g = new_graph();
        let a = add_node(g, NodeKind::Kernel, &[], noop()).unwrap();
        let b = add_node(g, NodeKind::Memcpy, &[], noop()).unwrap();
        add_dependency(g, b, a).unwrap();
        let copy = clone_graph(g).unwrap();
        let kinds: Vec<NodeKind> = ordered(copy).unwrap().iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [NodeKind::Memcpy, NodeKind::Kernel]);
        assert!(graph_nodes(copy).unwrap().iter().all(|n| ![a, b].contains(n)));
    }

    #[test]
    fn a_capture_records_a_fork_and_its_join() {
        let (origin, side) = (0x5000_0001, 0x5000_0002);
        begin(origin, None).unwrap();
        or_record(origin, NodeKind::Kernel, |_| panic!("recorded, not run")).unwrap();
        let forked = mark(origin).unwrap();
        join(side, &forked).unwrap();
        or_record(side, NodeKind::Memset, |_| panic!("recorded, not run")).unwrap();
        or_record(origin, NodeKind::Kernel, |_| panic!("recorded, not run")).unwrap();
        assert_eq!(
            end(origin).err().map(|e| e.code()),
            Some(result::CAPTURE_UNJOINED),
            "the side stream was not joined"
        );
        assert!(!is_capturing(side), "an ended capture's streams stop capturing");

        begin(origin, None).unwrap();
        or_record(origin, NodeKind::Kernel, |_| Ok(())).unwrap();
        join(side, &mark(origin).unwrap()).unwrap();
        or_record(side, NodeKind::Memset, |_| Ok(())).unwrap();
        assert_eq!(end(side).err().map(|e| e.code()), Some(result::CAPTURE_UNMATCHED));
        join(origin, &mark(side).unwrap()).unwrap();
        assert_eq!(info(origin).count, 2, "the join: after both streams' work");
        let graph = end(origin).unwrap();
        assert_eq!(graph_nodes(graph).unwrap().len(), 2);
        assert_eq!(info(origin).status, 0);
    }

    #[test]
    fn a_refused_call_invalidates_the_capture() {
        let stream = 0x5000_0003;
        begin(stream, None).unwrap();
        assert_eq!(refuse_if_capturing(stream, "a synchronization").unwrap_err().code(), result::CAPTURE_UNSUPPORTED);
        assert_eq!(info(stream).status, 2);
        assert_eq!(or_record(stream, NodeKind::Empty, |_| Ok(())).unwrap_err().code(), result::CAPTURE_INVALIDATED);
        assert_eq!(end(stream).unwrap_err().code(), result::CAPTURE_INVALIDATED);
        assert!(refuse_if_capturing(stream, "a synchronization").is_ok(), "no longer capturing");
    }
}
