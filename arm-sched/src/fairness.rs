//! The dynamic fairness ledger (the paper's Sec. III-D): delay accumulated per user and group
//! in the current interval, rolled over with decay, and the check a grant must pass.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::DynamicConfig;
use crate::{JobId, Rejection, Time};

/// A queued job that a grant would delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delay {
    pub job: JobId,
    pub user: String,
    pub group: String,
    pub seconds: Time,
}

/// Delay accounting. It is the only scheduler state that is not derived from jobs and units,
/// so `arm-server` stores it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Start of the current interval.
    pub interval_start: Option<Time>,
    /// Delay charged to each user in this interval (with decayed history), seconds.
    pub users: BTreeMap<String, f64>,
    /// The same per group.
    pub groups: BTreeMap<String, f64>,
    /// Every delay ever caused to each user's jobs, seconds (a metric; never decays).
    pub caused: BTreeMap<String, f64>,
    /// The most delay each user was charged within one interval (with carried-over history),
    /// seconds: what the target limits bound.
    pub worst: BTreeMap<String, f64>,
}

impl Ledger {
    /// Applies the decay of every interval that ended by `now`.
    pub fn roll(&mut self, now: Time, config: &DynamicConfig) {
        let interval = config.interval.0.max(1);
        let start = *self.interval_start.get_or_insert(now);
        if now < start + interval {
            return;
        }
        let elapsed = (now - start) / interval;
        let factor = config.decay.clamp(0.0, 1.0).powi(elapsed.min(i32::MAX as u64) as i32);
        for value in self.users.values_mut().chain(self.groups.values_mut()) {
            *value *= factor;
        }
        self.users.retain(|_, v| *v > 0.0);
        self.groups.retain(|_, v| *v > 0.0);
        self.interval_start = Some(start + elapsed * interval);
    }

    /// Whether the policy allows these delays (the requester's own jobs are already left out).
    pub(crate) fn check(&self, delays: &[Delay], config: &DynamicConfig) -> Result<(), Rejection> {
        let mut user_sum: BTreeMap<&str, Time> = BTreeMap::new();
        let mut group_sum: BTreeMap<&str, Time> = BTreeMap::new();
        for d in delays.iter().filter(|d| d.seconds > 0) {
            let limits = config.effective(&d.user, &d.group);
            if !limits.may_delay {
                return Err(Rejection::Forbidden { job: d.job, user: d.user.clone() });
            }
            let over = |sum: Time, target: Option<Time>, used: Option<&f64>| {
                target.is_some_and(|t| used.copied().unwrap_or(0.0) + sum as f64 > t as f64)
            };
            let user_total = user_sum.entry(&d.user).or_default();
            *user_total += d.seconds;
            let group_total = group_sum.entry(&d.group).or_default();
            *group_total += d.seconds;
            if limits.single.is_some_and(|s| d.seconds > s)
                || over(*user_total, limits.user_target, self.users.get(&d.user))
                || over(*group_total, limits.group_target, self.groups.get(&d.group))
            {
                return Err(Rejection::OverLimit { job: d.job, user: d.user.clone(), delay: d.seconds });
            }
        }
        Ok(())
    }

    /// Charges the delays of a grant.
    pub(crate) fn charge(&mut self, delays: &[Delay]) {
        for d in delays.iter().filter(|d| d.seconds > 0) {
            let charged = self.users.entry(d.user.clone()).or_default();
            *charged += d.seconds as f64;
            let worst = self.worst.entry(d.user.clone()).or_default();
            *worst = worst.max(*charged);
            *self.groups.entry(d.group.clone()).or_default() += d.seconds as f64;
            *self.caused.entry(d.user.clone()).or_default() += d.seconds as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DynPolicy, Limits, Seconds};

    fn delay(job: JobId, user: &str, seconds: Time) -> Delay {
        Delay { job, user: user.into(), group: "g".into(), seconds }
    }

    #[test]
    fn target_delay_accumulates_and_decays_per_interval() {
        let mut config = DynamicConfig { policy: DynPolicy::TargetDelay, decay: 0.2, ..Default::default() };
        config.default = Limits { target_delay: Some(Seconds(4800)), ..Default::default() };
        let mut ledger = Ledger::default();
        ledger.roll(0, &config);
        ledger.charge(&[delay(1, "u", 3600)]);
        assert!(ledger.check(&[delay(2, "u", 1300)], &config).is_err(), "3600 + 1300 > 4800");
        assert!(ledger.check(&[delay(2, "u", 1200)], &config).is_ok());
        ledger.roll(3600, &config);
        // The paper's example: 20% of 3600 s carried over leaves 4080 s.
        assert_eq!(ledger.users["u"], 720.0);
        assert!(ledger.check(&[delay(2, "u", 4080)], &config).is_ok());
        assert!(ledger.check(&[delay(2, "u", 4081)], &config).is_err());
        assert_eq!(ledger.caused["u"], 3600.0, "the metric never decays");
    }

    #[test]
    fn single_delay_and_permission_are_checked_per_job() {
        let mut config = DynamicConfig { policy: DynPolicy::SingleJobDelay, ..Default::default() };
        config.users.insert("p".into(), Limits { dyn_delay_perm: Some(false), ..Default::default() });
        config.default.single_delay = Some(Seconds(100));
        let ledger = Ledger::default();
        assert!(matches!(ledger.check(&[delay(1, "p", 1)], &config), Err(Rejection::Forbidden { .. })));
        assert!(ledger.check(&[delay(1, "p", 0)], &config).is_ok(), "no delay, nothing to forbid");
        assert!(matches!(ledger.check(&[delay(1, "q", 101)], &config), Err(Rejection::OverLimit { .. })));
        assert!(ledger.check(&[delay(1, "q", 100), delay(2, "q", 100)], &config).is_ok());
    }
}
