//! The bridge to the scheduling core (`arm-sched`): for each decision, the ARM's state is
//! rebuilt as a [`Scheduler`] (usable accelerators as units, running jobs with what they hold,
//! queued jobs in submission order), the core decides, and the answer is mapped back to
//! accelerator ids. Rebuilding keeps one source of truth (the stored model) at a cost linear
//! in the pool and queue, microseconds at the sizes an ARM serves.

use std::collections::BTreeMap;

use arm_sched::{Config, DynOutcome, DynRequest, Event, JobSpec, Ledger, Planned, Scheduler, Unit, UnitId};

use crate::model::{Host, Job, JobState};

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
        // The ARM has no groups yet: each user is its own group.
        group: job.user.clone(),
        size: job.nodes.len() as u32 * job.acpn,
        walltime: (job.walltime_s > 0).then_some(job.walltime_s),
        ..Default::default()
    }
}

impl View {
    /// Loads the pool and the jobs. `ledger` carries the fairness accounting across decisions.
    pub fn build(
        config: &Config,
        ledger: &Ledger,
        hosts: &BTreeMap<String, Host>,
        jobs: &BTreeMap<String, Job>,
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
        Self { scheduler, accelerators, jobs: numbers }
    }

    fn number(&self, job: &str) -> Option<u64> {
        self.jobs.iter().find(|(_, id)| *id == job).map(|(n, _)| *n)
    }

    /// One pass: the jobs that start now, with their accelerators.
    pub fn starts(&mut self, now: u64) -> Vec<(String, Vec<String>)> {
        self.scheduler
            .schedule(now)
            .into_iter()
            .filter_map(|event| match event {
                Event::Started { job, units, .. } => Some((self.jobs[&job].clone(), self.names(&units))),
                _ => None,
            })
            .collect()
    }

    /// A dynamic request for `count` accelerators: `Ok(ids)` or `Err(reason)`.
    pub fn grant(&mut self, job: &str, count: u32, now: u64) -> Result<Vec<String>, String> {
        let number = self.number(job).ok_or("the job is not known to the scheduler")?;
        let req = DynRequest { id: 0, job: number, min: count, max: count, ..Default::default() };
        match self.scheduler.request(req, now).map_err(|e| e.to_string())?.0 {
            DynOutcome::Granted(units) => Ok(self.names(&units)),
            DynOutcome::Rejected(reason) => Err(reason.to_string()),
            DynOutcome::Pending => Err("the request waits".into()),
        }
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

/// Free accelerators on hosts that are up and not draining.
pub fn usable_free(hosts: &BTreeMap<String, Host>) -> usize {
    hosts.values().filter(|h| h.up && !h.draining).flat_map(|h| &h.devices).filter(|d| d.holder.is_none()).count()
}
