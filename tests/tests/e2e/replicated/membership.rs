//! A fourth replica joins (`join = true`) and replaces a follower through `armctl cluster
//! replace` (a key not its own refused first); the leaders are killed until the new one leads,
//! whose grants the backend accepts: it was registered with the new members' keys.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ac_proto::arm::Response;
use ac_tests::{computes, eventually};

use super::{holdings, ip, Replicas, Stage};

impl Replicas {
    /// Prepares replica `id` as docs/admin.md says for a new machine (the cluster's CA and
    /// admin certificate copied, a signing key of its own) and starts it joining the cluster.
    fn start_joining(&mut self, id: u64) {
        let dir = self.dirs[0].with_file_name(format!("r{id}"));
        std::fs::create_dir_all(&dir).expect("its state directory");
        for file in ["ca.pem", "ca.key", "admin.pem", "admin.key"] {
            std::fs::copy(self.dirs[0].join(file), dir.join(file)).expect("the cluster's files copied");
        }
        let key = arm_server::keys::signer(&dir).expect("its signing key").public_key();
        self.dirs.push(dir);
        self.keys.push(arm_server::keys::hex(&key));
        self.running.push(None);
        self.restart(id);
    }

    /// Runs the `armctl` binary as the admin against the replicas `ids`; its exit code and
    /// output.
    fn armctl(&self, ids: &[u64], args: &[&str]) -> (i32, String) {
        let arm: Vec<String> = ids.iter().map(|id| self.api(*id).to_string()).collect();
        let out = std::process::Command::new(ac_tests::workspace_binary("armctl"))
            .args(["--arm", &arm.join(",")])
            .arg("--ca")
            .arg(self.dirs[0].join("ca.pem"))
            .arg("--cert")
            .arg(self.dirs[0].join("admin.pem"))
            .arg("--key")
            .arg(self.dirs[0].join("admin.key"))
            .args(args)
            .output()
            .expect("armctl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    }

    /// The leader the running replicas agree on, once it is not `gone` (killed: the others
    /// name it until they elect another).
    async fn leader_but(&self, gone: Option<u64>) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let leader = self.leader().await;
            if Some(leader) != gone {
                return leader;
            }
            assert!(Instant::now() < deadline, "replica {leader}, killed, is still named the leader");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_replica_replaces_a_follower_and_its_grants_are_accepted_when_it_leads() {
    let Stage { _root, mut replicas, backends, ctl, session, first } = Stage::set(56).await;
    // The leader does not replace itself: the replica replaced is a follower (3 unless it leads).
    let leader = replicas.leader().await;
    let old = (1..=3).rev().find(|id| *id != leader).expect("a follower");
    let expected: BTreeSet<u64> = [1, 2, 3, 4].into_iter().filter(|id| *id != old).collect();
    replicas.start_joining(4);
    let (raft, api, key) = (format!("{}:7100", ip(56, 4)), replicas.api(4).to_string(), replicas.keys[3].clone());
    let old_arg = old.to_string();
    // The leader asks 4 who it is first: another replica's key (or a mistyped one) is refused.
    let taken = replicas.keys[old as usize - 1].clone();
    let elsewhere = _root.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("a directory");
    let unused = arm_server::keys::hex(&arm_server::keys::signer(&elsewhere).expect("a signing key").public_key());
    // So is another id than the one it was started with.
    let wrongs = [
        ("4", &taken, "signs with that key already"),
        ("4", &unused, "does not sign with the key given"),
        ("5", &key, "it is replica 4 (the `id` in its `[replication]` configuration), not 5"),
    ];
    for (id, wrong, why) in wrongs {
        let wrong_key = [
            "cluster",
            "replace",
            "--old",
            &old_arg,
            "--new",
            id,
            "--raft",
            &raft,
            "--api",
            &api,
            "--signing-key",
            wrong,
        ];
        let (code, said) = replicas.armctl(&[1, 2, 3], &wrong_key);
        assert!(code != 0 && said.contains(why), "a wrong id or key for 4: {said}");
    }
    let replace =
        ["cluster", "replace", "--old", &old_arg, "--new", "4", "--raft", &raft, "--api", &api, "--signing-key", &key];
    let (code, said) = replicas.armctl(&[1, 2, 3], &replace);
    assert_eq!(code, 0, "armctl cluster replace: {said}");
    replicas.kill(old);

    // Every replica sees 4 vote and the replaced one gone, with 4's client address, which only
    // its member record (not their configuration) gives.
    let (code, said) = replicas.armctl(&[leader], &["--json", "cluster", "status"]);
    assert_eq!(code, 0, "armctl cluster status: {said}");
    let Ok(Response::Cluster(status)) = serde_json::from_str::<Response>(&said) else { panic!("a status: {said}") };
    let voters: BTreeSet<u64> = status.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    assert_eq!(voters, expected, "{said}");
    assert_eq!(status.members.len(), 3, "the replaced replica is no member: {said}");
    let four = status.members.iter().find(|m| m.id == 4).expect("4 is a member");
    assert_eq!(four.api, Some(replicas.api(4)), "{said}");
    // A voter is replaced, not removed; a member's key is not changed by an add.
    let (code, said) = replicas.armctl(&[leader], &["cluster", "remove", "--id", "4"]);
    assert!(code != 0 && said.contains("a voter is replaced"), "removing a voter: {said}");
    let (leader_raft, leader_api) = (format!("{}:7100", ip(56, leader)), replicas.api(leader).to_string());
    let leader_arg = leader.to_string();
    let rekey =
        ["cluster", "add", "--id", &leader_arg, "--raft", &leader_raft, "--api", &leader_api, "--signing-key", &key];
    let (code, said) = replicas.armctl(&[leader], &rekey);
    assert!(code != 0 && said.contains("is a member already"), "another key for the leader: {said}");
    // The change's leader registered every backend again with the new members' keys: each
    // trusts 4's, and the replaced replica's no more (what a backend trusts is in its arm.pub).
    let keys: BTreeSet<String> = expected.iter().map(|id| replicas.keys[*id as usize - 1].clone()).collect();
    for backend in &backends {
        let pinned = backend.backend.ca_cert().with_file_name("arm.pub");
        let trusted = || std::fs::read_to_string(&pinned).unwrap_or_default();
        let new_set = eventually(Duration::from_secs(5), || async {
            let text = trusted();
            text.split_whitespace().next().unwrap_or("").split(',').map(str::to_string).collect::<BTreeSet<_>>() == keys
        })
        .await;
        assert!(new_set, "a backend trusts {}, not the members {expected:?}' keys {keys:?}", trusted());
    }

    // Leaders are killed until 4 leads: each time the two survivors must elect one of them,
    // and the voter killed before is back first (a majority of three runs).
    let mut down = None;
    for killed in 0..10 {
        let leader = replicas.leader_but(down).await;
        if leader == 4 {
            eprintln!("replica 4 leads after {killed} leaders killed");
            break;
        }
        if let Some(back) = down.take() {
            replicas.restart(back);
            let follows = eventually(Duration::from_secs(15), || async {
                replicas.status_of(back).await.is_some_and(|s| s.leader == Some(leader))
            })
            .await;
            assert!(follows, "replica {back}, restarted, follows {leader}");
        }
        replicas.kill(leader);
        down = Some(leader);
    }
    assert_eq!(replicas.leader_but(down).await, 4, "replica 4 never led");
    // The program finds 4 through the replicas it knows (which name 4's address), and the
    // backend opens 4's capability: it trusts 4's key, registered by the leader of the change.
    let second = session.get(1).await.unwrap().expect("granted by replica 4");
    computes(&second.handles[0].acc).await.unwrap();
    computes(&first.handles[0].acc).await.unwrap();
    assert_eq!(holdings(&ctl, &["j"]).await.len(), 3, "the static accelerator and both grants");
    session.free(first).await.unwrap();
    session.free(second).await.unwrap();
    session.finalize().await.unwrap();
}
