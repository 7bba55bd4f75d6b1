//! Bulk lanes (TLS over TCP beside QUIC, `ac_proto::lane`): only a session's own secret attaches
//! one, a refused copy leaves the lane in step for the next, a lane ends with its session, a copy
//! given up halfway costs nothing but its lane, a record that fails to open ends its lane,
//! copies striped over two lanes are exact however they are made, and the daemon shrugs off
//! what is not a lane.

use std::sync::Arc;
use std::time::Duration;

use ac_frontend::{Accelerator, ConnectOptions};
use ac_proto::backend::{
    BufferId, BulkHeader, DevicePtr, Direction, Envelope, ErrorKind, Hello, Preamble, Reply, Request, Response,
    SessionId,
};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::lane::tokio_rustls::rustls::pki_types::ServerName;
use ac_proto::lane::{self, LaneStream, LaneTls};
use ac_proto::tls;
use ac_tests::TestBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type RawLane = FrameReader<LaneStream<LaneTls>>;

/// A session opened by hand: its id, secret and lane port, and its control stream.
struct RawSession {
    session: SessionId,
    token: [u8; 16],
    lane_port: u16,
    link: ac_proto::backend::link::Link,
    /// The id of the last request sent on the control stream.
    sent: u64,
}

async fn raw_session(tb: &TestBackend) -> RawSession {
    let options = tb.options();
    let crypto = ac_proto::backend::link::client_crypto(&options).unwrap();
    let link =
        ac_proto::backend::link::open(&options, crypto, &Hello::Open { capability: vec![], device: 0 }).await.unwrap();
    let Response::Welcome { session, token, lane_port, .. } = link.welcome.clone() else { panic!("no welcome") };
    RawSession { session, token, lane_port, link, sent: 0 }
}

impl RawSession {
    /// Allocates `bytes` on the control stream; the buffer's id.
    async fn alloc(&mut self, bytes: u64) -> BufferId {
        self.sent += 1;
        let envelope = Envelope { id: self.sent, request: Request::MemAlloc { bytes } };
        self.link.send.write_all(&frame_bytes(&envelope).unwrap()).await.unwrap();
        let reply: Reply = self.link.reader.expect_frame().await.unwrap();
        match reply.response {
            Response::Buffer(id) => id,
            other => panic!("no buffer: {other:?}"),
        }
    }

    /// The hello that attaches a lane to this session.
    fn attach(&self) -> Hello {
        Hello::Attach { session: self.session, token: self.token }
    }

    /// A lane attached to this session, and the backend's reply.
    async fn lane(&self, tb: &TestBackend) -> (RawLane, Response) {
        raw_lane(tb, self.lane_port, &self.attach()).await
    }
}

/// A TLS connection to the lane port that has said `hello`, and the backend's reply.
async fn raw_lane(tb: &TestBackend, port: u16, hello: &Hello) -> (RawLane, Response) {
    let roots = tls::load_roots(tb.backend.ca_cert()).unwrap();
    let socket = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = lane::connect(socket, &lane::client_config(roots).unwrap(), name).await.unwrap();
    let mut opening = Preamble::CURRENT.to_bytes().to_vec();
    opening.extend_from_slice(&frame_bytes(hello).unwrap());
    stream.write_all(&opening).await.unwrap();
    stream.flush().await.unwrap();
    let mut lane = FrameReader::new(LaneStream(stream));
    let reply: Reply = lane.expect_frame().await.unwrap();
    (lane, reply.response)
}

/// Sends a copy's header (and its payload, host to device) on a lane; the reply.
async fn lane_copy(lane: &mut RawLane, header: BulkHeader, payload: &[u8]) -> Response {
    let stream = &mut lane.stream_mut().0;
    stream.write_all(&frame_bytes(&header).unwrap()).await.unwrap();
    stream.write_all(payload).await.unwrap();
    stream.flush().await.unwrap();
    let reply: Reply = lane.expect_frame().await.unwrap();
    reply.response
}

fn header(direction: Direction, buffer: BufferId, offset: u64, len: u64) -> BulkHeader {
    BulkHeader { direction, ptr: DevicePtr { buffer, offset }, len, pipelined: true, after: 0 }
}

/// The daemon still serves a normal client, whose large copies use lanes: a lane that could not
/// be dialed would send them over QUIC streams, exact too, and leave the client none.
async fn still_serves(tb: &TestBackend) {
    let acc = tb.connect().await;
    let data: Vec<u32> = (0..1 << 20).collect();
    let buf = acc.alloc_from(&data).await.unwrap();
    assert_eq!(buf.to_vec().await.unwrap(), data);
    assert!(acc.bulk_lanes() > 0, "the copies went over QUIC: no lane could be dialed");
}

/// This process's established TCP connections to lane port `port` (the client ends; the
/// backend's own ends have it as their source), as `ss` shows them: (local port, bytes acked by
/// the backend, bytes received from it).
fn client_lanes(port: u16) -> Vec<(u16, u64, u64)> {
    let out = std::process::Command::new("ss")
        .args(["-Htin", "state", "established", "dst", &format!("127.0.0.1:{port}")])
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "ss: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lanes = Vec::new();
    for line in text.lines() {
        let counter = |key: &str| {
            let found = line.split_whitespace().find_map(|w| w.strip_prefix(key));
            found.map(|n| n.parse::<u64>().expect("a byte count"))
        };
        if !line.starts_with(char::is_whitespace) {
            // `RECV-Q SEND-Q LOCAL PEER`: the local address comes first.
            let local = line.split_whitespace().find_map(|w| w.parse::<std::net::SocketAddr>().ok());
            lanes.push((local.expect("a local address").port(), 0, 0));
        } else if let Some(last) = lanes.last_mut() {
            last.1 = counter("bytes_acked:").unwrap_or(0);
            last.2 = counter("bytes_received:").unwrap_or(0);
        }
    }
    lanes
}

/// The one lane open to `port` now (the session may have one).
fn the_lane(port: u16) -> (u16, u64, u64) {
    match client_lanes(port)[..] {
        [lane] => lane,
        ref other => panic!("not one lane open: {other:?}"),
    }
}

/// Bytes that must have gone over the lane, in a copy's direction, before it is given up.
const FLOWED: u64 = 1 << 20;

/// Drives `copy` on the open lane `lane` (to `port`) and gives it up (drops it) once at least
/// [`FLOWED`] bytes of it went over that lane in its direction (`to_device`: acked by the
/// backend; else received from it): cut mid-copy, on a lane dialed before, never while dialing.
/// The copy is polled one step at a time and looked at between steps. A step moves bytes for as
/// long as the other side keeps up (mostly a few MiB, up to 70 seen), so a step may end the copy
/// before a look: then it was not cut, and `false` says so (the caller tries again).
async fn give_up_mid_copy<F: std::future::Future<Output = ac_frontend::Result<()>>>(
    copy: F,
    port: u16,
    lane: (u16, u64, u64),
    to_device: bool,
) -> bool {
    let moved = |now: (u16, u64, u64)| if to_device { now.1 - lane.1 } else { now.2 - lane.2 };
    let mut copy = std::pin::pin!(copy);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let step = std::future::poll_fn(|cx| std::task::Poll::Ready(copy.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(copied) = step {
            copied.expect("a whole copy");
            return false;
        }
        // Unpolled, the copy moves no more than the sockets hold: look a few times.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let now = the_lane(port);
            assert_eq!(now.0, lane.0, "the copy dialed a lane of its own");
            if moved(now) >= FLOWED {
                return true;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no byte of the copy went over its lane");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_attaches_only_with_its_sessions_secret() {
    let tb = TestBackend::start(64).await;
    let raw = raw_session(&tb).await;
    assert_ne!(raw.lane_port, 0, "the backend serves lanes by default");
    let wrong = Hello::Attach { session: raw.session, token: [0; 16] };
    let (_, refused) = raw_lane(&tb, raw.lane_port, &wrong).await;
    assert!(matches!(&refused, Response::Error(e) if e.kind == ErrorKind::Unauthorized), "{refused:?}");
    // A lane cannot open a session of its own.
    let open = Hello::Open { capability: vec![], device: 0 };
    let (_, refused) = raw_lane(&tb, raw.lane_port, &open).await;
    assert!(matches!(&refused, Response::Error(e) if e.message.contains("only attaches")), "{refused:?}");
    let (_, welcome) = raw.lane(&tb).await;
    assert!(matches!(welcome, Response::Welcome { session, .. } if session == raw.session), "{welcome:?}");
    still_serves(&tb).await;
}

/// A session attaches no more than twice the lanes its welcome names; one that ends makes room
/// for the next; a program asking for more stripes over those the welcome names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_attaches_at_most_its_lanes() {
    let tb = TestBackend::start_with(|c| {
        c.lanes_per_session = Some(2);
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let raw = raw_session(&tb).await;
    let Response::Welcome { lanes, .. } = raw.link.welcome else { panic!("no welcome") };
    assert_eq!(lanes, 2, "the welcome names the backend's lanes per session");
    // Twice that attach (room for replacements of lanes the backend has not seen close).
    let mut held = Vec::new();
    for _ in 0..4 {
        let (lane, welcome) = raw.lane(&tb).await;
        assert!(matches!(welcome, Response::Welcome { .. }), "{welcome:?}");
        held.push(lane);
    }
    let (_, refused) = raw.lane(&tb).await;
    assert!(
        matches!(&refused, Response::Error(e) if e.kind == ErrorKind::InvalidArgument && e.message.contains("lanes_per_session")),
        "{refused:?}"
    );
    assert_eq!(lanes_refused(&tb).await, 1, "the refusal is counted");
    // The backend counts a lane out once it has seen it close, which this side cannot observe
    // but by trying again: a bound on the wait, not a measurement.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, reply) = raw.lane(&tb).await;
        match reply {
            Response::Welcome { .. } => break,
            refused => assert!(tokio::time::Instant::now() < deadline, "no room after a lane closed: {refused:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A program that asks for 6 lanes stripes over the 2 a session may attach: it dials no
    // lane that the backend refuses.
    let refused_before = lanes_refused(&tb).await;
    let acc = Accelerator::connect(&ConnectOptions { lanes: 6, ..tb.options() }).await.unwrap();
    let data = ac_tests::pattern((16 << 20) / 4, 9);
    let buf = acc.alloc_from(&data).await.unwrap();
    assert!(buf.to_vec().await.unwrap() == data, "the copies arrived changed");
    assert_eq!(lanes_refused(&tb).await, refused_before, "the program dialed lanes past the session's");
    still_serves(&tb).await;
}

/// The lane port of `tb`'s backend (the TCP port of its QUIC port's number).
async fn acc_lane_port(tb: &TestBackend) -> u16 {
    let port = raw_session(tb).await.lane_port;
    assert_ne!(port, 0, "the backend serves lanes");
    port
}

/// The backend's count of refused lanes, from its Prometheus endpoint.
async fn lanes_refused(tb: &TestBackend) -> u64 {
    let addr = tb.backend.metrics_addr().expect("metrics served");
    let (status, body) = ac_tests::prometheus::http_get(addr, "/metrics").await.expect("scrape");
    assert_eq!(status, 200, "{body}");
    let line = body.lines().find(|l| l.starts_with("ac_backend_lanes_refused_total ")).expect("the counter");
    line.rsplit(' ').next().unwrap().parse().expect("a count")
}

/// Whether `bytes` are nothing but TLS alert records (content type 21, two bytes each): all
/// that a TLS server may say to a client it drops.
fn only_tls_alerts(mut bytes: &[u8]) -> bool {
    while let [21, 3, _, 0, 2, _, _, rest @ ..] = bytes {
        bytes = rest;
    }
    bytes.is_empty()
}

/// Reads `socket` until the backend closes it (an end of stream or a reset), within `limit`;
/// what the backend said before. A connection still open after `limit` fails the test.
async fn dropped_within(socket: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut said = Vec::new();
    match tokio::time::timeout(limit, socket.read_to_end(&mut said)).await {
        Ok(_) => said,
        Err(_) => panic!("the backend kept what is not a lane open for {limit:?} (it said {said:?})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_lane_is_dropped_and_the_daemon_serves_on() {
    let tb = TestBackend::start(64).await;
    let raw = raw_session(&tb).await;
    let port = raw.lane_port;
    // Plain text instead of a TLS handshake, and a handshake record of garbage: the backend
    // closes the connection at once, having said nothing but a TLS alert.
    for hello in [b"GET / HTTP/1.1\r\n\r\n".as_slice(), &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]] {
        let mut socket = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        socket.write_all(hello).await.unwrap();
        let said = dropped_within(&mut socket, Duration::from_secs(5)).await;
        assert!(only_tls_alerts(&said), "the backend answered {hello:?} with {said:?}");
    }
    // A connection that says nothing, and one that stops in the middle of its hello, take nothing
    // from anyone else: while they are open, a session attaches a lane and a program's copies go
    // over lanes.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut half = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let attached =
        tokio::time::timeout(Duration::from_secs(5), raw.lane(&tb)).await.expect("a lane attaches meanwhile");
    assert!(matches!(attached.1, Response::Welcome { .. }), "{:?}", attached.1);
    still_serves(&tb).await;
    // And they are dropped at the backend's hello timeout (10 s), not kept for ever.
    for socket in [&mut silent, &mut half] {
        let said = dropped_within(socket, Duration::from_secs(20)).await;
        assert!(only_tls_alerts(&said), "{said:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_copies_leave_the_lane_in_step_for_the_next() {
    let tb = TestBackend::start(64).await;
    let mut raw = raw_session(&tb).await;
    let buffer = raw.alloc(1 << 20).await;
    let (mut lane, _) = raw.lane(&tb).await;
    let data: Vec<u8> = (0..256 << 10).map(|i| (i % 251) as u8).collect();
    // Out of bounds, and an unknown buffer: refused, their payloads read and dropped.
    let beyond = lane_copy(&mut lane, header(Direction::HostToDevice, buffer, 1 << 20, data.len() as u64), &data).await;
    assert!(matches!(&beyond, Response::Error(e) if e.kind == ErrorKind::OutOfBounds), "{beyond:?}");
    let stranger = header(Direction::HostToDevice, BufferId(999), 0, data.len() as u64);
    let unknown = lane_copy(&mut lane, stranger, &data).await;
    assert!(matches!(&unknown, Response::Error(e) if e.kind == ErrorKind::InvalidBuffer), "{unknown:?}");
    let refused_read = lane_copy(&mut lane, header(Direction::DeviceToHost, buffer, 1 << 19, 1 << 20), &[]).await;
    assert!(matches!(&refused_read, Response::Error(e) if e.kind == ErrorKind::OutOfBounds), "{refused_read:?}");
    // The lane is where the client left it: a good copy each way is exact.
    let written = lane_copy(&mut lane, header(Direction::HostToDevice, buffer, 4096, data.len() as u64), &data).await;
    assert_eq!(written, Response::Ok);
    let read = lane_copy(&mut lane, header(Direction::DeviceToHost, buffer, 4096, data.len() as u64), &[]).await;
    assert_eq!(read, Response::Data { len: data.len() as u64 });
    let mut back = vec![0u8; data.len()];
    lane.read_payload_into(&mut back).await.unwrap();
    assert!(back == data, "the bytes read back differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_fails_to_open_ends_its_lane_and_the_session_serves_on() {
    let tb = TestBackend::start(64).await;
    let mut raw = raw_session(&tb).await;
    let buffer = raw.alloc(1 << 20).await;
    let (mut lane, _) = raw.lane(&tb).await;
    // A host-to-device copy's header, then, straight on the socket, the copy's four full
    // records, never sealed with the lane's key.
    let copy = header(Direction::HostToDevice, buffer, 0, 4 * lane::record::MAX_PLAIN as u64);
    let stream = &mut lane.stream_mut().0;
    stream.write_all(&frame_bytes(&copy).unwrap()).await.unwrap();
    stream.flush().await.unwrap();
    let mut record = lane::record::FULL_HEADER.to_vec();
    record.resize(lane::record::FULL_RECORD, 0x55);
    let forged = record.repeat(4);
    let tcp = stream.tcp();
    let mut at = 0;
    while at < forged.len() {
        tcp.writable().await.unwrap();
        match tcp.try_write(&forged[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    // The backend ends the lane (a TLS stream ends at its first bad record): it neither
    // answers on it nor reads on.
    let ended = tokio::time::timeout(Duration::from_secs(20), lane.read_frame::<Reply>()).await;
    assert!(matches!(ended, Ok(Ok(None)) | Ok(Err(_))), "the lane outlived a forged record: {ended:?}");
    // Only the lane ended: its session's control stream answers on, and the backend serves
    // others.
    let second = raw.alloc(64).await;
    assert_ne!(second, buffer, "a fresh buffer");
    still_serves(&tb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_ends_with_its_session() {
    let tb = TestBackend::start(64).await;
    let raw = raw_session(&tb).await;
    let (mut lane, _) = raw.lane(&tb).await;
    raw.link.connection.close(0u32.into(), b"done");
    let ended = tokio::time::timeout(Duration::from_secs(10), lane.read_frame::<Reply>()).await;
    assert!(matches!(ended, Ok(Ok(None)) | Ok(Err(_))), "the lane outlived its session: {ended:?}");
    assert!(tb.eventually(Duration::from_secs(5), |b| b.sessions() == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_given_up_halfway_costs_only_its_lane() {
    // One lane a session (two attached at most): the lanes given up count at the backend until
    // it sees them close, and the program dials their replacements meanwhile.
    let tb = TestBackend::start_with(|c| {
        c.memory_mib = 256;
        c.lanes_per_session = Some(1);
    })
    .await;
    let acc = tb.connect().await;
    let port = acc_lane_port(&tb).await;
    // Large enough that a step of a copy ([`give_up_mid_copy`]) seldom reaches its end.
    let data: Vec<u8> = (0..128 << 20).map(|i| (i % 251) as u8).collect();
    let buf = acc.alloc::<u8>(data.len()).await.unwrap();
    let mut back = vec![0u8; data.len()];
    for to_device in [true, false] {
        let (mut cut, mut tries) = (0, 0);
        while cut < 3 {
            tries += 1;
            assert!(tries <= 10, "{cut} of 10 copies (to device: {to_device}) ended before a look could cut them");
            // A whole copy first (1 MiB: over a lane), so that a lane is open when the next
            // starts; that one is given up with bytes on it, and its lane closes.
            buf.copy_from_host(&data[..1 << 20]).await.unwrap();
            let lane = the_lane(port);
            let given_up = if to_device {
                give_up_mid_copy(buf.copy_from_host(&data), port, lane, true).await
            } else {
                give_up_mid_copy(buf.copy_to_host(&mut back), port, lane, false).await
            };
            if given_up {
                cut += 1;
                let open = client_lanes(port);
                assert!(open.iter().all(|l| l.0 != lane.0), "a lane cut mid-copy is kept: {open:?}");
            }
        }
    }
    buf.copy_from_host(&data).await.unwrap();
    assert!(buf.to_vec().await.unwrap() == data, "the bytes read back differ");
    assert_eq!(acc.bulk_lanes(), 1, "the copies fell back to QUIC streams");
    acc.ping().await.unwrap();
}

/// A device-to-host copy on lanes is exact whether the program's thread blocks on it or a task
/// of the runtime's awaits it, at sizes around the socket's low-water mark and 1 MiB, at odd
/// offsets, striped or not, and with two readers at once. A mark above what is still to come
/// would hang a read: each copy has a deadline far beyond its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_to_host_copies_are_exact_whether_the_caller_blocks_a_thread_or_is_a_task() {
    let tb = TestBackend::start(256).await;
    let acc = Accelerator::connect(&ConnectOptions { lanes: 2, ..tb.options() }).await.unwrap();
    let data: Vec<u8> = (0..40u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let buf = std::sync::Arc::new(acc.alloc_from(&data).await.unwrap());
    // Around the mark (256 KiB) and 1 MiB, at odd offsets, and striped over both lanes.
    let sizes = [(0, (256 << 10) - 1), (3, 256 << 10), (0, (256 << 10) + 1), (0, (1 << 20) - 1), (0, 1 << 20)];
    let deadline = Duration::from_secs(60);
    for (at, len) in sizes.into_iter().chain([(7, (1 << 20) + 12_345), (0, 40 << 20), (4093, 17 << 20)]) {
        let want = &data[at..at + len];
        let mut back = vec![0u8; len];
        let copied = tokio::time::timeout(deadline, buf.copy_to_host_at(at, &mut back)).await;
        copied.expect("a copy hung").unwrap();
        assert!(back == want, "{len} bytes at {at}, read by a blocked thread, differ");
        let from_task = buf.clone();
        let back = tokio::spawn(async move {
            let mut back = vec![0u8; len];
            from_task.copy_to_host_at(at, &mut back).await.map(|()| back)
        });
        let back = tokio::time::timeout(deadline, back).await.expect("a copy hung");
        assert!(back.unwrap().unwrap() == want, "{len} bytes at {at}, read by a task, differ");
    }
    // Two readers at once, one a thread, one a task, as a program's threads sharing a handle.
    let (one, two) = (buf.clone(), buf.clone());
    let both = async move {
        tokio::join!(
            async move {
                let mut back = vec![0u8; 20 << 20];
                one.copy_to_host(&mut back).await.map(|()| back)
            },
            tokio::spawn(async move {
                let mut back = vec![0u8; 20 << 20];
                two.copy_to_host_at(20 << 20, &mut back).await.map(|()| back)
            }),
        )
    };
    let (a, b) = tokio::time::timeout(deadline, both).await.expect("a copy hung");
    assert!(a.unwrap() == data[..20 << 20] && b.unwrap().unwrap() == data[20 << 20..]);
}

/// Copies of one task joined together over shared lanes: a striped copy runs its stripes on
/// threads of their own only when it holds its lanes first, so a small copy that holds one
/// while it waits is never starved by a striped copy that holds the task. Both orders, both
/// directions; a copy that waited forever would trip the deadline, watched from another task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_joined_in_one_task_over_shared_lanes_end_and_are_exact() {
    let tb = TestBackend::start(256).await;
    let acc = Accelerator::connect(&ConnectOptions { lanes: 2, ..tb.options() }).await.unwrap();
    let data: Vec<u8> = (0..32u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    let small: Vec<u8> = data[..1 << 20].iter().map(|b| b ^ 0x5a).collect();
    let (big, little) = (acc.alloc_from(&data).await.unwrap(), acc.alloc::<u8>(small.len()).await.unwrap());
    let (big, little, data, small) = (Arc::new(big), Arc::new(little), Arc::new(data), Arc::new(small));
    for small_first in [true, false] {
        let (big, little, data, small) = (big.clone(), little.clone(), data.clone(), small.clone());
        let joined = tokio::spawn(async move {
            let mut back = vec![0u8; data.len()];
            let (put, read) = if small_first {
                tokio::join!(little.copy_from_host(&small), big.copy_to_host(&mut back))
            } else {
                let (read, put) = tokio::join!(big.copy_to_host(&mut back), little.copy_from_host(&small));
                (put, read)
            };
            put.unwrap();
            read.unwrap();
            assert!(back == *data, "the striped copy read back differs (small first: {small_first})");
            assert!(little.to_vec().await.unwrap() == *small, "the small copy differs");
        });
        let Ok(joined) = tokio::time::timeout(Duration::from_secs(60), joined).await else {
            // A task held forever keeps the runtime from shutting down: end the test here.
            eprintln!("joined copies hung (small first: {small_first})");
            std::process::exit(1);
        };
        joined.unwrap();
    }
}

/// The blocking API (the C ABI's path) with copies striped over two lanes: the bytes are exact,
/// from threads sharing a handle too, and once the backend is gone a copy ends with an error
/// instead of waiting.
#[test]
fn blocking_striped_copies_are_exact_from_threads_sharing_a_handle_and_fail_once_the_backend_is_gone() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tb = rt.block_on(TestBackend::start(256));
    let data: Vec<u8> = (0..48u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let (copied_tx, copied_rx) = std::sync::mpsc::channel();
    let (gone_tx, gone_rx) = std::sync::mpsc::channel::<()>();
    let options = ConnectOptions { lanes: 2, ..tb.options() };
    let program = std::thread::spawn(move || {
        let acc = ac_frontend::blocking::Accelerator::connect(&options).unwrap();
        let buf = acc.alloc_from(&data).unwrap();
        // Under the striping threshold (one stripe), at two stripes' minimum, at odd offsets.
        for (at, len) in [(5, 3 << 20), (0, 16 << 20), (4093, (17 << 20) + 7), (0, 48 << 20)] {
            let mut back = vec![0u8; len];
            buf.copy_to_host_at(at, &mut back).unwrap();
            assert!(back == data[at..at + len], "{len} bytes at {at} differ");
        }
        let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let readers: Vec<_> = (0..3)
                .map(|k| {
                    let buf = &buf;
                    s.spawn(move || {
                        let mut back = vec![0u8; 16 << 20];
                        buf.copy_to_host_at(k * (16 << 20), &mut back).map(|()| back)
                    })
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap().unwrap()).collect()
        });
        assert!(parts.concat() == data, "copies made by threads sharing the handle differ");
        copied_tx.send(()).unwrap();
        gone_rx.recv().unwrap();
        let mut back = vec![0u8; 48 << 20];
        buf.copy_to_host(&mut back).expect_err("a copy from a backend that is gone")
    });
    let within = Duration::from_secs(120);
    copied_rx.recv_timeout(within).expect("the copies hung or failed");
    rt.block_on(tb.backend.shutdown());
    gone_tx.send(()).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || done_tx.send(program.join()));
    let error = done_rx.recv_timeout(within).expect("a copy from a backend that is gone hung").unwrap();
    println!("the copy after the backend went: {error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_lanes_copies_use_quic_streams() {
    let tb = TestBackend::start_with(|c| c.lanes = false).await;
    assert_eq!(raw_session(&tb).await.lane_port, 0, "the welcome names no lane port");
    let data: Vec<u32> = (0..1 << 20).collect();
    let acc = tb.connect().await;
    let buf = acc.alloc_from(&data).await.unwrap();
    assert_eq!(buf.to_vec().await.unwrap(), data);
}
