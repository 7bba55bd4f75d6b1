//! `armctl cluster ...`: a replicated manager's members, leader, term and each member's lag,
//! as the replica asked knows them (the leader knows every member's progress), and changes of
//! its members (`add`, `remove`, `replace`), which the leader answers at once: `add` and
//! `replace` ask again until the new replica has caught up (and, for `replace`, votes).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ac_frontend::arm::ArmClient;
use ac_proto::arm::{ClusterStatus, NewReplica, Request, Response, CAUGHT_UP_LAG};
use clap::Subcommand;

/// `armctl cluster ...`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Members (Raft and client addresses, voter or learner), the leader, the term, and how far
    /// each member's log is behind the leader's (`LAG`; only the leader knows it: ask it, with
    /// `--arm` naming it alone, for every row).
    Status,
    /// Add a replica (started with `join = true` in its `[replication]`) as a learner, and wait
    /// until it has caught up with the leader's log. It votes only once made a voter
    /// (`replace`).
    Add {
        /// Its id, unused in the cluster so far.
        #[arg(long)]
        id: u64,
        #[command(flatten)]
        at: Addresses,
        /// How long to wait for it to catch up, seconds.
        #[arg(long, default_value_t = 300)]
        wait: u64,
    },
    /// Remove a learner (one an `add` left behind): it stops receiving the log, and backends
    /// stop trusting its key. A voter is replaced (`replace`), not removed.
    Remove {
        /// Its id.
        #[arg(long)]
        id: u64,
    },
    /// Replace voter `--old` (typically dead) by a new replica: added as a learner, and once it
    /// has caught up, made a voter in `--old`'s place in one membership change. Backends are
    /// registered with the new members' keys.
    Replace {
        /// The voter replaced.
        #[arg(long)]
        old: u64,
        /// The new replica's id.
        #[arg(long)]
        new: u64,
        #[command(flatten)]
        at: Addresses,
        /// How long to wait for it to catch up, seconds.
        #[arg(long, default_value_t = 300)]
        wait: u64,
    },
}

/// Where a new replica serves, and its key: its `members` entry.
#[derive(Debug, clap::Args)]
pub struct Addresses {
    /// Where it serves the other replicas (its `raft`).
    #[arg(long)]
    raft: SocketAddr,
    /// Where it serves programs and admins (its `listen`).
    #[arg(long)]
    api: SocketAddr,
    /// Its public signing key, 64 hex digits (`arm-server --signing-key` on it prints it).
    /// Not `--key`: that is the admin's own client key.
    #[arg(long = "signing-key")]
    signing_key: String,
}

impl Addresses {
    fn replica(&self, id: u64) -> NewReplica {
        NewReplica { id, raft: self.raft, api: self.api, key: self.signing_key.clone() }
    }
}

impl ClusterCommand {
    /// The manager request.
    pub fn request(&self) -> Request {
        match self {
            ClusterCommand::Status => Request::ClusterStatus,
            ClusterCommand::Add { id, at, .. } => Request::ClusterAdd { replica: at.replica(*id) },
            ClusterCommand::Remove { id } => Request::ClusterRemove { id: *id },
            ClusterCommand::Replace { old, new, at, .. } => {
                Request::ClusterReplace { old: *old, new: at.replica(*new) }
            }
        }
    }

    /// Sends `request` until the change is done: the leader answers each at once with the
    /// cluster's status, and nothing is done twice.
    pub async fn ask(&self, client: &ArmClient, request: Request) -> Result<Response, ac_frontend::Error> {
        let wait = match self {
            ClusterCommand::Add { wait, .. } | ClusterCommand::Replace { wait, .. } => Duration::from_secs(*wait),
            _ => Duration::ZERO,
        };
        let deadline = Instant::now() + wait;
        loop {
            let response = client.request(request.clone()).await?;
            let Response::Cluster(status) = &response else { return Ok(response) };
            if self.done(status) {
                return Ok(response);
            }
            if Instant::now() >= deadline {
                return Err(ac_frontend::Error::Timeout(format!(
                    "the new replica did not catch up with the leader within {wait:?} (it stays a learner): check \
                     that it runs with `join = true` and that the replicas reach its Raft address, then run this \
                     again; `armctl cluster status` shows its lag"
                )));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Whether `status` (the leader's) shows this command's change made.
    fn done(&self, status: &ClusterStatus) -> bool {
        let member = |id: u64| status.members.iter().find(|m| m.id == id);
        match self {
            ClusterCommand::Status | ClusterCommand::Remove { .. } => true,
            ClusterCommand::Add { id, .. } => member(*id).is_some_and(|m| {
                let lag = m.matched.zip(status.last_log).map(|(matched, last)| last.saturating_sub(matched));
                m.voter || lag.is_some_and(|lag| lag <= CAUGHT_UP_LAG)
            }),
            ClusterCommand::Replace { old, new, .. } => member(*new).is_some_and(|m| m.voter) && member(*old).is_none(),
        }
    }
}

/// The human table.
pub fn print(status: &ClusterStatus) {
    let index = |i: Option<u64>| i.map_or("-".to_string(), |i| i.to_string());
    println!(
        "replica {} answered: leader {}, term {}, last log {}, applied {}",
        status.replica,
        status.leader.map_or("none".to_string(), |l| l.to_string()),
        status.term,
        index(status.last_log),
        index(status.applied)
    );
    println!("{:>4} {:<8} {:<22} {:<22} {:>10} {:>6}", "ID", "ROLE", "RAFT", "API", "MATCHED", "LAG");
    for member in &status.members {
        let role = match (status.leader == Some(member.id), member.voter) {
            (true, _) => "leader",
            (false, true) => "follower",
            (false, false) => "learner",
        };
        let lag = match (member.matched, status.last_log) {
            (Some(matched), Some(last)) if status.leader == Some(status.replica) => {
                last.saturating_sub(matched).to_string()
            }
            _ => "-".to_string(),
        };
        println!(
            "{:>4} {:<8} {:<22} {:<22} {:>10} {:>6}",
            member.id,
            role,
            member.raft,
            member.api.map_or("-".to_string(), |a| a.to_string()),
            index(member.matched),
            lag
        );
    }
}
