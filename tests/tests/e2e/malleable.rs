//! Elastic grants through the real manager: a program lent accelerators
//! (`GetRequest::elastic`) is told of a reclaim when a queued job could start with them, may
//! use them until the deadline, and loses them then unless it frees them; other programs are
//! unaffected; a reclaim survives a `kill -9` of the manager.

use std::time::Duration;

use ac_frontend::arm::ArmOptions;
use ac_frontend::{GetRequest, Session};
use ac_proto::arm::JobAuth;
use ac_proto::capability::unix_now;
use ac_tests::{
    admin_of, computes, eventually, job_of, quick_tuning, register_hosts, revoked_eventually, submit_job, ArmProcess,
    TestBackend, TestCluster,
};

/// A job `lender` (1 static, on `n1`) holds 2 more lent with `notice`, a job `other` runs beside
/// it, and the pool of 4 is full.
async fn lent(c: &TestCluster, notice: Duration) -> (Session, Session, ac_frontend::DynamicSet) {
    let lender_credential = c.submit_as("lender", &["n1"], 1, "lena", 0).await;
    let other_credential = c.submit_as("other", &["n2"], 1, "otto", 0).await;
    let lender = Session::init(c.session_options("lender", &lender_credential, "n1")).await.unwrap();
    let other = Session::init(c.session_options("other", &other_credential, "n2")).await.unwrap();
    let set = lender.get_with(GetRequest::new(2).elastic(notice)).await.unwrap().expect("lent what is idle");
    assert_eq!(set.handles.len(), 2);
    for handle in &set.handles {
        computes(&handle.acc).await.unwrap();
    }
    (lender, other, set)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_ignores_a_reclaim_loses_the_accelerators_at_the_deadline_and_only_those() {
    let c = TestCluster::start(4).await;
    let (lender, other, mut set) = lent(&c, Duration::from_secs(3)).await;
    let mut reclaims = lender.preemptions();
    // A queued job of 2 could start with the lent accelerators: they are reclaimed for it.
    let asked = unix_now();
    c.submit_as("queued", &["n3"], 2, "quinn", 60).await;
    let notice = tokio::time::timeout(Duration::from_secs(10), reclaims.recv()).await.expect("told").unwrap();
    assert_eq!(notice.set, set.id);
    assert_eq!(notice.accelerators.len(), 2);
    assert!(notice.revoke_at >= asked + 3, "at least the notice: {} from {asked}", notice.revoke_at);
    // Until the deadline the program may go on; the job waits for them.
    for handle in &set.handles {
        computes(&handle.acc).await.unwrap();
    }
    assert_eq!(c.job("queued").await.state, "queued");
    // The program ignores it: at the deadline its capabilities go and the job starts.
    let error = revoked_eventually(&set.handles[0].acc).await;
    assert!(unix_now() >= notice.revoke_at, "not before the deadline");
    assert!(matches!(error, ac_frontend::Error::Revoked(_)), "{error}");
    let started = eventually(Duration::from_secs(5), || async { c.job("queued").await.state == "running" }).await;
    assert!(started, "the queued job did not start: {:?}", c.job("queued").await);
    assert_eq!(c.job("lender").await.dynamic_accelerators.len(), 0);
    // Giving them back late is not an error (they are gone already), and the set empties; an
    // accelerator that was never in the set is refused before the manager is asked.
    let stranger = lender.free_some(&mut set, &["h9/0"]).await.unwrap_err();
    assert!(matches!(stranger, ac_frontend::Error::InvalidArgument(_)), "{stranger}");
    let ids: Vec<&str> = notice.accelerators.iter().map(String::as_str).collect();
    lender.free_some(&mut set, &ids[..1]).await.expect("one given back after its revocation");
    assert_eq!(set.handles.len(), 1);
    lender.free(set).await.expect("the rest, gone too: done");
    // Nothing else was touched: the lender's static accelerator, the other job's.
    computes(&lender.accelerators()[0].acc).await.unwrap();
    computes(&other.accelerators()[0].acc).await.unwrap();
    lender.finalize().await.unwrap();
    other.finalize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_frees_reclaimed_accelerators_lets_the_queued_job_start_before_the_deadline() {
    let c = TestCluster::start(4).await;
    let (lender, other, mut set) = lent(&c, Duration::from_secs(30)).await;
    let mut reclaims = lender.preemptions();
    c.submit_as("queued", &["n3"], 1, "quinn", 60).await;
    let notice = tokio::time::timeout(Duration::from_secs(10), reclaims.recv()).await.expect("told").unwrap();
    assert_eq!(notice.accelerators.len(), 1, "the fewest accelerators that start the job");
    let ids: Vec<&str> = notice.accelerators.iter().map(String::as_str).collect();
    lender.free_some(&mut set, &ids).await.unwrap();
    let started = eventually(Duration::from_secs(10), || async { c.job("queued").await.state == "running" }).await;
    assert!(started && unix_now() < notice.revoke_at, "started at once, well before the deadline");
    // The other lent accelerator stays lent, and in use.
    assert_eq!(set.handles.len(), 1);
    computes(&set.handles[0].acc).await.unwrap();
    computes(&other.accelerators()[0].acc).await.unwrap();
    lender.finalize().await.unwrap();
    other.finalize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_in_progress_survives_a_kill_9_of_the_manager() {
    let state = tempfile::tempdir().unwrap();
    let arm = ArmProcess::start(state.path(), "127.0.0.1:0");
    let addr = arm.addr;
    let backends = [TestBackend::start(64).await, TestBackend::start(64).await];
    let ctl = admin_of(addr, state.path()).await;
    register_hosts(&ctl, &backends).await;
    let credential = submit_job(&ctl, "lender", &["n1"], 1, "lena", 0).await;
    let mut arm_options = ArmOptions::new(addr, state.path().join("ca.pem"));
    arm_options.tuning = quick_tuning();
    let options = ac_frontend::SessionOptions {
        arm: arm_options,
        job: JobAuth::Credential { job: "lender".into(), secret: credential },
        node: "n1".into(),
        init_timeout: Some(Duration::from_secs(5)),
        stripes: 1,
        progress: false,
    };
    let lender = Session::init(options).await.unwrap();
    let mut reclaims = lender.preemptions();
    let set = lender.get_with(GetRequest::new(1).elastic(Duration::from_secs(4))).await.unwrap().expect("lent");
    submit_job(&ctl, "queued", &["n2"], 1, "quinn", 60).await;
    let notice = tokio::time::timeout(Duration::from_secs(10), reclaims.recv()).await.expect("told").unwrap();
    arm.kill_9();
    let _arm = ArmProcess::start(state.path(), &addr.to_string());
    let ctl = admin_of(addr, state.path()).await;
    assert_eq!(job_of(&ctl, "queued").await.state, "queued", "the job still waits for the reclaimed accelerator");
    // The restarted manager keeps the deadline: the accelerator is revoked then, and the job
    // starts on it.
    let refused = revoked_eventually(&set.handles[0].acc).await;
    assert!(matches!(refused, ac_frontend::Error::Revoked(_)), "revoked, not lost otherwise: {refused}");
    assert!(unix_now() >= notice.revoke_at, "not before the deadline");
    let started =
        eventually(Duration::from_secs(5), || async { job_of(&ctl, "queued").await.state == "running" }).await;
    assert!(started, "{:?}", job_of(&ctl, "queued").await);
    // The same reclaim, not a new one with a later deadline.
    assert!(reclaims.try_recv().is_err(), "a second reclaim: {:?}", reclaims.try_recv());
    lender.finalize().await.unwrap();
}

/// One iteration of a program spread over `accs`: `y = 2x + y` on `n` elements, each
/// accelerator computing its share; the values that came back wrong.
async fn spread_saxpy(accs: &[ac_frontend::Accelerator], n: usize, round: u32) -> usize {
    let x = ac_tests::pattern(n, round);
    let y = ac_tests::pattern(n, round + 1);
    let share = n.div_ceil(accs.len());
    let parts = accs.iter().zip(x.chunks(share).zip(y.chunks(share))).map(|(acc, (x, y))| async move {
        let (dx, dy) = (acc.alloc_from(x).await.unwrap(), acc.alloc_from(y).await.unwrap());
        let saxpy = acc.builtin().await.unwrap().function("saxpy").await.unwrap();
        let args = [2.0f32.into(), dx.arg(), dy.arg(), (x.len() as u64).into()];
        saxpy.launch(ac_frontend::LaunchDims::linear(x.len() as u64, 256), &args).await.unwrap();
        dy.to_vec().await.unwrap()
    });
    let got: Vec<f32> = futures_util::future::join_all(parts).await.concat();
    assert_eq!(got.len(), n);
    got.iter().zip(x.iter().zip(&y)).filter(|(g, (x, y))| **g != 2.0 * **x + **y).count()
}

/// A program that resizes at reconfiguration points (`Resizer::check`, `AC_Check`'s Rust form)
/// computes the right result across resizes. With one static accelerator in a pool of 4, its
/// first check expands it to its preferred 4 (lent); a queued job of 2 then could start on the
/// lent ones: a check says to shrink, the program gives back what is reclaimed, and the queued
/// job starts well before the notice runs out. Every iteration, on 1, 4 or 2 accelerators, is
/// right, and no check expands it again onto the queued job's accelerators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_resizing_at_check_points_computes_right_across_resizes() {
    use ac_frontend::{Bounds, Reconfiguration};
    let c = TestCluster::start(4).await;
    let credential = c.submit_as("iter", &["n1"], 1, "ida", 0).await;
    let session = Session::init(c.session_options("iter", &credential, "n1")).await.unwrap();
    let notice = Duration::from_secs(30);
    let mut resizer = session.resizer(notice, Duration::ZERO);
    let bounds = Bounds::new(1, 4, 4);
    let mut lent: Vec<ac_frontend::DynamicSet> = Vec::new();
    let (mut sizes, mut queued_at, mut started_at) = (Vec::new(), None, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for round in 0u32.. {
        let mut accs: Vec<_> = session.accelerators().iter().map(|h| h.acc.clone()).collect();
        accs.extend(lent.iter().flat_map(|set| set.handles.iter().map(|h| h.acc.clone())));
        assert_eq!(spread_saxpy(&accs, 100_000, round).await, 0, "round {round} on {} accelerators", accs.len());
        if sizes.last() != Some(&accs.len()) {
            sizes.push(accs.len());
        }
        match resizer.check(&session, accs.len() as u32, bounds).await.unwrap() {
            Reconfiguration::Keep => {}
            Reconfiguration::Expand { set, .. } => lent.push(set),
            Reconfiguration::Shrink { set, accelerators, by } => {
                assert!(by >= unix_now() + notice.as_secs() - 5, "the notice is given: {by}");
                let set = lent.iter_mut().find(|s| s.id == set).expect("a lent set of this program's");
                let ids: Vec<&str> = accelerators.iter().map(String::as_str).collect();
                session.free_some(set, &ids).await.unwrap();
            }
        }
        if accs.len() == 4 && queued_at.is_none() {
            c.submit_as("queued", &["n3"], 2, "quinn", 60).await;
            queued_at = Some(unix_now());
        }
        if started_at.is_none() && queued_at.is_some() && c.job("queued").await.state == "running" {
            started_at = Some(unix_now());
        }
        // A few more rounds after the job started: no check may expand onto its accelerators.
        if started_at.is_some_and(|at| unix_now() >= at + 2) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sizes so far: {sizes:?}");
    }
    assert_eq!(sizes, vec![1, 4, 2], "expanded to the preferred count, then shrunk by the reclaim");
    let waited = started_at.unwrap() - queued_at.unwrap();
    assert!(waited < notice.as_secs() / 2, "the queued job started {waited} s after it was queued");
    session.finalize().await.unwrap();
}

/// An elastic grant says until when the manager's plan leaves it to the program: the planned
/// start of the first queued job (here when a running job's walltime ends), or nothing when no
/// job is queued. Pool of 4: the lender holds 1, a job of 2 runs for 100 s, the fourth is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_grant_says_until_when_the_plan_leaves_it() {
    let c = TestCluster::start(4).await;
    let credential = c.submit_as("lender", &["n1"], 1, "lena", 0).await;
    let started = unix_now();
    c.submit_as("long", &["n2"], 2, "lou", 100).await;
    let session = Session::init(c.session_options("lender", &credential, "n1")).await.unwrap();
    let elastic = || GetRequest::new(1).elastic(Duration::from_secs(10));
    let alone = session.get_with(elastic()).await.unwrap().expect("the idle one, lent");
    assert_eq!(alone.until, None, "nothing queued: lent until a reclaim");
    session.free(alone).await.unwrap();
    c.submit_as("big", &["n3"], 3, "bo", 60).await;
    let lent = session.get_with(elastic()).await.unwrap().expect("lent: it is back before `big` could start");
    let until = lent.until.expect("`big` is planned");
    assert_eq!(Some(until), c.job("big").await.expected_start, "the plan's start of `big`");
    assert!((started + 99..=unix_now() + 100).contains(&until), "when `long` ends: {until}, started {started}");
    session.finalize().await.unwrap();
}
