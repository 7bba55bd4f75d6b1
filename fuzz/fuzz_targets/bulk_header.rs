//! Bulk copy headers as a backend reads them: the first frame of a bulk QUIC stream, and the
//! headers of one copy after another on a lane, each followed by its payload (host to device)
//! or by nothing (device to host). Asserts: no panic, and the codec round-trips every header.
#![no_main]

use ac_fuzz::{block_on, decode_exact, Pieces};
use ac_proto::backend::{BulkHeader, Direction};
use ac_proto::frame::FrameReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let _ = decode_exact::<BulkHeader>(input);
    let mut lane = FrameReader::new(Pieces::from_input(input));
    block_on(async {
        while let Ok(Some(header)) = lane.read_frame::<BulkHeader>().await {
            if header.direction == Direction::HostToDevice {
                // The backend drains a copy's payload in pieces (`ac-backend`'s `network/bulk/`).
                let mut left = header.len;
                while left > 0 {
                    match lane.next_chunk(left.min(64 * 1024) as usize).await {
                        Ok(Some(piece)) => {
                            assert!(!piece.is_empty() && piece.len() as u64 <= left);
                            left -= piece.len() as u64;
                        }
                        _ => return,
                    }
                }
            }
        }
    });
});
