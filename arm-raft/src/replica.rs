//! One replica of the manager: its Raft node (openraft), its store, and the endpoint that
//! serves the other replicas.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ac_proto::tls;
use ac_proto::transport::{self, Tuning};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, ServerState};
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
    /// least (the most is twice this); the leader's heartbeat comes a fifth of it apart.
    pub election_timeout: Duration,
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

/// A running replica.
pub struct Replica<M: Machine> {
    id: u64,
    raft: Raft<ArmRaft>,
    machine: StateMachine<M>,
    endpoint: Endpoint,
}

impl<M: Machine> std::fmt::Debug for Replica<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.id).finish_non_exhaustive()
    }
}

impl<M: Machine> Replica<M> {
    /// Opens the store and starts the replica (a follower until it hears of a leader or wins an
    /// election).
    pub async fn start(options: ReplicaOptions) -> Result<Self, ReplicationError> {
        let setup = |e: &dyn std::fmt::Display| ReplicationError::Setup(e.to_string());
        let (log, machine) = crate::open::<M>(&options.store)?;
        let roots = tls::load_roots(&options.tls.ca).map_err(|e| setup(&e))?;
        let server = tls::load_identity(&options.tls.server.0, &options.tls.server.1).map_err(|e| setup(&e))?;
        let client = tls::load_identity(&options.tls.client.0, &options.tls.client.1).map_err(|e| setup(&e))?;
        let server_crypto =
            tls::server_crypto_with_clients(server, network::ALPN, roots.clone()).map_err(|e| setup(&e))?;
        let client_crypto =
            tls::client_crypto_with_identity(roots, network::ALPN, Some(client)).map_err(|e| setup(&e))?;
        let endpoint =
            transport::server_endpoint(options.listen, server_crypto, &options.tuning, None).map_err(|e| setup(&e))?;
        let peers = Peers::new(endpoint.clone(), Arc::new(client_crypto), options.tuning.clone());
        let config = raft_config(options.election_timeout)?;
        let raft = Raft::new(options.id, config, peers, log, machine.clone()).await.map_err(|e| setup(&e))?;
        tokio::spawn(network::serve(endpoint.clone(), raft.clone()));
        Ok(Self { id: options.id, raft, machine, endpoint })
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

    /// The current term, the last log index and the last applied index.
    pub fn progress(&self) -> (u64, Option<u64>, Option<u64>) {
        let metrics = self.raft.metrics().borrow().clone();
        (metrics.current_term, metrics.last_log_index, metrics.last_applied.map(|id| id.index))
    }

    /// Reads the replica's state machine (the manager's state as applied here).
    pub fn with<T>(&self, read: impl FnOnce(&M) -> T) -> T {
        self.machine.with(read)
    }

    /// Stops the replica: its Raft node and its endpoint (the others see it gone).
    pub async fn shutdown(self) {
        let _ = self.raft.shutdown().await;
        self.endpoint.close(0u32.into(), b"shutdown");
    }
}

/// openraft's configuration for `election_timeout`.
fn raft_config(election_timeout: Duration) -> Result<Arc<openraft::Config>, ReplicationError> {
    let min = election_timeout.as_millis() as u64;
    let config = openraft::Config {
        cluster_name: "arm".into(),
        heartbeat_interval: (min / 5).max(1),
        election_timeout_min: min,
        election_timeout_max: min * 2,
        // Under the frame limit of the replicas' protocol (1 MiB).
        snapshot_max_chunk_size: 512 << 10,
        ..Default::default()
    };
    config.validate().map(Arc::new).map_err(|e| ReplicationError::Setup(e.to_string()))
}
