//! The codec: the one module that knows messages are bincode 2. Swapping the serializer means
//! changing this file only.

use serde::{de::DeserializeOwned, Serialize};

use crate::ProtoError;

/// Largest encoded message accepted (bytes). Messages are small; bulk data travels raw.
pub const MAX_FRAME: usize = 1 << 20;

/// bincode counts what it decodes at its size in memory, not as written: a `u64` counts 8
/// bytes however few it was written in, a `u128` 16 for one written byte. Its limit on that
/// count is what bounds a hostile length's allocation (a string's bytes are allocated, zeroed,
/// before they are read). A limit of [`MAX_FRAME`] refused frames within it: a Raft append of
/// 64 entries filling the frame counted a few KiB more than written, and every follower
/// dropped it unread each time it was sent again (stop 80). A frame may count sixteen times
/// its size, the most it can, the limit stepping with the frame's size so that a frame of a few
/// bytes still allocates no more than 64 KiB.
///
/// Up to this size (4 KiB), a frame may count 16 times it (64 KiB).
const SMALL_FRAME: usize = 4 << 10;
/// Up to this size (64 KiB), a frame may count 16 times it (1 MiB); a larger one 16 MiB.
const MEDIUM_FRAME: usize = 64 << 10;

/// The encoding: little-endian, variable-length integers. bincode applies a limit to decoding
/// only (`decode_limited`); what an encoding may be is bounded by the frame.
fn config() -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint> {
    bincode::config::standard().with_little_endian().with_variable_int_encoding()
}

/// Decodes `bytes` whole with the decoder's count limited to `LIMIT`: (the message, bytes used).
fn decode_limited<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<(T, usize), ProtoError> {
    bincode::serde::decode_from_slice(bytes, config().with_limit::<LIMIT>())
        .map_err(|e| ProtoError::Malformed(e.to_string()))
}

/// Appends the encoding of `msg` to `out`.
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    bincode::serde::encode_into_std_write(msg, out, config()).map(|_| ()).map_err(|e| ProtoError::Encode(e.to_string()))
}

/// Decodes one message that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ProtoError> {
    if bytes.len() > MAX_FRAME {
        return Err(ProtoError::FrameTooLarge { len: bytes.len() as u64, limit: MAX_FRAME as u64 });
    }
    let (msg, used) = if bytes.len() <= SMALL_FRAME {
        decode_limited::<T, { 16 * SMALL_FRAME }>(bytes)?
    } else if bytes.len() <= MEDIUM_FRAME {
        decode_limited::<T, { 16 * MEDIUM_FRAME }>(bytes)?
    } else {
        decode_limited::<T, { 16 * MAX_FRAME }>(bytes)?
    };
    if used != bytes.len() {
        return Err(ProtoError::Malformed(format!("{} trailing bytes after message", bytes.len() - used)));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Sample {
        A(u64),
        B { name: String, data: Vec<u32> },
    }

    #[test]
    fn roundtrip() {
        let msg = Sample::B { name: "x".into(), data: vec![1, 2, 3] };
        let mut buf = Vec::new();
        encode_into(&msg, &mut buf).unwrap();
        assert_eq!(decode::<Sample>(&buf).unwrap(), msg);
    }

    #[test]
    fn huge_length_inside_message_is_refused_without_allocating() {
        // Variant 1 (B), then a string length of u64::MAX: must fail fast, not abort.
        let hostile = [1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(decode::<Sample>(&hostile).is_err());
    }

    /// A message written within the limit is read, however bincode counts it: 300,000 small
    /// numbers are written in a byte each and count four each (1.2 MB) as they are read.
    #[test]
    fn a_message_within_the_limit_is_read_whatever_it_counts_in_memory() {
        let msg = Sample::B { name: "small numbers".into(), data: vec![1; 300_000] };
        let mut buf = Vec::new();
        encode_into(&msg, &mut buf).unwrap();
        assert!(buf.len() < MAX_FRAME / 2, "{} bytes written", buf.len());
        assert_eq!(decode::<Sample>(&buf).unwrap(), msg);
    }

    /// A frame of a few bytes announcing a string of 15 MiB is refused before anything is
    /// allocated for it (the count's limit steps with the frame: 64 KiB for this one), and a
    /// message that fills the small step's frame is still read.
    #[test]
    fn a_small_frame_may_count_only_a_little() {
        let mut hostile = vec![1u8]; // variant B
        hostile.push(0xfc); // a u32-sized varint length follows
        hostile.extend_from_slice(&(15u32 << 20).to_le_bytes());
        assert!(matches!(decode::<Sample>(&hostile), Err(ProtoError::Malformed(e)) if e.contains("LimitExceeded")));
        let msg = Sample::B { name: "x".repeat(SMALL_FRAME - 8), data: vec![] };
        let mut buf = Vec::new();
        encode_into(&msg, &mut buf).unwrap();
        assert!(buf.len() <= SMALL_FRAME);
        assert_eq!(decode::<Sample>(&buf).unwrap(), msg);
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        let mut buf = Vec::new();
        encode_into(&Sample::A(7), &mut buf).unwrap();
        buf.push(0);
        assert!(matches!(decode::<Sample>(&buf), Err(ProtoError::Malformed(_))));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<Sample>(&bytes);
            let _ = decode::<crate::backend::Envelope>(&bytes);
        }
    }
}
