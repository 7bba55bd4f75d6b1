//! The codec: the one module that knows messages are bincode 2. Swapping the serializer means
//! changing this file only.

use serde::{de::DeserializeOwned, Serialize};

use crate::ProtoError;

/// Largest encoded message accepted (bytes). Messages are small; bulk data travels raw.
pub const MAX_FRAME: usize = 1 << 20;

/// What the decoder of one message may count, against a hostile length's allocation. bincode
/// counts each value read at its size in memory, not as written: a `u64` counts 8 bytes however
/// few it was written in, a `u128` 16 for one written byte. A limit of [`MAX_FRAME`] refused
/// frames within it: a Raft append of 64 entries filling the frame counted a few KiB more than
/// written, and the follower dropped it unread each time it was sent again (stop 80). Sixteen
/// frames' worth is what a frame within the limit can count.
const DECODE_LIMIT: usize = 16 * MAX_FRAME;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_variable_int_encoding().with_limit::<MAX_FRAME>()
}

/// [`config`], with room for what a frame within [`MAX_FRAME`] counts as it is read.
fn decode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_variable_int_encoding().with_limit::<DECODE_LIMIT>()
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
    let (msg, used) =
        bincode::serde::decode_from_slice(bytes, decode_config()).map_err(|e| ProtoError::Malformed(e.to_string()))?;
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
