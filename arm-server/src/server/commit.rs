//! Group commit: a change is made on the core, queued, and answered once the store holds it;
//! a failed commit rolls memory back to what the store holds.

use std::collections::BTreeMap;
use std::time::Duration;

use ac_proto::arm::{ArmError, ArmErrorKind};

use super::{accounting, err, Arm};
use crate::core::{Core, Key};
use crate::store::{Change, Store};
use crate::ArmServerError;

/// Changes waiting to be committed (group commit), queued under the core lock in the order the
/// core made them.
#[derive(Debug, Default)]
pub(super) struct Commits {
    /// The last value of each record they wrote: a change writes whole records, so a group
    /// commits each record once however many of its changes rewrote it (the ledger, a host's,
    /// a session's).
    pending: BTreeMap<Key, Option<Vec<u8>>>,
    /// Sequence number of the last change queued.
    queued: u64,
    /// Sequence number of the last change durable.
    durable: u64,
    /// The changes through this sequence number were rolled back: their commit failed.
    failed: u64,
    /// What their callers are told.
    failure: String,
    /// Memory holds changes the store lacks: a rollback could not read the store back. No
    /// change is made until it can (`reload_if_stale`).
    stale: bool,
}

/// How long after its last failed write a store is tried again, changes or not (`expire_loop`).
pub(super) const STORE_RETRY: Duration = Duration::from_secs(5);

/// What a caller is told of a failed commit: the store's words, without "store error: ";
/// a replica that lost the lead names the leader.
fn store_failure(e: ArmServerError) -> ArmError {
    match e {
        ArmServerError::Store(message) => err(ArmErrorKind::Internal, message),
        ArmServerError::NotLeader(leader) => ac_proto::arm::not_leader(leader),
        other => err(ArmErrorKind::Internal, other.to_string()),
    }
}

impl Arm {
    /// Runs a change on the core, waits until what it touched is durable, then sends its
    /// revocations. The core lock is not held while the disk syncs, nor is a runtime thread
    /// blocked: concurrent requests queue their changes, and whoever commits next writes them
    /// all in one transaction. A failed commit rolls memory back (`roll_back`): the change is
    /// not made, its revocations are not sent, and the caller is told why.
    pub(super) async fn mutate<T>(
        &self,
        change: impl FnOnce(&mut Core, u64) -> Result<T, ArmError>,
    ) -> Result<T, ArmError> {
        let now_ms = accounting::unix_now_ms();
        let now = now_ms / 1000;
        let internal = |e: ArmServerError| err(ArmErrorKind::Internal, e.to_string());
        if let Some(replication) = self.replication.as_ref().filter(|r| !r.leading()) {
            return Err(replication.not_leader());
        }
        self.reload_if_stale().await;
        let (result, revocations, mine, changed) = {
            let mut core = self.core.lock().expect("core poisoned");
            {
                let commits = self.commits.lock().expect("commits poisoned");
                if commits.stale {
                    return Err(err(ArmErrorKind::Internal, commits.failure.clone()));
                }
            }
            let result = change(&mut core, now);
            // The accounting intervals of what the change granted or released commit with it.
            core.account(now_ms);
            let dirty = core.take_dirty();
            let changed = !dirty.is_empty();
            let changes = Store::snapshot(&core, &dirty).map_err(internal)?;
            // Queued under the core lock, so the commit order is the order of the changes.
            let mut commits = self.commits.lock().expect("commits poisoned");
            commits.pending.extend(changes);
            commits.queued += 1;
            (result, core.take_revocations(), commits.queued, changed)
        };
        self.commit_through(mine).await.map_err(|e| match self.replication.as_ref() {
            // A change rolled back because the lead was lost (its own or a group's): the
            // client asks the leader.
            Some(replication) if !replication.leading() => replication.not_leader(),
            _ => store_failure(e),
        })?;
        // Only a change can answer a long poll; waking them for nothing would make them spin.
        if changed {
            self.changed.notify_waiters();
        }
        let expires = now + self.config.capability_ttl_s + 86_400;
        for revocation in revocations {
            self.links.revoke(&revocation.host, revocation.capability, expires);
        }
        result
    }

    /// The sequence number of the last change queued: [`Arm::commit_through`] it to wait until
    /// everything made so far is durable.
    pub(super) fn last_queued(&self) -> u64 {
        self.commits.lock().expect("commits poisoned").queued
    }

    /// Returns once change `seq` is durable, committing everything queued if nobody else is;
    /// fails if it was rolled back.
    pub(super) async fn commit_through(&self, seq: u64) -> Result<(), ArmServerError> {
        let _committer = self.committing.lock().await;
        let (batch, last) = {
            let mut commits = self.commits.lock().expect("commits poisoned");
            if commits.durable >= seq {
                return Ok(());
            }
            if commits.failed >= seq {
                return Err(ArmServerError::Store(commits.failure.clone()));
            }
            let batch: Vec<Change> = std::mem::take(&mut commits.pending).into_iter().collect();
            (batch, commits.queued)
        };
        let written = match self.replication.as_ref() {
            // The replicas' state machines write it, this one's store included.
            Some(replication) => replication.commit(&batch).await,
            None => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || store.commit(&batch))
                    .await
                    .unwrap_or_else(|e| Err(ArmServerError::Store(format!("the commit did not finish: {e}"))))
            }
        };
        match written {
            Ok(()) => {
                self.commits.lock().expect("commits poisoned").durable = last;
                Ok(())
            }
            Err(e) => Err(self.roll_back(e).await),
        }
    }

    /// After a failed commit, puts memory back to what the store holds: every change queued
    /// since the last durable one (the whole group, and those queued meanwhile) is dropped, and
    /// each of their callers gets the returned error. Called with `committing` held.
    async fn roll_back(&self, error: ArmServerError) -> ArmServerError {
        let failure = format!("{}; the change was not made", store_failure(error).message);
        self.commits.lock().expect("commits poisoned").failure = failure.clone();
        match self.reload().await {
            Ok(()) => tracing::warn!(failure, "memory rolled back to what the store holds"),
            Err(e) => tracing::error!(
                failure,
                error = %e,
                "the store cannot be read back: no change is made until it can"
            ),
        }
        self.changed.notify_waiters();
        ArmServerError::Store(failure)
    }

    /// Replaces memory with what the store holds, keeping what is never stored (whether each
    /// host's link is up and what its backend serves, the scheduler's settings, Slurm's queue, notices not yet told).
    /// Called with `committing` held: nothing commits meanwhile, so what is read is durable,
    /// and whatever is queued was made on the memory being dropped: it fails.
    pub(super) async fn reload(&self) -> Result<(), ArmServerError> {
        let store = self.store.clone();
        let loaded = tokio::task::spawn_blocking(move || store.load())
            .await
            .unwrap_or_else(|e| Err(ArmServerError::Store(format!("reading the store did not finish: {e}"))));
        let mut core = self.core.lock().expect("core poisoned");
        let mut commits = self.commits.lock().expect("commits poisoned");
        commits.pending.clear();
        commits.failed = commits.queued;
        let mut fresh = match loaded {
            Ok(fresh) => fresh,
            Err(e) => {
                commits.stale = true;
                return Err(e);
            }
        };
        commits.stale = false;
        fresh.keep_unstored(&mut core);
        *core = fresh;
        Ok(())
    }

    /// Reads the store back if a rollback could not.
    pub(super) async fn reload_if_stale(&self) {
        if !self.commits.lock().expect("commits poisoned").stale {
            return;
        }
        let _committer = self.committing.lock().await;
        if self.commits.lock().expect("commits poisoned").stale && self.reload().await.is_ok() {
            tracing::info!("memory read back from the store");
            self.changed.notify_waiters();
        }
    }

    /// Tries a store that cannot write again: reads memory back if it must, then writes a
    /// probe, whose success clears the store's trouble.
    pub(super) async fn retry_store(&self) {
        self.reload_if_stale().await;
        let _committer = self.committing.lock().await;
        let store = self.store.clone();
        let _ = tokio::task::spawn_blocking(move || store.probe()).await;
    }

    /// What is wrong with the store, as `armctl health` says it; `None`: it writes.
    pub(super) fn store_health(&self) -> Option<String> {
        let trouble = self.store.trouble()?;
        let since = trouble.since.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let ago = trouble.since.elapsed().map_or(0, |d| d.as_secs());
        let stale = if self.commits.lock().expect("commits poisoned").stale {
            "; memory could not be read back from it, so no change is made"
        } else {
            ""
        };
        Some(format!(
            "store: {} cannot write since Unix time {since} ({ago} s ago): {}; changes fail until it writes again \
             (tried every {} s){stale}",
            self.store.path().display(),
            trouble.error,
            STORE_RETRY.as_secs()
        ))
    }
}
