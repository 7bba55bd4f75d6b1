//! The decision core: plain functions over the ARM's state. No I/O, no clock (`now` is an
//! argument, Unix seconds), deterministic. The server persists what [`Core::take_dirty`] names
//! and turns revocations into messages; tests drive it directly.
//!
//! # Layout
//! - this file: the state ([`Core`], its fields private), dirty tracking, holding and releasing
//!   an accelerator, and the scheduling pass;
//! - `state.rs`: what the store holds ([`Durable`]) and read-only access for everyone else;
//! - `hosts.rs`, `jobs.rs`, `sessions.rs`: the pool's hosts, jobs' lives, programs' sessions;
//! - `dynamic.rs` (`AC_Get`: sets, waiting requests, pre-allocations, loans, preemption),
//!   `plain.rs` (its fast path), `elastic.rs` (lent accelerators and reclaims);
//! - `reservations.rs`: advance reservations; `accounting.rs`: intervals of accelerator use;
//! - `view.rs`: the bridge to `arm-sched`: the state rebuilt as a scheduler for each decision.
//!
//! # Invariant
//! Every change goes through a method here that marks what it touched dirty, so that the
//! store gets it: no field is writable from outside `core/`.

pub mod accounting;
mod dynamic;
mod elastic;
mod hosts;
mod jobs;
mod plain;
mod reservations;
mod sessions;
mod state;
#[cfg(test)]
mod tests;
mod view;

pub use dynamic::Preemption;
pub use reservations::ReservationOwner;
pub use sessions::StaticState;
pub use state::Durable;

use std::collections::{BTreeMap, BTreeSet};

use ac_proto::arm::{ArmError, ArmErrorKind};

use crate::model::{DynSet, Holder, Host, Job, JobState, Lease, PendingGet, Reservation, Session, Usage};
use view::{usable_free, View};

/// A key of the durable store that changed (replicated as such: a replicated manager's log
/// entries are the records a change wrote).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
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
    /// A replicated manager's member record, by replica id (its client address and signing
    /// key): never the core's, written by a membership change (`store::members`).
    Member(u64),
}

/// A capability to revoke on a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The host.
    pub host: String,
    /// The capability id.
    pub capability: u64,
}

/// The notices told to one session, and on which connection ([`Core::take_notices`]).
#[derive(Debug, Default)]
struct Told {
    link: u64,
    notices: Vec<Preemption>,
}

/// The state of the pool.
#[derive(Debug, Default)]
pub struct Core {
    /// Hosts by name.
    hosts: BTreeMap<String, Host>,
    /// Jobs by id.
    jobs: BTreeMap<String, Job>,
    /// Dynamic sets by id.
    sets: BTreeMap<u64, DynSet>,
    /// Sessions by token hash.
    sessions: BTreeMap<String, Session>,
    /// Dynamic requests waiting for accelerators (or rejected, until their program learns it).
    pending: BTreeMap<u64, PendingGet>,
    /// Advance reservations not yet over, by id.
    reservations: BTreeMap<u64, Reservation>,
    /// Next id for jobs' order, sets and capabilities.
    next_id: u64,
    /// The scheduler's settings.
    scheduling: arm_sched::Config,
    /// Delay accounting of the dynamic fairness policy (stored: a restart keeps the
    /// interval's charges).
    ledger: arm_sched::Ledger,
    /// Revocations sent but not yet acknowledged by their backend: (host, capability). Stored,
    /// and sent again after a restart.
    unacked: BTreeSet<(String, u64)>,
    /// Revocations of preempted loans, due at the end of their grace: (when, host, capability).
    delayed: BTreeSet<(u64, String, u64)>,
    /// Preemptions not yet told to the borrowing program, by session (in memory: a program
    /// that reconnects after a restart of the manager learns of it when its capability goes).
    notices: BTreeMap<String, Vec<Preemption>>,
    /// Notices told, by session, and the connection they went out on: until their deadline
    /// they are told again on the session's next connection, as a connection lost while its
    /// answer was in flight may have taken them with it (in memory, as `notices`).
    told: BTreeMap<String, Told>,
    /// How long a preempted borrower keeps an accelerator before its capability is revoked.
    preemption_grace_s: u64,
    /// The batch system's pending jobs that want accelerators, as last read from it, in its
    /// priority order (in memory). `AC_Get` decides with them in the view as queued jobs, so
    /// that the fairness policy plans around Slurm's queue; they are never started here.
    batch_queue: Vec<Job>,
    /// The jobs of `batch_queue` that Slurm holds back for want of licenses alone: a pass
    /// reclaims lent accelerators for them as for queued jobs of its own (in memory).
    batch_on_licenses: BTreeSet<String>,
    /// Open accounting intervals, by accelerator: one per accelerator in a job's use (stored;
    /// see `accounting.rs`).
    usage: BTreeMap<String, Usage>,
    /// Lent accelerators of elastic sets, by accelerator (stored).
    leases: BTreeMap<String, Lease>,
    /// The notice of each waiting elastic request, by request id (stored).
    elastic_gets: BTreeMap<u64, u64>,
    /// When the scheduler next wants a pass (a reclaim coming due or its deadline), as the
    /// last decision left it (in memory: a restart plans again at its first pass).
    wake_at: Option<u64>,
    /// Reclaims sent to programs, and accelerators revoked because a program kept them past
    /// a reclaim's deadline, since the manager started (in memory, for the metrics).
    reclaim_counts: (u64, u64),
    /// Accelerators given back by reclaims (freed, or revoked at the deadline), held for the
    /// queued job they were reclaimed for until it starts or leaves the queue: each pass's view
    /// holds them again, so no other request takes them meanwhile (in memory).
    held_for: BTreeMap<String, String>,
    /// Seconds usable accelerators were held by nobody, summed at each tick since the manager
    /// started, and the tick they are summed to (in memory, for the metrics).
    idle_seconds: (u64, u64),
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

impl Core {
    /// Keys changed since the last call, to persist.
    pub fn take_dirty(&mut self) -> BTreeSet<Key> {
        std::mem::take(&mut self.dirty)
    }

    /// Capabilities to revoke since the last call.
    pub fn take_revocations(&mut self) -> Vec<Revocation> {
        std::mem::take(&mut self.revocations)
    }

    /// Makes every id from now on greater than `floor` (a replicated manager's new leader,
    /// from its term: capability ids then order grants across leaders, which backends fence
    /// on).
    pub fn ids_above(&mut self, floor: u64) {
        if self.next_id < floor {
            self.next_id = floor;
            self.dirty.insert(Key::NextId);
        }
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
        view.hold_returned(&self.held_for);
        view
    }

    /// The view with the batch system's queue in it, for decisions that only plan: a dynamic
    /// request of `requester`.
    fn view_with_batch_queue(&self, requester: &str, now: u64) -> View {
        self.view_with_batch_jobs(|_| true, Some(requester), now)
    }

    /// The view with the batch system's pending jobs that `which` picks in it as queued jobs.
    fn view_with_batch_jobs(&self, which: impl Fn(&Job) -> bool, requester: Option<&str>, now: u64) -> View {
        let mut picked = self.batch_queue.iter().filter(|j| which(j)).peekable();
        if picked.peek().is_none() {
            return self.view_of(&self.jobs, requester, now);
        }
        let mut jobs = self.jobs.clone();
        for queued in picked {
            jobs.entry(queued.id.clone()).or_insert_with(|| queued.clone());
        }
        self.view_of(&jobs, requester, now)
    }

    fn keep_ledger(&mut self, view: &View) {
        if view.scheduler.ledger() != &self.ledger {
            self.ledger = view.scheduler.ledger().clone();
            self.dirty.insert(Key::Ledger);
        }
    }

    /// Queues a static request.
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
        // Slurm's jobs waiting for licenses may start on lent accelerators once reclaimed.
        let batch_waits = !self.leases.is_empty() && !self.batch_on_licenses.is_empty();
        if !waiting && !reclaiming && !batch_waits && !self.jobs.values().any(|j| j.state == JobState::Queued) {
            self.wake_at = None;
            return;
        }
        let mut view = match batch_waits {
            true => self.view_with_batch_jobs(|j| self.batch_on_licenses.contains(&j.id), None, now),
            false => self.view(now),
        };
        let mut pass = view.pass(now);
        // Slurm starts its own jobs (their prologs bind them): the view has them for reclaims.
        pass.started.retain(|(job, _)| self.jobs.contains_key(job));
        self.forget_held_for(&pass.started);
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

    /// Stops holding given-back accelerators for jobs that `started` now, that left the
    /// queue, or that someone else holds (a batch job's prolog binds them).
    fn forget_held_for(&mut self, started: &[(String, Vec<String>)]) {
        let mut held_for = std::mem::take(&mut self.held_for);
        held_for.retain(|accel, job| {
            let queued = self.jobs.get(job).is_some_and(|j| j.state == JobState::Queued)
                || self.batch_queue.iter().any(|j| j.id == *job);
            let free = self.device(accel).is_some_and(|d| d.holder.is_none());
            free && queued && !started.iter().any(|(s, _)| s == job)
        });
        self.held_for = held_for;
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

    fn device(&self, accel: &str) -> Option<&crate::model::Device> {
        let (host, index) = accel.rsplit_once('/')?;
        let index: u32 = index.parse().ok()?;
        self.hosts.get(host)?.devices.iter().find(|d| d.index == index)
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
        if let Some(lease) = self.leases.remove(accel) {
            self.dirty.insert(Key::Lease(accel.to_string()));
            if let Some((_, for_job)) = lease.reclaim {
                self.held_for.insert(accel.to_string(), for_job);
            }
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
}
