//! libac.so's soname, `libac.so.0`: programs linked with `-lac` record it (not the unversioned
//! `libac.so`, which only the development package installs), so they keep running across
//! upgrades of the library package, and an ABI break can move to `libac.so.1` beside it. The
//! number is the crate's major version.
//!
//! Programs linked against the build tree (tests, `scripts/demo`, benches) then look for
//! `libac.so.0` there: a link to `libac.so` beside it, as `ldconfig` makes one where the
//! library is installed (`scripts/install-c`).

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    let soname = format!("libac.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // OUT_DIR is <target>/<profile>/build/ac-capi-<hash>/out; the library lands in <profile>.
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    if let Some(profile) = Path::new(&out).ancestors().nth(3) {
        let link = profile.join(&soname);
        if std::fs::read_link(&link).is_err() {
            let _ = std::fs::remove_file(&link);
            if let Err(e) = std::os::unix::fs::symlink("libac.so", &link) {
                println!("cargo:warning=cannot link {} to libac.so: {e}", link.display());
            }
        }
    }
}
