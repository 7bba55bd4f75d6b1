//! The `armctl` binary: tables, `--json`, and exit codes scripts can rely on.

use std::process::Command;
use std::time::Duration;

use ac_tests::{armctl, workspace_binary, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armctl_prints_tables_json_and_meaningful_exit_codes() {
    let c = TestCluster::start(2).await;
    let (code, out, _) = tokio::task::block_in_place(|| armctl(&c, true, &["host", "list"]));
    assert_eq!(code, 0);
    assert!(out.starts_with("HOST") && out.contains("h0/0") && out.contains("free"), "{out}");
    let (code, out, _) = tokio::task::block_in_place(|| {
        armctl(&c, true, &["job", "submit", "--job", "j1", "--nodes", "a,b", "--acpn", "1"])
    });
    assert_eq!(code, 0);
    assert!(out.contains("ARM_JOB_CREDENTIAL="), "{out}");
    let (code, out, _) = tokio::task::block_in_place(|| armctl(&c, true, &["--json", "job", "show", "j1"]));
    assert_eq!(code, 0);
    assert!(out.contains("\"Job\"") && out.contains("\"running\""), "{out}");
    let (code, _, err) = tokio::task::block_in_place(|| armctl(&c, true, &["job", "show", "nope"]));
    assert_eq!(code, 4, "not found: {err}");
    let (code, _, err) = tokio::task::block_in_place(|| {
        armctl(&c, true, &["job", "submit", "--job", "j1", "--nodes", "a", "--acpn", "1"])
    });
    assert_eq!(code, 5, "conflict: {err}");
    let (code, _, err) = tokio::task::block_in_place(|| armctl(&c, false, &["host", "list"]));
    assert_eq!(code, 3, "unauthorized: {err}");
    assert!(err.contains("admin"), "{err}");
    let (code, _, _) = tokio::task::block_in_place(|| armctl(&c, true, &["host", "frobnicate"]));
    assert_eq!(code, 2, "usage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armctl_reserves_pre_allocates_and_lists_ended_jobs_on_request() {
    let c = TestCluster::start(2).await;
    let run = |args: &[&str]| tokio::task::block_in_place(|| armctl(&c, true, args));
    let (code, out, err) =
        run(&["reservation", "create", "--count", "1", "--start", "+600", "--duration", "60", "--user", "carol"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("planned") && out.contains("carol"), "{out}");
    let (code, out, _) = run(&["--json", "reservation", "list"]);
    assert_eq!(code, 0);
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["Reservations"][0]["id"].as_u64().unwrap();
    let (code, _, err) =
        run(&["reservation", "create", "--count", "2", "--start", "+630", "--duration", "60", "--user", "dave"]);
    assert_eq!(code, 5, "a reservation that does not fit is a conflict: {err}");
    let (code, _, err) = run(&[
        "job",
        "submit",
        "--job",
        "in",
        "--nodes",
        "a",
        "--acpn",
        "1",
        "--user",
        "carol",
        "--walltime",
        "30",
        "--reservation",
        &id.to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&[
        "job",
        "submit",
        "--job",
        "wrong",
        "--nodes",
        "a",
        "--acpn",
        "1",
        "--user",
        "eve",
        "--reservation",
        &id.to_string(),
    ]);
    assert_eq!(code, 6, "another user's job cannot go in: {err}");
    let (code, _, err) = run(&["job", "submit", "--job", "pre", "--nodes", "a", "--acpn", "1", "--peak", "3"]);
    assert_eq!(code, 6, "a peak beyond the pool: {err}");
    let (code, out, err) = run(&[
        "--json", "job", "submit", "--job", "pre", "--nodes", "a", "--acpn", "1", "--peak", "1", "--group", "physics",
    ]);
    assert_eq!(code, 0, "{err}{out}");
    let (code, _, _) = run(&["job", "end", "pre"]);
    assert_eq!(code, 0);
    let (_, out, _) = run(&["job", "list"]);
    assert!(!out.contains("pre "), "an ended job is listed without --all:\n{out}");
    let (_, out, _) = run(&["job", "list", "--all"]);
    assert!(out.contains("pre ") && out.contains("physics"), "{out}");
    let (code, _, _) = run(&["reservation", "delete", &id.to_string()]);
    assert_eq!(code, 0);
    let (_, out, _) = run(&["--json", "job", "show", "in"]);
    assert!(out.contains("\"reservation\": null"), "{out}");
}

/// An open advance reservation: `host list` shows what it holds as reserved, with its id, and an
/// `AC_Get` it stops is rejected naming it; `job show`'s table has a job's peak, spare
/// accelerators and waiting requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armctl_shows_reservations_spares_and_waits_and_rejections_name_the_reservation() {
    use ac_proto::arm::{Request, Response};
    use std::time::Duration;
    let c = TestCluster::start(4).await;
    let run = |args: &[&str]| tokio::task::block_in_place(|| armctl(&c, true, args));
    let (code, _, err) = run(&["job", "submit", "--job", "pre", "--nodes", "n2", "--acpn", "1", "--peak", "2"]);
    assert_eq!(code, 0, "{err}");
    let credential = c.submit("a", &["n1"], 1).await;
    let start = ac_proto::capability::unix_now() + 5;
    let create = Request::ReservationCreate { count: 1, start, duration_s: 600, user: Some("carol".into()), job: None };
    let Response::Reservation(reservation) = c.admin().await.request(create).await.unwrap() else { panic!() };
    let named = format!("advance reservation {}", reservation.id);

    let session =
        std::sync::Arc::new(ac_frontend::Session::init(c.session_options("a", &credential, "n1")).await.unwrap());
    // Before it opens or after, the rejection names it.
    let why = session.get_or_why(ac_frontend::GetRequest::new(1)).await.unwrap().unwrap_err();
    assert!(why.contains(&named), "{why}");
    let open = ac_tests::eventually(Duration::from_secs(15), || async {
        let Ok(Response::Reservations(list)) = c.admin().await.request(Request::ReservationList).await else {
            return false;
        };
        list.iter().any(|r| r.id == reservation.id && r.state == "active")
    })
    .await;
    assert!(open, "the reservation never opened");
    let why = session.get_or_why(ac_frontend::GetRequest::new(1)).await.unwrap().unwrap_err();
    assert!(why.contains("only 0 accelerator(s) idle") && why.contains(&format!("{named} holds 1")), "{why}");
    let (code, out, _) = run(&["host", "list"]);
    assert_eq!(code, 0);
    let reserved: Vec<&str> = out.lines().filter(|l| l.contains(" reserved ")).collect();
    assert_eq!(reserved.len(), 1, "{out}");
    assert!(reserved[0].ends_with(&format!("reservation {}", reservation.id)), "{out}");
    assert!(!out.contains(" free "), "nothing else is free: {out}");
    let (_, json, _) = run(&["--json", "host", "list"]);
    assert_eq!(json.matches("\"reserved\"").count(), 1, "{json}");

    // A waiting request, counted by `job show` with the peak and the spare accelerator.
    let waiting = session.clone();
    let wait = ac_frontend::GetRequest::new(1).wait_up_to(Duration::from_secs(60));
    let request = tokio::spawn(async move { waiting.get_with(wait).await });
    let counted =
        ac_tests::eventually(Duration::from_secs(10), || async { c.job("a").await.waiting_requests == 1 }).await;
    assert!(counted, "the request never waited");
    let (code, out, _) = run(&["job", "show", "a"]);
    assert_eq!(code, 0);
    assert!(out.contains("WAITING REQUESTS  1") && out.contains("PEAK              -"), "{out}");
    let (_, out, _) = run(&["job", "show", "pre"]);
    let spare = c.job("pre").await.preallocated_unused;
    assert_eq!(spare.len(), 1);
    assert!(out.contains("PEAK              2") && out.contains(&format!("SPARE             {}", spare[0])), "{out}");
    assert!(out.contains("WAITING REQUESTS  0"), "{out}");
    request.abort();
}

/// A reader that stops early (`armctl host list | head -1`) ends `armctl` quietly: no panic, no
/// backtrace, the status a closed pipe gives any Unix tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_armctl_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let c = TestCluster::start(2).await;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    // The reader is gone before armctl prints its first line.
    drop(reader);
    let mut cmd = Command::new(workspace_binary("armctl"));
    cmd.args(["--arm", &c.arm.addr().to_string()]).arg("--ca").arg(c.arm.ca_cert());
    let (cert, key) = c.arm.admin_identity();
    cmd.arg("--cert").arg(cert).arg("--key").arg(key).args(["host", "list"]);
    let out = tokio::task::block_in_place(|| cmd.stdout(writer).output().expect("armctl runs"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
    assert_eq!(out.status.signal(), Some(SIGPIPE), "ended by SIGPIPE, as `ls | head` would be: {:?}", out.status);
}

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;

/// Daemons' logs written to a file carry no terminal colour codes.
#[test]
fn logs_to_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let arm = ac_tests::ArmProcess::start(dir.path(), "127.0.0.1:0");
    drop(arm);
    let log = std::fs::read_to_string(dir.path().join("arm-server.log")).expect("the manager's log");
    assert!(log.contains("INFO"), "the log has lines: {log}");
    assert!(!log.contains('\u{1b}'), "escape codes in the log: {log:?}");
}

/// How long the manager runs on after it logged a backend's orderly shutdown, before its log is
/// read: what could still warn about it comes within this. The manager redials a lost backend
/// every dial limit and pause (0.5 + 0.2 s, `arm-server`'s `links.rs`), each refused, and marks it
/// down after `--backend-timeout-ms` (1 s here, `ArmProcess`): three redials and twice the
/// timeout fit.
const LATE_WARNINGS: Duration = Duration::from_secs(3);

/// A backend that shuts down in order is no fault: the manager logs it without a warning, then
/// or later (the log is read once the manager has run on past the redials and the backend
/// timeout, and exited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_backend_shutdown_is_not_a_warning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let arm = ac_tests::ArmProcess::start(dir.path(), "127.0.0.1:0");
    let backend = ac_tests::TestBackend::start(64).await;
    ac_tests::register_hosts(&ac_tests::admin_of(arm.addr, dir.path()).await, std::slice::from_ref(&backend)).await;
    backend.backend.shutdown().await;
    let log = dir.path().join("arm-server.log");
    let said = ac_tests::eventually(Duration::from_secs(10), || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains("the backend shut down")
    })
    .await;
    assert!(said, "the manager saw the shutdown: {}", std::fs::read_to_string(&log).unwrap_or_default());
    tokio::time::sleep(LATE_WARNINGS).await;
    tokio::task::block_in_place(|| arm.terminate());
    let text = std::fs::read_to_string(&log).expect("the manager's log");
    assert!(!text.contains("WARN"), "warnings for an orderly shutdown: {text}");
}

/// `armctl status`: one screen with the pool by state, the queue, who holds what and the health
/// of the backend links; `--json` carries the same facts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armctl_status_shows_pool_queue_holders_and_health() {
    let mut c = TestCluster::start(3).await;
    c.backends.remove(2).backend.shutdown().await;
    let run = |args: &[&str]| tokio::task::block_in_place(|| armctl(&c, true, args));
    let down = ac_tests::eventually(std::time::Duration::from_secs(15), || async {
        run(&["--json", "host", "list"]).1.contains("\"down\"")
    })
    .await;
    assert!(down, "h2 never went down");
    let (code, _, err) = run(&["job", "submit", "--job", "runs", "--nodes", "a", "--acpn", "1", "--user", "alice"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["job", "submit", "--job", "waits", "--nodes", "a,b", "--acpn", "1", "--user", "bob"]);
    assert_eq!(code, 0, "{err}");
    let held = c.job("runs").await.static_accelerators;
    assert_eq!(held.len(), 1, "{held:?}");
    let accelerator = format!("{}@{}", held[0].1, held[0].0);

    let (code, out, err) = run(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("POOL: 3 hosts, 3 accelerators: 1 free, 1 allocated, 0 reserved, 0 draining, 0 unhealthy, 1 down"),
        "{out}"
    );
    for host in ["h0", "h1", "h2"] {
        assert!(out.contains(&format!("  {host} ")), "{host} missing:\n{out}");
    }
    assert!(out.contains("QUEUE: 1 jobs waiting to start") && out.contains("  waits "), "{out}");
    let holder = out.lines().find(|l| l.starts_with("  runs ")).unwrap_or_else(|| panic!("no holder line:\n{out}"));
    assert!(holder.contains("alice") && holder.ends_with(&accelerator), "{out}");
    assert!(out.contains("HEALTH: PROBLEMS") && out.contains("backend links: 2 up, 1 down: h2"), "{out}");

    let (code, json, err) = run(&["--json", "status"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let names: Vec<&str> = v["pool"]["hosts"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["h0", "h1", "h2"], "{json}");
    assert_eq!(v["pool"]["accelerators"]["free"], 1, "{json}");
    assert_eq!(v["pool"]["accelerators"]["down"], 1, "{json}");
    assert_eq!(v["queue"]["jobs"][0]["id"], "waits", "{json}");
    assert_eq!(v["holders"][0]["job"], "runs", "{json}");
    assert_eq!(v["holders"][0]["accelerators"][0], accelerator.as_str(), "{json}");
    assert_eq!(v["health"]["links_down"][0], "h2", "{json}");
    assert_eq!(v["health"]["ok"], false, "{json}");
}
