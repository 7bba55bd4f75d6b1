//! What the fuzz targets share: a [`Source`] that hands a fuzz input to a `FrameReader` in
//! pieces of input-chosen sizes, a poll loop for its futures (the source never waits, so no
//! runtime is needed), and the codec round-trip every message target asserts. Its tests make
//! the seeds of the message targets (`seeds.rs`).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

#[cfg(test)]
mod seeds;

use ac_proto::frame::Source;
use ac_proto::{codec, ProtoError};
use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};

/// Runs a future whose I/O never waits ([`Pieces`] is always ready) to completion.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    // Nothing registers a wake-up, so a future that is pending once would stay pending.
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a read over an always-ready source waited"),
    }
}

/// A stream's bytes as they could arrive from the network: in pieces whose sizes come from
/// `sizes` (cycled, 0 read as 1), ending cleanly after the last byte.
#[derive(Debug)]
pub struct Pieces {
    data: Bytes,
    sizes: Vec<u8>,
    next: usize,
}

impl Pieces {
    /// `data` in pieces sized by `sizes` (all of it at once when `sizes` is empty).
    pub fn new(data: &[u8], sizes: &[u8]) -> Self {
        Self { data: Bytes::copy_from_slice(data), sizes: sizes.to_vec(), next: 0 }
    }

    /// Splits a fuzz input: its first byte says how many of the following bytes are piece
    /// sizes (at most 15), the rest is the stream.
    pub fn from_input(input: &[u8]) -> Self {
        let Some((&first, rest)) = input.split_first() else { return Self::new(&[], &[]) };
        let n = ((first & 0x0f) as usize).min(rest.len());
        Self::new(&rest[n..], &rest[..n])
    }
}

impl Source for Pieces {
    async fn read_some(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let size = match self.sizes.get(self.next % self.sizes.len().max(1)) {
            Some(&s) => (s as usize).max(1),
            None => usize::MAX,
        };
        self.next += 1;
        let n = size.min(max).min(self.data.len());
        Ok(Some(self.data.split_to(n)))
    }
}

/// Decodes `bytes` as a `T`; when that succeeds, asserts the codec is stable on it: the
/// decoded value encodes, that encoding decodes, and encodes again to the same bytes. Compares
/// encodings rather than values so that messages holding floats (NaN != NaN) are checked too.
pub fn decode_stable<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let value: T = codec::decode(bytes).ok()?;
    let mut once = Vec::new();
    codec::encode_into(&value, &mut once).expect("a decoded message encodes");
    assert!(once.len() <= bytes.len(), "re-encoding grew: {} > {} bytes", once.len(), bytes.len());
    let again: T = codec::decode(&once).expect("an encoded message decodes");
    let mut twice = Vec::new();
    codec::encode_into(&again, &mut twice).expect("a decoded message encodes");
    assert_eq!(once, twice, "encode(decode(encode(x))) differs from encode(x)");
    Some(value)
}

/// [`decode_stable`], plus `decode(encode(x)) == x` for types without floats.
pub fn decode_exact<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> Option<T> {
    let value: T = decode_stable(bytes)?;
    let mut encoded = Vec::new();
    codec::encode_into(&value, &mut encoded).expect("a decoded message encodes");
    assert_eq!(codec::decode::<T>(&encoded).expect("an encoded message decodes"), value);
    Some(value)
}
