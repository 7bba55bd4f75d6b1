//! The library's soname is `libcuda.so`, the first name cudarc asks `dlopen` for: once a test
//! has loaded the stand-in by its path, the dynamic loader answers cudarc's request with it
//! instead of searching for the NVIDIA driver.
//!
//! It also compiles the backend's builtin kernels (`kernels.cu`) for the host, with g++
//! (`host/`), so that the stand-in runs their own source (src/host.rs).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
    for input in ["host/builtins.cpp", "host/cuda_host.h", "../ac-backend/src/device/cuda/kernels.cu"] {
        println!("cargo:rerun-if-changed={input}");
    }
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .file("host/builtins.cpp")
        .flag("-fvisibility=hidden")
        .flag("-fno-exceptions")
        .warnings_into_errors(true)
        .compile("standin_builtins");
}
