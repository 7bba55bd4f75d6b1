//! Elastic units (malleable grants): units lent to a running job that the scheduler may take
//! back, with notice, the moment a queued job could start with them.
//!
//! The planner counts a lent unit free from `now + notice` (or from its reclaim's deadline),
//! never later than its job's walltime end; so lending delays no plan by more than the
//! notice, and that is all the fairness ledger is charged. A reclaim is issued when it comes
//! due: when a reserved job's planned start is no further away than the notice and it would
//! start later if the lent units stayed to their jobs' ends. It takes the fewest units, and
//! holds them for that job; a job that keeps them past the deadline loses them
//! ([`Event::Revoked`]).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::profile::Profile;
use crate::{Error, Event, JobId, Time, UnitId};

use super::{Scheduler, Slot};

/// One lent unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lease {
    /// The job it is lent to.
    pub job: JobId,
    /// How much notice a reclaim gives, seconds.
    pub notice: Time,
    /// Being reclaimed: due back by this time, for this queued job.
    pub reclaim: Option<(Time, JobId)>,
}

/// A lent unit a reclaim could take: when the plan has it back, when its job ends, and how
/// many units that job holds (losing one of many costs the least speed-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    back: Time,
    held: Reverse<usize>,
    unit: UnitId,
    end: Time,
}

impl Scheduler {
    /// Records `units`, just granted to `job`, as lent with `notice`.
    pub(super) fn lend(&mut self, job: JobId, units: &[UnitId], notice: Time, now: Time) {
        for &u in units {
            self.leases.insert(u, Lease { job, notice, reclaim: None });
        }
        // Reclaims are planned in a pass: ask for one now.
        self.reclaim_due = Some(now);
    }

    /// Records that `unit`, held by `job`, is lent with `notice` and maybe being reclaimed
    /// (how `arm-server` rebuilds the core from its store).
    pub fn restore_lease(
        &mut self,
        unit: UnitId,
        job: JobId,
        notice: Time,
        reclaim: Option<(Time, JobId)>,
    ) -> Result<(), Error> {
        if self.units.get(unit as usize).map(|e| e.slot) != Some(Slot::Busy(job)) {
            return Err(Error::NotHeld { job, unit });
        }
        self.leases.insert(unit, Lease { job, notice, reclaim });
        Ok(())
    }

    /// Holds free `unit`, given back by a reclaim for queued `job`, for that job until it
    /// starts (how `arm-server` carries the holding from one pass's view to the next). Nothing
    /// happens if the unit is not free or the job not queued.
    pub fn hold_returned(&mut self, unit: UnitId, job: JobId) {
        if self.free.contains(&unit) && self.queued.contains(&job) {
            self.returned.insert(unit, job);
        }
    }

    /// A job's lent units, with their notice and, if reclaimed, the deadline.
    pub fn lent_units(&self, job: JobId) -> Vec<(UnitId, Time, Option<Time>)> {
        let lent = self.leases.iter().filter(|(_, l)| l.job == job);
        lent.map(|(u, l)| (*u, l.notice, l.reclaim.map(|(by, _)| by))).collect()
    }

    /// When the plan has a lent unit back: its reclaim's deadline, or the notice from now;
    /// never after its job's end, never at `now` (it is still in use).
    fn back_at(&self, lease: &Lease, now: Time) -> Time {
        let end = self.jobs.get(&lease.job).and_then(|j| j.run.as_ref()).map_or(Time::MAX, |r| r.end);
        let back = lease.reclaim.map_or(now.saturating_add(lease.notice), |(by, _)| by);
        back.min(end).max(now + 1)
    }

    /// Usable lent units per job (the planner releases them early, not at the job's end).
    pub(super) fn lent_per_job(&self) -> BTreeMap<JobId, u32> {
        let mut lent = BTreeMap::new();
        for (u, lease) in &self.leases {
            if self.units[*u as usize].usable {
                *lent.entry(lease.job).or_insert(0) += 1;
            }
        }
        lent
    }

    /// When each usable lent unit comes back in the plan.
    pub(super) fn lent_releases(&self, now: Time) -> impl Iterator<Item = (Time, u32)> + '_ {
        let usable = self.leases.iter().filter(|(u, _)| self.units[**u as usize].usable);
        usable.map(move |(_, lease)| (self.back_at(lease, now), 1))
    }

    /// Takes the reclaimed units their jobs kept past the deadline.
    pub(super) fn revoke_overdue(&mut self, now: Time, events: &mut Vec<Event>) {
        let overdue: Vec<(UnitId, JobId, JobId)> = self
            .leases
            .iter()
            .filter_map(|(u, l)| l.reclaim.filter(|(by, _)| *by <= now).map(|(_, for_job)| (*u, l.job, for_job)))
            .collect();
        let mut revoked: BTreeMap<JobId, Vec<UnitId>> = BTreeMap::new();
        for (u, job, for_job) in overdue {
            self.charge(job, now);
            self.leases.remove(&u);
            if let Some(run) = self.jobs.get_mut(&job).and_then(|j| j.run.as_mut()) {
                run.owned.retain(|x| *x != u);
            }
            self.free_unit(u);
            self.returned.insert(u, for_job);
            revoked.entry(job).or_default().push(u);
        }
        events.extend(revoked.into_iter().map(|(job, units)| Event::Revoked { job, units }));
    }

    /// For a queued job planned on `profile`: if it would start later with the lent units
    /// kept to their jobs' ends, reclaims the fewest that give it its planned start, once the
    /// start is within their notice (until then, notes when to come back). Returns the start
    /// if it reclaimed.
    pub(super) fn reclaim_for(
        &mut self,
        job: JobId,
        profile: &Profile,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Option<Time> {
        let spec = &self.jobs[&job].spec;
        let (size, duration) = (spec.footprint(), spec.duration());
        let start = profile.earliest(size, duration, now)?;
        let candidates = self.reclaim_candidates(now);
        // The profile with the candidates after the first `k` kept by their jobs to the end.
        let keeping = |k: usize| {
            let mut kept = profile.clone();
            for c in &candidates[k..] {
                kept.reserve(c.back, c.end, 1);
            }
            kept
        };
        let starts_by = |k: usize| keeping(k).earliest(size, duration, now).is_some_and(|s| s <= start);
        if candidates.is_empty() || starts_by(0) {
            return None;
        }
        // More units back never start it later, so the fewest is found by bisection.
        let (mut lo, mut hi) = (1, candidates.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if starts_by(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let chosen = &candidates[..lo];
        let latest = chosen.iter().map(|c| c.back).max().expect("at least one");
        if start > latest {
            // The notice still fits before the start: reclaiming now would only cost the
            // holders their speed-up sooner.
            let due = now + (start - latest);
            self.reclaim_due = Some(self.reclaim_due.map_or(due, |d| d.min(due)));
            return None;
        }
        let mut reclaimed: BTreeMap<JobId, (Vec<UnitId>, Time)> = BTreeMap::new();
        for c in chosen {
            let lease = self.leases.get_mut(&c.unit).expect("a candidate is lent");
            lease.reclaim = Some((c.back, job));
            let (units, by) = reclaimed.entry(lease.job).or_default();
            units.push(c.unit);
            *by = (*by).max(c.back);
        }
        for (holder, (units, by)) in reclaimed {
            events.push(Event::Reclaim { job: holder, units, by, for_job: job });
        }
        Some(start)
    }

    /// The longest notice of any lent unit: a queued job that cannot start before then
    /// gains nothing from a reclaim now.
    pub(super) fn longest_notice(&self) -> Option<Time> {
        self.leases.values().map(|l| l.notice).max()
    }

    /// Lent units not yet reclaimed whose reclaim would bring them back before their job ends,
    /// in the order a reclaim takes them.
    fn reclaim_candidates(&self, now: Time) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = self
            .leases
            .iter()
            .filter(|(u, l)| l.reclaim.is_none() && self.units[**u as usize].usable)
            .filter_map(|(u, l)| {
                let run = self.jobs.get(&l.job)?.run.as_ref()?;
                let back = self.back_at(l, now);
                (back < run.end).then_some(Candidate { back, held: Reverse(run.owned.len()), unit: *u, end: run.end })
            })
            .collect();
        candidates.sort_unstable();
        candidates
    }

    /// Free units just given back by reclaims, which wait for the next pass.
    pub(super) fn returned_idle(&self) -> u32 {
        self.returned.keys().filter(|u| self.free.contains(u)).count() as u32
    }

    /// Stops holding given-back units once their job has started or left, or someone took them.
    pub(super) fn forget_returned(&mut self) {
        let (queued, free) = (&self.queued, &self.free);
        self.returned.retain(|u, job| queued.contains(job) && free.contains(u));
    }

    /// Free units in the order `job` takes them: those held for it first, those held for
    /// other jobs last.
    pub(super) fn free_for(&self, job: JobId) -> Vec<UnitId> {
        let mut free: Vec<UnitId> = self.free.iter().copied().collect();
        if !self.returned.is_empty() {
            free.sort_by_key(|u| match self.returned.get(u) {
                Some(j) if *j == job => 0,
                None => 1,
                Some(_) => 2,
            });
        }
        free
    }

    /// Forgets the reclaim-due time of the last pass (a pass computes it again).
    pub(super) fn clear_reclaim_due(&mut self) {
        self.reclaim_due = None;
    }
}
