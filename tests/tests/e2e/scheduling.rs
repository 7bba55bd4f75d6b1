//! The scheduling core behind the real ARM: dynamic requests follow the configured fairness
//! policy, and the planning view reaches admins and waiting programs.

use ac_frontend::Session;
use ac_proto::arm::Request;
use ac_tests::TestCluster;
use arm_sched::{DynPolicy, Limits};

/// Three accelerators: `evolving` (1 h) and `short` (60 s) run on one each; `big` needs two and
/// is planned when `short` ends. Granting the third to `evolving` until its walltime would push
/// `big` back by almost an hour.
async fn figure_1(c: &TestCluster, big_user: &str) -> Session {
    let evolving = c.submit_as("evolving", &["n1"], 1, "evo", 3600).await;
    c.submit_as("short", &["n2"], 1, "other", 60).await;
    c.submit_as("big", &["n3"], 2, big_user, 60).await;
    assert_eq!(c.job("big").await.state, "queued");
    Session::init(c.session_options("evolving", &evolving, "n1")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_requests_follow_the_configured_fairness_policy() {
    let c = TestCluster::start_with(3, |config| {
        config.scheduler.dynamic.policy = DynPolicy::SingleJobDelay;
        let never = Limits { dyn_delay_perm: Some(false), ..Default::default() };
        config.scheduler.dynamic.users.insert("protected".into(), never);
    })
    .await;
    let session = figure_1(&c, "protected").await;
    let view = c.job("big").await;
    let now = ac_proto::capability::unix_now();
    let expected = view.expected_start.expect("the planning view has a start for it");
    assert!(expected > now && expected <= now + 61, "planned when `short` ends: {expected} vs now {now}");
    assert!(session.get(1).await.unwrap().is_none(), "the grant would delay a protected user's job");

    // The same request is fine when the queued job's user may be delayed.
    c.admin().await.request(Request::JobEnd { id: "big".into() }).await.unwrap();
    c.submit_as("big2", &["n3"], 2, "flexible", 60).await;
    let set = session.get(1).await.unwrap().expect("nothing protected is delayed");
    assert_eq!(set.handles.len(), 1);
    session.finalize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn highest_priority_grants_whatever_it_delays() {
    let c = TestCluster::start(3).await;
    let session = figure_1(&c, "protected").await;
    assert!(session.get(1).await.unwrap().is_some(), "the default policy ignores delays");
    let view = c.job("big").await;
    let now = ac_proto::capability::unix_now();
    assert!(view.expected_start.unwrap() >= now + 3000, "`big` now waits for `evolving`'s walltime");
    session.finalize().await.unwrap();
}
