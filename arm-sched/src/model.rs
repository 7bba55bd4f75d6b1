//! What the core is told and what it answers: units, job specifications, dynamic requests,
//! and the events a scheduling pass produces.

use serde::{Deserialize, Serialize};

/// Time, in seconds. The core never reads a clock: callers pass `now` (Unix time in
/// `arm-server`, simulated time in `arm-sim`). [`Time::MAX`] stands for "never".
pub type Time = u64;
/// A job's id, chosen by the caller.
pub type JobId = u64;
/// A unit's index in the pool, in the order units were added.
pub type UnitId = u32;

/// One accelerator.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Unit {
    /// The host that serves it.
    pub host: String,
    /// Site labels (`key=value`).
    pub labels: Vec<(String, String)>,
}

/// A static request: what a job asks for before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobSpec {
    /// The caller's id; unique among live jobs.
    pub id: JobId,
    /// The user.
    pub user: String,
    /// The user's group.
    pub group: String,
    /// Units needed to start.
    pub size: u32,
    /// Walltime; `None` runs until ended (such a job never releases units in the plan).
    pub walltime: Option<Time>,
    /// Priority of its own, added to the configured factors (ESP's Z jobs use a large one).
    pub priority: i64,
    /// While this job waits, nothing starts out of priority order (ESP's Z jobs).
    pub exclusive: bool,
    /// An advance reservation: the job starts exactly then (CCS's fixed-time requests).
    pub start_at: Option<Time>,
    /// A pre-allocation (CooRMv2): the job starts with `peak` units set aside, uses `size` of
    /// them, and may grow up to `peak` at any time without asking the fairness policy. Unused
    /// pre-allocated units may be lent to preemptible requests.
    pub peak: Option<u32>,
}

impl JobSpec {
    /// Units set aside when it starts.
    pub fn footprint(&self) -> u32 {
        self.peak.unwrap_or(self.size).max(self.size)
    }

    /// Its walltime as a duration for planning ([`Time::MAX`]: forever).
    pub fn duration(&self) -> Time {
        self.walltime.unwrap_or(Time::MAX)
    }
}

/// A running job's request for more units ("AC_Get").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DynRequest {
    /// The caller's id for this request, echoed in events.
    pub id: u64,
    /// The requesting job.
    pub job: JobId,
    /// Fewest units worth having (a partial grant gives between `min` and `max`).
    pub min: u32,
    /// Most units wanted.
    pub max: u32,
    /// Borrow other jobs' unused pre-allocated units, which their owners may take back.
    pub preemptible: bool,
    /// Wait up to this long for units (re-tried at each pass); 0 answers at once.
    pub timeout: Time,
    /// When the job will end if granted `max` units (its declared speed-up); used by
    /// [`crate::DelayModel::Declared`] and then binding as its new walltime end.
    pub end_if_granted: Option<Time>,
    /// Elastic: the units are lent, and the scheduler may reclaim them with this much notice
    /// (seconds) when a queued job could start with them ([`Event::Reclaim`]). The planner
    /// counts them free from `now + notice`, so they delay no plan by more than the notice.
    /// A waiting elastic request (with a timeout) is an offer: it is granted what stays idle
    /// after the static jobs have started.
    #[serde(default)]
    pub elastic: Option<Time>,
}

/// Why a dynamic request was not granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// Fewer than `min` units are idle.
    NoIdleUnits {
        /// Idle units at the time.
        idle: u32,
    },
    /// The grant would delay a job of a user (or group) who may not be delayed.
    Forbidden {
        /// The job that would be delayed.
        job: JobId,
        /// Its user.
        user: String,
    },
    /// The grant would delay a job beyond its user's (or group's) limits.
    OverLimit {
        /// The job that would be delayed.
        job: JobId,
        /// Its user.
        user: String,
        /// The delay, seconds.
        delay: Time,
    },
    /// The grant would collide with an advance reservation.
    Reserved,
    /// The request waited its whole timeout.
    TimedOut,
    /// No pre-allocated units are idle to borrow.
    NothingToBorrow,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoIdleUnits { idle } => write!(f, "only {idle} accelerator(s) idle"),
            Self::Forbidden { job, user } => {
                write!(f, "it would delay queued job {job} of {user}, who may not be delayed")
            }
            Self::OverLimit { job, user, delay } => {
                write!(f, "it would delay queued job {job} of {user} by {delay} s, beyond the fairness limit")
            }
            Self::Reserved => write!(f, "it would collide with an advance reservation"),
            Self::TimedOut => write!(f, "no accelerators became available before the timeout"),
            Self::NothingToBorrow => write!(f, "no pre-allocated accelerators are idle to borrow"),
        }
    }
}

/// The answer to a dynamic request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DynOutcome {
    /// Granted these units.
    Granted(Vec<UnitId>),
    /// Rejected.
    Rejected(Rejection),
    /// Waiting (it had a timeout); a later pass answers with an [`Event`].
    Pending,
}

/// What a pass (or a request) decided, for the caller to carry out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A queued job starts on these units.
    Started {
        /// The job.
        job: JobId,
        /// Its units (the first `size` are in use, the rest pre-allocated).
        units: Vec<UnitId>,
        /// It started out of priority order.
        backfilled: bool,
    },
    /// A waiting dynamic request was granted.
    Granted {
        /// The request's id.
        request: u64,
        /// The job.
        job: JobId,
        /// The units.
        units: Vec<UnitId>,
    },
    /// A waiting dynamic request was rejected.
    Rejected {
        /// The request's id.
        request: u64,
        /// The job.
        job: JobId,
        /// Why.
        reason: Rejection,
    },
    /// Elastic units are reclaimed: the job gives them back ([`crate::Scheduler::release`])
    /// by `by`, or loses them then ([`Event::Revoked`]).
    Reclaim {
        /// The job that lent them.
        job: JobId,
        /// The units.
        units: Vec<UnitId>,
        /// When they are taken back.
        by: Time,
        /// The queued job they are reclaimed for.
        for_job: JobId,
    },
    /// Reclaimed units that were not given back by their deadline: the scheduler took them,
    /// and the caller must revoke them from the job.
    Revoked {
        /// The job that kept them.
        job: JobId,
        /// The units.
        units: Vec<UnitId>,
    },
    /// Borrowed units were taken back from a preemptible holder.
    Preempted {
        /// The borrower that loses them.
        job: JobId,
        /// The units.
        units: Vec<UnitId>,
    },
}

/// A queued job's place in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    /// The job.
    pub job: JobId,
    /// Expected start; `None` if it cannot start with the units that exist.
    pub start: Option<Time>,
}
