//! What the resource manager keeps: hosts and their accelerators, jobs, dynamic sets, sessions.
//! Everything here is stored as is (bincode) in the durable store.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Who holds an accelerator, and with which capability.
///
/// A job with a pre-allocation (CooRMv2) holds its `peak` minus its static size as
/// `preallocated` units: **spare** (set aside, unused: no set, no loan, no capability), used by
/// the job itself (in one of its sets), or **lent** to a preemptible borrower (`loan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The job (the owner).
    pub job: String,
    /// The compute node it was granted for.
    pub node: String,
    /// The dynamic set, or `None` for a static binding (or an unused pre-allocated unit).
    pub set: Option<u64>,
    /// The capability issued for it (0: none, a spare unit).
    pub capability: u64,
    /// Part of the job's pre-allocation: released, it stays set aside for the job.
    pub preallocated: bool,
    /// Lent to a preemptible borrower.
    pub loan: Option<Loan>,
}

/// A spare pre-allocated unit lent to another job, which loses it when the owner grows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loan {
    /// The borrowing job.
    pub job: String,
    /// Its node.
    pub node: String,
    /// Its set.
    pub set: u64,
    /// The capability issued to it.
    pub capability: u64,
}

impl Holder {
    /// A static or dynamic holding of `job` in use.
    pub fn using(job: &str, node: &str, set: Option<u64>, capability: u64) -> Self {
        Self { job: job.into(), node: node.into(), set, capability, preallocated: false, loan: None }
    }

    /// Set aside for its owner and unused: nobody may use it but the owner, or a borrower.
    pub fn spare(&self) -> bool {
        self.preallocated && self.set.is_none() && self.loan.is_none()
    }

    /// Who uses it now, as a holding of its own (the borrower's for a lent unit); `None` when
    /// spare.
    pub fn user(&self) -> Option<Holder> {
        match &self.loan {
            Some(loan) => Some(Holder::using(&loan.job, &loan.node, Some(loan.set), loan.capability)),
            None if self.spare() => None,
            None => Some(self.clone()),
        }
    }
}

/// One accelerator of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Device index on the backend.
    pub index: u32,
    /// Device name.
    pub name: String,
    /// Memory, bytes.
    pub memory: u64,
    /// The holder, if allocated.
    pub holder: Option<Holder>,
}

/// A registered backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Unique name.
    pub name: String,
    /// Address.
    pub addr: SocketAddr,
    /// Name in its certificate.
    pub server_name: String,
    /// Its CA (PEM).
    pub ca_pem: String,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// No new allocations.
    pub draining: bool,
    /// Heartbeats arrive (runtime state: every host starts down after a restart).
    #[serde(skip)]
    pub up: bool,
    /// Its accelerators.
    pub devices: Vec<Device>,
    /// How what its backend serves differs from `devices` (runtime state, from its link's
    /// device lists): a backend restarted on the CPU device, or with a GPU gone, must not be
    /// advertised with the GPUs it was registered with.
    #[serde(skip)]
    pub mismatch: Option<Mismatch>,
    /// Each device's identity, health and sessions, as its backend last reported them
    /// (runtime state: protocol 6 backends report them with every heartbeat, and at once when
    /// one changes). A device its backend reports unhealthy or faulty is not granted.
    #[serde(skip)]
    pub states: std::collections::BTreeMap<u32, ac_proto::backend::DeviceState>,
}

/// What a backend serves that differs from its registration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mismatch {
    /// Registered devices (indexes) it does not serve, or serves as another device: never granted
    /// while the mismatch lasts.
    pub unserved: Vec<u32>,
    /// Each difference, for admins (`armctl health`).
    pub differences: Vec<String>,
}

impl Host {
    /// `host/index`.
    pub fn accelerator_id(&self, index: u32) -> String {
        format!("{}/{index}", self.name)
    }

    /// Whether `device` may be granted now: the host is up and not draining, and its backend
    /// serves the device it was registered with.
    pub fn grantable(&self, device: &Device) -> bool {
        self.up && !self.draining && !self.unserved(device.index) && self.unhealthy(device.index).is_none()
    }

    /// Why its backend says device `index` must not be granted: a condition that persists
    /// (unhealthy), or a critical fault an admin has not cleared. `None` for a device that is
    /// healthy, unwatched, or not reported (a backend older than protocol 6).
    pub fn unhealthy(&self, index: u32) -> Option<String> {
        let state = self.states.get(&index)?;
        if state.compute_mode == ac_proto::backend::ComputeMode::Prohibited {
            return Some("PROHIBITED compute mode: it admits no process".into());
        }
        match (&state.health, state.faults) {
            (ac_proto::backend::Health::Unhealthy(reason), _) => Some(reason.clone()),
            (_, 0) => None,
            (_, faults) => Some(format!(
                "{} ({faults} critical fault(s) since its backend started; `armctl device clear {}` once it is checked)",
                state.last_fault.as_deref().unwrap_or("a critical Xid"),
                self.accelerator_id(index)
            )),
        }
    }

    /// Whether the backend does not serve the registered device `index` as registered.
    pub fn unserved(&self, index: u32) -> bool {
        self.mismatch.as_ref().is_some_and(|m| m.unserved.contains(&index))
    }

    /// Compares what the backend serves with the registered devices; `None` when they agree
    /// (index, name, kind through the name, and total memory: free memory varies).
    pub fn compare(&self, served: &[ac_proto::backend::DeviceInfo]) -> Option<Mismatch> {
        const MIB: u64 = 1 << 20;
        let mut mismatch = Mismatch::default();
        for device in &self.devices {
            let id = self.accelerator_id(device.index);
            let registered = format!("{} ({} MiB)", device.name, device.memory / MIB);
            match served.iter().find(|s| s.index == device.index) {
                None => mismatch.differences.push(format!("{id}: registered as {registered}, not served")),
                Some(s) if s.name != device.name || s.memory_total != device.memory => {
                    mismatch.differences.push(format!(
                        "{id}: registered as {registered}, served as {} ({:?}, {} MiB)",
                        s.name,
                        s.kind,
                        s.memory_total / MIB
                    ))
                }
                Some(_) => continue,
            }
            mismatch.unserved.push(device.index);
        }
        for s in served.iter().filter(|s| !self.devices.iter().any(|d| d.index == s.index)) {
            mismatch.differences.push(format!(
                "{}: served ({}, {:?}, {} MiB), not registered",
                self.accelerator_id(s.index),
                s.name,
                s.kind,
                s.memory_total / MIB
            ));
        }
        (!mismatch.differences.is_empty()).then_some(mismatch)
    }
}

/// Job states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting for its static accelerators.
    Queued,
    /// Bound.
    Running,
    /// Over.
    Ended,
}

/// A job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Id.
    pub id: String,
    /// User.
    pub user: String,
    /// The group (account) its fairness limits are charged to.
    pub group: String,
    /// Compute nodes.
    pub nodes: Vec<String>,
    /// Accelerators per node.
    pub acpn: u32,
    /// Walltime, seconds (0: none).
    pub walltime_s: u64,
    /// Unix time of submission.
    pub submitted: u64,
    /// Unix time it was bound.
    pub started: Option<u64>,
    /// Unix time it ended (the store forgets it a retention period later).
    pub ended: Option<u64>,
    /// State.
    pub state: JobState,
    /// SHA-256 of the credential (hex); empty for ad-hoc jobs, which only their session reaches.
    pub credential_hash: String,
    /// Submission order.
    pub seq: u64,
    /// Ended with its session (the embedded default, no batch system).
    pub ad_hoc: bool,
    /// The advance reservation it runs in.
    pub reservation: Option<u64>,
    /// A pre-allocation (CooRMv2): accelerators set aside at start, in all (at least its static
    /// size); it grows up to them without asking the fairness policy.
    pub peak: Option<u32>,
    /// Bound by the batch system (Slurm): it ends when the batch system says so, its
    /// processes prove their user with munge, and its grants are recorded in the batch system.
    pub batch: Option<BatchJob>,
}

impl Job {
    /// A queued job of `user` (charged to `group`) for `acpn` accelerators on each of `nodes`,
    /// with nothing else set.
    pub fn queued(id: String, user: String, group: String, nodes: Vec<String>, acpn: u32, walltime_s: u64) -> Self {
        Job {
            id,
            user,
            group,
            nodes,
            acpn,
            walltime_s,
            submitted: 0,
            started: None,
            ended: None,
            state: JobState::Queued,
            credential_hash: String::new(),
            seq: 0,
            ad_hoc: false,
            reservation: None,
            peak: None,
            batch: None,
        }
    }
}

/// What a job bound by the batch system carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchJob {
    /// The Unix uid of its user, as munge reports it.
    pub uid: u32,
}

/// An advance reservation: `count` accelerators from `start` for `duration` seconds, for the
/// jobs of `user` that run in it. Nobody else's static start or dynamic grant may collide with
/// it; its jobs are planned at its start, on its accelerators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Id.
    pub id: u64,
    /// Accelerators.
    pub count: u32,
    /// Unix time of the start.
    pub start: u64,
    /// Length, seconds.
    pub duration: u64,
    /// Whose jobs may run in it.
    pub user: String,
}

impl Reservation {
    /// Unix time of the end.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.duration)
    }
}

/// A dynamically granted set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynSet {
    /// Id.
    pub id: u64,
    /// Job.
    pub job: String,
    /// The session that got it (its lease).
    pub session: String,
    /// Accelerator ids.
    pub accelerators: Vec<String>,
    /// Granted collectively for several nodes: released only as a whole.
    pub collective: bool,
    /// The request's idempotency key: a retry gets this set again.
    pub key: String,
}

/// An accelerator of an elastic set (`AC_Get` with a notice): lent, and reclaimed with at least
/// `notice_s` seconds of notice when a queued job could start with it. Stored in a table of its
/// own, by accelerator, so the records of schema 2 are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The job it is lent to.
    pub job: String,
    /// Its set.
    pub set: u64,
    /// The least notice a reclaim gives, seconds.
    pub notice_s: u64,
    /// Being reclaimed: when it is revoked unless freed, and the queued job it is for.
    pub reclaim: Option<(u64, String)>,
}

/// An `AC_Get` that waits for accelerators (it asked to wait up to a deadline). Each scheduling
/// pass tries it before starting static jobs; granted, it becomes the [`DynSet`] with the same
/// id; rejected, it stays until its program learns why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingGet {
    /// Id, and the id of the set it becomes.
    pub id: u64,
    /// Job.
    pub job: String,
    /// The session that asked (its lease).
    pub session: String,
    /// The node the accelerators are for.
    pub node: String,
    /// Fewest wanted.
    pub min: u32,
    /// Most wanted.
    pub max: u32,
    /// Borrow pre-allocated accelerators.
    pub preemptible: bool,
    /// Unix time after which it is rejected.
    pub deadline: u64,
    /// Idempotency key.
    pub key: String,
    /// Set once it was rejected: why.
    pub rejected: Option<String>,
}

/// A program's session (`AC_Init` .. `AC_Finalize`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// SHA-256 of the token (hex).
    pub token_hash: String,
    /// Job.
    pub job: String,
    /// Node.
    pub node: String,
}

/// How a job came to hold an accelerator, for accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UsageKind {
    /// Bound before the job started: `AC_Init`'s accelerators, a Slurm prolog's binding, a
    /// scheduler-API job's static grant (a holder without a set).
    Static,
    /// Granted while it ran: an `AC_Get` (its own or a borrowed pre-allocated unit; a holder with
    /// a set).
    Dynamic,
}

/// One accelerator held by one job from `start_ms` to `end_ms` (Unix milliseconds): the
/// accounting record. Open (`end_ms: None`) while the holding lasts; closed when it goes.
/// `user` and `group` are copied from the job when the holding starts, so a record outlives the
/// job's purge.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Usage {
    /// The job.
    pub job: String,
    /// Its user.
    pub user: String,
    /// Its group (account).
    pub group: String,
    /// Static or dynamic.
    pub kind: UsageKind,
    /// The accelerator (`host/index`).
    pub accelerator: String,
    /// The capability of the holding: another capability is another holding.
    pub capability: u64,
    /// Unix milliseconds when the grant was committed.
    pub start_ms: u64,
    /// Unix milliseconds when it was released; `None` while held.
    pub end_ms: Option<u64>,
}
