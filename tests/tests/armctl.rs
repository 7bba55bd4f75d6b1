//! The `armctl` binary: tables, `--json`, and exit codes scripts can rely on.

use std::process::Command;

use ac_tests::{workspace_binary, TestCluster};

fn armctl(c: &TestCluster, admin: bool, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(workspace_binary("armctl"));
    cmd.args(["--arm", &c.arm.addr().to_string()]).arg("--ca").arg(c.arm.ca_cert());
    let (cert, key) = c.arm.admin_identity();
    if admin {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    } else {
        cmd.args(["--cert", "/nonexistent", "--key", "/nonexistent"]);
    }
    let out = cmd.args(args).output().expect("armctl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

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
