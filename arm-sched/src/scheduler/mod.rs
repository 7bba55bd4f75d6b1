//! The scheduler: the pool of units, the jobs, and the decisions. Every method is a plain
//! function of the state and its arguments; time comes in as `now`.
//!
//! # Layout
//! - `mod.rs`: the state (units, jobs, usage) and what changes it directly: units, submissions,
//!   restores, ends and releases, the pass, and the invariant check.
//! - `queue`: queued static requests: the priority order, the planning view, the pass that
//!   starts jobs with reservations and backfilling.
//! - `dynamic`: dynamic requests: the fairness decision, partial grants, waiting requests,
//!   pre-allocations and loans.
//! - `elastic`: elastic units: lent with a notice, reclaimed for queued jobs, revoked when
//!   kept past their deadline.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::fairness::Ledger;
use crate::{DynRequest, Error, Event, JobId, JobSpec, Time, Unit, UnitId};

mod dynamic;
mod elastic;
mod queue;

use elastic::Lease;

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
    /// Elastic units, by unit.
    leases: BTreeMap<UnitId, Lease>,
    /// When the last pass saw a reclaim coming due (a reserved job's start within its notice).
    reclaim_due: Option<Time>,
    /// Reclaimed units given back, held for the queued job they were reclaimed for until it
    /// starts: no dynamic request takes them, and other jobs take them last.
    returned: BTreeMap<UnitId, JobId>,
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
            leases: BTreeMap::new(),
            reclaim_due: None,
            returned: BTreeMap::new(),
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
        for u in &run.owned {
            self.leases.remove(u);
        }
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
            } else if let Some(lease) = self.leases.remove(&u) {
                // An elastic unit goes back to the pool, never into a pre-allocation.
                run.owned.retain(|x| *x != u);
                self.free_unit(u);
                if let Some((_, for_job)) = lease.reclaim {
                    self.returned.insert(u, for_job);
                }
            } else if peak.is_some_and(|p| run.owned.len() <= p as usize) {
                self.units[u as usize].slot = Slot::Idle(id);
            } else {
                run.owned.retain(|x| *x != u);
                self.free_unit(u);
            }
        }
        Ok(())
    }

    /// One scheduling pass (the paper's Algorithm 2): reclaimed units kept past their
    /// deadline are revoked, waiting dynamic requests are served, then static jobs in priority
    /// order with reservations, backfilling and reclaims; last, waiting elastic requests are
    /// offered what no queued job could start on.
    pub fn schedule(&mut self, now: Time) -> Vec<Event> {
        self.ledger.roll(now, &self.config.dynamic);
        self.roll_usage(now);
        let mut events = Vec::new();
        self.revoke_overdue(now, &mut events);
        self.retry_pending(now, false, &mut events);
        self.start_static(now, &mut events);
        self.retry_pending(now, true, &mut events);
        self.forget_returned();
        events
    }

    /// The earliest time a pass has something to do without any other event: a waiting
    /// dynamic request times out, an advance reservation begins, a reclaim comes due or a
    /// reclaim's deadline passes.
    pub fn next_wakeup(&self) -> Option<Time> {
        let deadline = self.pending.iter().map(|(_, d)| *d).min();
        let advance = self.advance.first().map(|(t, _)| *t);
        let reclaims = self.leases.values().filter_map(|l| l.reclaim.map(|(by, _)| by)).min();
        [deadline, advance, reclaims, self.reclaim_due].into_iter().flatten().min()
    }

    fn usable_count(&self, units: &[UnitId]) -> u32 {
        units.iter().filter(|u| self.units[**u as usize].usable).count() as u32
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
        for (u, lease) in &self.leases {
            if self.units.get(*u as usize).map(|e| e.slot) != Some(Slot::Busy(lease.job)) {
                return Err(format!("elastic unit {u} of job {} is not in its use", lease.job));
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
