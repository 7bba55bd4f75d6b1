//! The replicated log in redb: openraft's `RaftLogStorage`.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, Vote};
use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, WriteTransaction};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::db::{decode, encode, io_error, LOG, LOG_META};
use crate::{ArmRaft, StorageError};

/// The log, its vote and its commit point, in the store's redb file. Clones share the file.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// The commit point saved since the last append: the next append writes it
    /// ([`LogStore::save_committed`]).
    committed: Arc<Mutex<Option<Option<LogId<u64>>>>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        Self { db, committed: Arc::default() }
    }

    /// Runs `read` in a read transaction.
    fn read<T>(
        &self,
        subject: ErrorSubject<u64>,
        read: impl FnOnce(&ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StorageError> {
        let txn = self.db.begin_read().map_err(|e| io_error(subject.clone(), ErrorVerb::Read, e))?;
        read(&txn).map_err(|e| io_error(subject, ErrorVerb::Read, e))
    }

    /// Runs `write` in a write transaction and commits it (redb syncs the file at the commit).
    fn write(
        &self,
        subject: ErrorSubject<u64>,
        verb: ErrorVerb,
        write: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StorageError> {
        crate::db::synced(|| {
            let txn = self.db.begin_write().map_err(|e| io_error(subject.clone(), verb, e))?;
            write(&txn).map_err(|e| io_error(subject.clone(), verb, e))?;
            txn.commit().map_err(|e| io_error(subject, verb, e))
        })
    }

    /// One of the log's own records.
    fn meta<T: DeserializeOwned>(&self, subject: ErrorSubject<u64>, key: &str) -> Result<Option<T>, StorageError> {
        let bytes =
            self.read(subject.clone(), |txn| Ok(txn.open_table(LOG_META)?.get(key)?.map(|v| v.value().to_vec())))?;
        bytes.map(|b| decode(&b)).transpose().map_err(|e| io_error(subject, ErrorVerb::Read, e))
    }

    /// Records one of the log's own records, synced.
    fn put_meta<T: Serialize>(&self, subject: ErrorSubject<u64>, key: &str, value: &T) -> Result<(), StorageError> {
        let bytes = encode(value).map_err(|e| io_error(subject.clone(), ErrorVerb::Write, e))?;
        self.write(subject, ErrorVerb::Write, |txn| {
            txn.open_table(LOG_META)?.insert(key, bytes.as_slice())?;
            Ok(())
        })
    }

    /// The encoded entries with indexes in `range`.
    fn entries_in(&self, range: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry<ArmRaft>>, StorageError> {
        let rows = self.read(ErrorSubject::Logs, |txn| {
            let table = txn.open_table(LOG)?;
            let mut rows = Vec::new();
            for row in table.range(range)? {
                rows.push(row?.1.value().to_vec());
            }
            Ok(rows)
        })?;
        rows.iter()
            .map(|b| decode(b))
            .collect::<Result<_, _>>()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))
    }

    /// Removes the entries with indexes in `range`.
    fn remove(&self, range: (Bound<u64>, Bound<u64>)) -> Result<(), StorageError> {
        self.write(ErrorSubject::Logs, ErrorVerb::Delete, |txn| {
            let mut table = txn.open_table(LOG)?;
            table.retain_in(range, |_, _| false)?;
            Ok(())
        })
    }
}

impl RaftLogReader<ArmRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<ArmRaft>>, StorageError> {
        self.entries_in((range.start_bound().cloned(), range.end_bound().cloned()))
    }
}

impl RaftLogStorage<ArmRaft> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<ArmRaft>, StorageError> {
        let last_purged_log_id: Option<LogId<u64>> = self.meta(ErrorSubject::Logs, "last_purged")?;
        let last =
            self.read(ErrorSubject::Logs, |txn| Ok(txn.open_table(LOG)?.last()?.map(|(_, v)| v.value().to_vec())))?;
        let last = last
            .map(|b| decode::<Entry<ArmRaft>>(&b))
            .transpose()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let last_log_id = last.map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.put_meta(ErrorSubject::Vote, "vote", vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.meta(ErrorSubject::Vote, "vote")
    }

    /// Kept in memory and written with the next append, in its transaction: openraft saves the
    /// commit point before every apply, on every replica, and a transaction of its own (even
    /// unsynced) cost every group commit a redb commit on each replica. One lost with a crash
    /// only makes the replica apply less of its log at start, the rest once the leader tells it
    /// the commit point again (it is never ahead of what was committed).
    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        *self.committed.lock().expect("commit point poisoned") = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        if let Some(saved) = *self.committed.lock().expect("commit point poisoned") {
            return Ok(saved);
        }
        Ok(self.meta::<Option<LogId<u64>>>(ErrorSubject::Store, "committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<ArmRaft>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<ArmRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for entry in entries {
            let bytes = encode(&entry).map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, e))?;
            rows.push((entry.log_id.index, bytes));
        }
        let committed = self.committed.lock().expect("commit point poisoned").take();
        let committed = committed
            .map(|point| encode(&point))
            .transpose()
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        let written = self.write(ErrorSubject::Logs, ErrorVerb::Write, |txn| {
            let mut table = txn.open_table(LOG)?;
            for (index, bytes) in &rows {
                table.insert(*index, bytes.as_slice())?;
            }
            if let Some(point) = &committed {
                txn.open_table(LOG_META)?.insert("committed", point.as_slice())?;
            }
            Ok(())
        });
        // On disk (committed, synced) before openraft hears of it. Synced here rather than by
        // a writer thread that calls back later: openraft 0.9's core awaits this callback
        // before it sends the entries on (`RaftCore::append_to_log`), so returning early would
        // not shorten a leader's round (replication.md, stop 83).
        callback.log_io_completed(written.as_ref().map(drop).map_err(|e| std::io::Error::other(e.to_string())));
        written
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        self.remove((Bound::Included(log_id.index), Bound::Unbounded))
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        // The purge point first: a crash between the two leaves entries behind it, never a gap
        // that the log state does not account for.
        self.put_meta(ErrorSubject::Logs, "last_purged", &log_id)?;
        self.remove((Bound::Unbounded, Bound::Included(log_id.index)))
    }
}
