//! The scheduler: the pool of units, the jobs, and the decisions. Every method is a plain
//! function of the state and its arguments; time comes in as `now`.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::{Backfill, Config, DelayModel, DynPolicy};
use crate::fairness::{Delay, Ledger};
use crate::profile::Profile;
use crate::{DynOutcome, DynRequest, Error, Event, JobId, JobSpec, Planned, Rejection, Time, Unit, UnitId};

/// What one unit is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Nobody holds it.
    Free,
    /// In use by a job.
    Busy(JobId),
    /// Pre-allocated to a job that does not use it yet.
    Idle(JobId),
    /// Pre-allocated to `owner`, lent to a preemptible `borrower`.
    Lent { owner: JobId, borrower: JobId },
}

#[derive(Debug, Clone)]
struct UnitEntry {
    unit: Unit,
    usable: bool,
    slot: Slot,
}

/// A running job's holdings.
#[derive(Debug, Clone)]
struct Run {
    start: Time,
    /// Walltime end ([`Time::MAX`]: none).
    end: Time,
    /// Units it owns: busy, pre-allocated idle, or lent out.
    owned: Vec<UnitId>,
    /// Units it borrowed preemptibly.
    borrowed: Vec<UnitId>,
    /// Usage is accounted up to this time.
    charged: Time,
}

#[derive(Debug, Clone)]
struct Job {
    spec: JobSpec,
    submit: Time,
    seq: u64,
    run: Option<Run>,
}

/// A priority with a total order.
#[derive(Debug, Clone, Copy)]
struct Key(f64);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A queued job's place in the priority order: highest priority first, then submission order.
type OrderEntry = (Reverse<Key>, u64, JobId);

/// Counters since the scheduler was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Jobs started.
    pub started: u64,
    /// Jobs started out of priority order.
    pub backfilled: u64,
    /// Dynamic requests granted (fully or partly).
    pub granted: u64,
    /// Dynamic requests rejected.
    pub rejected: u64,
}

/// Fair-share usage: unit-seconds per user, decayed per interval.
#[derive(Debug, Clone, Default)]
struct Usage {
    interval_start: Option<Time>,
    users: BTreeMap<String, f64>,
}

/// The scheduling core. See the crate documentation for what it guarantees.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: Config,
    units: Vec<UnitEntry>,
    /// Usable free units.
    free: BTreeSet<UnitId>,
    jobs: BTreeMap<JobId, Job>,
    queued: BTreeSet<JobId>,
    /// Queued jobs by priority, kept sorted. Priorities differ between jobs only by terms fixed
    /// at submission (queue time grows alike for all) unless fair-share is on, so the order
    /// is maintained here instead of sorted at every pass.
    order: BTreeSet<OrderEntry>,
    running: BTreeSet<JobId>,
    /// Queued exclusive jobs.
    exclusive: usize,
    /// Queued advance reservations by start time.
    advance: BTreeSet<(Time, JobId)>,
    /// Dynamic requests waiting, with their deadlines, in arrival order.
    pending: Vec<(DynRequest, Time)>,
    ledger: Ledger,
    usage: Usage,
    next_seq: u64,
    stats: Stats,
}

impl Scheduler {
    /// An empty pool.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            units: Vec::new(),
            free: BTreeSet::new(),
            jobs: BTreeMap::new(),
            queued: BTreeSet::new(),
            order: BTreeSet::new(),
            running: BTreeSet::new(),
            exclusive: 0,
            advance: BTreeSet::new(),
            pending: Vec::new(),
            ledger: Ledger::default(),
            usage: Usage::default(),
            next_seq: 0,
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Replaces the configuration. Priorities are recomputed for the queued jobs.
    pub fn set_config(&mut self, config: Config) {
        let queued: Vec<JobId> = self.queued.iter().copied().collect();
        for &id in &queued {
            self.dequeue(id);
        }
        self.config = config;
        for &id in &queued {
            self.enqueue(id);
        }
    }

    /// The fairness ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Restores a stored ledger.
    pub fn set_ledger(&mut self, ledger: Ledger) {
        self.ledger = ledger;
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Adds a usable, free unit.
    pub fn add_unit(&mut self, unit: Unit) -> UnitId {
        let id = self.units.len() as UnitId;
        self.units.push(UnitEntry { unit, usable: true, slot: Slot::Free });
        self.free.insert(id);
        id
    }

    /// A unit's description.
    pub fn unit(&self, id: UnitId) -> Option<&Unit> {
        self.units.get(id as usize).map(|u| &u.unit)
    }

    /// Marks a unit usable or not (its host went down or is draining). A held unit stays with
    /// its job but does not come back to the pool while unusable.
    pub fn set_usable(&mut self, id: UnitId, usable: bool) -> Result<(), Error> {
        let entry = self.units.get_mut(id as usize).ok_or(Error::NoSuchUnit(id))?;
        entry.usable = usable;
        if entry.slot == Slot::Free {
            if usable {
                self.free.insert(id);
            } else {
                self.free.remove(&id);
            }
        }
        Ok(())
    }

    /// Usable units.
    pub fn usable_units(&self) -> u32 {
        self.units.iter().filter(|u| u.usable).count() as u32
    }

    /// Usable units nobody holds.
    pub fn idle_units(&self) -> u32 {
        self.free.len() as u32
    }

    /// Queued jobs.
    pub fn queued_len(&self) -> usize {
        self.queued.len()
    }

    /// Units a running job owns or borrowed, or `None` if it is not running.
    pub fn job_units(&self, job: JobId) -> Option<Vec<UnitId>> {
        let run = self.jobs.get(&job)?.run.as_ref()?;
        Some(run.owned.iter().chain(&run.borrowed).copied().collect())
    }

    /// The walltime end of a running job.
    pub fn job_end(&self, job: JobId) -> Option<Time> {
        Some(self.jobs.get(&job)?.run.as_ref()?.end)
    }

    fn check_new(&self, spec: &JobSpec) -> Result<(), Error> {
        if self.jobs.contains_key(&spec.id) {
            return Err(Error::DuplicateJob(spec.id));
        }
        if spec.footprint() as usize > self.units.len() {
            return Err(Error::Invalid(format!(
                "the job needs {} units, the pool has {}",
                spec.footprint(),
                self.units.len()
            )));
        }
        Ok(())
    }

    /// Queues a static request. An advance reservation is accepted only if it fits beside the
    /// running jobs and the other advance reservations; queued jobs are planned around it.
    pub fn submit(&mut self, spec: JobSpec, now: Time) -> Result<(), Error> {
        self.check_new(&spec)?;
        // A job of no units never waits: it is recorded as running (`restore_running`), and
        // asks for units at run time.
        if spec.footprint() == 0 {
            return Err(Error::Invalid("a queued job needs at least one unit".into()));
        }
        if let Some(at) = spec.start_at.filter(|at| *at > now) {
            if spec.walltime.is_none() {
                return Err(Error::Invalid("an advance reservation needs a walltime".into()));
            }
            let free = self.base_profile(now).min_free(at, at.saturating_add(spec.duration()));
            if free < i64::from(spec.footprint()) {
                return Err(Error::ReservationConflict { free });
            }
        }
        self.next_seq += 1;
        let id = spec.id;
        self.jobs.insert(id, Job { spec, submit: now, seq: self.next_seq, run: None });
        self.enqueue(id);
        Ok(())
    }

    /// Records a job that already runs on `units` (how `arm-server` rebuilds the core from its
    /// store). The units must be free.
    pub fn insert_running(&mut self, spec: JobSpec, submit: Time, start: Time, units: &[UnitId]) -> Result<(), Error> {
        self.restore_running(spec, submit, start, units, &[])
    }

    /// Records a running job that uses `busy` and keeps `spare` set aside by its pre-allocation,
    /// unused. Every unit must be free.
    pub fn restore_running(
        &mut self,
        spec: JobSpec,
        submit: Time,
        start: Time,
        busy: &[UnitId],
        spare: &[UnitId],
    ) -> Result<(), Error> {
        self.check_new(&spec)?;
        for &u in busy.iter().chain(spare) {
            match self.units.get(u as usize) {
                None => return Err(Error::NoSuchUnit(u)),
                Some(e) if e.slot != Slot::Free => return Err(Error::NotHeld { job: spec.id, unit: u }),
                Some(_) => {}
            }
        }
        for &u in busy {
            self.units[u as usize].slot = Slot::Busy(spec.id);
            self.free.remove(&u);
        }
        for &u in spare {
            self.units[u as usize].slot = Slot::Idle(spec.id);
            self.free.remove(&u);
        }
        let end = start.saturating_add(spec.duration());
        let owned = busy.iter().chain(spare).copied().collect();
        let run = Run { start, end, owned, borrowed: Vec::new(), charged: start };
        self.next_seq += 1;
        self.running.insert(spec.id);
        self.jobs.insert(spec.id, Job { spec, submit, seq: self.next_seq, run: Some(run) });
        Ok(())
    }

    /// Records that `borrower` holds `unit`, a spare unit of another running job, on a
    /// preemptible loan.
    pub fn restore_loan(&mut self, unit: UnitId, borrower: JobId) -> Result<(), Error> {
        let Some(Slot::Idle(owner)) = self.units.get(unit as usize).map(|e| e.slot) else {
            return Err(Error::NotHeld { job: borrower, unit });
        };
        let run = self.jobs.get_mut(&borrower).and_then(|j| j.run.as_mut()).ok_or(Error::NoSuchJob(borrower))?;
        run.borrowed.push(unit);
        self.units[unit as usize].slot = Slot::Lent { owner, borrower };
        Ok(())
    }

    /// Ends a job, queued or running: its units go back, units it lent stay with their
    /// borrowers, units it borrowed go back to their owners.
    pub fn finish(&mut self, id: JobId, now: Time) -> Result<(), Error> {
        self.charge(id, now);
        self.dequeue(id);
        let job = self.jobs.remove(&id).ok_or(Error::NoSuchJob(id))?;
        self.running.remove(&id);
        self.pending.retain(|(r, _)| r.job != id);
        let Some(run) = job.run else { return Ok(()) };
        for u in run.owned {
            match self.units[u as usize].slot {
                Slot::Lent { borrower, .. } => {
                    self.units[u as usize].slot = Slot::Busy(borrower);
                    if let Some(b) = self.jobs.get_mut(&borrower).and_then(|j| j.run.as_mut()) {
                        b.borrowed.retain(|x| *x != u);
                        b.owned.push(u);
                    }
                }
                _ => self.free_unit(u),
            }
        }
        for u in run.borrowed {
            if let Slot::Lent { owner, .. } = self.units[u as usize].slot {
                self.units[u as usize].slot = Slot::Idle(owner);
            }
        }
        Ok(())
    }

    fn free_unit(&mut self, u: UnitId) {
        let entry = &mut self.units[u as usize];
        entry.slot = Slot::Free;
        if entry.usable {
            self.free.insert(u);
        }
    }

    /// Gives back some of a running job's units (any subset, static or dynamic). A job with a
    /// pre-allocation keeps released units as pre-allocated while it holds no more than its
    /// peak.
    pub fn release(&mut self, id: JobId, units: &[UnitId], now: Time) -> Result<(), Error> {
        let job = self.jobs.get(&id).ok_or(Error::NoSuchJob(id))?;
        let run = job.run.as_ref().ok_or(Error::NoSuchJob(id))?;
        for &u in units {
            let mine =
                run.borrowed.contains(&u) || (run.owned.contains(&u) && self.units[u as usize].slot == Slot::Busy(id));
            if !mine {
                return Err(Error::NotHeld { job: id, unit: u });
            }
        }
        let peak = job.spec.peak;
        self.charge(id, now);
        for &u in units {
            let run = self.jobs.get_mut(&id).and_then(|j| j.run.as_mut()).expect("checked");
            if let Slot::Lent { owner, .. } = self.units[u as usize].slot {
                run.borrowed.retain(|x| *x != u);
                self.units[u as usize].slot = Slot::Idle(owner);
            } else if peak.is_some_and(|p| run.owned.len() <= p as usize) {
                self.units[u as usize].slot = Slot::Idle(id);
            } else {
                run.owned.retain(|x| *x != u);
                self.free_unit(u);
            }
        }
        Ok(())
    }

    /// One scheduling pass (the paper's Algorithm 2): waiting dynamic requests first, then
    /// static jobs in priority order with reservations and backfilling.
    pub fn schedule(&mut self, now: Time) -> Vec<Event> {
        self.ledger.roll(now, &self.config.dynamic);
        self.roll_usage(now);
        let mut events = Vec::new();
        self.retry_pending(now, &mut events);
        self.start_static(now, &mut events);
        events
    }

    /// The earliest time a pass has something to do without any other event: a waiting
    /// dynamic request times out, or an advance reservation begins.
    pub fn next_wakeup(&self) -> Option<Time> {
        let deadline = self.pending.iter().map(|(_, d)| *d).min();
        let advance = self.advance.first().map(|(t, _)| *t);
        deadline.into_iter().chain(advance).min()
    }

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

    fn retry_pending(&mut self, now: Time, events: &mut Vec<Event>) {
        for (req, deadline) in std::mem::take(&mut self.pending) {
            if self.jobs.get(&req.job).is_none_or(|j| j.run.is_none()) {
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
    fn try_grant(&mut self, req: &DynRequest, now: Time, events: &mut Vec<Event>) -> Result<Vec<UnitId>, Rejection> {
        let own = self.preallocated(req.job).min(req.max);
        let (rest_min, rest_max) = (req.min.saturating_sub(own), req.max - own);
        let mut extra = (0, Vec::new(), None);
        if rest_max > 0 && req.preemptible {
            let lendable = self.lendable(req.job).min(rest_max);
            if lendable < rest_min {
                return Err(Rejection::NothingToBorrow);
            }
            extra.0 = lendable;
        } else if rest_max > 0 {
            match self.decide_idle(req, rest_min, rest_max, now) {
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
            units.extend(self.take_idle(req.job, extra.0, extra.2));
            self.ledger.charge(&extra.1);
        }
        self.stats.granted += 1;
        Ok(units)
    }

    /// How many idle units to grant (between `min` and `max`), the delays that causes, and the
    /// job's new end if it declared one; or why none.
    fn decide_idle(
        &self,
        req: &DynRequest,
        min: u32,
        max: u32,
        now: Time,
    ) -> Result<(u32, Vec<Delay>, Option<Time>), Rejection> {
        let idle = self.idle_units();
        if idle < min.max(1) {
            return Err(Rejection::NoIdleUnits { idle });
        }
        let run = self.jobs[&req.job].run.as_ref().expect("running");
        let declared = match self.config.dynamic.delay_model {
            DelayModel::Declared => req.end_if_granted.filter(|e| *e < run.end && *e > now),
            DelayModel::Walltime => None,
        };
        let base = self.base_profile(now);
        let hold_end = declared.unwrap_or(run.end);
        let window_free = base.min_free(now, hold_end).clamp(0, i64::from(idle)) as u32;
        let most = max.min(window_free);
        if most < min.max(1) {
            return Err(Rejection::Reserved);
        }
        // Highest priority never refuses, but still measures the delays it causes, for the
        // ledger's report (with a delay depth of 0 that costs nothing).
        let enforce = self.config.dynamic.policy != DynPolicy::HighestPriority;
        let depth = self.config.dynamic.reservation_delay_depth;
        let depth = if depth == 0 { 0 } else { depth.max(self.config.queue.reservation_depth) };
        let top = self.priority_order(now, Some(depth));
        let before = self.walk(base.clone(), &top, now);
        let verdict = |k: u32| -> Result<(Vec<Delay>, Option<Time>), Rejection> {
            let new_end = declared.filter(|_| k == max);
            let mut profile = base.clone();
            profile.reserve(now, new_end.unwrap_or(run.end), k);
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

    fn delays(&self, requester: JobId, top: &[JobId], before: &[Option<Time>], after: &[Option<Time>]) -> Vec<Delay> {
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

    fn usable_count(&self, units: &[UnitId]) -> u32 {
        units.iter().filter(|u| self.units[**u as usize].usable).count() as u32
    }

    /// Pre-allocated units of `job` it does not use (idle or lent out).
    fn preallocated(&self, job: JobId) -> u32 {
        let Some(run) = self.jobs.get(&job).and_then(|j| j.run.as_ref()) else { return 0 };
        run.owned.iter().filter(|u| matches!(self.units[**u as usize].slot, Slot::Idle(_) | Slot::Lent { .. })).count()
            as u32
    }

    /// Other jobs' idle pre-allocated units.
    fn lendable(&self, job: JobId) -> u32 {
        self.units.iter().filter(|u| u.usable && matches!(u.slot, Slot::Idle(o) if o != job)).count() as u32
    }

    /// Puts `n` of the job's own pre-allocated units to use, taking lent ones back if needed.
    fn take_preallocated(&mut self, job: JobId, n: u32, events: &mut Vec<Event>) -> Vec<UnitId> {
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

    fn borrow(&mut self, job: JobId, n: u32) -> Vec<UnitId> {
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

    fn take_idle(&mut self, job: JobId, n: u32, new_end: Option<Time>) -> Vec<UnitId> {
        let picked: Vec<UnitId> = self.free.iter().take(n as usize).copied().collect();
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

    /// Starts every static job that may start now.
    fn start_static(&mut self, now: Time, events: &mut Vec<Event>) {
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
            // for jobs that could.
            if free <= 0 || i64::from(smallest_after[i]) > free {
                break;
            }
            let (size, duration) = (self.jobs[&id].spec.footprint(), self.jobs[&id].spec.duration());
            if profile.fits_at(now, size, duration) {
                profile.reserve(now, now.saturating_add(duration), size);
                let units = self.start(id, now);
                self.stats.backfilled += u64::from(skipped);
                events.push(Event::Started { job: id, units, backfilled: skipped });
                continue;
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
    fn strict(&self) -> bool {
        self.config.queue.backfill == Backfill::None || self.exclusive > 0
    }

    fn start(&mut self, id: JobId, now: Time) -> Vec<UnitId> {
        self.dequeue(id);
        self.running.insert(id);
        let job = self.jobs.get_mut(&id).expect("queued");
        let (size, footprint) = (job.spec.size as usize, job.spec.footprint() as usize);
        let units: Vec<UnitId> = self.free.iter().take(footprint).copied().collect();
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
    fn base_profile(&self, now: Time) -> Profile {
        let releases = self.running.iter().filter_map(|id| {
            let run = self.jobs[id].run.as_ref()?;
            // A job past its walltime still holds its units until it is ended.
            Some((run.end.max(now + 1), self.usable_count(&run.owned)))
        });
        let mut profile = Profile::new(now, self.idle_units(), releases.filter(|(t, _)| *t != Time::MAX));
        for &(at, id) in self.advance.iter().filter(|(t, _)| *t > now) {
            let spec = &self.jobs[&id].spec;
            profile.reserve(at, at.saturating_add(spec.duration()), spec.footprint());
        }
        profile
    }

    /// Conservative planning of `order` on `profile`: each job's earliest start, in turn.
    fn walk(&self, mut profile: Profile, order: &[JobId], now: Time) -> Vec<Option<Time>> {
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
    fn priority_order(&self, now: Time, limit: Option<usize>) -> Vec<JobId> {
        let limit = limit.unwrap_or(usize::MAX);
        if self.config.priority.fairshare_weight != 0.0 {
            return self.sorted_order(now, limit);
        }
        let due = self.advance.iter().take_while(|(t, _)| *t <= now).map(|(_, id)| *id);
        let rest = self.order.iter().map(|(_, _, id)| *id).filter(|id| self.jobs[id].spec.start_at.is_none());
        due.chain(rest).take(limit).collect()
    }

    /// The same order, computed from scratch (fair-share usage changes priorities over time).
    fn sorted_order(&self, now: Time, limit: usize) -> Vec<JobId> {
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
    fn static_priority(&self, job: &Job) -> f64 {
        let p = &self.config.priority;
        job.spec.priority as f64 - p.queue_time_weight * job.submit as f64 / 60.0
            + p.users.get(&job.spec.user).copied().unwrap_or(0.0)
            + p.groups.get(&job.spec.group).copied().unwrap_or(0.0)
    }

    /// A job's entry in `order`, whether it is exclusive, and its advance reservation.
    fn queue_entry(&self, id: JobId) -> Option<(OrderEntry, bool, Option<Time>)> {
        let job = self.jobs.get(&id)?;
        Some(((Reverse(Key(self.static_priority(job))), job.seq, id), job.spec.exclusive, job.spec.start_at))
    }

    /// Puts a known job in the queue's indexes.
    fn enqueue(&mut self, id: JobId) {
        let Some((entry, exclusive, start_at)) = self.queue_entry(id) else { return };
        self.queued.insert(id);
        self.order.insert(entry);
        self.exclusive += usize::from(exclusive);
        if let Some(at) = start_at {
            self.advance.insert((at, id));
        }
    }

    /// Takes a job out of the queue's indexes (nothing happens if it is not queued).
    fn dequeue(&mut self, id: JobId) {
        let Some((entry, exclusive, start_at)) = self.queue_entry(id) else { return };
        if self.queued.remove(&id) {
            self.order.remove(&entry);
            self.exclusive -= usize::from(exclusive);
        }
        if let Some(at) = start_at {
            self.advance.remove(&(at, id));
        }
    }

    fn priority(&self, job: &Job, now: Time) -> f64 {
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

    /// Accounts a running job's usage up to `now`.
    fn charge(&mut self, id: JobId, now: Time) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        let Some(run) = job.run.as_mut() else { return };
        let held = (run.owned.len() + run.borrowed.len()) as f64;
        let seconds = now.saturating_sub(run.charged) as f64;
        run.charged = run.charged.max(now);
        *self.usage.users.entry(job.spec.user.clone()).or_default() += held * seconds;
    }

    fn roll_usage(&mut self, now: Time) {
        let p = &self.config.priority;
        let interval = p.fairshare_interval.0.max(1);
        let start = *self.usage.interval_start.get_or_insert(now);
        if now >= start + interval {
            let elapsed = (now - start) / interval;
            let factor = p.fairshare_decay.clamp(0.0, 1.0).powi(elapsed.min(i32::MAX as u64) as i32);
            self.usage.users.values_mut().for_each(|v| *v *= factor);
            self.usage.interval_start = Some(start + elapsed * interval);
        }
    }

    /// Checks the bookkeeping; `Err` describes the first inconsistency. For tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = vec![0u32; self.units.len()];
        for (id, job) in &self.jobs {
            let Some(run) = &job.run else { continue };
            for &u in &run.owned {
                seen[u as usize] += 1;
                match self.units[u as usize].slot {
                    Slot::Busy(j) | Slot::Idle(j) if j == *id => {}
                    Slot::Lent { owner, .. } if owner == *id => {}
                    other => return Err(format!("unit {u} owned by job {id} is {other:?}")),
                }
            }
            for &u in &run.borrowed {
                match self.units[u as usize].slot {
                    Slot::Lent { borrower, .. } if borrower == *id => {}
                    other => return Err(format!("unit {u} borrowed by job {id} is {other:?}")),
                }
            }
            if run.start > run.end {
                return Err(format!("job {id} ends before it starts"));
            }
        }
        for (u, entry) in self.units.iter().enumerate() {
            let owned = seen[u];
            let is_free = entry.slot == Slot::Free;
            if owned > 1 || (owned == 1) == is_free {
                return Err(format!("unit {u} is {:?} and owned {owned} times", entry.slot));
            }
            if self.free.contains(&(u as UnitId)) != (is_free && entry.usable) {
                return Err(format!("unit {u}: free set disagrees"));
            }
        }
        Ok(())
    }
}
