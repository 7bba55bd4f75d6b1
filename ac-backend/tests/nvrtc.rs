//! NVRTC, for real, on a machine without a GPU: the builtin kernels' CUDA C compiles for the
//! GPU generations we serve, a broken source answers with the compiler's log, options reach the
//! compiler, and the cache compiles each source once.
//!
//! NVRTC is a library, not a driver: `scripts/test` installs it (NVIDIA's `nvidia-cuda-nvrtc`
//! wheel, unpacked, no GPU needed) and sets `AC_NVRTC_REQUIRED=1`, so there these tests fail when
//! the library cannot be loaded. Elsewhere they say that they did not run.
#![cfg(feature = "cuda")]

use ac_backend::device::builtin::KERNELS;
use ac_backend::device::cuda::{image, nvrtc, BUILTIN_SOURCE};
use ac_proto::backend::ErrorKind;

/// Whether NVRTC is here; panics when `scripts/test` promised it.
fn nvrtc_here() -> bool {
    if nvrtc::nvrtc_present() {
        return true;
    }
    assert!(std::env::var_os("AC_NVRTC_REQUIRED").is_none(), "AC_NVRTC_REQUIRED is set but libnvrtc cannot be loaded");
    eprintln!("libnvrtc not found: NVRTC tests did not run (scripts/test installs it)");
    false
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn builtin_kernels_compile_for_ampere_and_hopper() {
    if !nvrtc_here() {
        return;
    }
    let compiler = nvrtc::Compiler::new(64 << 20);
    for arch in [(8, 0), (9, 0)] {
        let cubin = compiler.compile(BUILTIN_SOURCE, &[], arch).unwrap_or_else(|e| panic!("sm_{arch:?}: {e}"));
        image::check_binary(&cubin).expect("NVRTC's cubin passes our image checks");
        for (name, _) in KERNELS {
            assert!(contains(&cubin, name.as_bytes()), "sm_{arch:?} cubin lacks kernel `{name}`");
        }
    }
    assert_eq!(compiler.compiles(), 2);
}

#[test]
fn a_compile_error_returns_the_log_and_options_reach_the_compiler() {
    if !nvrtc_here() {
        return;
    }
    let compiler = nvrtc::Compiler::new(64 << 20);
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }";
    let e = compiler.compile(broken, &[], (9, 0)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ModuleLoad);
    assert!(e.message.contains("NVRTC compile failed") && e.message.contains("undefined_name"), "{}", e.message);

    let needs_scale = "#ifndef SCALE\n#error SCALE must be defined\n#endif\n\
                       extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= SCALE; }";
    let e = compiler.compile(needs_scale, &[], (9, 0)).unwrap_err();
    assert!(e.message.contains("SCALE must be defined"), "{}", e.message);
    compiler.compile(needs_scale, &["-DSCALE=3.0f".into()], (9, 0)).unwrap();

    // Refused by NVRTC itself (an allowed option with a bad value), and by us (reads files).
    let e = compiler.compile(needs_scale, &["-std=c++5".into()], (9, 0)).unwrap_err();
    assert!(e.message.contains("NVRTC"), "{}", e.message);
    let e = compiler.compile("#include \"/etc/passwd\"\n", &[], (9, 0)).unwrap_err();
    assert!(e.message.contains("`#include` is not allowed"), "{}", e.message);
}

#[test]
fn each_source_is_compiled_once() {
    if !nvrtc_here() {
        return;
    }
    let compiler = nvrtc::Compiler::new(64 << 20);
    let source = "extern \"C\" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }";
    let first = compiler.compile(source, &[], (9, 0)).unwrap();
    let again = compiler.compile(source, &[], (9, 0)).unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &again), "the second load comes from the cache");
    assert_eq!(compiler.compiles(), 1);
    compiler.compile(source, &["-DX=1".into()], (9, 0)).unwrap();
    compiler.compile(source, &[], (8, 0)).unwrap();
    assert_eq!(compiler.compiles(), 3, "other options or another architecture compile anew");
}

#[test]
fn a_real_cubin_passes_the_image_checks_and_a_cut_one_does_not() {
    // Assembled from tests/fixtures/add_one.ptx by ptxas 12.9 for sm_90.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/add_one.sm_90.cubin");
    let cubin = std::fs::read(path).unwrap();
    image::check_binary(&cubin).unwrap();
    assert!(contains(&cubin, b"add_one"));
    for cut in [cubin.len() - 1, cubin.len() / 2, 100] {
        assert!(image::check_binary(&cubin[..cut]).is_err(), "cut at {cut} of {}", cubin.len());
    }
}

#[test]
#[ignore = "rewrites the prebuilt builtin kernels: run after editing kernels.cu, with NVRTC"]
fn regenerate_prebuilt_builtin_kernels() {
    assert!(nvrtc_here(), "NVRTC is needed to make the prebuilt images");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/device/cuda/prebuilt");
    ac_backend::device::cuda::prebuilt::write_all(std::path::Path::new(dir)).unwrap();
}
