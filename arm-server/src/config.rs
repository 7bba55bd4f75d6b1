//! The resource manager's configuration: a TOML file, overridden by flags and environment.

use std::net::SocketAddr;
use std::path::PathBuf;

use ac_proto::transport::Tuning;
use serde::{Deserialize, Serialize};

use crate::ArmServerError;

/// Everything `arm-server` needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArmConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Certificates, keys and the database.
    pub state_dir: PathBuf,
    /// Extra names (DNS names or addresses) for the certificate it makes, besides loopback,
    /// the host name and the listening address when it is a specific one.
    pub names: Vec<String>,
    /// A program silent this long loses its dynamic accelerators (and an ad-hoc job ends),
    /// milliseconds. Also the grace given to programs to reconnect after a restart.
    pub lease_ms: u64,
    /// A backend silent this long is marked down, milliseconds.
    pub backend_timeout_ms: u64,
    /// Static allocations outlive their walltime by this much, seconds.
    pub walltime_grace_s: u64,
    /// Validity of capabilities for jobs without a walltime, seconds.
    pub capability_ttl_s: u64,
    /// Let programs without a batch job create ad-hoc jobs. Unset: allowed without `[slurm]`
    /// (the embedded default) and refused with it, where what ad-hoc jobs hold is counted
    /// against Slurm's pool when allowed (see [`ArmConfig::ad_hoc_allowed`]).
    pub allow_ad_hoc: Option<bool>,
    /// Ended jobs are kept this long, then purged from the store, seconds (default 7 days).
    pub job_retention_s: u64,
    /// Accounting records are kept this long after they end, then purged from the store,
    /// seconds (default 366 days; 0: kept forever).
    pub accounting_retention_s: u64,
    /// A preemptible borrower whose accelerators their owner takes back keeps them this long
    /// before their capabilities are revoked, seconds.
    pub preemption_grace_s: u64,
    /// Users' groups (accounts), for the fairness limits per group (`[accounts]`, `user =
    /// "group"`). A job submitted with a group of its own uses that; a user not listed is a
    /// group of its own.
    pub accounts: std::collections::BTreeMap<String, String>,
    /// QUIC transport.
    pub transport: Tuning,
    /// The scheduler: backfilling, priorities, the dynamic fairness policy (`[scheduler]`,
    /// the same document `arm-sim` reads; see SCHEDULING.md).
    pub scheduler: arm_sched::Config,
    /// Working with a Slurm controller (`[slurm]`; docs/slurm.md).
    pub slurm: crate::slurm::SlurmConfig,
    /// Serve Prometheus metrics over HTTP at `/metrics` on this address (`arm_*`; see
    /// docs/admin.md, "Monitoring"). Unset: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Run as one replica of a replicated manager (`[replication]`; docs/admin.md, "Three
    /// managers"). Unset: a single manager, as before.
    pub replication: Option<ReplicationConfig>,
    /// Answer only this ARM protocol version, as a manager of that version would (tests of
    /// rolling upgrades); unset: every version this build speaks.
    #[doc(hidden)]
    #[serde(skip)]
    pub only_protocol: Option<u16>,
}

impl Default for ArmConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7000".parse().expect("addr"),
            state_dir: PathBuf::from(".state/arm-server"),
            names: Vec::new(),
            lease_ms: 60_000,
            backend_timeout_ms: 3_000,
            walltime_grace_s: 60,
            capability_ttl_s: 24 * 3600,
            allow_ad_hoc: None,
            job_retention_s: 7 * 24 * 3600,
            accounting_retention_s: 366 * 24 * 3600,
            preemption_grace_s: 10,
            accounts: std::collections::BTreeMap::new(),
            transport: Tuning::default(),
            scheduler: arm_sched::Config::default(),
            slurm: crate::slurm::SlurmConfig::default(),
            metrics_listen: None,
            replication: None,
            only_protocol: None,
        }
    }
}

/// One replica of a replicated manager: who it is, where it and the others are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationConfig {
    /// This replica's id: one of `members`, stable across restarts.
    pub id: u64,
    /// The voting members: three (or five) replicas, the same list on each. A joining replica
    /// lists the current members and itself.
    pub members: Vec<Member>,
    /// This replica joins a cluster that exists (it replaces or adds to its members, through
    /// `armctl cluster add` or `replace`): it never makes a cluster of its own, and waits
    /// until the leader adds it. Unset: the lowest id of `members` makes the members the
    /// cluster on its first start (docs/admin.md, "Replacing a replica").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
    /// A follower without a leader's heartbeat this long (at least; at most twice this) stands
    /// for election, milliseconds.
    #[serde(default = "default_election_timeout_ms")]
    pub election_timeout_ms: u64,
}

/// 300 ms: after a leader's last heartbeat, a follower stands for election after openraft's
/// leader lease (twice this) and its own random one to two times this more, 0.9-1.2 s; a
/// leader's heartbeat goes every half of it (150 ms; an append unanswered that long is sent
/// again), and it stops serving when no majority acknowledged it for twice this (0.6 s).
/// etcd's defaults (100 ms heartbeats, elections after 1-2 s) are of the same order; 500 ms
/// put the election alone at 1.5-2 s, and a takeover under 1,000 programs' load over 3 s
/// (BENCHMARKS.md).
pub const DEFAULT_ELECTION_TIMEOUT_MS: u64 = 300;

fn default_election_timeout_ms() -> u64 {
    DEFAULT_ELECTION_TIMEOUT_MS
}

/// A replica's addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Its id.
    pub id: u64,
    /// Where it serves the other replicas (Raft over QUIC, mutual TLS).
    pub raft: SocketAddr,
    /// Where it serves programs and admins (its `listen`): where followers send clients.
    pub api: SocketAddr,
    /// Its capability signing key's public half, 64 hex digits (`arm-server --signing-key`
    /// prints it): each replica signs with its own, and backends trust the set.
    pub key: String,
}

impl ReplicationConfig {
    /// This replica's entry in `members`.
    pub fn me(&self) -> Result<&Member, ArmServerError> {
        self.members
            .iter()
            .find(|m| m.id == self.id)
            .ok_or_else(|| ArmServerError::Config(format!("[replication] id = {} is not one of its members", self.id)))
    }

    /// The configuration section that makes a manager this replica (`[replication]`).
    pub fn to_toml(&self) -> Result<String, ArmServerError> {
        #[derive(Serialize)]
        struct Section<'a> {
            replication: &'a ReplicationConfig,
        }
        toml::to_string(&Section { replication: self }).map_err(|e| ArmServerError::Config(e.to_string()))
    }

    /// Every member's public signing key, in the members' order: what this replica registers
    /// backends with. `mine`, this replica's own key, must be its entry's.
    pub fn keys(&self, mine: [u8; 32]) -> Result<Vec<[u8; 32]>, ArmServerError> {
        let keys = self
            .members
            .iter()
            .map(|m| {
                crate::keys::parse_public_key(&m.key).ok_or_else(|| {
                    ArmServerError::Config(format!(
                        "[replication] member {}: key must be 64 hex digits (`arm-server --signing-key` on it prints \
                         its key)",
                        m.id
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.me()?.key.trim() != crate::keys::hex(&mine) {
            return Err(ArmServerError::Config(format!(
                "[replication] member {}'s key is not this replica's signing key ({}): list the key `arm-server \
                 --signing-key` prints here",
                self.id,
                crate::keys::hex(&mine)
            )));
        }
        Ok(keys)
    }
}

impl ArmConfig {
    /// Whether programs without a batch job may create ad-hoc jobs: `allow_ad_hoc`, by default
    /// only without Slurm, whose pool ad-hoc jobs would otherwise take from unseen.
    pub fn ad_hoc_allowed(&self) -> bool {
        self.allow_ad_hoc.unwrap_or(!self.slurm.enabled)
    }

    /// The ARM protocol versions the manager answers.
    pub fn protocols(&self) -> std::ops::RangeInclusive<u16> {
        use ac_proto::arm::{MIN_VERSION, VERSION};
        match self.only_protocol {
            Some(version) => version..=version,
            None => MIN_VERSION..=VERSION,
        }
    }

    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Self, ArmServerError> {
        toml::from_str(text).map_err(|e| ArmServerError::Config(e.to_string()))
    }
}
