// shape: one scenario per hostile input (malformed frames, wrong tokens, floods), each short;
// together they are the list SECURITY.md's threat model points to.
//! Live daemons under hostile clients (issue 27, item 2). Real QUIC connections send random and
//! mutated messages: valid frames with invalid contents, requests in the wrong order, huge
//! counts, the ids of other sessions and jobs, and bytes that are no frame at all. Slow clients
//! hold streams half-open, never read their replies, or connect and say nothing.
//!
//! The daemons run as processes of their own, so that their memory is theirs alone. What must
//! hold: they stay up, the bystander sessions' results stay exact, memory stays bounded, and
//! everything the hostile clients held is given back once they are gone.
//!
//! The messages come from a seeded generator; a failure prints its seed, and `AC_HOSTILE_SEED`
//! replays it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ac_frontend::{Accelerator, ConnectOptions, LaunchDims};
use ac_proto::arm::{self, ArmRequest, Ask, JobAuth};
use ac_proto::backend::{
    BufferId, DevicePtr, Envelope, FunctionId, Hello, KernelArg, ModuleId, ModuleSource, Preamble, Reply, Request,
    Response, SessionId, StreamId,
};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_tests::{pattern, quick_tuning, raw_backend_connection, ArmProcess, BackendProcess};

/// Messages each hostile test sends in all.
const MESSAGES: u64 = 100_000;
/// Hostile connections at once.
const HOSTILE_TASKS: u64 = 4;

/// splitmix64: small, seeded, and good enough to pick messages.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    /// What a hostile client puts in a number: a small value (a plausible id or count, often
    /// another session's), a boundary, or anything.
    fn number(&mut self) -> u64 {
        const EDGES: [u64; 7] = [0, 1, u32::MAX as u64, u64::MAX, 1 << 40, i64::MAX as u64, 4095];
        match self.below(4) {
            0 | 1 => self.below(10),
            2 => EDGES[self.below(EDGES.len() as u64) as usize],
            _ => self.next(),
        }
    }

    fn text(&mut self) -> String {
        const WORDS: [&str; 8] = ["saxpy", "fill", "sgemm", "", "builtin", "x\0y", "é", "../../etc/passwd"];
        match self.below(3) {
            0 => WORDS[self.below(WORDS.len() as u64) as usize].to_string(),
            1 => "a".repeat(self.below(5_000) as usize),
            _ => (0..self.below(40)).map(|_| char::from(b' ' + self.below(95) as u8)).collect(),
        }
    }

    /// Flips, cuts or grows `bytes`.
    fn mutate(&mut self, bytes: &mut Vec<u8>) {
        match self.below(4) {
            0 if !bytes.is_empty() => {
                for _ in 0..=self.below(4) {
                    let i = self.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 1 << self.below(8);
                }
            }
            1 => bytes.truncate(self.below(bytes.len() as u64 + 1) as usize),
            2 => bytes.extend((0..self.below(64)).map(|_| self.next() as u8)),
            _ => *bytes = (0..self.below(64)).map(|_| self.next() as u8).collect(),
        }
    }
}

/// The seed for this run: `AC_HOSTILE_SEED`, else the clock; printed so a failure can be replayed.
fn seed() -> u64 {
    let seed = std::env::var("AC_HOSTILE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("hostile clients: AC_HOSTILE_SEED={seed}");
    seed
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon is alive");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of KiB")
}

/// Samples a process's resident memory until stopped; returns the highest sample.
struct RssWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssWatch {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            peak
        });
        Self { stop, task }
    }

    async fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("sampler")
    }
}

/// How long a daemon that stayed up has to answer a fresh client.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// Whether `child` has not exited. Not proof that it is up: a process that still has its
/// `/proc` entry may be a zombie (exited, not reaped) or hung; only an answer shows it serving.
fn running(child: &mut std::process::Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

// ---------------------------------------------------------------------------------------------
// The backend.

/// A random request on a session, with its payload (as long as the request says, so that the
/// stream stays in step unless the request itself is refused).
fn backend_request(rng: &mut Rng) -> (Request, Vec<u8>) {
    let ptr = |rng: &mut Rng| DevicePtr { buffer: BufferId(rng.number()), offset: rng.number() };
    let stream = |rng: &mut Rng| StreamId(rng.number());
    let small = |rng: &mut Rng| if rng.percent(90) { rng.below(4_096) } else { rng.number() };
    let request = match rng.below(18) {
        0 => Request::Ping,
        1 => Request::DeviceInfo,
        2 | 3 => Request::MemAlloc { bytes: if rng.percent(90) { rng.below(65_536) } else { rng.number() } },
        4 => Request::MemFree { buffer: BufferId(rng.number()) },
        5 => Request::MemWrite { dst: ptr(rng), len: small(rng), stream: stream(rng) },
        6 => Request::MemWriteSync { dst: ptr(rng), len: small(rng) },
        7 => Request::MemReadSync { src: ptr(rng), len: small(rng) },
        8 => Request::MemCopy { dst: ptr(rng), src: ptr(rng), len: rng.number(), stream: stream(rng) },
        9 => Request::Memset { dst: ptr(rng), len: rng.number(), value: rng.next() as u8, stream: stream(rng) },
        10 => {
            let source = match rng.below(4) {
                0 => ModuleSource::Builtin(if rng.percent(70) { "builtin".into() } else { rng.text() }),
                1 => ModuleSource::Ptx,
                2 => ModuleSource::Cubin,
                _ => ModuleSource::CudaC { options: vec![rng.text()] },
            };
            Request::ModuleLoad { source, len: small(rng) }
        }
        11 => Request::ModuleUnload { module: ModuleId(rng.number()) },
        12 => Request::FunctionLookup { module: ModuleId(rng.number()), name: rng.text() },
        13..=15 => Request::Launch {
            function: FunctionId(rng.number()),
            dims: ac_proto::backend::LaunchDims {
                grid: [1 + rng.below(64) as u32, 1 + rng.below(2) as u32, 1],
                block: [1 + rng.below(256) as u32, 1, 1],
                shared_mem: rng.below(2) as u32 * rng.number() as u32,
            },
            args: (0..rng.below(9))
                .map(|_| match rng.below(5) {
                    0 => KernelArg::U32(rng.below(256) as u32),
                    1 => KernelArg::U64(rng.number()),
                    2 => KernelArg::F32(f32::from_bits(rng.next() as u32)),
                    3 => KernelArg::I64(rng.next() as i64),
                    _ => KernelArg::Ptr(ptr(rng)),
                })
                .collect(),
            stream: stream(rng),
        },
        16 => Request::StreamCreate,
        _ => {
            if rng.percent(50) {
                Request::StreamDestroy { stream: stream(rng) }
            } else {
                Request::Synchronize { stream: rng.percent(50).then(|| stream(rng)) }
            }
        }
    };
    let payload_len = match &request {
        Request::MemWrite { len, .. } | Request::MemWriteSync { len, .. } | Request::ModuleLoad { len, .. } => *len,
        _ => 0,
    };
    let payload = if payload_len <= 65_536 { vec![0x5a; payload_len as usize] } else { Vec::new() };
    (request, payload)
}

/// Valid requests in a plausible order, so that random launches meet real buffers, modules and
/// functions of their own session (ids count from 1 in each session, as they do in others').
fn backend_setup() -> Vec<Request> {
    let mut requests: Vec<Request> = (0..4).map(|_| Request::MemAlloc { bytes: 16_384 }).collect();
    requests.push(Request::ModuleLoad { source: ModuleSource::Builtin("builtin".into()), len: 0 });
    for name in ac_backend_kernels() {
        requests.push(Request::FunctionLookup { module: ModuleId(5), name: name.into() });
    }
    requests.push(Request::StreamCreate);
    requests
}

fn ac_backend_kernels() -> [&'static str; 5] {
    ["fill", "vector_add", "saxpy", "sgemm", "reduce_sum"]
}

/// One hostile client of the backend: sessions one after another, each fed random messages
/// until it sent a mutated one (after which the stream is out of step and the session is
/// dropped), or a few hundred. Returns the messages sent and the replies received.
async fn hostile_backend_client(addr: std::net::SocketAddr, ca: &Path, mut rng: Rng, quota: u64) -> (u64, u64) {
    let (mut sent, mut answered) = (0, 0);
    let mut refused = 0;
    while sent < quota {
        let Ok(conn) = raw_backend_connection(addr, ca).await else {
            refused += 1;
            assert!(refused < 50, "the backend stopped accepting connections");
            continue;
        };
        refused = 0;
        let (mut send, recv) = conn.open_bi().await.expect("a stream on a new connection");
        // Replies are counted and dropped, so that the backend is never held up by this client.
        let drain = tokio::spawn(async move {
            let mut reader = FrameReader::new(recv);
            let mut replies = 0;
            while let Ok(Some(reply)) = reader.read_frame::<Reply>().await {
                replies += 1;
                if let Response::Data { len } = reply.response {
                    if reader.read_exact_raw(len as usize).await.is_err() {
                        break;
                    }
                }
            }
            replies
        });
        let mut hello = Preamble::CURRENT.to_bytes().to_vec();
        let attach = rng.percent(5);
        let hello_msg = if attach {
            // Another session's id with a guessed token.
            Hello::Attach {
                session: SessionId(rng.below(16)),
                token: rng.next().to_le_bytes().repeat(2).try_into().unwrap(),
            }
        } else {
            Hello::Open { capability: vec![], device: if rng.percent(95) { 0 } else { rng.number() as u32 } }
        };
        hello.extend_from_slice(&frame_bytes(&hello_msg).unwrap());
        sent += 1;
        if send.write_all(&hello).await.is_err() || attach {
            conn.close(0u32.into(), b"done");
            answered += drain.await.unwrap_or(0);
            continue;
        }
        let mut messages: Vec<(Request, Vec<u8>)> = backend_setup().into_iter().map(|r| (r, Vec::new())).collect();
        let length = 50 + rng.below(400);
        while (messages.len() as u64) < length {
            messages.push(backend_request(&mut rng));
        }
        for (i, (request, payload)) in messages.into_iter().enumerate() {
            if sent >= quota {
                break;
            }
            let id = if rng.percent(80) { i as u64 + 1 } else { rng.number() };
            let mut bytes = frame_bytes(&Envelope { id, request }).unwrap().to_vec();
            bytes.extend_from_slice(&payload);
            let mutated = rng.percent(1);
            if mutated {
                rng.mutate(&mut bytes);
            }
            sent += 1;
            if send.write_all(&bytes).await.is_err() || mutated {
                break;
            }
        }
        let _ = send.finish();
        // The replies to what was sent, before the connection goes (a refused session's
        // stream ends sooner).
        let replies = tokio::time::timeout(Duration::from_secs(10), drain).await;
        answered += replies.expect("the backend answers or closes").unwrap_or(0);
        conn.close(0u32.into(), b"done");
    }
    (sent, answered)
}

/// What a bystander checks over and over while the hostile clients run: its data is intact, and
/// a saxpy computes exactly.
async fn bystander_round(acc: &Accelerator, kept: &ac_frontend::DeviceBuffer<f32>, data: &[f32], round: u32) {
    assert_eq!(kept.to_vec().await.expect("the bystander reads"), data, "the bystander's data changed");
    let (x, y) = (pattern(1_000, round), pattern(1_000, round + 1));
    let (dx, dy) = (acc.alloc_from(&x).await.unwrap(), acc.alloc_from(&y).await.unwrap());
    let saxpy = acc.builtin().await.unwrap().function("saxpy").await.unwrap();
    saxpy.launch(LaunchDims::linear(1_000, 128), &[2.0f32.into(), dx.arg(), dy.arg(), 1_000u64.into()]).await.unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| y + 2.0 * x).collect();
    assert_eq!(dy.to_vec().await.unwrap(), want, "the bystander's saxpy is wrong");
}

fn backend_options(backend: &BackendProcess) -> ConnectOptions {
    let mut options = ConnectOptions::new(backend.addr, backend.dir.join("ca.pem"));
    options.tuning = quick_tuning();
    options
}

/// The backend is up: a fresh connection is welcomed and its request answered with the device's
/// description, within [`ANSWER_LIMIT`].
async fn backend_answers(backend: &BackendProcess) {
    let asked = async {
        let acc = Accelerator::connect(&backend_options(backend)).await?;
        acc.device_info().await
    };
    match tokio::time::timeout(ANSWER_LIMIT, asked).await {
        Ok(Ok(info)) => assert!(info.memory_total > 0, "a device without memory: {info:?}"),
        Ok(Err(e)) => panic!("the backend is not up: a fresh client got {e}"),
        Err(_) => panic!("the backend is not up: a fresh client got no answer within {ANSWER_LIMIT:?}"),
    }
}

/// Messages sent and answers received by all the hostile clients.
async fn totals<N: std::ops::Add<Output = N> + Default>(clients: Vec<tokio::task::JoinHandle<(N, N)>>) -> (N, N) {
    let (mut sent, mut answered) = (N::default(), N::default());
    for client in clients {
        let (s, a) = client.await.expect("hostile client");
        (sent, answered) = (sent + s, answered + a);
    }
    (sent, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_under_hostile_clients_stays_up_exact_and_bounded() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let mut backend = BackendProcess::start(dir.path(), "127.0.0.1:0");
    let pid = backend.child.id();
    let ca = backend.dir.join("ca.pem");
    let bystander = Accelerator::connect(&backend_options(&backend)).await.unwrap();
    let data = pattern(4_096, 7);
    let kept = bystander.alloc_from(&data).await.unwrap();
    bystander_round(&bystander, &kept, &data, 0).await;
    let free_before = bystander.device_info().await.unwrap().memory_free;

    // A short warm-up, so that the baseline includes the allocator's and the runtime's growth.
    hostile_backend_client(backend.addr, &ca, Rng(seed ^ 0xabc), 2_000).await;
    let baseline = rss_kib(pid);
    let watch = RssWatch::start(pid);
    let started = Instant::now();
    let clients: Vec<_> = (0..HOSTILE_TASKS)
        .map(|i| {
            let ca = ca.clone();
            let rng = Rng(seed.wrapping_add(i));
            tokio::spawn(async move { hostile_backend_client(backend.addr, &ca, rng, MESSAGES / HOSTILE_TASKS).await })
        })
        .collect();
    let mut round = 1;
    while !clients.iter().all(|c| c.is_finished()) {
        bystander_round(&bystander, &kept, &data, round).await;
        round += 1;
    }
    let (sent, answered) = totals(clients).await;
    let peak = watch.peak().await;
    eprintln!(
        "backend: {sent} hostile messages ({answered} replies) in {:.1} s, {round} bystander rounds, RSS {} MiB \
         before, peak {} MiB",
        started.elapsed().as_secs_f64(),
        baseline / 1024,
        peak / 1024
    );

    assert!(sent >= MESSAGES, "sent {sent}");
    // Most messages are answered (posts with id 0 are not, nor what follows a message that
    // closes its connection): the backend really read them.
    assert!(answered >= MESSAGES / 4, "only {answered} replies (seed {seed})");
    assert!(running(&mut backend.child), "the backend exited (seed {seed})");
    backend_answers(&backend).await;
    bystander_round(&bystander, &kept, &data, round).await;
    // Every hostile allocation went with its session.
    let freed = ac_tests::eventually(Duration::from_secs(10), || async {
        bystander.device_info().await.unwrap().memory_free == free_before
    })
    .await;
    assert!(freed, "hostile sessions' device memory was not given back");
    // Device memory (64 MiB) is the most the hostile sessions may hold at once; the rest is
    // connection state and the allocator's slack.
    assert!(peak <= baseline + 160 * 1024, "RSS grew from {baseline} KiB to {peak} KiB (seed {seed})");
    let fresh = Accelerator::connect(&backend_options(&backend)).await.expect("a new client is served");
    ac_tests::computes(&fresh).await.unwrap();
}

/// A connection that never reads: requests whose replies are large, so that the backend's
/// sending side fills up. Returns the connection, kept open by the caller.
async fn never_reading_session(addr: std::net::SocketAddr, ca: &Path) -> quinn::Connection {
    let conn = raw_backend_connection(addr, ca).await.unwrap();
    let (mut send, recv) = conn.open_bi().await.unwrap();
    std::mem::forget(recv); // never read, never stopped
    let mut bytes = Preamble::CURRENT.to_bytes().to_vec();
    bytes.extend_from_slice(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap());
    bytes.extend_from_slice(&frame_bytes(&Envelope { id: 1, request: Request::MemAlloc { bytes: 1 << 20 } }).unwrap());
    send.write_all(&bytes).await.unwrap();
    // 4,096 reads of 1 MiB: 4 GiB of replies, which no buffer may hold. Written from a task,
    // since the backend stops reading once its replies cannot leave.
    tokio::spawn(async move {
        for id in 2..4_098u64 {
            let read = Request::MemReadSync { src: DevicePtr { buffer: BufferId(1), offset: 0 }, len: 1 << 20 };
            if send.write_all(&frame_bytes(&Envelope { id, request: read }).unwrap()).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
    });
    conn
}

/// A session that starts 32 bulk downloads of 16 MiB (half of them unpipelined: staged whole)
/// and reads none. Returns the connection.
async fn never_reading_bulk_session(addr: std::net::SocketAddr, ca: &Path) -> quinn::Connection {
    const LEN: u64 = 16 << 20;
    let conn = raw_backend_connection(addr, ca).await.unwrap();
    let (mut send, recv) = conn.open_bi().await.unwrap();
    let mut bytes = Preamble::CURRENT.to_bytes().to_vec();
    bytes.extend_from_slice(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap());
    bytes.extend_from_slice(&frame_bytes(&Envelope { id: 1, request: Request::MemAlloc { bytes: LEN } }).unwrap());
    send.write_all(&bytes).await.unwrap();
    let mut control = FrameReader::new(recv);
    let _welcome: Reply = control.expect_frame().await.unwrap();
    let allocated: Reply = control.expect_frame().await.unwrap();
    assert_eq!(allocated.response, Response::Buffer(BufferId(1)));
    std::mem::forget((send, control));
    let header = |len, pipelined| ac_proto::backend::BulkHeader {
        direction: ac_proto::backend::Direction::DeviceToHost,
        ptr: DevicePtr { buffer: BufferId(1), offset: 0 },
        len,
        pipelined,
        after: 0,
    };
    for i in 0..32 {
        let (mut send, recv) = conn.open_bi().await.unwrap();
        send.write_all(&frame_bytes(&header(LEN, i % 2 == 0)).unwrap()).await.unwrap();
        std::mem::forget((send, recv));
    }
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_do_not_hold_up_a_backend() {
    let dir = tempfile::tempdir().unwrap();
    let backend = BackendProcess::start(dir.path(), "127.0.0.1:0");
    let pid = backend.child.id();
    let ca = backend.dir.join("ca.pem");
    let bystander = Accelerator::connect(&backend_options(&backend)).await.unwrap();
    let data = pattern(4_096, 3);
    let kept = bystander.alloc_from(&data).await.unwrap();
    let free_before = bystander.device_info().await.unwrap().memory_free;
    let baseline = rss_kib(pid);
    let watch = RssWatch::start(pid);

    // Connections that say nothing at all, and sessions left half-way through a frame.
    let (mut silent, mut half_open) = (Vec::new(), Vec::new());
    for i in 0..100 {
        let conn = raw_backend_connection(backend.addr, &ca).await.unwrap();
        if i % 2 == 1 {
            let (mut send, recv) = conn.open_bi().await.unwrap();
            let mut bytes = Preamble::CURRENT.to_bytes().to_vec();
            bytes.extend_from_slice(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap());
            let frame = frame_bytes(&Envelope { id: 1, request: Request::MemAlloc { bytes: 64 } }).unwrap();
            bytes.extend_from_slice(&frame[..frame.len() / 2]);
            send.write_all(&bytes).await.unwrap();
            half_open.push((send, recv));
        }
        silent.push(conn);
    }
    // Sessions that ask for gigabytes of replies and never read one, inline and bulk.
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(never_reading_session(backend.addr, &ca).await);
    }
    readers.push(never_reading_bulk_session(backend.addr, &ca).await);
    for round in 0..20 {
        bystander_round(&bystander, &kept, &data, round).await;
    }
    let peak = watch.peak().await;
    eprintln!("backend with slow clients: RSS {} MiB before, peak {} MiB", baseline / 1024, peak / 1024);
    // Each never-reading session may hold its payload budget (64 MiB by default) of replies it
    // has not taken, and the bulk one what its connection's send window (64 MiB) holds too,
    // besides device memory (4 x 1 + 16 MiB); the rest is connection state. Nothing like the
    // 16 GiB the first four asked for, or the 512 MiB of the bulk one.
    let bound = (5 * 64 + 64 + 20 + 128) * 1024;
    assert!(peak <= baseline + bound, "RSS grew from {baseline} KiB to {peak} KiB");
    // While they are all still held, a newcomer is served.
    backend_answers(&backend).await;
    for conn in readers.iter().chain(&silent) {
        conn.close(0u32.into(), b"done");
    }
    drop(half_open);
    let freed = ac_tests::eventually(Duration::from_secs(10), || async {
        bystander.device_info().await.unwrap().memory_free == free_before
    })
    .await;
    assert!(freed, "the slow sessions' device memory was not given back");
    bystander_round(&bystander, &kept, &data, 99).await;
}

// ---------------------------------------------------------------------------------------------
// The manager.

/// A random manager request: program requests with guessed tokens, other jobs' ids and huge
/// counts, and admin requests from a client without admin credentials.
fn manager_request(rng: &mut Rng, victim_job: &str) -> arm::Request {
    use arm::Request as R;
    let token = |rng: &mut Rng| if rng.percent(50) { format!("{:032x}", rng.next()) } else { rng.text() };
    let count = |rng: &mut Rng| rng.number().min(u32::MAX as u64) as u32;
    match rng.below(14) {
        0 => R::Init {
            auth: match rng.below(4) {
                0 => JobAuth::Credential { job: victim_job.into(), secret: token(rng) },
                1 => JobAuth::Munge { job: victim_job.into(), credential: rng.text() },
                2 => JobAuth::SameJob { token: token(rng) },
                // Ad-hoc jobs are the one thing anyone may open; huge ones must queue or be refused.
                _ => JobAuth::AdHoc { acpn: if rng.percent(50) { count(rng) } else { 1 } },
            },
            node: rng.text(),
            token: if rng.percent(50) { format!("{:032x}{:032x}", rng.next(), rng.next()) } else { rng.text() },
        },
        1 => R::Poll { token: token(rng) },
        2 | 3 => R::Get {
            token: token(rng),
            ask: Ask { min: count(rng), max: count(rng), wait_s: rng.below(3), ..Ask::exactly(1, rng.text()) },
        },
        4 => R::CollectiveGet {
            token: token(rng),
            parts: (0..rng.below(4)).map(|_| (rng.text(), count(rng))).collect(),
            key: rng.text(),
        },
        5 => R::AwaitGet { token: token(rng), request: rng.number() },
        6 => R::CancelGet { token: token(rng), request: rng.number() },
        7 => R::JoinSet { token: token(rng), set: rng.number() },
        8 => R::Free { token: token(rng), set: rng.number(), accelerators: rng.percent(50).then(|| vec![rng.text()]) },
        9 => R::Finalize { token: token(rng) },
        10 => R::HostRemove { name: "h0".into(), force: true },
        11 => R::HostDrain { name: "h0".into(), drain: true },
        12 => R::JobSubmit {
            id: victim_job.into(),
            nodes: vec![rng.text()],
            acpn: count(rng),
            user: rng.text(),
            walltime_s: rng.number(),
            group: None,
            reservation: None,
            peak: None,
        },
        _ => R::HostList,
    }
}

/// One hostile client of the manager: requests on streams of one connection, 16 at a time;
/// a mutated frame (after which the manager may close the connection) starts a new one.
/// Returns the requests sent and the answers received.
async fn hostile_manager_client(
    addr: std::net::SocketAddr,
    ca: &Path,
    victim_job: &str,
    mut rng: Rng,
    quota: u64,
) -> (u64, u64) {
    let roots = ac_proto::tls::load_roots(ca).unwrap();
    let crypto = Arc::new(ac_proto::tls::client_crypto(roots, arm::ALPN).unwrap());
    let endpoint = ac_proto::transport::client_endpoint(addr, Some(crypto), &quick_tuning()).unwrap();
    let (sent, mut answered) = (AtomicU64::new(0), 0);
    let mut refused = 0;
    while sent.load(Ordering::Relaxed) < quota {
        let Ok(conn) = endpoint.connect(addr, "127.0.0.1").expect("a valid address").await else {
            refused += 1;
            assert!(refused < 50, "the manager stopped accepting connections");
            continue;
        };
        refused = 0;
        let mut batch = Vec::new();
        for _ in 0..16 {
            let mut bytes = frame_bytes(&ArmRequest {
                version: if rng.percent(97) { arm::VERSION } else { rng.number() as u16 },
                request: manager_request(&mut rng, victim_job),
            })
            .unwrap()
            .to_vec();
            if rng.percent(2) {
                rng.mutate(&mut bytes);
            }
            batch.push(bytes);
        }
        let exchange = |bytes: Vec<u8>| {
            let conn = conn.clone();
            async move {
                let (mut send, mut recv) = conn.open_bi().await.ok()?;
                send.write_all(&bytes).await.ok()?;
                let _ = send.finish();
                recv.read_to_end(1 << 20).await.ok()
            }
        };
        while sent.load(Ordering::Relaxed) < quota && conn.close_reason().is_none() {
            let answers = futures_util::future::join_all(batch.iter().cloned().map(exchange)).await;
            sent.fetch_add(batch.len() as u64, Ordering::Relaxed);
            answered += answers.iter().filter(|a| a.as_ref().is_some_and(|bytes| !bytes.is_empty())).count() as u64;
            if answers.iter().any(Option::is_none) {
                break;
            }
            for bytes in &mut batch {
                *bytes =
                    frame_bytes(&ArmRequest { version: arm::VERSION, request: manager_request(&mut rng, victim_job) })
                        .unwrap()
                        .to_vec();
                if rng.percent(1) {
                    rng.mutate(bytes);
                }
            }
        }
        conn.close(0u32.into(), b"done");
    }
    (sent.into_inner(), answered)
}

/// An accelerator of the victim job that keeps data and must keep computing exactly.
struct Victim {
    acc: Accelerator,
    kept: ac_frontend::DeviceBuffer<f32>,
    data: Vec<f32>,
}

impl Victim {
    async fn new(acc: Accelerator, seed: u32) -> Self {
        let data = pattern(2_048, seed);
        let kept = acc.alloc_from(&data).await.unwrap();
        Self { acc, kept, data }
    }

    async fn round(&self, round: u32) {
        bystander_round(&self.acc, &self.kept, &self.data, round).await;
    }
}

/// A manager with two one-accelerator backends (processes), and a victim job that holds one of
/// them statically and the other dynamically.
struct ManagerBed {
    /// The manager's state (its CA and admin identity) first, then the backends'.
    dirs: Vec<tempfile::TempDir>,
    _backends: Vec<BackendProcess>,
    manager: ArmProcess,
    ca: std::path::PathBuf,
    admin: ac_frontend::arm::ArmClient,
    session: ac_frontend::Session,
    set: ac_frontend::DynamicSet,
}

impl ManagerBed {
    async fn start() -> Self {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let backends: Vec<_> = dirs[1..].iter().map(|d| BackendProcess::start(d.path(), "127.0.0.1:0")).collect();
        let manager = ArmProcess::start(dirs[0].path(), "127.0.0.1:0");
        let admin = ac_tests::admin_of(manager.addr, dirs[0].path()).await;
        for (i, backend) in backends.iter().enumerate() {
            let add = arm::Request::HostAdd {
                addr: backend.addr,
                name: format!("h{i}"),
                server_name: "127.0.0.1".into(),
                ca_pem: std::fs::read_to_string(backend.dir.join("ca.pem")).unwrap(),
                labels: vec![],
            };
            admin.request(add).await.expect("host added");
        }
        let credential = ac_tests::submit_job(&admin, "victim", &["n0"], 1, "alice", 0).await;
        let ca = dirs[0].path().join("ca.pem");
        let mut arm_options = ac_frontend::arm::ArmOptions::new(manager.addr, &ca);
        arm_options.tuning = quick_tuning();
        let options = ac_frontend::SessionOptions {
            arm: arm_options,
            job: JobAuth::Credential { job: "victim".into(), secret: credential },
            node: "n0".into(),
            init_timeout: Some(Duration::from_secs(10)),
            stripes: 1,
            progress: false,
        };
        let session = ac_frontend::Session::init(options).await.expect("the victim's AC_Init");
        let set = session.get(1).await.expect("AC_Get").expect("granted");
        Self { dirs, _backends: backends, manager, ca, admin, session, set }
    }

    async fn victims(&self) -> Vec<Victim> {
        let accs = [&self.session.accelerators()[0].acc, &self.set.handles[0].acc];
        let mut victims = Vec::new();
        for (i, acc) in accs.into_iter().enumerate() {
            victims.push(Victim::new(acc.clone(), i as u32).await);
        }
        victims
    }

    async fn victim_view(&self) -> (Vec<(String, String)>, Vec<(u64, String)>) {
        let job = ac_tests::job_of(&self.admin, "victim").await;
        (job.static_accelerators, job.dynamic_accelerators)
    }

    /// The manager is up: a fresh admin connection's host list is answered, with both hosts,
    /// within [`ANSWER_LIMIT`].
    async fn answers(&self) {
        let asked = async {
            let admin = ac_tests::admin_of(self.manager.addr, self.dirs[0].path()).await;
            admin.request(arm::Request::HostList).await
        };
        match tokio::time::timeout(ANSWER_LIMIT, asked).await {
            Ok(Ok(arm::Response::Hosts(hosts))) => assert_eq!(hosts.len(), 2, "{hosts:?}"),
            Ok(other) => panic!("the manager is not up: a fresh admin got {other:?}"),
            Err(_) => panic!("the manager is not up: a fresh admin got no answer within {ANSWER_LIMIT:?}"),
        }
    }

    /// Every accelerator is held by the victim and nobody else, and every host is up.
    async fn pool_is_the_victims(&self) -> bool {
        let hosts = match self.admin.request(arm::Request::HostList).await.expect("host list") {
            arm::Response::Hosts(hosts) => hosts,
            other => panic!("unexpected {other:?}"),
        };
        hosts.iter().all(|h| {
            h.state == "up" && h.accelerators.iter().all(|a| a.holder.as_deref().is_some_and(|j| j.contains("victim")))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_under_hostile_clients_stays_up_and_keeps_other_jobs_whole() {
    let seed = seed();
    let mut bed = ManagerBed::start().await;
    let pid = bed.manager.child.id();
    let victims = bed.victims().await;
    let before = bed.victim_view().await;
    assert!(bed.pool_is_the_victims().await, "the victim holds the pool");

    hostile_manager_client(bed.manager.addr, &bed.ca, "victim", Rng(seed ^ 0xabc), 1_000).await;
    let baseline = rss_kib(pid);
    let watch = RssWatch::start(pid);
    let started = Instant::now();
    let clients: Vec<_> = (0..HOSTILE_TASKS)
        .map(|i| {
            let (addr, ca, rng) = (bed.manager.addr, bed.ca.clone(), Rng(seed.wrapping_add(i)));
            tokio::spawn(
                async move { hostile_manager_client(addr, &ca, "victim", rng, MESSAGES / HOSTILE_TASKS).await },
            )
        })
        .collect();
    let mut round = 1;
    while !clients.iter().all(|c| c.is_finished()) {
        for victim in &victims {
            victim.round(round).await;
        }
        assert_eq!(bed.victim_view().await, before, "the victim's holdings changed (seed {seed})");
        round += 1;
    }
    let (sent, answered) = totals(clients).await;
    let peak = watch.peak().await;
    eprintln!(
        "manager: {sent} hostile requests ({answered} answers) in {:.1} s, {round} victim rounds, RSS {} MiB before, peak {} MiB",
        started.elapsed().as_secs_f64(),
        baseline / 1024,
        peak / 1024
    );
    assert!(sent >= MESSAGES, "sent {sent}");
    assert!(answered >= MESSAGES / 2, "only {answered} answers (seed {seed})");
    assert!(running(&mut bed.manager.child), "the manager exited (seed {seed})");
    bed.answers().await;
    assert_eq!(bed.victim_view().await, before, "the victim's holdings changed (seed {seed})");
    // Ad-hoc jobs the hostile clients opened end with their connections' leases.
    let settled = ac_tests::eventually(Duration::from_secs(15), || bed.pool_is_the_victims()).await;
    assert!(settled, "accelerators other than the victim's are held, or a host is not up (seed {seed})");
    for victim in &victims {
        victim.round(round).await;
    }
    assert!(peak <= baseline + 128 * 1024, "RSS grew from {baseline} KiB to {peak} KiB (seed {seed})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_do_not_hold_up_a_manager() {
    let bed = ManagerBed::start().await;
    let pid = bed.manager.child.id();
    let victims = bed.victims().await;
    let before = bed.victim_view().await;
    let baseline = rss_kib(pid);
    let watch = RssWatch::start(pid);
    let roots = ac_proto::tls::load_roots(&bed.ca).unwrap();
    let crypto = Arc::new(ac_proto::tls::client_crypto(roots, arm::ALPN).unwrap());
    let endpoint = ac_proto::transport::client_endpoint(bed.manager.addr, Some(crypto), &quick_tuning()).unwrap();
    let (mut silent, mut half_open, mut unread) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..60 {
        let conn = endpoint.connect(bed.manager.addr, "127.0.0.1").unwrap().await.unwrap();
        match i % 3 {
            // Says nothing.
            0 => {}
            // Half a request, then nothing.
            1 => {
                let (mut send, recv) = conn.open_bi().await.unwrap();
                let frame =
                    frame_bytes(&ArmRequest { version: arm::VERSION, request: arm::Request::HostList }).unwrap();
                send.write_all(&frame[..frame.len() / 2]).await.unwrap();
                half_open.push((send, recv));
            }
            // Hundreds of requests whose answers it never reads.
            _ => {
                for _ in 0..300 {
                    let (mut send, recv) = conn.open_bi().await.unwrap();
                    let poll = arm::Request::Poll { token: "x".repeat(64) };
                    send.write_all(&frame_bytes(&ArmRequest { version: arm::VERSION, request: poll }).unwrap())
                        .await
                        .unwrap();
                    let _ = send.finish();
                    unread.push(recv);
                }
            }
        }
        silent.push(conn);
    }
    for round in 0..10 {
        for victim in &victims {
            victim.round(round).await;
        }
        assert_eq!(bed.victim_view().await, before);
    }
    let peak = watch.peak().await;
    eprintln!("manager with slow clients: RSS {} MiB before, peak {} MiB", baseline / 1024, peak / 1024);
    assert!(peak <= baseline + 64 * 1024, "RSS grew from {baseline} KiB to {peak} KiB");
    assert!(bed.pool_is_the_victims().await);
    // While they are all still held, a newcomer is served.
    bed.answers().await;
    drop((half_open, unread));
    for conn in &silent {
        conn.close(0u32.into(), b"done");
    }
}
