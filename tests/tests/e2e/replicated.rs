//! Three managers as one (`[replication]`): three `arm-server` processes on loopback addresses
//! of their own, sharing a CA, each with a signing key of its own. The leader is `kill -9`ed
//! with a program holding accelerators: a standby leads, the program's next `AC_Get` is granted
//! by it, nothing acknowledged is lost, no accelerator has two holders, and the killed replica,
//! restarted, catches up. Then all three are killed and restarted: everything acknowledged is
//! still there. A leader stopped (`SIGSTOP`) past the election timeout is replaced; running
//! again, it steps down and refuses to decide, naming the new leader, and a capability it signs
//! for the new leader's grant is refused by the backend (fencing). A leader cut off from the
//! others (nftables) acknowledges nothing; healed, it follows, and every replica's store holds
//! the same records. A fourth replica joins (`join = true`) and replaces a follower through
//! `armctl cluster replace`; the leaders are killed until the new one leads, whose grants the
//! backend accepts: it was registered with the new members' keys.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::Session;
use ac_proto::arm::{ClusterStatus, JobAuth, Request, Response};
use ac_tests::{computes, eventually, job_of, quick_tuning, register_hosts, submit_job, ArmProcess, TestBackend};

mod membership;

/// Replica `id`'s loopback IP in network `net` (each test its own, as they run at once):
/// `127.0.<net>.<id>`, clients on port 7000, Raft on 7100.
fn ip(net: u8, id: u64) -> String {
    format!("127.0.{net}.{id}")
}

/// The `[replication]` section of replica `id`, the replicas' public keys in `keys`: 1 to 3
/// found the cluster; a later one joins it, listing them and itself.
fn config(net: u8, id: u64, keys: &[String]) -> String {
    let join = id > 3;
    let members = (1..=3)
        .chain(join.then_some(id))
        .map(|m| arm_server::config::Member {
            id: m,
            raft: format!("{}:7100", ip(net, m)).parse().expect("address"),
            api: format!("{}:7000", ip(net, m)).parse().expect("address"),
            key: keys[m as usize - 1].clone(),
        })
        .collect();
    let replication = arm_server::config::ReplicationConfig { id, members, join, election_timeout_ms: 500 };
    let metrics = format!("metrics_listen = \"{}:7200\"\n", ip(net, id));
    metrics + &replication.to_toml().expect("a configuration")
}

/// Three replicas' state directories, prepared as docs/admin.md says: the first replica's CA
/// and admin certificate copied to the others before their first start, each with a signing
/// key of its own.
struct Replicas {
    net: u8,
    dirs: Vec<PathBuf>,
    /// Each replica's public signing key.
    keys: Vec<String>,
    running: Vec<Option<ArmProcess>>,
}

impl Replicas {
    fn start(root: &Path, net: u8) -> Self {
        let dirs: Vec<PathBuf> = (1..=3).map(|id| root.join(format!("r{id}"))).collect();
        let keys = arm_server::keys::prepare_replicas(&dirs).expect("the replicas' directories");
        let mut replicas = Self { net, dirs, keys, running: vec![None, None, None] };
        for id in 1..=3 {
            replicas.restart(id);
        }
        replicas
    }

    /// Replica `id`'s metrics, as Prometheus scrapes them.
    async fn metrics(&self, id: u64) -> String {
        let addr: SocketAddr = format!("{}:7200", ip(self.net, id)).parse().expect("address");
        let (status, body) = ac_tests::prometheus::http_get(addr, "/metrics").await.expect("metrics answer");
        assert_eq!(status, 200, "{body}");
        body
    }

    fn api(&self, id: u64) -> SocketAddr {
        format!("{}:7000", ip(self.net, id)).parse().expect("address")
    }

    fn restart(&mut self, id: u64) {
        let dir = &self.dirs[id as usize - 1];
        let (listen, config) = (self.api(id).to_string(), config(self.net, id, &self.keys));
        // These tests are of what the replicas keep, not of leases: a program idle while all
        // three restart must not lose its session to a 3 s lease run out before its next call
        // (seen: `unknown or expired session` at the `AC_Free` after the restart, 2 runs of 4).
        self.running[id as usize - 1] = Some(ArmProcess::start_with_lease(dir, &listen, &config, 60_000));
    }

    fn kill(&mut self, id: u64) {
        if let Some(process) = self.running[id as usize - 1].take() {
            process.kill_9();
        }
    }

    /// Stops replica `id` as a service manager does (SIGTERM), its store written out.
    fn stop(&mut self, id: u64) {
        if let Some(process) = self.running[id as usize - 1].take() {
            tokio::task::block_in_place(|| process.terminate());
        }
    }

    /// Client options naming every replica.
    fn options(&self) -> ArmOptions {
        let mut options = ArmOptions::new(self.api(1), self.dirs[0].join("ca.pem"));
        options.alternates = vec![self.api(2), self.api(3)];
        options.tuning = quick_tuning();
        options
    }

    async fn admin(&self) -> ArmClient {
        let mut options = self.options();
        options.identity = Some((self.dirs[0].join("admin.pem"), self.dirs[0].join("admin.key")));
        ArmClient::connect(options).await.expect("admin connects")
    }

    /// Replica `id`'s own view of the cluster.
    async fn status_of(&self, id: u64) -> Option<ClusterStatus> {
        let mut options = ArmOptions::new(self.api(id), self.dirs[0].join("ca.pem"));
        options.identity = Some((self.dirs[0].join("admin.pem"), self.dirs[0].join("admin.key")));
        options.tuning = quick_tuning();
        let client = ArmClient::connect(options).await.ok()?;
        match client.request(Request::ClusterStatus).await.ok()? {
            Response::Cluster(status) => Some(status),
            _ => None,
        }
    }

    /// The leader a majority of the running replicas agree on.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut seen = Vec::new();
            for id in 1..=self.running.len() as u64 {
                if self.running[id as usize - 1].is_some() {
                    seen.extend(self.status_of(id).await.and_then(|s| s.leader));
                }
            }
            if let Some(leader) = seen.iter().find(|l| seen.iter().filter(|m| m == l).count() >= 2) {
                return *leader;
            }
            assert!(Instant::now() < deadline, "no leader agreed on: {seen:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn session_options(replicas: &Replicas, credential: String) -> ac_frontend::SessionOptions {
    ac_frontend::SessionOptions {
        arm: replicas.options(),
        job: JobAuth::Credential { job: "j".into(), secret: credential },
        node: "n1".into(),
        init_timeout: Some(Duration::from_secs(10)),
        stripes: 1,
        progress: false,
    }
}

/// Every accelerator held, by job, as the manager shows it: none may be held twice.
async fn holdings(ctl: &ArmClient, jobs: &[&str]) -> Vec<String> {
    let mut held = Vec::new();
    for job in jobs {
        let view = job_of(ctl, job).await;
        held.extend(view.static_accelerators.into_iter().map(|(_, accelerator)| accelerator));
        held.extend(view.dynamic_accelerators.into_iter().map(|(_, accelerator)| accelerator));
    }
    let distinct: BTreeSet<&String> = held.iter().collect();
    assert_eq!(distinct.len(), held.len(), "an accelerator with two holders: {held:?}");
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_a_killed_leader_and_nothing_acknowledged_is_lost() {
    let root = tempfile::tempdir().unwrap();
    let mut replicas = Replicas::start(root.path(), 55);
    let backends = [
        TestBackend::start(64).await,
        TestBackend::start(64).await,
        TestBackend::start(64).await,
        TestBackend::start(64).await,
    ];
    let ctl = replicas.admin().await;
    register_hosts(&ctl, &backends).await;
    let credential = submit_job(&ctl, "j", &["n1"], 1, "u", 0).await;
    submit_job(&ctl, "other", &["n2"], 1, "v", 0).await;
    let session = Session::init(session_options(&replicas, credential)).await.unwrap();
    let first = session.get(1).await.unwrap().expect("granted");
    let before = holdings(&ctl, &["j", "other"]).await;
    assert_eq!(before.len(), 3, "two static accelerators and one dynamic: {before:?}");

    let leader = replicas.leader().await;
    replicas.kill(leader);
    let killed = Instant::now();
    // The program's next AC_Get finds the new leader through the replicas it was given.
    let second = session.get(1).await.unwrap().expect("granted by the new leader");
    eprintln!("takeover: the first AC_Get acknowledged {:?} after the leader's kill -9", killed.elapsed());
    let new_leader = replicas.leader().await;
    assert_ne!(new_leader, leader, "a standby leads");
    let after = holdings(&ctl, &["j", "other"]).await;
    assert_eq!(after.len(), 4, "what the old leader acknowledged, and the new grant: {after:?}");
    assert!(before.iter().all(|a| after.contains(a)), "nothing acknowledged is lost: {before:?} then {after:?}");
    // The new leader's capability opens the accelerator: the backends trust the cluster's key.
    computes(&second.handles[0].acc).await.unwrap();
    computes(&first.handles[0].acc).await.unwrap();

    // The killed replica comes back and catches up with the leader.
    replicas.restart(leader);
    let caught_up = eventually(Duration::from_secs(15), || async {
        let (Some(back), Some(lead)) = (replicas.status_of(leader).await, replicas.status_of(new_leader).await) else {
            return false;
        };
        back.leader == Some(new_leader)
            && back.applied.is_some()
            && back.applied >= lead.applied.map(|a| a.saturating_sub(1))
    })
    .await;
    assert!(caught_up, "the restarted replica caught up");

    // All three killed and restarted: everything acknowledged is there.
    session.free(first).await.unwrap();
    let acknowledged = holdings(&ctl, &["j", "other"]).await;
    for id in 1..=3 {
        replicas.kill(id);
    }
    for id in 1..=3 {
        replicas.restart(id);
    }
    let ctl = replicas.admin().await;
    assert_eq!(holdings(&ctl, &["j", "other"]).await, acknowledged, "all three restarted: nothing lost");
    session.free(second).await.unwrap();
    assert_eq!(job_of(&ctl, "j").await.dynamic_accelerators.len(), 0);
    session.finalize().await.unwrap();
}

impl Replicas {
    /// Sends `signal` (`STOP`, `CONT`) to replica `id`'s process.
    fn signal(&self, id: u64, signal: &str) {
        let process = self.running[id as usize - 1].as_ref().expect("running");
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &process.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal}");
    }
}

/// Three replicas on network `net` with three backends, job `j` (one accelerator on `n1`), and
/// a program of it holding one more.
struct Stage {
    _root: tempfile::TempDir,
    replicas: Replicas,
    backends: [TestBackend; 3],
    ctl: ArmClient,
    session: Session,
    first: ac_frontend::DynamicSet,
}

impl Stage {
    async fn set(net: u8) -> Self {
        let root = tempfile::tempdir().unwrap();
        let replicas = Replicas::start(root.path(), net);
        let backends = [TestBackend::start(64).await, TestBackend::start(64).await, TestBackend::start(64).await];
        let ctl = replicas.admin().await;
        register_hosts(&ctl, &backends).await;
        let credential = submit_job(&ctl, "j", &["n1"], 1, "u", 0).await;
        let session = Session::init(session_options(&replicas, credential)).await.unwrap();
        let first = session.get(1).await.unwrap().expect("granted");
        Self { _root: root, replicas, backends, ctl, session, first }
    }
}

/// An admin client of replica `id` alone, in protocol 8: a client that cannot follow the
/// leader, so what it is told is that replica's own answer ("not the leader" as an internal
/// error, in the same words).
async fn alone(replicas: &Replicas, id: u64) -> ArmClient {
    let mut alone = ArmOptions::new(replicas.api(id), replicas.dirs[0].join("ca.pem"));
    alone.identity = Some((replicas.dirs[0].join("admin.pem"), replicas.dirs[0].join("admin.key")));
    alone.tuning = quick_tuning();
    alone.protocol = 8;
    ArmClient::connect(alone).await.expect("the replica answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_is_deposed_and_decides_nothing_once_it_runs_again() {
    let Stage { _root, replicas, backends, ctl, session, first } = Stage::set(57).await;

    // Stopped longer than the election timeout: the others elect another, which grants.
    let old = replicas.leader().await;
    replicas.signal(old, "STOP");
    let second = session.get(1).await.unwrap().expect("granted by a standby while the leader is stopped");
    let new = replicas.leader().await;
    assert_ne!(new, old, "a standby leads");
    // Each replica signs with its own key: the backend opens the new leader's grant.
    computes(&second.handles[0].acc).await.unwrap();

    // Fencing. Stopped, the old leader does not know it was deposed: a capability it signs now
    // for the accelerator the new leader granted (the test signs it with the old leader's key,
    // as it would for a grant it never committed), with the highest id any earlier term could
    // have, is refused: the device was opened with the newer grant's.
    let term = replicas.status_of(new).await.expect("the new leader's status").term;
    let (host, device) = second.handles[0].id.split_once('/').expect("host/device");
    let backend = &backends[host[1..].parse::<usize>().expect("hN")];
    let mut forged = backend.options();
    forged.device = device.parse().expect("a device index");
    let old_key = arm_server::keys::signer(&replicas.dirs[old as usize - 1]).expect("the old leader's key");
    forged.capability = old_key.issue(&ac_proto::capability::Grant {
        id: (term << 40) - 1,
        job: "other".into(),
        host: host.to_string(),
        device: forged.device,
        expires: ac_proto::capability::unix_now() + 600,
    });
    let refused = match ac_frontend::Accelerator::connect(&forged).await {
        Ok(_) => panic!("a capability of the deposed leader's term opened the device the new leader granted"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("superseded by a newer grant"), "{refused}");

    // Running again, the old leader learns the new term and steps down: asked alone, it
    // decides nothing on its old state, and names the new leader.
    replicas.signal(old, "CONT");
    let stepped_down = eventually(Duration::from_secs(10), || async {
        replicas.status_of(old).await.is_some_and(|s| s.leader == Some(new))
    })
    .await;
    assert!(stepped_down, "the old leader follows the new one");
    let refused = alone(&replicas, old).await.request(Request::HostDrain { name: "h0".into(), drain: true }).await;
    match refused {
        Err(ac_frontend::Error::Manager { kind, message }) => {
            // Protocol 8 has no NotLeader: said as Internal, in the same words.
            assert_eq!(kind, ac_proto::arm::ArmErrorKind::Internal, "{message}");
            assert_eq!(ac_proto::arm::leader_named(&message), Some(replicas.api(new)), "{message}");
        }
        other => panic!("the old leader decided: {other:?}"),
    }
    // Every replica applies the same log: the old one catches up to the leader's index.
    let agreed = eventually(Duration::from_secs(10), || async {
        let (Some(a), Some(b)) = (replicas.status_of(old).await, replicas.status_of(new).await) else { return false };
        a.applied.is_some() && a.applied == b.applied
    })
    .await;
    assert!(agreed, "the old leader applied what the new one did");
    let held = holdings(&ctl, &["j"]).await;
    assert_eq!(held.len(), 3, "the static accelerator and both grants: {held:?}");
    // The metrics: the leader serves, and reads its followers' lag; a follower says it does
    // not serve and shows no pool figures (its core is read back only when it leads).
    let leading = replicas.metrics(new).await;
    assert!(leading.contains("arm_replica_serving 1"), "{leading}");
    assert!(leading.contains(&format!("arm_replica_follower_lag{{replica=\"{old}\"}}")), "{leading}");
    assert!(leading.contains("arm_accelerators{state=\"allocated\"} 3"), "{leading}");
    let following = replicas.metrics(old).await;
    assert!(
        following.contains("arm_replica_serving 0") && following.contains("arm_replica_leader_known 1"),
        "{following}"
    );
    assert!(!following.contains("arm_accelerators"), "a follower's pool figures are stale: {following}");
    let Response::Hosts(hosts) = ctl.request(Request::HostList).await.unwrap() else { panic!("hosts") };
    assert!(hosts.iter().all(|h| !h.state.contains("drain")), "the refused drain was made: {hosts:?}");
    session.free(first).await.unwrap();
    session.free(second).await.unwrap();
    session.finalize().await.unwrap();
}

/// Drops every packet between one replica's address and the others' (its Raft traffic: a
/// replica dials the others from its Raft address), both ways: an nftables table of its own in
/// this namespace, matching only this test's loopback addresses, deleted when dropped (also
/// when the test fails).
struct Partition {
    table: String,
}

impl Partition {
    fn cut(net: u8, isolated: u64) -> Self {
        if let Some(why) = ac_tests::netns::unavailable_with(&["nft"]) {
            panic!("nftables is needed (./scripts/test installs it): {why}");
        }
        let table = format!("acrepl{net}p{}", std::process::id());
        let others: Vec<String> = (1..=3).filter(|id| *id != isolated).map(|id| ip(net, id)).collect();
        let (me, others) = (ip(net, isolated), others.join(", "));
        let rules = format!(
            "table ip {table} {{\n\
             chain input {{ type filter hook input priority 0; \
             ip saddr {me} ip daddr {{ {others} }} drop; ip saddr {{ {others} }} ip daddr {me} drop; }}\n\
             }}\n"
        );
        let file = std::env::temp_dir().join(format!("{table}.nft"));
        std::fs::write(&file, rules).expect("nft rules written");
        ac_tests::netns::run("nft", &["-f", &file.to_string_lossy()]).expect("nft rules load");
        let _ = std::fs::remove_file(&file);
        Self { table }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = ac_tests::netns::run("nft", &["delete", "table", "ip", &self.table]);
    }
}

impl Replicas {
    /// An admin client of replica `id` alone (no other address to follow a leader to).
    async fn client_of(&self, id: u64) -> ArmClient {
        let mut options = ArmOptions::new(self.api(id), self.dirs[0].join("ca.pem"));
        options.identity = Some((self.dirs[0].join("admin.pem"), self.dirs[0].join("admin.key")));
        options.tuning = quick_tuning();
        ArmClient::connect(options).await.expect("the replica answers")
    }

    /// Waits until every replica has applied the same last index.
    async fn agree(&self) -> bool {
        eventually(Duration::from_secs(15), || async {
            let mut applied = Vec::new();
            for id in 1..=3 {
                applied.push(self.status_of(id).await.and_then(|s| s.applied));
            }
            applied[0].is_some() && applied.iter().all(|a| *a == applied[0])
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_acknowledges_nothing_and_every_replica_ends_with_the_same_state() {
    let Stage { _root, mut replicas, backends: _backends, ctl, session, first } = Stage::set(59).await;

    // The leader cut off from the other two (programs and backends still reach it).
    let old = replicas.leader().await;
    let alone = replicas.client_of(old).await;
    let cut = Partition::cut(replicas.net, old);
    let cut_at = Instant::now();
    // The program's next AC_Get, sent to the leader it knows, is granted by the majority's.
    let second = session.get(1).await.unwrap().expect("granted by the majority's leader");
    eprintln!("partition: the first AC_Get granted by the majority {:?} after the cut", cut_at.elapsed());
    // Asked alone, the old leader acknowledges nothing: no majority takes its drain.
    let drain = Request::HostDrain { name: "h0".into(), drain: true };
    let asked = tokio::time::timeout(Duration::from_secs(5), alone.request(drain)).await;
    assert!(!matches!(asked, Ok(Ok(_))), "the cut-off leader acknowledged a drain: {asked:?}");
    let new = replicas.leader().await;
    assert_ne!(new, old, "the majority elected another");

    // Healed: the old leader follows the new one and applies what it did.
    drop(cut);
    let stepped_down = eventually(Duration::from_secs(10), || async {
        replicas.status_of(old).await.is_some_and(|s| s.leader == Some(new))
    })
    .await;
    assert!(stepped_down, "the old leader follows the new one");
    let Response::Hosts(hosts) = ctl.request(Request::HostList).await.unwrap() else { panic!("hosts") };
    assert!(hosts.iter().all(|h| !h.state.contains("drain")), "the unacknowledged drain was made: {hosts:?}");
    assert_eq!(holdings(&ctl, &["j"]).await.len(), 3, "the static accelerator and both grants");
    session.free(first).await.unwrap();
    session.free(second).await.unwrap();
    session.finalize().await.unwrap();

    // Every replica's store holds the same state, record for record.
    assert!(replicas.agree().await, "the replicas applied the same log");
    // Stopped in order: a replica writes the applies it deferred (a killed one has them in its
    // log, and applies them again at its next start).
    for id in 1..=3 {
        replicas.stop(id);
    }
    let dumps: Vec<_> = replicas
        .dirs
        .iter()
        .map(|dir| arm_server::store::Store::open(dir).expect("the store opens").dump().expect("the store reads"))
        .collect();
    assert!(!dumps[0].is_empty(), "the state is not empty");
    assert!(dumps.iter().all(|d| *d == dumps[0]), "the replicas' stores differ");
    // The first leader committed the founding members' records: every replica takes their
    // addresses and keys from the log, not from its own configuration.
    for dir in &replicas.dirs {
        let members = arm_server::store::Store::open(dir).expect("the store opens").members().expect("members");
        let keys: Vec<&str> = members.values().map(|m| m.key.as_str()).collect();
        assert_eq!(members.keys().copied().collect::<Vec<_>>(), [1, 2, 3], "{}", dir.display());
        assert_eq!(keys, replicas.keys.iter().map(String::as_str).collect::<Vec<_>>());
    }
}
