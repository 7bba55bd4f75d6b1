//! Queued static requests: the priority order, the planning view, and the pass that starts
//! jobs with reservations and backfilling.

use std::cmp::Reverse;

use crate::config::Backfill;
use crate::profile::Profile;
use crate::{Event, JobId, Planned, Time, UnitId};

use super::{Job, Key, OrderEntry, Run, Scheduler, Slot};

impl Scheduler {
    /// The planning view: every queued job with its expected start, in priority order, then
    /// the future advance reservations. Expected starts assume walltimes are used in full,
    /// so a job starts no later than planned unless higher-priority work arrives or units
    /// fail.
    pub fn plan(&self, now: Time) -> Vec<Planned> {
        let order = self.priority_order(now, None);
        let starts = self.walk(self.base_profile(now), &order, now);
        let mut planned: Vec<Planned> = order.iter().zip(starts).map(|(&job, start)| Planned { job, start }).collect();
        planned.extend(self.advance.iter().filter(|(t, _)| *t > now).map(|&(t, job)| Planned { job, start: Some(t) }));
        planned
    }

    /// One queued job's expected start, as [`Scheduler::plan`] gives it, planning only the
    /// jobs ahead of it. `None` if it is not queued or cannot start with the units that exist.
    pub fn expected_start(&self, job: JobId, now: Time) -> Option<Time> {
        if !self.queued.contains(&job) {
            return None;
        }
        if let Some(at) = self.jobs[&job].spec.start_at.filter(|at| *at > now) {
            return Some(at);
        }
        let order = self.priority_order(now, None);
        let position = order.iter().position(|id| *id == job)?;
        self.walk(self.base_profile(now), &order[..=position], now).pop().flatten()
    }

    /// Starts every static job that may start now.
    pub(super) fn start_static(&mut self, now: Time, events: &mut Vec<Event>) {
        self.clear_reclaim_due();
        let order = self.priority_order(now, None);
        if order.is_empty() {
            return;
        }
        let mut profile = self.base_profile(now);
        let strict = self.strict();
        let depth = match self.config.queue.backfill {
            Backfill::None => 0,
            Backfill::Easy => self.config.queue.reservation_depth,
            Backfill::Conservative => usize::MAX,
        };
        let mut smallest_after = vec![u32::MAX; order.len() + 1];
        for (i, id) in order.iter().enumerate().rev() {
            smallest_after[i] = smallest_after[i + 1].min(self.jobs[id].spec.footprint());
        }
        let (mut reserved, mut skipped) = (0, false);
        for (i, &id) in order.iter().enumerate() {
            let free = profile.free_now();
            // Nothing further down the queue can start now; reservations would only matter
            // for jobs that could, or for reclaiming lent units.
            let may_start = free > 0 && i64::from(smallest_after[i]) <= free;
            let notice = self.longest_notice();
            if !may_start && notice.is_none() {
                break;
            }
            let (size, duration) = (self.jobs[&id].spec.footprint(), self.jobs[&id].spec.duration());
            if may_start && profile.fits_at(now, size, duration) {
                profile.reserve(now, now.saturating_add(duration), size);
                let units = self.start(id, now);
                self.stats.backfilled += u64::from(skipped);
                events.push(Event::Started { job: id, units, backfilled: skipped });
                continue;
            }
            let protected = strict || reserved < depth;
            if let Some(notice) = notice {
                // A reserved job reclaims when its start comes within the notice; any other
                // job only if the reclaim lets it start within the notice, and then it keeps
                // a reservation so that nothing else takes the units it reclaimed.
                let soon = |t: Time| t <= now.saturating_add(notice);
                if protected || profile.earliest(size, duration, now).is_some_and(soon) {
                    let reclaimed = self.reclaim_for(id, &profile, now, events);
                    if let Some(t) = reclaimed.filter(|_| !protected) {
                        profile.reserve(t, t.saturating_add(duration), size);
                    }
                }
            }
            if strict {
                break;
            }
            skipped = true;
            if reserved < depth {
                match profile.earliest(size, duration, now) {
                    Some(t) => profile.reserve(t, t.saturating_add(duration), size),
                    // Its start cannot be planned (jobs without a walltime hold what it needs),
                    // so nothing proves that overtaking it is harmless: stop here.
                    None if size <= self.usable_units() => break,
                    None => {}
                }
                reserved += 1;
            }
        }
    }

    /// Whether nothing may overtake: backfilling is off, or an exclusive job waits.
    pub(super) fn strict(&self) -> bool {
        self.config.queue.backfill == Backfill::None || self.exclusive > 0
    }

    pub(super) fn start(&mut self, id: JobId, now: Time) -> Vec<UnitId> {
        self.dequeue(id);
        self.running.insert(id);
        let mut units = self.free_for(id);
        let job = self.jobs.get_mut(&id).expect("queued");
        let (size, footprint) = (job.spec.size as usize, job.spec.footprint() as usize);
        units.truncate(footprint);
        for (i, &u) in units.iter().enumerate() {
            self.free.remove(&u);
            self.units[u as usize].slot = if i < size { Slot::Busy(id) } else { Slot::Idle(id) };
        }
        let end = now.saturating_add(job.spec.duration());
        job.run = Some(Run { start: now, end, owned: units.clone(), borrowed: Vec::new(), charged: now });
        self.stats.started += 1;
        units
    }

    /// Free units now, each running job's usable units back at its walltime end, and the
    /// future advance reservations taken out.
    pub(super) fn base_profile(&self, now: Time) -> Profile {
        let lent = if self.leases.is_empty() { Default::default() } else { self.lent_per_job() };
        let releases = self.running.iter().filter_map(|id| {
            let run = self.jobs[id].run.as_ref()?;
            let firm = self.usable_count(&run.owned) - lent.get(id).copied().unwrap_or(0);
            // A job past its walltime still holds its units until it is ended.
            Some((run.end.max(now + 1), firm))
        });
        let releases = releases.chain(self.lent_releases(now)).filter(|(t, _)| *t != Time::MAX);
        let mut profile = Profile::new(now, self.idle_units(), releases);
        for &(at, id) in self.advance.iter().filter(|(t, _)| *t > now) {
            let spec = &self.jobs[&id].spec;
            profile.reserve(at, at.saturating_add(spec.duration()), spec.footprint());
        }
        profile
    }

    /// Conservative planning of `order` on `profile`: each job's earliest start, in turn.
    pub(super) fn walk(&self, mut profile: Profile, order: &[JobId], now: Time) -> Vec<Option<Time>> {
        self.walk_on(&mut profile, order, now)
    }

    /// The same, leaving the jobs' reservations in `profile`.
    pub(super) fn walk_on(&self, profile: &mut Profile, order: &[JobId], now: Time) -> Vec<Option<Time>> {
        let strict = self.strict();
        let mut not_before = now;
        order
            .iter()
            .map(|id| {
                let spec = &self.jobs[id].spec;
                let start = profile.earliest(spec.footprint(), spec.duration(), not_before)?;
                profile.reserve(start, start.saturating_add(spec.duration()), spec.footprint());
                if strict {
                    not_before = start;
                }
                Some(start)
            })
            .collect()
    }

    /// Queued jobs in the order they are served (due advance reservations first; future ones
    /// are fixed in the profile instead), at most `limit` of them.
    pub(super) fn priority_order(&self, now: Time, limit: Option<usize>) -> Vec<JobId> {
        let limit = limit.unwrap_or(usize::MAX);
        if self.config.priority.fairshare_weight != 0.0 {
            return self.sorted_order(now, limit);
        }
        let due = self.advance.iter().take_while(|(t, _)| *t <= now).map(|(_, id)| *id);
        let rest = self.order.iter().map(|(_, _, id)| *id).filter(|id| self.jobs[id].spec.start_at.is_none());
        due.chain(rest).take(limit).collect()
    }

    /// The same order, computed from scratch (fair-share usage changes priorities over time).
    pub(super) fn sorted_order(&self, now: Time, limit: usize) -> Vec<JobId> {
        let mut keyed: Vec<(f64, u64, JobId)> = self
            .queued
            .iter()
            .filter_map(|id| {
                let job = &self.jobs[id];
                match job.spec.start_at {
                    Some(at) if at > now => None,
                    Some(_) => Some((f64::INFINITY, job.seq, *id)),
                    None => Some((self.priority(job, now), job.seq, *id)),
                }
            })
            .collect();
        let by_priority = |a: &(f64, u64, JobId), b: &(f64, u64, JobId)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if limit < keyed.len() {
            keyed.select_nth_unstable_by(limit, by_priority);
            keyed.truncate(limit);
        }
        keyed.sort_unstable_by(by_priority);
        keyed.into_iter().map(|(_, _, id)| id).collect()
    }

    /// The part of a job's priority fixed at submission (the queue-time term less the part
    /// that grows alike for every job).
    pub(super) fn static_priority(&self, job: &Job) -> f64 {
        let p = &self.config.priority;
        job.spec.priority as f64 - p.queue_time_weight * job.submit as f64 / 60.0
            + p.users.get(&job.spec.user).copied().unwrap_or(0.0)
            + p.groups.get(&job.spec.group).copied().unwrap_or(0.0)
    }

    /// A job's entry in `order`, whether it is exclusive, and its advance reservation.
    pub(super) fn queue_entry(&self, id: JobId) -> Option<(OrderEntry, bool, Option<Time>)> {
        let job = self.jobs.get(&id)?;
        Some(((Reverse(Key(self.static_priority(job))), job.seq, id), job.spec.exclusive, job.spec.start_at))
    }

    /// Puts a known job in the queue's indexes.
    pub(super) fn enqueue(&mut self, id: JobId) {
        let Some((entry, exclusive, start_at)) = self.queue_entry(id) else { return };
        self.queued.insert(id);
        self.order.insert(entry);
        self.exclusive += usize::from(exclusive);
        if let Some(at) = start_at {
            self.advance.insert((at, id));
        }
    }

    /// Takes a job out of the queue's indexes (nothing happens if it is not queued).
    pub(super) fn dequeue(&mut self, id: JobId) {
        let Some((entry, exclusive, start_at)) = self.queue_entry(id) else { return };
        if self.queued.remove(&id) {
            self.order.remove(&entry);
            self.exclusive -= usize::from(exclusive);
        }
        if let Some(at) = start_at {
            self.advance.remove(&(at, id));
        }
    }

    pub(super) fn priority(&self, job: &Job, now: Time) -> f64 {
        let p = &self.config.priority;
        let waited_min = now.saturating_sub(job.submit) as f64 / 60.0;
        let mut priority = job.spec.priority as f64 + p.queue_time_weight * waited_min;
        priority += p.users.get(&job.spec.user).copied().unwrap_or(0.0);
        priority += p.groups.get(&job.spec.group).copied().unwrap_or(0.0);
        if p.fairshare_weight != 0.0 {
            let used = self.usage.users.get(&job.spec.user).copied().unwrap_or(0.0);
            let capacity = (self.units.len().max(1) as f64) * (p.fairshare_interval.0.max(1) as f64);
            priority -= p.fairshare_weight * used / capacity;
        }
        priority
    }
}
