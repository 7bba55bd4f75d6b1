//! Session workers (`isolation = "process"`) as a site runs them (issue 47): a worker dies with
//! the daemon that started it, and workers waiting on a slow device hold none of the daemon's
//! async threads. The device is the CUDA driver stand-in (`cuda-standin`, not a GPU), made slow
//! by `CUDA_STANDIN_COPY_DELAY_MS` (each host<->device copy sleeps that long when it runs: the
//! device is slow, the host's CPU stays free).

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ac_backend::{DeviceChoice, Isolation};
use ac_frontend::{Accelerator, ConnectOptions, LaunchDims};
use ac_proto::transport::Tuning;
use ac_tests::TestBackend;

/// The session workers among `parent`'s children (every thread's `children` list).
fn workers_of(parent: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).map(|t| t.flatten().collect()).unwrap_or(vec![]);
    let children: String =
        tasks.iter().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ").collect();
    children.split_whitespace().filter_map(|p| p.parse().ok()).filter(|p| is_worker(*p)).collect()
}

/// Whether process `pid` is a live session worker (a zombie has no command line: its memory,
/// GPU memory included, is gone; only the parent's bookkeeping is left).
fn is_worker(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"--session-worker"))
}

/// An `ac-backend` process, killed and reaped when dropped (a failing test leaves none).
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ac-backend` as a process of its own: the stand-in's two GPUs, a worker per session
/// (run by `worker_program`), its state in `dir`. Returns the process and its address.
#[allow(clippy::zombie_processes)] // the child goes to a `Daemon`, whose `Drop` reaps it
fn start_daemon(dir: &Path, worker_program: &Path) -> (Daemon, std::net::SocketAddr) {
    let config = dir.join("ac-backend.toml");
    let toml = format!(
        "device = \"cuda\"\nisolation = \"process\"\nstaging_mib = 16\ncuda_driver = \"{}\"\nworker_program = \"{}\"\n",
        ac_tests::workspace_binary("libcuda_standin.so").display(),
        worker_program.display()
    );
    std::fs::write(&config, toml).expect("configuration written");
    let addr_file = dir.join("addr");
    let log = std::fs::File::create(dir.join("ac-backend.log")).expect("log file");
    let mut child = std::process::Command::new(ac_tests::workspace_binary("ac-backend"))
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--state-dir"])
        .arg(dir)
        .arg("--addr-file")
        .arg(&addr_file)
        .stderr(log)
        .spawn()
        .expect("ac-backend starts");
    let start = Instant::now();
    loop {
        if let Some(addr) = std::fs::read_to_string(&addr_file).ok().and_then(|t| t.trim().parse().ok()) {
            return (Daemon(child), addr);
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ac-backend did not start:\n{}", ac_tests::tail(&dir.join("ac-backend.log"), 20));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon killed with SIGKILL (a crash: it cleans nothing up) leaves no session worker
/// holding the GPU: an idle one, which would also have noticed its pipes close, and a busy one,
/// which cannot: its reading thread is stuck in the driver (a launch behind a copy that takes a
/// minute, as a launch waits behind a hung GPU's full queue), so it never reads the end of
/// its input. Only the kernel's parent-death signal ends that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_leaves_no_session_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut record = standin::WorkerRecord::new();
    let program = record.program(&[("CUDA_STANDIN_COPY_DELAY_MS", "60000".into())]);
    let (mut daemon, addr) = start_daemon(dir.path(), &program);
    let mut options = ConnectOptions::new(addr, dir.path().join("ca.pem"));
    options.tuning = ac_tests::quick_tuning();
    options.lanes = 1;

    let idle = Accelerator::connect(&options).await.unwrap();
    // No copies before the busy one: each takes a minute on this stand-in.
    let _kept = idle.alloc::<f32>(1024).await.unwrap();
    let busy = Accelerator::connect(&options).await.unwrap();
    let x = busy.alloc::<f32>(256).await.unwrap();
    let saxpy = busy.builtin().await.unwrap().function("saxpy").await.unwrap();
    let big = busy.alloc::<u8>(8 << 20).await.unwrap();
    let workers = workers_of(daemon.0.id());
    assert_eq!(workers.len(), 2, "a worker per session: {workers:?}");

    // The copy's first piece sleeps in the stand-in, holding its lock; the launch then stops
    // the busy worker's reading thread on that lock.
    let copy = tokio::spawn(async move { big.copy_from_host(&vec![7u8; 8 << 20]).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let args = [2.0f32.into(), x.arg(), x.arg(), 256u64.into()];
    let launch = tokio::spawn(async move { saxpy.launch(LaunchDims::linear(256, 64), &args).await });
    tokio::time::sleep(Duration::from_secs(1)).await;

    let killed = Instant::now();
    daemon.0.kill().unwrap(); // SIGKILL
    daemon.0.wait().unwrap();
    let gone = ac_tests::eventually(Duration::from_secs(10), || async { !workers.iter().any(|w| is_worker(*w)) }).await;
    let left: Vec<u32> = workers.iter().copied().filter(|w| is_worker(*w)).collect();
    for pid in &left {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    eprintln!("workers {workers:?} gone: {gone}, {:?} after the daemon was killed", killed.elapsed());
    assert!(gone, "session workers outlived their daemon by 10 s: {left:?} of {workers:?}");
    copy.abort();
    launch.abort();
    record.assert_none();
}

/// Copies in flight on the client's side, counted around each copy.
struct InFlight(AtomicUsize);

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// How long each of `n` small synchronous calls takes (an allocation and its free, each a
/// round trip to the session's worker), and how many copies were in flight at each; fewer
/// calls if they take over a minute in all (a backend whose async threads are held).
async fn small_calls(acc: &Accelerator, n: usize, in_flight: &InFlight) -> (Vec<Duration>, Vec<usize>) {
    let (mut took, mut busy) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let start = Instant::now();
    while took.len() < n && start.elapsed() < Duration::from_secs(60) {
        busy.push(in_flight.0.load(Ordering::SeqCst));
        let start = Instant::now();
        let buf = acc.alloc::<u8>(4096).await.unwrap();
        buf.free().await.unwrap();
        took.push(start.elapsed());
    }
    (took, busy)
}

/// Sessions copying at once.
const COPIERS: usize = 32;
/// Bytes of each copy: through the bulk path (over `inline_max`), four pieces.
const COPY: usize = 4 << 20;
/// How long the stand-in takes per host-to-device copy it runs (one per MiB here): each copy
/// stays in the device for seconds, with the host's CPU free.
const DELAY_MS: u64 = 1000;

/// 32 sessions' bulk copies waiting on a slow device do not hold up another session's small
/// calls: with the backend on 2 async threads (the test's runtime), a wait for a worker's
/// reply that held its thread would leave the other session's control loop no thread to run
/// on until a copy finished (seconds). The bound is the 2x the idle median, with a
/// floor of 20 ms above idle: on a 2-core machine the copies' network work (32 x 4 MiB over
/// TLS, each time a round of copies starts) shares the cores with the small calls, and a
/// sub-millisecond idle median doubles with any scheduling hiccup; a held thread costs a
/// copy's seconds, two orders of magnitude above the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_in_32_sessions_do_not_stall_another_sessions_small_calls() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let program = record.program(&[("CUDA_STANDIN_COPY_DELAY_MS", DELAY_MS.to_string())]);
    // Connections that wait out a stalled backend (they time out after 1.5 s in the other
    // tests), so that a stall shows as the small calls' latency.
    let patient = Tuning { idle_timeout_ms: 120_000, ..Tuning::default() };
    let tb = TestBackend::start_with(|c| {
        c.transport = patient.clone();
        c.device = DeviceChoice::Cuda;
        c.staging_mib = 8;
        // The stand-in's 4 GiB would hold 3 real sessions (the default's per-session cost).
        c.max_sessions = Some(64);
        c.isolation = Isolation::Process;
        c.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
        c.worker_program = Some(program);
    })
    .await;
    let in_flight = Arc::new(InFlight(AtomicUsize::new(0)));
    let mut options = tb.options();
    options.tuning = patient;
    let small = Accelerator::connect(&options).await.unwrap();
    small_calls(&small, 5, &in_flight).await; // warm-up
    let (idle, _) = small_calls(&small, 30, &in_flight).await;

    let stop = Arc::new(AtomicBool::new(false));
    let copiers: Vec<_> = (0..COPIERS)
        .map(|_| {
            let (options, stop, in_flight) = (options.clone(), stop.clone(), in_flight.clone());
            tokio::spawn(async move {
                let acc = Accelerator::connect(&options).await?;
                let buf = acc.alloc::<u8>(COPY).await?;
                let data = vec![3u8; COPY];
                let mut copies = 0;
                while !stop.load(Ordering::SeqCst) {
                    in_flight.0.fetch_add(1, Ordering::SeqCst);
                    let copied = buf.copy_from_host(&data).await;
                    in_flight.0.fetch_sub(1, Ordering::SeqCst);
                    copied?;
                    copies += 1;
                }
                Ok::<_, ac_frontend::Error>(copies)
            })
        })
        .collect();
    // Every copier is copying, and has had the time to hand its bytes over: the copies wait in
    // the device now (each for four seconds).
    let all_in =
        ac_tests::eventually(Duration::from_secs(60), || async { in_flight.0.load(Ordering::SeqCst) == COPIERS }).await;
    if !all_in {
        stop.store(true, Ordering::SeqCst);
        let mut results = Vec::new();
        for copier in copiers {
            if copier.is_finished() {
                results.push(format!("{:?}", copier.await));
            }
        }
        panic!("only {} of {COPIERS} sessions copying; ended: {results:?}", in_flight.0.load(Ordering::SeqCst));
    }
    tokio::time::sleep(Duration::from_millis(DELAY_MS / 2)).await;
    let started = Instant::now();
    let (loaded, busy) = small_calls(&small, 30, &in_flight).await;
    let window = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut copies = 0;
    for copier in copiers {
        copies += copier.await.unwrap().unwrap();
    }

    let (idle, loaded) = (median(idle), median(loaded));
    let fewest = busy.iter().copied().min().unwrap_or(0);
    eprintln!(
        "small calls: idle median {idle:?}, median with {COPIERS} sessions copying {loaded:?} (fewest copies in \
         flight at a call: {fewest}; {} calls in {window:?}; {copies} copies done)",
        busy.len()
    );
    assert!(fewest >= COPIERS / 2, "the small calls were measured with {fewest} copies in flight");
    let bound = (idle * 2).max(idle + Duration::from_millis(20));
    assert!(loaded <= bound, "small calls took {loaded:?} with copies in flight, {idle:?} idle (bound {bound:?})");
    standin::assert_no_violations();
    record.assert_none();
}
