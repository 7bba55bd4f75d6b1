//! The scheduler's configuration: one TOML document that mirrors the parameters of the fairness
//! paper (Maui's `DFS*` settings) and Maui's priority factors. `arm-server` reads it as its
//! `[scheduler]` table; `arm-sim` reads it as a file. See `SCHEDULING.md` for an annotated example.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Time};

/// Everything the scheduler is told by the site.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Static requests: backfilling and reservations.
    pub queue: QueueConfig,
    /// The order of static requests.
    pub priority: PriorityConfig,
    /// Dynamic requests and their fairness policy.
    pub dynamic: DynamicConfig,
}

impl Config {
    /// Parses a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }
}

/// How queued static requests are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backfill {
    /// Strict priority order: nothing overtakes the first job that cannot start.
    None,
    /// The `reservation_depth` highest-priority jobs that cannot start get reservations; any
    /// other job may start out of order if it delays none of them.
    #[default]
    Easy,
    /// Every queued job gets a reservation; a job starts out of order only if it delays none.
    Conservative,
}

/// Static queue settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Backfilling mode.
    pub backfill: Backfill,
    /// Maui's `ReservationDepth`: how many blocked jobs get reservations with EASY backfilling.
    pub reservation_depth: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self { backfill: Backfill::Easy, reservation_depth: 1 }
    }
}

/// Priority factors of static requests; with the defaults the order is first come, first
/// served. A job's priority is
/// `its own priority + queue_time_weight * minutes waited + user weight + group weight
///  - fairshare_weight * (decayed usage of its user / (pool units * fairshare_interval))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriorityConfig {
    /// Weight of each minute a job has waited.
    pub queue_time_weight: f64,
    /// Weight of the user's share of the machine used in the recent past.
    pub fairshare_weight: f64,
    /// Fair-share accounting interval.
    pub fairshare_interval: Seconds,
    /// What is left of past usage after each interval (0..=1).
    pub fairshare_decay: f64,
    /// Extra priority per user.
    pub users: BTreeMap<String, f64>,
    /// Extra priority per group.
    pub groups: BTreeMap<String, f64>,
}

impl Default for PriorityConfig {
    fn default() -> Self {
        Self {
            queue_time_weight: 1.0,
            fairshare_weight: 0.0,
            fairshare_interval: Seconds(24 * 3600),
            fairshare_decay: 0.5,
            users: BTreeMap::new(),
            groups: BTreeMap::new(),
        }
    }
}

/// Maui's `DFSPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DynPolicy {
    /// `NONE`: dynamic requests take any idle units; delays to queued jobs are ignored.
    #[default]
    HighestPriority,
    /// `DFSSingleJobDelay`: each queued job may be delayed at most `single_delay`.
    SingleJobDelay,
    /// `DFSTargetDelay`: a user's (group's) jobs may be delayed at most `target_delay` in total
    /// per interval.
    TargetDelay,
    /// `DFSSingleAndTargetDelay`: both limits.
    SingleAndTargetDelay,
}

impl DynPolicy {
    fn checks_single(self) -> bool {
        matches!(self, Self::SingleJobDelay | Self::SingleAndTargetDelay)
    }

    fn checks_target(self) -> bool {
        matches!(self, Self::TargetDelay | Self::SingleAndTargetDelay)
    }
}

/// How the delay a grant causes is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayModel {
    /// As in the paper: the granted units are held until the requester's walltime ends.
    #[default]
    Walltime,
    /// The requester may declare when it will end if granted (its speed-up); the planner then
    /// frees all its units at that time, so the delay is computed on the plan it will really
    /// follow. The declared end becomes the job's new walltime.
    Declared,
}

/// Limits for one user or group (`USERCFG[..]` / `GROUPCFG[..]`). Absent fields fall back to
/// `[dynamic.default]`; a limit of 0 means "no limit", as in Maui.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// `DFSDynDelayPerm`: may this user's jobs be delayed by dynamic grants at all.
    pub dyn_delay_perm: Option<bool>,
    /// `DFSTargetDelayTime`: total delay per interval.
    pub target_delay: Option<Seconds>,
    /// `DFSSingleDelayTime`: delay of any one job.
    pub single_delay: Option<Seconds>,
}

/// Dynamic requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicConfig {
    /// `DFSPolicy`.
    pub policy: DynPolicy,
    /// `DFSInterval`.
    pub interval: Seconds,
    /// `DFSDecay`: the share of the accumulated delay carried into the next interval.
    pub decay: f64,
    /// `ReservationDelayDepth`: how many queued jobs (by priority) are checked for delay.
    pub reservation_delay_depth: usize,
    /// How delays are estimated.
    pub delay_model: DelayModel,
    /// Limits for users and groups not listed below.
    pub default: Limits,
    /// Per-user limits.
    pub users: BTreeMap<String, Limits>,
    /// Per-group limits.
    pub groups: BTreeMap<String, Limits>,
    /// Elastic requests.
    pub elastic: ElasticConfig,
}

/// How elastic requests (those that accept reclaims) are granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElasticConfig {
    /// Grant an elastic request firm when the policy grants it whole, and lend only what it
    /// would not grant (revocable fragments). Off: every unit of an elastic request is lent.
    pub firm_first: bool,
}

impl Default for DynamicConfig {
    fn default() -> Self {
        Self {
            policy: DynPolicy::HighestPriority,
            interval: Seconds(3600),
            decay: 0.0,
            reservation_delay_depth: 5,
            delay_model: DelayModel::Walltime,
            default: Limits::default(),
            users: BTreeMap::new(),
            groups: BTreeMap::new(),
            elastic: ElasticConfig::default(),
        }
    }
}

/// The limits that apply to one of a user's jobs: the most restrictive of user and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effective {
    pub may_delay: bool,
    pub single: Option<Time>,
    pub user_target: Option<Time>,
    pub group_target: Option<Time>,
}

impl DynamicConfig {
    fn field<T: Copy>(&self, own: Option<&Limits>, pick: impl Fn(&Limits) -> Option<T>) -> Option<T> {
        own.and_then(&pick).or_else(|| pick(&self.default))
    }

    /// The limits in force for a job of `user` in `group` under this policy.
    pub(crate) fn effective(&self, user: &str, group: &str) -> Effective {
        let (u, g) = (self.users.get(user), self.groups.get(group));
        let may_delay =
            self.field(u, |l| l.dyn_delay_perm).unwrap_or(true) && g.and_then(|l| l.dyn_delay_perm).unwrap_or(true);
        let limit = |s: Option<Seconds>| s.map(|s| s.0).filter(|s| *s > 0);
        let single = if self.policy.checks_single() {
            let user = limit(self.field(u, |l| l.single_delay));
            let group = limit(g.and_then(|l| l.single_delay));
            min_limit(user, group)
        } else {
            None
        };
        let (user_target, group_target) = if self.policy.checks_target() {
            (limit(self.field(u, |l| l.target_delay)), limit(g.and_then(|l| l.target_delay)))
        } else {
            (None, None)
        };
        Effective { may_delay, single, user_target, group_target }
    }
}

fn min_limit(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A duration in seconds, written in TOML as an integer or as `"HH:MM:SS"` (Maui's format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Seconds(pub Time);

impl Seconds {
    /// Parses `"HH:MM:SS"`, `"MM:SS"` or a plain number of seconds.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = || Error::Config(format!("`{text}` is not a duration (seconds or HH:MM:SS)"));
        let mut total: Time = 0;
        let parts: Vec<&str> = text.trim().split(':').collect();
        if parts.len() > 3 {
            return Err(bad());
        }
        for part in parts {
            let n: Time = part.parse().map_err(|_| bad())?;
            total = total.checked_mul(60).and_then(|t| t.checked_add(n)).ok_or_else(bad)?;
        }
        Ok(Self(total))
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        write!(f, "{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(Seconds(n)),
            Raw::Text(t) => Seconds::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_figure_6_reads_as_intended() {
        let config = Config::from_toml(include_str!("../../examples/configs/fairness-fig6.toml")).unwrap();
        let d = &config.dynamic;
        assert_eq!(d.policy, DynPolicy::SingleAndTargetDelay);
        assert_eq!(d.interval, Seconds(6 * 3600));
        let user01 = d.effective("user01", "");
        assert_eq!((user01.single, user01.user_target), (None, Some(3600)), "0 means no limit");
        assert!(!d.effective("user02", "").may_delay);
        assert_eq!(d.effective("user04", "").single, Some(900));
        assert_eq!(d.effective("user07", "group05").group_target, Some(4 * 3600));
        assert!(!d.effective("user08", "group06").may_delay, "the group forbids it");
    }

    #[test]
    fn durations_parse_both_ways_and_reject_garbage() {
        assert_eq!(Seconds::parse("06:00:00").unwrap(), Seconds(21600));
        assert_eq!(Seconds::parse("90").unwrap(), Seconds(90));
        assert_eq!(Seconds(3723).to_string(), "01:02:03");
        assert!(Seconds::parse("1:2:3:4").is_err());
        assert!(Seconds::parse("ten").is_err());
        assert!(Config::from_toml("[dynamic]\npolicy = \"sometimes\"").is_err());
        assert!(Config::from_toml("[queue]\nbackfil = \"easy\"").is_err(), "typos are errors");
    }
}
