//! The ordering model (ARCHITECTURE.md, "Order"), checked as programs behave: threads and tasks
//! sharing one handle, buffers dropped with no synchronize, synchronous copies behind queued
//! kernels, all on a loaded machine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ac_frontend::{Accelerator, CopyOptions, DeviceBuffer, ErrorKind, Function, LaunchDims, Stream};
use ac_proto::backend::{BufferId, BulkHeader, DevicePtr, Direction, Envelope, Hello, Reply, Request, Response};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_tests::{pattern, workspace_binary, Load, TestBackend};

/// splitmix64: a seeded sequence, so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Buffer sizes in floats: inline (4 KB), one bulk stripe (160 KB), two stripes (800 KB, with
/// the test's `stripe_min`).
const SIZES: [usize; 3] = [1_000, 40_000, 200_000];
/// Buffers a caller holds at most.
const SLOTS: usize = 3;

/// One call of a caller, on its own buffers (by slot) and its own stream.
#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc(usize),
    Write(usize, u32),
    WriteAsync(usize, u32),
    Fill(usize, f32),
    Saxpy(f32, usize, usize),
    Memset(usize, u8),
    CopyDevice(usize, usize),
    Read(usize),
    Free(usize),
    Drop(usize),
    SyncStream,
    SyncDevice,
}

/// A caller: its buffers, what a sequential run of its own calls would leave in them, and the
/// wrong elements its reads have seen.
struct Caller {
    acc: Accelerator,
    stream: Stream,
    fill: Function,
    saxpy: Function,
    buffers: BTreeMap<usize, (DeviceBuffer<f32>, Vec<f32>)>,
    wrong: u64,
    log: Vec<Op>,
}

impl Caller {
    async fn new(acc: &Accelerator, own_stream: bool) -> Self {
        let stream = if own_stream { acc.create_stream().await.unwrap() } else { acc.default_stream() };
        let builtin = acc.builtin().await.unwrap();
        Self {
            acc: acc.clone(),
            stream,
            fill: builtin.function("fill").await.unwrap(),
            saxpy: builtin.function("saxpy").await.unwrap(),
            buffers: BTreeMap::new(),
            wrong: 0,
            log: Vec::new(),
        }
    }

    /// A random call that makes sense for the buffers held now.
    fn choose(&self, rng: &mut Rng) -> Op {
        let held: Vec<usize> = self.buffers.keys().copied().collect();
        let free_slot = (0..SLOTS).find(|s| !self.buffers.contains_key(s));
        if held.is_empty() {
            return Op::Alloc(free_slot.expect("a free slot"));
        }
        let any = |rng: &mut Rng| held[rng.below(held.len())];
        match rng.below(13) {
            0 => free_slot.map_or(Op::SyncStream, Op::Alloc),
            1 | 2 => Op::Write(any(rng), rng.next() as u32),
            3 => Op::WriteAsync(any(rng), rng.next() as u32),
            4 => Op::Fill(any(rng), rng.below(100) as f32 - 50.0),
            5 | 6 if held.len() > 1 => {
                let (x, y) = (any(rng), any(rng));
                if x == y {
                    Op::Fill(y, 1.5)
                } else {
                    Op::Saxpy([0.5, 2.0, -1.0][rng.below(3)], x, y)
                }
            }
            7 => Op::Memset(any(rng), [0x00, 0x3f, 0x41][rng.below(3)]),
            8 if held.len() > 1 => {
                let (dst, src) = (any(rng), any(rng));
                if dst == src {
                    Op::Read(dst)
                } else {
                    Op::CopyDevice(dst, src)
                }
            }
            9 | 10 => Op::Read(any(rng)),
            11 => [Op::Free(any(rng)), Op::Drop(any(rng))][rng.below(2)],
            _ => [Op::SyncStream, Op::SyncDevice][rng.below(2)],
        }
    }

    /// Does `op` on the accelerator and in the model.
    async fn apply(&mut self, op: Op) -> Result<(), ac_frontend::Error> {
        self.log.push(op);
        match op {
            Op::Alloc(slot) => {
                let len = SIZES[slot % SIZES.len()];
                self.buffers.insert(slot, (self.acc.alloc(len).await?, vec![0.0; len]));
            }
            Op::Write(slot, seed) => {
                let (buffer, model) = self.buffers.get_mut(&slot).expect("held");
                *model = pattern(model.len(), seed);
                buffer.copy_from_host(model).await?;
            }
            Op::WriteAsync(slot, seed) => {
                let (buffer, model) = self.buffers.get_mut(&slot).expect("held");
                *model = pattern(model.len(), seed);
                buffer.copy_from_host_async(&self.stream, 0, model).await?;
            }
            Op::Fill(slot, value) => {
                let (buffer, model) = self.buffers.get_mut(&slot).expect("held");
                model.fill(value);
                let n = model.len() as u64;
                self.fill
                    .launch_on(&self.stream, LaunchDims::linear(n, 256), &[buffer.arg(), value.into(), n.into()])
                    .await?;
            }
            Op::Saxpy(a, x, y) => {
                let n = self.buffers[&x].1.len().min(self.buffers[&y].1.len());
                let xs = self.buffers[&x].1[..n].to_vec();
                let args = [a.into(), self.buffers[&x].0.arg(), self.buffers[&y].0.arg(), (n as u64).into()];
                let (_, ys) = self.buffers.get_mut(&y).expect("held");
                for (yi, xi) in ys.iter_mut().zip(&xs) {
                    *yi += a * xi;
                }
                self.saxpy.launch_on(&self.stream, LaunchDims::linear(n as u64, 256), &args).await?;
            }
            Op::Memset(slot, byte) => {
                let (buffer, model) = self.buffers.get_mut(&slot).expect("held");
                model.fill(f32::from_le_bytes([byte; 4]));
                buffer.memset(&self.stream, byte).await?;
            }
            Op::CopyDevice(dst, src) => {
                let n = self.buffers[&dst].1.len().min(self.buffers[&src].1.len());
                let copied = self.buffers[&src].1[..n].to_vec();
                self.buffers[&dst].0.copy_from_device(&self.stream, &self.buffers[&src].0).await?;
                self.buffers.get_mut(&dst).expect("held").1[..n].copy_from_slice(&copied);
            }
            Op::Read(slot) => self.check(slot).await?,
            Op::Free(slot) => self.buffers.remove(&slot).expect("held").0.free().await?,
            Op::Drop(slot) => drop(self.buffers.remove(&slot)),
            Op::SyncStream => self.stream.synchronize().await?,
            Op::SyncDevice => self.acc.synchronize().await?,
        }
        Ok(())
    }

    /// Reads a buffer back and counts the elements that differ from the model.
    async fn check(&mut self, slot: usize) -> Result<(), ac_frontend::Error> {
        let (buffer, model) = &self.buffers[&slot];
        let got = buffer.to_vec().await?;
        self.wrong += got.iter().zip(model).filter(|(g, m)| g.to_bits() != m.to_bits()).count() as u64;
        Ok(())
    }

    async fn check_all(&mut self) -> Result<(), ac_frontend::Error> {
        for slot in self.buffers.keys().copied().collect::<Vec<_>>() {
            self.check(slot).await?;
        }
        Ok(())
    }
}

/// What one caller reports: its seed, the wrong elements it saw, or the error it met, and its
/// calls (to replay a failure).
type Report = (u64, Result<u64, String>, Vec<Op>);

const CALLS: usize = 100;

async fn run_task(acc: Accelerator, seed: u64) -> Report {
    let mut caller = Caller::new(&acc, seed % 2 == 1).await;
    let mut rng = Rng(seed);
    let mut result = Ok(());
    for _ in 0..CALLS {
        let op = caller.choose(&mut rng);
        result = caller.apply(op).await;
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = caller.check_all().await;
    }
    (seed, result.map(|()| caller.wrong).map_err(|e| e.to_string()), caller.log)
}

/// A thread drives its calls one at a time, as the blocking API does (`block_on` per call), and
/// drops buffers outside the runtime, as a plain `main` does.
fn run_thread(rt: Arc<tokio::runtime::Runtime>, acc: Accelerator, seed: u64) -> Report {
    let mut caller = rt.block_on(Caller::new(&acc, seed % 2 == 1));
    let mut rng = Rng(seed);
    let mut result = Ok(());
    for _ in 0..CALLS {
        let op = caller.choose(&mut rng);
        result = match op {
            Op::Drop(slot) => {
                caller.log.push(op);
                drop(caller.buffers.remove(&slot));
                Ok(())
            }
            op => rt.block_on(caller.apply(op)),
        };
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = rt.block_on(caller.check_all());
    }
    (seed, result.map(|()| caller.wrong).map_err(|e| e.to_string()), caller.log)
}

#[test]
fn callers_sharing_a_handle_each_see_their_own_calls_in_order() {
    let rt = Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
    let tb = rt.block_on(TestBackend::start(256));
    let _load = Load::start();
    for round in 0..4u64 {
        let acc = rt.block_on(tb.connect());
        acc.set_copy_options(CopyOptions { stripe_min: 128 << 10, ..CopyOptions::default() });
        let seeds: Vec<u64> = (0..6).map(|i| round * 100 + i).collect();
        let tasks: Vec<_> = seeds[..3].iter().map(|&seed| rt.spawn(run_task(acc.clone(), seed))).collect();
        let threads: Vec<_> = seeds[3..]
            .iter()
            .map(|&seed| {
                let (rt, acc) = (rt.clone(), acc.clone());
                std::thread::spawn(move || run_thread(rt, acc, seed))
            })
            .collect();
        let mut reports: Vec<Report> = threads.into_iter().map(|t| t.join().expect("caller thread")).collect();
        for task in tasks {
            reports.push(
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(120), task).await })
                    .expect("in time")
                    .expect("task"),
            );
        }
        for (seed, result, log) in reports {
            assert_eq!(result, Ok(0), "caller with seed {seed} saw wrong data or failed; its calls: {log:?}");
        }
        rt.block_on(acc.close());
    }
}

#[test]
fn threads_sharing_a_handle_in_another_process_compute_right() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tb = rt.block_on(TestBackend::start(512));
    let _load = Load::start();
    // 100,000 floats: past the inline limit, so every copy is a bulk copy.
    let output = std::process::Command::new(workspace_binary("ac-test-client"))
        .args(["share", "8", "10", "100000"])
        .env("AC_BACKEND_ADDR", tb.backend.addr().to_string())
        .env("AC_CA_CERT", tb.backend.ca_cert())
        .output()
        .expect("client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "client failed: {stdout} {}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("wrong 0 "), "{stdout}");
}

/// A queued kernel reads `x`; a synchronous bulk copy then overwrites `x`. The kernel must see
/// the old contents: the copy waits for the work queued before it, on every stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_copy_waits_for_a_queued_kernel_that_reads_its_buffer() {
    let tb = TestBackend::start(256).await;
    let acc = tb.connect().await;
    let _load = Load::start();
    let builtin = acc.builtin().await.unwrap();
    let (sgemm, add) = (builtin.function("sgemm").await.unwrap(), builtin.function("vector_add").await.unwrap());
    let stream = acc.create_stream().await.unwrap();
    let n = 1 << 18; // 1 MiB of floats: a bulk copy
    let old = pattern(n, 1);
    let x = acc.alloc_from(&old).await.unwrap();
    let zeros = acc.alloc::<f32>(n).await.unwrap();
    let out = acc.alloc::<f32>(n).await.unwrap();
    // Work ahead on the stream, so that the kernel reading `x` is still queued when the copy
    // arrives; without the ordering the copy would overtake it.
    let m = 192u32;
    let (a, b, c) = (
        acc.alloc_from(&pattern(36_864, 2)).await.unwrap(),
        acc.alloc_from(&pattern(36_864, 3)).await.unwrap(),
        acc.alloc::<f32>(36_864).await.unwrap(),
    );
    for _ in 0..20 {
        let args = [m.into(), m.into(), m.into(), 1.0f32.into(), a.arg(), b.arg(), 0.0f32.into(), c.arg()];
        sgemm.launch_on(&stream, LaunchDims::new([1, 1, 1], [16, 16, 1]), &args).await.unwrap();
    }
    add.launch_on(&stream, LaunchDims::linear(n as u64, 256), &[x.arg(), zeros.arg(), out.arg(), (n as u64).into()])
        .await
        .unwrap();
    x.copy_from_host(&pattern(n, 99)).await.unwrap();
    assert!(out.to_vec().await.unwrap() == old, "the kernel saw the bytes of a copy issued after it");
    assert!(x.to_vec().await.unwrap() == pattern(n, 99));
}

/// A program that drops most of the device and allocates again, with no synchronizing call in
/// between, finds the memory returned: the free goes ahead of the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_large_buffer_returns_its_memory_before_the_next_call() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let _load = Load::start();
    let stream = acc.create_stream().await.unwrap();
    for i in 0..40 {
        let buffer = acc.alloc::<u8>(48 << 20).await.unwrap_or_else(|e| panic!("allocation {i}: {e}"));
        // Work still queued on the buffer when it is dropped.
        buffer.memset(&stream, i as u8).await.unwrap();
        drop(buffer);
    }
    acc.synchronize().await.unwrap();
    assert_eq!(acc.device_info().await.unwrap().memory_free, 64 << 20);
}

#[test]
fn threads_that_drop_and_allocate_never_run_out_of_memory() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tb = rt.block_on(TestBackend::start(64));
    let _load = Load::start();
    let acc = ac_frontend::blocking::Accelerator::connect(&tb.options()).unwrap();
    // Four threads each hold at most 12 MiB at a time: 48 MiB of 64, if every drop is ahead of
    // the thread's next allocation.
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let acc = &acc;
            scope.spawn(move || {
                for i in 0..25 {
                    let buffer = acc.alloc::<u8>(12 << 20).unwrap_or_else(|e| panic!("thread {t} allocation {i}: {e}"));
                    buffer.memset(&acc.default_stream(), t).unwrap();
                }
            });
        }
    });
    acc.synchronize().unwrap();
    assert_eq!(acc.device_info().unwrap().memory_free, 64 << 20);
}

/// The backend's side, with a raw client: a bulk copy that names a position the control stream
/// has not reached waits for it, and then sees the work of the envelopes before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_copy_waits_for_the_position_it_names() {
    let tb = TestBackend::start(64).await;
    let (conn, mut send, recv) =
        tb.raw_session(&frame_bytes(&Hello::Open { capability: vec![], device: 0 }).unwrap()).await;
    let mut reader = FrameReader::new(recv);
    let welcome: Reply = reader.expect_frame().await.unwrap();
    assert!(matches!(welcome.response, Response::Welcome { .. }));
    let buffer = BufferId(1);
    let ptr = DevicePtr { buffer, offset: 0 };
    let envelope = |id, request| frame_bytes(&Envelope { id, request }).unwrap();
    send.write_all(&envelope(1, Request::MemAlloc { bytes: 1 << 20 })).await.unwrap();
    let reply: Reply = reader.expect_frame().await.unwrap();
    assert_eq!(reply.response, Response::Buffer(buffer));

    // Position 3 is a memset; the copy names it before it is sent.
    let (mut bulk_send, bulk_recv) = conn.open_bi().await.unwrap();
    let header = BulkHeader { direction: Direction::DeviceToHost, ptr, len: 1 << 20, pipelined: true, after: 3 };
    bulk_send.write_all(&frame_bytes(&header).unwrap()).await.unwrap();
    bulk_send.finish().unwrap();
    let mut bulk = FrameReader::new(bulk_recv);
    let early = tokio::time::timeout(Duration::from_millis(300), bulk.expect_frame::<Reply>()).await;
    assert!(early.is_err(), "the copy answered before its position was reached: {early:?}");

    send.write_all(&envelope(2, Request::Ping)).await.unwrap();
    let memset = Request::Memset { dst: ptr, len: 1 << 20, value: 9, stream: Default::default() };
    send.write_all(&envelope(0, memset)).await.unwrap();
    let reply: Reply = bulk.expect_frame().await.unwrap();
    assert_eq!(reply.response, Response::Data { len: 1 << 20 });
    let mut data = vec![0u8; 1 << 20];
    bulk.read_payload_into(&mut data).await.unwrap();
    assert!(data.iter().all(|&b| b == 9), "the copy did not see the memset before its position");
    let ping: Reply = reader.expect_frame().await.unwrap();
    assert_eq!(ping, Reply { id: 2, response: Response::Ok });

    // A copy that follows a failed asynchronous call reports that call's error instead.
    let bad = Request::Memset {
        dst: DevicePtr { buffer: BufferId(77), offset: 0 },
        len: 4,
        value: 0,
        stream: Default::default(),
    };
    send.write_all(&envelope(0, bad)).await.unwrap();
    let (mut bulk_send, bulk_recv) = conn.open_bi().await.unwrap();
    let header = BulkHeader { after: 4, ..header };
    bulk_send.write_all(&frame_bytes(&header).unwrap()).await.unwrap();
    bulk_send.finish().unwrap();
    let reply: Reply = FrameReader::new(bulk_recv).expect_frame().await.unwrap();
    let Response::Error(e) = reply.response else { panic!("{reply:?}") };
    assert_eq!(e.kind, ErrorKind::InvalidBuffer, "{e}");

    // A copy waiting for a position that never comes ends with the session, and the backend
    // frees it.
    let (mut bulk_send, _bulk_recv) = conn.open_bi().await.unwrap();
    let header = BulkHeader { after: 1_000, ..header };
    bulk_send.write_all(&frame_bytes(&header).unwrap()).await.unwrap();
    conn.close(0u32.into(), b"gone");
    assert!(tb.eventually(Duration::from_secs(5), |b| b.sessions() == 0 && b.memory_free() == 64 << 20).await);
}
