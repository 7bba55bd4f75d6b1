//! The resource manager's replicated log and state machine: [openraft] (0.9) over redb, the
//! manager's store.
//!
//! A decision of the manager (a grant, a free, a job bound) is a [`Command`]: the request's id
//! and the decision, encoded by the manager. openraft appends it to a majority's logs
//! ([`LogStore`]) and, once committed, each replica's [`StateMachine`] applies it to its
//! [`Machine`], the manager's state. A command whose request id was applied before is not
//! applied again: its first answer is given back ([`Applied::duplicate`]), so that a program
//! that retries after a failover neither leaks nor is granted twice. A command names the term
//! its proposer leads in and is applied only if logged in it ([`Applied::refused`]): a leader
//! deposed and elected again between the two does not apply a decision made on a state it
//! no longer has.
//!
//! # Layout
//!
//! - `db.rs`: the redb file, its tables and the encoding of what they hold.
//! - `log_store.rs`: [`LogStore`], openraft's `RaftLogStorage` (entries, vote, committed, purge).
//! - `network.rs`: Raft RPCs between replicas over QUIC with mutual TLS (client and server).
//! - `replica.rs`: [`Replica`], a running replica: start, initialise the cluster, propose.
//! - `state_machine.rs`: [`StateMachine`], openraft's `RaftStateMachine` and snapshot builder,
//!   with the request-id table; the state is snapshotted into the same file.
//!
//! # Invariants
//!
//! - An append is answered (openraft's flush callback) only after redb's commit (fsync).
//! - The state machine's durable image is its last snapshot; on opening, it starts from it, and
//!   openraft applies again the committed entries after it (they are never purged before a
//!   snapshot covers them).

// openraft's traits return its `StorageError` (over 200 bytes) by value; the helpers that build
// it do the same rather than box it only to unbox it at the trait's edge.
#![allow(clippy::result_large_err)]

mod db;
mod log_store;
pub mod network;
mod replica;
mod state_machine;

use serde::{Deserialize, Serialize};

pub use db::synced;
pub use log_store::LogStore;
pub use replica::{Committed, Replica, ReplicaOptions, ReplicaTls, Status};
pub use state_machine::{Machine, StateMachine};

openraft::declare_raft_types!(
    /// The manager's Raft types: commands and their answers, node ids and addresses.
    pub ArmRaft:
        D = Command,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = std::io::Cursor<Vec<u8>>,
);

/// One decision of the manager, replicated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command {
    /// The request's id, unique per request and the same when it is sent again.
    pub id: String,
    /// The decision, as the manager encodes it (as bytes: bincode writes the same as for a
    /// sequence of `u8`, a length and the bytes, but whole instead of one call per byte).
    #[serde(with = "serde_bytes")]
    pub op: Vec<u8>,
    /// The term its proposer leads in: it is applied only if logged in that term. A leader
    /// deposed and elected again between proposing and logging it would otherwise log it
    /// after entries of another leader that its decision never saw. `None`: any term.
    pub term: Option<u64>,
}

/// Read as written, and as logged before commands named their term: those end after `op`
/// (each log entry is a record of its own, so nothing follows them), and apply in any term.
impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Command;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a command: id, op and (since stop 72) term")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Command, A::Error> {
                use serde::de::Error;
                let id = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let op = seq
                    .next_element::<serde_bytes::ByteBuf>()?
                    .ok_or_else(|| A::Error::invalid_length(1, &self))?
                    .into_vec();
                // An entry logged before: its record ends here.
                let term = seq.next_element::<Option<u64>>().ok().flatten().flatten();
                Ok(Command { id, op, term })
            }
        }
        deserializer.deserialize_struct("Command", &["id", "op", "term"], Fields)
    }
}

/// What applying a [`Command`] answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The machine's answer (the first one, for a duplicate).
    #[serde(with = "serde_bytes")]
    pub answer: Vec<u8>,
    /// Whether the request id had been applied before (the answer is the first one's).
    pub duplicate: bool,
    /// It was logged in a term other than its proposer's ([`Command::term`]): not applied,
    /// no answer, its request id not recorded.
    pub refused: bool,
}

/// What can go wrong in the replicated store and its replicas.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The redb file could not be opened, created or read.
    #[error("the raft store {path}: {reason}")]
    Open {
        /// The file.
        path: String,
        /// What redb said.
        reason: String,
    },
    /// The last snapshot could not be read back into the machine.
    #[error("the raft store's snapshot cannot be restored: {0}")]
    Snapshot(String),
    /// A replica could not be set up (certificates, its endpoint, openraft's configuration).
    #[error("the replica cannot start: {0}")]
    Setup(String),
    /// This replica is not the leader; the leader's id and address when it knows them.
    #[error("not the leader{}", leader.as_ref().map(|(id, addr)| format!(": replica {id} at {addr} is")).unwrap_or_default())]
    NotLeader {
        /// The leader's id and address.
        leader: Option<(u64, String)>,
    },
    /// openraft refused or failed the operation (no quorum, shutting down, ...).
    #[error("raft: {0}")]
    Raft(String),
}

/// The storage error openraft expects, for a redb or encoding failure.
pub type StorageError = openraft::StorageError<u64>;

/// Opens (or creates) the replicated store in the redb file at `path`: its log and its state
/// machine over `machine`, which share the file.
pub fn open<M: Machine>(path: &std::path::Path, machine: M) -> Result<(LogStore, StateMachine<M>), ReplicationError> {
    let db = db::open(path)?;
    let log = LogStore::new(db.clone());
    let machine = StateMachine::open(db, machine)?;
    Ok((log, machine))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
    use serde::Serialize;

    use crate::{ArmRaft, Command};

    /// A log entry as written before commands named their term: openraft's `Entry` layout.
    #[derive(Serialize)]
    struct OldEntry {
        log_id: LogId<u64>,
        payload: OldPayload,
    }

    #[derive(Serialize)]
    #[allow(dead_code)]
    enum OldPayload {
        Blank,
        Normal { id: String, op: Vec<u8> },
    }

    /// A replica upgraded over a log written before stop 72 reads its entries back.
    #[test]
    fn an_entry_logged_before_commands_named_their_term_is_read_as_any_term() {
        let log_id = LogId::new(CommittedLeaderId::new(3, 1), 7);
        let old = OldEntry { log_id, payload: OldPayload::Normal { id: "r1".into(), op: b"take".to_vec() } };
        let entry: Entry<ArmRaft> = crate::db::decode(&crate::db::encode(&old).unwrap()).expect("an old entry decodes");
        let EntryPayload::Normal(command) = entry.payload else { panic!("{:?}", entry.payload) };
        assert_eq!((entry.log_id, command), (log_id, Command { id: "r1".into(), op: b"take".to_vec(), term: None }));

        let new = Entry::<ArmRaft> {
            log_id,
            payload: EntryPayload::Normal(Command { id: "r2".into(), op: b"free".to_vec(), term: Some(3) }),
        };
        let again: Entry<ArmRaft> = crate::db::decode(&crate::db::encode(&new).unwrap()).unwrap();
        assert_eq!(again.payload, new.payload);
    }

    /// A command's bytes are written whole (`serde_bytes`) and still as a sequence of `u8` was:
    /// a replica of an earlier build, which reads them as such, reads a newer leader's entries.
    #[test]
    fn a_commands_bytes_encode_as_a_sequence_of_u8_did() {
        #[derive(Serialize)]
        struct Plain {
            id: String,
            op: Vec<u8>,
            term: Option<u64>,
        }
        let op: Vec<u8> = (0..=255).collect();
        let plain = Plain { id: "r3".into(), op: op.clone(), term: Some(9) };
        let command = Command { id: "r3".into(), op, term: Some(9) };
        assert_eq!(crate::db::encode(&command).unwrap(), crate::db::encode(&plain).unwrap());
    }
}
