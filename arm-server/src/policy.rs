//! Who gets which accelerators: the one interface the scheduling issue replaces with the full
//! policy. Here, the paper's baseline: static requests in FIFO order, dynamic requests granted
//! when enough accelerators are free.

use std::collections::BTreeMap;

use crate::model::{Host, Job};

/// A read-only view of the pool.
#[derive(Debug)]
pub struct Pool<'a> {
    /// Hosts by name.
    pub hosts: &'a BTreeMap<String, Host>,
}

impl Pool<'_> {
    /// Free accelerators on hosts that are up and not draining, in a stable order.
    pub fn usable_free(&self) -> Vec<String> {
        self.hosts
            .values()
            .filter(|h| h.up && !h.draining)
            .flat_map(|h| h.devices.iter().filter(|d| d.holder.is_none()).map(|d| h.accelerator_id(d.index)))
            .collect()
    }
}

/// A scheduling policy.
pub trait Policy {
    /// The next queued job to bind and its accelerators (node by node, `acpn` each), if any.
    fn next_static(&self, queue: &[&Job], pool: &Pool<'_>) -> Option<(String, Vec<String>)>;
    /// Accelerators for a dynamic request of `count`, or `None` to reject it.
    fn grant_dynamic(&self, queue: &[&Job], pool: &Pool<'_>, count: u32) -> Option<Vec<String>>;
}

/// First come, first served; no backfilling; dynamic requests take any free accelerators.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn next_static(&self, queue: &[&Job], pool: &Pool<'_>) -> Option<(String, Vec<String>)> {
        let head = queue.first()?;
        let needed = head.nodes.len() * head.acpn as usize;
        let free = pool.usable_free();
        (free.len() >= needed).then(|| (head.id.clone(), free.into_iter().take(needed).collect()))
    }

    fn grant_dynamic(&self, _queue: &[&Job], pool: &Pool<'_>, count: u32) -> Option<Vec<String>> {
        let free = pool.usable_free();
        (free.len() >= count as usize).then(|| free.into_iter().take(count as usize).collect())
    }
}
