//! The manager compares what a backend serves with what it registered: a backend that comes back
//! serving fewer or other devices (a GPU host whose backend restarted on the CPU device, a GPU
//! lost) is marked, and what it does not serve is not granted until it serves it again.

use std::time::Duration;

use ac_proto::arm::{Request, Response};
use ac_tests::{armctl, eventually, BackendProcess, TestCluster};

/// An `ac-backend` process (CPU devices of 64 MiB) on `listen` with its state in `state`, and
/// `extra` flags (`--devices 0,1`).
fn backend(listen: &str, state: &std::path::Path, extra: &[&str]) -> BackendProcess {
    BackendProcess::start_with(state, listen, extra)
}

/// Registers the backend at `addr` (whose state is `state`) as `h0`.
async fn add(c: &TestCluster, addr: std::net::SocketAddr, state: &std::path::Path) {
    let add = Request::HostAdd {
        addr,
        name: "h0".into(),
        server_name: "127.0.0.1".into(),
        ca_pem: std::fs::read_to_string(state.join("ca.pem")).unwrap(),
        labels: vec![],
    };
    c.admin().await.request(add).await.expect("host added");
}

/// `(host state, [accelerator states])` of the only host.
async fn states(c: &TestCluster) -> (String, Vec<String>) {
    let hosts = c.hosts().await;
    (hosts[0].state.clone(), hosts[0].accelerators.iter().map(|a| a.state.clone()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_serving_fewer_devices_than_registered_is_marked_and_not_granted_them() {
    let c = TestCluster::start(0).await;
    let state = tempfile::tempdir().unwrap();
    let first = backend("127.0.0.1:0", state.path(), &["--devices", "0,1"]);
    let addr = first.addr;
    add(&c, addr, state.path()).await;
    assert_eq!(states(&c).await, ("up".into(), vec!["free".into(), "free".into()]));

    // It comes back (same address, same state) serving one device of the two.
    first.kill_9();
    let second = backend(&addr.to_string(), state.path(), &["--devices", "0"]);
    let marked = eventually(Duration::from_secs(10), || async {
        states(&c).await == ("mismatch".into(), vec!["free".into(), "down".into()])
    })
    .await;
    assert!(marked, "the host is not marked: {:?}", states(&c).await);
    let Ok(Response::Health(problems)) = c.admin().await.request(Request::Health).await else { panic!("health") };
    assert!(
        problems.iter().any(|p| p.contains("host h0 serves other devices") && p.contains("h0/1: registered as")),
        "{problems:?}"
    );
    // Two asked on a host that serves one: waits, never granted what is not served.
    c.submit("two", &["n1"], 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.job("two").await.state, "queued");
    // What armctl shows an admin.
    let (code, out, err) = armctl(&c, true, &["host", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mismatch"), "{out}");
    let (_, out, err) = armctl(&c, true, &["health"]);
    assert!(format!("{out}{err}").contains("h0/1: registered as"), "{out}{err}");

    // Serving both again, the host is whole and the job starts.
    second.kill_9();
    let _third = backend(&addr.to_string(), state.path(), &["--devices", "0,1"]);
    let whole = eventually(Duration::from_secs(10), || async {
        states(&c).await == ("up".into(), vec!["allocated".into(), "allocated".into()])
    })
    .await;
    assert!(whole, "{:?}", states(&c).await);
    assert_eq!(c.job("two").await.state, "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_serving_other_memory_than_registered_is_not_granted() {
    let c = TestCluster::start(0).await;
    let state = tempfile::tempdir().unwrap();
    let first = backend("127.0.0.1:0", state.path(), &[]);
    let addr = first.addr;
    add(&c, addr, state.path()).await;
    first.kill_9();
    // In this process, for a configuration the process helper does not set.
    let config = ac_backend::BackendConfig {
        listen: addr,
        state_dir: state.path().to_path_buf(),
        memory_mib: 32,
        transport: ac_tests::quick_tuning(),
        ..ac_backend::BackendConfig::default()
    };
    let _second = ac_backend::start(config).await.expect("backend starts");
    let marked =
        eventually(Duration::from_secs(10), || async { states(&c).await == ("mismatch".into(), vec!["down".into()]) })
            .await;
    assert!(marked, "{:?}", states(&c).await);
    let Ok(Response::Health(problems)) = c.admin().await.request(Request::Health).await else { panic!("health") };
    assert!(problems.iter().any(|p| p.contains("(64 MiB), served as") && p.contains("32 MiB")), "{problems:?}");
}
