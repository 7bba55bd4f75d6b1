//! Three replicas on loopback, over real QUIC with mutual TLS: a decision is answered once a
//! majority has it; a follower refuses a proposal naming the leader; when the leader dies a
//! standby leads and commits, a request retried with its id across the failover gets its first
//! answer and changes nothing, the fencing token (term, index) grows; the dead replica,
//! restarted on its store, catches up to the same state. A follower down while the log moved
//! past its purge point catches up by a snapshot; a replica is replaced through a membership
//! change; a learner is added without waiting for it to catch up, and a learner and a voter are
//! removed (their certificates speak Raft no more); a replica down while a member joined in
//! another's place follows the newcomer when it comes back. A follower killed and started again
//! is reached at once and deposes nobody. And a client without the cluster's certificate cannot
//! speak Raft to a replica.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{link_as, Pool};
use arm_raft::{Command, Committed, Replica, ReplicaOptions, ReplicaTls, ReplicationError};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::VoteRequest;
use openraft::Vote;

/// A free UDP port on loopback (bound, then released).
fn free_addr() -> SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn options(dir: &Path, id: u64, listen: SocketAddr) -> ReplicaOptions {
    let tls = ReplicaTls {
        ca: dir.join("tls/ca.pem"),
        server: (dir.join("tls/cert.pem"), dir.join("tls/key.pem")),
        client: (dir.join(format!("tls/replica-{id}.pem")), dir.join(format!("tls/replica-{id}.key"))),
    };
    let mut options = ReplicaOptions::new(id, listen, dir.join(format!("replica-{id}.redb")), tls);
    options.election_timeout = Duration::from_millis(500);
    // As the manager keeps them (its `reset.key`): the same keys each time replica `id` starts.
    options.lasting = Some(ac_proto::transport::lasting_keys(&dir.join(format!("keys-{id}"))).unwrap());
    options
}

/// The cluster's CA in `dir/tls`, a server certificate for 127.0.0.1, an admin's certificate,
/// and each replica's client certificate (organisational unit `replica`, common name `replica-N`).
fn make_tls(dir: &Path) {
    let tls = dir.join("tls");
    ac_proto::tls::ensure_self_signed(&tls, &["127.0.0.1".to_string()], &["admin"]).unwrap();
    // Each replica its own: a replica speaks for the node its certificate names only.
    for id in 1..=5 {
        let name = format!("replica-{id}");
        let (cert, key) =
            ac_proto::tls::issue_client(&tls, &name, arm_raft::network::REPLICA_UNIT, 4_000_000_000).unwrap();
        std::fs::write(tls.join(format!("{name}.pem")), cert).unwrap();
        std::fs::write(tls.join(format!("{name}.key")), key).unwrap();
    }
}

fn command(id: &str, op: &str) -> Command {
    Command { id: id.into(), op: op.into(), term: None }
}

fn answer(committed: &Committed) -> (String, bool) {
    (String::from_utf8_lossy(&committed.applied.answer).into_owned(), committed.applied.duplicate)
}

/// Proposes `command` to whichever replica leads, following "not the leader" answers, until one
/// commits it or `limit` passes.
async fn propose_anywhere(replicas: &[&Replica<Pool>], command: Command, limit: Duration) -> Committed {
    let deadline = Instant::now() + limit;
    loop {
        for replica in replicas {
            match replica.propose(command.clone()).await {
                Ok(committed) => return committed,
                Err(ReplicationError::NotLeader { .. } | ReplicationError::Raft(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(Instant::now() < deadline, "nothing committed {:?} within {limit:?}", command.id);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to 10 s for `found` to find something; panics saying `what`.
async fn found_within<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(it) = found() {
            return it;
        }
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every replica has applied through `index`.
async fn applied_through(replicas: &[&Replica<Pool>], index: u64) {
    let all = || replicas.iter().all(|r| r.progress().2.is_some_and(|applied| applied >= index)).then_some(());
    found_within(&format!("every replica applied through {index}"), all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_leads_when_the_leader_dies_and_nothing_is_lost_or_done_twice() {
    let dir = tempfile::tempdir().unwrap();
    make_tls(dir.path());
    let addrs: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, free_addr())).collect();
    let mut replicas = Vec::new();
    for (id, addr) in &addrs {
        replicas.push(Some(Replica::start(options(dir.path(), *id, *addr), Pool::default()).await.unwrap()));
    }
    replicas[0].as_ref().unwrap().initialize(&addrs).await.unwrap();
    let all: Vec<&Replica<Pool>> = replicas.iter().flatten().collect();
    let first = propose_anywhere(&all, command("r1", "take h1/0 a"), Duration::from_secs(10)).await;
    let second = propose_anywhere(&all, command("r2", "take h2/0 b"), Duration::from_secs(10)).await;
    assert_eq!((answer(&first), answer(&second)), (("granted".into(), false), ("granted".into(), false)));
    assert!(second.index > first.index, "{first:?} {second:?}");

    // A follower refuses, naming the leader.
    let leader = all.iter().find(|r| r.is_leader()).expect("a leader").id();
    let follower = all.iter().find(|r| r.id() != leader).unwrap();
    match follower.propose(command("r9", "take h9/0 z")).await {
        Err(ReplicationError::NotLeader { leader: Some((id, addr)) }) => {
            assert_eq!((id, addr), (leader, addrs[&leader].to_string()));
        }
        other => panic!("a follower answered {other:?}"),
    }
    applied_through(&all, second.index).await;

    // The leader dies.
    let dead = replicas.iter().position(|r| r.as_ref().is_some_and(|r| r.id() == leader)).unwrap();
    replicas[dead].take().unwrap().shutdown().await;
    let killed = Instant::now();
    let standing: Vec<&Replica<Pool>> = replicas.iter().flatten().collect();
    let third = propose_anywhere(&standing, command("r3", "take h3/0 c"), Duration::from_secs(20)).await;
    let takeover = killed.elapsed();
    eprintln!("takeover: {:.3} s from the leader's death to the first commit", takeover.as_secs_f64());
    assert_eq!(answer(&third), ("granted".into(), false));
    assert!((third.term, third.index) > (second.term, second.index), "the fencing token grows: {second:?} {third:?}");
    assert!(third.term > second.term, "a new leader's term");

    // r1 sent again (its answer lost in the failover): its first answer, nothing done twice.
    let again = propose_anywhere(&standing, command("r1", "take h1/0 a"), Duration::from_secs(10)).await;
    assert_eq!(answer(&again), ("granted".into(), true));
    applied_through(&standing, again.index).await;
    let state = standing[0].with(|p| p.holders.clone());
    assert_eq!(state.len(), 3, "{state:?}");
    assert!(standing.iter().all(|r| r.with(|p| p.holders.clone()) == state), "the replicas agree");

    // The dead replica restarted on its store catches up.
    let back = Replica::start(options(dir.path(), leader, addrs[&leader]), Pool::default()).await.unwrap();
    applied_through(&[&back], again.index).await;
    assert_eq!(back.with(|p| p.holders.clone()), state);
    back.shutdown().await;
    for replica in replicas.into_iter().flatten() {
        replica.shutdown().await;
    }
}

/// A follower killed (nothing sent: the leader's connection to it is left open, as `kill -9`
/// leaves it) and started again at once on its store is reached by the leader and catches up
/// before it would stand for election, and nobody is deposed: the new process resets the
/// leader's connection to the old one at its first packet (the endpoint keeps its reset key,
/// `ReplicaOptions::lasting`). Without that key the leader sent into the dead connection until
/// its idle timeout (10 s), while the restarted follower, hearing nothing, stood for election
/// again and again, and its term deposed the leader once the leader reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_killed_and_started_again_is_reached_at_once_and_deposes_nobody() {
    let dir = tempfile::tempdir().unwrap();
    make_tls(dir.path());
    let addrs: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, free_addr())).collect();
    // Elections after 3-4 s without a heartbeat (a committed vote's lease, twice the timeout,
    // and the timeout's one to two times):
    // the margin for a restarted follower to be reached on a loaded machine.
    let options = |id: u64| {
        let mut options = options(dir.path(), id, addrs[&id]);
        options.election_timeout = Duration::from_secs(1);
        options
    };
    let mut replicas = Vec::new();
    for id in addrs.keys() {
        replicas.push(Replica::start(options(*id), Pool::default()).await.unwrap());
    }
    replicas[0].initialize(&addrs).await.unwrap();
    let all: Vec<&Replica<Pool>> = replicas.iter().collect();
    let first = propose_anywhere(&all, command("r1", "take h1/0 a"), Duration::from_secs(10)).await;
    applied_through(&all, first.index).await;
    let leader = leader_among(&all).await;
    let (leader, term) = (leader.id(), leader.term());
    let follower = all.iter().map(|r| r.id()).find(|id| *id != leader).unwrap();
    drop(all);

    let at = replicas.iter().position(|r| r.id() == follower).unwrap();
    replicas.remove(at).kill().await;
    let standing: Vec<&Replica<Pool>> = replicas.iter().collect();
    let second = propose_anywhere(&standing, command("r2", "take h2/0 b"), Duration::from_secs(10)).await;
    let back = Replica::start(options(follower), Pool::default()).await.unwrap();
    applied_through(&[&back], second.index).await;

    let leads = standing.iter().find(|r| r.id() == leader).unwrap();
    assert!(leads.is_leader(), "replica {leader} still leads");
    assert_eq!((leads.term(), back.term()), (term, term), "no election: the restarted follower stood for none");
    assert_eq!(back.with(|p| p.holders.clone()), leads.with(|p| p.holders.clone()));
    back.shutdown().await;
    for replica in replicas {
        replica.shutdown().await;
    }
}

/// A client that trusts the cluster's CA but presents no certificate of it is closed at once:
/// only replicas speak Raft.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_clusters_certificate_cannot_speak_raft() {
    let dir = tempfile::tempdir().unwrap();
    make_tls(dir.path());
    let addr = free_addr();
    let replica = Replica::start(options(dir.path(), 1, addr), Pool::default()).await.unwrap();
    let roots = ac_proto::tls::load_roots(&dir.path().join("tls/ca.pem")).unwrap();
    // No certificate; then an admin's, of the cluster's own CA.
    let admin =
        ac_proto::tls::load_identity(&dir.path().join("tls/admin.pem"), &dir.path().join("tls/admin.key")).unwrap();
    for identity in [None, Some(admin)] {
        let crypto =
            ac_proto::tls::client_crypto_with_identity(roots.clone(), arm_raft::network::ALPN, identity).unwrap();
        let tuning = ac_proto::transport::Tuning::default();
        let endpoint = ac_proto::transport::client_endpoint(addr, Some(std::sync::Arc::new(crypto)), &tuning).unwrap();
        let conn = endpoint.connect(addr, "127.0.0.1").unwrap().await.expect("the TLS handshake itself succeeds");
        let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("closed by the replica");
        match closed {
            quinn::ConnectionError::ApplicationClosed(close) => assert_eq!(&close.reason[..], b"replicas only"),
            other => panic!("closed for another reason: {other:?}"),
        }
    }
    replica.shutdown().await;
}

/// Starts replicas `ids` on `dir`, snapshotting every 20 entries and keeping none behind.
async fn start_compacting(dir: &Path, addrs: &BTreeMap<u64, SocketAddr>, ids: &[u64]) -> Vec<Replica<Pool>> {
    let mut replicas = Vec::new();
    for id in ids {
        let mut options = options(dir, *id, addrs[id]);
        (options.snapshot_every, options.logs_kept) = (20, 0);
        replicas.push(Replica::start(options, Pool::default()).await.unwrap());
    }
    replicas
}

/// The replica that leads now, among `replicas`.
async fn leader_among<'a>(replicas: &[&'a Replica<Pool>]) -> &'a Replica<Pool> {
    found_within("a leader", || replicas.iter().find(|r| r.is_leader()).copied()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_catches_up_by_snapshot_and_a_replica_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    make_tls(dir.path());
    let addrs: BTreeMap<u64, SocketAddr> = (1..=4).map(|id| (id, free_addr())).collect();
    let voters: BTreeMap<u64, SocketAddr> = addrs.iter().filter(|(id, _)| **id <= 3).map(|(i, a)| (*i, *a)).collect();
    let mut replicas = start_compacting(dir.path(), &addrs, &[1, 2, 3]).await;
    replicas[0].initialize(&voters).await.unwrap();
    let first = {
        let all: Vec<&Replica<Pool>> = replicas.iter().collect();
        let first = propose_anywhere(&all, command("r0", "take h0/0 j0"), Duration::from_secs(10)).await;
        applied_through(&all, first.index).await;
        first
    };
    let leader = leader_among(&replicas.iter().collect::<Vec<_>>()).await.id();

    // A follower goes down; the log moves on past two snapshots and is purged behind them.
    let lagging = replicas.remove(replicas.iter().position(|r| r.id() != leader).unwrap());
    let lagging_id = lagging.id();
    lagging.shutdown().await;
    let last = {
        let standing: Vec<&Replica<Pool>> = replicas.iter().collect();
        for i in 1..50 {
            let op = format!("take h{i}/0 j{i}");
            propose_anywhere(&standing, command(&format!("r{i}"), &op), Duration::from_secs(10)).await;
        }
        let last = propose_anywhere(&standing, command("r50", "take h50/0 j50"), Duration::from_secs(10)).await;
        applied_through(&standing, last.index).await;
        assert!(standing.iter().all(|r| r.snapshot_index().is_some_and(|s| s > first.index + 20)), "snapshots taken");
        last
    };
    // Back: the entries it misses are purged everywhere, so only a snapshot can bring it up.
    replicas.extend(start_compacting(dir.path(), &addrs, &[lagging_id]).await);
    applied_through(&[&replicas[2]], last.index).await;
    let state = replicas[0].with(|p| p.holders.clone());
    assert_eq!(state.len(), 51);
    assert_eq!(replicas[2].with(|p| p.holders.clone()), state, "caught up");

    // Replica 4 replaces the follower that stayed up: a learner first, then a voter in its place.
    replicas.extend(start_compacting(dir.path(), &addrs, &[4]).await);
    let replaced = replicas.iter().find(|r| r.id() != leader && r.id() != lagging_id && r.id() != 4).unwrap().id();
    let new_voters = BTreeSet::from([leader, lagging_id, 4]);
    {
        let all: Vec<&Replica<Pool>> = replicas.iter().collect();
        let at = leader_among(&all).await;
        at.add_learner(4, addrs[&4]).await.unwrap();
        at.change_membership(new_voters.clone()).await.unwrap();
    }
    replicas.remove(replicas.iter().position(|r| r.id() == replaced).unwrap()).shutdown().await;
    let all: Vec<&Replica<Pool>> = replicas.iter().collect();
    let after = propose_anywhere(&all, command("r51", "take h51/0 j51"), Duration::from_secs(10)).await;
    assert_eq!(answer(&after), ("granted".into(), false));
    applied_through(&all, after.index).await;
    let state = all[0].with(|p| p.holders.clone());
    assert_eq!(state.len(), 52);
    for replica in &all {
        assert_eq!(replica.with(|p| p.holders.clone()), state, "replica {} agrees", replica.id());
        assert_eq!(replica.voters(), new_voters, "replica {}", replica.id());
    }
    drop(all);
    for replica in replicas {
        replica.shutdown().await;
    }
}

/// Replicas 1 to 4 started in `dir`, the first three made the cluster's voters (4 is not a
/// member yet).
async fn three_voters_and_a_fourth(dir: &Path) -> (BTreeMap<u64, SocketAddr>, Vec<Replica<Pool>>) {
    make_tls(dir);
    let addrs: BTreeMap<u64, SocketAddr> = (1..=4).map(|id| (id, free_addr())).collect();
    let voters: BTreeMap<u64, SocketAddr> = addrs.iter().filter(|(id, _)| **id <= 3).map(|(i, a)| (*i, *a)).collect();
    let mut replicas = Vec::new();
    for id in 1..=4 {
        replicas.push(Replica::start(options(dir, id, addrs[&id]), Pool::default()).await.unwrap());
    }
    replicas[0].initialize(&voters).await.unwrap();
    (addrs, replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_added_without_waiting_and_members_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, replicas) = three_voters_and_a_fourth(dir.path()).await;
    let all: Vec<&Replica<Pool>> = replicas.iter().collect();
    let first = propose_anywhere(&all[..3], command("r0", "take h0/0 j0"), Duration::from_secs(10)).await;
    let leader = leader_among(&all[..3]).await;

    // Answered once the change is committed: 4 is a learner, and catches up on its own.
    leader.propose_learner(4, addrs[&4]).await.unwrap();
    let learner = leader.status().members.into_iter().find(|(id, _, _)| *id == 4);
    assert_eq!(learner, Some((4, addrs[&4].to_string(), false)), "a learner, not a voter");
    applied_through(&all, first.index).await;
    assert_eq!(all[3].with(|p| p.holders.clone()), all[0].with(|p| p.holders.clone()), "the learner caught up");

    // A learner is dropped; a voter leaves the voters and the membership.
    leader.remove_member(4).await.unwrap();
    let follower = all[..3].iter().find(|r| r.id() != leader.id()).unwrap().id();
    leader.remove_member(follower).await.unwrap();
    let members: BTreeSet<u64> = leader.status().members.iter().map(|(id, _, _)| *id).collect();
    let left: BTreeSet<u64> = (1..=3).filter(|id| *id != follower).collect();
    assert_eq!(members, left, "neither the learner nor the removed voter is a member");
    assert_eq!(leader.voters(), left);
    // The removed replicas' certificates speak Raft no more, though nobody revoked them.
    for removed in [4, follower] {
        let name = format!("replica-{removed}");
        let mut link = link_as(&dir.path().join("tls"), &name, leader.id(), addrs[&leader.id()]).await;
        let ask = VoteRequest::new(Vote::new(1, removed), None);
        let refused = link.vote(ask, RPCOption::new(Duration::from_secs(5))).await.expect_err("a removed replica");
        assert!(refused.to_string().contains("not a member of the cluster"), "{refused}");
    }
    // The two left commit alone.
    let standing: Vec<&Replica<Pool>> = all.iter().filter(|r| left.contains(&r.id())).copied().collect();
    let after = propose_anywhere(&standing, command("r1", "take h1/0 j1"), Duration::from_secs(10)).await;
    assert_eq!(answer(&after), ("granted".into(), false));
    drop((all, standing));
    for replica in replicas {
        replica.shutdown().await;
    }
}

/// A replica down while a member joined in another's place comes back knowing only the old
/// membership: it must take the newcomer's vote request and appends (the newcomer is not among
/// the members it knows, but it never saw it leave), or, with the rest down, no leader could be
/// elected and it would never catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_down_while_a_member_joined_follows_the_newcomer() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, mut replicas) = three_voters_and_a_fourth(dir.path()).await;
    let first = {
        let all: Vec<&Replica<Pool>> = replicas[..3].iter().collect();
        let first = propose_anywhere(&all, command("r0", "take h0/0 j0"), Duration::from_secs(10)).await;
        applied_through(&all, first.index).await;
        first
    };
    let take = |replicas: &mut Vec<Replica<Pool>>, id: u64| {
        replicas.remove(replicas.iter().position(|r| r.id() == id).unwrap())
    };
    let down = {
        let voters: Vec<&Replica<Pool>> = replicas[..3].iter().collect();
        let leader = leader_among(&voters).await.id();
        (1..=3).find(|id| *id != leader).unwrap()
    };

    // While `down` is down, 4 replaces the leader (whichever leads now): the voters become
    // `other`, `down` and 4.
    take(&mut replicas, down).shutdown().await;
    let (old_leader, other) = {
        let voters: Vec<&Replica<Pool>> = replicas.iter().filter(|r| r.id() != 4).collect();
        let leader = leader_among(&voters).await;
        let other = voters.iter().find(|r| r.id() != leader.id()).unwrap().id();
        leader.add_learner(4, addrs[&4]).await.unwrap();
        leader.change_membership(BTreeSet::from([other, down, 4])).await.unwrap();
        (leader.id(), other)
    };
    take(&mut replicas, old_leader).shutdown().await;
    let moved_on = {
        let standing: Vec<&Replica<Pool>> = replicas.iter().collect();
        propose_anywhere(&standing, command("r1", "take h1/0 j1"), Duration::from_secs(10)).await
    };

    // `other` goes too: only 4 can lead now, with `down`'s vote, and `down` knows the old
    // voters only.
    take(&mut replicas, other).shutdown().await;
    replicas.push(Replica::start(options(dir.path(), down, addrs[&down]), Pool::default()).await.unwrap());
    let all: Vec<&Replica<Pool>> = replicas.iter().collect();
    let after = propose_anywhere(&all, command("r2", "take h2/0 j2"), Duration::from_secs(10)).await;
    assert_eq!(answer(&after), ("granted".into(), false));
    assert!(after.index > moved_on.index && moved_on.index > first.index);
    assert_eq!(leader_among(&all).await.id(), 4, "the newcomer leads");
    applied_through(&all, after.index).await;
    let state = all[0].with(|p| p.holders.clone());
    assert_eq!(state.len(), 3);
    assert_eq!(all[1].with(|p| p.holders.clone()), state, "the replica that was down caught up");
    assert_eq!(all[1].voters(), BTreeSet::from([other, down, 4]), "and learned the membership");
    drop(all);
    for replica in replicas {
        replica.shutdown().await;
    }
}
