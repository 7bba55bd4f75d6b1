//! Programs built against libac, as the C ABI's users build theirs: compiled here with the
//! system's compilers against `ac-capi/include` and the workspace's `libac.so`. Shared by
//! `tests/c_abi.rs`, `tests/slurm.rs` and `tests/resumption.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace_binary;

/// The workspace's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

/// Where libac is built (`cargo build -p ac-capi --release --features mpi`).
pub fn lib_dir() -> PathBuf {
    let dir = workspace_binary("ac-test-client").parent().expect("target dir").to_path_buf();
    assert!(dir.join("libac.so").exists(), "libac.so is not built: cargo build -p ac-capi --release --features mpi");
    dir
}

/// Compiles `sources` with `compiler` into `out` (in a fresh directory), linked with libac.
pub fn compile(compiler: &str, sources: &[PathBuf], flags: &[&str], out: &Path) {
    let lib = lib_dir();
    let output = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(repo().join("ac-capi/include"))
        .args(sources)
        .arg("-L")
        .arg(&lib)
        .arg("-lac")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out)
        .current_dir(out.parent().expect("build dir"))
        .output()
        .unwrap_or_else(|e| panic!("{compiler} runs (./scripts/test installs it): {e}"));
    assert!(output.status.success(), "{compiler} failed:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// Compiles a test program of libac's (`ac-capi/tests/c/NAME.c`) with gcc into `dir`.
pub fn c_test_program(name: &str, dir: &Path, extra_flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let source = repo().join(format!("ac-capi/tests/c/{name}.c"));
    let mut flags = vec!["-std=c99", "-Wall", "-Wextra", "-Werror"];
    flags.extend_from_slice(extra_flags);
    compile("gcc", &[source], &flags, &exe);
    exe
}
