//! The decision core: plain functions over the ARM's state. No I/O, no clock (`now` is an
//! argument, Unix seconds), deterministic. The server persists what [`Core::take_dirty`] names
//! and turns revocations into messages; tests drive it directly.
//!
//! This file holds the pool, jobs, sessions and the scheduling pass; `dynamic.rs` the `AC_Get`
//! family (sets, waiting requests, pre-allocations, loans and preemption); `reservations.rs` the
//! advance reservations; `accounting.rs` the intervals of accelerator use.

pub mod accounting;
mod dynamic;
mod elastic;
mod plain;
mod reservations;
#[cfg(test)]
mod tests;

pub use dynamic::Preemption;
pub use reservations::ReservationOwner;

use std::collections::{BTreeMap, BTreeSet};

use ac_proto::arm::{ArmError, ArmErrorKind, JobAuth};

use crate::model::{DynSet, Holder, Host, Job, JobState, Lease, PendingGet, Reservation, Session, Usage};
use crate::policy::{usable_free, View};

/// A key of the durable store that changed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// A host.
    Host(String),
    /// A job.
    Job(String),
    /// A dynamic set.
    Set(u64),
    /// A session.
    Session(String),
    /// A waiting dynamic request.
    Pending(u64),
    /// A revocation a backend has not acknowledged: (host, capability).
    Revocation(String, u64),
    /// An advance reservation.
    Reservation(u64),
    /// A revocation to send once a preempted borrower's grace is over: (when, host, capability).
    Delayed(u64, String, u64),
    /// The fairness ledger.
    Ledger,
    /// The id counter.
    NextId,
    /// The open accounting interval of an accelerator.
    OpenUsage(String),
    /// A closed accounting interval, to append (records are never kept in the core).
    UsageRecord(Usage),
    /// A lent accelerator of an elastic set.
    Lease(String),
    /// The notice of a waiting elastic request.
    ElasticGet(u64),
}

/// A capability to revoke on a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The host.
    pub host: String,
    /// The capability id.
    pub capability: u64,
}

/// The state of the pool.
#[derive(Debug, Default)]
pub struct Core {
    /// Hosts by name.
    pub hosts: BTreeMap<String, Host>,
    /// Jobs by id.
    pub jobs: BTreeMap<String, Job>,
    /// Dynamic sets by id.
    pub sets: BTreeMap<u64, DynSet>,
    /// Sessions by token hash.
    pub sessions: BTreeMap<String, Session>,
    /// Dynamic requests waiting for accelerators (or rejected, until their program learns it).
    pub pending: BTreeMap<u64, PendingGet>,
    /// Advance reservations not yet over, by id.
    pub reservations: BTreeMap<u64, Reservation>,
    /// Next id for jobs' order, sets and capabilities.
    pub next_id: u64,
    /// The scheduler's settings.
    pub scheduling: arm_sched::Config,
    /// Delay accounting of the dynamic fairness policy (stored: a restart keeps the
    /// interval's charges).
    pub ledger: arm_sched::Ledger,
    /// Revocations sent but not yet acknowledged by their backend: (host, capability). Stored,
    /// and sent again after a restart.
    pub unacked: BTreeSet<(String, u64)>,
    /// Revocations of preempted loans, due at the end of their grace: (when, host, capability).
    pub delayed: BTreeSet<(u64, String, u64)>,
    /// Preemptions not yet told to the borrowing program, by session (in memory: a program
    /// that reconnects after a restart of the manager learns of it when its capability goes).
    pub notices: BTreeMap<String, Vec<Preemption>>,
    /// How long a preempted borrower keeps an accelerator before its capability is revoked.
    pub preemption_grace_s: u64,
    /// The batch system's pending jobs that want accelerators, as last read from it, in its
    /// priority order (in memory). `AC_Get` decides with them in the view as queued jobs, so
    /// that the fairness policy plans around Slurm's queue; they are never started here.
    pub batch_queue: Vec<Job>,
    /// Open accounting intervals, by accelerator: one per accelerator in a job's use (stored;
    /// see `accounting.rs`).
    pub usage: BTreeMap<String, Usage>,
    /// Lent accelerators of elastic sets, by accelerator (stored).
    pub leases: BTreeMap<String, Lease>,
    /// The notice of each waiting elastic request, by request id (stored).
    pub elastic_gets: BTreeMap<u64, u64>,
    /// When the scheduler next wants a pass (a reclaim coming due or its deadline), as the
    /// last decision left it (in memory: a restart plans again at its first pass).
    pub wake_at: Option<u64>,
    /// Reclaims sent to programs, and accelerators revoked because a program kept them past
    /// a reclaim's deadline, since the manager started (in memory, for the metrics).
    pub reclaim_counts: (u64, u64),
    /// Seconds usable accelerators were held by nobody, summed at each tick since the manager
    /// started, and the tick they are summed to (in memory, for the metrics).
    pub idle_seconds: (u64, u64),
    dirty: BTreeSet<Key>,
    revocations: Vec<Revocation>,
}

type Outcome<T> = Result<T, ArmError>;

fn err(kind: ArmErrorKind, message: impl Into<String>) -> ArmError {
    ArmError::new(kind, message)
}

/// The answer to an `AC_Get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetOutcome {
    /// This set.
    Granted(u64),
    /// Why not.
    Rejected(String),
    /// Waiting, as this request.
    Waiting(u64),
}

/// What a session sees of its static allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticState {
    /// Bound: accelerator ids for the session's node, in a stable order.
    Bound(Vec<String>),
    /// Queued behind `position` jobs; needs `needed`, `free` are free.
    Queued {
        /// Jobs ahead.
        position: u32,
        /// Accelerators needed.
        needed: u32,
        /// Accelerators free.
        free: u32,
        /// When the plan expects it to start (Unix time).
        expected_start: Option<u64>,
    },
}

impl Core {
    /// Keys changed since the last call, to persist.
    pub fn take_dirty(&mut self) -> BTreeSet<Key> {
        std::mem::take(&mut self.dirty)
    }

    /// Capabilities to revoke since the last call.
    pub fn take_revocations(&mut self) -> Vec<Revocation> {
        std::mem::take(&mut self.revocations)
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.dirty.insert(Key::NextId);
        self.next_id
    }

    fn view(&self, now: u64) -> View {
        self.view_of(&self.jobs, None, now)
    }

    fn view_of(&self, jobs: &BTreeMap<String, Job>, requester: Option<&str>, now: u64) -> View {
        let (hosts, pending, reservations) = (&self.hosts, &self.pending, &self.reservations);
        let mut view = View::build(&self.scheduling, &self.ledger, hosts, jobs, pending, reservations, requester, now);
        view.restore_elastic(&self.leases, &self.elastic_gets);
        view
    }

    /// The view with the batch system's queue in it, for decisions that only plan: a dynamic
    /// request of `requester`.
    fn view_with_batch_queue(&self, requester: &str, now: u64) -> View {
        if self.batch_queue.is_empty() {
            return self.view_of(&self.jobs, Some(requester), now);
        }
        let mut jobs = self.jobs.clone();
        for queued in &self.batch_queue {
            jobs.entry(queued.id.clone()).or_insert_with(|| queued.clone());
        }
        self.view_of(&jobs, Some(requester), now)
    }

    fn keep_ledger(&mut self, view: &View) {
        if view.scheduler.ledger() != &self.ledger {
            self.ledger = view.scheduler.ledger().clone();
            self.dirty.insert(Key::Ledger);
        }
    }

    /// Registers a host with its devices.
    pub fn add_host(&mut self, host: Host) -> Outcome<()> {
        if self.hosts.contains_key(&host.name) {
            return Err(err(ArmErrorKind::Conflict, format!("host `{}` is already registered", host.name)));
        }
        if host.name.contains('/') || host.name.is_empty() {
            return Err(err(ArmErrorKind::Invalid, "host names must be non-empty and contain no `/`"));
        }
        self.dirty.insert(Key::Host(host.name.clone()));
        self.hosts.insert(host.name.clone(), host);
        Ok(())
    }

    /// Marks a host up or down (heartbeats). Returns whether it changed.
    pub fn set_up(&mut self, name: &str, up: bool, now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        if host.up == up {
            return false;
        }
        host.up = up;
        if up {
            self.schedule(now);
        }
        true
    }

    /// Records the devices `name`'s backend serves (from its link): registered devices it does
    /// not serve as registered are not granted until it does again (runtime state, not
    /// stored). Returns whether that changed.
    pub fn set_served(&mut self, name: &str, served: &[ac_proto::backend::DeviceInfo], now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        let mismatch = host.compare(served);
        if host.mismatch == mismatch {
            return false;
        }
        let unserved = |m: &Option<crate::model::Mismatch>| m.as_ref().map_or(0, |m| m.unserved.len());
        let fewer = unserved(&mismatch) < unserved(&host.mismatch);
        host.mismatch = mismatch;
        if fewer {
            self.schedule(now);
        }
        true
    }

    /// Records each device's state as `name`'s backend reports it. Returns whether a device
    /// became grantable or ungrantable (health or faults).
    pub fn set_states(&mut self, name: &str, states: Vec<ac_proto::backend::DeviceState>, now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        let out = |h: &crate::model::Host| -> Vec<u32> {
            h.devices.iter().map(|d| d.index).filter(|&i| h.unhealthy(i).is_some()).collect()
        };
        let before = out(host);
        host.states = states.into_iter().map(|s| (s.index, s)).collect();
        let after = out(host);
        // One back in the pool may start a queued job.
        if before.iter().any(|i| !after.contains(i)) {
            self.schedule(now);
        }
        before != after
    }

    /// What admins should know about the hosts: backends that serve other devices than they were
    /// registered with, and accelerators their backends report unhealthy or faulty.
    pub fn host_problems(&self) -> Vec<String> {
        let unhealthy = self.hosts.values().flat_map(|h| {
            h.devices.iter().filter_map(move |d| {
                let reason = h.unhealthy(d.index)?;
                Some(format!("accelerator {} is not granted: {reason}", h.accelerator_id(d.index)))
            })
        });
        let mismatched = self.hosts.values().filter_map(|h| Some((h, h.mismatch.as_ref()?)));
        let mut problems: Vec<String> = unhealthy.collect();
        problems.extend(mismatched
            .map(|(h, m)| {
                format!(
                    "host {} serves other devices than it was registered with ({}); {} of its accelerator(s) are not \
                     granted until its backend serves them again (or remove and add the host to register what it serves)",
                    h.name,
                    m.differences.join("; "),
                    m.unserved.len()
                )
            }));
        problems
    }

    /// Drains (or resumes) a host.
    pub fn drain(&mut self, name: &str, drain: bool, now: u64) -> Outcome<()> {
        let host = self.hosts.get_mut(name).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no host `{name}`")))?;
        host.draining = drain;
        self.dirty.insert(Key::Host(name.to_string()));
        if !drain {
            self.schedule(now);
        }
        Ok(())
    }

    /// Removes a host: refused while allocated unless `force`, which revokes the allocations.
    pub fn remove_host(&mut self, name: &str, force: bool) -> Outcome<Host> {
        let host = self.hosts.get(name).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no host `{name}`")))?;
        let held: Vec<Holder> = host.devices.iter().filter_map(|d| d.holder.clone()).collect();
        if !held.is_empty() && !force {
            return Err(err(
                ArmErrorKind::Conflict,
                format!("host `{name}` has {} allocated accelerator(s); drain it, or remove with --force", held.len()),
            ));
        }
        for holder in held.iter().filter_map(Holder::user) {
            // Sent as the link closes; a removed host acknowledges nothing, so none is kept.
            self.revocations.push(Revocation { host: name.to_string(), capability: holder.capability });
            if let Some(set_id) = holder.set {
                let prefix = format!("{name}/");
                if let Some(set) = self.sets.get_mut(&set_id) {
                    set.accelerators.retain(|a| !a.starts_with(&prefix));
                    self.dirty.insert(Key::Set(set_id));
                }
            }
        }
        let delayed: Vec<(u64, String, u64)> = self.delayed.iter().filter(|(_, h, _)| h == name).cloned().collect();
        for (at, host, capability) in delayed {
            self.delayed.remove(&(at, host.clone(), capability));
            self.dirty.insert(Key::Delayed(at, host, capability));
        }
        let forgotten: Vec<(String, u64)> = self.unacked.iter().filter(|(h, _)| h == name).cloned().collect();
        for (host, capability) in forgotten {
            self.acknowledge(&host, capability);
        }
        self.dirty.insert(Key::Host(name.to_string()));
        Ok(self.hosts.remove(name).expect("checked above"))
    }

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

    /// Queued jobs in the order the policy serves them.
    pub fn queue(&self) -> Vec<&Job> {
        let mut queued: Vec<&Job> = self.jobs.values().filter(|j| j.state == JobState::Queued).collect();
        queued.sort_by_key(|j| j.seq);
        queued
    }

    /// One scheduling pass: waiting dynamic requests first (granted, or rejected once their
    /// deadline passed), then every queued job that may start now is bound.
    pub fn schedule(&mut self, now: u64) {
        let waiting = self.pending.values().any(|g| g.rejected.is_none());
        let reclaiming = self.leases.values().any(|l| l.reclaim.is_some());
        if !waiting && !reclaiming && !self.jobs.values().any(|j| j.state == JobState::Queued) {
            self.wake_at = None;
            return;
        }
        let mut view = self.view(now);
        let pass = view.pass(now);
        self.keep_ledger(&view);
        self.wake_at = view.next_wakeup();
        self.take_back(&pass);
        for (request, picked) in pass.granted {
            if let Some(get) = self.pending.remove(&request) {
                self.dirty.insert(Key::Pending(request));
                let parts = [(get.node.clone(), picked.len() as u32)];
                self.hold_set(get.id, &get.job, &get.session, &parts, picked, false, get.key, now);
                if self.elastic_gets.contains_key(&get.id) {
                    self.forget_elastic_get(get.id);
                    self.lend_granted(&view, get.id, &get.job);
                }
            }
        }
        for (request, reason) in pass.rejected {
            if let Some(get) = self.pending.get_mut(&request) {
                get.rejected = Some(reason);
                self.dirty.insert(Key::Pending(request));
            }
        }
        for (job_id, picked) in pass.started {
            let job = self.jobs.get(&job_id).expect("queued job exists").clone();
            let size = job.nodes.len() * job.acpn as usize;
            for (i, accel) in picked.iter().enumerate() {
                if i >= size {
                    // Beyond its size: its pre-allocation, spare until it grows into it.
                    let spare = Holder { preallocated: true, ..Holder::using(&job.id, &job.nodes[0], None, 0) };
                    self.hold(accel, spare);
                    continue;
                }
                let node = job.nodes[i / job.acpn as usize].clone();
                let capability = self.fresh_id();
                self.hold(accel, Holder::using(&job.id, &node, None, capability));
            }
            let job = self.jobs.get_mut(&job_id).expect("queued job exists");
            job.state = JobState::Running;
            job.started = Some(now);
            self.dirty.insert(Key::Job(job_id));
        }
    }

    /// What time alone decides, called periodically: reservations that are over go, and a
    /// pass runs if a waiting request's deadline passed or a reservation began with jobs queued
    /// in it. Anything else that can start something runs its own pass when it happens.
    pub fn tick(&mut self, now: u64) {
        let (idle, since) = self.idle_seconds;
        let elapsed = if since == 0 { 0 } else { now.saturating_sub(since) };
        self.idle_seconds = (idle + elapsed * usable_free(&self.hosts) as u64, now);
        let purged = self.purge_reservations(now);
        let deadline = self.pending.values().any(|g| g.rejected.is_none() && g.deadline <= now);
        let woken = self.wake_at.is_some_and(|at| at <= now)
            || self.leases.values().any(|l| l.reclaim.as_ref().is_some_and(|(by, _)| *by <= now));
        if purged || deadline || woken || self.reservation_due(now) {
            self.schedule(now);
        }
    }

    /// Expected start of one queued job: the planning view up to that job only, since waiting
    /// programs ask for it at every poll.
    pub fn expected_start(&self, job: &str, now: u64) -> Option<u64> {
        self.view(now).expected_start(job, now)
    }

    /// Expected start of every queued job (the planning view), by job id.
    pub fn expected_starts(&self, now: u64) -> BTreeMap<String, Option<u64>> {
        self.view(now).expected_starts(now)
    }

    fn device_mut(&mut self, accel: &str) -> Option<&mut crate::model::Device> {
        let (host, index) = accel.rsplit_once('/')?;
        let index: u32 = index.parse().ok()?;
        self.hosts.get_mut(host)?.devices.iter_mut().find(|d| d.index == index)
    }

    fn hold(&mut self, accel: &str, holder: Holder) {
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        // Never two holders: one the scheduler could not place (its hosts shrank) loses it.
        self.release(accel);
        if let Some(device) = self.device_mut(accel) {
            device.holder = Some(holder);
            self.dirty.insert(Key::Host(host));
        }
    }

    /// The holder of an accelerator, to change it (the host is then marked changed).
    fn holder_mut(&mut self, accel: &str) -> Option<&mut Holder> {
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        self.dirty.insert(Key::Host(host));
        self.device_mut(accel)?.holder.as_mut()
    }

    /// Frees an accelerator: back to the pool, its capabilities revoked.
    fn release(&mut self, accel: &str) {
        if self.leases.remove(accel).is_some() {
            self.dirty.insert(Key::Lease(accel.to_string()));
        }
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        if let Some(holder) = self.device_mut(accel).and_then(|d| d.holder.take()) {
            for capability in [Some(holder.capability), holder.loan.map(|l| l.capability)].into_iter().flatten() {
                if capability != 0 {
                    self.revoke(&host, capability);
                }
            }
            self.dirty.insert(Key::Host(host));
        }
    }

    /// Revokes a capability on its host: sent after the commit, kept until acknowledged.
    fn revoke(&mut self, host: &str, capability: u64) {
        self.revocations.push(Revocation { host: host.to_string(), capability });
        self.unacked.insert((host.to_string(), capability));
        self.dirty.insert(Key::Revocation(host.to_string(), capability));
    }

    /// A backend stored a revocation: it need not be sent again.
    pub fn acknowledge(&mut self, host: &str, capability: u64) {
        if self.unacked.remove(&(host.to_string(), capability)) {
            self.dirty.insert(Key::Revocation(host.to_string(), capability));
        }
    }

    /// Accelerators held by a job: (accelerator id, holder).
    pub fn held_by(&self, job: &str) -> Vec<(String, Holder)> {
        self.devices_where(|h| h.user().filter(|u| u.job == job))
    }

    /// Accelerators that `job` owns (used, spare or lent), with their holders.
    pub fn owned_by(&self, job: &str) -> Vec<(String, Holder)> {
        self.devices_where(|h| (h.job == job).then(|| h.clone()))
    }

    fn devices_where(&self, pick: impl Fn(&Holder) -> Option<Holder>) -> Vec<(String, Holder)> {
        let mut out = Vec::new();
        for host in self.hosts.values() {
            for device in &host.devices {
                if let Some(holder) = device.holder.as_ref().and_then(&pick) {
                    out.push((host.accelerator_id(device.index), holder));
                }
            }
        }
        out
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
            self.notices.remove(&token);
            self.sessions.remove(&token);
            self.dirty.insert(Key::Session(token));
        }
        self.schedule(now);
        Ok(())
    }

    /// The live, batch-submitted job `job` whose credential is `secret`, if `node` is one of its
    /// nodes.
    fn job_with_credential(&self, job: &str, secret: &str, node: &str) -> Outcome<&Job> {
        let found = self.jobs.get(job).filter(|j| j.state != JobState::Ended && !j.ad_hoc);
        let Some(found) =
            found.filter(|j| crate::keys::constant_time_eq(&j.credential_hash, &crate::keys::hash(secret)))
        else {
            return Err(err(ArmErrorKind::Unauthorized, format!("no running job `{job}` with that credential")));
        };
        if !found.nodes.iter().any(|n| n == node) {
            return Err(err(ArmErrorKind::Unauthorized, format!("node `{node}` is not one of job `{job}`'s nodes")));
        }
        Ok(found)
    }

    /// The accelerators the job of `auth` holds for `node`, with their hosts (`Request::Routes`):
    /// read-only, and only for a job credential that checks out.
    pub fn routes(&self, auth: &JobAuth, node: &str) -> Outcome<Vec<(String, &Host)>> {
        let JobAuth::Credential { job, secret } = auth else {
            return Ok(Vec::new());
        };
        let job = self.job_with_credential(job, secret, node)?;
        let held = self.held_by(&job.id).into_iter().filter(|(_, holder)| holder.node == node);
        Ok(held
            .filter_map(|(id, _)| {
                let host = self.hosts.get(id.rsplit_once('/')?.0)?;
                Some((id, host))
            })
            .collect())
    }

    /// `AC_Init`: opens a session for a job's node (creating an ad-hoc job if asked). A retry
    /// with the same token finds the session the first call opened.
    pub fn open_session(&mut self, token_hash: String, auth: &JobAuth, node: &str, now: u64) -> Outcome<String> {
        if let Some(session) = self.sessions.get(&token_hash) {
            return Ok(session.job.clone());
        }
        let job_id = match auth {
            JobAuth::Credential { job, secret } => self.job_with_credential(job, secret, node)?.id.clone(),
            JobAuth::AdHoc { acpn } => {
                let id = format!("adhoc-{}", self.next_id + 1);
                let job = Job {
                    id: id.clone(),
                    user: "adhoc".into(),
                    group: "adhoc".into(),
                    nodes: vec![node.to_string()],
                    acpn: *acpn,
                    walltime_s: 0,
                    submitted: now,
                    started: None,
                    state: JobState::Queued,
                    credential_hash: String::new(),
                    seq: 0,
                    ad_hoc: true,
                    reservation: None,
                    peak: None,
                    ended: None,
                    batch: None,
                };
                self.submit(job, now)?;
                id
            }
            JobAuth::Munge { .. } => {
                return Err(err(ArmErrorKind::Internal, "a munge credential is checked before the core sees it"));
            }
            JobAuth::SameJob { token } => {
                let unknown = || err(ArmErrorKind::Unauthorized, "no session with that token");
                let first = self.sessions.get(&crate::keys::hash(token)).ok_or_else(unknown)?;
                let job = self.jobs.get(&first.job).filter(|j| j.state != JobState::Ended).ok_or_else(unknown)?;
                // An ad-hoc job lives on its first node; its other processes must run there too.
                if !job.nodes.iter().any(|n| n == node) {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        format!("node `{node}` is not one of job `{}`'s nodes", job.id),
                    ));
                }
                job.id.clone()
            }
        };
        self.insert_session(token_hash, job_id, node)
    }

    /// `AC_Init` of a process whose user munge vouched for (`uid`): a session of batch job
    /// `job` on `node`, if the job is that user's and runs there.
    pub fn open_batch_session(&mut self, token_hash: String, job: &str, uid: u32, node: &str) -> Outcome<String> {
        if let Some(session) = self.sessions.get(&token_hash) {
            return Ok(session.job.clone());
        }
        let refused = |why: String| err(ArmErrorKind::Unauthorized, why);
        let found = self.jobs.get(job).filter(|j| j.state == JobState::Running);
        let found = found.ok_or_else(|| refused(format!("no running batch job `{job}`")))?;
        match &found.batch {
            Some(batch) if batch.uid == uid => {}
            Some(_) => return Err(refused(format!("job `{job}` is not a job of uid {uid}"))),
            None => return Err(refused(format!("job `{job}` was not bound by the batch system"))),
        }
        if !found.nodes.iter().any(|n| n == node) {
            return Err(refused(format!("node `{node}` is not one of job `{job}`'s nodes")));
        }
        self.insert_session(token_hash, job.to_string(), node)
    }

    fn insert_session(&mut self, token_hash: String, job: String, node: &str) -> Outcome<String> {
        let session = Session { token_hash: token_hash.clone(), job: job.clone(), node: node.to_string() };
        self.sessions.insert(token_hash.clone(), session);
        self.dirty.insert(Key::Session(token_hash));
        Ok(job)
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

    /// The session for a token hash.
    pub fn session(&self, token_hash: &str) -> Outcome<&Session> {
        self.sessions.get(token_hash).ok_or_else(|| err(ArmErrorKind::Unauthorized, "unknown or expired session"))
    }

    /// Where a session's static allocation stands.
    pub fn static_state(&self, token_hash: &str, now: u64) -> Outcome<StaticState> {
        let session = self.session(token_hash)?;
        let job = &self.jobs[&session.job];
        if job.state == JobState::Queued {
            let position = self.queue().iter().position(|j| j.id == job.id).unwrap_or(0) as u32;
            return Ok(StaticState::Queued {
                position,
                needed: job.nodes.len() as u32 * job.acpn,
                free: usable_free(&self.hosts) as u32,
                expected_start: self.expected_start(&job.id, now),
            });
        }
        let bound = self
            .held_by(&job.id)
            .into_iter()
            .filter(|(_, h)| h.set.is_none() && h.node == session.node)
            .map(|(a, _)| a)
            .collect();
        Ok(StaticState::Bound(bound))
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
