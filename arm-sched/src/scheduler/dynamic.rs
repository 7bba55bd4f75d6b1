//! Dynamic requests (`AC_Get`): the fairness decision, partial grants, waiting requests,
//! pre-allocations and preemptible loans.

use std::collections::BTreeMap;

use crate::config::{DelayModel, DynPolicy};
use crate::fairness::Delay;
use crate::{DynOutcome, DynRequest, Error, Event, JobId, Rejection, Time, UnitId};

use super::{Scheduler, Slot};

impl Scheduler {
    /// A dynamic request: granted at once (maybe partly), rejected, or, with a timeout,
    /// left waiting for a later pass. Also returns the preemptions it caused.
    pub fn request(&mut self, req: DynRequest, now: Time) -> Result<(DynOutcome, Vec<Event>), Error> {
        let running = self.jobs.get(&req.job).is_some_and(|j| j.run.is_some());
        if !running {
            return Err(Error::NoSuchJob(req.job));
        }
        if req.min == 0 || req.min > req.max {
            return Err(Error::Invalid(format!("ask for 1 <= min <= max units (got {}..{})", req.min, req.max)));
        }
        if req.max as usize > self.units.len() {
            return Err(Error::Invalid(format!("{} units asked, the pool has {}", req.max, self.units.len())));
        }
        self.ledger.roll(now, &self.config.dynamic);
        let mut events = Vec::new();
        let outcome = match self.try_grant(&req, now, &mut events) {
            Ok(units) => DynOutcome::Granted(units),
            Err(_) if req.timeout > 0 => {
                self.pending.push((req.clone(), now.saturating_add(req.timeout)));
                DynOutcome::Pending
            }
            Err(reason) => {
                self.stats.rejected += 1;
                DynOutcome::Rejected(reason)
            }
        };
        Ok((outcome, events))
    }

    /// Puts back a request that was left waiting, with its deadline (how `arm-server` rebuilds
    /// the core from its store). The next pass tries it before starting static jobs.
    pub fn restore_pending(&mut self, req: DynRequest, deadline: Time) -> Result<(), Error> {
        if self.jobs.get(&req.job).is_none_or(|j| j.run.is_none()) {
            return Err(Error::NoSuchJob(req.job));
        }
        self.pending.push((req, deadline));
        Ok(())
    }

    /// Marks waiting requests elastic, with the notice `notice_of(request id)` gives (how
    /// `arm-server` restores them: its store keeps the notices apart).
    pub fn set_elastic_pending(&mut self, notice_of: impl Fn(u64) -> Option<Time>) {
        for (req, _) in &mut self.pending {
            if let Some(notice) = notice_of(req.id) {
                req.elastic = Some(notice);
            }
        }
    }

    /// Tries again the waiting requests that are elastic (offers), or those that are not.
    pub(super) fn retry_pending(&mut self, now: Time, elastic: bool, events: &mut Vec<Event>) {
        for (req, deadline) in std::mem::take(&mut self.pending) {
            if self.jobs.get(&req.job).is_none_or(|j| j.run.is_none()) {
                continue;
            }
            if req.elastic.is_some() != elastic {
                self.pending.push((req, deadline));
                continue;
            }
            match self.try_grant(&req, now, events) {
                Ok(units) => events.push(Event::Granted { request: req.id, job: req.job, units }),
                Err(_) if deadline <= now => {
                    self.stats.rejected += 1;
                    events.push(Event::Rejected { request: req.id, job: req.job, reason: Rejection::TimedOut });
                }
                Err(_) => self.pending.push((req, deadline)),
            }
        }
    }

    /// Decides a request and, if granted, carries it out.
    pub(super) fn try_grant(
        &mut self,
        req: &DynRequest,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Vec<UnitId>, Rejection> {
        let own = self.preallocated(req.job).min(req.max);
        let (rest_min, rest_max) = (req.min.saturating_sub(own), req.max - own);
        let mut extra = (0, Vec::new(), None);
        let mut lent = None;
        if rest_max > 0 && req.preemptible {
            let lendable = self.lendable(req.job).min(rest_max);
            if lendable < rest_min {
                return Err(Rejection::NothingToBorrow);
            }
            extra.0 = lendable;
        } else if rest_max > 0 {
            let decided = match req.elastic {
                // Firm if the policy grants it whole; what it would not grant is lent.
                Some(notice) if self.config.dynamic.elastic.firm_first => {
                    self.decide_idle(req, rest_max, rest_max, now, None).or_else(|_| {
                        lent = Some(notice);
                        self.decide_idle(req, rest_min, rest_max, now, lent)
                    })
                }
                notice => {
                    lent = notice;
                    self.decide_idle(req, rest_min, rest_max, now, lent)
                }
            };
            match decided {
                Ok(decided) => extra = decided,
                Err(reason) if rest_min > 0 => return Err(reason),
                Err(_) => {}
            }
        }
        let mut units = self.take_preallocated(req.job, own, events);
        self.charge(req.job, now);
        if req.preemptible {
            units.extend(self.borrow(req.job, extra.0));
        } else {
            let taken = self.take_idle(req.job, extra.0, extra.2);
            if let Some(notice) = lent {
                self.lend(req.job, &taken, notice, now);
            }
            units.extend(taken);
            self.ledger.charge(&extra.1);
        }
        self.stats.granted += 1;
        Ok(units)
    }

    /// How many idle units to grant (between `min` and `max`), the delays that causes, and the
    /// job's new end if it declared one; or why none. Units lent with a `notice` are planned
    /// as held only until `now + notice`, so that is all the delay they can cause.
    pub(super) fn decide_idle(
        &self,
        req: &DynRequest,
        min: u32,
        max: u32,
        now: Time,
        notice: Option<Time>,
    ) -> Result<(u32, Vec<Delay>, Option<Time>), Rejection> {
        // Units just given back by a reclaim wait for the job they were reclaimed for.
        let idle = self.idle_units() - self.returned_idle();
        if idle < min.max(1) {
            return Err(Rejection::NoIdleUnits { idle });
        }
        let run = self.jobs[&req.job].run.as_ref().expect("running");
        let declared = match self.config.dynamic.delay_model {
            DelayModel::Declared if notice.is_none() => req.end_if_granted.filter(|e| *e < run.end && *e > now),
            _ => None,
        };
        let base = self.base_profile(now);
        let hold_end = match notice {
            Some(notice) => run.end.min(now.saturating_add(notice)),
            None => declared.unwrap_or(run.end),
        };
        // Highest priority never refuses, but still measures the delays it causes, for the
        // ledger's report (with a delay depth of 0 that costs nothing).
        let enforce = self.config.dynamic.policy != DynPolicy::HighestPriority;
        let depth = self.config.dynamic.reservation_delay_depth;
        let depth = if depth == 0 { 0 } else { depth.max(self.config.queue.reservation_depth) };
        let top = self.priority_order(now, Some(depth));
        let mut planned = base.clone();
        let before = self.walk_on(&mut planned, &top, now);
        // Nothing is lent that a planned job needs before the notice is up: it would only be
        // reclaimed at once.
        let window = if notice.is_some() { &planned } else { &base };
        let window_free = window.min_free(now, hold_end).clamp(0, i64::from(idle)) as u32;
        let most = max.min(window_free);
        if most < min.max(1) {
            return Err(Rejection::Reserved);
        }
        let verdict = |k: u32| -> Result<(Vec<Delay>, Option<Time>), Rejection> {
            let new_end = declared.filter(|_| k == max);
            let mut profile = base.clone();
            profile.reserve(now, new_end.unwrap_or(hold_end), k);
            if let Some(end) = new_end {
                profile.release(end, run.end, self.usable_count(&run.owned));
            }
            let after = self.walk(profile, &top, now);
            let delays = self.delays(req.job, &top, &before, &after);
            if enforce {
                self.ledger.check(&delays, &self.config.dynamic)?;
            }
            Ok((delays, new_end))
        };
        // Try everything first; otherwise the largest acceptable partial grant, assuming more
        // units never cause less delay.
        let first = match verdict(most) {
            Ok((delays, end)) => return Ok((most, delays, end)),
            Err(reason) => reason,
        };
        let (mut lo, mut hi, mut best) = (min.max(1), most - 1, None);
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            match verdict(mid) {
                Ok(found) => {
                    best = Some((mid, found));
                    lo = mid + 1;
                }
                Err(_) => hi = mid - 1,
            }
        }
        best.map(|(k, (delays, end))| (k, delays, end)).ok_or(first)
    }

    pub(super) fn delays(
        &self,
        requester: JobId,
        top: &[JobId],
        before: &[Option<Time>],
        after: &[Option<Time>],
    ) -> Vec<Delay> {
        let own_user = &self.jobs[&requester].spec.user;
        let depth = self.config.dynamic.reservation_delay_depth;
        let mut delays = Vec::new();
        for ((id, b), a) in top.iter().zip(before).zip(after).take(depth) {
            let spec = &self.jobs[id].spec;
            if &spec.user == own_user {
                continue;
            }
            let seconds = match (b, a) {
                (Some(b), Some(a)) => a.saturating_sub(*b),
                (Some(_), None) => Time::MAX,
                _ => 0,
            };
            delays.push(Delay { job: *id, user: spec.user.clone(), group: spec.group.clone(), seconds });
        }
        delays
    }
    /// Pre-allocated units of `job` it does not use (idle or lent out).
    pub(super) fn preallocated(&self, job: JobId) -> u32 {
        let Some(run) = self.jobs.get(&job).and_then(|j| j.run.as_ref()) else { return 0 };
        run.owned.iter().filter(|u| matches!(self.units[**u as usize].slot, Slot::Idle(_) | Slot::Lent { .. })).count()
            as u32
    }

    /// Other jobs' idle pre-allocated units.
    pub(super) fn lendable(&self, job: JobId) -> u32 {
        self.units.iter().filter(|u| u.usable && matches!(u.slot, Slot::Idle(o) if o != job)).count() as u32
    }

    /// Puts `n` of the job's own pre-allocated units to use, taking lent ones back if needed.
    pub(super) fn take_preallocated(&mut self, job: JobId, n: u32, events: &mut Vec<Event>) -> Vec<UnitId> {
        let run = self.jobs[&job].run.as_ref().expect("running");
        let idle = run.owned.iter().copied().filter(|u| self.units[*u as usize].slot == Slot::Idle(job));
        let lent = run.owned.iter().copied().filter(|u| matches!(self.units[*u as usize].slot, Slot::Lent { .. }));
        let picked: Vec<UnitId> = idle.chain(lent).take(n as usize).collect();
        let mut preempted: BTreeMap<JobId, Vec<UnitId>> = BTreeMap::new();
        for &u in &picked {
            if let Slot::Lent { borrower, .. } = self.units[u as usize].slot {
                preempted.entry(borrower).or_default().push(u);
                if let Some(b) = self.jobs.get_mut(&borrower).and_then(|j| j.run.as_mut()) {
                    b.borrowed.retain(|x| *x != u);
                }
            }
            self.units[u as usize].slot = Slot::Busy(job);
        }
        events.extend(preempted.into_iter().map(|(job, units)| Event::Preempted { job, units }));
        picked
    }

    pub(super) fn borrow(&mut self, job: JobId, n: u32) -> Vec<UnitId> {
        let picked: Vec<(UnitId, JobId)> = self
            .units
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match u.slot {
                Slot::Idle(owner) if owner != job && u.usable => Some((i as UnitId, owner)),
                _ => None,
            })
            .take(n as usize)
            .collect();
        for &(u, owner) in &picked {
            self.units[u as usize].slot = Slot::Lent { owner, borrower: job };
        }
        let run = self.jobs.get_mut(&job).and_then(|j| j.run.as_mut()).expect("running");
        run.borrowed.extend(picked.iter().map(|(u, _)| *u));
        picked.into_iter().map(|(u, _)| u).collect()
    }

    pub(super) fn take_idle(&mut self, job: JobId, n: u32, new_end: Option<Time>) -> Vec<UnitId> {
        let unheld = self.free.iter().filter(|u| !self.returned.contains_key(u));
        let picked: Vec<UnitId> = unheld.take(n as usize).copied().collect();
        for &u in &picked {
            self.free.remove(&u);
            self.units[u as usize].slot = Slot::Busy(job);
        }
        let run = self.jobs.get_mut(&job).and_then(|j| j.run.as_mut()).expect("running");
        run.owned.extend(&picked);
        if let Some(end) = new_end {
            run.end = end;
        }
        picked
    }
}
