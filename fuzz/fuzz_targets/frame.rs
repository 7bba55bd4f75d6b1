//! The frame reader as the daemons and the SDK drive it, over bytes that arrive in pieces of
//! input-chosen sizes: a backend's control stream (preamble, `Hello`, envelopes and the inline
//! payloads they announce), and a program's reply stream (replies with their data). Asserts:
//! no panic; `frame_buffered` is true exactly when a frame can be taken without reading; and
//! the frames read, written again with `encode_frame`, read back to the same messages.
#![no_main]

use ac_fuzz::{block_on, Pieces};
use ac_proto::backend::{Envelope, Hello, Preamble, Reply, Request, Response};
use ac_proto::codec;
use ac_proto::frame::{encode_frame, FrameReader};
use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};

/// Inline payloads above this are refused by the backend before it reads them (its
/// `MAX_INLINE` is larger; the input is far smaller anyway).
const MAX_PAYLOAD: u64 = 1 << 20;

fn payload_len(request: &Request) -> u64 {
    match request {
        Request::MemWrite { len, .. } | Request::MemWriteSync { len, .. } | Request::ModuleLoad { len, .. } => *len,
        // Lengths past u64 close the session before any payload is read.
        Request::Link { inputs, .. } => ac_proto::backend::jit_link::payload_len(inputs).unwrap_or(u64::MAX),
        _ => 0,
    }
}

/// A backend's control stream: what `network/mod.rs` and `session/serve_control/` read.
fn control_stream(input: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = FrameReader::new(Pieces::from_input(input));
    let mut read = Vec::new();
    block_on(async {
        let Ok(raw) = reader.read_exact_raw(4).await else { return };
        let _ = Preamble::parse(raw[..].try_into().expect("4 bytes"));
        let Ok(hello) = reader.expect_frame::<Hello>().await else { return };
        read.push(encoded(&hello));
        loop {
            let next = if reader.frame_buffered() {
                // A whole frame (or a refused length) is buffered: it is taken without reading.
                reader.buffered_frame::<Envelope>().expect("frame_buffered but nothing buffered").map(Some)
            } else {
                reader.read_frame::<Envelope>().await
            };
            match next {
                Ok(Some(envelope)) => {
                    let len = payload_len(&envelope.request);
                    read.push(encoded(&envelope));
                    if len > MAX_PAYLOAD || reader.read_exact_raw(len as usize).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(_) => return,
            }
        }
    });
    read
}

/// A program's reply stream: what `ac-frontend`'s reply reader reads.
fn reply_stream(input: &[u8]) {
    let mut reader = FrameReader::new(Pieces::from_input(input));
    block_on(async {
        let data_len = |r: &Reply| match r.response {
            Response::Data { len } | Response::Linked { len, .. } => len,
            _ => 0,
        };
        while let Ok(Some((reply, payload))) = reader.read_frame_with_payload::<Reply>(data_len, MAX_PAYLOAD).await {
            assert_eq!(payload.len() as u64, data_len(&reply), "payload of the announced length");
        }
    });
}

fn encoded<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode_into(msg, &mut out).expect("a decoded message encodes");
    out
}

/// Frames written with `encode_frame` read back, through pieces, to the same messages.
fn rewritten<T: Serialize + DeserializeOwned>(messages: &[Vec<u8>], sizes: &[u8]) {
    let mut stream = Vec::new();
    for bytes in messages {
        let msg: T = codec::decode(bytes).expect("re-decodes");
        encode_frame(&msg, &mut stream).expect("encodes");
    }
    let mut reader = FrameReader::new(Pieces::new(&stream, sizes));
    block_on(async {
        for bytes in messages {
            let msg: T = reader.expect_frame().await.expect("a written frame reads back");
            assert_eq!(&encoded(&msg), bytes);
        }
        assert!(reader.read_frame::<T>().await.expect("clean end").is_none());
    });
}

fuzz_target!(|input: &[u8]| {
    let read = control_stream(input);
    if let Some((hello, envelopes)) = read.split_first() {
        rewritten::<Hello>(std::slice::from_ref(hello), input.get(1..3).unwrap_or(&[]));
        rewritten::<Envelope>(envelopes, input.get(1..4).unwrap_or(&[]));
    }
    reply_stream(input);
});
