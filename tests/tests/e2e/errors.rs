//! Bad requests get clear errors; nothing else changes and the session goes on.

use std::time::Duration;

use ac_frontend::{Error, ErrorKind, KernelArg, LaunchDims};
use ac_proto::backend::{DevicePtr, Envelope, FunctionId, Hello, ModuleSource, Reply, Request, Response, StreamId};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_tests::{pattern, TestBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_an_error_and_the_daemon_serves_on() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let keep = acc.alloc::<u8>(40 << 20).await.unwrap();
    let err = acc.alloc::<u8>(40 << 20).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfMemory), "{err}");
    assert!(err.to_string().contains("out of device memory"), "{err}");
    // The session and the daemon go on; another client too.
    keep.copy_from_host(&vec![1u8; 40 << 20]).await.unwrap();
    let other = tb.connect().await;
    other.alloc::<u8>(20 << 20).await.unwrap();
    assert_eq!(keep.to_vec().await.unwrap().iter().filter(|&&b| b == 1).count(), 40 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_bounds_accesses_are_refused_and_change_nothing() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let data = pattern(1000, 9);
    let buf = acc.alloc_from(&data).await.unwrap();
    // Local check: more than the buffer holds.
    let err = buf.copy_from_host(&vec![0.0; 1001]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Remote check: a kernel told to touch more than the buffer.
    let fill = acc.builtin().await.unwrap().function("fill").await.unwrap();
    fill.launch(LaunchDims::linear(2000, 256), &[buf.arg(), 0.0f32.into(), 2000u64.into()]).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "{err}");
    // A pointer past the end.
    fill.launch(LaunchDims::linear(1, 1), &[buf.at(5000), 0.0f32.into(), 1u64.into()]).await.unwrap();
    assert_eq!(acc.synchronize().await.unwrap_err().kind(), Some(ErrorKind::OutOfBounds));
    // A size of four TiB of floats: once aborted the whole backend (it built them first).
    fill.launch(LaunchDims::linear(1, 1), &[buf.arg(), 0.0f32.into(), (1u64 << 40).into()]).await.unwrap();
    assert_eq!(acc.synchronize().await.unwrap_err().kind(), Some(ErrorKind::OutOfBounds));
    // The error was reported once; nothing was written.
    acc.synchronize().await.unwrap();
    assert_eq!(buf.to_vec().await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_and_foreign_buffer_ids_are_refused() {
    let tb = TestBackend::start(64).await;
    let alice = tb.connect().await;
    let bob = tb.connect().await;
    let data = pattern(256, 1);
    let secret = alice.alloc_from(&data).await.unwrap();
    let fill = bob.builtin().await.unwrap().function("fill").await.unwrap();
    // Bob names Alice's buffer id: unknown in his session.
    fill.launch(LaunchDims::linear(256, 64), &[secret.arg(), 0.0f32.into(), 256u64.into()]).await.unwrap();
    let err = bob.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidBuffer), "{err}");
    assert_eq!(secret.to_vec().await.unwrap(), data, "another session's buffer was touched");

    // A freed buffer.
    let gone = alice.alloc::<f32>(16).await.unwrap();
    let stale: KernelArg = gone.arg();
    gone.free().await.unwrap();
    let afill = alice.builtin().await.unwrap().function("fill").await.unwrap();
    afill.launch(LaunchDims::linear(16, 16), &[stale, 1.0f32.into(), 16u64.into()]).await.unwrap();
    assert_eq!(alice.synchronize().await.unwrap_err().kind(), Some(ErrorKind::InvalidBuffer));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kernels_bad_arguments_and_ptx_get_clear_errors() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let module = acc.builtin().await.unwrap();
    let err = module.function("no_such_kernel").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::UnknownKernel), "{err}");
    let saxpy = module.function("saxpy").await.unwrap();
    let buf = acc.alloc::<f32>(4).await.unwrap();
    // Wrong count and wrong type: refused before sending.
    let err = saxpy.launch(LaunchDims::linear(4, 4), &[buf.arg()]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err =
        saxpy.launch(LaunchDims::linear(4, 4), &[1u32.into(), buf.arg(), buf.arg(), 4u64.into()]).await.unwrap_err();
    assert!(err.to_string().contains("takes"), "{err}");
    // A launch shape no device accepts: refused by the backend, reported at synchronize.
    let shape = LaunchDims::new([1, 1, 1], [2048, 1, 1]);
    saxpy.launch(shape, &[1.0f32.into(), buf.arg(), buf.arg(), 4u64.into()]).await.unwrap();
    assert_eq!(acc.synchronize().await.unwrap_err().kind(), Some(ErrorKind::InvalidArgument));
    let err = acc.load_ptx(".version 8.0\n.target sm_90\n").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
    assert!(err.to_string().contains("needs a CUDA device"), "{err}");
    acc.ping().await.unwrap();
}

/// Sends envelopes on a raw session and returns the replies, for what the SDK refuses to send.
async fn raw_exchange(tb: &TestBackend, envelopes: &[(Envelope, Vec<u8>)], replies: usize) -> Vec<Reply> {
    let (_conn, mut send, recv) =
        tb.raw_session(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap()).await;
    let mut reader = FrameReader::new(recv);
    let welcome: Reply = reader.expect_frame().await.unwrap();
    assert!(matches!(welcome.response, Response::Welcome { .. }));
    for (envelope, payload) in envelopes {
        send.write_all(&frame_bytes(envelope).unwrap()).await.unwrap();
        send.write_all(payload).await.unwrap();
    }
    let mut out = Vec::new();
    for _ in 0..replies {
        out.push(tokio::time::timeout(Duration::from_secs(5), reader.expect_frame()).await.unwrap().unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_checks_what_a_raw_client_sends() {
    let tb = TestBackend::start(64).await;
    let ptr = |offset| DevicePtr { buffer: ac_proto::backend::BufferId(1), offset };
    let env = |id, request| (Envelope { id, request }, Vec::new());
    let replies = raw_exchange(
        &tb,
        &[
            env(1, Request::MemAlloc { bytes: 64 }),
            (Envelope { id: 0, request: Request::MemWrite { dst: ptr(60), len: 8, stream: StreamId(0) } }, vec![1; 8]),
            env(2, Request::Synchronize { stream: None }),
            env(3, Request::MemReadSync { src: ptr(0), len: 65 }),
            env(4, Request::ModuleLoad { source: ModuleSource::Builtin("builtin".into()), len: 0 }),
            env(5, Request::FunctionLookup { module: ac_proto::backend::ModuleId(2), name: "fill".into() }),
            env(6, Request::Synchronize { stream: Some(StreamId(99)) }),
            env(7, Request::MemFree { buffer: ac_proto::backend::BufferId(42) }),
            env(8, Request::Ping),
        ],
        8,
    )
    .await;
    let kinds: Vec<_> = replies
        .iter()
        .map(|r| match &r.response {
            Response::Error(e) => format!("{}:{:?}", r.id, e.kind),
            other => format!("{}:{}", r.id, format!("{other:?}").split([' ', '(']).next().unwrap()),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "1:Buffer",
            "2:OutOfBounds",
            "3:OutOfBounds",
            "4:Module",
            "5:Function",
            "6:InvalidStream",
            "7:InvalidBuffer",
            "8:Ok"
        ]
    );
    // Wrong argument count and type reach the backend's own check.
    let launch = |args| Request::Launch {
        function: FunctionId(3),
        dims: ac_proto::backend::LaunchDims::linear(1, 1),
        args,
        stream: StreamId(0),
    };
    let replies = raw_exchange(
        &tb,
        &[
            env(1, Request::ModuleLoad { source: ModuleSource::Builtin("builtin".into()), len: 0 }),
            env(2, Request::FunctionLookup { module: ac_proto::backend::ModuleId(2), name: "fill".into() }),
            env(0, launch(vec![KernelArg::F32(1.0)])),
            env(4, Request::Synchronize { stream: None }),
            env(0, launch(vec![KernelArg::F32(1.0), KernelArg::F32(1.0), KernelArg::U64(1)])),
            env(5, Request::Synchronize { stream: None }),
        ],
        4,
    )
    .await;
    for reply in &replies[2..] {
        let Response::Error(e) = &reply.response else { panic!("expected an error, got {reply:?}") };
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_read_reports_an_earlier_launch_error_once() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let buf = acc.alloc_from(&[1.0f32; 8]).await.unwrap();
    let fill = acc.builtin().await.unwrap().function("fill").await.unwrap();
    fill.launch(LaunchDims::linear(9, 9), &[buf.arg(), 0.0f32.into(), 9u64.into()]).await.unwrap();
    let err = buf.to_vec().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "{err}");
    assert_eq!(buf.to_vec().await.unwrap(), vec![1.0; 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpipelined_copy_over_the_payload_budget_is_refused() {
    let tb = TestBackend::start_with(|c| {
        c.memory_mib = 64;
        c.inline_budget_mib = 1;
    })
    .await;
    let acc = tb.connect().await;
    let buf = acc.alloc::<u8>(4 << 20).await.unwrap();
    // Staged whole in the backend's memory, a 4 MiB copy would hold four times the budget.
    acc.set_copy_options(ac_frontend::CopyOptions { pipelined: false, ..Default::default() });
    let err = buf.copy_from_host(&vec![7u8; 4 << 20]).await.unwrap_err();
    assert!(err.to_string().contains("exceeds the session's payload budget of 1048576 bytes"), "{err}");
    let mut back = vec![0u8; 4 << 20];
    let err = buf.copy_to_host(&mut back).await.unwrap_err();
    assert!(err.to_string().contains("exceeds the session's payload budget"), "{err}");
    // Pipelined, a copy of any size holds a chunk at a time, and the session goes on.
    acc.set_copy_options(ac_frontend::CopyOptions::default());
    buf.copy_from_host(&vec![7u8; 4 << 20]).await.unwrap();
    buf.copy_to_host(&mut back).await.unwrap();
    assert!(back.iter().all(|&b| b == 7));
}
