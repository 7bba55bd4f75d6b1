//! Elastic sets: accelerators lent by an `AC_Get` with a notice, which the scheduler reclaims
//! for queued jobs. A reclaim reaches the program as a [`Preemption`] notice; the program frees
//! the accelerators by its deadline, or their capabilities are revoked then. Leases and their
//! reclaims are stored, so a reclaim survives a restart of the manager.

use super::view::{Pass, View};
use super::{Core, Key};
use crate::model::Lease;

pub use ac_proto::arm::Preemption;

impl Core {
    /// Records as lent the accelerators of set `set` (just granted to `job`) that the view's
    /// scheduler lent.
    pub(super) fn lend_granted(&mut self, view: &View, set: u64, job: &str) {
        let Some(members) = self.sets.get(&set).map(|s| s.accelerators.clone()) else { return };
        for (accel, notice_s) in view.lent_to(job) {
            if members.contains(&accel) && !self.leases.contains_key(&accel) {
                self.leases.insert(accel.clone(), Lease { job: job.to_string(), set, notice_s, reclaim: None });
                self.dirty.insert(Key::Lease(accel));
            }
        }
        // The scheduler plans its reclaims in a pass: one runs at the next tick.
        self.wake_at = Some(0);
    }

    /// Accelerators lent to jobs the batch system runs, and when the first is back in the
    /// plan (its reclaim's deadline, or its notice from `now`): Slurm holds them in a
    /// reservation that ends then, rather than as the jobs' own licenses.
    pub fn lent_to_batch_jobs(&self, now: u64) -> (u32, Option<u64>) {
        let batch = |job: &str| self.jobs.get(job).is_some_and(|j| j.batch.is_some());
        let lent = self.leases.values().filter(|l| batch(&l.job));
        let backs: Vec<u64> = lent.map(|l| l.reclaim.as_ref().map_or(now + l.notice_s, |(by, _)| *by)).collect();
        (backs.len() as u32, backs.into_iter().min())
    }

    /// Until when the plan leaves lent set `set` to its job: the earliest planned start of a
    /// queued job, the batch system's included (a reclaim, with its notice, falls due by then
    /// at the latest, or sooner for a job that arrives meanwhile). `None`: nothing of the set is lent, or no
    /// queued job has a planned start.
    pub fn lent_until(&self, set: u64, now: u64) -> Option<u64> {
        let lease = self.leases.values().find(|l| l.set == set)?;
        let view = self.view_with_batch_queue(&lease.job, now);
        view.expected_starts(now).into_values().flatten().min()
    }

    /// How many accelerators `job` holds that are its own rather than lent to it.
    pub fn firm_held_by(&self, job: &str) -> usize {
        let held = self.held_by(job);
        held.iter().filter(|(accel, _)| self.leases.get(accel).is_none_or(|l| l.job != job)).count()
    }

    /// Carries out a pass's reclaims (the programs are told) and its revocations of reclaimed
    /// accelerators kept past their deadline (their sets lose them).
    pub(super) fn take_back(&mut self, pass: &Pass) {
        for (accelerators, by, for_job) in &pass.reclaimed {
            let mut by_set: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
            for accel in accelerators {
                let Some(lease) = self.leases.get_mut(accel) else { continue };
                lease.reclaim = Some((*by, for_job.clone()));
                by_set.entry(lease.set).or_default().push(accel.clone());
                self.dirty.insert(Key::Lease(accel.clone()));
            }
            for (set, accelerators) in by_set {
                let Some(session) = self.sets.get(&set).map(|s| s.session.clone()) else { continue };
                let notice = Preemption { set, accelerators, revoke_at: *by };
                tracing::info!(set, accelerators = ?notice.accelerators, by, for_job, "reclaim");
                self.notices.entry(session).or_default().push(notice);
                self.reclaim_counts.0 += 1;
            }
        }
        for accel in &pass.revoked {
            let Some(lease) = self.leases.get(accel).cloned() else { continue };
            tracing::warn!(
                accel,
                set = lease.set,
                job = lease.job,
                "reclaimed accelerator kept past its deadline: revoked"
            );
            if let Some(set) = self.sets.get_mut(&lease.set) {
                set.accelerators.retain(|a| a != accel);
                if set.accelerators.is_empty() {
                    self.sets.remove(&lease.set);
                }
                self.dirty.insert(Key::Set(lease.set));
            }
            self.release(accel);
            self.reclaim_counts.1 += 1;
        }
    }
}
