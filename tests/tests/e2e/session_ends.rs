//! Sessions ended by another process of their job (backend protocol 17, `Hello::End`): proven
//! by the session's ticket and nothing less, and the CUDA shim's parent ending the sessions of
//! children that ended with `_exit`, which would otherwise be held for a resumption that never
//! comes.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use ac_frontend::{end_session, Ended};
use ac_proto::backend::{close, link, Hello, SessionId};
use ac_tests::{cuda, TestBackend};

use crate::cuda_shim::{command, cuda_cluster_timed};
use crate::standin;

/// A session's ticket ends it from another connection, at once: its memory is freed and its
/// own connection told why; a wrong token or a session that is not there ends nothing, and the
/// session goes on; a ticket used twice says the session had ended already; a backend of
/// protocol 16 refuses to end another connection's session.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_ended_by_its_ticket_and_by_nothing_less() {
    let backend = TestBackend::start_with(|c| c.session_hold_ms = 600_000).await;
    let acc = backend.connect().await;
    let buffer = acc.alloc_from(&[7u32; 1024]).await.expect("alloc");
    let ticket = acc.ticket();
    assert!(!format!("{ticket:?}").contains("token"), "a ticket's Debug shows no secret: {ticket:?}");

    let options = backend.options();
    let crypto = link::client_crypto(&options).expect("TLS");
    let session = acc.session();
    let strangers = [
        (Hello::End { session, token: [0; 16], capability: vec![] }, close::UNAUTHORIZED, "wrong session token"),
        (
            Hello::End { session: SessionId(999_999), token: [0; 16], capability: vec![] },
            close::SESSION_GONE,
            "not on this backend",
        ),
    ];
    for (hello, code, reason) in strangers {
        let refused = link::open(&options, crypto.clone(), &hello).await.expect_err("refused");
        assert_eq!(refused.close_code(), Some(code), "{refused}");
        assert!(refused.to_string().contains(reason), "{refused}");
    }
    assert_eq!(buffer.to_vec().await.expect("the session goes on"), vec![7u32; 1024]);
    assert_eq!(backend.backend.sessions(), 1);

    assert_eq!(end_session(&ticket).await.expect("ended"), Ended::Now);
    let ended = backend.eventually(Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", backend.backend.sessions());
    let lost = buffer.to_vec().await.expect_err("the session has ended");
    assert!(lost.to_string().contains("ended by another process of its job"), "{lost}");
    assert_eq!(end_session(&ticket).await.expect("said"), Ended::Already);

    // Protocol 16, the last before `Hello::End`.
    let older = TestBackend::start_with(|c| c.only_protocol = Some(16)).await;
    let acc = older.connect().await;
    let refused = end_session(&acc.ticket()).await.expect_err("protocol 16 ends no other connection's session");
    assert!(refused.to_string().contains("needs protocol 17"), "{refused}");
    assert_eq!(acc.alloc_from(&[1u8; 16]).await.expect("the session goes on").to_vec().await.unwrap(), [1u8; 16]);
}

/// A process that asks NVML, then forks two children at once that use CUDA and end with
/// `_exit`, holding device memory (`tests/cuda/nvml_fork.py abrupt`, as `multiprocessing`'s
/// workers end): no exit handler runs in them, their backend would hold their sessions for
/// the resumption hold, and the manager would keep their sessions for its lease (ten minutes
/// each here). The parent, which lives on, ends both: the backend holds the parent's session
/// alone while it waits, and nothing is held once it has exited. (The two children's
/// handshakes with the manager are told apart: each reseeds the random numbers it inherited.)
#[tokio::test(flavor = "multi_thread")]
async fn a_child_that_ends_with_exit_has_its_sessions_ended_by_its_parent() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    // Under a manager, a backend holds a session whose connection went silent for the
    // manager's lease (its `Order::Hold`): ten minutes here, and as long unmanaged.
    let c = cuda_cluster_timed(1, |a| a.lease_ms = 600_000, |b| b.session_hold_ms = 600_000).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_fork.py");
    let mut command =
        command(&c, &shim, std::path::Path::new("python3"), &[probe.to_str().unwrap(), "abrupt"], &[("ARM_ACPN", "1")]);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut parent = command.spawn().expect("python3 starts");
    let mut stdin = parent.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(parent.stdout.take().expect("stdout"));
    let mut reading = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        while !seen.contains("parent: waiting") {
            if stdout.read_line(&mut seen).expect("read") == 0 {
                break;
            }
        }
        (stdout, seen)
    });
    // A parent that hangs is killed, and its output shown below.
    let (stdout, seen) = match tokio::time::timeout(Duration::from_secs(120), &mut reading).await {
        Ok(read) => read.unwrap(),
        Err(_) => {
            parent.kill().expect("kill");
            reading.await.unwrap()
        }
    };
    let children_ran = [
        "child 0: 1 device(s), 1048576 bytes there and back exact, left held",
        "child 1: 1 device(s), 1048576 bytes there and back exact, left held",
        "child 0 exited with 0",
        "child 1 exited with 0",
        "parent: waiting",
    ]
    .iter()
    .all(|line| seen.contains(line));
    // The parent's session alone: the children's were ended, not held for ten minutes.
    let ended = children_ran && c.backends[0].eventually(Duration::from_secs(60), |b| b.sessions() == 1).await;
    let held = c.backends[0].backend.sessions();
    // A parent that stopped early has closed its stdin.
    let _ = writeln!(stdin, "go");
    drop(stdin);
    let out = tokio::task::spawn_blocking(move || {
        let mut rest = seen;
        let mut stdout = stdout;
        std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read");
        let out = parent.wait_with_output().expect("the parent exits");
        (rest, out)
    })
    .await
    .unwrap();
    let (stdout, out) = out;
    let text = format!("{:?}\nstdout:\n{stdout}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(children_ran, "the children did not run as they should:\n{text}");
    assert!(ended, "the backend still held {held} session(s) a minute after the children died:\n{text}");
    assert!(out.status.success() && stdout.contains("nvml fork done"), "{text}");
    assert_eq!(text.matches("ended without closing its session").count(), 2, "once a child:\n{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the processes exited:\n{text}");
    let ended = c.backends[0].eventually(Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    standin::assert_no_violations();
}
