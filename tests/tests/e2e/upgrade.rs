//! Upgrades without a flag day, the packaging side (issue 54, item 5): package versions that
//! come from the source and sort upward, a backend asked to restart (SIGUSR2, `systemctl
//! reload`) that waits for its last session, and the postinst that asks for that on upgrade
//! instead of restarting a backend with live sessions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ac_tests::{computes, BackendProcess};

const ANY_PORT: &str = "127.0.0.1:0";
/// `ac-backend`'s exit status when it restarts on request (its unit restarts it).
const EXIT_RESTART: i32 = 75;

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("checkout").to_path_buf()
}

/// Runs `command` to success; its standard output, trimmed.
fn run(command: &mut Command) -> String {
    let out = command.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{command:?}: {}\n{said}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    said
}

/// Whether dpkg orders version `a` before `b`.
fn dpkg_lt(a: &str, b: &str) -> bool {
    Command::new("dpkg").args(["--compare-versions", a, "lt", b]).status().expect("dpkg runs").success()
}

/// A git checkout holding `scripts/package` and a workspace of version 0.1.0, with commits
/// at the times given, for `scripts/package --print-version`.
struct Checkout {
    dir: tempfile::TempDir,
}

impl Checkout {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("scripts")).expect("scripts");
        std::fs::copy(checkout().join("scripts/package"), dir.path().join("scripts/package")).expect("copy");
        std::fs::write(dir.path().join("Cargo.toml"), "[workspace.package]\nversion = \"0.1.0\"\n").expect("toml");
        let c = Self { dir };
        c.git(&["init", "--quiet"]);
        c
    }

    fn git(&self, args: &[&str]) -> String {
        self.git_at(args, "2026-01-01T00:00:00Z")
    }

    fn git_at(&self, args: &[&str], date: &str) -> String {
        let mut git = Command::new("git");
        git.args(args).current_dir(self.dir.path());
        for (k, v) in [("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@t"), ("GIT_COMMITTER_NAME", "t")] {
            git.env(k, v);
        }
        git.env("GIT_COMMITTER_EMAIL", "t@t").env("GIT_COMMITTER_DATE", date).env("GIT_AUTHOR_DATE", date);
        run(&mut git)
    }

    /// A commit at `date` (UTC, ISO 8601) of a change to a tracked file.
    fn commit(&self, date: &str) {
        std::fs::write(self.dir.path().join("change"), date).expect("change");
        self.git_at(&["add", "."], date);
        self.git_at(&["commit", "--quiet", "-m", date], date);
    }

    fn version(&self, args: &[&str]) -> String {
        run(Command::new(self.dir.path().join("scripts/package")).args(args).arg("--print-version"))
    }
}

#[test]
fn package_versions_come_from_the_source_and_sort_upward() {
    let c = Checkout::new();
    c.commit("2026-01-01T10:00:00Z");
    let hash = c.git(&["rev-parse", "--short=7", "HEAD"]);
    let first = c.version(&[]);
    assert_eq!(first, format!("0.1.0+git20260101100000.{hash}"), "an untagged commit is a snapshot");
    c.git(&["tag", "v0.1.0"]);
    let release = c.version(&[]);
    assert_eq!(release, "0.1.0", "the release tag's commit is the release");
    c.commit("2026-01-02T08:30:05Z");
    let next = c.version(&[]);
    std::fs::write(c.dir.path().join("change"), "uncommitted").expect("edit");
    let dirty = c.version(&[]);
    assert!(dirty.starts_with(&format!("{next}.dirty")), "uncommitted changes are marked: {dirty}");
    c.commit("2026-01-03T00:00:00Z");
    let last = c.version(&[]);
    let order = [&release, &next, &dirty, &last];
    for pair in order.windows(2) {
        assert!(dpkg_lt(pair[0], pair[1]), "dpkg must order {} before {}: {order:?}", pair[0], pair[1]);
    }
    assert_eq!(c.version(&["--version", "0.1.0+site1"]), "0.1.0+site1", "--version still decides");
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: &str) {
    run(Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]));
}

/// Waits up to `limit` for `child` to exit.
fn exited_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn log_of(backend: &BackendProcess) -> String {
    ac_tests::tail(&backend.dir.join("ac-backend.log"), 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_asked_to_restart_serves_its_session_and_exits_75_when_it_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = BackendProcess::start(dir.path(), ANY_PORT);
    let mut options = ac_frontend::ConnectOptions::new(backend.addr, dir.path().join("ca.pem"));
    options.tuning = ac_tests::quick_tuning();
    let acc = ac_frontend::Accelerator::connect(&options).await.expect("the backend serves");
    computes(&acc).await.expect("computes");

    signal(&backend.child, "USR2");
    // The restart was asked for (the log says so, with the live session) ...
    let asked = Instant::now();
    while !log_of(&backend).contains("restart asked for") {
        assert!(
            backend.child.try_wait().expect("wait").is_none(),
            "it exited with a live session: {}",
            log_of(&backend)
        );
        assert!(asked.elapsed() < Duration::from_secs(10), "no restart asked for: {}", log_of(&backend));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(log_of(&backend).contains("sessions=1"), "{}", log_of(&backend));
    // ... and the session goes on as before.
    computes(&acc).await.expect("the session still computes after the request");
    assert!(backend.child.try_wait().expect("wait").is_none(), "it exited with a live session: {}", log_of(&backend));

    acc.close().await;
    let status = exited_within(&mut backend.child, Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(EXIT_RESTART),
        "{status:?} after the last session: {}",
        log_of(&backend)
    );
}

#[test]
fn an_idle_backend_asked_to_restart_exits_75_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = BackendProcess::start(dir.path(), ANY_PORT);
    signal(&backend.child, "USR2");
    let status = exited_within(&mut backend.child, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(EXIT_RESTART), "{status:?}: {}", log_of(&backend));
}

/// Runs `packaging/daemon.postinst`, as scripts/package makes it for `package`, for an upgrade
/// (`configure OLD-VERSION`) where systemd runs, with systemd's and Debian's tools replaced by
/// stubs that log their arguments; the running daemon's main PID is `main_pid`. Returns what
/// the stubs logged and what the script printed. Root only (a mount namespace hides /run).
fn postinst_upgrade(package: &str, main_pid: u32) -> (String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let template = std::fs::read_to_string(checkout().join("packaging/daemon.postinst")).expect("postinst");
    let script = template.replace("@PACKAGE@", package).replace("@USER@", package).replace("@GROUPS@", "");
    std::fs::write(dir.path().join("postinst"), script).expect("postinst");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let log = dir.path().join("calls");
    for tool in ["systemctl", "deb-systemd-invoke", "deb-systemd-helper", "getent", "adduser", "install"] {
        let stub = format!(
            "#!/bin/sh\necho \"{tool} $*\" >> {log}\n[ \"{tool} $1\" != \"systemctl show\" ] || echo {main_pid}\n",
            log = log.display()
        );
        let path = bin.join(tool);
        std::fs::write(&path, stub).expect("stub");
        run(Command::new("chmod").arg("+x").arg(&path));
    }
    let upgrade = "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec sh \"$0\" configure 0.1.0";
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let said = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", upgrade])
        .arg(dir.path().join("postinst"))
        .env("PATH", path));
    (std::fs::read_to_string(&log).expect("the stubs ran"), said)
}

#[test]
fn the_postinst_defers_a_backends_restart_to_its_last_session() {
    if !is_root() {
        ac_tests::skip("AC_PACKAGES_REQUIRED", "the postinst's test hides /run in a mount namespace: root only");
        return;
    }
    // A backend of this version catches SIGUSR2: reloaded (restarts when idle), not restarted.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = BackendProcess::start(dir.path(), ANY_PORT);
    let (calls, said) = postinst_upgrade("ac-backend", backend.child.id());
    assert!(calls.contains("deb-systemd-invoke reload ac-backend.service"), "{calls}");
    assert!(!calls.contains("try-restart"), "a backend with sessions restarted: {calls}");
    assert!(said.contains("restarts on this version when its last session ends"), "{said}");
    // An idle backend sent SIGUSR2 exits 75 at once (`an_idle_backend_asked_to_restart_...`);
    // a /proc entry would outlive it (an unreaped child), its exit status does not.
    let exited = exited_within(&mut backend.child, Duration::from_secs(1));
    assert!(exited.is_none(), "the postinst itself sent nothing, yet it exited {exited:?}: {}", log_of(&backend));

    // One that would die of SIGUSR2 (an older backend: here a process that does not catch it)
    // restarts as before; so does arm-server, whose state is on disk.
    let mut old = Command::new("sleep").arg("60").spawn().expect("sleep");
    let (calls, said) = postinst_upgrade("ac-backend", old.id());
    assert!(calls.contains("deb-systemd-invoke try-restart ac-backend.service"), "{calls}");
    assert!(!calls.contains("invoke reload"), "{calls}");
    assert_eq!(said, "", "{said}");
    let _ = old.kill();
    let _ = old.wait();
    let (calls, _) = postinst_upgrade("arm-server", std::process::id());
    assert!(calls.contains("deb-systemd-invoke try-restart arm-server.service"), "{calls}");
    assert!(!calls.contains("systemctl show"), "{calls}");
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
