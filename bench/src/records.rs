//! The lanes' record layer on one core, without a network: what sealing a copy's bytes costs
//! when the plaintext is first copied into its record (all a cipher that seals only in place,
//! such as ring's, allows) against sealing it from where it lies (`Sealer::seal_from`, AWS-LC's
//! `seal_scatter`), and what opening costs. The source is larger than any cache, as a copy's
//! is; the records go to one 512 KiB buffer, as a lane's write buffer.

use std::time::{Duration, Instant};

use ac_proto::lane::record::{Opener, Sealer, FULL_RECORD, HEADER, MAX_PLAIN};
use ac_proto::lane::{self, tokio_rustls};
use ac_proto::tls;

/// The bytes each measurement seals.
fn source_len(quick: bool) -> usize {
    if quick {
        32 << 20
    } else {
        256 << 20
    }
}

/// The two ends of one direction of a real lane handshake over loopback (so the keys are the
/// cipher a lane negotiates): the client's sealer, the server's opener and the cipher suite.
async fn lane_keys() -> anyhow::Result<(Sealer, Opener, String)> {
    let dir = tempfile::tempdir()?;
    let files = tls::ensure_self_signed(dir.path(), &tls::default_names(), &[])?;
    let acceptor = lane::server_config(tls::load_identity(&files.cert, &files.key)?)?;
    let connector = lane::client_config(tls::load_roots(&files.ca_cert)?)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        anyhow::Ok(acceptor.accept(tcp).await?.into_inner().1.dangerous_extract_secrets()?)
    });
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost")?;
    let client = connector.connect(name, tcp).await?.into_inner().1;
    let suite = client.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default();
    let (client, server) = (client.dangerous_extract_secrets()?, server.await??);
    Ok((Sealer::new(client.tx)?, Opener::new(server.rx)?, suite))
}

/// Seals `source` record by record into a write buffer's worth of records, round and round.
fn seal(sealer: &mut Sealer, source: &[u8], copy_first: bool) -> anyhow::Result<Duration> {
    let mut out = vec![0u8; 32 * FULL_RECORD];
    let start = Instant::now();
    for (i, plain) in source.chunks(MAX_PLAIN).enumerate() {
        let record = &mut out[(i % 32) * FULL_RECORD..];
        if copy_first {
            record[HEADER..HEADER + plain.len()].copy_from_slice(plain);
            sealer.seal_in_place(plain.len(), record)?;
        } else {
            sealer.seal_from(plain, record)?;
        }
    }
    Ok(start.elapsed())
}

/// Opens, in place, `len` bytes' worth of full records that `sealer` seals beforehand.
fn open(sealer: &mut Sealer, opener: &mut Opener, len: usize) -> anyhow::Result<Duration> {
    let mut wire = vec![0u8; len / MAX_PLAIN * FULL_RECORD];
    let plain = vec![5u8; MAX_PLAIN];
    for record in wire.chunks_mut(FULL_RECORD) {
        sealer.seal_from(&plain, record)?;
    }
    let start = Instant::now();
    for record in wire.chunks_mut(FULL_RECORD) {
        opener.open(record)?;
    }
    Ok(start.elapsed())
}

/// Prints the table: medians of 5 alternating rounds.
pub async fn one_core(quick: bool) -> anyhow::Result<()> {
    // One lane's keys to seal with, another's to seal and open in step.
    let (mut sealer, _, suite) = lane_keys().await?;
    let (mut peer, mut opener, _) = lane_keys().await?;
    let len = source_len(quick);
    let source: Vec<u8> = (0..len).map(|i| (i * 31 + i / 4096) as u8).collect();
    let (mut copied, mut apart, mut opened) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        opened.push(open(&mut peer, &mut opener, len)?);
        copied.push(seal(&mut sealer, &source, true)?);
        apart.push(seal(&mut sealer, &source, false)?);
    }
    let rate = |mut times: Vec<Duration>| {
        times.sort();
        len as f64 / times[times.len() / 2].as_secs_f64() / 1e9
    };
    let (copied, apart, opened) = (rate(copied), rate(apart), rate(opened));
    println!("## The lanes' record layer on one core ({} MiB, 16 KiB records, {suite})\n", len >> 20);
    println!("| what | GB/s | / copy, then seal |");
    println!("|---|---|---|");
    println!("| copy each record's plaintext in, then seal in place (a cipher that seals only in place) | {copied:.2} | 1.00 |");
    println!(
        "| seal from where the plaintext lies (`Sealer::seal_from`, the lanes' way) | {apart:.2} | {:.2} |",
        apart / copied
    );
    println!("| open in place | {opened:.2} | |");
    println!("\n(medians of 5 alternating rounds; the source is larger than the caches, as a copy's is)\n");
    Ok(())
}
