//! The manager's request handling driven in-process: each request goes to `Arm::handle` as a
//! connection's task hands it over (no QUIC in between), against a real store in a temporary
//! directory. What a client sees on the wire is tested end to end in `tests/`.

use ac_proto::arm::{ArmErrorKind, Ask, JobAuth, Request, Response, SessionState, MIN_TOKEN_LEN};

use super::{start, Answer, Link, RunningArm};
use crate::config::ArmConfig;
use crate::roles::{Caller, Role};

/// A manager serving from a fresh store, with no hosts.
async fn manager(dir: &tempfile::TempDir) -> RunningArm {
    let config =
        ArmConfig { listen: "127.0.0.1:0".parse().unwrap(), state_dir: dir.path().into(), ..Default::default() };
    start(config).await.expect("the manager starts")
}

fn caller(role: Option<Role>) -> Caller {
    let name = role.map_or("", |_| "test-client").to_string();
    Caller { role, name, fingerprint: "ab".repeat(32) }
}

async fn ask(arm: &RunningArm, request: Request, role: Option<Role>) -> Answer {
    arm.arm.handle(request, &caller(role), &Link::new()).await
}

fn submit(id: &str, acpn: u32) -> Request {
    Request::JobSubmit {
        id: id.into(),
        nodes: vec!["n1".into()],
        acpn,
        user: "alice".into(),
        walltime_s: 600,
        group: None,
        reservation: None,
        peak: None,
    }
}

fn token(c: char) -> String {
    std::iter::repeat_n(c, MIN_TOKEN_LEN).collect()
}

#[tokio::test]
async fn an_admin_request_without_the_role_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    for role in [None, Some(Role::Batch)] {
        let refused = ask(&arm, submit("j1", 0), role).await.unwrap_err();
        assert_eq!(refused.kind, ArmErrorKind::Unauthorized, "{role:?}");
        assert!(refused.message.starts_with("job submit refused"), "{}", refused.message);
    }
    let Ok(Response::Jobs(jobs)) = ask(&arm, Request::JobList { all: true }, Some(Role::Admin)).await else {
        panic!("an admin lists jobs")
    };
    assert!(jobs.is_empty(), "a refused submission left {jobs:?}");
    arm.shutdown().await;
}

#[tokio::test]
async fn a_submitted_job_opens_sessions_only_with_its_credential_on_its_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    let too_big = ask(&arm, submit("j0", 1), Some(Role::Admin)).await.unwrap_err();
    assert_eq!(too_big.kind, ArmErrorKind::Invalid);
    assert!(too_big.message.contains("the pool has 0"), "{}", too_big.message);
    let submitted = ask(&arm, submit("j1", 0), Some(Role::Admin)).await;
    let Ok(Response::Submitted { id, credential }) = submitted else { panic!("an admin submits a job: {submitted:?}") };
    assert_eq!(id, "j1");
    let init = |secret: &str, node: &str, t: char| Request::Init {
        auth: JobAuth::Credential { job: "j1".into(), secret: secret.into() },
        node: node.into(),
        token: token(t),
    };
    let wrong = ask(&arm, init("guess", "n1", 'a'), None).await.unwrap_err();
    assert_eq!(wrong.kind, ArmErrorKind::Unauthorized, "{}", wrong.message);
    let elsewhere = ask(&arm, init(&credential, "n9", 'b'), None).await.unwrap_err();
    assert_eq!(elsewhere.kind, ArmErrorKind::Unauthorized, "not one of the job's nodes: {}", elsewhere.message);
    // A job of no static accelerators starts at once, bound to none.
    match ask(&arm, init(&credential, "n1", 'c'), None).await {
        Ok(Response::Session { job, state: SessionState::Bound(grants), .. }) => {
            assert_eq!((job.as_str(), grants.len()), ("j1", 0));
        }
        other => panic!("the job's session opens, bound: {other:?}"),
    }
    arm.shutdown().await;
}

#[tokio::test]
async fn a_program_is_told_what_is_wrong_with_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    let short = Request::Init { auth: JobAuth::AdHoc { acpn: 1 }, node: "n1".into(), token: "short".into() };
    let refused = ask(&arm, short, None).await.unwrap_err();
    assert_eq!(refused.kind, ArmErrorKind::Invalid);
    assert!(refused.message.contains(&MIN_TOKEN_LEN.to_string()), "{}", refused.message);
    let stranger = Request::Get { token: token('z'), ask: Ask::exactly(1, "k1".into()) };
    let unknown = ask(&arm, stranger, None).await.unwrap_err();
    assert_eq!(unknown.kind, ArmErrorKind::Unauthorized, "{}", unknown.message);
    assert!(unknown.message.contains("unknown or expired session"), "{}", unknown.message);
    arm.shutdown().await;
}

#[tokio::test]
async fn an_admin_request_never_reaches_the_programs_handler() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    let misrouted = arm.arm.program_request(Request::HostList, &Link::new()).await.unwrap_err();
    assert_eq!(misrouted.kind, ArmErrorKind::Internal);
    let misrouted = arm.arm.admin_request(Request::Poll { token: token('p') }).await.unwrap_err();
    assert_eq!(misrouted.kind, ArmErrorKind::Internal);
    arm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_that_waited_for_the_committers_turn_are_committed_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    // The committer's turn, as a rollback or a reload takes it: no group commit runs meanwhile.
    let turn = arm.arm.committing.lock().await;
    let before = arm.arm.last_queued();
    let submissions: Vec<_> = (0..8)
        .map(|i| {
            let arm = arm.arm.clone();
            tokio::spawn(async move {
                arm.handle(submit(&format!("j{i}"), 0), &caller(Some(Role::Admin)), &Link::new()).await
            })
        })
        .collect();
    // Each has made its change and queued it; then it waits for its group, which the
    // committer writes once it has the turn.
    while arm.arm.last_queued() < before + 8 {
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(submissions.iter().all(|s| !s.is_finished()), "answered before the change was committed");
    // The turn's end lets one commit for all: none is left waiting.
    drop(turn);
    for submission in submissions {
        let answered = tokio::time::timeout(std::time::Duration::from_secs(10), submission).await;
        answered.expect("answered once the turn ended").unwrap().expect("submitted");
    }
    let Ok(Response::Jobs(jobs)) = ask(&arm, Request::JobList { all: true }, Some(Role::Admin)).await else {
        panic!("an admin lists jobs")
    };
    assert_eq!(jobs.len(), 8);
    arm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_rejection_is_told_while_no_group_can_commit() {
    let dir = tempfile::tempdir().unwrap();
    let arm = manager(&dir).await;
    let Ok(Response::Submitted { credential, .. }) = ask(&arm, submit("j1", 0), Some(Role::Admin)).await else {
        panic!("an admin submits a job")
    };
    let init = Request::Init {
        auth: JobAuth::Credential { job: "j1".into(), secret: credential },
        node: "n1".into(),
        token: token('r'),
    };
    assert!(matches!(ask(&arm, init, None).await, Ok(Response::Session { .. })), "the job's session opens");
    // The committer's turn held: no group commits, so an answer that waits for one never comes.
    let turn = arm.arm.committing.lock().await;
    let get = |key: &str| Request::Get { token: token('r'), ask: Ask::exactly(1, key.into()) };
    // The pool is empty: the AC_Get is refused, which promises nothing and is told at once.
    let refused = tokio::time::timeout(std::time::Duration::from_secs(10), ask(&arm, get("k1"), None)).await;
    match refused {
        Ok(Ok(Response::Rejected { reason })) => assert!(reason.contains("1 accelerator(s) asked"), "{reason}"),
        other => panic!("the AC_Get was not refused at once while no group could commit: {other:?}"),
    }
    // A change that holds something (a job submitted) still waits for its group.
    let submitting = {
        let arm = arm.arm.clone();
        tokio::spawn(async move { arm.handle(submit("j2", 0), &caller(Some(Role::Admin)), &Link::new()).await })
    };
    // It can never be answered while the turn is held; a while is given for it to try.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!submitting.is_finished(), "a submission was answered before it was committed");
    drop(turn);
    let submitted = tokio::time::timeout(std::time::Duration::from_secs(10), submitting).await;
    assert!(matches!(submitted, Ok(Ok(Ok(Response::Submitted { .. })))), "{submitted:?}");
    arm.shutdown().await;
}
