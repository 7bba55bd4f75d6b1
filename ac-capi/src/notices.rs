//! The preemption notices of this process's session: what `AC_PollPreemption` hands out, and
//! what a revoked borrower's error message (`error.rs`) says it was told. Kept apart from both
//! so that neither depends on the other.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use ac_frontend::blocking::{Preemptions, Session};
use ac_frontend::Preemption;

/// One accelerator taken back.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub(crate) set: u64,
    pub(crate) accelerator: String,
    pub(crate) revoke_at: u64,
}

/// The session's preemption notices: the receiver (from the first preemptible `AC_Get` on),
/// the accelerators told and not yet polled, and every one told (for errors' hints).
#[derive(Debug)]
pub(crate) struct Notices {
    pub(crate) rx: Option<Preemptions>,
    pub(crate) queue: VecDeque<Taken>,
    pub(crate) told: Vec<Taken>,
    /// Counts sessions ended, so that a receiver taken out to wait on is not put back into
    /// the next session's notices.
    pub(crate) generation: u64,
}

static NOTICES: Mutex<Notices> =
    Mutex::new(Notices { rx: None, queue: VecDeque::new(), told: Vec::new(), generation: 0 });

pub(crate) fn notices() -> std::sync::MutexGuard<'static, Notices> {
    NOTICES.lock().expect("notices poisoned")
}

impl Notices {
    pub(crate) fn record(&mut self, notice: Preemption) {
        for accelerator in notice.accelerators {
            let taken = Taken { set: notice.set, accelerator, revoke_at: notice.revoke_at };
            self.told.push(taken.clone());
            self.queue.push_back(taken);
        }
    }

    /// Takes in the notices that have arrived, without waiting.
    pub(crate) fn drain(&mut self) {
        while let Some(notice) = self.rx.as_mut().and_then(|rx| rx.next(Duration::ZERO)) {
            self.record(notice);
        }
    }
}

/// From now on the session's preemption notices come here (not to stderr).
pub(crate) fn listen(session: &Session) {
    let mut notices = notices();
    if notices.rx.is_none() {
        notices.rx = Some(session.preemptions());
    }
}

/// Forgets the session's notices (`AC_Finalize`).
pub(crate) fn forget() {
    let mut notices = notices();
    let generation = notices.generation + 1;
    *notices = Notices { rx: None, queue: VecDeque::new(), told: Vec::new(), generation };
}

/// For the message of an `AC_ERROR_REVOKED`: the preemptions this process was told of, so that
/// a borrower that did not poll learns why its accelerator is gone.
pub(crate) fn revoked_hint() -> String {
    let mut notices = notices();
    notices.drain();
    if notices.told.is_empty() {
        return String::new();
    }
    let told: Vec<String> = notices
        .told
        .iter()
        .map(|t| format!("{} of preemptible set {} (revoked at unix time {})", t.accelerator, t.set, t.revoke_at))
        .collect();
    format!(
        "; {} taken back after the notice (a preemptible loan's owner, or the manager reclaiming an elastic \
         grant), as AC_PollPreemption would have told",
        told.join(", ")
    )
}
