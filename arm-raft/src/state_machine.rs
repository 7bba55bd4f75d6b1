//! The replicated state machine: the manager's [`Machine`] behind openraft's `RaftStateMachine`,
//! the request ids it has answered, and its snapshots (kept in the store's redb file).

use std::collections::{HashMap, VecDeque};
use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StoredMembership,
};
use redb::{Database, ReadableDatabase};
use serde::{Deserialize, Serialize};

use crate::db::{decode, encode, io_error, SNAPSHOT};
use crate::network::Departed;
use crate::{Applied, ArmRaft, ReplicationError, StorageError};

/// How many request ids the state machine remembers answers for: a retry comes within seconds
/// of its first try (a failover takes a few), long before this many later decisions.
const ANSWERS_KEPT: usize = 65_536;

/// A snapshot's meta in the manager's types.
type Meta = SnapshotMeta<u64, BasicNode>;

/// The manager's state, as the replicated state machine drives it. Deterministic: every replica
/// applies the same commands in the same order and must reach the same state.
pub trait Machine: Send + Sync + 'static {
    /// Applies one decision and answers it. A failure (its disk cannot write) stops the
    /// replica: it may not go on with a state the others have and it lacks.
    fn apply(&mut self, op: &[u8]) -> Result<Vec<u8>, String>;
    /// The whole state, for a snapshot.
    fn save(&self) -> Result<Vec<u8>, String>;
    /// Replaces the state with the one a snapshot saved.
    fn restore(&mut self, bytes: &[u8]) -> Result<(), String>;
}

/// What a snapshot holds.
#[derive(Serialize, Deserialize)]
struct Image {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    machine: Vec<u8>,
    /// Request ids answered, oldest first, with their answers.
    answered: Vec<(String, Vec<u8>)>,
}

/// The state machine's state in memory.
struct State<M> {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    machine: M,
    answers: HashMap<String, Vec<u8>>,
    /// The ids in `answers`, oldest first (the first forgotten).
    order: VecDeque<String>,
    /// The replicas that left the memberships applied.
    departed: Departed,
}

impl<M: Machine> State<M> {
    fn new(machine: M) -> Self {
        Self {
            last_applied: None,
            membership: StoredMembership::default(),
            machine,
            answers: HashMap::new(),
            order: VecDeque::new(),
            departed: Departed::default(),
        }
    }

    fn image(&self) -> Result<Image, String> {
        Ok(Image {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            machine: self.machine.save()?,
            answered: self.order.iter().map(|id| (id.clone(), self.answers[id].clone())).collect(),
        })
    }

    /// Takes the state an image saved.
    fn load(&mut self, image: Image) -> Result<(), String> {
        self.machine.restore(&image.machine)?;
        self.order = image.answered.iter().map(|(id, _)| id.clone()).collect();
        self.answers = image.answered.into_iter().collect();
        self.last_applied = image.last_applied;
        self.departed.follow(self.membership.membership(), image.membership.membership());
        self.membership = image.membership;
        Ok(())
    }

    /// Applies one entry; the answer openraft hands to whoever proposed it.
    fn apply(&mut self, entry: Entry<ArmRaft>) -> Result<Applied, String> {
        let log_id = entry.log_id;
        let applied = match entry.payload {
            EntryPayload::Blank => Applied::default(),
            EntryPayload::Membership(membership) => {
                self.departed.follow(self.membership.membership(), &membership);
                self.membership = StoredMembership::new(Some(log_id), membership);
                Applied::default()
            }
            EntryPayload::Normal(command) => self.apply_command(command, log_id.leader_id.term)?,
        };
        self.last_applied = Some(log_id);
        Ok(applied)
    }

    /// Applies a command logged in `term`, unless its id was applied before (then its first
    /// answer is given) or it was proposed in another term (then it is refused).
    fn apply_command(&mut self, command: crate::Command, term: u64) -> Result<Applied, String> {
        if let Some(answer) = self.answers.get(&command.id) {
            return Ok(Applied { answer: answer.clone(), duplicate: true, refused: false });
        }
        if command.term.is_some_and(|proposed| proposed != term) {
            return Ok(Applied { refused: true, ..Applied::default() });
        }
        let answer = self.machine.apply(&command.op)?;
        self.answers.insert(command.id.clone(), answer.clone());
        self.order.push_back(command.id);
        while self.order.len() > ANSWERS_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.answers.remove(&old);
            }
        }
        Ok(Applied { answer, duplicate: false, refused: false })
    }
}

/// The replicated state machine. Clones share it (one is openraft's snapshot builder).
pub struct StateMachine<M> {
    db: Arc<Database>,
    state: Arc<Mutex<State<M>>>,
}

impl<M> std::fmt::Debug for StateMachine<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine").finish_non_exhaustive()
    }
}

impl<M> Clone for StateMachine<M> {
    fn clone(&self) -> Self {
        Self { db: self.db.clone(), state: self.state.clone() }
    }
}

impl<M: Machine> StateMachine<M> {
    /// The state machine of the store `db` over `machine`, from the store's last snapshot (the
    /// machine as given when there is none).
    pub(crate) fn open(db: Arc<Database>, machine: M) -> Result<Self, ReplicationError> {
        let machine = Self { db, state: Arc::new(Mutex::new(State::new(machine))) };
        if let Some((_, data)) = machine.stored().map_err(|e| ReplicationError::Snapshot(e.to_string()))? {
            let image = decode(&data).map_err(|e| ReplicationError::Snapshot(e.to_string()))?;
            machine.state.lock().expect("state machine poisoned").load(image).map_err(ReplicationError::Snapshot)?;
        }
        Ok(machine)
    }

    /// The replicas that left the memberships this state machine applied.
    pub(crate) fn departed(&self) -> Departed {
        self.state.lock().expect("state machine poisoned").departed.clone()
    }

    /// Reads the machine (the manager's state) as it stands.
    pub fn with<T>(&self, read: impl FnOnce(&M) -> T) -> T {
        read(&self.state.lock().expect("state machine poisoned").machine)
    }

    /// The last snapshot stored: its meta and its bytes.
    fn stored(&self) -> Result<Option<(Meta, Vec<u8>)>, StorageError> {
        let subject = || ErrorSubject::Snapshot(None);
        let txn = self.db.begin_read().map_err(|e| io_error(subject(), ErrorVerb::Read, e))?;
        let table = txn.open_table(SNAPSHOT).map_err(|e| io_error(subject(), ErrorVerb::Read, e))?;
        let get = |key| -> Result<Option<Vec<u8>>, StorageError> {
            let value = table.get(key).map_err(|e| io_error(subject(), ErrorVerb::Read, e))?;
            Ok(value.map(|v| v.value().to_vec()))
        };
        let (Some(meta), Some(data)) = (get("meta")?, get("data")?) else { return Ok(None) };
        let meta = decode(&meta).map_err(|e| io_error(subject(), ErrorVerb::Read, e))?;
        Ok(Some((meta, data)))
    }

    /// Stores `meta` and `data` as the last snapshot, unless the one stored is of a later log
    /// index: a snapshot built from an older state may finish after one installed from the
    /// leader, and must not replace it.
    fn store_unless_older(&self, meta: &Meta, data: &[u8]) -> Result<(), StorageError> {
        if let Some((stored, _)) = self.stored()? {
            if stored.last_log_id > meta.last_log_id {
                return Ok(());
            }
        }
        self.store(meta, data)
    }

    /// Stores `meta` and `data` as the last snapshot.
    fn store(&self, meta: &Meta, data: &[u8]) -> Result<(), StorageError> {
        let subject = || ErrorSubject::Snapshot(Some(meta.signature()));
        let failed = |e: &dyn std::fmt::Display| io_error(subject(), ErrorVerb::Write, e);
        let encoded = encode(meta).map_err(|e| failed(&e))?;
        let txn = self.db.begin_write().map_err(|e| failed(&e))?;
        {
            let mut table = txn.open_table(SNAPSHOT).map_err(|e| failed(&e))?;
            table.insert("meta", encoded.as_slice()).map_err(|e| failed(&e))?;
            table.insert("data", data).map_err(|e| failed(&e))?;
        }
        txn.commit().map_err(|e| failed(&e))
    }
}

impl<M: Machine> RaftSnapshotBuilder<ArmRaft> for StateMachine<M> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<ArmRaft>, StorageError> {
        let failed = |e: &dyn std::fmt::Display| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e);
        let (image, last_applied, membership) = {
            let state = self.state.lock().expect("state machine poisoned");
            (state.image().map_err(|e| failed(&e))?, state.last_applied, state.membership.clone())
        };
        let data = encode(&image).map_err(|e| failed(&e))?;
        // Unique per build: two snapshots at one log id from different replicas are distinct.
        let nonce = u64::from_le_bytes(rand_bytes());
        let at = last_applied.map_or_else(|| "none".to_string(), |id| format!("{}-{}", id.leader_id, id.index));
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id: format!("{at}-{nonce:x}"),
        };
        self.store_unless_older(&meta, &data)?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

/// Eight bytes that differ between builds (time and address: not secret, only distinct).
fn rand_bytes() -> [u8; 8] {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos.to_le_bytes()
}

impl<M: Machine> RaftStateMachine<ArmRaft> for StateMachine<M> {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError> {
        let state = self.state.lock().expect("state machine poisoned");
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry<ArmRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // The machine writes its store as it applies; on the runtime's worker, not off it
        // (`db::synced`): the manager's writes its store once per 1,024 applies (its log has them
        // on disk), and handing the worker to another thread at every apply cost more than that.
        let mut state = self.state.lock().expect("state machine poisoned");
        let mut answers = Vec::new();
        for entry in entries {
            let log_id = entry.log_id;
            let applied = state.apply(entry).map_err(|e| {
                io_error(ErrorSubject::Apply(log_id), ErrorVerb::Write, format!("the manager's state: {e}"))
            })?;
            answers.push(applied);
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<Cursor<Vec<u8>>>) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let failed =
            |e: &dyn std::fmt::Display| io_error(ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Read, e);
        let image: Image = decode(&data).map_err(|e| failed(&e))?;
        {
            let mut state = self.state.lock().expect("state machine poisoned");
            state.load(image).map_err(|e| failed(&e))?;
            state.last_applied = meta.last_log_id;
            state.membership = meta.last_membership.clone();
        }
        self.store_unless_older(meta, &data)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<ArmRaft>>, StorageError> {
        Ok(self.stored()?.map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}
