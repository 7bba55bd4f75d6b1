//! What a program asks of `AC_Get`: how many accelerators, how long it waits, and whether
//! they are borrowed (preemptible) or lent (elastic).

use std::time::Duration;

use ac_proto::arm::Ask;

/// What an `AC_Get` asks for: `GetRequest::new(4)` is exactly four accelerators now, as
/// [`crate::Session::get`]; the builder methods relax it.
///
/// ```
/// # use std::time::Duration;
/// use ac_frontend::GetRequest;
/// // Two to four accelerators; wait up to a minute for at least two.
/// let request = GetRequest::new(4).at_least(2).wait_up_to(Duration::from_secs(60));
/// assert_eq!((request.min(), request.max()), (2, 4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRequest {
    pub(crate) min: u32,
    pub(crate) max: u32,
    pub(crate) wait: Duration,
    pub(crate) preemptible: bool,
    pub(crate) notice: Option<Duration>,
}

impl GetRequest {
    /// Up to `max` accelerators, and by default exactly that many, now.
    pub fn new(max: u32) -> Self {
        Self { min: max, max, wait: Duration::ZERO, preemptible: false, notice: None }
    }

    /// Accept a partial grant of at least `min` (the manager grants between `min` and `max`).
    pub fn at_least(mut self, min: u32) -> Self {
        self.min = min;
        self
    }

    /// Wait up to `wait` for accelerators instead of being rejected at once. The wait ends at its
    /// deadline (not before), whatever the manager and the network do.
    pub fn wait_up_to(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Borrow other jobs' idle pre-allocated accelerators; their owners may take them back.
    pub fn preemptible(mut self) -> Self {
        self.preemptible = true;
        self
    }

    /// Elastic: the accelerators are lent, and the manager may reclaim some when a queued job
    /// could start with them. A reclaim arrives as a [`crate::Preemption`] notice
    /// ([`crate::Session::preemptions`]) at least `notice` before its deadline; free the accelerators
    /// by then ([`crate::Session::free_some`]) or their capabilities are revoked. With
    /// [`GetRequest::wait_up_to`], the request is an offer: it is granted what no queued job
    /// can start on, as soon as there is some. Needs a manager of protocol 7.
    pub fn elastic(mut self, notice: Duration) -> Self {
        self.notice = Some(notice);
        self
    }

    /// The fewest accelerators accepted.
    pub fn min(&self) -> u32 {
        self.min
    }

    /// The most wanted.
    pub fn max(&self) -> u32 {
        self.max
    }

    pub(crate) fn ask(&self) -> Ask {
        Ask {
            min: self.min,
            max: self.max,
            // The manager counts whole seconds from the second it reads; one more than the wait
            // rounded up means it never decides before the program's own deadline, which the
            // program keeps to the millisecond (it withdraws the request then).
            wait_s: if self.wait.is_zero() { 0 } else { self.wait.as_secs_f64().ceil() as u64 + 1 },
            preemptible: self.preemptible,
            key: ac_proto::random_hex(16),
        }
    }
}
