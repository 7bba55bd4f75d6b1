//! The links' tests: orders kept across a restart, and delivered when written just before one
//! (a backend behind a UDP relay that drops the link's packets).

use super::*;
use ac_proto::backend::{Hello, Reply, ALPN};
use ac_proto::capability::Signer;
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::tls;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::UdpSocket;

impl Links {
    /// Retires `host`'s link and returns the orders it left unsent, in their order.
    async fn left_unsent(&self, host: &str) -> Vec<Order> {
        let handle = self.handles.lock().expect("links poisoned").remove(host).expect("a link");
        handle.retire.notify_one();
        let mut queue = handle.queue.lock().await;
        while let Ok(order) = queue.orders.try_recv() {
            queue.pending.push(order);
        }
        std::mem::take(&mut queue.pending)
    }
}

/// Orders queued while a backend is unreachable outlive its link being started again (as
/// when the replicas change): the new link takes them over, an admin's fault clear
/// included, which no later step would send again.
#[tokio::test]
async fn orders_queued_before_a_link_restarts_are_kept() {
    tokio::time::timeout(Duration::from_secs(10), restart_with_orders_queued()).await.expect("no link waits forever");
}

/// Links reporting to `events`, a backend silent for `timeout` being down.
fn links(events: mpsc::UnboundedSender<LinkEvent>, timeout: Duration) -> Links {
    let signer = Signer::from_pkcs8(&Signer::generate_pkcs8().unwrap()).unwrap();
    let timing = (timeout, Duration::from_secs(1));
    Links::new(Arc::new(ManagerKeys::new(signer, Vec::new())), events, timing, Tuning::default())
}

/// Host `h1`, its backend at `addr` with a certificate for `server_name` from `ca_pem`.
fn host(addr: SocketAddr, server_name: &str, ca_pem: &str) -> Host {
    Host {
        name: "h1".into(),
        addr,
        server_name: server_name.into(),
        ca_pem: ca_pem.into(),
        labels: Vec::new(),
        draining: false,
        up: false,
        devices: Vec::new(),
        mismatch: None,
        states: Default::default(),
    }
}

async fn restart_with_orders_queued() {
    let (events, _heard) = mpsc::unbounded_channel();
    let links = links(events, Duration::from_secs(1));
    // A CA that does not parse: the link never dials, it waits to try again.
    let host = host("127.0.0.1:9".parse().unwrap(), "h1", "not a certificate");
    links.start(&host);
    assert!(links.clear_faults("h1", 3));
    links.revoke("h1", 7, 100);
    // Let the first task take them from the channel.
    tokio::time::sleep(Duration::from_millis(50)).await;
    links.start(&host);
    links.revoke("h1", 8, 100);
    links.start(&host);
    // A task holds the queue (the last, or one retired and about to give it up).
    let queue = links.handles.lock().expect("links poisoned")["h1"].queue.clone();
    while queue.try_lock().is_ok() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let left = links.left_unsent("h1").await;
    let revoke = |capability| Order::Revoke(Revoke { capability, expires: 100 });
    assert_eq!(left, vec![Order::ClearFaults { index: 3 }, revoke(7), revoke(8)]);
}

/// A backend's side of registration links: it welcomes each link, and reads a link's
/// orders only when the test says (as a busy backend reads late).
struct Backend {
    endpoint: quinn::Endpoint,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

/// A welcomed link: its connection, its orders' reader, and the stream's sending half
/// (kept: its end would end the link).
type Welcomed = (quinn::Connection, FrameReader, quinn::SendStream);

impl Backend {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let files = tls::ensure_self_signed(dir.path(), &["localhost".to_string()], &[]).unwrap();
        let crypto = tls::server_crypto(tls::load_identity(&files.cert, &files.key).unwrap(), ALPN).unwrap();
        let addr = "127.0.0.1:0".parse().unwrap();
        let endpoint = ac_proto::transport::server_endpoint(addr, crypto, &Tuning::default(), None).unwrap();
        Self { endpoint, ca_pem: std::fs::read_to_string(&files.ca_cert).unwrap(), _dir: dir }
    }

    /// Accepts the next link and welcomes its registration (a dial the link gave up on
    /// mid-handshake, as while its packets are lost, is passed over: it dials again).
    async fn welcome(&self) -> Welcomed {
        let connection = loop {
            if let Ok(connection) = self.endpoint.accept().await.expect("a link").await {
                break connection;
            }
        };
        let (mut send, mut recv) = connection.accept_bi().await.expect("its stream");
        let mut preamble = [0u8; 4];
        recv.read_exact(&mut preamble).await.expect("a preamble");
        let mut reader = FrameReader::new(recv);
        let _: Hello = reader.expect_frame().await.expect("a hello");
        let welcome = Reply { id: 0, response: Response::Devices(Vec::new()) };
        send.write_all(&frame_bytes(&welcome).unwrap()).await.expect("a welcome");
        (connection, reader, send)
    }
}

/// A UDP relay in front of a backend, one socket per client address (as a NAT), whose
/// datagrams toward the backend the test can drop: a link that loses its packets.
struct Relay {
    addr: SocketAddr,
    dropping: Arc<AtomicBool>,
}

impl Relay {
    async fn new(backend: SocketAddr) -> Self {
        let outer = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let relay = Relay { addr: outer.local_addr().unwrap(), dropping: Arc::new(AtomicBool::new(false)) };
        let dropping = relay.dropping.clone();
        tokio::spawn(async move {
            let mut inners: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = vec![0u8; 65536];
            while let Ok((n, client)) = outer.recv_from(&mut buf).await {
                let inner = match inners.get(&client) {
                    Some(inner) => inner.clone(),
                    None => {
                        let inner = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
                        inner.connect(backend).await.unwrap();
                        tokio::spawn(answer(inner.clone(), outer.clone(), client));
                        inners.insert(client, inner.clone());
                        inner
                    }
                };
                if !dropping.load(Ordering::SeqCst) {
                    let _ = inner.send(&buf[..n]).await;
                }
            }
        });
        relay
    }
}

/// The backend's datagrams to `client`, relayed.
async fn answer(inner: Arc<UdpSocket>, outer: Arc<UdpSocket>, client: SocketAddr) {
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = inner.recv(&mut buf).await {
        let _ = outer.send_to(&buf[..n], client).await;
    }
}

/// A link's orders read to the end of its stream (or its loss), then the connection closed
/// as a backend closes it.
async fn read_to_end((connection, mut reader, _send): Welcomed) -> Vec<Order> {
    let mut orders = Vec::new();
    while let Ok(Some(order)) = reader.read_frame::<Order>().await {
        orders.push(order);
    }
    connection.close(close::NORMAL.into(), b"orders read");
    orders
}

/// An order the link wrote just before it was started again reaches the backend, even
/// when its packets were lost until then: the old link ends its stream and waits for the
/// backend to read it, where it used to drop the connection with the order undelivered (a
/// fault clear, which nothing sends again).
#[tokio::test]
async fn an_order_written_just_before_a_restart_is_delivered() {
    tokio::time::timeout(Duration::from_secs(60), restart_after_an_order_is_written())
        .await
        .expect("no link waits forever");
}

async fn restart_after_an_order_is_written() {
    let backend = Backend::new();
    let relay = Relay::new(backend.endpoint.local_addr().unwrap()).await;
    let (events, mut heard) = mpsc::unbounded_channel();
    let links = links(events, Duration::from_secs(30));
    let host = host(relay.addr, "localhost", &backend.ca_pem);
    links.start(&host);
    let first = backend.welcome().await;
    while heard.recv().await != Some(LinkEvent::Up { host: "h1".into(), up: true }) {}
    // The order is written while the link loses its packets, and the link started again.
    relay.dropping.store(true, Ordering::SeqCst);
    assert!(links.clear_faults("h1", 3));
    tokio::time::sleep(Duration::from_millis(200)).await;
    links.start(&host);
    tokio::time::sleep(Duration::from_millis(200)).await;
    relay.dropping.store(false, Ordering::SeqCst);
    // Without the wait, the first connection is gone: its stream ends when the backend's
    // side times out (10 s), the order never read.
    let first = read_to_end(first).await;
    let second = backend.welcome().await;
    // Removed: the second link ends its stream once its orders are written.
    links.stop("h1");
    let second = read_to_end(second).await;
    let cleared = first.iter().chain(&second).filter(|o| **o == Order::ClearFaults { index: 3 }).count();
    assert_eq!(cleared, 1, "the first link's orders {first:?}, the second's {second:?}");
}
