//! `armctl cluster status`: a replicated manager's members, leader, term and each member's lag,
//! as the replica asked knows them (the leader knows every member's progress).

use ac_proto::arm::{ClusterStatus, Request};
use clap::Subcommand;

/// `armctl cluster ...`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Members (Raft and client addresses, voter or learner), the leader, the term, and how far
    /// each member's log is behind the leader's (`LAG`; only the leader knows it: ask it, with
    /// `--arm` naming it alone, for every row).
    Status,
}

impl ClusterCommand {
    /// The manager request.
    pub fn request(&self) -> Request {
        match self {
            ClusterCommand::Status => Request::ClusterStatus,
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
