//! A lane's TLS 1.3 records as its record layer reads them (`ac_proto::lane::record`): the input
//! cut into records by their headers and opened (refused, nearly always: it was not sealed with
//! the lane's key); then the input sealed in pieces of input-chosen sizes, as application data
//! (sealed from the piece, and sealed in place) and as raw inner plaintexts (any content type,
//! any padding), with AES-256-GCM or ChaCha20-Poly1305 as the first byte says, and opened again. Asserts: no
//! panic; sealed data opens to itself, in order, each record once; a raw inner plaintext opens
//! to data only when its content type says application data.
#![no_main]

use ac_proto::lane::record::{Opened, Opener, Sealer, HEADER, MAX_PLAIN, OVERHEAD};
use ac_proto::lane::tokio_rustls::rustls::crypto::cipher::{AeadKey, Iv};
use ac_proto::lane::tokio_rustls::rustls::ConnectionTrafficSecrets;
use libfuzzer_sys::fuzz_target;

fn secrets(chacha: bool) -> (u64, ConnectionTrafficSecrets) {
    let (key, iv) = (AeadKey::from([7; 32]), Iv::from([9; 12]));
    match chacha {
        true => (0, ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv }),
        false => (0, ConnectionTrafficSecrets::Aes256Gcm { key, iv }),
    }
}

/// Appends `piece` to `wire` as one record sealed where it lies in `wire`.
fn seal_in_place(sealer: &mut Sealer, piece: &[u8], wire: &mut Vec<u8>) {
    let at = wire.len();
    wire.resize(at + HEADER + piece.len() + OVERHEAD, 0);
    wire[at + HEADER..at + HEADER + piece.len()].copy_from_slice(piece);
    sealer.seal_in_place(piece.len(), &mut wire[at..]).unwrap();
}

/// Opens every whole record at the front of `wire`; what each held.
fn open_all(opener: &mut Opener, wire: &mut [u8]) -> Vec<Result<Opened, ()>> {
    let mut opened = Vec::new();
    let mut at = 0;
    while let Ok(Some(len)) = Opener::record_len(&wire[at..]) {
        opened.push(opener.open(&mut wire[at..at + len]).map(|o| match o {
            Opened::Data(range) => Opened::Data(at + range.start..at + range.end),
            Opened::Closed => Opened::Closed,
        }).map_err(drop));
        at += len;
    }
    opened
}

fuzz_target!(|input: &[u8]| {
    let chacha = input.first().is_some_and(|b| b & 0x80 != 0);
    let secrets = || secrets(chacha);
    // Hostile bytes straight off the socket.
    let mut raw = input.to_vec();
    let mut opener = Opener::new(secrets()).unwrap();
    let _ = open_all(&mut opener, &mut raw);

    // The input sealed in pieces: the first byte sets the pieces' size.
    let Some((&size, data)) = input.split_first() else { return };
    let size = (usize::from(size) * 67).clamp(1, MAX_PLAIN);
    let (mut sealer, mut opener) = (Sealer::new(secrets()).unwrap(), Opener::new(secrets()).unwrap());
    let mut wire = Vec::new();
    for piece in data.chunks(size) {
        sealer.seal(piece, &mut wire).unwrap();
        seal_in_place(&mut sealer, piece, &mut wire);
        sealer.seal_inner(piece, &mut wire).unwrap();
    }
    let mut opened = open_all(&mut opener, &mut wire).into_iter();
    for piece in data.chunks(size) {
        for how in ["from the piece", "in place"] {
            match opened.next() {
                Some(Ok(Opened::Data(range))) => assert_eq!(&wire[range], piece, "sealed {how}"),
                other => panic!("data sealed {how} opened as {other:?}"),
            }
        }
        // The piece as a raw inner plaintext: its last non-zero byte is its content type.
        let kind = piece.iter().rposition(|&b| b != 0).map(|end| (piece[end], end));
        match (opened.next(), kind) {
            (Some(Ok(Opened::Data(range))), Some((23, end))) => assert_eq!(&wire[range], &piece[..end]),
            (Some(Ok(Opened::Closed)), Some((21, 2))) => assert_eq!(&piece[..2], [1, 0]),
            (Some(Err(())), Some((kind, _))) if kind != 23 => {}
            (Some(Err(())), None) => {}
            (other, kind) => panic!("inner plaintext {kind:?} opened as {other:?}"),
        }
        // An error stops nothing here: the opener's sequence number moved on either way.
    }
    assert!(opened.next().is_none());
    // Opening the first record again fails: its sequence number is spent.
    if wire.len() > HEADER {
        let mut replay = Opener::new(secrets()).unwrap();
        let mut copy = wire.clone();
        let _ = open_all(&mut replay, &mut copy);
        let len = Opener::record_len(&wire).unwrap().unwrap();
        assert!(replay.open(&mut wire[..len]).is_err());
    }
});
