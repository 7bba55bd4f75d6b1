//! Round-trip latency, the raw UDP floor, and the asynchronous launch rate.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ac_backend::CopySettings;
use ac_frontend::{Accelerator, LaunchDims};
use ac_proto::transport::Tuning;

use crate::setup::{connect, percentiles, sibling, Child_, InProcess};

/// The helper: echoes datagrams until killed.
pub fn udp_echo() -> anyhow::Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    println!("{}", socket.local_addr()?.port());
    let mut buf = [0u8; 1500];
    loop {
        let (n, from) = socket.recv_from(&mut buf)?;
        socket.send_to(&buf[..n], from)?;
    }
}

/// 64-byte UDP ping-pong with a child process: the floor of any round trip between processes.
pub(crate) fn udp_floor(n: usize) -> anyhow::Result<(f64, f64)> {
    let mut child = Command::new(sibling("ac-bench")?).arg("udp-echo").stdout(Stdio::piped()).spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.connect(("127.0.0.1", line.trim().parse::<u16>()?))?;
    socket.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut buf = [0u8; 64];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        socket.send(&buf)?;
        socket.recv(&mut buf)?;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(percentiles(samples))
}

pub(crate) async fn ping_latency(acc: &Accelerator, n: usize) -> anyhow::Result<(f64, f64)> {
    Ok(percentiles(ping_samples(acc, n).await?))
}

/// `n` ping round trips after `n / 10` of warm-up.
pub(crate) async fn ping_samples(acc: &Accelerator, n: usize) -> anyhow::Result<Vec<Duration>> {
    for _ in 0..n / 10 {
        acc.ping().await?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        acc.ping().await?;
        samples.push(start.elapsed());
    }
    Ok(samples)
}

/// Launch + synchronize of `fill` on one element, p50 and p99 in µs over `n` after warm-up.
pub async fn launch_sync_latency(acc: &Accelerator, n: usize) -> anyhow::Result<(f64, f64)> {
    Ok(percentiles(launch_sync_samples(acc, n).await?))
}

/// `n` launches of `fill` on one element, each followed by a synchronize, after `n / 10` of
/// warm-up.
pub(crate) async fn launch_sync_samples(acc: &Accelerator, n: usize) -> anyhow::Result<Vec<Duration>> {
    fill_sync_samples(acc, n, 1).await
}

/// `n` launches of `fill` on `elements` floats, each followed by a synchronize, after `n / 10`
/// of warm-up.
pub(crate) async fn fill_sync_samples(acc: &Accelerator, n: usize, elements: u64) -> anyhow::Result<Vec<Duration>> {
    let buf = acc.alloc::<f32>(elements as usize).await?;
    let fill = acc.builtin().await?.function("fill").await?;
    let args = [buf.arg(), 1.0f32.into(), elements.into()];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        fill.launch(LaunchDims::linear(1, 1), &args).await?;
        acc.synchronize().await?;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

/// Ping from a minimal client that writes and reads the control stream itself: the floor of
/// what the SDK could reach with this backend and transport.
async fn bare_ping_latency(options: &ac_frontend::ConnectOptions, n: usize) -> anyhow::Result<(f64, f64)> {
    use ac_proto::backend::{Envelope, Hello, Reply, Request};
    let crypto = ac_proto::backend::link::client_crypto(options)?;
    let mut link =
        ac_proto::backend::link::open(options, crypto, &Hello::Open { capability: vec![], device: 0 }).await?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let frame = ac_proto::frame::frame_bytes(&Envelope { id: i as u64 + 1, request: Request::Ping })?;
        let start = Instant::now();
        link.send.write_all(&frame).await?;
        let _reply: Reply = link.reader.expect_frame().await?;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    Ok(percentiles(samples))
}

/// Ping with the blocking API from a plain thread, as a program with a plain `main` sees it.
fn blocking_ping_latency(options: ac_frontend::ConnectOptions, n: usize) -> anyhow::Result<(f64, f64)> {
    std::thread::spawn(move || -> anyhow::Result<(f64, f64)> {
        let acc = ac_frontend::blocking::Accelerator::connect(&options)?;
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let start = Instant::now();
            acc.ping()?;
            if i >= n / 10 {
                samples.push(start.elapsed());
            }
        }
        Ok(percentiles(samples))
    })
    .join()
    .expect("blocking thread")
}

pub async fn round_trips(quick: bool) -> anyhow::Result<()> {
    let n = if quick { 2_000 } else { 20_000 };
    let tuning = Tuning::default();
    let local = InProcess::start(256, tuning.clone(), CopySettings::default()).await?;
    let local_acc = connect(&local.options(1, &tuning)).await?;
    let remote = Child_::start(256)?;
    let mut remote_options = remote.options.clone();
    remote_options.stripes = 1;
    let remote_acc = connect(&remote_options).await?;

    let udp = udp_floor(n)?;
    let rows = [
        ("small synchronous call (ping), async API", "in-process", ping_latency(&local_acc, n).await?),
        (
            "small synchronous call (ping), blocking API",
            "in-process",
            blocking_ping_latency(local.options(1, &tuning), n)?,
        ),
        ("launch + synchronize", "in-process", launch_sync_latency(&local_acc, n).await?),
        (
            "ping from a minimal client (diagnostic)",
            "in-process",
            bare_ping_latency(&local.options(1, &tuning), n).await?,
        ),
        ("small synchronous call (ping), async API", "separate process", ping_latency(&remote_acc, n).await?),
        ("small synchronous call (ping), blocking API", "separate process", blocking_ping_latency(remote_options, n)?),
        ("launch + synchronize", "separate process", launch_sync_latency(&remote_acc, n).await?),
        ("ping from a minimal client (diagnostic)", "separate process", bare_ping_latency(&remote.options, n).await?),
        ("raw UDP ping-pong, 64 bytes", "separate process", udp),
    ];
    println!("## Round-trip latency ({n} calls each, after warm-up)\n");
    println!("| call | backend | p50 µs | p99 µs | p50 / UDP p50 |");
    println!("|---|---|---|---|---|");
    for (call, place, (p50, p99)) in rows {
        let ratio = if place == "separate process" { format!("{:.2}", p50 / udp.0) } else { "-".into() };
        println!("| {call} | {place} | {p50:.1} | {p99:.1} | {ratio} |");
    }
    println!();
    Ok(())
}

pub(crate) async fn launches_per_second(acc: &Accelerator, n: usize) -> anyhow::Result<f64> {
    let buf = acc.alloc::<f32>(1).await?;
    let fill = acc.builtin().await?.function("fill").await?;
    let args = [buf.arg(), 1.0f32.into(), 1u64.into()];
    let dims = LaunchDims::linear(1, 1);
    for _ in 0..n / 10 {
        fill.launch(dims, &args).await?;
    }
    acc.synchronize().await?;
    let start = Instant::now();
    for _ in 0..n {
        fill.launch(dims, &args).await?;
    }
    acc.synchronize().await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

pub async fn launch_rate(quick: bool) -> anyhow::Result<()> {
    let n = if quick { 20_000 } else { 500_000 };
    let tuning = Tuning::default();
    let local = InProcess::start(256, tuning.clone(), CopySettings::default()).await?;
    let local_rate = launches_per_second(&connect(&local.options(1, &tuning)).await?, n).await?;
    let remote = Child_::start(256)?;
    let remote_rate = launches_per_second(&connect(&remote.options).await?, n).await?;
    println!("## Asynchronous launches ({n} launches of `fill` on 1 element, then one synchronize)\n");
    println!("| backend | launches / s |");
    println!("|---|---|");
    println!("| in-process | {local_rate:.0} |");
    println!("| separate process | {remote_rate:.0} |");
    println!();
    Ok(())
}

/// What [`copy_after_launch`] times.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Before {
    Nothing,
    Launch,
    LaunchAndSynchronize,
}

/// p50 and p99 in µs of a synchronous device-to-host copy of `out.len()` bytes, preceded by
/// `before`, over `n` runs after warm-up.
async fn timed_copy(
    acc: &Accelerator,
    data: &ac_frontend::DeviceBuffer<u8>,
    out: &mut [u8],
    before: Before,
    n: usize,
) -> anyhow::Result<(f64, f64)> {
    let flag = acc.alloc::<f32>(1).await?;
    let fill = acc.builtin().await?.function("fill").await?;
    let args = [flag.arg(), 1.0f32.into(), 1u64.into()];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        if before != Before::Nothing {
            fill.launch(LaunchDims::linear(1, 1), &args).await?;
        }
        if before == Before::LaunchAndSynchronize {
            acc.synchronize().await?;
        }
        data.copy_to_host(out).await?;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    Ok(percentiles(samples))
}

/// A synchronous copy after a launch: the backend orders it behind the launch, so no
/// synchronize round trip is needed. Compared, in the same run, with the copy alone and with an
/// explicit synchronize in between, against a backend in another process.
pub async fn copy_after_launch(quick: bool) -> anyhow::Result<()> {
    let n = if quick { 200 } else { 3_000 };
    let remote = Child_::start(256)?;
    let acc = connect(&remote.options).await?;
    println!("## A synchronous copy after a launch ({n} each, separate process, after warm-up)\n");
    println!("| device to host | before the copy | p50 µs | p99 µs | p50 / copy alone |");
    println!("|---|---|---|---|---|");
    for bytes in [1usize << 20, 64 << 10] {
        let data = acc.alloc::<u8>(bytes).await?;
        let mut out = vec![0u8; bytes];
        let alone = timed_copy(&acc, &data, &mut out, Before::Nothing, n).await?;
        for (label, before) in [
            ("nothing", Before::Nothing),
            ("a launch", Before::Launch),
            ("a launch and `synchronize`", Before::LaunchAndSynchronize),
        ] {
            let (p50, p99) =
                if before == Before::Nothing { alone } else { timed_copy(&acc, &data, &mut out, before, n).await? };
            println!("| {} | {label} | {p50:.1} | {p99:.1} | {:.2} |", crate::setup::mib(bytes), p50 / alone.0);
        }
    }
    println!();
    Ok(())
}
