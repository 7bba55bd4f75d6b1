//! Leases: a program's dynamic accelerators (and an ad-hoc job) are held while a connection of
//! its session is open, and for `lease_ms` after its last sign of life once none is.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ac_proto::transport::Tuning;

use super::Arm;
use crate::config::ArmConfig;

/// One program connection: a number no other connection of this manager's life has, and the
/// sessions it carries.
#[derive(Debug)]
pub(super) struct Link {
    /// Told apart from every earlier connection, so that what went out on a lost one (a
    /// notice) can be sent again on the next ([`crate::core::Core::take_notices`]).
    pub(super) id: u64,
    /// The sessions (token hashes) it carries.
    pub(super) tokens: Mutex<HashSet<String>>,
}

impl Link {
    /// A new connection's.
    pub(super) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self { id: NEXT.fetch_add(1, Ordering::Relaxed), tokens: Mutex::default() }
    }
}

/// Live connections per session, and when a session with none loses its lease.
#[derive(Debug, Default)]
pub(super) struct Leases {
    pub(super) live: HashMap<String, usize>,
    pub(super) deadline: HashMap<String, Instant>,
}

/// The transport of programs' connections. A lease runs from a program's last sign of life
/// (see [`lease_deadline`]), so its connection must notice silence well before the lease is
/// over: it idles out after half the lease, and the manager pings every eighth of it, so that a
/// live program (which acknowledges every ping) is never silent that long. A program has a
/// few requests in flight at most (one per thread, and one long poll), so [`PROGRAM_STREAMS`]
/// at once is plenty, and it bounds what each of thousands of connections keeps.
pub(super) fn program_tuning(config: &ArmConfig) -> Tuning {
    Tuning {
        idle_timeout_ms: (config.lease_ms / 2).max(200),
        keep_alive_ms: (config.lease_ms / 8).max(50),
        concurrent_streams: PROGRAM_STREAMS,
        ..config.transport.clone()
    }
}

/// Requests one program connection may have open at once; more wait for one to finish.
pub(super) const PROGRAM_STREAMS: u32 = 64;

/// When the lease of a program whose connection just ended runs out: `lease` after its last
/// sign of life. A connection that idled out heard the program last `idle` ago; one the program
/// closed (or that failed otherwise) heard it just now.
pub(super) fn lease_deadline(
    reason: Option<&quinn::ConnectionError>,
    now: Instant,
    idle: Duration,
    lease: Duration,
) -> Instant {
    match reason {
        Some(quinn::ConnectionError::TimedOut) => now.checked_sub(idle).unwrap_or(now) + lease,
        _ => now + lease,
    }
}

impl Arm {
    /// Ties a session to a connection: its lease runs only while none is connected.
    pub(super) fn attach(&self, token_hash: &str, link: &Link) {
        if link.tokens.lock().expect("tokens poisoned").insert(token_hash.to_string()) {
            let mut leases = self.leases.lock().expect("leases poisoned");
            *leases.live.entry(token_hash.to_string()).or_default() += 1;
            leases.deadline.remove(token_hash);
        }
    }

    /// A connection is gone: the leases of the sessions it carried (and no other connection
    /// does) run from the program's last sign of life.
    pub(super) fn connection_closed(&self, conn: &quinn::Connection, link: &Link) {
        let idle = Duration::from_millis(program_tuning(&self.config).idle_timeout_ms);
        let lease = Duration::from_millis(self.config.lease_ms);
        let deadline = lease_deadline(conn.close_reason().as_ref(), Instant::now(), idle, lease);
        let mut leases = self.leases.lock().expect("leases poisoned");
        for token in link.tokens.lock().expect("tokens poisoned").drain() {
            let live = leases.live.entry(token.clone()).or_default();
            *live = live.saturating_sub(1);
            if *live == 0 {
                leases.live.remove(&token);
                leases.deadline.insert(token, deadline);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_the_last_sign_of_life() {
        let (now, idle, lease) = (Instant::now(), Duration::from_secs(5), Duration::from_secs(10));
        // Idled out: the program was last heard `idle` ago.
        assert_eq!(lease_deadline(Some(&quinn::ConnectionError::TimedOut), now, idle, lease), now + idle);
        // Closed by the program, or reset: heard just now.
        assert_eq!(lease_deadline(Some(&quinn::ConnectionError::Reset), now, idle, lease), now + lease);
        assert_eq!(lease_deadline(None, now, idle, lease), now + lease);
    }

    #[test]
    fn a_live_program_is_pinged_well_within_its_connection_idle_timeout() {
        for lease_ms in [300, 1_000, 3_000, 10_000, 60_000] {
            let config = ArmConfig { lease_ms, ..ArmConfig::default() };
            let t = program_tuning(&config);
            assert!(t.idle_timeout_ms < lease_ms, "idles out before the lease ends ({lease_ms})");
            assert!(t.keep_alive_ms * 3 < t.idle_timeout_ms, "several pings per idle timeout ({lease_ms})");
        }
    }
}
