//! Stream capture's state: which streams capture, into which capture sequence, and what their
//! next work runs after. A capture sequence is begun on its origin stream and joined by the
//! streams that wait for an event recorded in it; its graph is [`super`]'s.

use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::{
    add_node_with, check_members, dedup, destroy_graph, lock, new_graph, nodes, result, NodeKind, Params, Replay, Work,
};
use crate::error::{CuResult, Error};

/// One capture sequence: begun on its origin stream, joined by the streams that waited for an
/// event recorded in it.
struct Capture {
    id: u64,
    graph: usize,
    /// Whether the capture made its graph (else it captures into the program's, which a failed
    /// capture leaves to the program).
    owned: bool,
    origin: usize,
    invalidated: bool,
}

/// A capturing stream: its capture, and the nodes its next work runs after.
struct Capturing {
    capture: Arc<Mutex<Capture>>,
    frontier: Vec<usize>,
}

/// The capturing streams, by handle.
fn capturing() -> MutexGuard<'static, HashMap<usize, Capturing>> {
    static CAPTURING: OnceLock<Mutex<HashMap<usize, Capturing>>> = OnceLock::new();
    lock(CAPTURING.get_or_init(Mutex::default))
}

/// How many streams capture: when none does, no call looks further (its fast path).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether stream `handle` is capturing.
pub fn is_capturing(handle: usize) -> bool {
    ACTIVE.load(Ordering::Acquire) != 0 && capturing().contains_key(&handle)
}

/// Begins a capture on stream `handle` into a new graph, or (`into`) into the program's graph,
/// after the nodes of it given.
pub fn begin(handle: usize, into: Option<(usize, &[usize])>) -> CuResult<()> {
    static IDS: AtomicU64 = AtomicU64::new(1);
    let mut streams = capturing();
    if streams.contains_key(&handle) {
        return Err(Error::said(result::ILLEGAL_STATE, "the stream is capturing already"));
    }
    let (graph, owned, frontier) = match into {
        Some((graph, deps)) => {
            check_members(graph, deps)?;
            (graph, false, dedup(deps))
        }
        None => (new_graph(), true, Vec::new()),
    };
    let capture = Capture { id: IDS.fetch_add(1, Ordering::Relaxed), graph, owned, origin: handle, invalidated: false };
    streams.insert(handle, Capturing { capture: Arc::new(Mutex::new(capture)), frontier });
    ACTIVE.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// Ends the capture begun on stream `handle`, answering its graph: every stream that joined it
/// stops capturing. `CUDA_ERROR_STREAM_CAPTURE_UNMATCHED` from a stream that joined but did not
/// begin it; `..._INVALIDATED` if a refused call broke it, `..._UNJOINED` if a stream that
/// joined has work the origin stream's last work does not depend on (neither has a graph).
pub fn end(handle: usize) -> CuResult<usize> {
    let mut streams = capturing();
    let Some(this) = streams.get(&handle) else {
        return Err(Error::said(result::ILLEGAL_STATE, "the stream is not capturing"));
    };
    let capture = this.capture.clone();
    let (graph, owned, invalidated) = {
        let c = lock(&capture);
        if c.origin != handle {
            return Err(Error::said(result::CAPTURE_UNMATCHED, "the capture was begun on another stream"));
        }
        (c.graph, c.owned, c.invalidated)
    };
    let ancestors = ancestors(&this.frontier);
    let members: Vec<usize> =
        streams.iter().filter(|(_, s)| Arc::ptr_eq(&s.capture, &capture)).map(|(&h, _)| h).collect();
    let unjoined = members.iter().any(|h| streams[h].frontier.iter().any(|n| !ancestors.contains(n)));
    for h in &members {
        streams.remove(h);
    }
    ACTIVE.fetch_sub(members.len(), Ordering::AcqRel);
    drop(streams);
    if invalidated || unjoined {
        if owned {
            destroy_graph(graph)?;
        }
        return Err(if invalidated {
            Error::said(result::CAPTURE_INVALIDATED, "the capture was invalidated by a call it could not record")
        } else {
            Error::said(result::CAPTURE_UNJOINED, "a stream that joined the capture was not joined back to its origin")
        });
    }
    Ok(graph)
}

/// `frontier` and every node it depends on, directly or not.
fn ancestors(frontier: &[usize]) -> HashSet<usize> {
    let mut seen: HashSet<usize> = frontier.iter().copied().collect();
    let mut todo = frontier.to_vec();
    while let Some(n) = todo.pop() {
        for d in nodes().get(n).map(|n| n.dependencies()).unwrap_or_default() {
            if seen.insert(d) {
                todo.push(d);
            }
        }
    }
    seen
}

/// What `cuStreamGetCaptureInfo` says of a stream.
#[derive(Debug)]
pub struct CaptureInfo {
    /// `CUstreamCaptureStatus`: 0 none, 1 active, 2 invalidated.
    pub status: c_int,
    /// The capture's id (0 when none).
    pub id: u64,
    /// The graph being captured (0 when none).
    pub graph: usize,
    /// The nodes its next work will run after: valid until the stream's next captured call.
    pub deps: *const usize,
    /// How many.
    pub count: usize,
}

/// What stream `handle` is capturing.
pub fn info(handle: usize) -> CaptureInfo {
    let streams = capturing();
    let Some(s) = streams.get(&handle) else {
        return CaptureInfo { status: 0, id: 0, graph: 0, deps: std::ptr::null(), count: 0 };
    };
    let c = lock(&s.capture);
    let status = if c.invalidated { 2 } else { 1 };
    let deps = if s.frontier.is_empty() { std::ptr::null() } else { s.frontier.as_ptr() };
    CaptureInfo { status, id: c.id, graph: c.graph, deps, count: s.frontier.len() }
}

/// Runs `op` on `stream` now, or, if the stream is capturing, records it as a node of the
/// capture's graph after the stream's last work, to run on the stream a launch names.
pub fn or_record(
    stream: usize,
    kind: NodeKind,
    op: impl Fn(usize) -> CuResult<()> + Send + Sync + 'static,
) -> CuResult<()> {
    or_record_with(stream, kind, || None, op)
}

/// [`or_record`], the node keeping what `params` answers (asked only if the stream captures)
/// for its `cuGraph*NodeGetParams`.
pub fn or_record_with(
    stream: usize,
    kind: NodeKind,
    params: impl FnOnce() -> Option<Params>,
    op: impl Fn(usize) -> CuResult<()> + Send + Sync + 'static,
) -> CuResult<()> {
    if !is_capturing(stream) {
        return op(stream);
    }
    let op: Replay = Arc::new(op);
    let work = Work { replay: Some(op.clone()), params: None };
    let recorded =
        record(stream, |graph, deps| add_node_with(graph, kind, deps, Work { params: params(), ..work }, None))?;
    match recorded {
        Some(_) => Ok(()),
        None => op(stream),
    }
}

/// Records a node on stream `stream` if it is capturing, after its last work: `add` adds it to
/// the capture's graph after the nodes given (and answers its handle, answered here). `None`,
/// and `add` not called, if the stream is not capturing.
pub fn record(stream: usize, add: impl FnOnce(usize, &[usize]) -> CuResult<usize>) -> CuResult<Option<usize>> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return Ok(None);
    }
    let mut streams = capturing();
    let Some(s) = streams.get_mut(&stream) else { return Ok(None) };
    let (graph, invalidated) = {
        let c = lock(&s.capture);
        (c.graph, c.invalidated)
    };
    if invalidated {
        return Err(Error::said(result::CAPTURE_INVALIDATED, "the stream's capture was invalidated"));
    }
    let node = add(graph, &s.frontier)?;
    s.frontier = vec![node];
    Ok(Some(node))
}

/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` if stream `handle` is capturing, its capture then
/// invalidated: `what` cannot be recorded (a synchronization, a library's call).
pub fn refuse_if_capturing(handle: usize, what: &str) -> CuResult<()> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let streams = capturing();
    let Some(s) = streams.get(&handle) else { return Ok(()) };
    lock(&s.capture).invalidated = true;
    Err(Error::said(result::CAPTURE_UNSUPPORTED, format!("{what} on a capturing stream cannot be captured")))
}

/// Stream `handle` is destroyed: a capture it was in is invalidated, and it leaves it.
pub fn stream_destroyed(handle: usize) {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut streams = capturing();
    if let Some(s) = streams.remove(&handle) {
        lock(&s.capture).invalidated = true;
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where an event recorded in a capture stands: the capture and the nodes recorded before it.
#[derive(Debug, Clone)]
pub struct Mark {
    capture: u64,
    nodes: Vec<usize>,
}

/// The mark an event recorded on stream `handle` now gets, if the stream is capturing.
pub fn mark(handle: usize) -> Option<Mark> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let streams = capturing();
    let s = streams.get(&handle)?;
    let capture = lock(&s.capture).id;
    Some(Mark { capture, nodes: s.frontier.clone() })
}

/// Stream `handle` waits for an event marked in a capture: it joins that capture (its next
/// work runs after the event's nodes). `CUDA_ERROR_STREAM_CAPTURE_MERGE` if it captures
/// another; `CUDA_ERROR_CAPTURED_EVENT` if that capture has ended.
pub fn join(handle: usize, mark: &Mark) -> CuResult<()> {
    let mut streams = capturing();
    let capture = streams.values().map(|s| &s.capture).find(|c| lock(c).id == mark.capture).cloned();
    let Some(capture) = capture else {
        return Err(Error::said(result::CAPTURED_EVENT, "the event was recorded in a capture that has ended"));
    };
    match streams.get_mut(&handle) {
        Some(s) if Arc::ptr_eq(&s.capture, &capture) => {
            s.frontier = dedup(&[s.frontier.clone(), mark.nodes.clone()].concat());
        }
        Some(_) => return Err(Error::said(result::CAPTURE_MERGE, "the stream captures another sequence")),
        None => {
            streams.insert(handle, Capturing { capture, frontier: mark.nodes.clone() });
            ACTIVE.fetch_add(1, Ordering::AcqRel);
        }
    }
    Ok(())
}

/// Sets (or, `add`, adds to) the nodes capturing stream `handle`'s next work runs after.
pub fn update_dependencies(handle: usize, deps: &[usize], add: bool) -> CuResult<()> {
    let mut streams = capturing();
    let Some(s) = streams.get_mut(&handle) else {
        return Err(Error::said(result::ILLEGAL_STATE, "the stream is not capturing"));
    };
    let graph = lock(&s.capture).graph;
    check_members(graph, deps)?;
    s.frontier = if add { dedup(&[s.frontier.clone(), deps.to_vec()].concat()) } else { dedup(deps) };
    Ok(())
}
