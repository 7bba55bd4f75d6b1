//! Group commit: a change is made on the core, queued, and answered once the store holds it
//! (a fresh rejection of an `AC_Get`, which promises nothing, at once: [`Arm::decide`]); a
//! failed commit rolls memory back to what the store holds.

use std::collections::{BTreeMap, VecDeque};
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
    /// A committer task runs ([`Arm::commit_queued`]): it commits until nothing is left.
    committer: bool,
    /// Sequence number of the last change durable. Changes rolled back below it are not:
    /// `rolled_back` names them.
    durable: u64,
    /// The ranges of changes rolled back (first, last, what their callers are told), the latest
    /// [`ROLLBACKS_KEPT`]: a later group makes `durable` pass them, and a caller woken late must
    /// still hear that its change was dropped.
    rolled_back: VecDeque<(u64, u64, String)>,
    /// What the callers of the last changes rolled back are told.
    failure: String,
    /// Memory holds changes the store lacks: a rollback could not read the store back. No
    /// change is made until it can (`reload_if_stale`).
    stale: bool,
}

/// How many ranges of rolled-back changes are remembered for their callers.
const ROLLBACKS_KEPT: usize = 64;

impl Commits {
    /// Whether change `seq` is settled: rolled back (then why), or durable.
    fn settled(&self, seq: u64) -> Option<Result<(), ArmServerError>> {
        let dropped = self.rolled_back.iter().find(|(first, last, _)| (*first..=*last).contains(&seq));
        if let Some((_, _, why)) = dropped {
            return Some(Err(ArmServerError::Store(why.clone())));
        }
        (self.durable >= seq).then_some(Ok(()))
    }

    /// The sequence number through which every change is durable or rolled back.
    fn settled_through(&self) -> u64 {
        self.durable.max(self.rolled_back.back().map_or(0, |(_, last, _)| *last))
    }

    /// Whether every change queued is settled.
    fn all_settled(&self) -> bool {
        self.settled_through() >= self.queued
    }

    /// Drops every change queued and not yet durable: memory is read back from the store, and
    /// their callers are told `failure`.
    fn drop_unsettled(&mut self) {
        self.pending.clear();
        let first = self.settled_through() + 1;
        if self.queued >= first {
            if self.rolled_back.len() == ROLLBACKS_KEPT {
                self.rolled_back.pop_front();
            }
            self.rolled_back.push_back((first, self.queued, self.failure.clone()));
        }
    }
}

/// What a change's answer promises its caller ([`Arm::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Promise {
    /// What the change made (a grant, a free, an id taken), or an answer that repeats one
    /// decided earlier: told once durable, so that no failover or rollback takes it back.
    Durable,
    /// Nothing a failover could take back: a fresh rejection (no id taken, nothing held). Had
    /// it seen a grant that is then lost, the program was told "no" as in any race for the
    /// pool, and asks again.
    Nothing,
}

/// The most a group commit waits after the last one ended. A group waits as long as the last
/// one took (a commit on the disk, or a Raft round): without the wait, on a loaded host, a group
/// started as soon as the last one ended, small, and the many more commits (and Raft rounds)
/// cost more CPU than the wait saved (ac-bench's load: docs/benchmarks/replication.md, "Stop
/// 76"). An idle manager's commit starts at once.
const MAX_GROUP_SPACING: Duration = Duration::from_millis(20);

/// The committer task while it runs. Should it stop before it ends (a panic, or its runtime
/// shut down), the changes it left are dropped and their callers told, and the next change
/// starts another: `committer` left set would leave every later change waiting.
struct CommitterRuns<'a> {
    arm: &'a Arm,
    /// It ended: nothing was left to commit.
    ended: bool,
}

impl Drop for CommitterRuns<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        {
            let mut commits = self.arm.commits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            commits.failure = "the manager's committer stopped; the change was not made".into();
            commits.drop_unsettled();
            commits.committer = false;
            // Memory holds the changes dropped: the next change reads it back first.
            commits.stale = true;
        }
        self.arm.wake_waiters();
    }
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
        self.decide(|core, now| change(core, now).map(|made| (made, Promise::Durable))).await
    }

    /// Runs a change on the core as [`Arm::mutate`] does, but its answer is given at once when
    /// the change says that it promises nothing and revokes nothing: what it wrote (the ledger's
    /// roll) commits with the next group, and its caller does not wait for it. A rejected
    /// `AC_Get` was over half the requests under the 1,000-program load, each waiting for a
    /// group commit (a Raft round on three replicas) to be told "no" (docs/benchmarks/replication.md,
    /// "Stop 78").
    pub(super) async fn decide<T>(
        &self,
        change: impl FnOnce(&mut Core, u64) -> Result<(T, Promise), ArmError>,
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
            let revocations = core.take_revocations();
            let told_at_once = matches!(result, Ok((_, Promise::Nothing))) && revocations.is_empty();
            // Queued under the core lock, so the commit order is the order of the changes.
            let mut commits = self.commits.lock().expect("commits poisoned");
            // An answer told at once that changed nothing leaves nothing to commit.
            if changed || !told_at_once {
                commits.pending.extend(changes);
                commits.queued += 1;
                if !std::mem::replace(&mut commits.committer, true) {
                    self.start_committer();
                }
            }
            if told_at_once {
                drop(commits);
                drop(core);
                return self.told_at_once(result.map(|(answer, _)| answer));
            }
            (result, revocations, commits.queued, changed)
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
        result.map(|(answer, _)| answer)
    }

    /// An answer that promises nothing, given at once: by a replica that still leads as it
    /// answers (one deposed while it waited for the core decides nothing, rejections included).
    fn told_at_once<T>(&self, answer: Result<T, ArmError>) -> Result<T, ArmError> {
        match self.replication.as_ref().filter(|r| !r.leading()) {
            Some(replication) => Err(replication.not_leader()),
            None => answer,
        }
    }

    /// The sequence number of the last change queued: [`Arm::commit_through`] it to wait until
    /// everything made so far is durable.
    pub(super) fn last_queued(&self) -> u64 {
        self.commits.lock().expect("commits poisoned").queued
    }

    /// Returns once change `seq` is durable; fails if it was rolled back. The committer task
    /// commits it (the one its change started, or one running already).
    pub(super) async fn commit_through(&self, seq: u64) -> Result<(), ArmServerError> {
        // Subscribed before looking, so that a group ending in between is not missed.
        let mut settled = self.groups_ended.subscribe();
        loop {
            if let Some(outcome) = self.commits.lock().expect("commits poisoned").settled(seq) {
                return outcome;
            }
            // The sender lives as long as `self`.
            let _ = settled.changed().await;
        }
    }

    /// Starts the committer task. Called with `commits` locked, once its `committer` is set.
    fn start_committer(&self) {
        // `self` is borrowed from its `Arc` by whoever queues a change.
        let arm = self.me.upgrade().expect("the manager is alive while it makes a change");
        tokio::spawn(async move { arm.commit_queued().await });
    }

    /// Commits what is queued, group after group, until nothing is left: each group in the
    /// committer's turn (a rollback, a reload or member records wait for it), each starting as
    /// long after the last one ended as it took. Its callers are woken at once when a group
    /// ends. (When each caller took the turn in its own request, an async mutex handed it to one
    /// waiter at a time: after a group, each of the hundred-odd callers it covered was woken in turn, only
    /// to find its change durable, before the next group could start, 10-20 ms under the
    /// 1,000-program load against a commit of 2-5 ms.)
    async fn commit_queued(&self) {
        let mut running = CommitterRuns { arm: self, ended: false };
        // When the next group may start: as long after the last one ended as it took.
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            let turn = self.committing.lock().await;
            if let Some(due) = due {
                tokio::time::sleep_until(due).await;
            }
            let (batch, last) = {
                let mut commits = self.commits.lock().expect("commits poisoned");
                if commits.all_settled() {
                    commits.committer = false;
                    running.ended = true;
                    return;
                }
                let batch: Vec<Change> = std::mem::take(&mut commits.pending).into_iter().collect();
                (batch, commits.queued)
            };
            let started = tokio::time::Instant::now();
            match self.write_group(batch).await {
                Ok(()) => self.commits.lock().expect("commits poisoned").durable = last,
                Err(e) => self.roll_back(e).await,
            }
            let ended = tokio::time::Instant::now();
            due = Some(ended + (ended - started).min(MAX_GROUP_SPACING));
            drop(turn);
            self.wake_waiters();
        }
    }

    /// Wakes the callers waiting for their change to settle: a group ended, or what was queued
    /// was dropped.
    fn wake_waiters(&self) {
        self.groups_ended.send_modify(|groups| *groups = groups.wrapping_add(1));
    }

    /// Writes one group's records: to the store, or through the replicated log.
    async fn write_group(&self, batch: Vec<Change>) -> Result<(), ArmServerError> {
        match self.replication.as_ref() {
            // The replicas' state machines write it, this one's store included.
            Some(replication) => replication.commit(&batch).await,
            None => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || store.commit(&batch))
                    .await
                    .unwrap_or_else(|e| Err(ArmServerError::Store(format!("the commit did not finish: {e}"))))
            }
        }
    }

    /// After a failed commit, puts memory back to what the store holds: every change queued
    /// since the last durable one (the whole group, and those queued meanwhile) is dropped, and
    /// each of their callers is told why. Called with `committing` held.
    async fn roll_back(&self, error: ArmServerError) {
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
        let reloaded = {
            let mut core = self.core.lock().expect("core poisoned");
            let mut commits = self.commits.lock().expect("commits poisoned");
            commits.drop_unsettled();
            match loaded {
                Ok(mut fresh) => {
                    commits.stale = false;
                    fresh.keep_unstored(&mut core);
                    *core = fresh;
                    Ok(())
                }
                Err(e) => {
                    commits.stale = true;
                    Err(e)
                }
            }
        };
        // The callers of the changes dropped are told.
        self.wake_waiters();
        reloaded
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_rolled_back_stays_failed_when_a_later_group_is_durable() {
        let mut commits = Commits { queued: 3, durable: 1, ..Default::default() };
        commits.failure = "disk full".into();
        // Changes 2 and 3 are rolled back; 4 and 5, made after, commit.
        commits.drop_unsettled();
        commits.queued = 5;
        commits.durable = 5;
        // The caller of change 2, woken only now, hears that it was dropped.
        for dropped in [2, 3] {
            let told = commits.settled(dropped).expect("settled");
            assert!(told.is_err_and(|e| e.to_string().contains("disk full")), "change {dropped}");
        }
        for kept in [1, 4, 5] {
            assert!(matches!(commits.settled(kept), Some(Ok(()))), "change {kept}");
        }
        assert!(commits.settled(6).is_none(), "not made yet");
        assert!(commits.all_settled());
    }

    #[test]
    fn only_the_latest_rollbacks_are_remembered() {
        let mut commits = Commits::default();
        for round in 0..(ROLLBACKS_KEPT as u64 + 1) {
            commits.queued = round + 1;
            commits.drop_unsettled();
        }
        assert_eq!(commits.rolled_back.len(), ROLLBACKS_KEPT);
        assert!(commits.rolled_back.iter().all(|(first, last, _)| first == last && *first > 1));
    }
}
