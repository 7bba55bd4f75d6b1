//! Executable graphs: a graph's nodes as steps in an order its dependencies allow, launched
//! one after another on a stream; a step's work changed or turned off in one executable graph
//! alone; the graph memory its allocation nodes hold (one executable graph at a time).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::memory::GraphAlloc;
use super::users::{self, Held};
use super::{lock, ordered, refuse_memory_nodes, result, users_of, Node, NodeKind, Replay};
use crate::error::{code, CuResult, Error};
use crate::state::Registry;

/// One node's work in an executable graph.
#[derive(Clone)]
pub(super) struct Step {
    /// The node of the graph it was made from (`cuGraphExec*NodeSetParams` name it).
    pub(super) node: Weak<Node>,
    pub(super) kind: NodeKind,
    pub(super) replay: Option<Replay>,
    pub(super) memory: Option<Arc<GraphAlloc>>,
    /// A child graph node's executable graph, which `replay` launches.
    pub(super) child: Option<Arc<Exec>>,
    /// `cuGraphNodeSetEnabled`: a disabled step does nothing at a launch.
    pub(super) enabled: bool,
}

/// An executable graph: its steps in an order its dependencies allow.
pub struct Exec {
    /// Its id (`cuGraphExecGetId`).
    pub id: u32,
    /// The flags it was instantiated with (`cuGraphExecGetFlags`).
    pub flags: u64,
    steps: Mutex<Vec<Step>>,
    /// The graph memory its allocation nodes allocate (its graph's: one executable graph at a
    /// time may hold them).
    allocations: Vec<Arc<GraphAlloc>>,
    /// References on the user objects its graph held when it was made (or last updated from).
    users: Mutex<Held>,
    /// References an update replaced: a launch before it may still use them, so they go with
    /// the executable graph, after its launches.
    retired: Mutex<Vec<Held>>,
    /// Whether it or a child graph it launches holds user objects.
    holds_users: AtomicBool,
    /// The streams it was launched on, while it holds user objects: their work is done before
    /// it lets go of them ([`Exec::launched_on`]).
    launched: Mutex<Vec<usize>>,
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<NodeKind> = lock(&self.steps).iter().map(|s| s.kind).collect();
        f.debug_struct("Exec").field("steps", &kinds).finish()
    }
}

impl Exec {
    fn new(steps: Vec<Step>, allocations: Vec<Arc<GraphAlloc>>, flags: u64, users: Held) -> Self {
        let holds_users = AtomicBool::new(!users.is_empty() || children_hold_users(&steps));
        let (users, retired, launched) = (Mutex::new(users), Mutex::default(), Mutex::default());
        let id = super::next_id();
        Exec { id, flags, steps: Mutex::new(steps), allocations, users, retired, holds_users, launched }
    }

    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: a launch first frees what the last
    /// one allocated and nothing freed since.
    fn auto_free(&self) -> bool {
        self.flags & AUTO_FREE_ON_LAUNCH != 0
    }

    /// Sends each step's work on `stream`, in order; the first error ends the launch. Graph
    /// memory its last launch allocated and nothing freed since is freed first with auto-free,
    /// else the launch is refused (`CUDA_ERROR_INVALID_VALUE`), as CUDA's.
    pub fn replay(&self, stream: usize) -> CuResult<()> {
        for allocation in self.allocations.iter().filter(|a| a.is_live()) {
            if !self.auto_free() {
                return Err(Error::said(
                    code::INVALID_VALUE,
                    "the graph's memory from its last launch is not freed (instantiate with auto-free on launch, or free it)",
                ));
            }
            allocation.freed();
        }
        if self.holds_users.load(Ordering::Acquire) {
            let mut launched = lock(&self.launched);
            if !launched.contains(&stream) {
                launched.push(stream);
            }
        }
        let steps = lock(&self.steps).clone();
        let sent =
            steps.iter().filter(|s| s.enabled).filter_map(|s| s.replay.as_ref()).try_for_each(|replay| replay(stream));
        if sent.is_err() {
            // A launch that failed before its graph's own free nodes ran leaves nothing
            // allocated that only those nodes could free.
            self.allocations.iter().filter(|a| a.freed_in_its_graph()).for_each(|a| a.freed());
        }
        sent
    }

    /// Runs `change` on the step of node `node`, if it is of one of `kinds`;
    /// `CUDA_ERROR_INVALID_VALUE` if the executable graph has no such step.
    fn with_step<T>(&self, node: usize, kinds: &[NodeKind], change: impl FnOnce(&mut Step) -> T) -> CuResult<T> {
        let mut steps = lock(&self.steps);
        // A node's handle is its record's address: the step's node must still be that record.
        let of_node = |s: &&mut Step| Weak::as_ptr(&s.node) as usize == node && s.node.strong_count() > 0;
        match steps.iter_mut().find(of_node) {
            Some(step) if kinds.contains(&step.kind) => Ok(change(step)),
            Some(step) => {
                Err(Error::said(code::INVALID_VALUE, format!("a {:?} node, not a {kinds:?} node", step.kind)))
            }
            None => Err(Error::said(code::INVALID_VALUE, "not a node of the graph the executable graph was made from")),
        }
    }

    /// The step of node `node` (of `kind`) does `replay` at later launches
    /// (`cuGraphExec*NodeSetParams`); the graph's node is unchanged.
    pub fn set_replay(&self, node: usize, kind: NodeKind, replay: Replay) -> CuResult<()> {
        self.with_step(node, &[kind], |step| step.replay = Some(replay))
    }

    /// Node `node`'s step runs at later launches (`enabled`) or not; kernel, copy and memset
    /// nodes only, as CUDA's.
    pub fn set_enabled(&self, node: usize, enabled: bool) -> CuResult<()> {
        self.with_step(node, &TOGGLED, |step| step.enabled = enabled)
    }

    /// Whether node `node`'s step runs at a launch.
    pub fn is_enabled(&self, node: usize) -> CuResult<bool> {
        self.with_step(node, &TOGGLED, |step| step.enabled)
    }

    /// The streams it was launched on, if it or a child graph holds user objects: the program's
    /// destructors run
    /// only after those launches are done, so its destroyer waits for these first.
    pub fn launched_on(&self) -> Vec<usize> {
        lock(&self.launched).clone()
    }

    /// Child graph node `node`'s step launches `child` from the next launch on
    /// (`cuGraphExecChildGraphNodeSetParams`), if `child` has the shape the step's had.
    pub fn set_child(&self, node: usize, child: Arc<Exec>) -> CuResult<()> {
        let holds_users = child.holds_users.load(Ordering::Acquire);
        self.with_step(node, &[NodeKind::Graph], |step| {
            let old = step.child.as_ref().map(|c| c.steps()).unwrap_or_default();
            if !same_shape(&old, &child.steps()) {
                return Err(Error::said(code::INVALID_VALUE, "the graph's nodes differ from the child graph's"));
            }
            step.replay = Some(launching(child.clone()));
            step.child = Some(child);
            Ok(())
        })??;
        if holds_users {
            self.holds_users.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// A copy of its steps.
    fn steps(&self) -> Vec<Step> {
        lock(&self.steps).clone()
    }

    /// Whether it holds graph memory nodes (it cannot then be launched into a capture).
    pub fn has_memory(&self) -> bool {
        lock(&self.steps).iter().any(|s| s.memory.is_some())
    }

    /// Takes `graph`'s nodes as its steps, when they are the same kinds in the same order (the
    /// topology the steps were made from); `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE` otherwise,
    /// and for graphs with memory nodes.
    pub fn update(&self, graph: usize) -> CuResult<()> {
        let new = ordered(graph)?;
        // Compared on a copy: the new graph may launch this very executable graph (a captured
        // launch), whose steps `same_shape` then reads.
        let old = self.steps();
        if old.iter().chain(&new).any(|s| s.memory.is_some()) {
            return Err(Error::said(result::EXEC_UPDATE_FAILURE, "graphs with memory nodes cannot be updated"));
        }
        if !same_shape(&old, &new) {
            return Err(Error::said(
                result::EXEC_UPDATE_FAILURE,
                "the graph's nodes differ from the executable graph's",
            ));
        }
        // The steps keep their nodes (later calls name the first graph's) and whether they run.
        let mut steps = lock(&self.steps);
        for (step, new) in steps.iter_mut().zip(new) {
            step.replay = new.replay;
            step.child = new.child;
        }
        // The graph's user objects replace the ones it held, as CUDA's update does; the old go
        // with the executable graph, after the launches that may still use them.
        let old = std::mem::replace(&mut *lock(&self.users), users_of(graph)?);
        lock(&self.retired).push(old);
        if !lock(&self.users).is_empty() || children_hold_users(&steps) {
            self.holds_users.store(true, Ordering::Release);
        }
        Ok(())
    }
}

/// The kinds of node `cuGraphNodeSetEnabled` can turn off.
const TOGGLED: [NodeKind; 3] = [NodeKind::Kernel, NodeKind::Memcpy, NodeKind::Memset];

impl Drop for Exec {
    fn drop(&mut self) {
        for allocation in &self.allocations {
            allocation.uninstantiated();
        }
        users::release_all(&mut lock(&self.users));
        lock(&self.retired).iter_mut().for_each(users::release_all);
    }
}

/// The work of a step launching `exec`.
pub fn launching(exec: Arc<Exec>) -> Replay {
    Arc::new(move |stream| exec.replay(stream))
}

/// Whether a child graph among `steps` holds user objects.
fn children_hold_users(steps: &[Step]) -> bool {
    steps.iter().filter_map(|s| s.child.as_ref()).any(|child| child.holds_users.load(Ordering::Acquire))
}

/// Whether steps `a` and `b` are the same kinds in the same order with the same dependencies,
/// their child graphs' too: the topology an update keeps.
fn same_shape(a: &[Step], b: &[Step]) -> bool {
    let children = |s: &Step| s.child.as_ref().map(|c| c.steps()).unwrap_or_default();
    let same_steps = a.iter().zip(b).all(|(a, b)| a.kind == b.kind && same_shape(&children(a), &children(b)));
    a.len() == b.len() && same_steps && dependencies(a) == dependencies(b)
}

/// Each step's dependencies, as the positions of the steps they are (none known for a step
/// whose node is gone).
fn dependencies(steps: &[Step]) -> Vec<Vec<usize>> {
    let position = |node: &usize| steps.iter().position(|s| Weak::as_ptr(&s.node) as usize == *node);
    let of = |s: &Step| -> Vec<usize> {
        let mut deps: Vec<usize> =
            s.node.upgrade().map(|n| n.dependencies()).unwrap_or_default().iter().filter_map(position).collect();
        deps.sort_unstable();
        deps
    };
    steps.iter().map(of).collect()
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
pub const AUTO_FREE_ON_LAUNCH: u64 = 1;

fn execs() -> &'static Registry<Exec> {
    static EXECS: OnceLock<Registry<Exec>> = OnceLock::new();
    EXECS.get_or_init(Registry::default)
}

/// An executable graph of `graph`, answering its handle; with [`AUTO_FREE_ON_LAUNCH`] among
/// `flags`, each launch first frees the graph memory the last one left allocated. A graph with
/// allocation nodes has one executable graph at a time (its memory's addresses are fixed): a
/// second is `CUDA_ERROR_NOT_SUPPORTED`.
pub fn instantiate(graph: usize, flags: u64) -> CuResult<usize> {
    let steps = ordered(graph)?;
    let owned = steps.iter().filter(|s| s.kind == NodeKind::MemAlloc).filter_map(|s| s.memory.clone());
    let mut allocations = Vec::new();
    for allocation in owned {
        if !allocation.instantiated() {
            // Dropping the executable graph gives back what it claimed.
            drop(Exec::new(Vec::new(), allocations, flags, Held::default()));
            return Err(Error::said(
                code::NOT_SUPPORTED,
                "a graph with memory allocation nodes has one executable graph at a time: destroy the other first",
            ));
        }
        allocations.push(allocation);
    }
    Ok(execs().insert(Exec::new(steps, allocations, flags, users_of(graph)?)))
}

/// An executable graph of `graph` to launch as a child graph node; graphs with memory nodes are
/// refused, as CUDA refuses them as children.
pub fn instantiate_child(graph: usize) -> CuResult<usize> {
    refuse_memory_nodes(graph, "a child graph")?;
    instantiate(graph, 0)
}

/// Executable graph `handle`.
pub fn exec(handle: usize) -> CuResult<Arc<Exec>> {
    execs().get(handle)
}

/// Forgets executable graph `handle`.
pub fn destroy_exec(handle: usize) -> CuResult<()> {
    execs().remove(handle).map(drop)
}
