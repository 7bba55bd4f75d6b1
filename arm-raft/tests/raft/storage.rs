//! The redb store under openraft's own storage test suite, and what the suite does not cover:
//! a reopened store keeps its vote, log and state; a request id applied twice is answered
//! twice with the first answer and changes the state once; a command logged in another term
//! than its proposer's is refused; a snapshot installed on another
//! replica gives it the same state.

use crate::common::Pool;
use arm_raft::{Applied, ArmRaft, Command, LogStore, StateMachine};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote};

struct Builder;

impl StoreBuilder<ArmRaft, LogStore, StateMachine<Pool>, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine<Pool>), arm_raft::StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, machine) = arm_raft::open(&dir.path().join("raft.redb"), Pool::default()).expect("open");
        Ok((dir, log, machine))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_redb_store() {
    Suite::test_all(Builder).expect("openraft's storage suite");
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn command(term: u64, index: u64, id: &str, op: &str) -> Entry<ArmRaft> {
    proposed_in(None, term, index, id, op)
}

/// A command its proposer made leading in `proposed` (`None`: any term), logged at `index` in `term`.
fn proposed_in(proposed: Option<u64>, term: u64, index: u64, id: &str, op: &str) -> Entry<ArmRaft> {
    let command = Command { id: id.into(), op: op.into(), term: proposed };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(command) }
}

/// Appends `entries` and waits for the flush openraft would wait for.
async fn append(log: &mut LogStore, entries: Vec<Entry<ArmRaft>>) {
    log.blocking_append(entries).await.expect("append, flushed");
}

fn answers(applied: &[Applied]) -> Vec<(String, bool)> {
    applied.iter().map(|a| (String::from_utf8_lossy(&a.answer).into_owned(), a.duplicate)).collect()
}

#[tokio::test]
async fn a_request_id_applied_twice_gets_its_first_answer_and_changes_the_state_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut machine) = arm_raft::open(&dir.path().join("raft.redb"), Pool::default()).unwrap();
    let entries = vec![
        command(1, 1, "r1", "take h1/0 job-a"),
        // The same request sent again after a failover: the new leader proposed it again.
        command(2, 2, "r1", "take h1/0 job-a"),
        command(2, 3, "r2", "take h1/0 job-b"),
        command(2, 4, "r3", "free h1/0"),
        command(2, 5, "r3", "free h1/0"),
    ];
    let applied = machine.apply(entries).await.unwrap();
    let want =
        [("granted", false), ("granted", true), ("h1/0 is held by job-a", false), ("freed", false), ("freed", true)];
    assert_eq!(answers(&applied), want.map(|(a, d)| (a.to_string(), d)));
    assert!(machine.with(|pool| pool.holders.is_empty()), "freed once, not 'not held' the second time");
}

/// A leader deposed and elected again may find a command it proposed in its old term logged in
/// its new one, after another leader's entries: it is not applied, and its id stays unused.
#[tokio::test]
async fn a_command_logged_in_another_term_than_its_proposers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut machine) = arm_raft::open(&dir.path().join("raft.redb"), Pool::default()).unwrap();
    let entries = vec![
        proposed_in(Some(1), 1, 1, "r1", "take h1/0 job-a"),
        proposed_in(Some(1), 2, 2, "r2", "take h2/0 job-b"),
        proposed_in(Some(2), 2, 3, "r2", "take h2/0 job-b"),
    ];
    let applied = machine.apply(entries).await.unwrap();
    let refused: Vec<bool> = applied.iter().map(|a| a.refused).collect();
    assert_eq!(refused, [false, true, false]);
    assert_eq!(
        answers(&applied),
        [("granted", false), ("", false), ("granted", false)].map(|(a, d)| (a.to_string(), d))
    );
    assert_eq!(machine.with(|pool| pool.holders.len()), 2, "the refused one changed nothing");
}

#[tokio::test]
async fn a_reopened_store_keeps_its_vote_log_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.redb");
    {
        let (mut log, mut machine) = arm_raft::open(&path, Pool::default()).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        let entries: Vec<_> =
            (1..=4).map(|i| command(3, i, &format!("r{i}"), &format!("take h{i}/0 job-{i}"))).collect();
        append(&mut log, entries.clone()).await;
        log.save_committed(Some(log_id(3, 4))).await.unwrap();
        // The commit point is written with the next append; one saved after the last append is
        // lost with the process (the replica then applies less at start, never more).
        append(&mut log, vec![command(3, 5, "r5", "take h5/0 job-5")]).await;
        log.save_committed(Some(log_id(3, 5))).await.unwrap();
        machine.apply(entries[..2].to_vec()).await.unwrap();
        machine.get_snapshot_builder().await.build_snapshot().await.unwrap();
        // Applied after the snapshot: openraft applies these again from the log after a restart.
        machine.apply(entries[2..].to_vec()).await.unwrap();
    }
    let (mut log, mut machine) = arm_raft::open(&path, Pool::default()).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(3, 4)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(3, 5)));
    assert_eq!(log.try_get_log_entries(1..6).await.unwrap().len(), 5);
    let (applied, _) = machine.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(3, 2)), "the state machine starts from its snapshot");
    assert_eq!(machine.with(|pool| pool.holders.len()), 2);
    let replayed = machine.apply(log.try_get_log_entries(3..5).await.unwrap()).await.unwrap();
    assert_eq!(answers(&replayed), vec![("granted".to_string(), false); 2]);
    assert_eq!(machine.with(|pool| pool.holders.len()), 4);
}

#[tokio::test]
async fn a_snapshot_installed_on_a_lagging_replica_gives_it_the_same_state_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut leader) = arm_raft::open(&dir.path().join("leader.redb"), Pool::default()).unwrap();
    leader.apply(vec![command(1, 1, "r1", "take h1/0 a"), command(1, 2, "r2", "take h2/0 b")]).await.unwrap();
    let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.unwrap();

    let follower_path = dir.path().join("follower.redb");
    {
        let (_, mut follower) = arm_raft::open(&follower_path, Pool::default()).unwrap();
        let mut receiving = follower.begin_receiving_snapshot().await.unwrap();
        receiving.get_mut().extend_from_slice(snapshot.snapshot.get_ref());
        follower.install_snapshot(&snapshot.meta, receiving).await.unwrap();
    }
    // Reopened: the installed snapshot is its durable state.
    let (_, mut follower) = arm_raft::open(&follower_path, Pool::default()).unwrap();
    assert_eq!(follower.applied_state().await.unwrap().0, Some(log_id(1, 2)));
    assert_eq!(follower.with(|p| p.holders.clone()), leader.with(|p| p.holders.clone()));
    // A request answered before the snapshot is still known as answered after it.
    let again = follower.apply(vec![command(2, 3, "r1", "take h1/0 a")]).await.unwrap();
    assert_eq!(answers(&again), vec![("granted".to_string(), true)]);
    let current = follower.get_current_snapshot().await.unwrap().expect("stored");
    assert_eq!(current.meta, snapshot.meta);
}
