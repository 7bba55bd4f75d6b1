//! Safe in an operator's hands: closed packaged defaults, roles and revocation of client
//! certificates, and rolling upgrades (a program, backend or manager of the protocol version
//! before beside ones of this version).

use std::path::Path;

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::arm::{JobAuth, Request, Response};
use ac_tests::{computes, pattern, workspace_binary, TestBackend, TestCluster};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace")
}

/// An ad-hoc program's options: one accelerator on node n1.
fn ad_hoc(arm: ArmOptions) -> ac_frontend::SessionOptions {
    ac_frontend::SessionOptions {
        arm,
        job: JobAuth::AdHoc { acpn: 1 },
        node: "n1".into(),
        init_timeout: Some(std::time::Duration::from_secs(10)),
        stripes: 1,
        progress: false,
    }
}

/// The packaged configurations, parsed as the daemons parse them.
#[test]
fn the_packaged_defaults_are_closed() {
    let arm = std::fs::read_to_string(repo().join("packaging/arm-server/arm-server.toml")).unwrap();
    let arm = arm_server::ArmConfig::from_toml(&arm).unwrap();
    assert!(!arm.ad_hoc_allowed(), "the packaged manager refuses ad-hoc jobs");
    let with_slurm = arm_server::ArmConfig::from_toml("[slurm]\nenabled = true\n").unwrap();
    assert!(!with_slurm.ad_hoc_allowed(), "with Slurm, ad-hoc jobs are off unless allowed");
    let backend = std::fs::read_to_string(repo().join("packaging/ac-backend/ac-backend.toml")).unwrap();
    let backend = ac_backend::BackendConfig::from_toml(&backend).unwrap();
    assert!(!backend.open_until_registered, "the packaged backend serves nobody until registered");
}

/// A closed backend (the packaged default) refuses a program before a manager registers it,
/// refuses a manager other than the one it names, and serves programs with that manager's
/// capabilities once registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_backend_serves_only_through_the_manager_it_names() {
    let c = TestCluster::start_with(0, |config| config.allow_ad_hoc = Some(true)).await;
    let key = match c.admin().await.request(Request::ManagerKey).await.unwrap() {
        Response::ManagerKey(key) => key,
        other => panic!("{other:?}"),
    };
    // Anyone may ask for the key: it is public.
    let anyone = ArmClient::connect(c.arm_options()).await.unwrap();
    assert_eq!(anyone.request(Request::ManagerKey).await.unwrap(), Response::ManagerKey(key.clone()));

    let other = "ab".repeat(32);
    let pinned_elsewhere = TestBackend::start_with(|b| {
        b.open_until_registered = false;
        b.arm_public_key = Some(other);
    })
    .await;
    let refused = pinned_elsewhere.connect_raw().await.unwrap_err().to_string();
    assert!(refused.contains("serves nobody until its resource manager registers it"), "{refused}");

    let closed = TestBackend::start_with(|b| {
        b.open_until_registered = false;
        b.arm_public_key = Some(key);
    })
    .await;
    let refused = closed.connect_raw().await.unwrap_err().to_string();
    assert!(refused.contains("serves nobody until"), "an unregistered program: {refused}");

    let mut c = c;
    c.backends = vec![pinned_elsewhere, closed];
    let admin = c.admin().await;
    let add = |i: usize| Request::HostAdd {
        addr: c.backends[i].backend.addr(),
        name: format!("h{i}"),
        server_name: "127.0.0.1".into(),
        ca_pem: std::fs::read_to_string(c.backends[i].backend.ca_cert()).unwrap(),
        labels: vec![],
    };
    let wrong = admin.request(add(0)).await.unwrap_err().to_string();
    assert!(wrong.contains("trusts another resource manager"), "{wrong}");
    admin.request(add(1)).await.expect("the named manager registers it");
    let refused = c.backends[1].connect_raw().await.unwrap_err().to_string();
    assert!(refused.contains("capability"), "registered, a capability is needed: {refused}");

    // Through the manager, an ad-hoc program (allowed here) computes on it.
    let session = ac_frontend::Session::init(ad_hoc(c.arm_options())).await.expect("AC_Init");
    computes(&session.accelerators()[0].acc).await.unwrap();
    session.finalize().await.unwrap();
}

/// A manager with ad-hoc jobs off refuses a program without a job, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ad_hoc_jobs_off_refuse_a_program_without_a_job() {
    let c = TestCluster::start_with(1, |config| config.allow_ad_hoc = Some(false)).await;
    let refused = ac_frontend::Session::init(ad_hoc(c.arm_options())).await.unwrap_err().to_string();
    assert!(refused.contains("ad-hoc jobs are disabled"), "{refused}");
}

/// Runs `armctl` against the cluster with the client identity `name` (files in the manager's
/// state directory); its exit code and what it said.
fn armctl_as(c: &TestCluster, name: &str, args: &[&str]) -> (i32, String) {
    let dir = c.state.path();
    let out = std::process::Command::new(workspace_binary("armctl"))
        .args(["--arm", &c.arm.addr().to_string()])
        .arg("--ca")
        .arg(c.arm.ca_cert())
        .arg("--cert")
        .arg(dir.join(format!("{name}.pem")))
        .arg("--key")
        .arg(dir.join(format!("{name}.key")))
        .args(args)
        .output()
        .expect("armctl runs");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), said)
}

fn issue(c: &TestCluster, role: &str, name: &str, extra: &[&str]) {
    let dir = c.state.path();
    let out = std::process::Command::new(workspace_binary("armctl"))
        .args(["cert", "issue", "--role", role, "--name", name, "--out"])
        .arg(dir)
        .arg("--state-dir")
        .arg(dir)
        .args(extra)
        .output()
        .expect("armctl runs");
    assert!(out.status.success(), "cert issue: {}", String::from_utf8_lossy(&out.stderr));
}

/// The batch role binds and releases jobs and nothing else; a revoked certificate is refused
/// from its next request, without a new CA; an expired one is refused by TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_role_binds_jobs_only_and_revoked_or_expired_certificates_are_refused() {
    let c = TestCluster::start(1).await;
    issue(&c, "batch", "slurmctld", &[]);
    issue(&c, "admin", "alice", &[]);
    let past = (ac_proto::capability::unix_now() - 60).to_string();
    issue(&c, "admin", "bob", &["--until", &past]);

    let backend_ca = c.backends[0].backend.ca_cert();
    let add = ["host", "add", "127.0.0.1:9", "--backend-ca", backend_ca.to_str().unwrap(), "--name", "x"];
    let (code, said) = armctl_as(&c, "slurmctld", &add);
    assert_eq!(code, 3, "the prolog's role cannot add a host: {said}");
    assert!(said.contains("host add refused: the batch role may not make it"), "{said}");
    let (code, said) = armctl_as(&c, "slurmctld", &["host", "list"]);
    assert_eq!(code, 3, "nor list hosts: {said}");

    // What the prolog and epilog do, with the batch certificate.
    let mut options = c.arm_options();
    options.identity = Some((c.state.path().join("slurmctld.pem"), c.state.path().join("slurmctld.key")));
    let batch = ArmClient::connect(options).await.unwrap();
    let bind = Request::JobBind {
        id: "77".into(),
        nodes: vec!["n1".into()],
        acpn: 1,
        user: "alice".into(),
        uid: 1000,
        walltime_s: 0,
    };
    batch.request(bind).await.expect("the batch role binds a job");
    batch.request(Request::JobEnd { id: "77".into() }).await.expect("and releases it");

    let (code, said) = armctl_as(&c, "alice", &["host", "list"]);
    assert_eq!(code, 0, "an issued admin certificate works: {said}");
    let alice = std::fs::read_to_string(c.state.path().join("alice.pem")).unwrap();
    arm_server::roles::revoke(c.state.path(), &alice).unwrap();
    let (code, said) = armctl_as(&c, "alice", &["host", "list"]);
    assert_eq!(code, 3, "revoked: {said}");
    assert!(said.contains("its certificate was revoked"), "{said}");

    let (code, said) = armctl_as(&c, "bob", &["host", "list"]);
    assert_ne!(code, 0, "expired: {said}");
    // TLS refuses it as expired, not for some other fault of its certificate.
    assert!(said.to_lowercase().contains("expired"), "{said}");
    let (code, said) = armctl_as(&c, "admin", &["host", "list"]);
    assert_eq!(code, 0, "the first-start admin certificate still works: {said}");
}

/// A copy both ways and a kernel on `acc`, through the lanes (large) and the control stream.
async fn works(acc: &Accelerator) {
    computes(acc).await.expect("a kernel runs");
    let data = pattern(1 << 20, 7);
    let buf = acc.alloc_from(&data).await.expect("a 4 MiB copy to the device");
    assert_eq!(buf.to_vec().await.expect("and back"), data);
}

/// Rolling upgrades, backend side: a program of the version before (protocol 4, as the last
/// release spoke it) against this backend, and this program against a backend of the version
/// before; a version neither speaks is refused in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_and_backends_one_protocol_version_apart_work_together() {
    use ac_proto::backend::{v4, MIN_VERSION, VERSION};
    assert_eq!(MIN_VERSION, v4::VERSION);
    let new = TestBackend::start(64).await;
    let old_program = ConnectOptions { protocol: MIN_VERSION, lanes: 2, ..new.options() };
    let acc = Accelerator::connect(&old_program).await.expect("an N-1 program on an N backend");
    works(&acc).await;
    drop(acc);

    let old = TestBackend::start_with(|b| b.only_protocol = Some(MIN_VERSION)).await;
    let acc = Accelerator::connect(&ConnectOptions { lanes: 2, ..old.options() }).await.expect("N on N-1");
    works(&acc).await;
    drop(acc);

    let newer = TestBackend::start_with(|b| b.only_protocol = Some(VERSION)).await;
    let refused = Accelerator::connect(&old_program_for(&newer)).await.unwrap_err();
    assert!(matches!(refused, ac_frontend::Error::VersionMismatch(_)), "{refused}");
    assert!(
        refused.to_string().contains(&format!("backend speaks {VERSION} to {VERSION}, client sent 4")),
        "{refused}"
    );
}

fn old_program_for(backend: &TestBackend) -> ConnectOptions {
    ConnectOptions { protocol: ac_proto::backend::MIN_VERSION, ..backend.options() }
}

/// Rolling upgrades, manager side: `armctl` and programs of the version before against this
/// manager, and this `armctl` and program against a manager of the version before (asked
/// again in its version), except for what that version lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_and_managers_one_protocol_version_apart_work_together() {
    use ac_proto::arm::{MIN_VERSION, VERSION};
    for (manager, program) in [(None, MIN_VERSION), (Some(MIN_VERSION), VERSION)] {
        let c = TestCluster::start_with(1, |config| {
            config.only_protocol = manager;
            config.allow_ad_hoc = Some(true);
        })
        .await;
        let arm = ArmOptions { protocol: program, ..c.arm_options() };
        let admin =
            ArmClient::connect(ArmOptions { identity: Some(c.arm.admin_identity()), ..arm.clone() }).await.unwrap();
        let Response::Hosts(hosts) = admin.request(Request::HostList).await.unwrap() else { panic!("hosts") };
        assert_eq!(hosts.len(), 1);
        let session = ac_frontend::Session::init(ad_hoc(arm)).await.expect("AC_Init across versions");
        computes(&session.accelerators()[0].acc).await.unwrap();
        session.finalize().await.unwrap();
        if manager == Some(MIN_VERSION) {
            let refused = admin.request(Request::ManagerKey).await.unwrap_err().to_string();
            assert!(
                refused.contains("speaks protocol 4, which lacks this request"),
                "newer than the manager: {refused}"
            );
            let fresh = ArmClient::connect(ArmOptions { identity: None, ..c.arm_options() }).await.unwrap();
            let refused = fresh.request(Request::ManagerKey).await.unwrap_err().to_string();
            // Asked down to protocol 5, the oldest that has the request.
            assert!(refused.contains("speaks 4 to 4, the client 5"), "asked first, refused in words: {refused}");
        }
    }
}
