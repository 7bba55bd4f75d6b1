//! A replica's applies, written to the store in groups: its Raft log holds every entry on disk,
//! and at each start its store is rebuilt from its last snapshot and that log (`arm_raft`), so
//! a write per apply would only cost every group commit a redb transaction on every replica.
//! Anything that reads or writes the store otherwise writes the deferred applies first: what it
//! reads is what was applied.

use std::collections::BTreeMap;

use super::{Change, Store};
use crate::core::Key;
use crate::ArmServerError;

/// Applies deferred in memory are written, in one synced transaction, once there are this many.
/// The sync lets redb reuse the pages the transactions before it freed. The write holds up the
/// apply that makes it, and so the group commit waiting for it on the leader: at 64 (once a
/// second under the 1,000-program load) the three replicas' request p99 was 93-110 ms, at 1,024
/// 84-85 ms, the single manager's unchanged (docs/benchmarks/replication.md, "Stop 82"). What
/// is deferred holds each record's last value only (the same sessions, sets and ledger are
/// rewritten group after group), and the store is rebuilt from the snapshot and the log at a
/// start, so waiting longer loses nothing.
pub(super) const APPLIES_PER_WRITE: u64 = 1024;

/// The applies not yet written: the last value of each record they wrote (a change writes
/// whole records, so the later value of a key is all the store must take; the same sessions,
/// sets and ledger are rewritten by group after group).
#[derive(Debug, Default)]
pub(super) struct Deferred {
    records: BTreeMap<Key, Option<Vec<u8>>>,
    /// How many applies `records` holds.
    applies: u64,
}

impl Store {
    /// Applies a replica's committed entry: its changes are written with the next
    /// [`APPLIES_PER_WRITE`] - 1 applies' (or before the store is next read or written).
    /// Fails if that write fails; the changes stay deferred and are written at the next try.
    pub fn apply(&self, changes: Vec<Change>) -> Result<(), ArmServerError> {
        let due = {
            let mut deferred = self.deferred.lock().expect("deferred applies poisoned");
            deferred.records.extend(changes);
            deferred.applies += 1;
            deferred.applies >= APPLIES_PER_WRITE
        };
        if due {
            // Off the runtime's worker: the replica's other tasks (its appends to followers
            // among them) go on meanwhile.
            arm_raft::synced(|| self.write_deferred())?;
        }
        Ok(())
    }

    /// Writes the deferred applies, if any, in one synced transaction (also as the manager
    /// stops). The lock is held while it writes: an apply waits, so that the store takes the
    /// changes in their order.
    pub fn write_deferred(&self) -> Result<(), ArmServerError> {
        let mut deferred = self.deferred.lock().expect("deferred applies poisoned");
        if deferred.applies == 0 {
            return Ok(());
        }
        let records: Vec<Change> = std::mem::take(&mut deferred.records).into_iter().collect();
        match self.commit_now(&records) {
            Ok(()) => {
                deferred.applies = 0;
                Ok(())
            }
            Err(e) => {
                deferred.records = records.into_iter().collect();
                Err(e)
            }
        }
    }
}
