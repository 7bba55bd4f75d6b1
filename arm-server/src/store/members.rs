//! A replicated manager's member records: each replica's client address and signing key, by
//! replica id, written through the replicated log as any other record, so that every replica
//! knows those of members added after its configuration was written (`armctl cluster add`).
//! Raft's own membership keeps only each member's Raft address (openraft's `BasicNode`, whose
//! encoding the stores of existing clusters hold).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{decode, encode, store_err, Change, Store};
use crate::core::Key;
use crate::ArmServerError;

/// Member records, by replica id (schema 4).
pub(super) const MEMBERS: TableDefinition<u64, &[u8]> = TableDefinition::new("members");

/// What a replica's peers must know of it beyond its Raft address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Where it serves programs and admins: where the others send clients when it leads.
    pub api: SocketAddr,
    /// Its signing key's public half, 64 hex digits: backends must trust it before it leads.
    pub key: String,
}

/// The member records as this replica applied them, shared between its state machine (which
/// writes them) and the replica's requests (which read them).
pub type Members = Arc<RwLock<BTreeMap<u64, MemberRecord>>>;

impl MemberRecord {
    /// The change that writes this record for replica `id`.
    pub fn change(&self, id: u64) -> Result<Change, ArmServerError> {
        Ok((Key::Member(id), Some(encode(self)?)))
    }

    /// The change that deletes replica `id`'s record.
    pub fn deletion(id: u64) -> Change {
        (Key::Member(id), None)
    }
}

impl Store {
    /// Every member record the store holds.
    pub fn members(&self) -> Result<BTreeMap<u64, MemberRecord>, ArmServerError> {
        self.with_db(|db| {
            let txn = db.begin_read().map_err(store_err)?;
            let mut found: BTreeMap<u64, MemberRecord> = BTreeMap::new();
            for row in txn.open_table(MEMBERS).map_err(store_err)?.iter().map_err(store_err)? {
                let (k, v) = row.map_err(store_err)?;
                found.insert(k.value(), decode(v.value())?);
            }
            Ok(found)
        })
    }

    /// The member records as changes that write them into an empty store (a snapshot's part).
    pub(super) fn member_changes(&self) -> Result<Vec<Change>, ArmServerError> {
        self.members()?.iter().map(|(id, record)| record.change(*id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_records_are_written_dumped_restored_and_deleted() {
        let (dir, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = Store::open(dir.path()).unwrap();
        let record = MemberRecord { api: "10.1.0.14:7000".parse().unwrap(), key: "ab".repeat(32) };
        store.commit(&[record.change(4).unwrap()]).unwrap();
        assert_eq!(store.members().unwrap(), BTreeMap::from([(4, record.clone())]));

        // A snapshot carries them: a replica restored from it knows replica 4.
        let restored = Store::open(copy.path()).unwrap();
        restored.replace(&store.dump().unwrap()).unwrap();
        assert_eq!(restored.members().unwrap(), BTreeMap::from([(4, record)]));

        store.commit(&[MemberRecord::deletion(4)]).unwrap();
        assert!(store.members().unwrap().is_empty());
        restored.replace(&store.dump().unwrap()).unwrap();
        assert!(restored.members().unwrap().is_empty(), "a restore drops records the snapshot lacks");
    }
}
