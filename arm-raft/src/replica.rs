//! One replica of the manager: its Raft node (openraft), its store, and the endpoint that
//! serves the other replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_proto::tls;
use ac_proto::transport::{self, Tuning};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft, ServerState};
use quinn::Endpoint;

use crate::network::{self, Peers};
use crate::{Applied, ArmRaft, Command, Machine, ReplicationError, StateMachine};

/// The TLS files of a replica: the cluster's CA, the certificate it serves with, and the client
/// certificate it presents to the others (both signed by the CA).
#[derive(Debug, Clone)]
pub struct ReplicaTls {
    /// The cluster's CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate and key (PEM), naming the replica's address.
    pub server: (PathBuf, PathBuf),
    /// The client certificate and key (PEM) it presents to the other replicas.
    pub client: (PathBuf, PathBuf),
}

/// How to start a replica.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// Its id in the cluster (stable across restarts).
    pub id: u64,
    /// Where it serves the other replicas.
    pub listen: SocketAddr,
    /// Its store (a redb file).
    pub store: PathBuf,
    /// Its certificates.
    pub tls: ReplicaTls,
    /// The QUIC settings between replicas.
    pub tuning: Tuning,
    /// How long a follower waits without a leader's heartbeat before it stands for election, at
    /// least (the most is twice this); the leader's heartbeat comes half of it apart, and an
    /// append not answered within that is sent again.
    pub election_timeout: Duration,
    /// A snapshot is taken after this many entries applied since the last one; the log before
    /// it is then purged but for `logs_kept` entries (a follower further behind is sent the
    /// snapshot).
    pub snapshot_every: u64,
    /// Entries kept in the log behind the last snapshot.
    pub logs_kept: u64,
    /// The certificates revoked (the manager's `revoked-certs`): a replica presenting one may
    /// not speak Raft to this one.
    pub revoked: network::Revoked,
    /// Its endpoint's stateless-reset and connection-id keys, kept across restarts (the
    /// manager's `reset.key`). The leader's connection to a replica killed and started again
    /// is then reset by the new process at its first packet; without them it is held until its
    /// idle timeout (10 s), the restarted replica hears no heartbeat, stands for election, and
    /// deposes the leader once it is reached. `None`: keys of this process only.
    pub lasting: Option<transport::LastingKeys>,
}

impl ReplicaOptions {
    /// Options with the defaults: elections after 1-2 s without a leader, a snapshot every
    /// 10,000 entries, 1,000 entries kept behind it.
    pub fn new(id: u64, listen: SocketAddr, store: PathBuf, tls: ReplicaTls) -> Self {
        Self {
            id,
            listen,
            store,
            tls,
            tuning: Tuning::default(),
            election_timeout: Duration::from_secs(1),
            snapshot_every: 10_000,
            logs_kept: 1_000,
            revoked: network::Revoked::none(),
            lasting: None,
        }
    }
}

/// A decision committed by a majority and applied: its answer, and the (term, index) of its
/// log entry, which only grows from decision to decision (the fencing token of a grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// What the state machine answered.
    pub applied: Applied,
    /// The term of the leader that committed it.
    pub term: u64,
    /// Its index in the log.
    pub index: u64,
}

/// What a replica knows of the cluster (what `armctl cluster status` shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The replica.
    pub id: u64,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its current term.
    pub term: u64,
    /// The last index in its log.
    pub last_log: Option<u64>,
    /// The last index it applied.
    pub applied: Option<u64>,
    /// Every member and learner: id, Raft address, whether it votes.
    pub members: Vec<(u64, String, bool)>,
    /// The last index each replica is known to hold: only a leader knows it (empty elsewhere).
    pub matched: BTreeMap<u64, Option<u64>>,
}

/// Whether a majority acknowledged the leader within `lease`, from openraft's metrics: the
/// time since the last acknowledgment as it stood when they were published, `published_ago`.
/// openraft publishes its metrics on every turn of its loop (a heartbeat's tick at least); a
/// loop stalled (on a hung disk, say) publishes nothing, and its last figure would stay small
/// while the others elect a new leader. Counting the time since publication ends the lease.
fn acknowledged_within(millis_since_ack: Option<u64>, published_ago: Duration, lease: Duration) -> bool {
    millis_since_ack.is_some_and(|ms| Duration::from_millis(ms) + published_ago <= lease)
}

/// Records when openraft last published its metrics (when this task saw them change, a little
/// after), until the Raft node is gone.
async fn track_publications(
    mut metrics: tokio::sync::watch::Receiver<openraft::RaftMetrics<u64, BasicNode>>,
    at: Arc<Mutex<Instant>>,
) {
    while metrics.changed().await.is_ok() {
        *at.lock().expect("publication time poisoned") = Instant::now();
    }
}

/// A running replica.
pub struct Replica<M: Machine> {
    id: u64,
    raft: Raft<ArmRaft>,
    machine: StateMachine<M>,
    endpoint: Endpoint,
    server: tokio::task::JoinHandle<()>,
    /// Its log held no entry when it started.
    started_empty: bool,
    /// When openraft last published its metrics (see [`acknowledged_within`]).
    published: Arc<Mutex<Instant>>,
    tracker: tokio::task::JoinHandle<()>,
    /// The runtime its Raft node, its endpoint and their tasks run on.
    runtime: RaftRuntime,
}

/// A runtime of a replica's own, with one worker thread, for openraft's tasks (its core,
/// replication to each peer, the state machine) and the endpoint between replicas. On the
/// manager's runtime each step of a commit (log, send, acknowledgement, apply) queued behind
/// the programs' requests on a busy worker; on a thread of its own the OS runs it as soon as it
/// wakes, as a single manager's commit runs on a blocking thread.
struct RaftRuntime(Option<tokio::runtime::Runtime>);

impl RaftRuntime {
    fn new(id: u64) -> Result<Self, ReplicationError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("raft-{id}"))
            .enable_all()
            .build()
            .map_err(|e| ReplicationError::Setup(format!("the replica's runtime: {e}")))?;
        Ok(Self(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("the replica's runtime is kept until dropped").handle()
    }
}

impl Drop for RaftRuntime {
    fn drop(&mut self) {
        // Dropped from async code (a replica shut down or dropped by the manager): a runtime
        // may not wait for its threads there.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl<M: Machine> std::fmt::Debug for Replica<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.id).finish_non_exhaustive()
    }
}

impl<M: Machine> Replica<M> {
    /// Opens the store over `machine` and starts the replica (a follower until it hears of a leader or wins an
    /// election).
    pub async fn start(options: ReplicaOptions, machine: M) -> Result<Self, ReplicationError> {
        let runtime = RaftRuntime::new(options.id)?;
        let started = runtime.handle().spawn(Self::start_here(options, machine));
        let mut replica =
            started.await.map_err(|e| ReplicationError::Setup(format!("the replica did not start: {e}")))??;
        replica.runtime = runtime;
        Ok(replica)
    }

    /// Starts the replica on the current runtime: its tasks are spawned there.
    async fn start_here(options: ReplicaOptions, machine: M) -> Result<Self, ReplicationError> {
        let setup = |e: &dyn std::fmt::Display| ReplicationError::Setup(e.to_string());
        let (mut log, machine) = crate::open(&options.store, machine)?;
        let started_empty = {
            use openraft::storage::RaftLogStorage;
            log.get_log_state().await.map_err(|e| setup(&e))?.last_log_id.is_none()
        };
        let roots = tls::load_roots(&options.tls.ca).map_err(|e| setup(&e))?;
        let server = tls::load_identity(&options.tls.server.0, &options.tls.server.1).map_err(|e| setup(&e))?;
        let client = tls::load_identity(&options.tls.client.0, &options.tls.client.1).map_err(|e| setup(&e))?;
        let client_crypto =
            tls::client_crypto_with_identity(roots.clone(), network::ALPN, Some(client)).map_err(|e| setup(&e))?;
        let server_crypto = || tls::server_crypto_with_clients(server.clone(), network::ALPN, roots.clone());
        let endpoint = bind(options.listen, server_crypto, &options.tuning, options.lasting.as_ref()).await?;
        let peers = Peers::new(endpoint.clone(), Arc::new(client_crypto), options.tuning.clone());
        let config = raft_config(&options)?;
        let raft = Raft::new(options.id, config, peers, log, machine.clone()).await.map_err(|e| setup(&e))?;
        let server =
            tokio::spawn(network::serve(endpoint.clone(), raft.clone(), options.revoked.clone(), machine.departed()));
        let published = Arc::new(Mutex::new(Instant::now()));
        let tracker = tokio::spawn(track_publications(raft.metrics(), published.clone()));
        let runtime = RaftRuntime(None);
        Ok(Self { id: options.id, raft, machine, endpoint, server, started_empty, published, tracker, runtime })
    }

    /// Makes `members` (id → address) the cluster, once, on a fresh replica (the others learn it
    /// from the first leader). Asked again of an initialised cluster, it is refused.
    pub async fn initialize(&self, members: &BTreeMap<u64, SocketAddr>) -> Result<(), ReplicationError> {
        let nodes: BTreeMap<u64, BasicNode> =
            members.iter().map(|(id, addr)| (*id, BasicNode::new(addr.to_string()))).collect();
        self.raft.initialize(nodes).await.map_err(|e| ReplicationError::Raft(e.to_string()))
    }

    /// Proposes `command`: answered once a majority has it on disk and it is applied. A replica
    /// that is not the leader refuses it, naming the leader when it knows it.
    pub async fn propose(&self, command: Command) -> Result<Committed, ReplicationError> {
        match self.raft.client_write(command).await {
            Ok(written) => Ok(Committed {
                applied: written.data,
                term: written.log_id.leader_id.term,
                index: written.log_id.index,
            }),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(ReplicationError::NotLeader { leader: forward.leader_id.zip(forward.leader_node.map(|n| n.addr)) })
            }
            Err(e) => Err(ReplicationError::Raft(e.to_string())),
        }
    }

    /// Adds replica `id` at `addr` as a learner (it receives the log, votes for nothing) and
    /// waits until it has caught up: the first step of adding or replacing a member.
    pub async fn add_learner(&self, id: u64, addr: SocketAddr) -> Result<(), ReplicationError> {
        let node = BasicNode::new(addr.to_string());
        self.raft.add_learner(id, node, true).await.map(drop).map_err(|e| self.refused(e))
    }

    /// Adds replica `id` at `addr` as a learner and returns once that change is committed,
    /// without waiting for it to catch up: a caller bounded in time (an admin's request) asks
    /// [`Replica::status`] for its progress instead.
    pub async fn propose_learner(&self, id: u64, addr: SocketAddr) -> Result<(), ReplicationError> {
        let node = BasicNode::new(addr.to_string());
        self.raft.add_learner(id, node, false).await.map(drop).map_err(|e| self.refused(e))
    }

    /// Removes replica `id` from the cluster, voter or learner: a voter by making the others
    /// the voters (joint consensus, as [`Replica::change_membership`]), a learner by dropping
    /// it. Removing the last voter is refused.
    pub async fn remove_member(&self, id: u64) -> Result<(), ReplicationError> {
        let mut voters = self.voters();
        let change: ChangeMembers<u64, BasicNode> = if voters.remove(&id) {
            if voters.is_empty() {
                return Err(ReplicationError::Raft(format!("replica {id} is the last voter")));
            }
            ChangeMembers::ReplaceAllVoters(voters)
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.raft.change_membership(change, false).await.map(drop).map_err(|e| self.refused(e))
    }

    /// Makes `voters` the cluster's voting members (each a member or learner already); a
    /// replica left out stops being one once the change is committed.
    pub async fn change_membership(&self, voters: BTreeSet<u64>) -> Result<(), ReplicationError> {
        self.raft.change_membership(voters, false).await.map(drop).map_err(|e| self.refused(e))
    }

    /// A membership operation's failure, "not the leader" said as such.
    fn refused(&self, e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> ReplicationError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
                ReplicationError::NotLeader { leader: forward.leader_id.zip(forward.leader_node.map(|n| n.addr)) }
            }
            e => ReplicationError::Raft(e.to_string()),
        }
    }

    /// The voting members, by id.
    pub fn voters(&self) -> BTreeSet<u64> {
        self.raft.metrics().borrow().membership_config.membership().voter_ids().collect()
    }

    /// The index of the last snapshot this replica holds (taken or received), if any.
    pub fn snapshot_index(&self) -> Option<u64> {
        self.raft.metrics().borrow().snapshot.map(|id| id.index)
    }

    /// This replica's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The leader this replica knows of, if any.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Whether this replica is the leader now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Whether its log held no entry when it started (a new replica, or one whose log was
    /// removed).
    pub fn started_empty(&self) -> bool {
        self.started_empty
    }

    /// Whether this replica leads and a majority acknowledged it within `lease`: a leader cut
    /// off from the others longer than that must not act on its own (they may have elected
    /// another by then).
    pub fn leads_a_majority(&self, lease: Duration) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let published_ago = self.published.lock().expect("publication time poisoned").elapsed();
        metrics.state == ServerState::Leader
            && acknowledged_within(metrics.millis_since_quorum_ack, published_ago, lease)
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// The current term, the last log index and the last applied index.
    pub fn progress(&self) -> (u64, Option<u64>, Option<u64>) {
        let metrics = self.raft.metrics().borrow().clone();
        (metrics.current_term, metrics.last_log_index, metrics.last_applied.map(|id| id.index))
    }

    /// What this replica knows of the cluster.
    pub fn status(&self) -> Status {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let members = membership.nodes().map(|(id, node)| (*id, node.addr.clone(), voters.contains(id))).collect();
        let matched = metrics
            .replication
            .map(|replication| replication.into_iter().map(|(id, log)| (id, log.map(|l| l.index))).collect())
            .unwrap_or_default();
        Status {
            id: self.id,
            leader: metrics.current_leader,
            term: metrics.current_term,
            last_log: metrics.last_log_index,
            applied: metrics.last_applied.map(|id| id.index),
            members,
            matched,
        }
    }

    /// Waits until this replica leads or stops leading, whichever it does not now: `leading`
    /// is what it did when last asked. Returns at once if that changed meanwhile.
    pub async fn role_changed(&self, leading: bool) {
        let mut metrics = self.raft.metrics();
        while (metrics.borrow_and_update().state == ServerState::Leader) == leading {
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// As a new leader, waits until this replica has applied everything committed before its
    /// term (its term's first entry included): its state is then the cluster's, to serve from.
    /// Fails if it is not the leader (any more), or cannot reach a majority.
    pub async fn ready_to_lead(&self) -> Result<(), ReplicationError> {
        self.raft.ensure_linearizable().await.map(drop).map_err(|e| ReplicationError::Raft(e.to_string()))
    }

    /// Reads the replica's state machine (the manager's state as applied here).
    pub fn with<T>(&self, read: impl FnOnce(&M) -> T) -> T {
        self.machine.with(read)
    }

    /// Stops at once, as a killed process would: the runtime its tasks run on goes first, so
    /// nothing more is sent, no connection closed; the others are left with what a `kill -9`
    /// leaves them (tests of a replica's restart). Returns once its tasks are dropped and with
    /// them its store's file lock, as a process's exit releases it.
    pub async fn kill(mut self) {
        if let Some(runtime) = self.runtime.0.take() {
            let _ = tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(5))).await;
        }
        drop(self);
    }

    /// Stops the replica: its Raft node and its endpoint (the others see it gone).
    pub async fn shutdown(self) {
        self.tracker.abort();
        let _ = self.raft.shutdown().await;
        self.endpoint.close(0u32.into(), b"shutdown");
        let _ = self.server.await;
    }
}

/// The replica's endpoint on `listen`. Its address may still be held a moment by the socket of
/// the replica it replaces (a restart in the same process, or by a supervisor at once: quinn
/// releases a socket from a task of its own once the last handle is gone), so an address in
/// use is tried again for up to two seconds.
async fn bind(
    listen: SocketAddr,
    crypto: impl Fn() -> Result<quinn::crypto::rustls::QuicServerConfig, ac_proto::ProtoError>,
    tuning: &Tuning,
    lasting: Option<&transport::LastingKeys>,
) -> Result<Endpoint, ReplicationError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let crypto = crypto().map_err(|e| ReplicationError::Setup(e.to_string()))?;
        match transport::server_endpoint(listen, crypto, tuning, lasting) {
            Ok(endpoint) => return Ok(endpoint),
            Err(ac_proto::ProtoError::Io(e))
                if e.kind() == std::io::ErrorKind::AddrInUse && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(ReplicationError::Setup(format!("{listen}: {e}"))),
        }
    }
}

/// openraft's configuration for `options`.
fn raft_config(options: &ReplicaOptions) -> Result<Arc<openraft::Config>, ReplicationError> {
    let min = options.election_timeout.as_millis() as u64;
    let config = openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(options.snapshot_every),
        max_in_snapshot_log_to_keep: options.logs_kept,
        cluster_name: "arm".into(),
        // Also openraft's limit on an append's answer (`replication/mod.rs`): at a fifth of
        // the election timeout (60 ms at 300), appends to followers on a loaded host timed
        // out and were sent again, and a commit waited for the retry.
        heartbeat_interval: (min / 2).max(1),
        election_timeout_min: min,
        election_timeout_max: min * 2,
        // Under the frame limit of the replicas' protocol (1 MiB); an append over it is sent
        // again cut to the entries that fit (`PayloadTooLarge`, network.rs).
        snapshot_max_chunk_size: 512 << 10,
        max_payload_entries: 64,
        ..Default::default()
    };
    config.validate().map(Arc::new).map_err(|e| ReplicationError::Setup(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A figure published long ago no longer vouches for the leader, however small it was.
    #[test]
    fn a_lease_counts_the_time_since_the_metrics_were_published() {
        let lease = Duration::from_millis(1000);
        assert!(acknowledged_within(Some(100), Duration::from_millis(50), lease));
        assert!(!acknowledged_within(Some(100), Duration::from_millis(950), lease), "a stalled loop's last figure");
        assert!(!acknowledged_within(Some(1001), Duration::ZERO, lease));
        assert!(!acknowledged_within(None, Duration::ZERO, lease), "never acknowledged");
    }
}
