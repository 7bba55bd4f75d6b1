//! What the scheduling core can do, through the real ARM, the SDK and the protocol: partial
//! grants, requests that wait, groups, idempotent requests, and state that survives `kill -9`.

use std::time::{Duration, Instant};

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{GetRequest, Session, SessionOptions};
use ac_proto::arm::{Ask, JobAuth, Request, Response, SessionState};
use ac_tests::{
    admin_of, computes, job_of, quick_tuning, register_hosts, submit_job, ArmProcess, TestBackend, TestCluster,
};

/// A program's raw client: `Init` with a token of its own, then requests by hand.
async fn raw_session(options: ArmOptions, job: &str, credential: &str, node: &str) -> (ArmClient, String) {
    let client = ArmClient::connect(options).await.unwrap();
    let token = ac_proto::random_hex(32);
    let auth = JobAuth::Credential { job: job.into(), secret: credential.into() };
    let init = Request::Init { auth, node: node.into(), token: token.clone() };
    let Response::Session { state: SessionState::Bound(_), .. } = client.request(init).await.unwrap() else {
        panic!("not bound")
    };
    (client, token)
}

fn ask(min: u32, max: u32, wait_s: u64) -> Ask {
    Ask { min, max, wait_s, preemptible: false, key: ac_proto::random_hex(16) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_grant_gives_what_is_idle() {
    let c = TestCluster::start(3).await;
    let credential = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &credential, "n1")).await.unwrap();
    assert!(session.get(3).await.unwrap().is_none(), "all or nothing: 3 asked, 2 idle");
    let set = session.get_with(GetRequest::new(3).at_least(1)).await.unwrap().expect("a partial grant");
    assert_eq!(set.handles.len(), 2);
    for handle in &set.handles {
        computes(&handle.acc).await.unwrap();
    }
    assert_eq!(c.job("j").await.dynamic_accelerators.len(), 2);
    assert!(session.get_with(GetRequest::new(2).at_least(1)).await.unwrap().is_none(), "none idle now");
    session.finalize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_is_granted_when_another_job_frees_accelerators() {
    let c = TestCluster::start(2).await;
    let credential = c.submit("a", &["n1"], 1).await;
    c.submit("b", &["n2"], 1).await;
    let (client, token) = raw_session(c.arm_options(), "a", &credential, "n1").await;
    let get = Request::Get { token: token.clone(), ask: ask(1, 1, 60) };
    let Response::Waiting { request, idle, .. } = client.request(get).await.unwrap() else { panic!("not waiting") };
    assert_eq!(idle, 0);
    assert_eq!(c.job("a").await.waiting_requests, 1);
    c.admin().await.request(Request::JobEnd { id: "b".into() }).await.unwrap();
    let answer = client.request(Request::AwaitGet { token, request }).await.unwrap();
    let Response::Granted { set, grants } = answer else { panic!("{answer:?}") };
    assert_eq!((set, grants.len()), (request, 1));
    let job = c.job("a").await;
    assert_eq!((job.dynamic_accelerators.len(), job.waiting_requests), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_is_rejected_when_its_time_runs_out() {
    let c = TestCluster::start(1).await;
    let credential = c.submit("a", &["n1"], 1).await;
    let session = Session::init(c.session_options("a", &credential, "n1")).await.unwrap();
    let start = Instant::now();
    let got = session.get_with(GetRequest::new(1).wait_up_to(Duration::from_secs(2))).await.unwrap();
    assert!(got.is_none(), "nothing freed: rejected");
    assert!(start.elapsed() >= Duration::from_secs(1), "it waited: {:?}", start.elapsed());
    assert_eq!(c.job("a").await.waiting_requests, 0);
    session.finalize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_that_dies_leaves_nothing_pending() {
    let c = TestCluster::start(2).await;
    let credential = c.submit("a", &["n1"], 1).await;
    c.submit("b", &["n2"], 1).await;
    let (client, token) = raw_session(c.arm_options(), "a", &credential, "n1").await;
    let Response::Waiting { .. } = client.request(Request::Get { token, ask: ask(1, 1, 600) }).await.unwrap() else {
        panic!("not waiting")
    };
    client.close().await;
    drop(client);
    // The lease (1 s here) runs out; the request goes with the session.
    let gone = ac_tests::eventually(Duration::from_secs(10), || async { c.job("a").await.waiting_requests == 0 }).await;
    assert!(gone, "the dead program's request is still waiting");
    c.admin().await.request(Request::JobEnd { id: "b".into() }).await.unwrap();
    assert_eq!(c.job("a").await.dynamic_accelerators.len(), 0, "nobody was granted the freed accelerator");
    assert_eq!(c.arm.free_accelerators(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_jobs_are_listed_only_when_asked() {
    let c = TestCluster::start(1).await;
    c.submit("done", &["n1"], 1).await;
    let admin = c.admin().await;
    admin.request(Request::JobEnd { id: "done".into() }).await.unwrap();
    c.submit("live", &["n1"], 1).await;
    let ids = |r: Response| match r {
        Response::Jobs(jobs) => jobs.into_iter().map(|j| j.id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ids(admin.request(Request::JobList { all: false }).await.unwrap()), ["live"]);
    assert_eq!(ids(admin.request(Request::JobList { all: true }).await.unwrap()), ["done", "live"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_manager_is_named_as_such() {
    let tb = TestBackend::start(64).await;
    // A port with nothing behind it (bound, then released).
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut arm = ArmOptions::new(addr, tb.backend.ca_cert());
    arm.tuning = quick_tuning();
    let options = SessionOptions {
        arm,
        job: JobAuth::AdHoc { acpn: 1 },
        node: "n1".into(),
        init_timeout: None,
        stripes: 1,
        progress: false,
    };
    let err = Session::init(options).await.unwrap_err();
    assert!(matches!(err, ac_frontend::Error::ManagerUnreachable { addr: a, .. } if a == addr), "{err:?}");
    assert!(err.to_string().contains(&format!("the resource manager at {addr}")), "{err}");
}

fn program_options(addr: std::net::SocketAddr, dir: &std::path::Path) -> ArmOptions {
    let mut options = ArmOptions::new(addr, dir.join("ca.pem"));
    options.tuning = quick_tuning();
    options
}

/// A manager on `state` (to be killed and started again there) with three backends, and jobs
/// `a` (on n1) and `b` (on n2) of one accelerator each: the manager, the backends (kept alive by
/// the caller), an admin client and the two jobs' credentials.
async fn two_jobs_of_one(state: &std::path::Path) -> (ArmProcess, [TestBackend; 3], ArmClient, String, String) {
    let arm = ArmProcess::start(state, "127.0.0.1:0");
    let backends = [TestBackend::start(64).await, TestBackend::start(64).await, TestBackend::start(64).await];
    let admin = admin_of(arm.addr, state).await;
    register_hosts(&admin, &backends).await;
    let a = submit_job(&admin, "a", &["n1"], 1, "u", 0).await;
    let b = submit_job(&admin, "b", &["n2"], 1, "u", 0).await;
    (arm, backends, admin, a, b)
}

/// A request retried after the manager crashed gets the answer the first one got, and an
/// `AC_Get` left waiting is still waiting after the restart and is granted when units free up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_and_waiting_requests_survive_kill_9_of_the_manager() {
    let state = tempfile::tempdir().unwrap();
    let (arm, _backends, _, a, b) = two_jobs_of_one(state.path()).await;
    let addr = arm.addr;
    let (client_a, token_a) = raw_session(program_options(addr, state.path()), "a", &a, "n1").await;
    let (client_b, token_b) = raw_session(program_options(addr, state.path()), "b", &b, "n2").await;
    let once = Request::Get { token: token_a.clone(), ask: ask(1, 1, 0) };
    let Response::Granted { set, grants } = client_a.request(once.clone()).await.unwrap() else { panic!() };
    let waiting = Request::Get { token: token_b.clone(), ask: ask(1, 1, 600) };
    let Response::Waiting { request, .. } = client_b.request(waiting.clone()).await.unwrap() else { panic!() };

    arm.kill_9();
    let _arm = ArmProcess::start(state.path(), &addr.to_string());
    let admin = admin_of(addr, state.path()).await;
    // The same requests again, as a client whose answer was lost would send them.
    let Response::Granted { set: again, grants: same } = client_a.request(once).await.unwrap() else { panic!() };
    let ids = |grants: &[ac_proto::arm::Grant]| grants.iter().map(|g| g.id.clone()).collect::<Vec<_>>();
    assert_eq!((again, ids(&same)), (set, ids(&grants)), "the original answer, not a second set");
    assert_eq!(job_of(&admin, "a").await.dynamic_accelerators.len(), 1);
    let Response::Waiting { request: still, .. } = client_b.request(waiting).await.unwrap() else { panic!() };
    assert_eq!(still, request);
    assert_eq!(job_of(&admin, "b").await.waiting_requests, 1);

    let free = Request::Free { token: token_a, set, accelerators: None };
    client_a.request(free).await.unwrap();
    let answer = client_b.request(Request::AwaitGet { token: token_b, request }).await.unwrap();
    assert!(matches!(answer, Response::Granted { .. }), "{answer:?}");
}

/// A program's waiting `AC_Get` waits through the manager's absence (a restart, an outage): its
/// polls that cannot reach the manager are asked again until the request's own deadline, and
/// it is granted when accelerators free up after the manager is back. A request still waiting
/// at its deadline with the manager gone fails naming the manager as unreachable, not as too few
/// accelerators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_get_waits_through_the_managers_absence() {
    let state = tempfile::tempdir().unwrap();
    let (arm, _backends, admin, a, b) = two_jobs_of_one(state.path()).await;
    let addr = arm.addr;
    let options = |job: &str, secret: &str, node: &str| SessionOptions {
        arm: program_options(addr, state.path()),
        job: JobAuth::Credential { job: job.into(), secret: secret.into() },
        node: node.into(),
        init_timeout: Some(Duration::from_secs(5)),
        stripes: 1,
        progress: false,
    };
    let holder = Session::init(options("a", &a, "n1")).await.unwrap();
    let held = holder.get(1).await.unwrap().expect("the last idle one");
    let waiter = std::sync::Arc::new(Session::init(options("b", &b, "n2")).await.unwrap());
    let wait = |secs| {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.get_or_why(GetRequest::new(1).wait_up_to(Duration::from_secs(secs))).await })
    };
    let get = wait(60);
    while job_of(&admin, "b").await.waiting_requests != 1 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Gone for longer than a poll's request timeout and redial (3 s + the 1.5 s idle timeout).
    arm.kill_9();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!get.is_finished(), "the request still waits: {:?}", get.await);
    let arm = ArmProcess::start(state.path(), &addr.to_string());
    let admin = admin_of(addr, state.path()).await;
    holder.free(held).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(20), get).await.expect("answered").unwrap();
    let granted = answer.expect("no error").expect("granted");
    computes(&granted.handles[0].acc).await.unwrap();
    assert_eq!(job_of(&admin, "b").await.dynamic_accelerators.len(), 1);

    // The pool is full: another request waits, and the manager is gone past its deadline (its
    // first poll without an answer fails 4.5 s after the kill).
    let get = wait(10);
    while job_of(&admin, "b").await.waiting_requests != 1 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    arm.kill_9();
    let answer = tokio::time::timeout(Duration::from_secs(20), get).await.expect("answered").unwrap();
    let err = answer.expect_err("no answer from the manager is no rejection");
    assert!(matches!(err, ac_frontend::Error::ManagerUnreachable { addr: a, .. } if a == addr), "{err:?}");
}

/// Fairness limits per group: two users of one group share its delay budget, and the budget's
/// charges survive `kill -9` of the manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_limit_holds_across_two_users_and_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let config = r#"
        [accounts]
        alice = "physics"
        bob = "physics"

        [scheduler.dynamic]
        policy = "target-delay"

        [scheduler.dynamic.groups.physics]
        target_delay = 50
    "#;
    let arm = ArmProcess::start_with_config(state.path(), "127.0.0.1:0", config);
    let addr = arm.addr;
    let backends = [TestBackend::start(64).await, TestBackend::start(64).await, TestBackend::start(64).await];
    let admin = admin_of(addr, state.path()).await;
    register_hosts(&admin, &backends).await;
    // `evolving` ends in 90 s, `short` in 60 s; `big` (2 accelerators) starts when `short` ends.
    // One more accelerator for `evolving` until its end delays `big` by about 30 s.
    let evolving = submit_job(&admin, "evolving", &["n1"], 1, "evo", 90).await;
    submit_job(&admin, "short", &["n2"], 1, "other", 60).await;
    submit_job(&admin, "big-alice", &["n3"], 2, "alice", 60).await;
    assert_eq!(job_of(&admin, "big-alice").await.group, "physics");
    let options = |addr| SessionOptions {
        arm: program_options(addr, state.path()),
        job: JobAuth::Credential { job: "evolving".into(), secret: evolving.clone() },
        node: "n1".into(),
        init_timeout: Some(Duration::from_secs(5)),
        stripes: 1,
        progress: false,
    };
    let session = Session::init(options(addr)).await.unwrap();
    let set = session.get(1).await.unwrap().expect("30 s of delay fit physics' 50");
    session.free(set).await.unwrap();
    session.finalize().await.unwrap();

    arm.kill_9();
    let _arm = ArmProcess::start_with_config(state.path(), &addr.to_string(), config);
    let admin = admin_of(addr, state.path()).await;
    admin.request(Request::JobEnd { id: "big-alice".into() }).await.unwrap();
    submit_job(&admin, "big-bob", &["n3"], 2, "bob", 60).await;
    let session = Session::init(options(addr)).await.unwrap();
    assert!(session.get(1).await.unwrap().is_none(), "another 30 s would take physics past 50 s in total");

    // A job of a user outside the group is not limited by it.
    admin.request(Request::JobEnd { id: "big-bob".into() }).await.unwrap();
    submit_job(&admin, "big-carol", &["n3"], 2, "carol", 60).await;
    assert!(session.get(1).await.unwrap().is_some(), "carol is a group of her own");
    session.finalize().await.unwrap();
}

/// An advance reservation: static starts and dynamic grants of other users plan around it, it is
/// refused where it does not fit, and its own job starts in it at its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_is_respected_by_static_and_dynamic_decisions() {
    let c = TestCluster::start(2).await;
    let admin = c.admin().await;
    let start = ac_proto::capability::unix_now() + 3;
    let create = |count, start, user: &str| Request::ReservationCreate {
        count,
        start,
        duration_s: 60,
        user: Some(user.into()),
        job: None,
    };
    let Response::Reservation(reservation) = admin.request(create(1, start, "carol")).await.unwrap() else { panic!() };
    assert_eq!(reservation.state, "planned");

    // `a` fits beside the reservation; `b` would hold the reserved accelerator past its start.
    let a = c.submit_as("a", &["n1"], 1, "alice", 3600).await;
    assert_eq!(c.job("a").await.state, "running");
    c.submit_as("b", &["n2"], 1, "bob", 3600).await;
    let b = c.job("b").await;
    assert_eq!(b.state, "queued", "a static start collided with the reservation");
    assert!(b.expected_start.unwrap() >= start + 60, "planned after the reservation: {:?}", b.expected_start);
    // A dynamic grant until `a`'s walltime would collide too.
    let session = Session::init(c.session_options("a", &a, "n1")).await.unwrap();
    assert!(session.get(1).await.unwrap().is_none(), "a dynamic grant collided with the reservation");
    // A second reservation that does not fit is refused.
    let err = admin.request(create(2, start + 5, "dave")).await.unwrap_err();
    assert!(matches!(err, ac_frontend::Error::Manager { kind: ac_proto::arm::ArmErrorKind::Conflict, .. }), "{err}");

    // carol's job runs in it, at its start.
    let request = Request::JobSubmit {
        id: "d".into(),
        nodes: vec!["n3".into()],
        acpn: 1,
        user: "carol".into(),
        walltime_s: 30,
        group: None,
        reservation: Some(reservation.id),
        peak: None,
    };
    admin.request(request).await.unwrap();
    let d = c.job("d").await;
    assert_eq!((d.state.as_str(), d.expected_start, d.reservation), ("queued", Some(start), Some(reservation.id)));
    let started = ac_tests::eventually(Duration::from_secs(10), || async { c.job("d").await.state == "running" }).await;
    assert!(started, "the reservation's job did not start");
    assert!(ac_proto::capability::unix_now() >= start, "started before the reservation");
    assert_eq!(c.job("b").await.state, "queued");
    let Response::Reservations(list) = admin.request(Request::ReservationList).await.unwrap() else { panic!() };
    assert_eq!((list[0].state.as_str(), list[0].jobs.clone()), ("active", vec!["d".to_string()]));
    session.finalize().await.unwrap();
}

/// A pre-allocation (CooRMv2): the owner's spare accelerators are lent to a preemptible request,
/// and when the owner grows into them the borrower is told and loses them after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_is_preempted_when_the_owner_grows() {
    let c = TestCluster::start_with(4, |config| config.preemption_grace_s = 1).await;
    let owner_credential = c.submit_with_peak("owner", "n1", 1, "olga", 3).await;
    let borrower_credential = c.submit_as("borrower", &["n2"], 1, "bert", 0).await;
    let owner_view = c.job("owner").await;
    assert_eq!((owner_view.static_accelerators.len(), owner_view.preallocated_unused.len()), (1, 2));
    let borrower = Session::init(c.session_options("borrower", &borrower_credential, "n2")).await.unwrap();
    let mut preemptions = borrower.preemptions();
    assert!(borrower.get(1).await.unwrap().is_none(), "nothing idle: the spares are not for ordinary requests");
    let loan = borrower.get_with(GetRequest::new(2).at_least(1).preemptible()).await.unwrap().expect("a loan");
    assert_eq!(loan.handles.len(), 2);
    for handle in &loan.handles {
        computes(&handle.acc).await.unwrap();
    }

    // The owner grows into one spare accelerator, without asking the fairness policy.
    let owner = Session::init(c.session_options("owner", &owner_credential, "n1")).await.unwrap();
    let grown = owner.get(1).await.unwrap().expect("the owner grows within its peak");
    let taken = grown.handles[0].id.clone();
    computes(&grown.handles[0].acc).await.unwrap();
    let notice = tokio::time::timeout(Duration::from_secs(10), preemptions.recv()).await.expect("told").unwrap();
    assert_eq!((notice.set, notice.accelerators.clone()), (loan.id, vec![taken.clone()]));
    // After the grace the borrower's capability for it is revoked; the other loan goes on.
    let lost = loan.handles.iter().find(|h| h.id == taken).unwrap();
    let kept = loan.handles.iter().find(|h| h.id != taken).unwrap();
    let refused = ac_tests::revoked_eventually(&lost.acc).await;
    assert!(matches!(refused, ac_frontend::Error::Revoked(_)), "revoked, not lost otherwise: {refused}");
    assert!(ac_proto::capability::unix_now() >= notice.revoke_at, "not before the grace ended");
    computes(&kept.acc).await.unwrap();
    computes(&grown.handles[0].acc).await.unwrap();
    assert_eq!(c.job("borrower").await.dynamic_accelerators.len(), 1);
    owner.finalize().await.unwrap();
    borrower.finalize().await.unwrap();
}

/// A manager given by several addresses (a replicated manager's: `ARM_ADDR=a,b,c`) is reached
/// through whichever answers: here the first is silent (a host that is down: a socket that never
/// answers), the second the manager. With none answering, the error names them all. `armctl
/// --arm a,b` does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_is_reached_through_any_of_its_addresses() {
    let c = TestCluster::start(1).await;
    let silent = [std::net::UdpSocket::bind("127.0.0.1:0").unwrap(), std::net::UdpSocket::bind("127.0.0.1:0").unwrap()];
    let [dead, dead_too] = silent.each_ref().map(|s| s.local_addr().unwrap());
    let credential = c.submit("j", &["n1"], 1).await;
    let mut options = c.session_options("j", &credential, "n1");
    let live = options.arm.addr;
    (options.arm.addr, options.arm.alternates) = (dead, vec![live]);
    let session = Session::init(options.clone()).await.expect("reached through its second address");
    computes(&session.accelerators()[0].acc).await.unwrap();
    session.finalize().await.unwrap();

    options.arm.alternates = vec![dead_too];
    let err = Session::init(options).await.unwrap_err();
    let named = |err: &ac_frontend::Error| {
        err.to_string().contains(&dead.to_string()) && err.to_string().contains(&dead_too.to_string())
    };
    assert!(matches!(err, ac_frontend::Error::ManagerUnreachable { .. }) && named(&err), "{err}");

    let list = format!("{dead},{live}");
    let (cert, key) = c.arm.admin_identity();
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new(ac_tests::workspace_binary("armctl"))
            .args(["--arm", &list, "--ca"])
            .arg(c.arm.ca_cert())
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key)
            .args(["host", "list"])
            .output()
            .expect("armctl runs")
    });
    assert!(out.status.success(), "armctl --arm {list}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("h0/0"));
}
