//! The control loop driven directly: a client's envelopes over a real QUIC connection on
//! loopback (no daemon, no hello: the stream starts where the hello's welcome left it), its
//! replies read back, fences asked as bulk copies ask for them.

use ac_proto::backend::{
    BufferId, DevicePtr, Envelope, ErrorKind, Reply, Request, Response, StreamId, Telemetry, ALPN,
};
use ac_proto::frame::frame_bytes;
use ac_proto::{tls, transport};

use super::*;
use crate::config::CopySettings;
use crate::device::{CpuDevice, Device};
use crate::session::fence::Fences;
use crate::session::{Limits, Registry};

/// A session's control loop serving the first stream of a client's connection.
struct Bed {
    send: quinn::SendStream,
    replies: FrameReader,
    fences: Fences,
    served: tokio::task::JoinHandle<Result<(), Closing>>,
    _kept: (quinn::Connection, quinn::Endpoint, quinn::Endpoint, tempfile::TempDir),
}

async fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let files = tls::ensure_self_signed(dir.path(), &["127.0.0.1".to_string()], &[]).unwrap();
    let identity = tls::load_identity(&files.cert, &files.key).unwrap();
    let tuning = transport::Tuning::default();
    let listen = "127.0.0.1:0".parse().unwrap();
    let server =
        transport::server_endpoint(listen, tls::server_crypto(identity, ALPN).unwrap(), &tuning, None).unwrap();
    let addr = server.local_addr().unwrap();
    let crypto = std::sync::Arc::new(tls::client_crypto(tls::load_roots(&files.ca_cert).unwrap(), ALPN).unwrap());
    let client = transport::client_endpoint(addr, Some(crypto), &tuning).unwrap();
    // The server side takes part in the handshake once it accepts the incoming connection.
    let accepting = async { server.accept().await.unwrap().await.unwrap() };
    let (dialed, accepted) = tokio::join!(client.connect(addr, "127.0.0.1").unwrap(), accepting);
    let dialed = dialed.unwrap();

    let device = Arc::new(CpuDevice::new(0, 1 << 20));
    let context = device.open_context().unwrap();
    let (fences, asked) = Fences::channel();
    let limits = Limits { budget: 16 << 20, quota: None };
    let (session, rejoins) = Registry::default().open(
        context,
        CopySettings::default(),
        (None, 0, device),
        fences.clone(),
        limits,
        Arc::new(Metrics::default()),
    );
    let (send, recv) = dialed.open_bi().await.unwrap();
    let served = tokio::spawn(async move {
        // The stream reaches this side with its first bytes.
        let (out, inbound) = accepted.accept_bi().await.unwrap();
        let line = Line {
            conn: accepted,
            reader: FrameReader::new(inbound),
            outbox: Arc::new(Outbox::new(out)),
            rejoins,
            hold: std::time::Duration::ZERO,
        };
        serve(session, line, asked).await
    });
    Bed { send, replies: FrameReader::new(recv), fences, served, _kept: (dialed, client, server, dir) }
}

impl Bed {
    async fn send(&mut self, id: u64, request: Request) {
        self.send.write_all(&frame_bytes(&Envelope { id, request }).unwrap()).await.unwrap();
    }

    async fn reply(&mut self) -> Reply {
        self.replies.expect_frame().await.unwrap()
    }
}

#[tokio::test]
async fn replies_answer_their_ids_and_an_asynchronous_failure_waits_for_the_next_synchronize() {
    let mut bed = bed().await;
    bed.send(1, Request::MemAlloc { bytes: 1024 }).await;
    let Reply { id: 1, response: Response::Buffer(buffer) } = bed.reply().await else { panic!("a buffer") };
    // Sent with id 0, as a launch or a memset is: no reply; a stranger's buffer fails it.
    let stranger = DevicePtr { buffer: BufferId(buffer.0 + 99), offset: 0 };
    bed.send(0, Request::Memset { dst: stranger, len: 4, value: 1, stream: StreamId(0) }).await;
    bed.send(2, Request::DeviceInfo).await;
    let info = bed.reply().await;
    assert!(matches!(info, Reply { id: 2, response: Response::Info(_) }), "the next reply is id 2's: {info:?}");
    bed.send(3, Request::Synchronize { stream: None }).await;
    match bed.reply().await {
        Reply { id: 3, response: Response::Error(e) } => assert_eq!(e.kind, ErrorKind::InvalidBuffer, "{e}"),
        other => panic!("the synchronize reports the memset's failure: {other:?}"),
    }
    bed.send(4, Request::Synchronize { stream: None }).await;
    assert_eq!(bed.reply().await, Reply { id: 4, response: Response::Ok }, "an error is reported once");
}

/// A CPU device has no sensors: every reading is absent, and the memory is the session's own.
#[tokio::test]
async fn telemetry_reads_no_sensors_of_a_cpu_device_and_the_memory_the_session_holds() {
    let mut bed = bed().await;
    bed.send(1, Request::MemAlloc { bytes: 3000 }).await;
    assert!(matches!(bed.reply().await.response, Response::Buffer(_)));
    bed.send(2, Request::Telemetry).await;
    let expected = Telemetry { session_memory: 3000, ..Telemetry::default() };
    assert_eq!(bed.reply().await, Reply { id: 2, response: Response::Telemetry(expected) });
}

#[tokio::test]
async fn a_copys_fence_is_admitted_once_the_envelopes_before_its_position_are_handled() {
    let mut bed = bed().await;
    let fences = bed.fences.clone();
    let copy = tokio::spawn(async move { fences.wait(2).await });
    bed.send(1, Request::DeviceInfo).await;
    assert_eq!(bed.reply().await.id, 1);
    // One envelope handled: a copy at position 2 cannot have started, whenever it asked. (An
    // admission too early would race with this look: `fence.rs`'s own tests pin the order.)
    assert!(!copy.is_finished(), "admitted after 1 of the 2 envelopes before it");
    bed.send(2, Request::DeviceInfo).await;
    assert_eq!(bed.reply().await.id, 2);
    copy.await.unwrap().expect("admitted after both, with no pending error");
}

#[tokio::test]
async fn bytes_that_do_not_parse_close_the_connection_with_their_reason() {
    let mut bed = bed().await;
    bed.send(1, Request::DeviceInfo).await;
    assert_eq!(bed.reply().await.id, 1);
    let mut garbage = 3u32.to_le_bytes().to_vec();
    garbage.extend_from_slice(&[0xff; 3]);
    bed.send.write_all(&garbage).await.unwrap();
    let closing = bed.served.await.unwrap().expect_err("the loop ends the connection");
    assert_eq!(closing.code, close::MALFORMED, "{}", closing.reason);
}
