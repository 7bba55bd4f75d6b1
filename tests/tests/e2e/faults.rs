//! Malformed input, wrong versions, dead peers: the offending connection is closed with a clear
//! reason, its session is freed, and the daemon keeps serving everyone else.

use std::process::Stdio;
use std::time::Duration;

use ac_proto::backend::{close, Hello, Preamble, Reply, Response};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_tests::{closed_by_peer, TestBackend};
use tokio::io::AsyncBufReadExt;

/// The daemon still serves a normal client.
async fn still_serves(tb: &TestBackend) {
    let acc = tb.connect().await;
    let buf = acc.alloc_from(&[1u32, 2, 3]).await.unwrap();
    assert_eq!(buf.to_vec().await.unwrap(), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_version_gets_a_version_mismatch() {
    let tb = TestBackend::start(64).await;
    let conn = tb.raw_connection().await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(&Preamble { version: 99 }.to_bytes()).await.unwrap();
    let (code, reason) = closed_by_peer(&conn).await;
    assert_eq!(code, close::VERSION_MISMATCH as u64);
    assert!(reason.contains("version mismatch") && reason.contains("99"), "{reason}");
    // The SDK turns that close into its own error type.
    let sdk_error = ac_frontend::Error::from(conn.close_reason().unwrap());
    assert!(matches!(sdk_error, ac_frontend::Error::VersionMismatch(_)), "{sdk_error}");
    still_serves(&tb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_magic_malformed_hello_and_wrong_alpn_are_refused() {
    let tb = TestBackend::start(64).await;
    let conn = tb.raw_connection().await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let (code, reason) = closed_by_peer(&conn).await;
    assert_eq!(code, close::MALFORMED as u64, "{reason}");

    let (conn, _send, _recv) = tb.raw_session(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).await;
    let (code, reason) = closed_by_peer(&conn).await;
    assert_eq!(code, close::MALFORMED as u64);
    assert!(reason.contains("bad hello"), "{reason}");

    // Another protocol's ALPN fails the TLS handshake instead of hanging.
    let roots = ac_proto::tls::load_roots(tb.backend.ca_cert()).unwrap();
    let crypto = std::sync::Arc::new(ac_proto::tls::client_crypto(roots, b"ac-backend/2").unwrap());
    let endpoint =
        ac_proto::transport::client_endpoint(tb.backend.addr(), Some(crypto), &ac_tests::quick_tuning()).unwrap();
    let result =
        tokio::time::timeout(Duration::from_secs(5), endpoint.connect(tb.backend.addr(), "127.0.0.1").unwrap()).await;
    assert!(result.expect("answered in time").is_err());
    still_serves(&tb).await;
}

/// Opens a raw session and sends `bytes` as if they were a request frame.
async fn send_in_session(tb: &TestBackend, bytes: &[u8]) -> (u64, String) {
    let (conn, mut send, recv) =
        tb.raw_session(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap()).await;
    let welcome: Reply = FrameReader::new(recv).expect_frame().await.unwrap();
    assert!(matches!(welcome.response, Response::Welcome { .. }));
    send.write_all(bytes).await.unwrap();
    closed_by_peer(&conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_that_connection() {
    let tb = TestBackend::start(64).await;
    let bystander = tb.connect().await;
    let kept = bystander.alloc_from(&[5u8; 1000]).await.unwrap();

    // An oversized length prefix.
    let (code, reason) = send_in_session(&tb, &[0xff, 0xff, 0xff, 0x7f]).await;
    assert_eq!(code, close::MALFORMED as u64);
    assert!(reason.contains("exceeds the limit"), "{reason}");
    // An unknown message tag: id 1, then variant 200.
    let (code, reason) = send_in_session(&tb, &[2, 0, 0, 0, 1, 200]).await;
    assert_eq!(code, close::MALFORMED as u64);
    assert!(reason.contains("malformed"), "{reason}");
    // Garbage of a plausible length.
    let (code, _) = send_in_session(&tb, &[8, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef]).await;
    assert_eq!(code, close::MALFORMED as u64);
    // An inline payload over the limit.
    let huge = ac_proto::backend::Envelope {
        id: 0,
        request: ac_proto::backend::Request::MemWrite {
            dst: ac_proto::backend::DevicePtr { buffer: ac_proto::backend::BufferId(1), offset: 0 },
            len: 1 << 40,
            stream: ac_proto::backend::StreamId(0),
        },
    };
    let (code, reason) = send_in_session(&tb, &frame_bytes(&huge).unwrap()).await;
    assert_eq!(code, close::PROTOCOL as u64);
    assert!(reason.contains("use a bulk copy"), "{reason}");

    assert_eq!(kept.to_vec().await.unwrap(), vec![5u8; 1000], "the bystander lost nothing");
    assert!(tb.eventually(Duration::from_secs(3), |b| b.sessions() == 1).await, "refused sessions were freed");
    still_serves(&tb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_with_a_wrong_token_is_refused() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let hello = Hello::Attach { session: acc.session(), token: [0; 16] };
    let (conn, _send, _recv) = tb.raw_session(&frame_bytes(&hello).unwrap()).await;
    let (code, reason) = closed_by_peer(&conn).await;
    assert_eq!(code, close::UNAUTHORIZED as u64);
    assert!(reason.contains("wrong token"), "{reason}");
    acc.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closing_mid_transfer_is_cleaned_up() {
    let tb = TestBackend::start(256).await;
    let total = tb.backend.memory_free();
    let bystander = tb.connect().await;
    let data: Vec<u8> = (0..(16 << 20)).map(|i| (i % 251) as u8).collect();
    // A raw session allocates 64 MiB, starts a 64 MiB bulk copy, sends 8 MiB and vanishes.
    let raw = ac_proto::backend::link::open(
        &tb.options(),
        ac_proto::backend::link::client_crypto(&tb.options()).unwrap(),
        &Hello::Open { capability: vec![], device: 0 },
    )
    .await
    .unwrap();
    let mut control = raw.send;
    let alloc =
        ac_proto::backend::Envelope { id: 1, request: ac_proto::backend::Request::MemAlloc { bytes: 64 << 20 } };
    control.write_all(&frame_bytes(&alloc).unwrap()).await.unwrap();
    let mut reader = raw.reader;
    let reply: Reply = reader.expect_frame().await.unwrap();
    let Response::Buffer(buffer) = reply.response else { panic!("{reply:?}") };
    assert_eq!(tb.backend.memory_free(), total - (64 << 20));
    let (mut bulk, _bulk_recv) = raw.connection.open_bi().await.unwrap();
    let header = ac_proto::backend::BulkHeader {
        direction: ac_proto::backend::Direction::HostToDevice,
        ptr: ac_proto::backend::DevicePtr { buffer, offset: 0 },
        len: 64 << 20,
        pipelined: true,
        after: 1,
    };
    bulk.write_all(&frame_bytes(&header).unwrap()).await.unwrap();
    bulk.write_all(&vec![1u8; 8 << 20]).await.unwrap();
    raw.connection.close(0u32.into(), b"gone");

    // Meanwhile another client copies undisturbed.
    let buf = bystander.alloc_from(&data).await.unwrap();
    assert!(buf.to_vec().await.unwrap() == data);
    drop(buf);
    bystander.ping().await.unwrap();
    let freed = tb.eventually(Duration::from_secs(5), |b| b.sessions() == 1 && b.memory_free() == total).await;
    assert!(freed, "sessions {} free {} of {total}", tb.backend.sessions(), tb.backend.memory_free());
}

/// A killed program is silence, as an outage is: its session is held for its hold (1 s here;
/// the lease, 60 s, by default: `tests/resumption.rs`), then freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_process_is_freed_after_the_idle_timeout_and_its_hold() {
    let tb = TestBackend::start_with(|c| {
        c.memory_mib = 512;
        c.session_hold_ms = 1_000;
    })
    .await;
    let total = tb.backend.memory_free();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ac-test-client"))
        .env("AC_BACKEND_ADDR", tb.backend.addr().to_string())
        .env("AC_CA_CERT", tb.backend.ca_cert())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap();
    assert_eq!(first.as_deref(), Some("copying"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tb.backend.sessions(), 1);
    // SIGKILL in the middle of a 128 MiB copy. The session is held for its hold at least (1 s,
    // which starts once the backend has lost the connection, after the kill): not freed at once
    // when its streams break.
    child.kill().await.unwrap();
    let dropped = tb.eventually(Duration::from_millis(900), |b| b.sessions() == 0).await;
    assert!(!dropped, "the killed program's session was freed within its 1 s hold");
    let bystander = tb.connect().await;
    still_serves(&tb).await;
    let freed = tb.eventually(Duration::from_secs(7), |b| b.sessions() == 1 && b.memory_free() == total).await;
    assert!(freed, "sessions {} free {} of {total}", tb.backend.sessions(), tb.backend.memory_free());
    bystander.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_gives_the_client_an_error_not_a_hang() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let buf = acc.alloc::<u8>(1 << 20).await.unwrap();
    tb.backend.shutdown().await;
    let result = tokio::time::timeout(Duration::from_secs(5), buf.to_vec()).await.expect("no hang");
    let err = result.unwrap_err();
    assert!(matches!(err, ac_frontend::Error::Disconnected(_)), "{err}");
    let err = tokio::time::timeout(Duration::from_secs(5), acc.ping()).await.expect("no hang").unwrap_err();
    assert!(err.to_string().contains("shutting down"), "{err}");
}
