//! Module images as a backend checks them before the CUDA driver reads them (`image.rs`), and
//! the kernels' parameter sizes it reads from them (`signature.rs`): PTX text, cubin (ELF) and
//! fatbin. Asserts: no panic; accepted PTX is NUL-terminated with no NUL inside; an accepted
//! binary's parameter sizes parse; and the checks are idempotent on what they accept.
#![no_main]

use ac_backend::device::cuda::{image, signature};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Ok(text) = image::ptx_text(input) {
        assert_eq!(text.last(), Some(&0));
        assert!(!text[..text.len() - 1].contains(&0));
        assert_eq!(image::ptx_text(&text).as_deref(), Ok(&text[..]), "the check accepts its own output");
        for name in signature::from_ptx(&text).keys() {
            assert!(!name.is_empty());
        }
    }
    if image::check_binary(input).is_ok() {
        let _ = signature::from_cubin(input);
    }
    // The parsers run on whatever a driver accepted, so they must stand raw bytes too.
    let _ = signature::from_ptx(input);
    let _ = signature::from_cubin(input);
});
