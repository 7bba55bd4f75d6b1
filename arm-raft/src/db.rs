//! The redb file behind the replicated store: its tables and the encoding of their values.

use std::path::Path;
use std::sync::Arc;

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use redb::{Database, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{ReplicationError, StorageError};

/// Log entries by index.
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// The log's own records: `vote`, `committed`, `last_purged`.
pub(crate) const LOG_META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_log_meta");
/// The state machine's last snapshot: `meta`, `data`.
pub(crate) const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");

/// The file's page cache. redb's default (1 GiB) fills with the pages every append rewrites,
/// so a replica's memory grew with its log (656 MiB after a minute of 1,000 programs); entries
/// are read back only by followers lagging behind and on start.
const CACHE_BYTES: usize = 16 << 20;

/// Opens the file and creates its tables.
pub(crate) fn open(path: &Path) -> Result<Arc<Database>, ReplicationError> {
    let failed =
        |e: &dyn std::fmt::Display| ReplicationError::Open { path: path.display().to_string(), reason: e.to_string() };
    let db = redb::Builder::new().set_cache_size(CACHE_BYTES).create(path).map_err(|e| failed(&e))?;
    let txn = db.begin_write().map_err(|e| failed(&e))?;
    txn.open_table(LOG).map_err(|e| failed(&e))?;
    txn.open_table(LOG_META).map_err(|e| failed(&e))?;
    txn.open_table(SNAPSHOT).map_err(|e| failed(&e))?;
    txn.commit().map_err(|e| failed(&e))?;
    Ok(Arc::new(db))
}

/// `value` in the store's encoding.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, AnyError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|e| AnyError::error(e.to_string()))
}

/// A value read back from the store's encoding.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AnyError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(value, _)| value)
        .map_err(|e| AnyError::error(e.to_string()))
}

/// A redb failure as openraft's storage error, naming what was being done.
pub(crate) fn io_error(subject: ErrorSubject<u64>, verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::error(e.to_string())).into()
}

/// Runs a write that syncs the file off the runtime's worker, when the runtime has others to
/// take the tasks queued behind it (a multi-threaded one): openraft awaits its storage in its
/// own tasks, and a sync there held up every request the worker had queued.
pub fn synced<T>(write: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(write)
        }
        _ => write(),
    }
}
