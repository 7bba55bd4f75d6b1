//! Module images as a backend checks them before the CUDA driver reads them (`image.rs`), and
//! the kernels' parameter sizes it reads from them (`signature.rs`): PTX text, cubin (ELF) and
//! fatbin; and a link's inputs of every kind (`ac_proto::backend::device_code`: objects and
//! libraries walked to their embedded fat binaries). Asserts: no panic; accepted PTX is
//! NUL-terminated with no NUL inside; an accepted binary's parameter sizes parse; the checks
//! are idempotent on what they accept; and a cubin input is accepted as a module image is.
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
    for raw in 0..6 {
        let kind = ac_proto::backend::LinkInputKind::from_raw(raw).expect("the six input types");
        let accepted = image::check_link_input(kind, input).is_ok();
        if raw == 0 {
            assert_eq!(accepted, image::check_binary(input).is_ok(), "a cubin input is a module image");
        }
    }
    // The parsers run on whatever a driver accepted, so they must stand raw bytes too.
    let _ = signature::from_ptx(input);
    let _ = signature::from_cubin(input);
});
