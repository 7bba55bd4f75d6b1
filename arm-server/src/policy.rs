//! The bridge to the scheduling core (`arm-sched`): for each decision, the ARM's state is
//! rebuilt as a [`Scheduler`] (usable accelerators as units, running jobs with what they hold,
//! queued jobs in submission order), the core decides, and the answer is mapped back to
//! accelerator ids. Rebuilding keeps one source of truth (the stored model) at a cost linear
//! in the pool and queue, microseconds at the sizes an ARM serves.

use std::collections::BTreeMap;

use arm_sched::{Config, DynOutcome, DynRequest, Event, JobSpec, Ledger, Planned, Scheduler, Unit, UnitId};

use ac_proto::arm::Ask;

use crate::model::{Host, Job, JobState, PendingGet};

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

fn spec(number: u64, job: &Job) -> JobSpec {
    JobSpec {
        id: number,
        user: job.user.clone(),
        group: job.group.clone(),
        size: job.nodes.len() as u32 * job.acpn,
        walltime: (job.walltime_s > 0).then_some(job.walltime_s),
        ..Default::default()
    }
}

impl View {
    /// Loads the pool, the jobs and the waiting dynamic requests. `ledger` carries the fairness
    /// accounting across decisions.
    pub fn build(
        config: &Config,
        ledger: &Ledger,
        hosts: &BTreeMap<String, Host>,
        jobs: &BTreeMap<String, Job>,
        pending: &BTreeMap<u64, PendingGet>,
        now: u64,
    ) -> Self {
        let mut scheduler = Scheduler::new(config.clone());
        scheduler.set_ledger(ledger.clone());
        let mut accelerators = Vec::new();
        let mut unit_of: BTreeMap<String, UnitId> = BTreeMap::new();
        for host in hosts.values() {
            for device in &host.devices {
                let id = scheduler.add_unit(Unit { host: host.name.clone(), labels: host.labels.clone() });
                scheduler.set_usable(id, host.up && !host.draining).expect("just added");
                unit_of.insert(host.accelerator_id(device.index), id);
                accelerators.push(host.accelerator_id(device.index));
            }
        }
        let mut held: BTreeMap<&str, Vec<UnitId>> = BTreeMap::new();
        for host in hosts.values() {
            for device in &host.devices {
                if let Some(holder) = &device.holder {
                    held.entry(&holder.job).or_default().push(unit_of[&host.accelerator_id(device.index)]);
                }
            }
        }
        let mut ordered: Vec<&Job> = jobs.values().filter(|j| j.state != JobState::Ended).collect();
        ordered.sort_by_key(|j| j.seq);
        let mut numbers = BTreeMap::new();
        for (number, job) in ordered.into_iter().enumerate() {
            let number = number as u64;
            let placed = match job.state {
                JobState::Running => scheduler.insert_running(
                    spec(number, job),
                    job.submitted,
                    job.started.unwrap_or(now),
                    held.get(job.id.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                ),
                _ => scheduler.submit(spec(number, job), job.submitted),
            };
            // A job the pool can no longer hold (its hosts were removed) just is not planned.
            if placed.is_ok() {
                numbers.insert(number, job.id.clone());
            }
        }
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

    fn number(&self, job: &str) -> Option<u64> {
        self.jobs.iter().find(|(_, id)| *id == job).map(|(n, _)| *n)
    }

    /// One pass: waiting dynamic requests first (granted or timed out), then the jobs that
    /// start now, with their accelerators.
    pub fn pass(&mut self, now: u64) -> Pass {
        let mut pass = Pass::default();
        for event in self.scheduler.schedule(now) {
            match event {
                Event::Started { job, units, .. } => pass.started.push((self.jobs[&job].clone(), self.names(&units))),
                Event::Granted { request, units, .. } => pass.granted.push((request, self.names(&units))),
                Event::Rejected { request, reason, .. } => pass.rejected.push((request, reason.to_string())),
                Event::Preempted { .. } => {}
            }
        }
        pass
    }

    /// A dynamic request of `job`: granted now (between `ask.min` and `ask.max`), rejected
    /// with the reason, or waiting (only when `wait_s > 0`; a later [`View::pass`] decides).
    pub fn request(&mut self, job: &str, ask: &Ask, id: u64, now: u64) -> Decision {
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
            ..Default::default()
        };
        match self.scheduler.request(req, now) {
            Ok((DynOutcome::Granted(units), _)) => Decision::Granted(self.names(&units)),
            Ok((DynOutcome::Rejected(reason), _)) => Decision::Rejected(reason.to_string()),
            Ok((DynOutcome::Pending, _)) => Decision::Waiting,
            Err(e) => Decision::Rejected(e.to_string()),
        }
    }

    /// Usable accelerators nobody holds.
    pub fn idle_units(&self) -> u32 {
        self.scheduler.idle_units()
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

/// Free accelerators on hosts that are up and not draining.
pub fn usable_free(hosts: &BTreeMap<String, Host>) -> usize {
    hosts.values().filter(|h| h.up && !h.draining).flat_map(|h| &h.devices).filter(|d| d.holder.is_none()).count()
}
