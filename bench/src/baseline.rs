//! The bare quinn baseline (issue 13): a quinn client and server in two processes, with the
//! data plane's own TLS and `Tuning`, doing what the SDK does without the SDK: a request and its
//! answer on one long-lived stream, small one-way messages batched into large writes, and a
//! 1 GiB one-way stream. Every data-plane row is reported as a ratio to it, in the same run.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ac_frontend::ConnectOptions;
use ac_proto::transport::Tuning;
use ac_proto::{lane, tls, transport};
use bytes::Bytes;

use crate::latency::{fill_sync_samples, launch_sync_samples, launches_per_second, ping_samples};
use crate::setup::{connect, median, percentiles, sibling, Child_, CpuMeter};

const ALPN: &[u8] = b"ac-bench-baseline";
/// One small message: about a launch frame.
const MESSAGE: usize = 64;
/// Interleaved rounds of round-trip measurements.
const ROUNDS: usize = 10;
/// Alternating rounds of bulk copies against the bare lane.
const COPY_ROUNDS: usize = 7;
/// Elements of a `fill` just over what the CPU device runs on the control loop at a barrier
/// (see `ac-backend/src/device/stream_workers.rs`): the stream worker's path, kernel time included.
const WORKER_FILL: u64 = 4097;

/// The helper process: serves the baseline's streams until killed. A stream starting with `e`
/// echoes 64-byte messages; one starting with `s` is read to its end and answered with the
/// byte count.
pub fn quinn_peer(dir: &std::path::Path) -> anyhow::Result<()> {
    // The same runtime as the backend's, so that the ratio measures the protocol's cost.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let files = tls::ensure_self_signed(dir, &tls::default_names(), &[])?;
        let crypto = tls::server_crypto(tls::load_identity(&files.cert, &files.key)?, ALPN)?;
        let endpoint = transport::server_endpoint("127.0.0.1:0".parse()?, crypto, &Tuning::default(), None)?;
        let lanes = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let acceptor = lane::server_config(tls::load_identity(&files.cert, &files.key)?)?;
        println!("{} {}", endpoint.local_addr()?.port(), lanes.local_addr()?.port());
        tokio::spawn(serve_lanes(lanes, acceptor));
        while let Some(incoming) = endpoint.accept().await {
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((send, recv)) = conn.accept_bi().await {
                    tokio::spawn(serve_stream(send, recv));
                }
            });
        }
        Ok(())
    })
}

/// The bare lane baseline: TLS streams made as the SDK's lanes are. Each opens with a byte
/// count, whether to use a buffer of that size (1) or one cache-resident MiB, reused (0), and
/// the direction: 0, the peer reads that many bytes as a lane reads a copy's
/// (`LaneTls::read_with`, the socket's low-water mark included) and answers with the count; 1,
/// the peer writes them as a backend writes a device-to-host copy's (`LaneTls::write_from`).
/// A copy-sized peer reads and writes one buffer that lives as long as the peer, touched before
/// it answers "ready", as a backend reads and writes device memory that outlives a copy
/// (allocating and freeing a fresh one per stream put the freeing beside the next measurement).
async fn serve_lanes(listener: tokio::net::TcpListener, acceptor: lane::tokio_rustls::TlsAcceptor) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let memory = std::sync::Arc::new(tokio::sync::Mutex::new(Vec::<u8>::new()));
    while let Ok((socket, _)) = listener.accept().await {
        let (acceptor, memory) = (acceptor.clone(), memory.clone());
        tokio::spawn(async move {
            let _ = lane::tune(&socket);
            let Ok(mut stream) = lane::accept(socket, &acceptor).await else { return };
            let mut opening = [0u8; 10];
            if stream.read_exact(&mut opening).await.is_err() {
                return;
            }
            let total = u64::from_le_bytes(opening[..8].try_into().expect("8 bytes"));
            let (whole, peer_writes) = (opening[8] == 1, opening[9] == 1);
            // Only a copy-sized stream takes the shared buffer (streams come one at a time).
            let mut shared = if whole { Some(memory.lock().await) } else { None };
            let mut one_mib = Vec::new();
            let buf = match shared.as_deref_mut() {
                Some(memory) => {
                    if memory.len() < total as usize {
                        memory.resize(total as usize, 1);
                    }
                    &mut memory[..total as usize]
                }
                None => {
                    one_mib.resize(1 << 20, 1);
                    &mut one_mib[..]
                }
            };
            // A lane's writer keeps a record open until it is flushed.
            if stream.write_all(b"r").await.is_err() || stream.flush().await.is_err() {
                return;
            }
            if peer_writes {
                let mut sent = 0;
                let filled = stream.write_from(total as usize, |n, take| {
                    take(&buf[reused_span(buf.len(), sent, n)]);
                    sent += n;
                    Ok::<_, std::convert::Infallible>(())
                });
                let _ = filled.await;
                let _ = stream.shutdown().await;
                return;
            }
            // As a backend's CPU device takes a host-to-device copy: full records opened
            // straight into its memory.
            let mut received = 0u64;
            let size = buf.len();
            let read = stream.read_placed(total, |at, n, fill| {
                fill(&mut buf[reused_span(size, at as usize, n)]);
                received += n as u64;
                Ok::<_, std::convert::Infallible>(())
            });
            if !matches!(read.await, Ok(Ok(()))) {
                return;
            }
            let _ = stream.write_all(&received.to_le_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Where `len` bytes from byte `at` of a stream lie in a buffer of `size`: at `at` when the
/// buffer is the stream's size, else where they fit in the reused buffer.
fn reused_span(size: usize, at: usize, len: usize) -> std::ops::Range<usize> {
    let at = at % size;
    let at = if at + len > size { 0 } else { at };
    at..at + len
}

async fn serve_stream(mut send: quinn::SendStream, mut recv: quinn::RecvStream) -> anyhow::Result<()> {
    let mut mode = [0u8; 1];
    recv.read_exact(&mut mode).await?;
    if mode[0] == b'e' {
        let mut message = [0u8; MESSAGE];
        while recv.read_exact(&mut message).await.is_ok() {
            send.write_all(&message).await?;
        }
    } else {
        let mut total = 0u64;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            total += chunk.bytes.len() as u64;
        }
        send.write_all(&total.to_le_bytes()).await?;
    }
    let _ = send.finish();
    Ok(())
}

struct Peer {
    child: std::process::Child,
    conn: quinn::Connection,
    lane_port: u16,
    _endpoint: quinn::Endpoint,
    _dir: tempfile::TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut child =
            Command::new(sibling("ac-bench")?).arg("quinn-peer").arg(dir.path()).stdout(Stdio::piped()).spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        let mut ports = line.split_whitespace().map(str::parse::<u16>);
        let (Some(Ok(quic)), Some(Ok(lane_port))) = (ports.next(), ports.next()) else {
            anyhow::bail!("the peer said {line:?}, not its two ports");
        };
        let addr = format!("127.0.0.1:{quic}").parse()?;
        let crypto = tls::client_crypto(tls::load_roots(&dir.path().join("ca.pem"))?, ALPN)?;
        let endpoint = transport::client_endpoint(addr, Some(std::sync::Arc::new(crypto)), &Tuning::default())?;
        let conn = endpoint.connect(addr, "127.0.0.1")?.await?;
        Ok(Self { child, conn, lane_port, _endpoint: endpoint, _dir: dir })
    }

    /// `n` round trips of a 64-byte request and its answer on one long-lived stream, after
    /// `n / 10` of warm-up.
    async fn round_trip_samples(&self, n: usize) -> anyhow::Result<Vec<Duration>> {
        let (mut send, mut recv) = self.conn.open_bi().await?;
        send.write_all(b"e").await?;
        let mut message = [7u8; MESSAGE];
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let start = Instant::now();
            send.write_all(&message).await?;
            recv.read_exact(&mut message).await?;
            if i >= n / 10 {
                samples.push(start.elapsed());
            }
        }
        let _ = send.finish();
        Ok(samples)
    }

    /// A fresh TLS stream over TCP to the peer, made as a lane is, opened for `total` bytes
    /// (`whole`: the peer uses a buffer of that size) in the direction `peer_writes`; returns
    /// once the peer has touched its buffer (the handshake is not timed).
    async fn bare_lane(&self, total: usize, whole: bool, peer_writes: bool) -> anyhow::Result<lane::LaneTls> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let roots = tls::load_roots(&self._dir.path().join("ca.pem"))?;
        let socket = tokio::net::TcpStream::connect(("127.0.0.1", self.lane_port)).await?;
        lane::tune(&socket)?;
        let name = lane::tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let mut stream = lane::connect(socket, &lane::client_config(roots)?, name).await?;
        stream.write_all(&(total as u64).to_le_bytes()).await?;
        stream.write_all(&[u8::from(whole), u8::from(peer_writes)]).await?;
        stream.flush().await?;
        let mut ready = [0u8; 1];
        stream.read_exact(&mut ready).await?;
        Ok(stream)
    }

    /// Writes `pieces` to the peer on a bare lane and waits for the count: bytes per second,
    /// from the first byte written. With `whole`, the peer reads into one buffer of the total
    /// size; otherwise into one reused MiB.
    async fn lane_one_way(&self, pieces: &[&[u8]], whole: bool) -> anyhow::Result<f64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let mut stream = self.bare_lane(total, whole, false).await?;
        let start = Instant::now();
        for piece in pieces {
            stream.write_all(piece).await?;
        }
        stream.shutdown().await?;
        let mut count = [0u8; 8];
        stream.read_exact(&mut count).await?;
        let elapsed = start.elapsed().as_secs_f64();
        anyhow::ensure!(u64::from_le_bytes(count) == total as u64, "bytes lost");
        Ok(total as f64 / elapsed)
    }

    /// Reads `out.len()` bytes from the peer on a bare lane, as a device-to-host copy's
    /// payload is read, into `out` (`whole`: the peer writes from a buffer of that size) or,
    /// without `whole`, into one reused MiB of it: bytes per second, from the first byte read.
    async fn lane_from_peer(&self, out: &mut [u8], whole: bool) -> anyhow::Result<f64> {
        let total = out.len();
        let mut stream = self.bare_lane(total, whole, true).await?;
        let start = Instant::now();
        // As the SDK reads a copy's payload: full records opened where their plaintext goes.
        if whole {
            stream.read_exact_plain(out).await?;
        } else {
            let mib = 1 << 20;
            for at in (0..total).step_by(mib) {
                stream.read_exact_plain(&mut out[..mib.min(total - at)]).await?;
            }
        }
        Ok(total as f64 / start.elapsed().as_secs_f64())
    }

    /// Writes `payload` `times` over a fresh stream and waits for the count: bytes per second.
    async fn one_way(&self, payload: Bytes, times: usize) -> anyhow::Result<f64> {
        let (mut send, mut recv) = self.conn.open_bi().await?;
        let start = Instant::now();
        send.write_all(b"s").await?;
        for _ in 0..times {
            send.write_chunk(payload.clone()).await?;
        }
        send.finish()?;
        let mut count = [0u8; 8];
        recv.read_exact(&mut count).await?;
        let elapsed = start.elapsed().as_secs_f64();
        anyhow::ensure!(u64::from_le_bytes(count) == (payload.len() * times) as u64, "bytes lost");
        Ok((payload.len() * times) as f64 / elapsed)
    }
}

/// The data plane against bare quinn, between two processes, in one run.
pub async fn against_quinn(quick: bool) -> anyhow::Result<()> {
    let n = if quick { 2_000 } else { 20_000 };
    let launches = if quick { 50_000 } else { 500_000 };
    let copy = if quick { 64usize << 20 } else { 1 << 30 };
    let peer = Peer::start().await?;
    let remote = Child_::start(copy as u64 / (1 << 20) + 64)?;
    // One lane whatever the cores (the default is one per four): its baseline is one stream.
    let acc = connect(&ConnectOptions { lanes: 1, ..remote.options.clone() }).await?;
    // Round trips in interleaved rounds, so that the machine's drift (±20% on this VM) falls on
    // the baseline and the SDK alike.
    let (mut rtt, mut ping, mut launch, mut worker) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        rtt.extend(peer.round_trip_samples(n / ROUNDS).await?);
        ping.extend(ping_samples(&acc, n / ROUNDS).await?);
        launch.extend(launch_sync_samples(&acc, n / ROUNDS).await?);
        worker.extend(fill_sync_samples(&acc, n / ROUNDS / 4, WORKER_FILL).await?);
    }
    let (rtt, ping, launch, worker) = (percentiles(rtt), percentiles(ping), percentiles(launch), percentiles(worker));
    let udp = crate::latency::udp_floor(n)?;
    // 1,024 messages per write, as a client batching small one-way messages would.
    let batch = Bytes::from(vec![1u8; MESSAGE * 1024]);
    let messages = peer.one_way(batch, launches / 1024).await? / MESSAGE as f64;
    let meter = CpuMeter::start(&[peer.child.id()]);
    let stream = peer.one_way(Bytes::from(vec![3u8; 1 << 20]), copy >> 20).await?;
    let stream_cpu = meter.bytes_per_cpu_second(copy);
    let meter = CpuMeter::start(&[peer.child.id()]);
    let one_mib = vec![3u8; 1 << 20];
    let lane_stream = peer.lane_one_way(&vec![&one_mib[..]; copy >> 20], false).await? / 1e6;
    let lane_cpu = meter.bytes_per_cpu_second(copy);

    let rate = launches_per_second(&acc, launches).await?;
    let data = crate::copies::host_data(copy);
    // Touched, as a buffer a program reuses: first-touch page faults are not the copy's.
    let mut back = vec![1u8; copy];
    let [h2d, d2h, lane_whole, lane_back_whole] = copies_against_lanes(&peer, &acc, &data, &mut back).await?;
    let lane_back = peer.lane_from_peer(&mut back, false).await? / 1e6;
    let (h2d_cpu, d2h_cpu) = copy_cpu(&acc, &data, &mut back, remote.pid()).await?;
    // The receiver's buffer is touched before the meter starts, as the other rows' are.
    let sink = crate::copies::TcpSink::start(copy, 1)?;
    let meter = CpuMeter::start(&[]);
    let (tcp, received) = sink.stream(&data)?;
    let tcp_cpu = meter.bytes_per_cpu_second(copy);
    drop(received);
    let two = {
        let mut options = remote.options.clone();
        options.lanes = 2;
        let acc = connect(&options).await?;
        crate::copies::median_pair(&acc, &data, &mut back, COPY_ROUNDS).await?
    };
    // Copies over QUIC streams, the design before lanes: their rate, and their bytes per
    // CPU-second beside the lanes' (the issue's "not worse than today").
    let (quic, quic_cpu) = {
        let mut options = remote.options.clone();
        options.lanes = 0;
        let acc = connect(&options).await?;
        let rate = crate::copies::median_pair(&acc, &data, &mut back, COPY_ROUNDS).await?;
        (rate, copy_cpu(&acc, &data, &mut back, remote.pid()).await?)
    };

    println!("## The data plane against bare quinn (two processes, same TLS and `Tuning`, one run)\n");
    println!("| what | bare quinn | SDK | SDK / quinn |");
    println!("|---|---|---|---|");
    println!("| small request and answer, p50 µs | {:.1} | {:.1} (ping) | {:.2} |", rtt.0, ping.0, ping.0 / rtt.0);
    println!("| ... p99 µs | {:.1} | {:.1} | |", rtt.1, ping.1);
    println!("| context: raw UDP ping-pong, p50 µs | {:.1} | | |", udp.0);
    println!(
        "| launch + synchronize, p50 µs | {:.1} (a round trip) | {:.1} | {:.2} |",
        rtt.0,
        launch.0,
        launch.0 / rtt.0
    );
    println!(
        "| ... a launch too long for the control loop ({WORKER_FILL} elements) + synchronize, p50 µs | {:.1} (a round trip) | {:.1} | {:.2} |",
        rtt.0,
        worker.0,
        worker.0 / rtt.0
    );
    println!(
        "| small one-way messages / s | {messages:.0} (64 B, batched) | {rate:.0} (async launches) | {:.3} |",
        rate / messages
    );
    let mb = |b: f64| b / 1e6;
    let size = crate::setup::mib(copy);
    println!(
        "| {size} one way, MB/s: SDK over QUIC streams (`lanes = 0`) | {:.0} | H2D {:.0}, D2H {:.0} | {:.2}, {:.2} |",
        mb(stream),
        quic.0,
        quic.1,
        quic.0 / mb(stream),
        quic.1 / mb(stream)
    );
    println!();
    println!("Bulk copies move on lanes (TLS 1.3 over TCP); their baseline is a bare TLS stream made the same way:\n");
    println!("| what | bare TLS over TCP | SDK | SDK / bare TLS |");
    println!("|---|---|---|---|");
    let baselines = [
        ("program to peer, from and into", "H2D", [lane_stream, lane_whole], h2d, two.0),
        ("peer to program, from and into", "D2H", [lane_back, lane_back_whole], d2h, two.1),
    ];
    for (memory, index) in [("one cache-resident MiB", 0), ("copy-sized buffers", 1)] {
        for (way_bare, way, rates, one_lane, two_lanes) in baselines {
            let bare = rates[index];
            println!(
                "| {size}, MB/s, bare {way_bare} {memory} | {:.0} | {way} {one_lane:.0} (1 lane), {two_lanes:.0} (2) | {:.2}, {:.2} |",
                bare,
                one_lane / bare,
                two_lanes / bare
            );
        }
    }
    println!("| context: plain TCP, {size} one way, MB/s | {tcp:.0} | | |");
    println!(
        "\n(1 lane and the copy-sized bare lanes: medians of {COPY_ROUNDS} alternating rounds; 2 lanes and QUIC streams: medians of \
         {COPY_ROUNDS} copies each way of their own, after those rounds; \
         the bare lanes from one cache-resident MiB: one run)\n"
    );
    println!("Bytes moved per CPU-second of both processes (`/proc/PID/stat`, 10 ms ticks), {size} copies:\n");
    println!("| transfer | MB per CPU-second | / plain TCP |");
    println!("|---|---|---|");
    for (what, per_cpu) in [
        (format!("plain TCP ({tcp:.0} MB/s)"), tcp_cpu),
        ("bare quinn stream".to_string(), stream_cpu),
        ("bare TLS over TCP (a lane)".to_string(), lane_cpu),
        ("SDK host to device, 1 lane".to_string(), h2d_cpu),
        ("SDK device to host, 1 lane".to_string(), d2h_cpu),
        ("SDK host to device, QUIC streams (`lanes = 0`)".to_string(), quic_cpu.0),
        ("SDK device to host, QUIC streams (`lanes = 0`)".to_string(), quic_cpu.1),
    ] {
        println!("| {what} | {:.0} | {:.2} |", mb(per_cpu), per_cpu / tcp_cpu);
    }
    println!();
    Ok(())
}

/// The SDK's copies each way against the bare lane's from and into copy-sized memory (as a copy
/// reads the program's buffer and writes the device's: `src` is touched, and the peer touches
/// its buffer before the clock starts), in `COPY_ROUNDS` alternating rounds so that the
/// machine's drift falls on both alike. Medians, MB/s: SDK H2D, SDK D2H, bare lane to the peer,
/// bare lane from it.
async fn copies_against_lanes(
    peer: &Peer,
    acc: &ac_frontend::Accelerator,
    src: &[u8],
    dst: &mut [u8],
) -> anyhow::Result<[f64; 4]> {
    let buf = crate::copies::mapped(acc, src).await?;
    let pieces: Vec<&[u8]> = src.chunks(1 << 20).collect();
    let mut runs: [Vec<f64>; 4] = Default::default();
    for _ in 0..COPY_ROUNDS {
        let (h2d, d2h) = crate::copies::copy_pair(&buf, src, dst).await?;
        anyhow::ensure!(dst == src, "a device-to-host copy brought back other bytes");
        runs[0].push(h2d);
        runs[1].push(d2h);
        runs[2].push(peer.lane_one_way(&pieces, true).await? / 1e6);
        runs[3].push(peer.lane_from_peer(dst, true).await? / 1e6);
    }
    buf.free().await?;
    Ok(runs.map(median))
}

/// Bytes per CPU-second (client and backend) of one host-to-device and one device-to-host copy.
async fn copy_cpu(
    acc: &ac_frontend::Accelerator,
    src: &[u8],
    dst: &mut [u8],
    backend: u32,
) -> anyhow::Result<(f64, f64)> {
    // Page faults of first touch are left out of the count.
    let buf = crate::copies::mapped(acc, src).await?;
    let meter = CpuMeter::start(&[backend]);
    buf.copy_from_host(src).await?;
    let h2d = meter.bytes_per_cpu_second(src.len());
    let meter = CpuMeter::start(&[backend]);
    buf.copy_to_host(dst).await?;
    let d2h = meter.bytes_per_cpu_second(src.len());
    buf.free().await?;
    Ok((h2d, d2h))
}
