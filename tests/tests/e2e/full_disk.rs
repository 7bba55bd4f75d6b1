//! A full disk under the manager's store (issue 54, item 4). The state directory is a 4 MiB
//! tmpfs; a filler file takes all its space. Changes then fail with an error that names the
//! store and the OS's words, memory keeps none of them (a group commit's every change, the
//! failed one included), and `health` and the metrics say so. Once the filler is gone the store
//! writes again without a restart (health clears with no client traffic), the next change
//! commits, and a restart of the manager loads exactly what it served.
//!
//! Mounting needs root: elsewhere the test says why it skipped, and fails where
//! `AC_NETNS_REQUIRED` is set (`scripts/test` sets it).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ac_frontend::arm::ArmClient;
use ac_proto::arm::{HostView, JobView, Request, Response};
use ac_tests::prometheus::http_get;
use ac_tests::{admin_of, arm_config, eventually, register_hosts, submit_job, TestBackend};
use futures_util::future::join_all;

/// A tmpfs of a fixed size on a fresh directory, unmounted when dropped (on a panic too).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts one of `size` (as `mount -o size=` reads it); says why it cannot.
    fn mount(size: &str) -> Result<Self, String> {
        let uid = Command::new("id").arg("-u").output().map_err(|e| format!("id: {e}"))?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root: mounting a tmpfs needs CAP_SYS_ADMIN".into());
        }
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: after a panic the manager may still hold its store open.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Writes one file in `dir` until its filesystem has no space left; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("filler created");
    let chunk = vec![0xa5u8; 64 << 10];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    path
}

/// Every job, ended ones included; `expected_start` (a plan recomputed at each answer) left
/// out, so that two answers compare by what is stored.
async fn jobs(admin: &ArmClient) -> Vec<JobView> {
    match admin.request(Request::JobList { all: true }).await.expect("jobs listed") {
        Response::Jobs(mut jobs) => {
            jobs.iter_mut().for_each(|j| j.expected_start = None);
            jobs
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// What a failed comparison shows: each job's id and state (their records are 40 KB).
fn summary(state: &(Vec<JobView>, Vec<HostView>)) -> Vec<String> {
    let jobs = state.0.iter().map(|j| format!("{} {}", j.id, j.state));
    jobs.chain(state.1.iter().map(|h| format!("host {} {}", h.name, h.state))).collect()
}

async fn hosts(admin: &ArmClient) -> Vec<HostView> {
    match admin.request(Request::HostList).await.expect("hosts listed") {
        Response::Hosts(hosts) => hosts,
        other => panic!("unexpected {other:?}"),
    }
}

async fn health(admin: &ArmClient) -> Vec<String> {
    match admin.request(Request::Health).await.expect("health") {
        Response::Health(problems) => problems,
        other => panic!("unexpected {other:?}"),
    }
}

/// The value of an unlabelled series on the manager's `/metrics`.
async fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (status, body) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert_eq!(status, 200, "{body}");
    let line = body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
    line.unwrap_or_else(|| panic!("no {name} in:\n{body}")).trim().parse().expect("a number")
}

/// A queued job whose record takes about 40 KB (its group's name): more than a few of the
/// store's free pages, so that a full filesystem refuses it.
fn big_job(id: &str) -> Request {
    Request::JobSubmit {
        id: id.into(),
        nodes: vec!["n1".into()],
        acpn: 1,
        user: "alice".into(),
        walltime_s: 0,
        group: Some("g".repeat(40_000)),
        reservation: None,
        peak: None,
    }
}

/// Within this the background retry (5 s after the last failed write) finds the space back.
const RECOVERY: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_changes_cleanly_and_the_store_recovers_when_space_returns() {
    let disk = match Tmpfs::mount("4m") {
        Ok(disk) => disk,
        Err(why) => return ac_tests::skip("AC_NETNS_REQUIRED", &why),
    };
    let state = disk.path().join("state");
    let mut config = arm_config(&state);
    config.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let arm = arm_server::start(config.clone()).await.expect("arm starts");
    let metrics = arm.metrics_addr().expect("metrics served");
    let backends = [TestBackend::start(64).await];
    let admin = admin_of(arm.addr(), &state).await;
    register_hosts(&admin, &backends).await;
    submit_job(&admin, "running", &["n1"], 1, "alice", 0).await;
    submit_job(&admin, "queued", &["n1"], 1, "bob", 0).await;
    assert!(health(&admin).await.is_empty(), "{:?}", health(&admin).await);
    assert_eq!(metric(metrics, "arm_store_writable").await, 1.0);

    // The disk fills. Small changes may still fit in the store file's free pages: big ones are
    // submitted until one is refused.
    let filler = fill(disk.path());
    let mut refused = None;
    for i in 0..50 {
        let before = (jobs(&admin).await, hosts(&admin).await);
        match admin.request(big_job(&format!("big-{i}"))).await {
            Ok(_) => continue,
            Err(e) => {
                eprintln!("{i} big job(s) committed on the full disk, then: {e}");
                refused = Some((e, before));
                break;
            }
        }
    }
    let (error, before) = refused.expect("a change refused for space within 50 of 40 KB");
    let message = error.to_string();
    assert!(
        message.contains("No space left on device")
            && message.contains("arm.redb")
            && message.contains("the change was not made"),
        "{message}"
    );
    // Memory kept nothing of it.
    let now = (jobs(&admin).await, hosts(&admin).await);
    assert!(now == before, "memory kept the failed change: {:?}, not {:?}", summary(&now), summary(&before));
    let problems = health(&admin).await;
    eprintln!("health: {problems:?}");
    assert!(problems.iter().any(|p| p.starts_with("store: ") && p.contains("No space left on device")), "{problems:?}");
    assert_eq!(metric(metrics, "arm_store_writable").await, 0.0);
    assert!(metric(metrics, "arm_store_commit_failures_total").await >= 1.0);

    // Concurrent changes, committed in groups: a group that fails is rolled back whole, and
    // each caller told so; memory holds exactly the changes answered OK.
    let before = jobs(&admin).await;
    let ids: Vec<String> = (0..4).map(|i| format!("group-{i}")).collect();
    let answers = join_all(ids.iter().map(|id| admin.request(big_job(id)))).await;
    let mut expected: Vec<String> = before.iter().map(|j| j.id.clone()).collect();
    for (id, answer) in ids.iter().zip(answers) {
        match answer {
            Ok(_) => expected.push(id.clone()),
            Err(e) => assert!(e.to_string().contains("the change was not made"), "{e}"),
        }
    }
    expected.sort();
    let held: Vec<String> = jobs(&admin).await.into_iter().map(|j| j.id).collect();
    assert_eq!(held, expected, "memory holds what was answered OK, and only that");

    // Space comes back: health clears by itself, and the next change commits.
    std::fs::remove_file(&filler).expect("filler removed");
    let ctl = &admin;
    let cleared = eventually(RECOVERY, || async move { health(ctl).await.is_empty() }).await;
    assert!(cleared, "still {:?}", health(&admin).await);
    assert_eq!(metric(metrics, "arm_store_writable").await, 1.0);
    admin.request(big_job("after")).await.expect("the store writes again");
    let served = (jobs(&admin).await, hosts(&admin).await);
    assert!(served.0.iter().any(|j| j.id == "after"));

    // A restart loads exactly what was served.
    drop(admin);
    arm.shutdown().await;
    let mut restarted = Err(String::new());
    for _ in 0..50 {
        restarted = arm_server::start(config.clone()).await.map_err(|e| e.to_string());
        if restarted.is_ok() {
            break;
        }
        // The stopped manager's last tasks may hold its store open for a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let arm = restarted.unwrap_or_else(|e| panic!("the manager restarts on its store: {e}"));
    let admin = admin_of(arm.addr(), &state).await;
    let admin = &admin;
    // Hosts start down, until their links come up.
    let up =
        eventually(Duration::from_secs(10), || async move { hosts(admin).await.iter().all(|h| h.state != "down") })
            .await;
    assert!(up, "{:?}", hosts(admin).await);
    let loaded = (jobs(admin).await, hosts(admin).await);
    assert!(loaded == served, "loaded {:?}, served {:?}", summary(&loaded), summary(&served));
    arm.shutdown().await;
}
