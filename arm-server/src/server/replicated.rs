//! A replicated manager: this process is one replica (`[replication]`). Only the leader serves:
//! it makes each change on its core as a single manager does, and its group commit proposes
//! the records the change wrote to the replicas ([`arm_raft`]); a change is answered once a
//! majority has it on disk and the leader has applied it to its store. Every replica's store
//! is the state machine ([`StoreMachine`]), so a replica that takes the lead reads its core
//! back from its own store, as a single manager does after a restart.
//!
//! A replica that does not lead answers every request but `armctl cluster status` and the
//! manager's key with "not the leader", naming the leader's address: clients ask there.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ac_proto::arm::{ArmError, ClusterMember, ClusterStatus};
use ac_proto::transport::Tuning;
use arm_raft::{Command, Machine, Replica, ReplicaOptions, ReplicaTls, ReplicationError};

use super::Arm;
use crate::config::ReplicationConfig;
use crate::core::Key;
use crate::store::{Change, Members, Store};
use crate::ArmServerError;

mod membership;

/// The manager's store as the replicated state machine: a log entry is the records one group
/// commit wrote, applied to the store in one transaction; a snapshot is the whole store. The
/// member records it applies are kept in memory too (`members`), for the replica's requests.
pub struct StoreMachine {
    store: Arc<Store>,
    members: Members,
}

impl StoreMachine {
    /// Reads the member records back from the store into memory.
    fn reload_members(&self) -> Result<(), String> {
        *self.members.write().expect("members poisoned") = self.store.members().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A [`Change`] as it is encoded, its record's bytes whole: the same bytes as the plain tuple
/// (bincode writes a length and the bytes either way), without a call per byte.
#[derive(serde::Serialize)]
struct ChangeOut<'a>(&'a Key, #[serde(with = "serde_bytes")] &'a Option<Vec<u8>>);

/// A [`Change`] as it is decoded (see [`ChangeOut`]).
#[derive(serde::Deserialize)]
struct ChangeIn(Key, #[serde(with = "serde_bytes")] Option<Vec<u8>>);

/// The encoding of entries and snapshots (bincode, without the protocol's frame limit: a
/// snapshot of a large site is bigger, and travels in chunks).
fn encode(changes: &[Change]) -> Result<Vec<u8>, String> {
    let out: Vec<ChangeOut> = changes.iter().map(|(key, value)| ChangeOut(key, value)).collect();
    bincode::serde::encode_to_vec(&out, bincode::config::standard()).map_err(|e| e.to_string())
}

fn decode(bytes: &[u8]) -> Result<Vec<Change>, String> {
    let (changes, _): (Vec<ChangeIn>, _) =
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map_err(|e| e.to_string())?;
    Ok(changes.into_iter().map(|ChangeIn(key, value)| (key, value)).collect())
}

impl Machine for StoreMachine {
    fn apply(&mut self, op: &[u8]) -> Result<Vec<u8>, String> {
        let changes = decode(op)?;
        let members_changed = changes.iter().any(|(key, _)| matches!(key, Key::Member(_)));
        self.store.apply(changes).map_err(|e| e.to_string())?;
        if members_changed {
            self.reload_members()?;
        }
        Ok(Vec::new())
    }

    fn save(&self) -> Result<Vec<u8>, String> {
        encode(&self.store.dump().map_err(|e| e.to_string())?)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.store.replace(&decode(bytes)?).map_err(|e| e.to_string())?;
        self.reload_members()
    }
}

/// This replica: its Raft node and whether it leads (its core is the cluster's: it commits)
/// and serves (programs' requests are answered).
pub(super) struct Replication {
    replica: Replica<StoreMachine>,
    config: ReplicationConfig,
    /// The member records this replica applied: members' client addresses and keys.
    members: Members,
    /// The cluster's CA and this replica's client certificate and key: a new replica is asked
    /// who it is before it becomes a member.
    ca_cert: std::path::PathBuf,
    identity: (std::path::PathBuf, std::path::PathBuf),
    /// Its core was read back in its term: it may change it and commit (links report).
    leading: AtomicBool,
    /// The term it read its core back in: should Raft's term move on (deposed, and elected
    /// again between two looks of the role loop), it leads no more until it reads it back again.
    lead_term: AtomicU64,
    /// It leads and its backends' links have reported: requests are answered.
    serving: AtomicBool,
    /// Its links to the backends run: set as `take_the_lead` starts them, cleared as
    /// `step_down` stops them, both under the core lock (a commit that fails clears `leading`
    /// and leaves the links to the role loop).
    links_run: AtomicBool,
    /// The hosts whose links reported (up or not) since this replica took the lead.
    reported: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// A leader that no majority acknowledged for this long stops serving; a group commit not
    /// committed in twice this is failed (its replica stops serving until it leads again).
    lease: Duration,
    /// Group commits proposed, for their ids (with `nonce`, unique across restarts).
    proposed: AtomicU64,
    nonce: u64,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication").field("id", &self.config.id).finish_non_exhaustive()
    }
}

/// The client certificate a replica presents to the others, issued by the cluster's CA on its
/// first start.
fn replica_identity(dir: &Path, id: u64) -> Result<(std::path::PathBuf, std::path::PathBuf), ArmServerError> {
    let (cert, key) = (dir.join("replica.pem"), dir.join("replica.key"));
    if !cert.exists() || !key.exists() {
        let ten_years = ac_proto::capability::unix_now() as i64 + 10 * 366 * 86_400;
        let (cert_pem, key_pem) =
            ac_proto::tls::issue_client(dir, &format!("replica-{id}"), arm_raft::network::REPLICA_UNIT, ten_years)?;
        std::fs::write(&key, key_pem)?;
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        std::fs::write(&cert, cert_pem)?;
    }
    Ok((cert, key))
}

impl Replication {
    /// Starts this replica on `store` (its Raft log beside it, `raft.redb`); the lowest id of a
    /// new cluster makes the members the cluster, unless it joins one that exists (`join`).
    /// `lasting`: the client port's keys, from which the Raft port's are derived.
    pub(super) async fn start(
        config: &ReplicationConfig,
        dir: &Path,
        store: Arc<Store>,
        tuning: &Tuning,
        lasting: &ac_proto::transport::LastingKeys,
    ) -> Result<Self, ArmServerError> {
        let me = config.me()?;
        let files = ac_proto::tls::IdentityFiles::in_dir(dir);
        let tls = ReplicaTls {
            ca: files.ca_cert.clone(),
            server: (files.cert.clone(), files.key.clone()),
            client: replica_identity(dir, me.id)?,
        };
        let identity = tls.client.clone();
        let mut options = ReplicaOptions::new(me.id, me.raft, dir.join("raft.redb"), tls);
        options.tuning = tuning.clone();
        options.election_timeout = Duration::from_millis(config.election_timeout_ms);
        // Kept with the client port's (`reset.key`), apart from them: a replica killed and
        // started again resets the others' connections to its last process at once
        // (`ReplicaOptions::lasting`).
        options.lasting = Some(lasting.derived("raft"));
        // The same `revoked-certs` as the client port's: a replaced replica's certificate,
        // revoked there, speaks Raft no more.
        let revocations = Arc::new(crate::roles::Revocations::new(dir));
        options.revoked =
            arm_raft::network::Revoked(Arc::new(move |der| revocations.revoked(&crate::roles::fingerprint(der))));
        let has_state = {
            let core = store.load()?;
            !core.hosts().is_empty() || !core.jobs().is_empty()
        };
        let members: Members = Arc::new(std::sync::RwLock::new(store.members()?));
        let machine = StoreMachine { store, members: members.clone() };
        let replica = Replica::start(options, machine).await.map_err(replication_err)?;
        if has_state && replica.started_empty() {
            // The others would never learn what this store holds: it is not in the log.
            return Err(ArmServerError::Config(format!(
                "{} holds a manager's state (hosts or jobs) but no Raft log: a single manager's store cannot \
                 become a replica's. Start each replica on an empty state directory (the CA and admin files \
                 copied in) and add the hosts again (docs/admin.md, \"Three managers (replicated)\")",
                dir.display()
            )));
        }
        // A joining replica never makes a cluster: one of its own would have its own leader,
        // and it learns the cluster from the leader that adds it.
        let lowest = config.members.iter().map(|m| m.id).min();
        if lowest == Some(me.id) && !config.join {
            let members: BTreeMap<u64, SocketAddr> = config.members.iter().map(|m| (m.id, m.raft)).collect();
            // Refused once the cluster exists (this replica restarting): nothing to do then.
            if let Err(e) = replica.initialize(&members).await {
                tracing::debug!(error = %e, "the cluster was made before");
            }
        }
        let nonce =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let (members_listed, join) = (config.members.len(), config.join);
        tracing::info!(id = me.id, raft = %me.raft, members = members_listed, join, "replica started");
        Ok(Self {
            replica,
            config: config.clone(),
            members,
            ca_cert: files.ca_cert,
            identity,
            leading: AtomicBool::new(false),
            lead_term: AtomicU64::new(0),
            serving: AtomicBool::new(false),
            links_run: AtomicBool::new(false),
            reported: Default::default(),
            // Followers stand for election after twice the election timeout and more.
            lease: 2 * Duration::from_millis(config.election_timeout_ms),
            proposed: AtomicU64::new(0),
            nonce,
        })
    }

    /// Whether this replica serves programs: it leads, with a majority behind it, and its
    /// links have reported. Raft's own view is asked each time: the role loop that updates
    /// the flags follows it a moment later.
    pub(super) fn serving(&self) -> bool {
        self.serving.load(Ordering::Acquire) && self.leading()
    }

    /// Whether this replica may change its core and commit: it leads, with a majority behind
    /// it, and its core was read back in its term.
    pub(super) fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
            && self.replica.term() == self.lead_term.load(Ordering::Acquire)
            && self.replica.leads_a_majority(self.lease)
    }

    /// Whether this replica's links to the backends run (to be read under the core lock, under
    /// which they are started and stopped).
    pub(super) fn runs_links(&self) -> bool {
        self.links_run.load(Ordering::Acquire)
    }

    /// Stops changing the core and serving until the role loop sees this replica lead and
    /// reads its core back (`take_the_lead`): what memory holds may not be what commits.
    pub(super) fn stop_leading(&self) {
        self.leading.store(false, Ordering::Release);
        self.serving.store(false, Ordering::Release);
    }

    /// The answer of a replica that does not serve: where the leader is, if known.
    pub(super) fn not_leader(&self) -> ArmError {
        ac_proto::arm::not_leader(self.leader_api())
    }

    /// The address programs reach the leader at, if there is one and it is not this replica
    /// (which does not serve: still reading its state back, or without a majority, when the
    /// others may have elected another).
    fn leader_api(&self) -> Option<SocketAddr> {
        let leader = self.replica.leader().filter(|leader| *leader != self.config.id)?;
        self.api_of(leader)
    }

    /// Proposes the records of one group commit, in this replica's lead term; returns once a
    /// majority has them and this replica's store holds them.
    pub(super) async fn commit(&self, changes: &[Change]) -> Result<(), ArmServerError> {
        if changes.is_empty() {
            return Ok(());
        }
        if !self.leading() {
            return Err(ArmServerError::NotLeader(self.leader_api()));
        }
        let op = encode(changes).map_err(ArmServerError::Replication)?;
        let id = format!("{}-{:x}-{}", self.config.id, self.nonce, self.proposed.fetch_add(1, Ordering::Relaxed));
        let term = Some(self.lead_term.load(Ordering::Acquire));
        match tokio::time::timeout(2 * self.lease, self.replica.propose(Command { id, op, term })).await {
            // Logged in a later term: this replica was deposed, and its memory is not the log's.
            Ok(Ok(committed)) if committed.applied.refused => {
                self.stop_leading();
                Err(ArmServerError::NotLeader(self.leader_api()))
            }
            Ok(Ok(_)) => Ok(()),
            Ok(Err(ReplicationError::NotLeader { .. })) => Err(ArmServerError::NotLeader(self.leader_api())),
            Ok(Err(e)) => Err(replication_err(e)),
            Err(_) => {
                // It may still commit: memory, rolled back, may lack it, so this replica serves
                // again only after reading its store back when it leads (`take_the_lead`).
                self.stop_leading();
                tracing::warn!(lease_ms = self.lease.as_millis() as u64, "a commit took two leases: not serving");
                Err(ArmServerError::NotLeader(self.leader_api()))
            }
        }
    }

    /// Waits (a lease at most) until this replica applied every entry of its log: a new
    /// leader's `ready_to_lead` covers what was committed before its term, not an entry a
    /// commit that timed out left in its log, which may commit since; its store must hold it
    /// before memory is read back from it. Whether it did.
    async fn applied_its_log(&self) -> bool {
        let deadline = Instant::now() + self.lease;
        loop {
            let (_, last, applied) = self.replica.progress();
            if applied >= last {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What this replica knows of the cluster (`armctl cluster status`).
    pub(super) fn status(&self) -> ClusterStatus {
        let status = self.replica.status();
        let api = |id: u64| self.api_of(id);
        ClusterStatus {
            replica: status.id,
            leader: status.leader,
            term: status.term,
            last_log: status.last_log,
            applied: status.applied,
            members: status
                .members
                .into_iter()
                .map(|(id, raft, voter)| ClusterMember {
                    id,
                    raft,
                    api: api(id),
                    voter,
                    matched: status.matched.get(&id).copied().flatten(),
                })
                .collect(),
        }
    }
}

/// A term's ids start at `term << TERM_SHIFT`: 2^40 ids a term (14 years of grants at 2,500 a
/// second) keep a term's ids below the next term's, and ids below 2^53 (exact in JSON) for
/// 8,192 terms.
const TERM_SHIFT: u32 = 40;

/// How long a new leader waits for its backends' links to report before it serves: longer
/// than one dial's limit, so a silent backend does not hold it longer than that.
const LINK_REPORTS: Duration = Duration::from_secs(1);

fn replication_err(e: ReplicationError) -> ArmServerError {
    ArmServerError::Replication(e.to_string())
}

/// Follows this replica's role: taking the lead (its state read back, links and leases
/// started) when it leads with a majority behind it, and stepping down (links stopped, every
/// request sent to the leader) when it no longer leads, or a majority has not acknowledged it
/// for a lease (cut off from the others, which elect another after longer than that).
pub(super) async fn leadership_loop(arm: Arc<Arm>) {
    let Some(replication) = arm.replication.as_ref() else { return };
    // Whether this replica took the lead and has not stepped down since (its links run): a
    // commit that timed out stops it leading without stepping down.
    let mut led = false;
    loop {
        let should_lead = replication.replica.leads_a_majority(replication.lease);
        if should_lead && !replication.leading() {
            let started = Instant::now();
            if let Err(e) = replication.replica.ready_to_lead().await {
                tracing::warn!(error = %e, "elected, but could not confirm the lead");
            } else {
                tracing::info!(ms = started.elapsed().as_millis() as u64, "elected: the lead confirmed by a majority");
                let serving = arm.take_the_lead().await;
                // Its links may run even when it does not serve: a step-down stops them.
                led = true;
                if serving {
                    tracing::info!(
                        ms = started.elapsed().as_millis() as u64,
                        "this replica leads: serving from the replicated state"
                    );
                }
            }
        } else if !should_lead && led {
            arm.step_down();
            led = false;
            if replication.replica.is_leader() {
                tracing::warn!(
                    lease_ms = replication.lease.as_millis() as u64,
                    "no majority acknowledged this leader for a lease: not serving until one does"
                );
            } else {
                tracing::info!("this replica no longer leads: clients are sent to the leader");
            }
        }
        // A membership change (this leader's, or one a former leader left in the log) changes
        // the keys backends must trust: the leader registers them again; a follower only keeps
        // the set (what `armctl manager-key` prints) current.
        arm.follow_membership(led);
        tokio::time::sleep(ROLE_CHECK).await;
    }
}

/// How often a replica looks at its role and its majority.
const ROLE_CHECK: Duration = Duration::from_millis(25);

impl Arm {
    /// Whether this manager decides: a single manager always, a replica while it leads.
    pub(super) fn serves(&self) -> bool {
        self.replication.as_ref().is_none_or(Replication::serving)
    }

    /// The answer of a replica that does not serve `request`, if this one does not (`None`:
    /// a single manager, the leader, or a request any replica answers).
    pub(super) fn refuse_unless_leading(&self, request: &ac_proto::arm::Request) -> Option<ArmError> {
        use ac_proto::arm::Request;
        let replication = self.replication.as_ref()?;
        let anyone = matches!(request, Request::ClusterStatus | Request::ManagerKey);
        (!anyone && !replication.serving()).then(|| replication.not_leader())
    }

    /// As the new leader: reads the core back from the store (which holds everything committed
    /// before this term), starts the links to the backends, waits for them to report (so the
    /// first `AC_Get` is not refused for hosts merely not yet linked), and gives every program
    /// one lease to come back, as after a restart.
    async fn take_the_lead(&self) -> bool {
        let Some(replication) = self.replication.as_ref() else { return false };
        let started = Instant::now();
        // The term whose log is applied and read back: should Raft's move on meanwhile, this
        // replica does not lead (`leading`) and the role loop takes the lead again.
        let term = replication.replica.term();
        if !replication.applied_its_log().await {
            tracing::warn!("elected, but its log is not applied within a lease: not serving yet");
            return false;
        }
        {
            let _committer = self.committing.lock().await;
            if let Err(e) = self.reload().await {
                tracing::error!(error = %e, "the store cannot be read back: not serving");
                return false;
            }
            // This term's ids start above every earlier term's (a deposed leader's included,
            // committed or not): a backend refuses a capability older than the newest one
            // its device was opened with.
            self.core.lock().expect("core poisoned").ids_above(term << TERM_SHIFT);
            replication.reported.lock().expect("reported poisoned").clear();
            replication.lead_term.store(term, Ordering::Release);
            replication.leading.store(true, Ordering::Release);
        }
        if let Err(e) = self.record_founders().await {
            tracing::warn!(error = %e.message, "the founding members' records were not committed: each replica's configuration gives them");
        }
        // The links about to start register backends with the current members' keys.
        self.follow_membership(false);
        let hosts: Vec<String> = {
            let core = self.core.lock().expect("core poisoned");
            replication.links_run.store(true, Ordering::Release);
            core.hosts().values().for_each(|host| self.links.start(host));
            core.hosts().keys().cloned().collect()
        };
        let read_back_ms = started.elapsed().as_millis() as u64;
        self.await_link_reports(replication, &hosts).await;
        tracing::info!(read_back_ms, links_ms = started.elapsed().as_millis() as u64, "the links reported");
        {
            let core = self.core.lock().expect("core poisoned");
            let mut leases = self.leases.lock().expect("leases poisoned");
            let grace = Instant::now() + Duration::from_millis(self.config.lease_ms);
            leases.deadline.clear();
            for token in core.sessions().keys() {
                if !leases.live.contains_key(token) {
                    leases.deadline.insert(token.clone(), grace);
                }
            }
        }
        if !replication.leading() {
            // A commit of its links' reports timed out meanwhile: it reads its store back first.
            return false;
        }
        replication.serving.store(true, Ordering::Release);
        let _ = self
            .mutate(|core, now| {
                core.account_all(super::accounting::unix_now_ms());
                core.schedule(now);
                Ok(())
            })
            .await;
        self.changed.notify_waiters();
        true
    }

    /// Waits until the link to each of `hosts` has reported once (up, or its first dial
    /// failed), at most [`LINK_REPORTS`].
    async fn await_link_reports(&self, replication: &Replication, hosts: &[String]) {
        let deadline = Instant::now() + LINK_REPORTS;
        loop {
            let unreported = {
                let reported = replication.reported.lock().expect("reported poisoned");
                hosts.iter().filter(|h| !reported.contains(*h)).count()
            };
            if unreported == 0 {
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(unreported, "serving before every backend's link reported");
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What a link reported was recorded: a new leader waits for these before it serves.
    pub(super) fn link_reported(&self, host: &str) {
        if let Some(replication) = self.replication.as_ref() {
            replication.reported.lock().expect("reported poisoned").insert(host.to_string());
        }
    }

    /// No longer the leader: stops serving and the links (the leader has its own); its hosts
    /// count as down until its links report again, should it lead again.
    fn step_down(&self) {
        if let Some(replication) = self.replication.as_ref() {
            replication.stop_leading();
        }
        let mut core = self.core.lock().expect("core poisoned");
        if let Some(replication) = self.replication.as_ref() {
            replication.links_run.store(false, Ordering::Release);
        }
        let hosts: Vec<String> = core.hosts().keys().cloned().collect();
        for host in hosts {
            self.links.stop(&host);
            core.set_up(&host, false, 0);
        }
        drop(core);
        self.changed.notify_waiters();
    }

    /// This replica's view of the cluster; `None` for a single manager.
    pub(super) fn replica_status(&self) -> Option<ClusterStatus> {
        self.replication.as_ref().map(Replication::status)
    }

    /// `armctl cluster status`: this replica's view, or a refusal for a single manager.
    pub(super) fn cluster_status(&self) -> Result<ac_proto::arm::Response, ArmError> {
        match self.replication.as_ref() {
            Some(replication) => Ok(ac_proto::arm::Response::Cluster(replication.status())),
            None => Err(super::err(
                ac_proto::arm::ArmErrorKind::Invalid,
                "this resource manager is not replicated (no [replication] in its configuration)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries an earlier build logged (records as sequences of `u8`) read back, and an earlier
    /// build reads this one's: both encodings are the same bytes.
    #[test]
    fn changes_encode_as_the_plain_tuples_did() {
        let changes: Vec<Change> = vec![(Key::NextId, Some((0..=255).collect())), (Key::Ledger, None)];
        let plain = bincode::serde::encode_to_vec(&changes, bincode::config::standard()).unwrap();
        assert_eq!(encode(&changes).unwrap(), plain);
        assert_eq!(decode(&plain).unwrap(), changes);
    }
}
