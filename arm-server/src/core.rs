//! The decision core: plain functions over the ARM's state. No I/O, no clock (`now` is an
//! argument, Unix seconds), deterministic. The server persists what [`Core::take_dirty`] names
//! and turns revocations into messages; tests drive it directly.

use std::collections::{BTreeMap, BTreeSet};

use ac_proto::arm::{ArmError, ArmErrorKind, Ask, JobAuth};

use crate::model::{DynSet, Holder, Host, Job, JobState, PendingGet, Reservation, Session};
use crate::policy::{usable_free, Decision, View};

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
    /// The fairness ledger.
    Ledger,
    /// The id counter.
    NextId,
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
    dirty: BTreeSet<Key>,
    revocations: Vec<Revocation>,
}

type Outcome<T> = Result<T, ArmError>;

fn err(kind: ArmErrorKind, message: impl Into<String>) -> ArmError {
    ArmError::new(kind, message)
}

/// Whose jobs may use a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationOwner {
    /// Jobs of this user submitted into it.
    User(String),
    /// This queued job.
    Job(String),
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
        View::build(&self.scheduling, &self.ledger, &self.hosts, &self.jobs, &self.pending, &self.reservations, now)
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
        for holder in held {
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
        if job.nodes.is_empty() || job.acpn == 0 {
            return Err(err(ArmErrorKind::Invalid, "a job needs at least one node and acpn >= 1"));
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
        if !waiting && !self.jobs.values().any(|j| j.state == JobState::Queued) {
            return;
        }
        let mut view = self.view(now);
        let pass = view.pass(now);
        self.keep_ledger(&view);
        for (request, picked) in pass.granted {
            if let Some(get) = self.pending.remove(&request) {
                self.dirty.insert(Key::Pending(request));
                let parts = [(get.node.clone(), picked.len() as u32)];
                self.hold_set(get.id, &get.job, &get.session, &parts, picked, false, get.key);
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
            for (i, accel) in picked.iter().enumerate() {
                let node = job.nodes[i / job.acpn as usize].clone();
                let capability = self.fresh_id();
                self.hold(accel, Holder { job: job.id.clone(), node, set: None, capability });
            }
            let job = self.jobs.get_mut(&job_id).expect("queued job exists");
            job.state = JobState::Running;
            job.started = Some(now);
            self.dirty.insert(Key::Job(job_id));
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
        if let Some(device) = self.device_mut(accel) {
            device.holder = Some(holder);
            self.dirty.insert(Key::Host(host));
        }
    }

    fn release(&mut self, accel: &str) {
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        if let Some(device) = self.device_mut(accel) {
            if let Some(holder) = device.holder.take() {
                self.revoke(&host, holder.capability);
                self.dirty.insert(Key::Host(host));
            }
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
        let mut out = Vec::new();
        for host in self.hosts.values() {
            for device in &host.devices {
                if let Some(holder) = device.holder.as_ref().filter(|h| h.job == job) {
                    out.push((host.accelerator_id(device.index), holder.clone()));
                }
            }
        }
        out
    }

    /// Ends a job: everything it holds goes back, its sessions end.
    pub fn end_job(&mut self, id: &str, now: u64) -> Outcome<()> {
        let job = self.jobs.get_mut(id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
        job.state = JobState::Ended;
        job.ended = Some(now);
        self.dirty.insert(Key::Job(id.to_string()));
        self.drop_pending(|g| g.job == id);
        for (accel, _) in self.held_by(id) {
            self.release(&accel);
        }
        let sets: Vec<u64> = self.sets.values().filter(|s| s.job == id).map(|s| s.id).collect();
        for set in sets {
            self.sets.remove(&set);
            self.dirty.insert(Key::Set(set));
        }
        let sessions: Vec<String> =
            self.sessions.values().filter(|s| s.job == id).map(|s| s.token_hash.clone()).collect();
        for token in sessions {
            self.sessions.remove(&token);
            self.dirty.insert(Key::Session(token));
        }
        self.schedule(now);
        Ok(())
    }

    /// `AC_Init`: opens a session for a job's node (creating an ad-hoc job if asked). A retry
    /// with the same token finds the session the first call opened.
    pub fn open_session(&mut self, token_hash: String, auth: &JobAuth, node: &str, now: u64) -> Outcome<String> {
        if let Some(session) = self.sessions.get(&token_hash) {
            return Ok(session.job.clone());
        }
        let job_id = match auth {
            JobAuth::Credential { job, secret } => {
                let found = self.jobs.get(job).filter(|j| j.state != JobState::Ended && !j.ad_hoc);
                let Some(found) =
                    found.filter(|j| crate::keys::constant_time_eq(&j.credential_hash, &crate::keys::hash(secret)))
                else {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        format!("no running job `{job}` with that credential"),
                    ));
                };
                if !found.nodes.iter().any(|n| n == node) {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        format!("node `{node}` is not one of job `{job}`'s nodes"),
                    ));
                }
                job.clone()
            }
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
                    ended: None,
                };
                self.submit(job, now)?;
                id
            }
        };
        self.sessions.insert(
            token_hash.clone(),
            Session { token_hash: token_hash.clone(), job: job_id.clone(), node: node.to_string() },
        );
        self.dirty.insert(Key::Session(token_hash));
        Ok(job_id)
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

    /// `AC_Get` (and its collective form, all or nothing with no wait): grants between
    /// `ask.min` and `ask.max` now, rejects, or, when the request may wait, keeps it pending
    /// for the next passes. A request whose key was seen gets the first answer again.
    pub fn get(
        &mut self,
        token_hash: &str,
        parts: &[(String, u32)],
        collective: bool,
        ask: &Ask,
        now: u64,
    ) -> Outcome<GetOutcome> {
        let session = self.session(token_hash)?.clone();
        if let Some(seen) = self.replay(token_hash, &ask.key) {
            return Ok(seen);
        }
        let job = self.jobs.get(&session.job).ok_or_else(|| err(ArmErrorKind::NotFound, "job gone"))?;
        if job.state != JobState::Running {
            return Err(err(ArmErrorKind::Conflict, "the job's static accelerators are not bound yet"));
        }
        for (node, _) in parts {
            if !job.nodes.contains(node) {
                return Err(err(ArmErrorKind::Invalid, format!("node `{node}` is not one of the job's nodes")));
            }
        }
        if ask.min == 0 || ask.min > ask.max {
            return Err(err(ArmErrorKind::Invalid, format!("ask for 1 <= min <= max (got {}..{})", ask.min, ask.max)));
        }
        let id = self.fresh_id();
        let mut view = self.view(now);
        let decision = view.request(&session.job, ask, id, now);
        self.keep_ledger(&view);
        match decision {
            Decision::Granted(picked) => {
                let parts = if collective { parts.to_vec() } else { vec![(session.node.clone(), picked.len() as u32)] };
                self.hold_set(id, &session.job, token_hash, &parts, picked, collective, ask.key.clone());
                Ok(GetOutcome::Granted(id))
            }
            Decision::Rejected(reason) => Ok(GetOutcome::Rejected(reason)),
            Decision::Waiting => {
                let get = PendingGet {
                    id,
                    job: session.job,
                    session: token_hash.to_string(),
                    node: session.node,
                    min: ask.min,
                    max: ask.max,
                    preemptible: ask.preemptible,
                    deadline: now.saturating_add(ask.wait_s),
                    key: ask.key.clone(),
                    rejected: None,
                };
                self.pending.insert(id, get);
                self.dirty.insert(Key::Pending(id));
                Ok(GetOutcome::Waiting(id))
            }
        }
    }

    /// The answer already given to the request with `key` of this session, if any.
    fn replay(&self, token_hash: &str, key: &str) -> Option<GetOutcome> {
        if key.is_empty() {
            return None;
        }
        if let Some(set) = self.sets.values().find(|s| s.session == token_hash && s.key == key) {
            return Some(GetOutcome::Granted(set.id));
        }
        self.pending.values().find(|g| g.session == token_hash && g.key == key).map(|g| match &g.rejected {
            Some(reason) => GetOutcome::Rejected(reason.clone()),
            None => GetOutcome::Waiting(g.id),
        })
    }

    /// Where a waiting `AC_Get` stands; a rejection is forgotten once told.
    pub fn await_get(&mut self, token_hash: &str, request: u64) -> Outcome<GetOutcome> {
        self.session(token_hash)?;
        if self.sets.get(&request).is_some_and(|s| s.session == token_hash) {
            return Ok(GetOutcome::Granted(request));
        }
        let get = self
            .pending
            .get(&request)
            .filter(|g| g.session == token_hash)
            .ok_or_else(|| err(ArmErrorKind::NotFound, format!("no waiting request {request} in this session")))?;
        match get.rejected.clone() {
            Some(reason) => {
                self.pending.remove(&request);
                self.dirty.insert(Key::Pending(request));
                Ok(GetOutcome::Rejected(reason))
            }
            None => Ok(GetOutcome::Waiting(request)),
        }
    }

    /// Waiting requests ahead of `request`.
    pub fn waiting_ahead(&self, request: u64) -> u32 {
        self.pending.values().filter(|g| g.rejected.is_none() && g.id < request).count() as u32
    }

    /// Records a granted set and hands its accelerators to the job, node by node.
    #[allow(clippy::too_many_arguments)] // a set is all of these
    fn hold_set(
        &mut self,
        id: u64,
        job: &str,
        session: &str,
        parts: &[(String, u32)],
        picked: Vec<String>,
        collective: bool,
        key: String,
    ) {
        let mut picked = picked.into_iter();
        let mut accelerators = Vec::new();
        for (node, count) in parts {
            for accel in picked.by_ref().take(*count as usize) {
                let capability = self.fresh_id();
                let holder = Holder { job: job.to_string(), node: node.clone(), set: Some(id), capability };
                self.hold(&accel, holder);
                accelerators.push(accel);
            }
        }
        let set = DynSet { id, job: job.to_string(), session: session.to_string(), accelerators, collective, key };
        self.sets.insert(id, set);
        self.dirty.insert(Key::Set(id));
    }

    fn drop_pending(&mut self, which: impl Fn(&PendingGet) -> bool) {
        let gone: Vec<u64> = self.pending.values().filter(|g| which(g)).map(|g| g.id).collect();
        for id in gone {
            self.pending.remove(&id);
            self.dirty.insert(Key::Pending(id));
        }
    }

    /// Reserves `count` accelerators from `start` for `duration` seconds, for `user`'s jobs or
    /// for one queued job; refused when it does not fit beside the running jobs and the other
    /// reservations. Returns its id.
    pub fn reserve(
        &mut self,
        count: u32,
        start: u64,
        duration: u64,
        owner: ReservationOwner,
        now: u64,
    ) -> Outcome<u64> {
        if count == 0 || duration == 0 {
            return Err(err(ArmErrorKind::Invalid, "a reservation needs at least one accelerator and one second"));
        }
        if start <= now {
            return Err(err(ArmErrorKind::Invalid, format!("the start ({start}) must be in the future (now {now})")));
        }
        let user = match &owner {
            ReservationOwner::User(user) => user.clone(),
            ReservationOwner::Job(id) => {
                let job = self.jobs.get(id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
                if job.state != JobState::Queued || job.reservation.is_some() {
                    return Err(err(ArmErrorKind::Conflict, format!("job `{id}` is not queued outside a reservation")));
                }
                if job.nodes.len() as u32 * job.acpn > count {
                    return Err(err(ArmErrorKind::Invalid, format!("job `{id}` needs more than {count} accelerators")));
                }
                job.user.clone()
            }
        };
        self.view(now)
            .reservation_fits(count, start, duration, now)
            .map_err(|why| err(ArmErrorKind::Conflict, format!("the reservation does not fit: {why}")))?;
        let id = self.fresh_id();
        self.reservations.insert(id, Reservation { id, count, start, duration, user });
        self.dirty.insert(Key::Reservation(id));
        if let ReservationOwner::Job(job) = owner {
            self.jobs.get_mut(&job).expect("checked").reservation = Some(id);
            self.dirty.insert(Key::Job(job));
        }
        Ok(id)
    }

    /// Deletes a reservation: its queued jobs are planned as ordinary jobs again.
    pub fn unreserve(&mut self, id: u64, now: u64) -> Outcome<()> {
        self.reservations.remove(&id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no reservation {id}")))?;
        self.dirty.insert(Key::Reservation(id));
        self.leave_reservation(id);
        self.schedule(now);
        Ok(())
    }

    fn leave_reservation(&mut self, id: u64) {
        let inside: Vec<String> =
            self.jobs.values().filter(|j| j.reservation == Some(id)).map(|j| j.id.clone()).collect();
        for job in inside {
            self.jobs.get_mut(&job).expect("listed").reservation = None;
            self.dirty.insert(Key::Job(job));
        }
    }

    /// Forgets reservations that are over.
    pub fn purge_reservations(&mut self, now: u64) {
        let over: Vec<u64> = self.reservations.values().filter(|r| r.end() <= now).map(|r| r.id).collect();
        for id in over {
            self.reservations.remove(&id);
            self.dirty.insert(Key::Reservation(id));
            self.leave_reservation(id);
        }
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

    /// The accelerators of a set for `node` (all nodes when `None`), with their holders.
    pub fn set_members(&self, set: u64, node: Option<&str>) -> Vec<(String, Holder)> {
        let Some(set) = self.sets.get(&set) else { return Vec::new() };
        self.held_by(&set.job)
            .into_iter()
            .filter(|(a, h)| h.set == Some(set.id) && set.accelerators.contains(a) && node.is_none_or(|n| h.node == n))
            .collect()
    }

    /// Checks that a session's job owns `set`.
    pub fn own_set(&self, token_hash: &str, set: u64) -> Outcome<&DynSet> {
        let session = self.session(token_hash)?;
        self.sets
            .get(&set)
            .filter(|s| s.job == session.job)
            .ok_or_else(|| err(ArmErrorKind::NotFound, format!("no set {set} in this job")))
    }

    /// `AC_Free`: releases a set or some of its accelerators.
    pub fn free(&mut self, token_hash: &str, set: u64, only: Option<&[String]>, now: u64) -> Outcome<()> {
        let owned = self.own_set(token_hash, set)?.clone();
        let releasing: Vec<String> = match only {
            None => owned.accelerators.clone(),
            Some(_) if owned.collective => {
                return Err(err(ArmErrorKind::Invalid, "a collective set is released only as a whole"));
            }
            Some(ids) => {
                if let Some(stranger) = ids.iter().find(|id| !owned.accelerators.contains(id)) {
                    return Err(err(ArmErrorKind::NotFound, format!("`{stranger}` is not in set {set}")));
                }
                ids.to_vec()
            }
        };
        for accel in &releasing {
            self.release(accel);
        }
        let set_entry = self.sets.get_mut(&set).expect("owned");
        set_entry.accelerators.retain(|a| !releasing.contains(a));
        if set_entry.accelerators.is_empty() {
            self.sets.remove(&set);
        }
        self.dirty.insert(Key::Set(set));
        self.schedule(now);
        Ok(())
    }

    /// `AC_Finalize` (or a lease that ran out): releases the session's dynamic sets, ends an
    /// ad-hoc job, and forgets the session.
    pub fn finalize(&mut self, token_hash: &str, now: u64) -> Outcome<()> {
        let session = self.session(token_hash)?.clone();
        let sets: Vec<u64> = self.sets.values().filter(|s| s.session == token_hash).map(|s| s.id).collect();
        for set in sets {
            self.free(token_hash, set, None, now)?;
        }
        self.drop_pending(|g| g.session == token_hash);
        self.sessions.remove(token_hash);
        self.dirty.insert(Key::Session(token_hash.to_string()));
        if self.jobs.get(&session.job).is_some_and(|j| j.ad_hoc && j.state != JobState::Ended) {
            self.end_job(&session.job, now)?;
        }
        Ok(())
    }

    /// Ends jobs whose walltime plus `grace` has passed.
    pub fn expire_walltimes(&mut self, now: u64, grace: u64) -> Vec<String> {
        let over: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running && j.walltime_s > 0)
            .filter(|j| j.started.is_some_and(|s| s + j.walltime_s + grace <= now))
            .map(|j| j.id.clone())
            .collect();
        for id in &over {
            let _ = self.end_job(id, now);
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Device;

    fn host(name: &str, up: bool) -> Host {
        Host {
            name: name.into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            server_name: "x".into(),
            ca_pem: String::new(),
            labels: vec![],
            draining: false,
            up,
            devices: vec![Device { index: 0, name: "cpu".into(), memory: 1, holder: None }],
        }
    }

    fn job(id: &str, nodes: &[&str], acpn: u32) -> Job {
        Job {
            id: id.into(),
            user: "u".into(),
            group: "g".into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            acpn,
            walltime_s: 0,
            submitted: 0,
            started: None,
            state: JobState::Queued,
            credential_hash: crate::keys::hash("secret"),
            seq: 0,
            ad_hoc: false,
            reservation: None,
            ended: None,
        }
    }

    fn ask(min: u32, max: u32, key: &str) -> Ask {
        Ask { min, max, wait_s: 0, preemptible: false, key: key.into() }
    }

    fn core(hosts: usize) -> Core {
        let mut core = Core::default();
        for i in 0..hosts {
            core.add_host(host(&format!("h{i}"), true)).unwrap();
        }
        core
    }

    fn held(core: &Core) -> usize {
        core.hosts.values().flat_map(|h| &h.devices).filter(|d| d.holder.is_some()).count()
    }

    #[test]
    fn static_requests_bind_in_fifo_order_without_overtaking() {
        let mut core = core(3);
        core.submit(job("a", &["n1", "n2"], 1), 0).unwrap();
        core.submit(job("b", &["n1"], 2), 0).unwrap();
        core.submit(job("c", &["n1"], 1), 0).unwrap();
        assert_eq!(core.jobs["a"].state, JobState::Running);
        assert_eq!(core.jobs["b"].state, JobState::Queued);
        assert_eq!(core.jobs["c"].state, JobState::Queued, "FIFO: c must not overtake b");
        core.end_job("a", 1).unwrap();
        assert_eq!(core.jobs["b"].state, JobState::Running);
        assert_eq!(core.jobs["c"].state, JobState::Running);
        assert_eq!(held(&core), 3);
        assert!(core.submit(job("huge", &["n1"], 4), 2).is_err(), "more than the pool has");
    }

    #[test]
    fn dynamic_requests_are_granted_or_rejected_and_never_overallocate() {
        let mut core = core(4);
        core.submit(job("j", &["n1"], 1), 0).unwrap();
        let auth = JobAuth::Credential { job: "j".into(), secret: "secret".into() };
        core.open_session("t".into(), &auth, "n1", 0).unwrap();
        let GetOutcome::Granted(set) = core.get("t", &[], false, &ask(2, 2, "k1"), 0).unwrap() else { panic!() };
        assert_eq!(core.get("t", &[], false, &ask(2, 2, "k1"), 0).unwrap(), GetOutcome::Granted(set), "a retry");
        assert!(matches!(core.get("t", &[], false, &ask(2, 2, "k2"), 0).unwrap(), GetOutcome::Rejected(_)));
        assert_eq!(held(&core), 3);
        let first = core.sets[&set].accelerators[0].clone();
        core.free("t", set, Some(std::slice::from_ref(&first)), 1).unwrap();
        assert_eq!(held(&core), 2);
        core.finalize("t", 2).unwrap();
        assert_eq!(held(&core), 1, "finalize releases dynamic sets only");
        let revoked = core.take_revocations();
        assert_eq!(revoked.len(), 2);
    }

    #[test]
    fn partial_grants_and_waiting_requests() {
        let mut core = core(4);
        core.submit(job("a", &["n1"], 1), 0).unwrap();
        core.submit(job("b", &["n2"], 1), 0).unwrap();
        let auth = |j: &str| JobAuth::Credential { job: j.into(), secret: "secret".into() };
        core.open_session("ta".into(), &auth("a"), "n1", 0).unwrap();
        core.open_session("tb".into(), &auth("b"), "n2", 0).unwrap();
        let GetOutcome::Granted(set) = core.get("ta", &[], false, &ask(1, 5, "a1"), 0).unwrap() else { panic!() };
        assert_eq!(core.sets[&set].accelerators.len(), 2, "a partial grant of what is idle");
        let waits = Ask { wait_s: 10, ..ask(2, 2, "b1") };
        let GetOutcome::Waiting(request) = core.get("tb", &[], false, &waits, 1).unwrap() else { panic!() };
        assert_eq!(core.await_get("tb", request).unwrap(), GetOutcome::Waiting(request));
        core.free("ta", set, None, 2).unwrap();
        assert_eq!(core.await_get("tb", request).unwrap(), GetOutcome::Granted(request), "granted by the pass");
        assert_eq!(core.sets[&request].accelerators.len(), 2);
        // A request that times out is rejected once, then forgotten; a dead session leaves nothing.
        let GetOutcome::Waiting(late) = core.get("ta", &[], false, &Ask { wait_s: 5, ..ask(1, 1, "a2") }, 3).unwrap()
        else {
            panic!()
        };
        core.schedule(9);
        assert!(matches!(core.await_get("ta", late).unwrap(), GetOutcome::Rejected(_)));
        assert!(core.await_get("ta", late).is_err());
        let GetOutcome::Waiting(_) = core.get("ta", &[], false, &Ask { wait_s: 5, ..ask(1, 1, "a3") }, 10).unwrap()
        else {
            panic!()
        };
        core.finalize("ta", 11).unwrap();
        assert!(core.pending.is_empty());
    }

    #[test]
    fn ended_jobs_are_purged_after_the_retention() {
        let mut core = core(1);
        core.submit(job("a", &["n1"], 1), 0).unwrap();
        core.end_job("a", 100).unwrap();
        assert_eq!(core.purge_ended(150, 100), 0);
        assert_eq!(core.purge_ended(200, 100), 1);
        assert!(core.jobs.is_empty());
    }

    #[test]
    fn down_and_draining_hosts_get_nothing_new() {
        let mut core = core(2);
        core.set_up("h0", false, 0);
        core.drain("h1", true, 0).unwrap();
        core.submit(job("j", &["n1"], 1), 0).unwrap();
        assert_eq!(core.jobs["j"].state, JobState::Queued);
        core.drain("h1", false, 1).unwrap();
        assert_eq!(core.jobs["j"].state, JobState::Running);
        assert_eq!(core.held_by("j")[0].0, "h1/0");
    }

    #[test]
    fn wrong_credentials_and_foreign_nodes_are_refused() {
        let mut core = core(1);
        core.submit(job("j", &["n1"], 1), 0).unwrap();
        let wrong = JobAuth::Credential { job: "j".into(), secret: "guess".into() };
        assert_eq!(core.open_session("t".into(), &wrong, "n1", 0).unwrap_err().kind, ArmErrorKind::Unauthorized);
        let right = JobAuth::Credential { job: "j".into(), secret: "secret".into() };
        assert_eq!(core.open_session("t".into(), &right, "n9", 0).unwrap_err().kind, ArmErrorKind::Unauthorized);
        assert!(core.sessions.is_empty());
    }
}
