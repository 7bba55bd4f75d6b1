//! A worker's end: its stdin closed when its session's context goes, a kill for one that
//! lingers, and how it ended, for the callers it leaves unanswered.

use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{lock, WorkerContext, EXIT_GRACE};

impl Drop for WorkerContext {
    fn drop(&mut self) {
        // Closing stdin ends the worker; one that does not end (a kernel that never returns)
        // is killed after the grace period.
        lock(&self.input).take();
        let child = self.child.clone();
        let _ = std::thread::Builder::new().name("ac-worker-reaper".into()).spawn(move || {
            let deadline = Instant::now() + EXIT_GRACE;
            while Instant::now() < deadline {
                if !matches!(lock(&child).try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut child = lock(&child);
            tracing::warn!(
                pid = child.id(),
                "a session worker did not exit {EXIT_GRACE:?} after its session ended: killed"
            );
            let _ = child.kill();
        });
    }
}

/// How the worker ended ("signal: 9 (SIGKILL)", "exit status: 0"), once it has, waiting for it
/// up to [`EXIT_GRACE`]; polled, so that the lock is free for the reaper in between.
pub(super) fn how_it_ended(child: &Mutex<Child>) -> Option<String> {
    let deadline = Instant::now() + EXIT_GRACE;
    while Instant::now() < deadline {
        match lock(child).try_wait() {
            Ok(Some(status)) => return Some(status.to_string()),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}
