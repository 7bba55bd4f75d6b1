//! A lane's TLS 1.3 record layer (RFC 8446 §5), over the traffic secrets rustls negotiated: no
//! I/O here, only sealing records into a buffer and opening them in place.
//!
//! Why not rustls's own: its buffered connection copies every received record twice more (into a
//! fresh `Vec`, then into the caller's buffer) and reads the socket 4 KiB at a time, and it
//! allocates a `Vec` per record sent. On a 2-core host those copies and allocations were a tenth
//! of a lane's CPU (`BENCHMARKS.md`, "Bulk copies between two hosts"). rustls hands its secrets
//! out for exactly this (`dangerous_extract_secrets`, the kernel TLS path); the records on the
//! wire are the same TLS 1.3 records, and this is also where kernel TLS would take over.
//!
//! What is not supported, and why that is safe: post-handshake messages (key updates, session
//! tickets). The lane's server sends no tickets, neither side sends key updates, and one that
//! arrives is an error that closes the lane. Instead of a key update, a direction stops at
//! [`RECORD_LIMIT`] records, below AES-GCM's confidentiality limit (RFC 8446 §5.5); the client
//! dials a fresh lane (fresh keys) before a copy that would cross it.

use std::ops::Range;

use rustls::ConnectionTrafficSecrets;

use super::aead::{Cipher, Key, NONCE, TAG};
use crate::ProtoError;

/// A record's header: outer content type, legacy version, length.
pub const HEADER: usize = 5;
/// The most plaintext one record carries (2^14).
pub const MAX_PLAIN: usize = 1 << 14;
/// The inner content type byte and the AEAD tag each record adds after its plaintext.
pub const OVERHEAD: usize = 1 + TAG;
/// The longest record this layer accepts: RFC 8446 allows 2^14 + 256 bytes of ciphertext.
pub const MAX_RECORD: usize = HEADER + MAX_PLAIN + 256;
/// The length of a close_notify record.
pub const CLOSE_RECORD: usize = HEADER + 2 + OVERHEAD;
/// The length of a full record: [`MAX_PLAIN`] bytes of application data, no padding. A copy's
/// bytes travel in full records but for its last (see [`Opener::open_full`]).
pub const FULL_RECORD: usize = HEADER + MAX_PLAIN + OVERHEAD;
/// The header of a full record.
pub const FULL_HEADER: [u8; HEADER] = [
    APPLICATION_DATA,
    LEGACY_VERSION[0],
    LEGACY_VERSION[1],
    ((FULL_RECORD - HEADER) >> 8) as u8,
    (FULL_RECORD - HEADER) as u8,
];
/// Records one direction of a lane may carry: AES-GCM's limit is 2^24.5 full-size records
/// (RFC 8446 §5.5); one bound below it serves all three AEADs.
pub const RECORD_LIMIT: u64 = 1 << 24;

const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const LEGACY_VERSION: [u8; 2] = [3, 3];

/// One direction's key, IV and record sequence number.
struct Keys {
    key: Key,
    iv: [u8; NONCE],
    seq: u64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl Keys {
    fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Result<Self, ProtoError> {
        let (cipher, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (Cipher::Chacha20Poly1305, key, iv),
            _ => return Err(ProtoError::Malformed("a lane negotiated an AEAD it cannot use".into())),
        };
        let key = Key::new(cipher, key.as_ref())
            .map_err(|_| ProtoError::Malformed("a lane's traffic key has the wrong length".into()))?;
        let iv =
            iv.as_ref().try_into().map_err(|_| ProtoError::Malformed("a lane's IV has the wrong length".into()))?;
        Ok(Self { key, iv, seq })
    }

    /// Records this direction may still carry.
    fn records_left(&self) -> u64 {
        RECORD_LIMIT.saturating_sub(self.seq)
    }

    /// The next record's nonce (the IV XOR the sequence number, RFC 8446 §5.3), taking the
    /// sequence number; fails once the direction has carried [`RECORD_LIMIT`] records.
    fn next_nonce(&mut self) -> Result<[u8; NONCE], ProtoError> {
        if self.seq >= RECORD_LIMIT {
            return Err(ProtoError::Malformed("the lane's keys carried their limit of records".into()));
        }
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE - 8..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq += 1;
        Ok(nonce)
    }
}

/// The sending direction: seals plaintext into records.
#[derive(Debug)]
pub struct Sealer(Keys);

impl Sealer {
    /// The sending direction of `secrets.tx`.
    pub fn new(tx: (u64, ConnectionTrafficSecrets)) -> Result<Self, ProtoError> {
        Keys::new(tx).map(Self)
    }

    /// Records this direction may still seal.
    pub fn records_left(&self) -> u64 {
        self.0.records_left()
    }

    /// Appends `plain` (at most [`MAX_PLAIN`] bytes) to `out` as one application-data record.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), ProtoError> {
        self.append(APPLICATION_DATA, plain, out)
    }

    /// Appends one record whose inner plaintext (content, content type, padding) is `inner`
    /// as given: for the fuzz target, which must reach every branch of [`Opener::open`].
    #[doc(hidden)]
    pub fn seal_inner(&mut self, inner: &[u8], out: &mut Vec<u8>) -> Result<(), ProtoError> {
        let Some((&content, plain)) = inner.split_last() else {
            return Err(ProtoError::Malformed("an empty inner plaintext".into()));
        };
        self.append(content, plain, out)
    }

    /// Appends `plain` with inner content type `content` to `out` as one record; nothing on
    /// failure.
    fn append(&mut self, content: u8, plain: &[u8], out: &mut Vec<u8>) -> Result<(), ProtoError> {
        let at = out.len();
        out.resize(at + HEADER + plain.len() + OVERHEAD, 0);
        match self.seal_typed(content, Plain::Apart(plain), &mut out[at..]) {
            Ok(_) => Ok(()),
            Err(e) => {
                out.truncate(at);
                Err(e)
            }
        }
    }

    /// Seals `plain` (at most [`MAX_PLAIN`] bytes) from where it lies into one
    /// application-data record at the start of `record`, which has room for [`HEADER`] +
    /// `plain.len()` + [`OVERHEAD`] bytes: one pass over the plaintext, no copy before it
    /// (see [`super::aead`]). The record's length.
    pub fn seal_from(&mut self, plain: &[u8], record: &mut [u8]) -> Result<usize, ProtoError> {
        self.seal_typed(APPLICATION_DATA, Plain::Apart(plain), record)
    }

    /// Seals a close_notify alert (the sender's end of the stream) at the start of `record`,
    /// which has room for [`CLOSE_RECORD`] bytes. The record's length.
    pub fn seal_close(&mut self, record: &mut [u8]) -> Result<usize, ProtoError> {
        self.seal_typed(ALERT, Plain::Apart(&[1, 0]), record)
    }

    /// Seals the `len` bytes of plaintext at `record[HEADER..]` (at most [`MAX_PLAIN`]) into
    /// one application-data record where they lie: the header goes before them, the content
    /// type and the tag after. `record` has room for [`HEADER`] + `len` + [`OVERHEAD`] bytes.
    /// The record's length.
    pub fn seal_in_place(&mut self, len: usize, record: &mut [u8]) -> Result<usize, ProtoError> {
        self.seal_typed(APPLICATION_DATA, Plain::InPlace(len), record)
    }

    /// Seals one record of inner content type `content` at the start of `record`; its length.
    fn seal_typed(&mut self, content: u8, plain: Plain<'_>, record: &mut [u8]) -> Result<usize, ProtoError> {
        let len = match plain {
            Plain::Apart(plain) => plain.len(),
            Plain::InPlace(len) => len,
        };
        assert!(len <= MAX_PLAIN, "a record carries at most 2^14 bytes");
        let nonce = self.0.next_nonce()?;
        let body = len + OVERHEAD;
        let header = [APPLICATION_DATA, LEGACY_VERSION[0], LEGACY_VERSION[1], (body >> 8) as u8, body as u8];
        record[..HEADER].copy_from_slice(&header);
        let (sealed, trailer) = record[HEADER..HEADER + body].split_at_mut(len);
        let trailer: &mut [u8; OVERHEAD] = trailer.try_into().expect("the content type and the tag");
        let key = &self.0.key;
        match plain {
            Plain::Apart(plain) => key.seal_into(&nonce, &header, plain, sealed, content, trailer),
            Plain::InPlace(_) => key.seal_in_place(&nonce, &header, sealed, content, trailer),
        }
        .map_err(|_| ProtoError::Malformed("sealing a lane record failed".into()))?;
        Ok(HEADER + body)
    }
}

/// Where a record's plaintext lies.
#[derive(Debug, Clone, Copy)]
enum Plain<'a> {
    /// Elsewhere: sealed from there into the record.
    Apart(&'a [u8]),
    /// Already in the record, this many bytes after its header.
    InPlace(usize),
}

/// What a record held.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Application data: where its plaintext lies in the buffer given to [`Opener::open`]
    /// (possibly empty).
    Data(Range<usize>),
    /// The peer's close_notify: nothing follows.
    Closed,
}

/// The receiving direction: opens records in place.
#[derive(Debug)]
pub struct Opener(Keys);

/// The AEAD tag of a record, apart from its ciphertext.
pub type Tag = [u8; TAG];

impl Opener {
    /// The receiving direction of `secrets.rx`.
    pub fn new(rx: (u64, ConnectionTrafficSecrets)) -> Result<Self, ProtoError> {
        Keys::new(rx).map(Self)
    }

    /// Records this direction may still open.
    pub fn records_left(&self) -> u64 {
        self.0.records_left()
    }

    /// The length of the record at the start of `buf`, header included, once all of it is
    /// there (`None` before); fails on a header no TLS 1.3 peer sends.
    pub fn record_len(buf: &[u8]) -> Result<Option<usize>, ProtoError> {
        let Some(header) = buf.first_chunk() else { return Ok(None) };
        let len = Self::declared_len(header)?;
        Ok((buf.len() >= len).then_some(len))
    }

    /// The length of the record that `header` starts, header included; fails on a header no
    /// TLS 1.3 peer sends.
    pub fn declared_len(header: &[u8; HEADER]) -> Result<usize, ProtoError> {
        if header[0] != APPLICATION_DATA || header[1..3] != LEGACY_VERSION {
            return Err(ProtoError::Malformed(format!("not a TLS 1.3 record on a lane: {:02x?}", header)));
        }
        let len = HEADER + usize::from(u16::from_be_bytes([header[3], header[4]]));
        if !(HEADER + OVERHEAD..=MAX_RECORD).contains(&len) {
            return Err(ProtoError::Malformed(format!("a lane record of {len} bytes")));
        }
        Ok(len)
    }

    /// Authenticates and decrypts the record that fills `record` (as long as
    /// [`Opener::record_len`] said) in place.
    pub fn open(&mut self, record: &mut [u8]) -> Result<Opened, ProtoError> {
        let nonce = self.0.next_nonce()?;
        let (header, body) = record.split_at_mut(HEADER);
        let Some(inner_len) = body.len().checked_sub(TAG) else {
            return Err(ProtoError::Malformed("a lane record shorter than its tag".into()));
        };
        let (inner, tag) = body.split_at_mut(inner_len);
        let tag: &Tag = (&*tag).try_into().expect("a tag's length");
        self.0
            .key
            .open_in_place(&nonce, header, inner, tag)
            .map_err(|_| ProtoError::Malformed("a lane record failed authentication".into()))?;
        let inner = &*inner;
        // The content type is the last non-zero byte; zeros after it are padding.
        let Some(end) = inner.iter().rposition(|&b| b != 0) else {
            return Err(ProtoError::Malformed("a lane record with no content type".into()));
        };
        match inner[end] {
            APPLICATION_DATA => Ok(Opened::Data(HEADER..HEADER + end)),
            ALERT if inner[..end] == [1, 0] => Ok(Opened::Closed),
            ALERT => Err(ProtoError::Malformed(format!("the lane's peer sent TLS alert {:?}", &inner[..end]))),
            HANDSHAKE => Err(ProtoError::Malformed("a post-handshake message (key update or ticket) on a lane".into())),
            other => Err(ProtoError::Malformed(format!("a lane record of content type {other}"))),
        }
    }

    /// Authenticates and decrypts a full record ([`FULL_HEADER`]): `body` holds its
    /// [`MAX_PLAIN`] bytes of ciphertext then the encrypted content type byte, `tag` its tag.
    /// In place: on success `body[..MAX_PLAIN]` is the plaintext (and the last byte the content
    /// type). Fails unless the record authenticates and holds application data with no
    /// padding, as every record of a copy but its last does.
    pub fn open_full(&mut self, body: &mut [u8], tag: &Tag) -> Result<(), ProtoError> {
        assert_eq!(body.len(), MAX_PLAIN + 1, "a full record's body");
        let nonce = self.0.next_nonce()?;
        let opened = self.0.key.open_in_place(&nonce, &FULL_HEADER, body, tag);
        full_record_opened(opened.is_ok(), body[MAX_PLAIN])
    }

    /// As [`Opener::open_full`], the plaintext (and the content type after it) written into
    /// `out` instead of over `body`, which stays as it was.
    ///
    /// Why: a reader that knows where a copy's plaintext goes opens its full records from the
    /// read buffer, which stays in cache, straight there, so the destination is written once,
    /// by the cipher (`stream::LaneTls::read_placed`).
    pub fn open_full_into(&mut self, body: &[u8], tag: &Tag, out: &mut [u8]) -> Result<(), ProtoError> {
        assert_eq!((body.len(), out.len()), (MAX_PLAIN + 1, MAX_PLAIN + 1), "a full record's body");
        let nonce = self.0.next_nonce()?;
        let opened = self.0.key.open_into(&nonce, &FULL_HEADER, body, out, tag);
        full_record_opened(opened.is_ok(), out[MAX_PLAIN])
    }
}

/// Whether a full record opened ([`Opener::open_full`]): it authenticated, and its content
/// type is application data.
fn full_record_opened(authenticated: bool, content_type: u8) -> Result<(), ProtoError> {
    if !authenticated {
        return Err(ProtoError::Malformed("a lane record failed authentication".into()));
    }
    match content_type {
        APPLICATION_DATA => Ok(()),
        other => Err(ProtoError::Malformed(format!(
            "a full-length lane record inside a copy's bytes of content type {other}, not application data"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    fn secrets(seq: u64) -> (u64, ConnectionTrafficSecrets) {
        (seq, ConnectionTrafficSecrets::Aes256Gcm { key: AeadKey::from([7; 32]), iv: Iv::from([9; 12]) })
    }

    fn pair() -> (Sealer, Opener) {
        (Sealer::new(secrets(0)).unwrap(), Opener::new(secrets(0)).unwrap())
    }

    #[test]
    fn records_open_to_what_was_sealed_in_order() {
        let (mut sealer, mut opener) = pair();
        let mut wire = Vec::new();
        let plains: Vec<Vec<u8>> = vec![vec![], vec![1; 10], (0..MAX_PLAIN).map(|i| i as u8).collect()];
        for plain in &plains {
            sealer.seal(plain, &mut wire).unwrap();
        }
        let at = wire.len();
        wire.resize(at + CLOSE_RECORD, 0);
        assert_eq!(sealer.seal_close(&mut wire[at..]).unwrap(), CLOSE_RECORD);
        let mut at = 0;
        for plain in &plains {
            let len = Opener::record_len(&wire[at..]).unwrap().unwrap();
            assert_eq!(len, HEADER + plain.len() + OVERHEAD);
            assert_eq!(Opener::record_len(&wire[at..at + len - 1]).unwrap(), None, "incomplete");
            let Opened::Data(range) = opener.open(&mut wire[at..at + len]).unwrap() else { panic!("data") };
            assert_eq!(&wire[at..][range], &plain[..]);
            at += len;
        }
        let len = Opener::record_len(&wire[at..]).unwrap().unwrap();
        assert_eq!(opener.open(&mut wire[at..at + len]).unwrap(), Opened::Closed);
        assert_eq!(sealer.records_left(), RECORD_LIMIT - 4);
        assert_eq!(opener.records_left(), RECORD_LIMIT - 4);
    }

    #[test]
    fn a_full_record_opens_the_same_in_place_and_apart_and_an_altered_one_neither_way() {
        let (mut sealer, _) = pair();
        let plain: Vec<u8> = (0..MAX_PLAIN).map(|i| (i % 253) as u8).collect();
        let mut wire = Vec::new();
        sealer.seal(&plain, &mut wire).unwrap();
        sealer.seal(&plain, &mut wire).unwrap();
        assert_eq!(wire[..HEADER], FULL_HEADER);
        let body = |record: &[u8]| record[HEADER..HEADER + MAX_PLAIN + 1].to_vec();
        let tag = |record: &[u8]| -> Tag { record[HEADER + MAX_PLAIN + 1..FULL_RECORD].try_into().unwrap() };
        let (first, second) = wire.split_at(FULL_RECORD);

        let (_, mut in_place) = pair();
        let (_, mut apart) = pair();
        for record in [first, second] {
            let mut opened = body(record);
            in_place.open_full(&mut opened, &tag(record)).unwrap();
            let (source, mut out) = (body(record), vec![0; MAX_PLAIN + 1]);
            apart.open_full_into(&source, &tag(record), &mut out).unwrap();
            assert_eq!(opened[..MAX_PLAIN], plain[..]);
            assert_eq!(out, opened, "opened apart");
            assert_eq!(source, body(record), "the source changed");
        }

        let (_, mut opener) = pair();
        let mut altered = body(first);
        altered[MAX_PLAIN / 2] ^= 1;
        let error = opener.open_full_into(&altered, &tag(first), &mut vec![0; MAX_PLAIN + 1]).unwrap_err();
        assert!(error.to_string().contains("authentication"), "{error}");
        let (_, mut opener) = pair();
        assert!(opener.open_full(&mut altered, &tag(first)).is_err());
    }

    #[test]
    fn a_changed_byte_a_replayed_or_reordered_record_fails_authentication() {
        let (mut sealer, _) = pair();
        let mut wire = Vec::new();
        sealer.seal(b"first", &mut wire).unwrap();
        let first_len = wire.len();
        sealer.seal(b"second", &mut wire).unwrap();
        for flip in [0, 3, HEADER, first_len - 1] {
            let mut bad = wire.clone();
            bad[flip] ^= 1;
            let mut opener = Opener::new(secrets(0)).unwrap();
            let len = Opener::record_len(&bad);
            if let Ok(Some(len)) = len {
                assert!(opener.open(&mut bad[..len]).is_err(), "flip at {flip} accepted");
            }
        }
        // The second record opened first: its sequence number differs.
        let mut opener = Opener::new(secrets(0)).unwrap();
        assert!(opener.open(&mut wire.clone()[first_len..]).is_err());
        // The first opened twice.
        let mut opener = Opener::new(secrets(0)).unwrap();
        opener.open(&mut wire.clone()[..first_len]).unwrap();
        assert!(opener.open(&mut wire.clone()[..first_len]).is_err());
    }

    #[test]
    fn headers_no_tls_13_peer_sends_are_refused() {
        assert!(Opener::record_len(&[22, 3, 3, 0, 40]).is_err(), "outer handshake type");
        assert!(Opener::record_len(&[23, 3, 1, 0, 40]).is_err(), "old version");
        assert!(Opener::record_len(&[23, 3, 3, 0, 2]).is_err(), "shorter than a tag");
        assert!(Opener::record_len(&[23, 3, 3, 0xff, 0xff]).is_err(), "longer than TLS allows");
        assert_eq!(Opener::record_len(&[23, 3, 3]).unwrap(), None);
    }

    #[test]
    fn a_direction_stops_at_its_record_limit() {
        let mut sealer = Sealer::new(secrets(RECORD_LIMIT - 1)).unwrap();
        let mut wire = Vec::new();
        sealer.seal(b"last", &mut wire).unwrap();
        assert_eq!(sealer.records_left(), 0);
        assert!(sealer.seal(b"one more", &mut wire).is_err());
        assert_eq!(wire.len(), HEADER + 4 + OVERHEAD, "a refused record leaves nothing behind");
        let mut opener = Opener::new(secrets(RECORD_LIMIT - 1)).unwrap();
        assert!(matches!(opener.open(&mut wire), Ok(Opened::Data(_))));
        assert!(opener.open(&mut wire).is_err());
    }
}
