//! The durable store (redb): one table per entity, values encoded with the protocol codec.
//! [`Store::snapshot`] captures what a change touched; [`Store::commit`] writes snapshots in one
//! transaction and returns only once it is durable: the server answers after that.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::SystemTime;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Serialize};

use crate::core::{Core, Durable, Key};
use crate::model::Usage;
use crate::ArmServerError;

mod deferred;
mod members;
use deferred::Deferred;
use members::MEMBERS;
pub use members::{MemberRecord, Members};

const HOSTS: TableDefinition<&str, &[u8]> = TableDefinition::new("hosts");
const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const SETS: TableDefinition<u64, &[u8]> = TableDefinition::new("sets");
const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
const PENDING: TableDefinition<u64, &[u8]> = TableDefinition::new("pending");
const RESERVATIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("reservations");
/// Revocations of preempted loans, due later: (when, host, capability).
const DELAYED: TableDefinition<(u64, &str, u64), ()> = TableDefinition::new("delayed");
/// Revocations not yet acknowledged, by (host, capability).
const REVOKED: TableDefinition<(&str, u64), ()> = TableDefinition::new("revoked");
/// Single values of the core (the fairness ledger).
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Open accounting intervals, by accelerator (schema 2).
const USAGE_OPEN: TableDefinition<&str, &[u8]> = TableDefinition::new("usage_open");
/// Closed accounting records, by (end ms, accelerator, start ms): ordered by time, so that a
/// report from `since` and the purge of old records read only what they need (schema 2).
const USAGE: TableDefinition<(u64, &str, u64), &[u8]> = TableDefinition::new("usage");
/// Lent accelerators of elastic sets, by accelerator (schema 3).
const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");
/// The notices of waiting elastic requests, by request id (schema 3).
const ELASTIC_GETS: TableDefinition<u64, u64> = TableDefinition::new("elastic_gets");

/// The layout of the records this build writes, stamped in the store's `meta` table. Bump it
/// with any change to a stored type, and teach [`Store::open`] to migrate from the one before:
/// bincode records carry no field names, so a store of another layout would be misread.
///
/// 1: the first. 2: accounting (`usage_open`, `usage`); the tables of 1 unchanged, so 1 is
/// migrated by stamping it (its holders' intervals open when the new manager starts).
/// 3: elastic sets (`leases`, `elastic_gets`); the tables of 2 unchanged, so 1 and 2 are
/// migrated by stamping. A manager of schema 2 refuses a store of 3, rather than take its
/// lent accelerators for firm ones. 4: a replicated manager's member records (`members`);
/// the tables of 3 unchanged, so 1 to 3 are migrated by stamping.
pub const SCHEMA: u64 = 4;

fn store_err(e: impl std::fmt::Display) -> ArmServerError {
    ArmServerError::Store(e.to_string())
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ArmServerError> {
    let mut out = Vec::new();
    ac_proto::codec::encode_into(value, &mut out)?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ArmServerError> {
    Ok(ac_proto::codec::decode(bytes)?)
}

/// One key's new encoded value (`None`: deleted), captured when the change was made.
pub type Change = (Key, Option<Vec<u8>>);

/// The store's page cache. redb's default (1 GiB) fills with the pages every commit rewrites,
/// so the manager's memory would grow with its request count; the state it serves from is in
/// memory anyway, and reads of the store are rare (start, accounting queries).
const CACHE_BYTES: usize = 16 << 20;

/// Why the store cannot write, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trouble {
    /// The first failed write of this spell.
    pub since: SystemTime,
    /// The last one (a retry waits a while after it).
    pub last: SystemTime,
    /// What the last failed write (or reopen) said: the OS error, where there was one.
    pub error: String,
}

/// The database file. After one failed write redb refuses every later operation until the
/// database is reopened, so a failed write marks it `broken` and the next use reopens it: once
/// space is back, the manager writes again without a restart.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    /// `None` while a reopen failed (the next use tries again). Readers hold the read lock for
    /// their whole transaction: a reopen must close the file (redb locks it) before opening it.
    db: RwLock<Option<Database>>,
    broken: AtomicBool,
    /// Set by a failed write, cleared by the next write that succeeds (`armctl health`).
    trouble: Mutex<Option<Trouble>>,
    /// Commits of changes that failed (the metric `arm_store_commit_failures_total`).
    commit_failures: AtomicU64,
    /// The size of the last commit that failed: a probe writes as much ([`Store::probe`]).
    failed_bytes: AtomicUsize,
    /// A replica's applies not yet written ([`Store::apply`]).
    deferred: Mutex<Deferred>,
}

/// What a failed write says, without redb's "I/O error: " before the OS's words.
fn cause(e: &ArmServerError) -> String {
    let text = match e {
        ArmServerError::Store(text) => text.clone(),
        other => other.to_string(),
    };
    text.strip_prefix("I/O error: ").map(str::to_string).unwrap_or(text)
}

impl Store {
    /// Opens (or creates) the database in `dir`. A store of schema 1 (or without a stamp,
    /// created before stamps) is migrated to [`SCHEMA`]; one stamped with another is refused,
    /// naming both.
    pub fn open(dir: &Path) -> Result<Self, ArmServerError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("arm.redb");
        let db = Self::open_database(&path)?;
        Ok(Self {
            path,
            db: RwLock::new(Some(db)),
            broken: AtomicBool::new(false),
            trouble: Mutex::new(None),
            commit_failures: AtomicU64::new(0),
            failed_bytes: AtomicUsize::new(0),
            deferred: Mutex::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the store cannot write, while it cannot.
    pub fn trouble(&self) -> Option<Trouble> {
        self.trouble.lock().expect("store trouble poisoned").clone()
    }

    /// Commits of changes that failed since the manager started.
    pub fn commit_failures(&self) -> u64 {
        self.commit_failures.load(Ordering::Relaxed)
    }

    /// Runs `use_db` on the open database once the applies deferred are written (what it reads
    /// is what was applied).
    fn with_db<T>(&self, use_db: impl FnOnce(&Database) -> Result<T, ArmServerError>) -> Result<T, ArmServerError> {
        self.write_deferred()?;
        self.with_open_db(use_db)
    }

    /// Runs `use_db` on the open database, reopening it first after a failed write.
    fn with_open_db<T>(
        &self,
        use_db: impl FnOnce(&Database) -> Result<T, ArmServerError>,
    ) -> Result<T, ArmServerError> {
        if self.broken.load(Ordering::Acquire) {
            self.reopen()?;
        }
        let db = self.db.read().expect("store poisoned");
        let db = db.as_ref().ok_or_else(|| {
            ArmServerError::Store(format!("the manager's store ({}) is not open", self.path.display()))
        })?;
        use_db(db)
    }

    /// Closes the database and opens it again, as redb requires after a failed write.
    fn reopen(&self) -> Result<(), ArmServerError> {
        let mut db = self.db.write().expect("store poisoned");
        if !self.broken.load(Ordering::Acquire) {
            return Ok(());
        }
        // Closed first: redb holds a lock on the file while it is open.
        drop(db.take());
        let fresh = Self::open_database(&self.path).inspect_err(|e| self.failed(e))?;
        *db = Some(fresh);
        self.broken.store(false, Ordering::Release);
        tracing::info!(path = %self.path.display(), "store reopened after a failed write");
        Ok(())
    }

    /// Runs a write (`use_db`), recording its failure (`trouble`) or its success; the error of
    /// a failure names the store and the cause.
    fn write<T>(&self, use_db: impl FnOnce(&Database) -> Result<T, ArmServerError>) -> Result<T, ArmServerError> {
        self.write_deferred()?;
        self.record_write(use_db)
    }

    /// Runs a write as [`Store::write`] does, without writing the deferred applies first.
    fn record_write<T>(
        &self,
        use_db: impl FnOnce(&Database) -> Result<T, ArmServerError>,
    ) -> Result<T, ArmServerError> {
        match self.with_open_db(use_db) {
            Ok(done) => {
                if self.trouble.lock().expect("store trouble poisoned").take().is_some() {
                    tracing::info!(path = %self.path.display(), "the store writes again");
                }
                Ok(done)
            }
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                self.failed(&e);
                Err(ArmServerError::Store(format!(
                    "the manager's store ({}) cannot write: {}",
                    self.path.display(),
                    cause(&e)
                )))
            }
        }
    }

    fn failed(&self, e: &ArmServerError) {
        let error = cause(e);
        tracing::error!(path = %self.path.display(), error, "the store cannot write");
        let mut trouble = self.trouble.lock().expect("store trouble poisoned");
        let last = SystemTime::now();
        let since = trouble.as_ref().map_or(last, |t| t.since);
        *trouble = Some(Trouble { since, last, error });
    }

    /// Writes as much as the last failed commit (then deletes it), to learn whether the store
    /// writes again (space came back) while no change comes to commit. As much: on a full
    /// disk a small write may still fit in the file's free pages, and would say all is well.
    pub fn probe(&self) -> Result<(), ArmServerError> {
        let blob = vec![0u8; self.failed_bytes.load(Ordering::Relaxed).max(4096)];
        self.write(|db| {
            for value in [Some(blob.as_slice()), None] {
                let txn = db.begin_write().map_err(store_err)?;
                {
                    let mut state = txn.open_table(STATE).map_err(store_err)?;
                    match value {
                        Some(blob) => state.insert("probe", blob).map(drop),
                        None => state.remove("probe").map(drop),
                    }
                    .map_err(store_err)?;
                }
                txn.commit().map_err(store_err)?;
            }
            Ok(())
        })
    }

    /// Opens (or creates) the database file and stamps or checks its schema ([`Store::open`]).
    fn open_database(path: &Path) -> Result<Database, ArmServerError> {
        let db = redb::Builder::new().set_cache_size(CACHE_BYTES).create(path).map_err(store_err)?;
        let txn = db.begin_write().map_err(store_err)?;
        {
            let mut meta = txn.open_table(META).map_err(store_err)?;
            let stamped = meta.get("schema").map_err(store_err)?.map(|v| v.value());
            match stamped {
                None => {
                    meta.insert("schema", SCHEMA).map_err(store_err)?;
                }
                Some(found) if found == SCHEMA => {}
                Some(old @ (1..=3)) => {
                    // 1 -> 2 adds the accounting tables, 2 -> 3 those of elastic sets, 3 -> 4
                    // the member records (created below); nothing else changes.
                    tracing::info!(path = %path.display(), "store migrated from schema {old} to {SCHEMA}");
                    meta.insert("schema", SCHEMA).map_err(store_err)?;
                }
                Some(found) => {
                    return Err(ArmServerError::Store(format!(
                        "{} holds records of schema {found}, and this arm-server reads schema {SCHEMA}; \
                         run the arm-server that wrote it, or start this one on a new state directory",
                        path.display()
                    )))
                }
            }
        }
        {
            txn.open_table(HOSTS).map_err(store_err)?;
            txn.open_table(JOBS).map_err(store_err)?;
            txn.open_table(SETS).map_err(store_err)?;
            txn.open_table(SESSIONS).map_err(store_err)?;
            txn.open_table(PENDING).map_err(store_err)?;
            txn.open_table(RESERVATIONS).map_err(store_err)?;
            txn.open_table(DELAYED).map_err(store_err)?;
            txn.open_table(REVOKED).map_err(store_err)?;
            txn.open_table(STATE).map_err(store_err)?;
            txn.open_table(META).map_err(store_err)?;
            txn.open_table(USAGE_OPEN).map_err(store_err)?;
            txn.open_table(USAGE).map_err(store_err)?;
            txn.open_table(LEASES).map_err(store_err)?;
            txn.open_table(ELASTIC_GETS).map_err(store_err)?;
            txn.open_table(MEMBERS).map_err(store_err)?;
        }
        txn.commit().map_err(store_err)?;
        Ok(db)
    }

    /// Reads everything back.
    pub fn load(&self) -> Result<Core, ArmServerError> {
        self.with_db(Self::load_from)
    }

    fn load_from(db: &Database) -> Result<Core, ArmServerError> {
        let txn = db.begin_read().map_err(store_err)?;
        let mut core = Durable::default();
        for row in txn.open_table(HOSTS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.hosts.insert(k.value().to_string(), decode(v.value())?);
        }
        for row in txn.open_table(JOBS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.jobs.insert(k.value().to_string(), decode(v.value())?);
        }
        for row in txn.open_table(SETS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.sets.insert(k.value(), decode(v.value())?);
        }
        for row in txn.open_table(SESSIONS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.sessions.insert(k.value().to_string(), decode(v.value())?);
        }
        for row in txn.open_table(PENDING).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.pending.insert(k.value(), decode(v.value())?);
        }
        for row in txn.open_table(RESERVATIONS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.reservations.insert(k.value(), decode(v.value())?);
        }
        for row in txn.open_table(DELAYED).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, _) = row.map_err(store_err)?;
            let (at, host, capability) = k.value();
            core.delayed.insert((at, host.to_string(), capability));
        }
        for row in txn.open_table(REVOKED).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, _) = row.map_err(store_err)?;
            let (host, capability) = k.value();
            core.unacked.insert((host.to_string(), capability));
        }
        for row in txn.open_table(USAGE_OPEN).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.usage.insert(k.value().to_string(), decode(v.value())?);
        }
        for row in txn.open_table(LEASES).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.leases.insert(k.value().to_string(), decode(v.value())?);
        }
        for row in txn.open_table(ELASTIC_GETS).map_err(store_err)?.iter().map_err(store_err)? {
            let (k, v) = row.map_err(store_err)?;
            core.elastic_gets.insert(k.value(), v.value());
        }
        if let Some(ledger) = txn.open_table(STATE).map_err(store_err)?.get("ledger").map_err(store_err)? {
            core.ledger = decode(ledger.value())?;
        }
        core.next_id =
            txn.open_table(META).map_err(store_err)?.get("next_id").map_err(store_err)?.map_or(0, |v| v.value());
        Ok(Core::restore(core))
    }

    /// The current encoded value of every key in `dirty` (`None`: deleted), to commit later.
    pub fn snapshot(core: &Core, dirty: &BTreeSet<Key>) -> Result<Vec<Change>, ArmServerError> {
        dirty
            .iter()
            .map(|key| {
                let value = match key {
                    Key::Host(k) => core.hosts().get(k).map(encode).transpose()?,
                    Key::Job(k) => core.jobs().get(k).map(encode).transpose()?,
                    Key::Set(k) => core.sets().get(k).map(encode).transpose()?,
                    Key::Session(k) => core.sessions().get(k).map(encode).transpose()?,
                    Key::Pending(k) => core.pending().get(k).map(encode).transpose()?,
                    Key::Reservation(k) => core.reservations().get(k).map(encode).transpose()?,
                    Key::Delayed(at, h, c) => core.delayed().contains(&(*at, h.clone(), *c)).then(Vec::new),
                    Key::Revocation(h, c) => core.unacked().contains(&(h.clone(), *c)).then(Vec::new),
                    Key::Ledger => Some(encode(core.ledger())?),
                    Key::NextId => Some(core.next_id().to_le_bytes().to_vec()),
                    Key::OpenUsage(a) => core.usage().get(a).map(encode).transpose()?,
                    Key::UsageRecord(usage) => Some(encode(usage)?),
                    Key::Lease(a) => core.leases().get(a).map(encode).transpose()?,
                    Key::ElasticGet(id) => core.elastic_gets().get(id).map(|n| n.to_le_bytes().to_vec()),
                    Key::Member(id) => return Err(store_err(format!("member {id} is not the core's to snapshot"))),
                };
                Ok((key.clone(), value))
            })
            .collect()
    }

    /// Writes snapshots in order, in one durable transaction (later values of a key win).
    pub fn commit(&self, changes: &[Change]) -> Result<(), ArmServerError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.write_deferred()?;
        self.commit_now(changes)
    }

    /// Writes `changes` in one synced transaction, counting a failure (`commit_failures`) and its size
    /// (for [`Store::probe`]).
    fn commit_now(&self, changes: &[Change]) -> Result<(), ArmServerError> {
        self.record_write(|db| Self::write_changes(db, changes)).inspect_err(|_| {
            self.commit_failures.fetch_add(1, Ordering::Relaxed);
            let bytes = changes.iter().map(|(_, value)| value.as_ref().map_or(0, Vec::len)).sum();
            self.failed_bytes.store(bytes, Ordering::Relaxed);
        })
    }

    fn write_changes(db: &Database, changes: &[Change]) -> Result<(), ArmServerError> {
        let txn = db.begin_write().map_err(store_err)?;
        Self::write_in(&txn, changes)?;
        txn.commit().map_err(store_err)
    }

    /// The whole store as changes that write it into an empty one: a replicated manager's
    /// snapshot.
    pub fn dump(&self) -> Result<Vec<Change>, ArmServerError> {
        let core = self.load()?;
        let mut changes = Self::snapshot(&core, &core.stored_keys())?;
        for usage in self.usage_since(0)? {
            let value = encode(&usage)?;
            changes.push((Key::UsageRecord(usage), Some(value)));
        }
        changes.extend(self.member_changes()?);
        Ok(changes)
    }

    /// Replaces everything the store holds with what `changes` write into an empty one
    /// ([`Store::dump`]), in one durable transaction.
    pub fn replace(&self, changes: &[Change]) -> Result<(), ArmServerError> {
        self.write(|db| {
            let txn = db.begin_write().map_err(store_err)?;
            for table in [HOSTS, JOBS, SESSIONS, STATE, USAGE_OPEN, LEASES] {
                txn.delete_table(table).map_err(store_err)?;
            }
            for table in [SETS, PENDING, RESERVATIONS, MEMBERS] {
                txn.delete_table(table).map_err(store_err)?;
            }
            txn.delete_table(DELAYED).map_err(store_err)?;
            txn.delete_table(REVOKED).map_err(store_err)?;
            txn.delete_table(USAGE).map_err(store_err)?;
            txn.delete_table(ELASTIC_GETS).map_err(store_err)?;
            Self::write_in(&txn, changes)?;
            txn.commit().map_err(store_err)
        })
    }

    /// Writes `changes` in `txn`, in order.
    fn write_in(txn: &redb::WriteTransaction, changes: &[Change]) -> Result<(), ArmServerError> {
        {
            let mut hosts = txn.open_table(HOSTS).map_err(store_err)?;
            let mut jobs = txn.open_table(JOBS).map_err(store_err)?;
            let mut sets = txn.open_table(SETS).map_err(store_err)?;
            let mut sessions = txn.open_table(SESSIONS).map_err(store_err)?;
            let mut pending = txn.open_table(PENDING).map_err(store_err)?;
            let mut revoked = txn.open_table(REVOKED).map_err(store_err)?;
            let mut reservations = txn.open_table(RESERVATIONS).map_err(store_err)?;
            let mut delayed = txn.open_table(DELAYED).map_err(store_err)?;
            let mut state = txn.open_table(STATE).map_err(store_err)?;
            let mut meta = txn.open_table(META).map_err(store_err)?;
            let mut usage_open = txn.open_table(USAGE_OPEN).map_err(store_err)?;
            let mut usage = txn.open_table(USAGE).map_err(store_err)?;
            let mut leases = txn.open_table(LEASES).map_err(store_err)?;
            let mut elastic_gets = txn.open_table(ELASTIC_GETS).map_err(store_err)?;
            let mut members = txn.open_table(MEMBERS).map_err(store_err)?;
            for (key, value) in changes {
                let value = value.as_deref();
                match (key, value) {
                    (Key::Host(k), Some(v)) => hosts.insert(k.as_str(), v).map(drop),
                    (Key::Host(k), None) => hosts.remove(k.as_str()).map(drop),
                    (Key::Job(k), Some(v)) => jobs.insert(k.as_str(), v).map(drop),
                    (Key::Job(k), None) => jobs.remove(k.as_str()).map(drop),
                    (Key::Set(k), Some(v)) => sets.insert(*k, v).map(drop),
                    (Key::Set(k), None) => sets.remove(*k).map(drop),
                    (Key::Session(k), Some(v)) => sessions.insert(k.as_str(), v).map(drop),
                    (Key::Session(k), None) => sessions.remove(k.as_str()).map(drop),
                    (Key::Pending(k), Some(v)) => pending.insert(*k, v).map(drop),
                    (Key::Pending(k), None) => pending.remove(*k).map(drop),
                    (Key::Delayed(at, h, c), Some(_)) => delayed.insert((*at, h.as_str(), *c), ()).map(drop),
                    (Key::Delayed(at, h, c), None) => delayed.remove((*at, h.as_str(), *c)).map(drop),
                    (Key::Reservation(k), Some(v)) => reservations.insert(*k, v).map(drop),
                    (Key::Reservation(k), None) => reservations.remove(*k).map(drop),
                    (Key::Revocation(h, c), Some(_)) => revoked.insert((h.as_str(), *c), ()).map(drop),
                    (Key::Revocation(h, c), None) => revoked.remove((h.as_str(), *c)).map(drop),
                    (Key::Ledger, Some(v)) => state.insert("ledger", v).map(drop),
                    (Key::Ledger, None) => state.remove("ledger").map(drop),
                    (Key::NextId, v) => {
                        let id = v.and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
                        meta.insert("next_id", id).map(drop)
                    }
                    (Key::OpenUsage(a), Some(v)) => usage_open.insert(a.as_str(), v).map(drop),
                    (Key::OpenUsage(a), None) => usage_open.remove(a.as_str()).map(drop),
                    (Key::UsageRecord(u), Some(v)) => {
                        usage.insert((u.end_ms.unwrap_or(u.start_ms), u.accelerator.as_str(), u.start_ms), v).map(drop)
                    }
                    // Records are only ever appended (and purged by age, `purge_usage`).
                    (Key::UsageRecord(_), None) => Ok(()),
                    (Key::Lease(a), Some(v)) => leases.insert(a.as_str(), v).map(drop),
                    (Key::Lease(a), None) => leases.remove(a.as_str()).map(drop),
                    (Key::ElasticGet(id), Some(v)) => {
                        let notice = v.try_into().map(u64::from_le_bytes).unwrap_or(0);
                        elastic_gets.insert(*id, notice).map(drop)
                    }
                    (Key::ElasticGet(id), None) => elastic_gets.remove(*id).map(drop),
                    (Key::Member(id), Some(v)) => members.insert(*id, v).map(drop),
                    (Key::Member(id), None) => members.remove(*id).map(drop),
                }
                .map_err(store_err)?;
            }
        }
        Ok(())
    }

    /// The closed accounting records that end after `since_ms` (Unix ms), in order of their end.
    pub fn usage_since(&self, since_ms: u64) -> Result<Vec<Usage>, ArmServerError> {
        self.with_db(|db| {
            let txn = db.begin_read().map_err(store_err)?;
            let table = txn.open_table(USAGE).map_err(store_err)?;
            let mut found = Vec::new();
            for row in table.range((since_ms.saturating_add(1), "", 0)..).map_err(store_err)? {
                let (_, v) = row.map_err(store_err)?;
                found.push(decode(v.value())?);
            }
            Ok(found)
        })
    }

    /// Deletes the accounting records that ended before `before_ms` (Unix ms); returns how many.
    pub fn purge_usage(&self, before_ms: u64) -> Result<usize, ArmServerError> {
        self.write(|db| {
            let txn = db.begin_write().map_err(store_err)?;
            let mut purged = 0;
            {
                let mut table = txn.open_table(USAGE).map_err(store_err)?;
                table
                    .retain_in(..(before_ms, "", 0), |_, _| {
                        purged += 1;
                        false
                    })
                    .map_err(store_err)?;
            }
            txn.commit().map_err(store_err)?;
            Ok(purged)
        })
    }
}

#[cfg(test)]
mod tests;
