//! `kill -9` of the resource manager and a restart: hosts, jobs and allocations are all there,
//! running programs keep computing, and their sessions resume.

use std::time::Duration;

use ac_frontend::arm::ArmOptions;
use ac_frontend::Session;
use ac_proto::arm::{JobAuth, Request, Response};
use ac_tests::{admin_of, computes, job_of, quick_tuning, register_hosts, submit_job, ArmProcess, TestBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_keeps_every_allocation() {
    let state = tempfile::tempdir().unwrap();
    let arm = ArmProcess::start(state.path(), "127.0.0.1:0");
    let addr = arm.addr;
    let backends = [TestBackend::start(64).await, TestBackend::start(64).await, TestBackend::start(64).await];
    let ctl = admin_of(addr, state.path()).await;
    register_hosts(&ctl, &backends).await;
    let credential = submit_job(&ctl, "j", &["n1"], 1, "u", 0).await;
    submit_job(&ctl, "big", &["n1"], 3, "u", 0).await;
    let mut arm_options = ArmOptions::new(addr, state.path().join("ca.pem"));
    arm_options.tuning = quick_tuning();
    let options = ac_frontend::SessionOptions {
        arm: arm_options,
        job: JobAuth::Credential { job: "j".into(), secret: credential },
        node: "n1".into(),
        init_timeout: Some(Duration::from_secs(5)),
        stripes: 1,
        progress: false,
    };
    let session = Session::init(options).await.unwrap();
    let set = session.get(1).await.unwrap().expect("granted");
    let before = job_of(&ctl, "j").await;
    assert_eq!((before.static_accelerators.len(), before.dynamic_accelerators.len()), (1, 1));

    arm.kill_9();
    // The data plane does not need the manager.
    computes(&session.accelerators()[0].acc).await.unwrap();
    computes(&set.handles[0].acc).await.unwrap();

    let _arm = ArmProcess::start(state.path(), &addr.to_string());
    let ctl = admin_of(addr, state.path()).await;
    let after = job_of(&ctl, "j").await;
    assert_eq!(after.static_accelerators, before.static_accelerators);
    assert_eq!(after.dynamic_accelerators, before.dynamic_accelerators);
    assert_eq!(after.state, "running");
    assert_eq!(job_of(&ctl, "big").await.state, "queued", "the queue survives too");
    let Response::Hosts(hosts) = ctl.request(Request::HostList).await.unwrap() else { panic!() };
    assert_eq!(hosts.len(), 3);
    // The program's session resumes transparently: its next calls reconnect.
    assert!(session.get(5).await.unwrap().is_none(), "rejected, not an error");
    session.free(set).await.unwrap();
    assert_eq!(job_of(&ctl, "j").await.dynamic_accelerators.len(), 0);
    session.finalize().await.unwrap();
}
