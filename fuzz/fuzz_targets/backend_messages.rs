//! Every message of the backend protocol a daemon or a program decodes from the network:
//! `Hello`, `Envelope` (requests), `Reply`, the registration link's `Report` and `Revoke`, and
//! the 4-byte preamble. Asserts: no panic; the codec is stable on every decoded message
//! (`encode(decode(encode(x))) == encode(x)`), and exact (`decode(encode(x)) == x`) for the
//! messages without floats.
#![no_main]

use ac_fuzz::{decode_exact, decode_stable};
use ac_proto::backend::{Envelope, Hello, Preamble, Reply, Report, Revoke};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    match which % 6 {
        0 => drop(decode_exact::<Hello>(bytes)),
        1 => drop(decode_stable::<Envelope>(bytes)),
        2 => drop(decode_stable::<Reply>(bytes)),
        3 => drop(decode_exact::<Report>(bytes)),
        4 => drop(decode_exact::<Revoke>(bytes)),
        _ => {
            if let Ok(raw) = <[u8; 4]>::try_from(bytes) {
                if let Some(preamble) = Preamble::parse(raw) {
                    assert_eq!(Preamble::parse(preamble.to_bytes()), Some(preamble));
                }
            }
        }
    }
});
