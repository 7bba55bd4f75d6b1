//! The program of the network tests (`tests/tests/e2e/network.rs`), run inside an emulated host.
//! It prints one line per event, flushed at once, so that the test sees when it happened.
//!
//! With `ARM_ADDR` set it opens a session (the usual `ARM_*` variables) and works on its
//! accelerators; otherwise it connects straight to `AC_BACKEND_ADDR` (`AC_CA_CERT`).
//!
//! - `ac-net-client work ROUNDS PAUSE_MS`: each round copies 256 KiB of round-specific data to
//!   the device (a bulk copy), runs the builtin `saxpy` on it, reads it back and checks every
//!   value; prints `round N ok mark M` (or `wrong round N` and exits 1), where `M` is the number
//!   the file `AC_NET_MARK` held when the round *started* (0 without one): a test that writes
//!   `k` there after healing a partition knows that a round marked `k` or more began after the
//!   heal, not before it, and so shows the session surviving the outage. `ROUNDS` 0: forever.
//!   On an error prints `error: MESSAGE`, then, in a session, `AC_Finalize` and `finalized`;
//!   exits 2.
//! - `ac-net-client hold MIB`: allocates `MIB` on each accelerator, prints `holding`, waits.
//! - `ac-net-client copy MIB REPS`: copies `MIB` to the device and back `REPS` times, checks
//!   the bytes, prints `h2d MBIT d2h MBIT` (megabits per second) for each repetition.
//! - `ac-net-client tcp-recv PORT MIB` / `tcp-send ADDR MIB`: the plain-TCP baseline on the
//!   same link (one stream, no encryption): the sender prints `tcp MBIT` once the receiver has
//!   read everything and closed.
//! - `ac-net-client count TASKS PAUSE_MS`: `TASKS` tasks of a multi-thread runtime share the
//!   first accelerator's handle. Each, round after round, queues 50 asynchronous launches of
//!   `saxpy` that add 1 to each of its counters, copies 4 MiB of round-specific bytes to the
//!   device and back (bulk copies) and checks them byte for byte, then reads its counters: each
//!   must equal the launches it made (every launch ran exactly once). Prints `task T round N ok
//!   mark M launches L lanes B` (B: the bulk lanes its copies use, 0 on QUIC streams), or
//!   `wrong ...` (exit 1), or `error: ...` (exit 2). Beside them a task
//!   pings the backend without pause and prints `ping mark M` the first time a ping begun
//!   with mark `M` completes: the first call completed after the test set that mark.
//! - `ac-net-client kernel N LANE`: with `LANE` 1, first does one `work` round (its copies open a
//!   bulk lane, idle afterwards); then launches the builtin `sgemm` on `N`×`N` matrices, prints
//!   `waiting` and waits for it (a program blocked on a long kernel, sending nothing: `N` 4096
//!   is 137 GFLOP, a minute or more on the CPU device); prints `kernel done` when it ends, or
//!   `error: MESSAGE` and exits 2 if the wait fails.
//! - `ac-net-client memory`: prints `memory FREE TOTAL` for each accelerator.
//! - `ac-net-client get WAIT_MS TIMES PAUSE_MS`: `TIMES` times, `PAUSE_MS` apart, asks for one
//!   more accelerator, waiting up to `WAIT_MS`; prints `granted`, `rejected after MS: WHY` or
//!   `error after MS: WHY`.
//! - `ac-net-client lend NOTICE_S`: asks for one more accelerator lent (elastic, with
//!   `NOTICE_S` of notice), prints `lent`, then for each reclaim prints `reclaim N`, gives the
//!   accelerators back and prints `freed N`; runs until killed.

use std::io::Write;
use std::time::{Duration, Instant};

use ac_frontend::{Accelerator, ConnectOptions, Error, GetRequest, LaunchDims, Session, SessionOptions};

const ELEMENTS: usize = 64 << 10;

fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// One round on `acc`: the values that came back wrong.
async fn round(acc: &Accelerator, n: u32) -> Result<usize, Error> {
    let x = ac_tests::pattern(ELEMENTS, n);
    let mut y = ac_tests::pattern(ELEMENTS, n.wrapping_add(7));
    let dx = acc.alloc_from(&x).await?;
    let dy = acc.alloc_from(&y).await?;
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    let dims = LaunchDims::linear(ELEMENTS as u64, 256);
    saxpy.launch(dims, &[2.0f32.into(), dx.arg(), dy.arg(), (ELEMENTS as u64).into()]).await?;
    let got = dy.to_vec().await?;
    for (yi, xi) in y.iter_mut().zip(&x) {
        *yi += 2.0 * xi;
    }
    Ok(got.iter().zip(&y).filter(|(a, b)| a != b).count())
}

/// The number in the file `AC_NET_MARK` names, read now: 0 without the variable, the file, or a
/// number in it (the test writes the file whole, so a partial read is not expected).
fn mark() -> u64 {
    let Some(path) = std::env::var_os("AC_NET_MARK") else { return 0 };
    std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse().ok()).unwrap_or(0)
}

async fn work(accs: &[Accelerator], rounds: u32, pause: Duration) -> Result<(), Error> {
    let mut n = 0;
    while rounds == 0 || n < rounds {
        let mark = mark();
        for acc in accs {
            let wrong = round(acc, n).await?;
            if wrong > 0 {
                say(format_args!("wrong round {n}: {wrong} values"));
                std::process::exit(1);
            }
        }
        say(format_args!("round {n} ok mark {mark}"));
        n += 1;
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// `kernel`: an `n`×`n` `sgemm`, waited for; after one round if `lane`.
async fn wait_on_kernel(acc: &Accelerator, n: u32, lane: bool) -> Result<(), Error> {
    if lane && round(acc, 0).await? > 0 {
        say("wrong round 0");
        std::process::exit(1);
    }
    let elements = n as usize * n as usize;
    let (a, b, c) =
        (acc.alloc::<f32>(elements).await?, acc.alloc::<f32>(elements).await?, acc.alloc::<f32>(elements).await?);
    let sgemm = acc.builtin().await?.function("sgemm").await?;
    let args = [n.into(), n.into(), n.into(), 1.0f32.into(), a.arg(), b.arg(), 0.0f32.into(), c.arg()];
    sgemm.launch(LaunchDims::linear(elements as u64, 256), &args).await?;
    say("waiting");
    acc.synchronize().await
}

/// Counters per task in `count`.
const COUNTERS: usize = 4096;
/// Launches queued per round in `count`.
const LAUNCHES: u32 = 50;

/// One `count` task's rounds, until an error; `wrong` results end the process.
async fn count_task(acc: Accelerator, task: usize, pause: Duration) -> Result<(), Error> {
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    let counters = acc.alloc_from(&vec![0.0f32; COUNTERS]).await?;
    let ones = acc.alloc_from(&vec![1.0f32; COUNTERS]).await?;
    let bytes = acc.alloc::<u8>(4 << 20).await?;
    let dims = LaunchDims::linear(COUNTERS as u64, 256);
    let args = [1.0f32.into(), ones.arg(), counters.arg(), (COUNTERS as u64).into()];
    let mut launches = 0u32;
    for round in 0u32.. {
        let mark = mark();
        for _ in 0..LAUNCHES {
            saxpy.launch(dims, &args).await?;
        }
        launches += LAUNCHES;
        // What the last round wrote must still be there: a copy's bytes landing late, at any
        // time since, would show.
        if round > 0 {
            expect_bytes(
                &bytes,
                &round_bytes(task, round - 1),
                &format!("task {task} round {round}, before its write"),
            )
            .await?;
        }
        let data = round_bytes(task, round);
        bytes.copy_from_host(&data).await?;
        expect_bytes(&bytes, &data, &format!("task {task} round {round}")).await?;
        let counted = counters.to_vec().await?;
        if let Some(bad) = counted.iter().find(|&&c| c != launches as f32) {
            say(format_args!("wrong task {task} round {round}: a counter holds {bad} after {launches} launches"));
            std::process::exit(1);
        }
        let lanes = acc.bulk_lanes();
        say(format_args!("task {task} round {round} ok mark {mark} launches {launches} lanes {lanes}"));
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// Reads `bytes` back and ends the process, saying `what` was wrong, unless it holds `data`.
async fn expect_bytes(bytes: &ac_frontend::DeviceBuffer<u8>, data: &[u8], what: &str) -> Result<(), Error> {
    let mut back = vec![0u8; data.len()];
    bytes.copy_to_host(&mut back).await?;
    if back != data {
        let wrong = back.iter().zip(data).filter(|(a, b)| a != b).count();
        say(format_args!("wrong {what}: {wrong} bytes differ"));
        std::process::exit(1);
    }
    Ok(())
}

/// The 4 MiB a `count` task writes and reads back in `round`: every byte differs from the same
/// byte of any other round or task's (but for about 1 pair in 256), so that bytes of an earlier copy
/// landing late, or another task's, are seen wherever they land.
fn round_bytes(task: usize, round: u32) -> Vec<u8> {
    let shift = ((task as u32) << 20 | round).wrapping_mul(0x9E37_79B9);
    (0..4u32 << 20).map(|i| (i.wrapping_add(shift).wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

/// Pings without pause; says `ping mark M` when the first ping begun with mark `M` completes.
async fn ping_marks(acc: Accelerator) -> Result<(), Error> {
    let mut said = None;
    loop {
        let mark = mark();
        acc.ping().await?;
        if said != Some(mark) {
            say(format_args!("ping mark {mark}"));
            said = Some(mark);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `count TASKS PAUSE_MS` (see the module's doc): runs until an error.
async fn count(acc: &Accelerator, tasks: usize, pause: Duration) -> Error {
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        set.spawn(count_task(acc.clone(), task, pause));
    }
    set.spawn(ping_marks(acc.clone()));
    loop {
        match set.join_next().await {
            Some(Ok(Err(e))) => return e,
            Some(Ok(Ok(()))) => continue,
            Some(Err(e)) => return Error::Setup(format!("a task panicked: {e}")),
            None => return Error::Setup("every task ended".into()),
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: ac-net-client work ROUNDS PAUSE_MS | hold MIB | copy MIB REPS | tcp-recv PORT MIB | tcp-send ADDR MIB | tls-recv PORT MIB DIR [whole] | tls-send ADDR MIB DIR [whole] | count TASKS PAUSE_MS | kernel N LANE | memory | get WAIT_MS TIMES PAUSE_MS | lend NOTICE_S"
    );
    std::process::exit(64)
}

fn number<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| usage())
}

/// The plain-TCP baseline: one stream of `mib` MiB, timed from connect to the receiver's close.
fn tcp(args: &[String]) -> std::io::Result<()> {
    use std::io::{Read, Write as _};
    let mib: usize = number(args, 2);
    let mut buf = vec![0x5au8; 1 << 20];
    match args[0].as_str() {
        "tcp-recv" => {
            let listener = std::net::TcpListener::bind(("0.0.0.0", number::<u16>(args, 1)))?;
            say("listening");
            let (mut conn, _) = listener.accept()?;
            let mut left = mib << 20;
            while left > 0 {
                let n = conn.read(&mut buf[..left.min(1 << 20)])?;
                if n == 0 {
                    break;
                }
                left -= n;
            }
            say(format_args!("received {}", (mib << 20) - left));
        }
        _ => {
            let start = Instant::now();
            let mut conn = std::net::TcpStream::connect(args[1].as_str())?;
            for _ in 0..mib {
                conn.write_all(&buf)?;
            }
            conn.shutdown(std::net::Shutdown::Write)?;
            // The receiver closes once it has read everything.
            let _ = conn.read(&mut buf)?;
            say(format_args!("tcp {:.0}", (mib << 23) as f64 / start.elapsed().as_secs_f64() / 1e6));
        }
    }
    Ok(())
}

/// The bare encrypted baseline: one TLS 1.3 stream over TCP of `mib` MiB, made as the SDK's
/// bulk lanes are (same crates, provider, cipher order, ALPN, socket set-up) with nothing around
/// it; timed as [`tcp`]. `tls-recv PORT MIB DIR` makes a certificate in DIR; `tls-send ADDR MIB
/// DIR` trusts its CA. With `whole` after DIR, each side streams from (into) a buffer of all
/// `mib` MiB, touched before the clock starts, as a copy reads the program's memory and writes
/// the device's; without, from (into) one cache-resident MiB.
async fn tls(args: &[String]) -> Result<(), ac_proto::ProtoError> {
    use ac_proto::{lane, tls};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mib, dir): (usize, &std::path::Path) = (number(args, 2), args.get(3).unwrap_or_else(|| usage()).as_ref());
    let whole = args.get(4).is_some_and(|a| a == "whole");
    let mut buf = vec![0x5au8; if whole { mib << 20 } else { 1 << 20 }];
    // Where the n-th MiB goes to or comes from.
    let span = move |n: usize| if whole { n << 20..(n + 1) << 20 } else { 0..1 << 20 };
    if args[0] == "tls-recv" {
        let files = tls::ensure_self_signed(dir, &tls::default_names(), &[])?;
        let acceptor = lane::server_config(tls::load_identity(&files.cert, &files.key)?)?;
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", number::<u16>(args, 1))).await?;
        say("listening");
        let (socket, _) = listener.accept().await?;
        lane::tune(&socket)?;
        let mut conn = lane::accept(socket, &acceptor).await?;
        // Read as a lane reads a copy's bytes: knowing how many are coming (the socket's
        // low-water mark), full records opened where their plaintext goes.
        let received = mib << 20;
        if whole {
            conn.read_exact_plain(&mut buf).await?;
        } else {
            for _ in 0..mib {
                conn.read_exact_plain(&mut buf).await?;
            }
        }
        say(format_args!("received {received}"));
        return Ok(());
    }
    let connector = lane::client_config(tls::load_roots(&dir.join("ca.pem"))?)?;
    let addr: std::net::SocketAddr = args[1].parse().unwrap_or_else(|_| usage());
    // The certificate names the receiver's loopback names only; the check costs the same.
    let name = ac_proto::lane::tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let start = Instant::now();
    let socket = tokio::net::TcpStream::connect(addr).await?;
    lane::tune(&socket)?;
    let mut conn = lane::connect(socket, &connector, name).await?;
    let before = lane::TcpInfo::of(conn.tcp())?;
    for n in 0..mib {
        conn.write_all(&buf[span(n)]).await?;
    }
    conn.shutdown().await?;
    // The receiver closes once it has read everything.
    let _ = conn.read(&mut buf[..1]).await;
    say(format_args!("tls {:.0}", (mib << 23) as f64 / start.elapsed().as_secs_f64() / 1e6));
    // As the backend logs a lane's copy: what held the sender back.
    say(format_args!("sender {:?}", lane::TcpInfo::of(conn.tcp())?.since(&before)));
    Ok(())
}

async fn run(args: &[String]) -> Result<(), Error> {
    if args.first().is_some_and(|a| a.starts_with("tcp-")) {
        return tcp(args).map_err(|e| Error::Setup(format!("tcp: {e}")));
    }
    if args.first().is_some_and(|a| a.starts_with("tls-")) {
        return tls(args).await.map_err(|e| Error::Setup(format!("tls: {e}")));
    }
    let session = if std::env::var_os("ARM_ADDR").is_some() {
        Some(Session::init(SessionOptions::from_env()?).await?)
    } else {
        None
    };
    let accs: Vec<Accelerator> = match &session {
        Some(s) => s.accelerators().iter().map(|h| h.acc.clone()).collect(),
        None => vec![Accelerator::connect(&ConnectOptions::from_env()?).await?],
    };
    say("connected");
    match args.first().map(String::as_str) {
        Some("work") => {
            if let Err(e) = work(&accs, number(args, 1), Duration::from_millis(number(args, 2))).await {
                say(format_args!("error: {e}"));
                if let Some(session) = session {
                    drop(accs);
                    session.finalize().await?;
                    say("finalized");
                }
                std::process::exit(2);
            }
            say("done");
        }
        Some("count") => {
            let e = count(&accs[0], number(args, 1), Duration::from_millis(number(args, 2))).await;
            say(format_args!("error: {e}"));
            std::process::exit(2);
        }
        Some("hold") => {
            let mib: usize = number(args, 1);
            let mut held = Vec::new();
            for acc in &accs {
                held.push(acc.alloc::<u8>(mib << 20).await?);
            }
            say("holding");
            std::future::pending::<()>().await;
        }
        Some("copy") => {
            let (mib, reps): (usize, u32) = (number(args, 1), number(args, 2));
            let data: Vec<u8> = (0..mib << 20).map(|i| (i % 251) as u8).collect();
            let buf = accs[0].alloc::<u8>(data.len()).await?;
            // The CPU device maps its memory on first touch, a GPU does not: one untimed copy
            // leaves those page faults out of the figures, as `ac-bench`'s loopback rows do.
            buf.copy_from_host(&data).await?;
            // Touched, as a buffer a program reuses: first-touch page faults are not the copy's.
            let mut back = vec![1u8; data.len()];
            for _ in 0..reps {
                let start = Instant::now();
                buf.copy_from_host(&data).await?;
                let h2d = start.elapsed().as_secs_f64();
                let start = Instant::now();
                buf.copy_to_host(&mut back).await?;
                let d2h = start.elapsed().as_secs_f64();
                if back != data {
                    say("wrong bytes");
                    std::process::exit(1);
                }
                let mbit = |s: f64| (data.len() * 8) as f64 / s / 1e6;
                say(format_args!("h2d {:.0} d2h {:.0}", mbit(h2d), mbit(d2h)));
            }
            // Freed before the program ends, so that whoever waits for its end (the net bench,
            // before it times the next contender) also waits for the backend to unmap it.
            buf.free().await?;
        }
        Some("kernel") => {
            if let Err(e) = wait_on_kernel(&accs[0], number(args, 1), number::<u8>(args, 2) == 1).await {
                say(format_args!("error: {e}"));
                std::process::exit(2);
            }
            say("kernel done");
        }
        Some("memory") => {
            for acc in &accs {
                let info = acc.device_info().await?;
                say(format_args!("memory {} {}", info.memory_free, info.memory_total));
            }
        }
        Some("get") => {
            let session = session.as_ref().expect("get needs ARM_ADDR");
            let wait = Duration::from_millis(number(args, 1));
            for i in 0..number::<u32>(args, 2) {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(number(args, 3))).await;
                }
                let start = Instant::now();
                let answer = session.get_or_why(GetRequest::new(1).wait_up_to(wait)).await;
                let ms = start.elapsed().as_millis();
                match answer {
                    Ok(Ok(_)) => say("granted"),
                    Ok(Err(why)) => say(format_args!("rejected after {ms}: {why}")),
                    Err(e) => say(format_args!("error after {ms}: {e}")),
                }
            }
            // The manager may be gone: leave without AC_Finalize.
            std::process::exit(0);
        }
        Some("lend") => {
            let session = session.as_ref().expect("lend needs ARM_ADDR");
            let mut reclaims = session.preemptions();
            let request = GetRequest::new(1).elastic(Duration::from_secs(number(args, 1)));
            let mut set = session.get_with(request).await?.ok_or_else(|| Error::Setup("nothing lent".into()))?;
            say("lent");
            while let Some(reclaim) = reclaims.recv().await {
                let n = reclaim.accelerators.len();
                say(format_args!("reclaim {n}"));
                let ids: Vec<&str> = reclaim.accelerators.iter().map(String::as_str).collect();
                session.free_some(&mut set, &ids).await?;
                say(format_args!("freed {n}"));
            }
            std::process::exit(0);
        }
        _ => usage(),
    }
    match session {
        Some(session) => {
            drop(accs);
            session.finalize().await?;
        }
        // Closed before exiting, so that the backend frees the session's memory now rather than
        // after its idle timeout.
        None => {
            for acc in accs {
                acc.close().await;
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args).await {
        say(format_args!("error: {e}"));
        std::process::exit(2);
    }
}
