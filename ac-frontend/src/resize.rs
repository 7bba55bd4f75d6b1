//! Reconfiguration points (`AC_Check`; DMR's `dmr_check_status`): an iterative program asks,
//! between two iterations, whether to change how many accelerators it runs on, and gets
//! [`Reconfiguration::Keep`], [`Reconfiguration::Expand`] (an elastic set it may use at once) or
//! [`Reconfiguration::Shrink`] (accelerators a queued job needs, to free by a deadline). A program
//! that checks at every iteration needs no thread of its own for reclaim notices.
//!
//! What it asks of the manager is paced ([`Pacing`]): at most one elastic `AC_Get` per interval,
//! so that a tight loop checking thousands of times a second costs the manager one request a
//! second. Reclaims are never paced: a check reports one as soon as its notice has arrived.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::{DynamicSet, GetRequest, Preemption, Result, Session};

/// How many accelerators a program can run on at a reconfiguration point: at least `min`, at
/// most `max`, `preferred` when it can have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The fewest it can run on.
    pub min: u32,
    /// The most it can use.
    pub max: u32,
    /// What it would run on best (between `min` and `max`).
    pub preferred: u32,
}

impl Bounds {
    /// `min..=max`, preferring `preferred` (brought into that range).
    pub fn new(min: u32, max: u32, preferred: u32) -> Self {
        Self { min, max, preferred: preferred.clamp(min, max.max(min)) }
    }
}

/// What a reconfiguration point tells the program to do before its next iteration.
#[derive(Debug)]
pub enum Reconfiguration {
    /// Go on with what it holds.
    Keep,
    /// Run on these more accelerators too: an elastic set, lent until a queued job needs them
    /// (then a later check says [`Reconfiguration::Shrink`]).
    Expand {
        /// The new set.
        set: DynamicSet,
        /// Until when the manager's plan leaves it to the program ([`DynamicSet::until`]).
        until: Option<u64>,
    },
    /// Give back `accelerators` of set `set` by `by` ([`Session::free_some`]): a reclaim of an
    /// elastic set, or the preemption of a preemptible loan. After `by`, calls on them fail as
    /// revoked.
    Shrink {
        /// The set they belong to.
        set: u64,
        /// The accelerators reclaimed.
        accelerators: Vec<String>,
        /// Unix time (seconds) when their capabilities are revoked.
        by: u64,
    },
}

/// When a reconfiguration point asks the manager for more: only below the preferred count, and
/// at most once per interval. Shared by [`Resizer`] and libac's `AC_Check`.
#[derive(Debug, Clone)]
pub struct Pacing {
    every: Duration,
    last: Option<Instant>,
}

impl Pacing {
    /// At most one request per `every`.
    pub fn new(every: Duration) -> Self {
        Self { every, last: None }
    }

    /// The elastic request to make at `now` by a program holding `held` accelerators, if any:
    /// up to the preferred count, accepting any part that keeps it within `bounds`. Counts as a
    /// request made (the next is `every` later) whatever its answer.
    pub fn ask(&mut self, held: u32, bounds: Bounds, notice: Duration, now: Instant) -> Option<GetRequest> {
        if held >= bounds.preferred || self.last.is_some_and(|last| now.duration_since(last) < self.every) {
            return None;
        }
        self.last = Some(now);
        let want = bounds.preferred - held;
        let least = bounds.min.saturating_sub(held).clamp(1, want);
        Some(GetRequest::new(want).at_least(least).elastic(notice))
    }
}

/// A program's reconfiguration point: the reclaim notices of its session and the pacing of its
/// requests. Made by [`Session::resizer`]; it takes the session's notices ([`Session::preemptions`]).
#[derive(Debug)]
pub struct Resizer {
    notices: mpsc::UnboundedReceiver<Preemption>,
    notice: Duration,
    pacing: Pacing,
}

impl Session {
    /// A reconfiguration point whose sets are lent with `notice` (the least time a reclaim
    /// gives), asking the manager for more at most once per `every`. It becomes the session's
    /// listener of reclaim and preemption notices.
    pub fn resizer(&self, notice: Duration, every: Duration) -> Resizer {
        Resizer { notices: self.preemptions(), notice, pacing: Pacing::new(every) }
    }
}

impl Resizer {
    /// `AC_Check`: what to do before the next iteration of a program that holds `held`
    /// accelerators and can run on `bounds`. A reclaim first (it has a deadline); else, below the
    /// preferred count and not asked within the interval, an elastic `AC_Get` of what is idle
    /// (rejected: [`Reconfiguration::Keep`]).
    pub async fn check(&mut self, session: &Session, held: u32, bounds: Bounds) -> Result<Reconfiguration> {
        if let Ok(reclaim) = self.notices.try_recv() {
            return Ok(Reconfiguration::Shrink {
                set: reclaim.set,
                accelerators: reclaim.accelerators,
                by: reclaim.revoke_at,
            });
        }
        let Some(request) = self.pacing.ask(held, bounds, self.notice, Instant::now()) else {
            return Ok(Reconfiguration::Keep);
        };
        Ok(match session.get_with(request).await? {
            Some(set) => Reconfiguration::Expand { until: set.until, set },
            None => Reconfiguration::Keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_asks_for_what_is_missing_at_most_once_per_interval() {
        let mut pacing = Pacing::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let bounds = Bounds::new(2, 8, 6);
        let first = pacing.ask(1, bounds, Duration::from_secs(5), t0).expect("below the preferred count");
        assert_eq!((first.min(), first.max()), (1, 5), "up to 6 held, and any part that brings it to 2");
        assert!(pacing.ask(1, bounds, Duration::from_secs(5), t0 + Duration::from_millis(999)).is_none());
        let again = pacing.ask(4, bounds, Duration::from_secs(5), t0 + Duration::from_secs(1)).expect("paced");
        assert_eq!((again.min(), again.max()), (1, 2));
        assert!(pacing.ask(6, bounds, Duration::from_secs(5), t0 + Duration::from_secs(9)).is_none(), "has enough");
    }

    #[test]
    fn bounds_keep_the_preferred_count_within_the_range() {
        assert_eq!(Bounds::new(2, 4, 9).preferred, 4);
        assert_eq!(Bounds::new(2, 4, 0).preferred, 2);
    }
}
