//! Copy throughput against a plain TCP stream measured in the same run, and the transport
//! tuning ablation.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ac_backend::CopySettings;
use ac_frontend::{Accelerator, CopyOptions, DeviceBuffer};
use ac_proto::transport::Tuning;

use crate::setup::{connect, median, mib, InProcess};

/// MB/s (10^6 bytes per second) of `bytes` moved in `elapsed`.
fn rate(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

/// A plain TCP receiver on loopback, its buffer touched and its socket listening before any
/// stream is timed (as the SDK's and the bare lanes' buffers are): not zeroed memory, which the
/// kernel maps only as a stream first writes each page.
pub(crate) struct TcpSink {
    addr: std::net::SocketAddr,
    server: std::thread::JoinHandle<std::io::Result<Vec<u8>>>,
    reps: usize,
}

impl TcpSink {
    /// Listens for `reps` streams of `len` bytes each.
    pub(crate) fn start(len: usize, reps: usize) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut dst = vec![1u8; len];
        let server = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
            for _ in 0..reps {
                let (mut s, _) = listener.accept()?;
                s.read_exact(&mut dst)?;
                s.write_all(&[1])?;
            }
            Ok(dst)
        });
        Ok(Self { addr, server, reps })
    }

    /// Streams `src` once per rep: the best MB/s, and the receiver's buffer, for the caller to
    /// free outside whatever it measures (unmapping a GiB is not the stream's cost).
    pub(crate) fn stream(self, src: &[u8]) -> anyhow::Result<(f64, Vec<u8>)> {
        let mut best = 0.0f64;
        for _ in 0..self.reps {
            let mut s = TcpStream::connect(self.addr)?;
            s.set_nodelay(true)?;
            let start = Instant::now();
            s.write_all(src)?;
            let mut ack = [0u8];
            s.read_exact(&mut ack)?;
            best = best.max(rate(src.len(), start.elapsed()));
        }
        let dst = self.server.join().expect("tcp server")?;
        Ok((best, dst))
    }
}

/// A plain TCP stream of `src` on loopback (see [`TcpSink`]); best of `reps`, MB/s.
pub(crate) fn tcp_stream(src: &[u8], reps: usize) -> anyhow::Result<f64> {
    Ok(TcpSink::start(src.len(), reps)?.stream(src)?.0)
}

/// One host-to-device copy of `src` into `buf`, then one device-to-host copy back into `dst`:
/// their MB/s.
pub(crate) async fn copy_pair(buf: &DeviceBuffer<u8>, src: &[u8], dst: &mut [u8]) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    buf.copy_from_host(src).await?;
    let h2d = rate(src.len(), start.elapsed());
    let start = Instant::now();
    buf.copy_to_host(dst).await?;
    Ok((h2d, rate(src.len(), start.elapsed())))
}

/// A device buffer of `src`'s size holding `src`, written by one untimed copy: the CPU device
/// maps its memory on first touch (a GPU at allocation), and a device-to-host copy of memory
/// never written reads the kernel's zero page. Timed copies start from this.
pub(crate) async fn mapped(acc: &Accelerator, src: &[u8]) -> anyhow::Result<DeviceBuffer<u8>> {
    let buf = acc.alloc::<u8>(src.len()).await?;
    buf.copy_from_host(src).await?;
    Ok(buf)
}

/// `reps` copy pairs through a fresh buffer of `acc` ([`mapped`]): each pair's MB/s.
pub(crate) async fn copy_pairs(
    acc: &Accelerator,
    src: &[u8],
    dst: &mut [u8],
    reps: usize,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let buf = mapped(acc, src).await?;
    let mut pairs = Vec::with_capacity(reps);
    for _ in 0..reps {
        pairs.push(copy_pair(&buf, src, dst).await?);
    }
    anyhow::ensure!(dst[0] == src[0] && dst[src.len() - 1] == src[src.len() - 1], "copy corrupted data");
    buf.free().await?;
    Ok(pairs)
}

/// Best-of-`reps` host-to-device and device-to-host MB/s through `acc`.
pub async fn measure(acc: &Accelerator, src: &[u8], dst: &mut [u8], reps: usize) -> anyhow::Result<(f64, f64)> {
    let pairs = copy_pairs(acc, src, dst, reps).await?;
    Ok(pairs.iter().fold((0.0f64, 0.0f64), |(h2d, d2h), &(up, down)| (h2d.max(up), d2h.max(down))))
}

/// Median host-to-device and device-to-host MB/s of `reps` copy pairs through `acc`.
pub(crate) async fn median_pair(
    acc: &Accelerator,
    src: &[u8],
    dst: &mut [u8],
    reps: usize,
) -> anyhow::Result<(f64, f64)> {
    let pairs = copy_pairs(acc, src, dst, reps).await?;
    Ok((median(pairs.iter().map(|p| p.0).collect()), median(pairs.iter().map(|p| p.1).collect())))
}

/// A copy's source: bytes that differ from their neighbours, touched.
pub(crate) fn host_data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

/// Throughput for each size, pipelining on and off, one and several connections.
pub async fn throughput(quick: bool) -> anyhow::Result<()> {
    let sizes: &[usize] = if quick { &[1 << 20, 16 << 20] } else { &[1 << 20, 64 << 20, 1 << 30] };
    let configs: &[(usize, bool)] = &[(1, true), (1, false), (2, true), (2, false), (4, true)];
    let tuning = Tuning::default();
    let server = InProcess::start(2048, tuning.clone(), CopySettings::default()).await?;
    let mut clients = Vec::new();
    for &(stripes, _) in configs {
        clients.push(connect(&server.options(stripes, &tuning)).await?);
    }
    println!("## Copy throughput (backend in-process, CPU device, loopback)\n");
    println!(
        "Chunk {} KiB, stream window {} MiB. Pipelined: the copy streams through the device as it arrives; not pipelined: store-and-forward through a staging buffer of the whole copy. MB/s = 10^6 bytes/s; best of the repetitions. Ratios are to the plain TCP stream of the same size measured in this run.\n",
        CopySettings::default().chunk_bytes >> 10,
        Tuning::default().stream_window >> 20
    );
    println!("| size | plain TCP MB/s | connections | pipelined | H2D MB/s | H2D / TCP | D2H MB/s | D2H / TCP |");
    println!("|---|---|---|---|---|---|---|---|");
    for &size in sizes {
        let reps = if size >= 1 << 30 {
            3
        } else if size >= 64 << 20 {
            4
        } else {
            20
        };
        let src = host_data(size);
        // Touched, as the TCP receiver's is: zeroed memory is mapped as a copy first writes it.
        let mut dst = vec![1u8; size];
        let tcp = tcp_stream(&src, reps)?;
        for (&(stripes, pipelined), acc) in configs.iter().zip(&clients) {
            acc.set_copy_options(CopyOptions { pipelined, ..CopyOptions::default() });
            let (h2d, d2h) = measure(acc, &src, &mut dst, reps).await?;
            println!(
                "| {} | {tcp:.0} | {stripes} | {} | {h2d:.0} | {:.2} | {d2h:.0} | {:.2} |",
                mib(size),
                if pipelined { "yes" } else { "no" },
                h2d / tcp,
                d2h / tcp
            );
        }
    }
    println!();
    Ok(())
}

/// Each transport setting's share of the throughput, on the largest copy.
pub async fn tuning(quick: bool) -> anyhow::Result<()> {
    let size = if quick { 32 << 20 } else { 1 << 30 };
    let reps = if quick { 2 } else { 3 };
    let src = host_data(size);
    let mut dst = vec![1u8; size];
    let defaults = Tuning::quinn_defaults();
    let big_mtu = Tuning { mtu: 6400, ..defaults.clone() };
    let windows = Tuning {
        stream_window: Tuning::default().stream_window,
        connection_window: Tuning::default().connection_window,
        ..big_mtu.clone()
    };
    let steps: Vec<(&str, Tuning, usize)> = vec![
        ("quinn defaults (MTU 1200-1452, 1.25 MB windows)", defaults, 1),
        ("+ MTU 6400 with GSO, max_udp_payload_size 6400", big_mtu, 1),
        ("+ 16 MiB stream / 64 MiB connection windows", windows, 1),
        ("+ 4 MiB UDP socket buffers (the default)", Tuning::default(), 1),
        ("default, striped over 2 connections", Tuning::default(), 2),
    ];
    println!("## Transport tuning ({} copies, 1 client, pipelined)\n", mib(size));
    let tcp = tcp_stream(&src, reps)?;
    println!("Plain TCP stream in this run: {tcp:.0} MB/s.\n");
    println!("| setting | H2D MB/s | H2D / TCP | D2H MB/s | D2H / TCP |");
    println!("|---|---|---|---|---|");
    for (label, tuning, stripes) in steps {
        let server = InProcess::start(2048, tuning.clone(), CopySettings::default()).await?;
        let acc = connect(&server.options(stripes, &tuning)).await?;
        let (h2d, d2h) = measure(&acc, &src, &mut dst, reps).await?;
        println!("| {label} | {h2d:.0} | {:.2} | {d2h:.0} | {:.2} |", h2d / tcp, d2h / tcp);
        acc.close().await;
        server.backend.shutdown().await;
    }
    println!();
    Ok(())
}
