//! Plain CUDA programs for the CUDA shim's tests (`tests/cuda/*.cu`): built by `nvcc` with its
//! default static runtime, run with `ac-cuda`'s `libcuda.so.1` first on `LD_LIBRARY_PATH`.
//!
//! `nvcc` comes from NVIDIA's PyPI wheels, which `scripts/test` fetches into `.cache/nvcc`
//! (`AC_NVCC` names another). Without it the tests skip, unless `AC_CUDA_SHIM_REQUIRED` is set.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::TestBackend;

/// The sources: `AC_CHECKOUT` (a GPU machine's copy, unpacked from a `gpu-check` bundle), else
/// the checkout this was built from.
fn checkout() -> PathBuf {
    if let Some(dir) = std::env::var_os("AC_CHECKOUT") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// `nvcc`, if this machine has one.
pub fn nvcc() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AC_NVCC") {
        return Some(PathBuf::from(path));
    }
    let cached = checkout().join(".cache/nvcc/nvidia/cu13/bin/nvcc");
    cached.exists().then_some(cached)
}

/// The device runtime library (`libcudadevrt.a`) beside `nvcc` (in `lib`, or `lib64` where
/// the toolkit is installed), which programs link relocatable device code with.
pub fn device_runtime_library() -> Option<PathBuf> {
    let root = nvcc()?.parent()?.parent()?.to_path_buf();
    ["lib", "lib64"].into_iter().map(|dir| root.join(dir).join("libcudadevrt.a")).find(|path| path.exists())
}

/// NVIDIA's CUDA 12.9 runtime library (`libcudart.so.12`), if fetched.
pub fn runtime_12() -> Option<PathBuf> {
    let path = checkout().join(".cache/nvcc/nvidia/cuda_runtime/lib/libcudart.so.12");
    path.exists().then_some(path)
}

/// An interpreter with PyTorch and CuPy: `AC_FRAMEWORKS_PYTHON`, else `.cache/frameworks`'s, where
/// `scripts/test` installs the pinned `tests/cuda/frameworks-requirements.txt`; `None` (a skip)
/// without one, unless `AC_FRAMEWORKS_REQUIRED` is set.
pub fn frameworks_python() -> Option<PathBuf> {
    let cached = checkout().join(".cache/frameworks/bin/python");
    let found = std::env::var_os("AC_FRAMEWORKS_PYTHON").map(PathBuf::from).or(cached.exists().then_some(cached));
    if found.is_none() {
        crate::skip("AC_FRAMEWORKS_REQUIRED", "no PyTorch or CuPy (scripts/test installs them into .cache/frameworks)");
    }
    found
}

/// A file of the checkout.
pub fn source(relative: &str) -> PathBuf {
    checkout().join(relative)
}

/// Builds `tests/cuda/<name>.cu` into `dir` with nvcc's defaults (static runtime), for sm_90
/// (the stand-in's compute capability); `None` (a skip) without nvcc.
pub fn build(name: &str, dir: &Path) -> Option<PathBuf> {
    build_with::<&str>(name, dir, &[])
}

/// Builds `tests/cuda/<name>.cu` as [`build`] does, linked against `libcublasLt.so.13`,
/// `libcublas.so.13` and `libcufft.so.12` as a program built with NVIDIA's math libraries is: CI
/// has none, so the link is against libraries of those sonames holding the symbols the programs
/// call (`tests/cuda/cublas_link_stub.c`), versioned as NVIDIA's are
/// (`cublasSgemm_v2@@libcublas.so.13`); at run time the shim's ([`shim_dir`]) are found first.
pub fn build_with_math_libraries(name: &str, dir: &Path) -> Option<PathBuf> {
    let stub = dir.join("link-stub");
    std::fs::create_dir_all(&stub).expect("stub dir");
    // cuBLASLt before cuBLAS: its functions bind to libcublasLt.so.13, as against NVIDIA's.
    for (library, version) in [("cublasLt", 13), ("cublas", 13), ("cufft", 12)] {
        let soname = format!("lib{library}.so.{version}");
        let versions = stub.join(format!("{library}.map"));
        std::fs::write(&versions, format!("{soname} {{ global: {library}*; local: *; }};\n")).expect("version script");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}")])
            .arg(format!("-Wl,--version-script={}", versions.display()))
            .arg("-o")
            .arg(stub.join(&soname))
            .arg(source("tests/cuda/cublas_link_stub.c"))
            .output()
            .expect("cc runs");
        assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
        std::os::unix::fs::symlink(&soname, stub.join(format!("lib{library}.so"))).expect("link");
    }
    let libraries = ["-lcublasLt", "-lcublas", "-lcufft"].map(String::from);
    build_with(name, dir, &[vec![format!("-L{}", stub.display())], libraries.to_vec()].concat())
}

/// Builds `tests/cuda/<name>.cu` as [`build`] does, with `extra` added to nvcc's arguments
/// (libraries to link, `--default-stream per-thread`).
pub fn build_with<S: AsRef<std::ffi::OsStr>>(name: &str, dir: &Path, extra: &[S]) -> Option<PathBuf> {
    let Some(nvcc) = nvcc() else {
        crate::skip("AC_CUDA_SHIM_REQUIRED", "no nvcc (scripts/test fetches it into .cache/nvcc)");
        return None;
    };
    let exe = dir.join(name);
    let out = Command::new(&nvcc)
        .args(["-arch=sm_90", "-o"])
        .arg(&exe)
        .arg(source(&format!("tests/cuda/{name}.cu")))
        .args(extra)
        .output()
        .expect("nvcc runs");
    assert!(out.status.success(), "nvcc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// A directory in `dir` holding the shim as `libcuda.so.1`, `libcublas.so.{12,13}`,
/// `libcublasLt.so.{12,13}`, `libcufft.so.{11,12}` and `libnvidia-ml.so.1`, as the package
/// installs it.
pub fn shim_dir(dir: &Path) -> PathBuf {
    let lib = dir.join("shim");
    std::fs::create_dir_all(&lib).expect("shim dir");
    let libraries = ["libcublas.so.12", "libcublas.so.13", "libcublasLt.so.12", "libcublasLt.so.13"];
    for name in ["libcuda.so.1", "libcufft.so.11", "libcufft.so.12", "libnvidia-ml.so.1"].iter().chain(&libraries) {
        std::os::unix::fs::symlink(crate::workspace_binary("libac_cuda.so"), lib.join(name)).expect("link");
    }
    lib
}

/// A backend in this process whose CUDA devices are the driver stand-in's two (the stand-in
/// must be loaded first: `tests/tests/e2e/standin`), contexts in the daemon.
pub async fn standin_backend() -> TestBackend {
    standin_backend_with(|_| {}).await
}

/// The same after `adjust` changed its configuration.
pub async fn standin_backend_with(adjust: impl FnOnce(&mut ac_backend::BackendConfig)) -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = ac_backend::DeviceChoice::Cuda;
        c.staging_mib = 16;
        c.isolation = ac_backend::Isolation::Context;
        adjust(c);
    })
    .await
}
