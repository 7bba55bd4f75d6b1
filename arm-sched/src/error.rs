//! The crate's one error type.

use crate::{JobId, UnitId};

/// What the scheduling core refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The configuration does not parse or holds an impossible value.
    #[error("scheduler configuration: {0}")]
    Config(String),
    /// A job id is already known.
    #[error("job {0} already exists")]
    DuplicateJob(JobId),
    /// No such job (or it has ended).
    #[error("no job {0}")]
    NoSuchJob(JobId),
    /// No such unit.
    #[error("no unit {0}")]
    NoSuchUnit(UnitId),
    /// The request is malformed (zero units, more than the pool has, min above max...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// An advance reservation does not fit at the time asked for.
    #[error("the advance reservation does not fit: at most {free} units are free in that window")]
    ReservationConflict {
        /// Units free in the window.
        free: i64,
    },
    /// The job does not hold a unit it tried to release.
    #[error("job {job} does not hold unit {unit}")]
    NotHeld {
        /// The job.
        job: JobId,
        /// The unit.
        unit: UnitId,
    },
}
