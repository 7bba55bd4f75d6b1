//! `cuGraphDebugDotPrint`: a graph written as a DOT file, as CUDA's tools read it: a cluster
//! per graph (`graph_<id>`), a box per node named by its graph's id and its own
//! (`graph_<id>_node_<id>`, the ids `cuGraphGetId` and `cuGraphNodeGetLocalId` answer) and
//! labelled with its type (and a kernel's name), an arrow per dependency; a child graph
//! node's graph is a cluster inside its parent's. Every flag gives the same file: node
//! parameters are not written.

use std::ffi::{c_char, c_uint, CStr};
use std::fmt::Write as _;

use super::child::embedded_graph;
use super::params::kernel_name;
use super::{graph, graph_nodes, node, NodeKind};
use crate::error::{code, CuResult, Error};
use crate::guard;

/// `CUresult` `CUDA_ERROR_OPERATING_SYSTEM`: the file could not be written.
const OPERATING_SYSTEM: u32 = 304;

/// A node's label: its type as CUDA's files spell it, and a kernel's name.
fn label(handle: usize, kind: NodeKind) -> String {
    let name = match kind {
        NodeKind::Kernel => return format!("KERNEL\\n{}", kernel_name(handle).unwrap_or_default()),
        NodeKind::Memcpy => "MEMCPY",
        NodeKind::Memset => "MEMSET",
        NodeKind::Host => "HOST",
        NodeKind::Graph => "CHILD_GRAPH",
        NodeKind::Empty => "EMPTY",
        NodeKind::EventWait => "EVENT_WAIT",
        NodeKind::EventRecord => "EVENT_RECORD",
        NodeKind::MemAlloc => "MEM_ALLOC",
        NodeKind::MemFree => "MEM_FREE",
    };
    name.to_string()
}

/// Graph `handle` as a DOT cluster, appended to `out`, its child graphs' inside it.
fn write_cluster(handle: usize, out: &mut String) -> CuResult<()> {
    let id = graph(handle)?.id;
    let name = |node: u32| format!("\"graph_{id}_node_{node}\"");
    let _ = writeln!(out, "subgraph cluster_{id} {{\nlabel=\"graph_{id}\" graph[style=\"dashed\"];");
    let members = graph_nodes(handle)?;
    for &member in &members {
        let n = node(member)?;
        let text = label(member, n.kind);
        let _ = writeln!(out, "{}[style=\"solid\" shape=\"rectangle\" label=\"{}\\n{text}\"];", name(n.id), n.id);
        if let Ok(child) = embedded_graph(member) {
            write_cluster(child, out)?;
        }
    }
    for &member in &members {
        let n = node(member)?;
        for dep in n.dependencies() {
            let _ = writeln!(out, "{} -> {};", name(node(dep)?.id), name(n.id));
        }
    }
    out.push_str("}\n");
    Ok(())
}

/// Graph `handle` as a DOT file's text.
pub fn dot_of(handle: usize) -> CuResult<String> {
    let mut out = String::from("digraph dot {\n");
    write_cluster(handle, &mut out)?;
    out.push_str("}\n");
    Ok(out)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDebugDotPrint(handle: usize, path: *const c_char, _flags: c_uint) -> u32 {
    guard("cuGraphDebugDotPrint", || {
        if path.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let text = dot_of(handle)?;
        let path = CStr::from_ptr(path).to_string_lossy().into_owned();
        std::fs::write(&path, text).map_err(|e| Error::said(OPERATING_SYSTEM, format!("writing {path}: {e}")))
    })
}
