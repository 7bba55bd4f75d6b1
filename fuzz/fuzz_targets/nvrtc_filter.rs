//! The filter on CUDA C a program sends to be compiled by the backend (`nvrtc::check_untrusted`):
//! no `#include`/`#embed`/`#import`/`__has_include`, options from an allow-list. Asserts: no
//! panic; and a source that passes no longer passes once an include line is appended to it
//! (`#include`, or the trigraph `??=include`).
#![no_main]

use ac_backend::device::cuda::nvrtc::check_untrusted;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    // Options after the first NUL, one per line.
    let (source, options) = text.split_once('\0').unwrap_or((&text, ""));
    let options: Vec<String> = options.lines().map(str::to_string).collect();
    if check_untrusted(source, &options).is_ok() {
        let appended = format!("{source}\n#include \"/etc/passwd\"\n");
        // Unless the source may leave a block comment open (which swallows the appended line,
        // also when `/` and `*` are spliced together) or end in a line continuation (`\\` or
        // the trigraph `??/`, which joins the line to its last one): the compiler too reads no
        // directive there.
        if !source.contains('*') && !source.contains('\\') && !source.contains("??/") {
            assert!(check_untrusted(&appended, &options).is_err(), "an appended #include passed");
            let trigraph = format!("{source}\n??=include \"/etc/passwd\"\n");
            assert!(check_untrusted(&trigraph, &options).is_err(), "an appended ??=include passed");
        }
    }
    let _ = check_untrusted(source, &[]);
});
