//! Jobs' lives: submitted (or bound by the batch system's prolog), ended, their walltimes
//! kept, and forgotten after their retention.

use ac_proto::arm::ArmErrorKind;

use super::view::usable_free;
use super::{err, Core, Key, Outcome};
use crate::model::{Holder, Job, JobState};

impl Core {
    /// Queues a static request.
    pub fn submit(&mut self, mut job: Job, now: u64) -> Outcome<()> {
        if self.jobs.contains_key(&job.id) {
            return Err(err(ArmErrorKind::Conflict, format!("job `{}` exists", job.id)));
        }
        // A job may hold nothing static (acpn 0): it starts at once, and its program asks at run
        // time.
        if job.nodes.is_empty() {
            return Err(err(ArmErrorKind::Invalid, "a job needs at least one node"));
        }
        let size = job.nodes.len() as u32 * job.acpn;
        let total: usize = self.hosts.values().map(|h| h.devices.len()).sum();
        if job.peak.is_some_and(|peak| peak < size || peak as usize > total) {
            return Err(err(
                ArmErrorKind::Invalid,
                format!("a peak is between the job's size ({size}) and the pool ({total})"),
            ));
        }
        if let Some(id) = job.reservation {
            let r = self
                .reservations
                .get(&id)
                .ok_or_else(|| err(ArmErrorKind::NotFound, format!("no reservation {id}")))?;
            if r.user != job.user {
                return Err(err(ArmErrorKind::Invalid, format!("reservation {id} is for {}'s jobs", r.user)));
            }
        }
        let total: usize = self.hosts.values().map(|h| h.devices.len()).sum();
        if job.nodes.len() * job.acpn as usize > total {
            return Err(err(
                ArmErrorKind::Invalid,
                format!("job needs {} accelerators, the pool has {total}", job.nodes.len() * job.acpn as usize),
            ));
        }
        job.seq = self.fresh_id();
        job.state = JobState::Queued;
        job.submitted = now;
        if size == 0 && job.peak.unwrap_or(0) == 0 {
            // Nothing to wait for: it runs, and asks at run time.
            (job.state, job.started) = (JobState::Running, Some(now));
        }
        self.dirty.insert(Key::Job(job.id.clone()));
        self.jobs.insert(job.id.clone(), job);
        self.schedule(now);
        Ok(())
    }

    /// The batch system starts `job` (its prolog): binds its static accelerators now, or fails
    /// and leaves no trace, so that the batch system requeues it. A prolog runs once per start,
    /// before the job's processes: a batch job of the same id still bound here is an earlier
    /// run (requeued, or the id reused after its epilog was missed) and is ended first, so
    /// nothing of it passes to the new one; returns when that earlier run was bound. An ended
    /// job of the same id is forgotten.
    pub fn bind_batch_job(&mut self, job: Job, now: u64) -> Outcome<Option<u64>> {
        let earlier = self.jobs.get(&job.id).filter(|j| j.batch.is_some() && j.state != JobState::Ended);
        let earlier = earlier.map(|j| j.started.unwrap_or(j.submitted));
        if earlier.is_some() {
            self.end_job(&job.id, now)?;
        }
        if self.jobs.get(&job.id).is_some_and(|j| j.state == JobState::Ended) {
            self.jobs.remove(&job.id);
        }
        let id = job.id.clone();
        let needed = job.nodes.len() as u32 * job.acpn;
        self.submit(job, now)?;
        if self.jobs[&id].state == JobState::Running {
            return Ok(earlier);
        }
        let free = usable_free(&self.hosts);
        self.jobs.remove(&id);
        self.dirty.insert(Key::Job(id.clone()));
        Err(err(
            ArmErrorKind::Conflict,
            format!("job `{id}` needs {needed} accelerator(s) now and {free} are free: the batch system's pool is out of step"),
        ))
    }

    /// Ends a job: everything it holds goes back, its sessions end.
    pub fn end_job(&mut self, id: &str, now: u64) -> Outcome<()> {
        let job = self.jobs.get_mut(id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
        if job.state == JobState::Ended {
            return Ok(());
        }
        job.state = JobState::Ended;
        job.ended = Some(now);
        self.dirty.insert(Key::Job(id.to_string()));
        self.drop_pending(|g| g.job == id);
        for (accel, holder) in self.owned_by(id) {
            match holder.loan {
                // What it lent stays with the borrower, as the borrower's own.
                Some(loan) => {
                    let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
                    if holder.capability != 0 {
                        self.revoke(&host, holder.capability);
                    }
                    let kept = Holder::using(&loan.job, &loan.node, Some(loan.set), loan.capability);
                    *self.holder_mut(&accel).expect("owned") = kept;
                }
                None => self.release(&accel),
            }
        }
        for (accel, _) in self.held_by(id) {
            self.return_loan(&accel);
        }
        let sets: Vec<u64> = self.sets.values().filter(|s| s.job == id).map(|s| s.id).collect();
        for set in sets {
            self.sets.remove(&set);
            self.dirty.insert(Key::Set(set));
        }
        let sessions: Vec<String> =
            self.sessions.values().filter(|s| s.job == id).map(|s| s.token_hash.clone()).collect();
        for token in sessions {
            self.forget_notices(&token);
            self.sessions.remove(&token);
            self.dirty.insert(Key::Session(token));
        }
        self.schedule(now);
        Ok(())
    }

    /// Forgets jobs that ended `retention` seconds ago or more; returns how many.
    pub fn purge_ended(&mut self, now: u64, retention: u64) -> usize {
        let old: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Ended && j.ended.is_some_and(|e| e.saturating_add(retention) <= now))
            .map(|j| j.id.clone())
            .collect();
        for id in &old {
            self.jobs.remove(id);
            self.dirty.insert(Key::Job(id.clone()));
        }
        old.len()
    }

    /// A batch job's walltime as the batch system has it now (an admin raised or lowered it).
    pub fn set_walltime(&mut self, job: &str, walltime_s: u64) -> Outcome<()> {
        let found = self.jobs.get_mut(job).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{job}`")))?;
        if found.walltime_s != walltime_s {
            found.walltime_s = walltime_s;
            self.dirty.insert(Key::Job(job.to_string()));
        }
        Ok(())
    }

    /// Ends jobs whose walltime plus `grace` has passed. Batch jobs are not: the batch system
    /// ends them (its epilog), and its limit may have changed since the last reconciliation.
    pub fn expire_walltimes(&mut self, now: u64, grace: u64) -> Vec<String> {
        let over: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running && j.walltime_s > 0 && j.batch.is_none())
            .filter(|j| j.started.is_some_and(|s| s + j.walltime_s + grace <= now))
            .map(|j| j.id.clone())
            .collect();
        for id in &over {
            let _ = self.end_job(id, now);
        }
        over
    }
}
