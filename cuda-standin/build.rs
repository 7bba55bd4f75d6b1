//! The library's soname is `libcuda.so`, the first name cudarc asks `dlopen` for: once a test
//! has loaded the stand-in by its path, the dynamic loader answers cudarc's request with it
//! instead of searching for the NVIDIA driver.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
}
