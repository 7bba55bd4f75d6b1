//! Revocations outlive crashes: the manager keeps one until the backend acknowledges it and
//! sends it again after its own restart; a backend keeps its list on disk until the capabilities
//! expire. Each is checked with `kill -9` of a real process.

use std::time::Duration;

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::arm::{Grant, JobAuth, Request, Response, SessionState};
use ac_tests::{admin_of, computes, eventually, quick_tuning, submit_job, ArmProcess, BackendProcess};

/// A manager and one backend as processes; a job `j` bound to the backend's accelerator.
/// Returns the grant its program received.
async fn bound_job(arm_dir: &std::path::Path, arm: &ArmProcess, backend: &BackendProcess) -> Grant {
    let admin = admin_of(arm.addr, arm_dir).await;
    let ca_pem = std::fs::read_to_string(backend.dir.join("ca.pem")).unwrap();
    let add = Request::HostAdd {
        addr: backend.addr,
        name: "h0".into(),
        server_name: "127.0.0.1".into(),
        ca_pem,
        labels: vec![],
    };
    admin.request(add).await.unwrap();
    let credential = submit_job(&admin, "j", &["n1"], 1, "u", 0).await;
    let mut options = ArmOptions::new(arm.addr, arm_dir.join("ca.pem"));
    options.tuning = quick_tuning();
    let program = ArmClient::connect(options).await.unwrap();
    let auth = JobAuth::Credential { job: "j".into(), secret: credential };
    let init = Request::Init { auth, node: "n1".into(), token: ac_proto::random_hex(32) };
    let Response::Session { state: SessionState::Bound(grants), .. } = program.request(init).await.unwrap() else {
        panic!("not bound")
    };
    grants.into_iter().next().expect("one accelerator")
}

/// Opens a session with the capability of `grant`.
async fn open(grant: &Grant) -> Result<Accelerator, ac_frontend::Error> {
    let mut options = ConnectOptions::new(grant.addr, "");
    options.server_name = grant.server_name.clone();
    options.ca_pem = Some(grant.ca_pem.clone());
    options.capability = grant.capability.clone();
    options.device = grant.device;
    options.stripes = 1;
    options.tuning = quick_tuning();
    Accelerator::connect(&options).await
}

/// Whether the backend refuses `grant`'s capability as revoked (a session that opens is closed).
async fn refused_as_revoked(grant: &Grant) -> bool {
    match open(grant).await {
        Ok(acc) => {
            acc.close().await;
            false
        }
        Err(e) => e.to_string().contains("revoked"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_backend_still_refuses_a_revoked_capability() {
    let (arm_dir, backend_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let arm = ArmProcess::start(arm_dir.path(), "127.0.0.1:0");
    let backend = BackendProcess::start(backend_dir.path(), "127.0.0.1:0");
    let grant = bound_job(arm_dir.path(), &arm, &backend).await;
    computes(&open(&grant).await.unwrap()).await.unwrap();

    let admin = admin_of(arm.addr, arm_dir.path()).await;
    admin.request(Request::JobEnd { id: "j".into() }).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || refused_as_revoked(&grant)).await, "never revoked");
    // The manager forgets it once the backend has stored it; stop the manager so that nothing
    // could send it again, then crash the backend.
    arm.kill_9();
    let addr = backend.addr.to_string();
    backend.kill_9();
    let _backend = BackendProcess::start(backend_dir.path(), &addr);
    assert!(refused_as_revoked(&grant).await, "the restarted backend accepted a revoked capability");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_the_backend_missed_is_sent_again_after_the_manager_restarts() {
    let (arm_dir, backend_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let arm = ArmProcess::start(arm_dir.path(), "127.0.0.1:0");
    let backend = BackendProcess::start(backend_dir.path(), "127.0.0.1:0");
    let grant = bound_job(arm_dir.path(), &arm, &backend).await;
    let backend_addr = backend.addr.to_string();
    // The backend is down when the job ends: the revocation cannot be delivered.
    backend.kill_9();
    admin_of(arm.addr, arm_dir.path()).await.request(Request::JobEnd { id: "j".into() }).await.unwrap();
    let arm_addr = arm.addr.to_string();
    arm.kill_9();
    // Both come back; only the manager's store remembers the revocation.
    let _arm = ArmProcess::start(arm_dir.path(), &arm_addr);
    let _backend = BackendProcess::start(backend_dir.path(), &backend_addr);
    assert!(
        eventually(Duration::from_secs(15), || refused_as_revoked(&grant)).await,
        "the revocation was lost with the manager"
    );
}
