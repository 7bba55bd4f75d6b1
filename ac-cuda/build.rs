//! The library answers to `libcuda.so.1`, the name programs and the CUDA runtime load.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
