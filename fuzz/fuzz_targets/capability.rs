//! Capabilities as a backend checks them when a session opens, and the manager's public key as
//! a backend reads it from its state directory or configuration. Three inputs: raw bytes as a
//! capability (almost never signed: decode and signature check); raw bytes signed by the
//! manager's key as the grant (the grant decoder behind a valid signature); and a decodable
//! grant, issued and verified. Asserts: no panic; an issued grant verifies to itself on its
//! host before it expires, and is refused on another host and once expired.
#![no_main]

use std::sync::OnceLock;

use ac_fuzz::decode_exact;
use ac_proto::capability::{verify, Grant, Signer};
use ac_proto::codec;
use libfuzzer_sys::fuzz_target;

fn signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| Signer::from_pkcs8(&Signer::generate_pkcs8().expect("key")).expect("key loads"))
}

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    let key = [signer().public_key()];
    match which % 4 {
        0 => drop(verify(&key, bytes, "h1", 1_000)),
        1 => {
            // A capability is bincode's (grant bytes, signature bytes).
            let mut signed = Vec::new();
            codec::encode_into(&(bytes.to_vec(), signer().sign(bytes)), &mut signed).expect("encodes");
            if let Ok(grant) = verify(&key, &signed, "h1", 1_000) {
                assert_eq!(codec::decode::<Grant>(bytes).expect("a verified grant decodes"), grant);
            }
        }
        2 => {
            let Some(grant) = decode_exact::<Grant>(bytes) else { return };
            let capability = signer().issue(&grant);
            if grant.expires > 0 {
                assert_eq!(verify(&key, &capability, &grant.host, grant.expires - 1).as_ref(), Ok(&grant));
            }
            assert!(verify(&key, &capability, &grant.host, grant.expires).is_err(), "expired");
            assert!(verify(&key, &capability, &format!("{}x", grant.host), 0).is_err(), "other host");
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(bytes) {
                if let Some(parsed) = ac_backend::network::trust::parse_key(text) {
                    assert_eq!(ac_backend::network::trust::parse_key(&ac_backend::network::trust::key_hex(&parsed)), Some(parsed));
                }
                if let Some(keys) = ac_backend::network::trust::parse_keys(text) {
                    let written: Vec<String> = keys.iter().map(ac_backend::network::trust::key_hex).collect();
                    assert_eq!(ac_backend::network::trust::parse_keys(&written.join(",")), Some(keys));
                }
            }
        }
    }
});
