use super::*;
use crate::lane::record::RECORD_LIMIT;
use crate::tls;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A client and a server lane over loopback TCP, with a fresh self-signed certificate.
pub(super) async fn pair(name: &str) -> (LaneTls, LaneTls) {
    let dir = std::env::temp_dir().join(format!("ac-lane-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = tls::ensure_self_signed(&dir, &tls::default_names(), &[]).unwrap();
    let acceptor = super::super::server_config(tls::load_identity(&files.cert, &files.key).unwrap()).unwrap();
    let connector = super::super::client_config(tls::load_roots(&files.ca_cert).unwrap()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        accept(tcp, &acceptor).await.unwrap()
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let client = connect(tcp, &connector, ServerName::try_from("localhost").unwrap()).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (client, server.await.unwrap())
}

#[tokio::test]
async fn bytes_cross_both_ways_in_order_and_close_notify_ends_the_stream() {
    let (mut client, mut server) = pair("both").await;
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        client.write_all(&sent).await.unwrap();
        client.flush().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        answer
    });
    let mut got = vec![0; data.len()];
    server.read_exact(&mut got).await.unwrap();
    assert!(got == data, "host to device bytes differ");
    // Handed over a record's worth at a time, as a device-to-host copy is: every other
    // record in one slice (sealed from it), the others in three (gathered, then sealed).
    let (mut at, mut records) = (0, 0);
    let filled = server.write_from(data.len(), |n, take| {
        let piece = &data[at..at + n];
        if records % 2 == 0 {
            take(piece);
        } else {
            let (a, rest) = piece.split_at(n / 3);
            let (b, c) = rest.split_at(rest.len() / 2);
            [a, b, c].into_iter().for_each(&mut *take);
        }
        (at, records) = (at + n, records + 1);
        Ok::<_, ()>(())
    });
    filled.await.unwrap().unwrap();
    server.shutdown().await.unwrap();
    assert!(writer.await.unwrap() == data, "device to host bytes differ");
}

#[tokio::test]
async fn read_with_hands_over_exactly_what_was_asked_and_the_rest_stays() {
    let (mut client, mut server) = pair("with").await;
    client.write_all(&[7; 40_000]).await.unwrap();
    client.write_all(&[8; 10]).await.unwrap();
    client.flush().await.unwrap();
    let mut pieces = Vec::new();
    let sink = |p: &[u8]| {
        pieces.push(p.to_vec());
        Ok::<_, ()>(())
    };
    server.read_with(40_000, sink).await.unwrap().unwrap();
    assert!(pieces.iter().all(|p| p.len() <= super::MAX_PLAIN && p.iter().all(|&b| b == 7)));
    assert_eq!(pieces.iter().map(Vec::len).sum::<usize>(), 40_000);
    let mut rest = [0; 10];
    server.read_exact(&mut rest).await.unwrap();
    assert_eq!(rest, [8; 10]);
    // The stream ends early: an error, not a short read.
    drop(client);
    assert!(matches!(server.read_with(1, |_| Ok::<_, ()>(())).await, Err(ProtoError::UnexpectedEnd)));
}

#[tokio::test]
async fn a_reader_that_knows_what_is_coming_gets_all_of_it_while_the_writer_waits() {
    let (mut client, mut server) = pair("low-water").await;
    // Sizes around the low-water mark, each written and flushed, then the writer waits for
    // the reader's answer: a mark above the bytes still to come would leave the reader
    // waiting for ever.
    let sizes = [LOW_WATER - 1, LOW_WATER, LOW_WATER + 1, 3 * LOW_WATER + 12_345, 1, 70_000];
    let writer = tokio::spawn(async move {
        for (i, &size) in sizes.iter().enumerate() {
            client.write_all(&vec![i as u8; size]).await.unwrap();
            client.flush().await.unwrap();
            let mut answer = [0; 1];
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(answer, [i as u8]);
        }
    });
    for (i, &size) in sizes.iter().enumerate() {
        let mut got = vec![0xffu8; size];
        let read = server.read_exact_plain(&mut got);
        tokio::time::timeout(Duration::from_secs(20), read).await.expect("the read hung").unwrap();
        assert!(got.iter().all(|&b| b == i as u8), "size {size}");
        assert_eq!(server.low_water, 1, "an idle lane reports any byte");
        server.write_all(&[i as u8]).await.unwrap();
        server.flush().await.unwrap();
    }
    writer.await.unwrap();
}

#[tokio::test]
async fn a_reader_in_ping_pong_mode_acknowledges_at_once_while_a_copy_comes_in() {
    let (mut client, mut server) = pair("quick-ack").await;
    // As a lane's end is after a request and a reply: the kernel delays its acks.
    socket2::SockRef::from(&server.tcp).set_tcp_quickack(false).unwrap();
    // The same socket, to look at while the read holds `server`.
    let watched = std::os::fd::AsFd::as_fd(&server.tcp).try_clone_to_owned().unwrap();
    let quick_ack = || socket2::SockRef::from(&watched).tcp_quickack().unwrap();
    assert!(!quick_ack(), "the kernel took the socket out of ping-pong mode");
    let writer = tokio::spawn(async move {
        client.write_all(&vec![5; 3 * LOW_WATER]).await.unwrap();
        client.flush().await.unwrap();
        client
    });
    // On this test's one-thread runtime the writer runs only once the reader waits, so the
    // reader finds the socket empty first.
    let mut quick_at_first_piece = None;
    let sink = |_: &[u8]| {
        quick_at_first_piece.get_or_insert_with(quick_ack);
        Ok::<_, ()>(())
    };
    server.read_with(3 * LOW_WATER as u64, sink).await.unwrap().unwrap();
    assert_eq!(quick_at_first_piece, Some(true), "still delaying acks while the copy came in");
    drop(writer.await.unwrap());
}

/// `len` bytes of a pattern that differs from record to record and from byte to byte.
pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i / MAX_PLAIN) as u8 ^ seed).collect()
}

/// A source for [`LaneTls::seal_next`] that hands `bytes` in one slice.
pub(super) fn handing(bytes: &[u8]) -> impl FnOnce(usize, &mut Take<'_>) -> Result<(), ()> + '_ {
    move |_, take| {
        take(bytes);
        Ok(())
    }
}

/// `count` full records sealed by `lane` (record `i` filled with `i`), as they go on the
/// wire; not sent.
pub(super) fn full_records(lane: &mut LaneTls, count: u8) -> Vec<u8> {
    let mut wire = Vec::new();
    for i in 0..count {
        lane.seal_next(MAX_PLAIN, handing(&[i; MAX_PLAIN])).unwrap().unwrap();
        wire.extend_from_slice(&lane.out[..lane.filled]);
        lane.filled = 0;
    }
    wire
}

#[tokio::test]
async fn a_byte_altered_on_the_wire_fails_the_read() {
    let (mut client, mut server) = pair("altered").await;
    // What the client would send, sealed with its keys, one byte flipped on the way.
    // A sound record follows it.
    client.seal_next(5, handing(b"hello")).unwrap().unwrap();
    client.seal_next(5, handing(b"world")).unwrap().unwrap();
    let mut wire = client.out[..client.filled].to_vec();
    wire[super::HEADER + 2] ^= 0x40;
    client.tcp.write_all(&wire).await.unwrap();
    let error = server.read_exact(&mut [0; 5]).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    // The stream ends at the record that failed: the sound one is not read.
    let mut sink = |_: &[u8]| Ok::<_, ()>(());
    let after = server.read_with(5, &mut sink).await.unwrap_err();
    assert!(matches!(&after, ProtoError::Malformed(m) if m.contains("reads no more")), "{after}");
}

#[tokio::test]
async fn a_source_that_fails_or_hands_too_little_sends_only_whole_records() {
    let (mut client, mut server) = pair("source").await;
    // Fails before its third record: the two before it arrive, nothing of the third.
    let mut records = 0;
    let written = client.write_from(3 * MAX_PLAIN, |n, take| {
        records += 1;
        if records == 3 {
            return Err("device gone");
        }
        take(&vec![records as u8; n]);
        Ok(())
    });
    assert_eq!(written.await.unwrap(), Err("device gone"));
    // Fails after handing its whole record: the record was sealed, so it is kept and sent.
    let written = client.write_from(10, |n, take| {
        take(&vec![9; n]);
        Err("after")
    });
    assert_eq!(written.await.unwrap(), Err("after"));
    client.flush().await.unwrap();
    let mut got = vec![0; 2 * MAX_PLAIN + 10];
    server.read_exact(&mut got).await.unwrap();
    assert!(got[..MAX_PLAIN].iter().all(|&b| b == 1) && got[MAX_PLAIN..2 * MAX_PLAIN].iter().all(|&b| b == 2));
    assert_eq!(got[2 * MAX_PLAIN..], [9; 10]);

    // A source that hands less than a record, or more (in two slices, or in a whole
    // record's slice and one byte after it), is an error of the lane, not a short, overlong
    // or shifted record.
    for (first, second) in [(MAX_PLAIN / 2, MAX_PLAIN / 2 - 1), (MAX_PLAIN / 2, MAX_PLAIN / 2 + 1), (MAX_PLAIN, 1)] {
        let wrong = client.write_from(MAX_PLAIN, |_, take| {
            take(&vec![0; first]);
            take(&vec![0; second]);
            Ok::<_, ()>(())
        });
        assert!(matches!(wrong.await, Err(ProtoError::Malformed(_))), "{first} + {second} bytes handed");
    }
}

#[tokio::test]
async fn a_copy_that_would_cross_the_record_limit_does_not_fit() {
    let (mut client, _server) = pair("limit").await;
    assert!(client.fits(1 << 30));
    client.sealer = Sealer::new((RECORD_LIMIT - 1000, secrets())).unwrap();
    assert!(client.fits(1 << 20), "64 records and a few");
    assert!(!client.fits(16 << 20), "1,024 records");
}

fn secrets() -> rustls::ConnectionTrafficSecrets {
    use rustls::crypto::cipher::{AeadKey, Iv};
    rustls::ConnectionTrafficSecrets::Aes256Gcm { key: AeadKey::from([1; 32]), iv: Iv::from([2; 12]) }
}
