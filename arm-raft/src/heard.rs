//! The leader a replica last heard from, and when. openraft's idea of the leader
//! (`current_leader`) outlives a dead leader by an election (1.5-2 s after its last
//! heartbeat): a replica that sends a client there sends it to a dead address. What the
//! Raft port saw is fresher: the last append this replica accepted, and from whom.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The leader whose append this replica last accepted, and when (the Raft port records it).
#[derive(Debug)]
pub(crate) struct Heard {
    last: Mutex<Option<(u64, Instant)>>,
    /// The (term, leader) last heard from: changes when a new leader (or the same one in a new
    /// term) is heard from for the first time.
    news: watch::Sender<Option<(u64, u64)>>,
}

impl Heard {
    pub(crate) fn new() -> Self {
        Self { last: Mutex::new(None), news: watch::Sender::new(None) }
    }

    /// This replica accepted an append from `leader`, of `term`, now.
    pub(crate) fn record(&self, term: u64, leader: u64) {
        *self.last.lock().expect("heard poisoned") = Some((leader, Instant::now()));
        self.news.send_if_modified(|heard| {
            let new = *heard != Some((term, leader));
            *heard = Some((term, leader));
            new
        });
    }

    /// The leader heard from within `fresh`, if any.
    pub(crate) fn within(&self, fresh: Duration) -> Option<u64> {
        let last = *self.last.lock().expect("heard poisoned");
        last.filter(|(_, at)| at.elapsed() <= fresh).map(|(leader, _)| leader)
    }

    /// A receiver that sees each new (term, leader) heard from.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<(u64, u64)>> {
        self.news.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_heard_long_ago_is_not_fresh_and_only_a_new_one_is_news() {
        let heard = Heard::new();
        let mut news = heard.subscribe();
        assert_eq!(heard.within(Duration::from_secs(1)), None, "nothing heard yet");
        heard.record(3, 1);
        assert!(news.has_changed().unwrap());
        news.borrow_and_update();
        heard.record(3, 1);
        assert!(!news.has_changed().unwrap(), "the same leader's next heartbeat is no news");
        assert_eq!(heard.within(Duration::from_secs(1)), Some(1));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(heard.within(Duration::from_millis(10)), None, "heard 30 ms ago");
        heard.record(4, 2);
        assert!(news.has_changed().unwrap());
        assert_eq!(*news.borrow_and_update(), Some((4, 2)));
    }
}
