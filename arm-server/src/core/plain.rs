//! Decisions of the scheduling core that are plain enough to know without building its view
//! (see `view.rs`), taken on the hot path of `AC_Get`: a refusal when fewer accelerators are
//! idle than a request needs, and a grant when nothing is queued or reserved that it could
//! delay. Each is exactly the core's answer (`tests.rs` compares them); anything less plain
//! goes to the core.

use ac_proto::arm::Ask;
use arm_sched::Rejection;

use super::view::{usable_free, usable_free_ids, Decision};
use super::{Core, Key};
use crate::model::JobState;

impl Core {
    /// The core's answer to `job`'s request `ask`, if it is plain: `None` when only the core
    /// can tell. Plain are requests that do not borrow, of a job with no spare units of its own
    /// (the core would grow it into them first) that the pool can hold; then
    ///
    /// - fewer usable idle accelerators than `ask.min`, and no wait: refused, as the core's
    ///   first check refuses (unless an open reservation holds some of the idle ones, which
    ///   changes the count the core words);
    /// - enough of them, nothing queued (here or in the batch system) and no reservation: no
    ///   grant can delay anyone, so the core grants up to `ask.max` of them, the first in
    ///   host and device order.
    pub(super) fn plain_decision(&self, job: &str, ask: &Ask, now: u64) -> Option<Decision> {
        if ask.preemptible {
            return None;
        }
        let devices = || self.hosts.values().flat_map(|h| &h.devices);
        let pool = devices().count() as u32;
        let own_spare =
            devices().filter_map(|d| d.holder.as_ref()).any(|h| h.job == job && h.preallocated && h.set.is_none());
        let footprint = self.jobs.get(job).map(|j| (j.nodes.len() as u32 * j.acpn).max(j.peak.unwrap_or(0)))?;
        // More than the pool is the core's error (or its refusal to plan the job) to word.
        if own_spare || ask.min > pool || footprint > pool {
            return None;
        }
        let idle = usable_free(&self.hosts) as u32;
        if idle < ask.min {
            let reservation_open = self.reservations.values().any(|r| r.start <= now && now < r.end());
            return (ask.wait_s == 0 && !reservation_open)
                .then(|| Decision::Rejected(Rejection::NoIdleUnits { idle }.to_string()));
        }
        let queued = !self.batch_queue.is_empty() || self.jobs.values().any(|j| j.state == JobState::Queued);
        if queued || !self.reservations.is_empty() {
            return None;
        }
        let take = ask.max.min(pool) as usize;
        Some(Decision::Granted(usable_free_ids(&self.hosts).take(take).collect()))
    }

    /// Rolls the fairness ledger over to `now`, as the core does at every request.
    pub(super) fn roll_ledger(&mut self, now: u64) {
        let before = self.ledger.interval_start;
        self.ledger.roll(now, &self.scheduling.dynamic);
        // The ledger changes only when its interval starts or moves on.
        if self.ledger.interval_start != before {
            self.dirty.insert(Key::Ledger);
        }
    }
}
