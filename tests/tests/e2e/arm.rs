//! The resource manager end to end: real manager, real backends, real QUIC on loopback.

use std::time::Duration;

use ac_frontend::{Error, Session};
use ac_proto::arm::{ArmErrorKind, JobAuth, Request, Response};
use ac_tests::{computes, eventually, revoked_eventually, TestCluster};

fn manager_error(e: &Error) -> Option<ArmErrorKind> {
    match e {
        Error::Manager { kind, .. } => Some(*kind),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_compete_and_the_second_waits_for_the_first() {
    let c = TestCluster::start(2).await;
    let a = c.submit("a", &["n1"], 2).await;
    let b = c.submit("b", &["n2"], 1).await;
    assert_eq!(c.job("a").await.state, "running");
    assert_eq!(c.job("b").await.state, "queued");
    let first = Session::init(c.session_options("a", &a, "n1")).await.unwrap();
    assert_eq!(first.accelerators().len(), 2);
    let ids: Vec<&str> = first.accelerators().iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["h0/0", "h1/0"], "stable order");
    for handle in first.accelerators() {
        computes(&handle.acc).await.unwrap();
    }
    // The second job's AC_Init waits, then proceeds once the first job ends.
    let mut options = c.session_options("b", &b, "n2");
    options.init_timeout = Some(Duration::from_millis(300));
    let err = Session::init(options).await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    let waiting = tokio::spawn(Session::init(c.session_options("b", &b, "n2")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.admin().await.request(Request::JobEnd { id: "a".into() }).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(second.accelerators().len(), 1);
    computes(&second.accelerators()[0].acc).await.unwrap();
    // The ended job's handles were revoked on their backends.
    let err = revoked_eventually(&first.accelerators()[0].acc).await;
    assert!(err.to_string().contains("revoked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_grant_rejection_and_release_of_a_subset() {
    let c = TestCluster::start(4).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    let static_handle = session.accelerators()[0].clone();
    let mut set = session.get(2).await.unwrap().expect("two are free");
    assert_eq!(set.handles.len(), 2);
    for h in &set.handles {
        computes(&h.acc).await.unwrap();
    }
    assert_eq!(c.arm.free_accelerators(), 1);
    assert!(session.get(2).await.unwrap().is_none(), "only one is free: rejected at once");
    let released = set.handles[0].id.clone();
    session.free_some(&mut set, &[released.as_str()]).await.unwrap();
    assert_eq!(c.arm.free_accelerators(), 2);
    assert_eq!(set.handles.len(), 1);
    computes(&set.handles[0].acc).await.unwrap();
    computes(&static_handle.acc).await.unwrap();
    session.free(set).await.unwrap();
    assert_eq!(c.arm.free_accelerators(), 3);
    session.finalize().await.unwrap();
    assert_eq!(c.job("j").await.static_accelerators.len(), 1, "finalize keeps the static binding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collective_get_is_all_or_nothing_and_released_together() {
    let c = TestCluster::start(4).await;
    let cred = c.submit("mpi", &["n1", "n2"], 1).await;
    let s1 = Session::init(c.session_options("mpi", &cred, "n1")).await.unwrap();
    let s2 = Session::init(c.session_options("mpi", &cred, "n2")).await.unwrap();
    assert!(s1.get_collective(&[("n1", 2), ("n2", 1)]).await.unwrap().is_none(), "3 asked, 2 free: nothing");
    assert_eq!(c.arm.free_accelerators(), 2);
    let mut mine = s1.get_collective(&[("n1", 1), ("n2", 1)]).await.unwrap().expect("granted");
    let theirs = s2.join_set(mine.id).await.unwrap();
    assert_eq!((mine.handles.len(), theirs.handles.len()), (1, 1));
    assert_ne!(mine.handles[0].id, theirs.handles[0].id);
    computes(&theirs.handles[0].acc).await.unwrap();
    let one = mine.handles[0].id.clone();
    let err = s1.free_some(&mut mine, &[one.as_str()]).await.unwrap_err();
    assert_eq!(manager_error(&err), Some(ArmErrorKind::Invalid), "{err}");
    s1.free(mine).await.unwrap();
    assert_eq!(c.arm.free_accelerators(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_keeps_existing_holders_and_stops_new_ones() {
    let c = TestCluster::start(2).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    let held = session.accelerators()[0].id.clone();
    let host = held.split('/').next().unwrap().to_string();
    c.admin().await.request(Request::HostDrain { name: host.clone(), drain: true }).await.unwrap();
    computes(&session.accelerators()[0].acc).await.unwrap();
    let hosts = c.hosts().await;
    let drained = hosts.iter().find(|h| h.name == host).unwrap();
    assert_eq!(drained.state, "draining");
    assert_eq!(drained.accelerators[0].state, "allocated");
    // The other host's accelerator can be had; nothing more.
    let set = session.get(1).await.unwrap().expect("the other host");
    assert_ne!(set.handles[0].id.split('/').next().unwrap(), host);
    assert!(session.get(1).await.unwrap().is_none());
    // Removing a busy host is refused without --force.
    let err = c.admin().await.request(Request::HostRemove { name: host.clone(), force: false }).await.unwrap_err();
    assert_eq!(manager_error(&err), Some(ArmErrorKind::Conflict), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_is_marked_down_and_its_holder_gets_an_error() {
    let mut c = TestCluster::start(2).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    let held = session.accelerators()[0].id.clone();
    let index: usize = held[1..held.find('/').unwrap()].parse().unwrap();
    let dead = c.backends.remove(index);
    dead.backend.shutdown().await;
    let result = tokio::time::timeout(Duration::from_secs(5), computes(&session.accelerators()[0].acc)).await;
    assert!(result.expect("an error, not a hang").is_err());
    let host = held.split('/').next().unwrap();
    assert!(host_state(&c, host, "down").await, "the host was not marked down");
    assert_eq!(c.arm.free_accelerators(), 1, "a down host's accelerators are not handed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_clients_dynamic_accelerators_return_after_the_lease() {
    let c = TestCluster::start(3).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    let set = session.get(2).await.unwrap().expect("granted");
    assert_eq!(c.arm.free_accelerators(), 0);
    std::mem::forget(set); // the program dies without AC_Free ...
    drop(session); // ... and without AC_Finalize: its connection to the manager goes away
    let back = eventually(Duration::from_secs(6), || async { c.arm.free_accelerators() == 2 }).await;
    assert!(back, "dynamic accelerators were not released after the lease");
    assert_eq!(c.job("j").await.static_accelerators.len(), 1, "static ones belong to the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_capabilities_are_checked() {
    let c = TestCluster::start(2).await;
    let a = c.submit("a", &["n1"], 1).await;
    let b = c.submit("b", &["n1"], 1).await;
    // A wrong credential, or a node outside the job, is refused.
    let err = Session::init(c.session_options("a", &b, "n1")).await.unwrap_err();
    assert_eq!(manager_error(&err), Some(ArmErrorKind::Unauthorized), "{err}");
    let err = Session::init(c.session_options("a", &a, "n9")).await.unwrap_err();
    assert_eq!(manager_error(&err), Some(ArmErrorKind::Unauthorized), "{err}");
    let sa = Session::init(c.session_options("a", &a, "n1")).await.unwrap();
    let sb = Session::init(c.session_options("b", &b, "n1")).await.unwrap();
    let (ha, hb) = (&sa.accelerators()[0], &sb.accelerators()[0]);
    assert_ne!(ha.id, hb.id);
    // Job b takes its own capability to job a's backend: refused (it names another host).
    let a_backend = &c.backends[ha.id[1..ha.id.find('/').unwrap()].parse::<usize>().unwrap()];
    let mut options = a_backend.options();
    options.capability = capability_of(&c, "b", &b, "n1").await;
    let err = ac_frontend::Accelerator::connect(&options).await.unwrap_err();
    assert!(err.to_string().contains("capability refused") && err.to_string().contains("is for host"), "{err}");
    // No capability at all: refused by a managed backend.
    let err = a_backend.connect_raw().await.unwrap_err();
    assert!(err.to_string().contains("a capability from the resource manager is required"), "{err}");
    // A forged capability (another key) and an expired one (the manager's key, past expiry).
    let forger =
        ac_proto::capability::Signer::from_pkcs8(&ac_proto::capability::Signer::generate_pkcs8().unwrap()).unwrap();
    let host = ha.id.split('/').next().unwrap().to_string();
    let grant =
        |expires| ac_proto::capability::Grant { id: 999, job: "a".into(), host: host.clone(), device: 0, expires };
    options.capability = forger.issue(&grant(u64::MAX));
    let err = ac_frontend::Accelerator::connect(&options).await.unwrap_err();
    assert!(err.to_string().contains("signature"), "{err}");
    let real = arm_server::keys::signer(c.state.path()).unwrap();
    options.capability = real.issue(&grant(1));
    let err = ac_frontend::Accelerator::connect(&options).await.unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");
    computes(&ha.acc).await.unwrap();
}

async fn capability_of(c: &TestCluster, job: &str, cred: &str, node: &str) -> Vec<u8> {
    let client = ac_frontend::arm::ArmClient::connect(c.arm_options()).await.unwrap();
    let auth = JobAuth::Credential { job: job.into(), secret: cred.into() };
    match client.request(Request::Init { auth, node: node.into(), token: ac_proto::random_hex(32) }).await.unwrap() {
        ac_proto::arm::Response::Session { state: ac_proto::arm::SessionState::Bound(grants), .. } => {
            grants[0].capability.clone()
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_reads_each_request_to_its_end_and_never_stops_a_stream() {
    let c = TestCluster::start(1).await;
    let client = ac_frontend::arm::ArmClient::connect(c.arm_options()).await.unwrap();
    // Refusals and answers alike: each is a stream of its own.
    for _ in 0..50 {
        let err = client.request(Request::HostList).await.unwrap_err();
        assert_eq!(manager_error(&err), Some(ArmErrorKind::Unauthorized), "{err}");
    }
    let stats = client.stats().await.expect("connected");
    assert_eq!(stats.frame_rx.stop_sending, 0, "the manager stopped a request stream it had answered");
    assert!(stats.frame_rx.stream >= 50, "every answer arrived: {:?}", stats.frame_rx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_requests_need_the_admin_certificate() {
    let c = TestCluster::start(1).await;
    let anonymous = ac_frontend::arm::ArmClient::connect(c.arm_options()).await.unwrap();
    for request in
        [Request::HostList, Request::JobList { all: false }, Request::HostRemove { name: "h0".into(), force: true }]
    {
        let err = anonymous.request(request).await.unwrap_err();
        assert_eq!(manager_error(&err), Some(ArmErrorKind::Unauthorized), "{err}");
    }
    assert_eq!(c.hosts().await.len(), 1, "nothing was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_creates_an_ad_hoc_job_that_ends_with_the_session() {
    let c = TestCluster::start(2).await;
    let mut options = c.session_options("", "", "laptop");
    options.job = JobAuth::AdHoc { acpn: 1 };
    let session = Session::init(options).await.unwrap();
    computes(&session.accelerators()[0].acc).await.unwrap();
    let set = session.get(1).await.unwrap().expect("one more");
    computes(&set.handles[0].acc).await.unwrap();
    session.free(set).await.unwrap();
    let job = session.job().to_string();
    session.finalize().await.unwrap();
    assert_eq!(c.job(&job).await.state, "ended");
    assert_eq!(c.arm.free_accelerators(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_removal_revokes_and_tells_the_holder() {
    let c = TestCluster::start(2).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    let held = session.accelerators()[0].id.clone();
    let host = held.split('/').next().unwrap().to_string();
    c.admin().await.request(Request::HostRemove { name: host.clone(), force: true }).await.unwrap();
    let err = revoked_eventually(&session.accelerators()[0].acc).await;
    assert!(err.to_string().contains("revoked"), "{err}");
    assert!(c.hosts().await.iter().all(|h| h.name != host));
    assert!(c.job("j").await.static_accelerators.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_allocations_end_with_the_walltime() {
    let c = TestCluster::start(1).await;
    let request = Request::JobSubmit {
        id: "short".into(),
        nodes: vec!["n1".into()],
        acpn: 1,
        user: "u".into(),
        walltime_s: 1,
        group: None,
        reservation: None,
        peak: None,
    };
    c.admin().await.request(request).await.unwrap();
    assert_eq!(c.job("short").await.state, "running");
    let ended = eventually(Duration::from_secs(4), || async { c.job("short").await.state == "ended" }).await;
    assert!(ended, "the job outlived its walltime");
    assert_eq!(c.arm.free_accelerators(), 1);
}

async fn host_state(c: &TestCluster, name: &str, want: &str) -> bool {
    eventually(Duration::from_secs(6), || async { c.hosts().await.iter().any(|h| h.name == name && h.state == want) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_returns_is_marked_up_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_path_buf();
    let mut c = TestCluster::start(0).await;
    let first = ac_tests::TestBackend::start_with(|cfg| cfg.state_dir = state.clone()).await;
    let addr = first.backend.addr();
    c.backends.push(first);
    c.add_host(0).await;
    assert!(host_state(&c, "h0", "up").await);
    c.backends.pop().unwrap().backend.shutdown().await;
    assert!(host_state(&c, "h0", "down").await, "not marked down");
    let again = ac_tests::TestBackend::start_with(|cfg| {
        cfg.state_dir = state.clone();
        cfg.listen = addr;
    })
    .await;
    assert!(host_state(&c, "h0", "up").await, "not marked up again");
    let cred = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &cred, "n1")).await.unwrap();
    computes(&session.accelerators()[0].acc).await.unwrap();
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_process_loses_its_dynamic_accelerators_after_the_lease() {
    use tokio::io::AsyncBufReadExt;
    let c = TestCluster::start(3).await;
    let cred = c.submit("j", &["n1"], 1).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ac-test-client"))
        .env("ARM_ADDR", c.arm.addr().to_string())
        .env("ARM_CA_CERT", c.arm.ca_cert())
        .env("ARM_JOB_ID", "j")
        .env("ARM_JOB_CREDENTIAL", &cred)
        .env("ARM_NODE", "n1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap();
    assert_eq!(first.as_deref(), Some("holding"));
    assert_eq!(c.arm.free_accelerators(), 0);
    child.kill().await.unwrap(); // SIGKILL: no AC_Free, no AC_Finalize, no goodbye
    let back = eventually(Duration::from_secs(10), || async { c.arm.free_accelerators() == 2 }).await;
    assert!(back, "the killed program's dynamic accelerators did not come back");
    assert_eq!(c.job("j").await.dynamic_accelerators.len(), 0);
    assert_eq!(c.job("j").await.static_accelerators.len(), 1);
}

/// A program that exits the moment `AC_Finalize` returns leaves nothing behind: the manager has
/// released its accelerators (and ended its ad-hoc job) before answering, with no lease to wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_exits_right_after_finalize_leaves_nothing_behind() {
    let c = TestCluster::start_with(3, |config| config.lease_ms = 60_000).await;
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_ac-test-client"))
        .arg("finalize-at-once")
        .env("ARM_ADDR", c.arm.addr().to_string())
        .env("ARM_CA_CERT", c.arm.ca_cert())
        .env("ARM_ACPN", "1")
        .env("ARM_NODE", "n1")
        .status()
        .await
        .unwrap();
    assert!(status.success());
    // Checked at once: a lease of a minute would still be running if the manager had not been told.
    assert_eq!(c.arm.free_accelerators(), 3, "the program's accelerators were not released");
    let Response::Jobs(jobs) = c.admin().await.request(Request::JobList { all: true }).await.unwrap() else { panic!() };
    assert!(jobs.iter().all(|j| j.state == "ended"), "{jobs:?}");
}
