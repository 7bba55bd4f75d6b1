//! Accounting: accelerator time per job, user and group, static and dynamic apart, durable
//! across a `kill -9` of the manager, reported by `armctl accounting`.
//!
//! A whole interval's length has bounds, not an exact figure: it starts somewhere inside the
//! call that granted it and ends inside the call that released it, so it lies between the inner
//! and the outer wall time measured around those calls (plus a few milliseconds of rounding). A
//! window between those calls is exact: the holding covers all of it.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_frontend::{Session, SessionOptions};
use ac_proto::arm::{JobAuth, Request, Response, UsageBy, UsageRow};
use ac_tests::{
    admin_of, armctl, eventually, job_of, quick_tuning, register_hosts, submit_job, ArmProcess, TestBackend,
    TestCluster,
};

/// Rounding of the manager's millisecond stamps and of the two clocks read here.
const SLACK: Duration = Duration::from_millis(5);

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

async fn report(ctl: &ArmClient, since_ms: Option<u64>, until_ms: Option<u64>, by: UsageBy) -> Vec<UsageRow> {
    match ctl.request(Request::Accounting { since_ms, until_ms, by }).await.expect("accounting") {
        Response::Accounting { rows, .. } => rows,
        other => panic!("unexpected {other:?}"),
    }
}

fn row<'a>(rows: &'a [UsageRow], key: &str) -> &'a UsageRow {
    rows.iter().find(|r| r.key == key).unwrap_or_else(|| panic!("no row `{key}` in {rows:?}"))
}

/// Asserts `ms` lies in `[low, high]` (widened by [`SLACK`]).
fn between(what: &str, ms: u64, low: Duration, high: Duration) {
    let (low, high) = (low.saturating_sub(SLACK).as_millis() as u64, (high + SLACK).as_millis() as u64);
    assert!((low..=high).contains(&ms), "{what}: {ms} ms, not in [{low}, {high}] ms");
}

async fn submit(ctl: &ArmClient, id: &str, node: &str, acpn: u32, user: &str, group: &str) -> String {
    let request = Request::JobSubmit {
        id: id.into(),
        nodes: vec![node.into()],
        acpn,
        user: user.into(),
        walltime_s: 0,
        group: Some(group.into()),
        reservation: None,
        peak: None,
    };
    match ctl.request(request).await.expect("submitted") {
        Response::Submitted { credential, .. } => credential,
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_and_dynamic_time_adds_up_per_job_user_and_group_and_clips_to_the_window() {
    let c = TestCluster::start(3).await;
    let ctl = c.admin().await;
    let t0 = Instant::now();
    let credential = submit(&ctl, "ja", "n1", 1, "ann", "phys").await;
    let t1 = Instant::now();
    let session = Session::init(c.session_options("ja", &credential, "n1")).await.unwrap();
    let t2 = Instant::now();
    let set = session.get(1).await.unwrap().expect("granted");
    let t3 = Instant::now();
    let w0 = unix_ms();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let w1 = unix_ms();
    let t4 = Instant::now();
    session.free(set).await.unwrap();
    let t5 = Instant::now();
    session.finalize().await.unwrap();
    let t6 = Instant::now();
    submit(&ctl, "jb", "n2", 1, "bob", "phys").await;
    let t7 = Instant::now();
    submit(&ctl, "jc", "n3", 1, "cat", "chem").await;
    let t8 = Instant::now();
    ctl.request(Request::JobEnd { id: "ja".into() }).await.unwrap();
    let t9 = Instant::now();
    // A report leaves out rows with no time in its window: jc's open interval must have had a
    // millisecond to grow (on a fast run the report came within jc's first one, and cat's row
    // was missing).
    tokio::time::sleep(Duration::from_millis(5)).await;

    let q0 = Instant::now();
    let jobs = report(&ctl, None, None, UsageBy::Job).await;
    let q1 = Instant::now();
    let ja = row(&jobs, "ja");
    assert_eq!((ja.user.as_deref(), ja.group.as_deref()), (Some("ann"), Some("phys")));
    between("ja static", ja.static_ms, t8 - t1, t9 - t0);
    between("ja dynamic", ja.dynamic_ms, t4 - t3, t5 - t2);
    // Still held: counted up to the report.
    let jb = row(&jobs, "jb");
    between("jb static, open", jb.static_ms, q0 - t7, q1 - t6);
    assert_eq!(jb.dynamic_ms, 0);

    let users = report(&ctl, None, None, UsageBy::User).await;
    let ann = row(&users, "ann");
    assert_eq!((ann.static_ms, ann.dynamic_ms), (ja.static_ms, ja.dynamic_ms), "ann's one job, closed");
    assert_eq!(users.len(), 3, "{users:?}");
    let groups = report(&ctl, None, None, UsageBy::Group).await;
    let phys = row(&groups, "phys");
    assert_eq!(phys.user, None, "ann and bob");
    assert!(phys.static_ms >= ja.static_ms + jb.static_ms, "{phys:?}: ja and jb, jb still growing");
    assert_eq!(row(&groups, "chem").user.as_deref(), Some("cat"));

    // Clipped to a window inside both of ja's holdings: exactly the window, twice.
    let clipped = report(&ctl, Some(w0), Some(w1), UsageBy::Job).await;
    let ja = row(&clipped, "ja");
    assert_eq!((ja.static_ms, ja.dynamic_ms), (w1 - w0, w1 - w0));
    assert!(clipped.iter().all(|r| r.key == "ja"), "jb and jc started after the window: {clipped:?}");
    assert!(report(&ctl, Some(1), Some(1_000), UsageBy::Job).await.is_empty(), "1970 saw nothing");

    let run = |admin: bool, args: &[&str]| tokio::task::block_in_place(|| armctl(&c, admin, args));
    let (code, out, err) = run(true, &["accounting", "--by", "job"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("STATIC ACC-S") && out.contains("ACC-HOURS"), "{out}");
    for key in ["ja ", "jb ", "jc ", "TOTAL "] {
        assert!(out.lines().any(|l| l.starts_with(key)), "no `{key}` row:\n{out}");
    }
    let (code, out, err) = run(true, &["--json", "accounting", "--by", "group", "--since", "2020-01-01T00:00:00Z"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> =
        json["Accounting"]["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["chem", "phys"]);
    assert_eq!(json["Accounting"]["since_ms"], 1_577_836_800_000u64);
    let (code, out, _) = run(true, &["accounting", "--since", "2020-01-01", "--until", "1577923200"]);
    assert_eq!(code, 0);
    assert!(out.lines().nth(2).is_some_and(|l| l.starts_with("TOTAL")), "an empty day: only the total\n{out}");
    let (code, _, err) = run(true, &["accounting", "--since", "2999-01-01"]);
    assert_eq!(code, 6, "a window that ends before it starts is invalid: {err}");
    assert!(err.contains("empty window"), "{err}");
    let (code, _, err) = run(true, &["accounting", "--since", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a time"), "{err}");
    let (code, _, err) = run(false, &["accounting"]);
    assert_eq!(code, 3, "no admin certificate: {err}");
    assert!(err.contains("client certificate of role admin"), "{err}");
}

fn options(addr: std::net::SocketAddr, dir: &Path, job: &str, secret: String, node: &str) -> SessionOptions {
    let mut arm = ArmOptions::new(addr, dir.join("ca.pem"));
    arm.tuning = quick_tuning();
    SessionOptions {
        arm,
        job: JobAuth::Credential { job: job.into(), secret },
        node: node.into(),
        init_timeout: Some(Duration::from_secs(5)),
        stripes: 1,
        progress: false,
    }
}

/// The lease the restarted manager gives each program to come back (`ArmProcess`'s
/// `--lease-ms`): a program that does not is released no sooner.
const RESTART_LEASE_MS: u64 = 3_000;

/// `job`'s (static, dynamic) milliseconds in `rows`; (0, 0) when it has no row (a report leaves
/// out rows with no time in its window).
fn times(rows: &[UsageRow], job: &str) -> (u64, u64) {
    rows.iter().find(|r| r.key == job).map_or((0, 0), |r| (r.static_ms, r.dynamic_ms))
}

/// Records made before the crash are still there; a holding across it is one interval; a
/// holding whose program died while the manager was down ends when the restarted manager
/// releases it (its lease after the restart), never before the crash nor twice.
///
/// Exact, not bounds: the manager stamps an interval's start before it commits the grant and
/// answers, and its end before it commits the release and answers, so a window read by this
/// test after a grant returned and before its release was sent lies wholly inside the holding,
/// and a job holding one accelerator of a kind has exactly the window's length of it there. A
/// window counted twice would have twice that, one cut at the crash less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_of_the_manager_loses_no_interval_and_counts_none_twice() {
    let state = tempfile::tempdir().unwrap();
    let arm = ArmProcess::start(state.path(), "127.0.0.1:0");
    let addr = arm.addr;
    let backends = [TestBackend::start(64).await, TestBackend::start(64).await, TestBackend::start(64).await];
    let ctl = admin_of(addr, state.path()).await;
    register_hosts(&ctl, &backends).await;
    let credential = submit_job(&ctl, "j", &["n1"], 1, "u", 0).await;
    let session = Session::init(options(addr, state.path(), "j", credential, "n1")).await.unwrap();
    // Released before the crash: a record in the store.
    let early = session.get(1).await.unwrap().expect("granted");
    let e0 = unix_ms();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let e1 = unix_ms();
    session.free(early).await.unwrap();
    // Held across the crash.
    let held = session.get(1).await.unwrap().expect("granted");
    // Held by a program that dies while the manager is down.
    let credential = submit_job(&ctl, "k", &["n2"], 0, "v", 0).await;
    let orphan_session = Session::init(options(addr, state.path(), "k", credential, "n2")).await.unwrap();
    let orphan = orphan_session.get(1).await.unwrap().expect("granted");
    // From here to the crash j holds its static and its dynamic accelerator, k its orphan.
    let a = unix_ms();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = unix_ms();
    let early_before = report(&ctl, Some(e0), Some(e1), UsageBy::Job).await;
    let held_before = report(&ctl, Some(a), Some(b), UsageBy::Job).await;
    assert_eq!(times(&early_before, "j"), (e1 - e0, e1 - e0), "the early holding and the static one: {early_before:?}");
    assert_eq!(times(&held_before, "j"), (b - a, b - a), "{held_before:?}");
    assert_eq!(times(&held_before, "k"), (0, b - a), "{held_before:?}");

    arm.kill_9();
    drop(orphan);
    drop(orphan_session);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restart = unix_ms();
    let _arm = ArmProcess::start(state.path(), &addr.to_string());
    let ctl = admin_of(addr, state.path()).await;
    let c = unix_ms();
    session.free(held).await.unwrap();
    let freed = unix_ms();
    // The orphan's lease runs out a lease after the restart.
    let released =
        eventually(Duration::from_secs(20), || async { job_of(&ctl, "k").await.dynamic_accelerators.is_empty() }).await;
    assert!(released, "the dead program's accelerator was never released");
    // Every window below is at least a millisecond long (an empty one is refused).
    let pause = || tokio::time::sleep(Duration::from_millis(5));
    pause().await;
    let seen_released = unix_ms();
    ctl.request(Request::JobEnd { id: "j".into() }).await.unwrap();
    let ended = unix_ms();
    pause().await;
    session.finalize().await.ok();

    // The windows read before the crash, again: nothing lost, nothing added.
    assert_eq!(report(&ctl, Some(e0), Some(e1), UsageBy::Job).await, early_before, "the record before the crash");
    assert_eq!(report(&ctl, Some(a), Some(b), UsageBy::Job).await, held_before, "the open intervals at the crash");
    // From before the crash to after the restart, through the kill and the downtime, once.
    let across = report(&ctl, Some(a), Some(c), UsageBy::Job).await;
    assert_eq!(times(&across, "j"), (c - a, c - a), "j's holdings across the crash: {across:?}");
    let downtime = report(&ctl, Some(b), Some(restart), UsageBy::Job).await;
    assert_eq!(times(&downtime, "j"), (restart - b, restart - b), "j while the manager was down: {downtime:?}");
    assert_eq!(times(&downtime, "k"), (0, restart - b), "k while the manager was down: {downtime:?}");
    // The orphan is held through the restarted manager's lease, ...
    let lease_end = restart + RESTART_LEASE_MS;
    let orphaned = report(&ctl, Some(a), Some(lease_end), UsageBy::Job).await;
    assert_eq!(times(&orphaned, "k"), (0, lease_end - a), "k up to its lease's end: {orphaned:?}");
    // ... and released when it ran out: its interval ends then, as j's ends at its free.
    let k_until = a + times(&report(&ctl, Some(a), Some(seen_released), UsageBy::Job).await, "k").1;
    assert!(
        (lease_end..=seen_released).contains(&k_until),
        "k's interval ended at {k_until}, not in [{lease_end}, {seen_released}]"
    );
    let j_until = a + times(&report(&ctl, Some(a), Some(freed), UsageBy::Job).await, "j").1;
    assert!((c..=freed).contains(&j_until), "j's held interval ended at {j_until}, not in [{c}, {freed}]");
    // Nothing counts on after its release: k's after its lease, j's dynamic after its free, and
    // j's static after its end.
    let after = report(&ctl, Some(seen_released), None, UsageBy::Job).await;
    assert_eq!(times(&after, "k"), (0, 0), "{after:?}");
    let after_free = report(&ctl, Some(freed), Some(seen_released), UsageBy::Job).await;
    assert_eq!(times(&after_free, "j"), (seen_released - freed, 0), "{after_free:?}");
    assert_eq!(times(&report(&ctl, Some(ended), None, UsageBy::Job).await, "j"), (0, 0), "j ended");
}
