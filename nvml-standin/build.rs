//! The library's soname is `libnvidia-ml.so.1`, the name nvml-wrapper's `Nvml::init()` asks
//! `dlopen` for: once a test has loaded the stand-in by its path, a later request by that name in
//! the same process is answered with it instead of a search for the NVIDIA driver's library.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
