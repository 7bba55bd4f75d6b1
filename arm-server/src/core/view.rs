//! The bridge to the scheduling core (`arm-sched`): for each decision, the ARM's state is
//! rebuilt as a [`Scheduler`] (usable accelerators as units, running jobs with what they hold,
//! queued jobs in submission order), the core decides, and the answer is mapped back to
//! accelerator ids. Rebuilding keeps one source of truth (the stored model) at a cost linear
//! in the pool, the queue and the jobs holding something, microseconds at the sizes an ARM
//! serves; running jobs that hold nothing are left out (see [`View::build`]).

use std::collections::{BTreeMap, BTreeSet};

use arm_sched::{Config, DynOutcome, DynRequest, Event, JobSpec, Ledger, Planned, Scheduler, Unit, UnitId};

use ac_proto::arm::Ask;

use crate::model::{Host, Job, JobState, Lease, PendingGet, Reservation};

/// The core's view of the ARM's pool, with the maps back to names.
#[derive(Debug)]
pub struct View {
    /// The scheduler, loaded.
    pub scheduler: Scheduler,
    /// Accelerator id of each unit.
    pub accelerators: Vec<String>,
    /// ARM job id of each scheduler job id.
    pub jobs: BTreeMap<u64, String>,
}

/// Priority that puts a queued job of an open reservation ahead of every other.
const IN_OPEN_RESERVATION: i64 = 1 << 40;

fn spec(number: u64, job: &Job, reservation: Option<&Reservation>, now: u64) -> JobSpec {
    let mut spec = JobSpec {
        id: number,
        user: job.user.clone(),
        group: job.group.clone(),
        size: job.nodes.len() as u32 * job.acpn,
        walltime: (job.walltime_s > 0).then_some(job.walltime_s),
        peak: job.peak,
        ..Default::default()
    };
    match reservation {
        // Planned at the reservation's start (the core needs a walltime for that).
        Some(r) if job.state == JobState::Queued && r.start > now => {
            spec.start_at = Some(r.start);
            spec.walltime = Some(spec.walltime.unwrap_or(r.duration).min(r.duration));
        }
        // The reservation is open: first in line for the accelerators it holds.
        Some(r) if job.state == JobState::Queued && r.end() > now => spec.priority = IN_OPEN_RESERVATION,
        _ => {}
    }
    spec
}

impl View {
    /// Loads the pool, the jobs and the waiting dynamic requests. `ledger` carries the fairness
    /// accounting across decisions. `requester` is the job whose dynamic request is about to be
    /// decided, if any.
    ///
    /// A running job that holds nothing, lends nothing, borrows nothing and waits for nothing
    /// changes no decision (it adds no release to the profile, no usage to fair share and no
    /// delay to count), so it is left out unless it is the requester: the view's cost follows
    /// the pool and the queue, not the number of connected programs.
    #[allow(clippy::too_many_arguments)] // the parts of the model a decision reads
    pub fn build(
        config: &Config,
        ledger: &Ledger,
        hosts: &BTreeMap<String, Host>,
        jobs: &BTreeMap<String, Job>,
        pending: &BTreeMap<u64, PendingGet>,
        reservations: &BTreeMap<u64, Reservation>,
        requester: Option<&str>,
        now: u64,
    ) -> Self {
        let mut scheduler = Scheduler::new(config.clone());
        scheduler.set_ledger(ledger.clone());
        let mut accelerators = Vec::new();
        // Units are numbered in host order, device by device: `first_unit[h] + d`.
        let mut first_unit = Vec::with_capacity(hosts.len());
        for host in hosts.values() {
            first_unit.push(accelerators.len() as UnitId);
            for device in &host.devices {
                let unit = scheduler.add_unit(Unit { host: host.name.clone(), labels: host.labels.clone() });
                scheduler.set_usable(unit, host.grantable(device)).expect("just added");
                accelerators.push(host.accelerator_id(device.index));
            }
        }
        // Per owner: the units it uses and its spare (pre-allocated, unused or lent) ones; and
        // the loans, restored once every running job is in.
        let mut busy: BTreeMap<&str, Vec<UnitId>> = BTreeMap::new();
        let mut spare: BTreeMap<&str, Vec<UnitId>> = BTreeMap::new();
        let mut loans: Vec<(UnitId, &str)> = Vec::new();
        for (host, &first) in hosts.values().zip(&first_unit) {
            for (unit, device) in (first..).zip(&host.devices) {
                let Some(holder) = &device.holder else { continue };
                if holder.spare() || holder.loan.is_some() {
                    spare.entry(&holder.job).or_default().push(unit);
                } else {
                    busy.entry(&holder.job).or_default().push(unit);
                }
                if let Some(loan) = &holder.loan {
                    loans.push((unit, &loan.job));
                }
            }
        }
        let mut involved: BTreeSet<&str> = busy.keys().chain(spare.keys()).copied().collect();
        involved.extend(loans.iter().map(|(_, borrower)| *borrower));
        involved.extend(pending.values().map(|g| g.job.as_str()));
        involved.extend(requester);
        let mut ordered: Vec<&Job> = jobs.values().filter(|j| j.state == JobState::Queued).collect();
        ordered.extend(involved.into_iter().filter_map(|id| jobs.get(id)).filter(|j| j.state == JobState::Running));
        ordered.sort_by_key(|j| j.seq);
        let mut numbers = BTreeMap::new();
        let placeholders_from = ordered.len() as u64;
        for (number, job) in ordered.into_iter().enumerate() {
            let number = number as u64;
            let reservation = job.reservation.and_then(|r| reservations.get(&r));
            let placed = match job.state {
                JobState::Running => scheduler.restore_running(
                    spec(number, job, reservation, now),
                    job.submitted,
                    job.started.unwrap_or(now),
                    busy.get(job.id.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                    spare.get(job.id.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                ),
                _ => scheduler.submit(spec(number, job, reservation, now), job.submitted),
            };
            // A job the pool can no longer hold (its hosts were removed) just is not planned;
            // what it still holds is nobody else's to take.
            if placed.is_ok() {
                numbers.insert(number, job.id.clone());
            } else {
                let held = busy.get(job.id.as_str()).into_iter().chain(spare.get(job.id.as_str())).flatten();
                for &unit in held {
                    let _ = scheduler.set_usable(unit, false);
                }
            }
        }
        for (unit, borrower) in loans {
            if let Some((&number, _)) = numbers.iter().find(|(_, id)| id.as_str() == borrower) {
                let _ = scheduler.restore_loan(unit, number);
            }
        }
        let free: Vec<UnitId> = hosts
            .values()
            .zip(&first_unit)
            .flat_map(|(h, &first)| {
                (first..).zip(&h.devices).filter(|(_, d)| d.holder.is_none() && h.grantable(d)).map(|(u, _)| u)
            })
            .collect();
        Self::hold_reservations(&mut scheduler, reservations, jobs, free, placeholders_from, now);
        let mut view = Self { scheduler, accelerators, jobs: numbers };
        for get in pending.values().filter(|g| g.rejected.is_none()) {
            if let Some(number) = view.number(&get.job) {
                let req = DynRequest {
                    id: get.id,
                    job: number,
                    min: get.min,
                    max: get.max,
                    preemptible: get.preemptible,
                    timeout: get.deadline.saturating_sub(now).max(1),
                    ..Default::default()
                };
                // A request of a job that is no longer running is dropped by the core.
                let _ = view.scheduler.restore_pending(req, get.deadline);
            }
        }
        view
    }

    /// Takes out of the pool what each reservation holds beyond the jobs planned in it: as an
    /// advance reservation before its start, as a running placeholder on free accelerators while
    /// it is open. Placeholders are scheduler jobs with no ARM job behind them (numbers from
    /// `first`), so their events are ignored.
    fn hold_reservations(
        scheduler: &mut Scheduler,
        reservations: &BTreeMap<u64, Reservation>,
        jobs: &BTreeMap<String, Job>,
        mut free: Vec<UnitId>,
        first: u64,
        now: u64,
    ) {
        for (number, r) in (first..).zip(reservations.values().filter(|r| r.end() > now)) {
            let inside: u32 = jobs
                .values()
                .filter(|j| j.reservation == Some(r.id) && j.state != JobState::Ended)
                .map(|j| j.nodes.len() as u32 * j.acpn)
                .sum();
            let rest = r.count.saturating_sub(inside);
            if rest == 0 {
                continue;
            }
            let holder = JobSpec {
                id: number,
                user: r.user.clone(),
                group: r.user.clone(),
                size: rest,
                walltime: Some(r.duration),
                start_at: Some(r.start),
                ..Default::default()
            };
            // A reservation that no longer fits (hosts went down) holds what it can.
            if r.start > now {
                let _ = scheduler.submit(holder, now);
            } else {
                let take = free.len().min(rest as usize);
                let units: Vec<UnitId> = free.drain(..take).collect();
                let _ =
                    scheduler.insert_running(JobSpec { size: units.len() as u32, ..holder }, r.start, r.start, &units);
            }
        }
    }

    /// Whether `reservation` fits: `count` accelerators from `start` for `duration`, beside the
    /// running jobs and the other reservations.
    pub fn reservation_fits(&self, count: u32, start: u64, duration: u64, now: u64) -> Result<(), String> {
        let mut trial = self.scheduler.clone();
        let spec = JobSpec {
            id: u64::MAX,
            user: String::new(),
            size: count,
            walltime: Some(duration),
            start_at: Some(start),
            ..Default::default()
        };
        trial.submit(spec, now).map_err(|e| e.to_string())
    }

    fn number(&self, job: &str) -> Option<u64> {
        self.jobs.iter().find(|(_, id)| *id == job).map(|(n, _)| *n)
    }

    /// One pass: waiting dynamic requests first (granted or timed out), then the jobs that
    /// start now, with their accelerators.
    pub fn pass(&mut self, now: u64) -> Pass {
        let mut pass = Pass::default();
        for event in self.scheduler.schedule(now) {
            match event {
                // A reservation's placeholder has no ARM job: nothing to bind.
                Event::Started { job, units, .. } => {
                    if let Some(id) = self.jobs.get(&job) {
                        pass.started.push((id.clone(), self.names(&units)));
                    }
                }
                Event::Granted { request, units, .. } => pass.granted.push((request, self.names(&units))),
                Event::Rejected { request, reason, .. } => pass.rejected.push((request, reason.to_string())),
                Event::Reclaim { units, by, for_job, .. } => {
                    let for_job = self.jobs.get(&for_job).cloned().unwrap_or_default();
                    pass.reclaimed.push((self.names(&units), by, for_job));
                }
                Event::Revoked { units, .. } => pass.revoked.extend(self.names(&units)),
                // Preemptions of loans are carried out by the core when a spare is taken.
                Event::Preempted { .. } => {}
            }
        }
        pass
    }

    /// A dynamic request of `job`: granted now (between `ask.min` and `ask.max`), rejected
    /// with the reason, or waiting (only when `wait_s > 0`; a later [`View::pass`] decides).
    pub fn request(&mut self, job: &str, ask: &Ask, elastic: Option<u64>, id: u64, now: u64) -> Decision {
        let Some(number) = self.number(job) else {
            return Decision::Rejected("the job is not known to the scheduler".into());
        };
        // "Up to more than the pool has" means up to the pool; at least that many is invalid.
        let pool = self.accelerators.len() as u32;
        let req = DynRequest {
            id,
            job: number,
            min: ask.min,
            max: ask.max.min(pool.max(ask.min)),
            preemptible: ask.preemptible,
            timeout: ask.wait_s,
            elastic,
            ..Default::default()
        };
        match self.scheduler.request(req, now) {
            Ok((DynOutcome::Granted(units), _)) => Decision::Granted(self.names(&units)),
            Ok((DynOutcome::Rejected(reason), _)) => Decision::Rejected(reason.to_string()),
            Ok((DynOutcome::Pending, _)) => Decision::Waiting,
            Err(e) => Decision::Rejected(e.to_string()),
        }
    }

    /// Puts the stored leases (and their reclaims) and the notices of waiting elastic
    /// requests into the scheduler. Call once, after [`View::build`].
    pub fn restore_elastic(&mut self, leases: &BTreeMap<String, Lease>, elastic_gets: &BTreeMap<u64, u64>) {
        for (accel, lease) in leases {
            let (Some(unit), Some(job)) = (self.unit_of(accel), self.number(&lease.job)) else { continue };
            let reclaim = lease.reclaim.as_ref().map(|(by, for_job)| (*by, self.number(for_job).unwrap_or(job)));
            // A unit no longer in the job's use (its host went) is simply not lent.
            let _ = self.scheduler.restore_lease(unit, job, lease.notice_s, reclaim);
        }
        if !elastic_gets.is_empty() {
            self.scheduler.set_elastic_pending(|request| elastic_gets.get(&request).copied());
        }
    }

    /// Holds the free accelerators of `held_for` for the queued jobs they were reclaimed for.
    pub fn hold_returned(&mut self, held_for: &BTreeMap<String, String>) {
        for (accel, job) in held_for {
            if let (Some(unit), Some(job)) = (self.unit_of(accel), self.number(job)) {
                self.scheduler.hold_returned(unit, job);
            }
        }
    }

    /// The accelerators lent to `job`, with their notice.
    pub fn lent_to(&self, job: &str) -> Vec<(String, u64)> {
        let Some(number) = self.number(job) else { return Vec::new() };
        let lent = self.scheduler.lent_units(number).into_iter();
        lent.map(|(unit, notice, _)| (self.accelerators[unit as usize].clone(), notice)).collect()
    }

    /// When the scheduler next wants a pass without any other event.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.scheduler.next_wakeup()
    }

    fn unit_of(&self, accel: &str) -> Option<UnitId> {
        self.accelerators.iter().position(|a| a == accel).map(|u| u as UnitId)
    }

    /// Expected start of one queued job.
    pub fn expected_start(&self, job: &str, now: u64) -> Option<u64> {
        self.scheduler.expected_start(self.number(job)?, now)
    }

    /// Expected start of every queued job, by ARM job id.
    pub fn expected_starts(&self, now: u64) -> BTreeMap<String, Option<u64>> {
        self.scheduler
            .plan(now)
            .into_iter()
            .filter_map(|Planned { job, start }| Some((self.jobs.get(&job)?.clone(), start)))
            .collect()
    }

    fn names(&self, units: &[UnitId]) -> Vec<String> {
        units.iter().map(|u| self.accelerators[*u as usize].clone()).collect()
    }
}

/// What one pass decided, in accelerator ids and ARM job ids.
#[derive(Debug, Default)]
pub struct Pass {
    /// Jobs that start, with their accelerators.
    pub started: Vec<(String, Vec<String>)>,
    /// Waiting requests granted, with their accelerators.
    pub granted: Vec<(u64, Vec<String>)>,
    /// Waiting requests rejected (timed out), with why.
    pub rejected: Vec<(u64, String)>,
    /// Lent accelerators reclaimed: due back by when, for which queued job.
    pub reclaimed: Vec<(Vec<String>, u64, String)>,
    /// Reclaimed accelerators kept past their deadline, now taken.
    pub revoked: Vec<String>,
}

/// The answer to a dynamic request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// These accelerators.
    Granted(Vec<String>),
    /// Why not.
    Rejected(String),
    /// Left waiting.
    Waiting,
}

/// Free accelerators on hosts that are up and not draining, that their backends serve.
pub fn usable_free(hosts: &BTreeMap<String, Host>) -> usize {
    usable_free_ids(hosts).count()
}

/// The ids of [`usable_free`]'s accelerators, in host and device order (the core's unit order).
pub fn usable_free_ids(hosts: &BTreeMap<String, Host>) -> impl Iterator<Item = String> + '_ {
    hosts.values().flat_map(|h| {
        h.devices.iter().filter(|d| d.holder.is_none() && h.grantable(d)).map(|d| h.accelerator_id(d.index))
    })
}
