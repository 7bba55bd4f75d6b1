//! 06: your own kernel in CUDA C, compiled on the backend by NVRTC with compile options, launched
//! with scalars of several widths, a pointer into the middle of a buffer and dynamic shared
//! memory. Then a source with a mistake, to show the compiler's log coming back. Needs a backend
//! with a CUDA device.
//!
//! `AC_BACKEND_ADDR=... AC_CA_CERT=... cargo run --bin 06_nvrtc_kernel`

use ac_frontend::blocking::Accelerator;
use ac_frontend::{ErrorKind, LaunchDims};
use anyhow::ensure;

/// y[i] = SCALE * x[i] * a + b, staged through dynamic shared memory.
const SOURCE: &str = r#"
extern "C" __global__ void scale_shift(const float* x, float* y, int n, double a, long long b) {
    extern __shared__ float tile[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tile[threadIdx.x] = x[i];
    __syncthreads();
    if (i < n) y[i] = (float)(SCALE * tile[threadIdx.x] * a + (double)b);
}
"#;

fn main() -> anyhow::Result<()> {
    let acc = Accelerator::from_env()?;
    println!("NVRTC kernel on {}", acc.info().name);
    let n = 100_000usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
    let dx = acc.alloc_from(&x)?;
    // y is 16 elements longer than needed; the kernel writes from element 16 on.
    let dy = acc.alloc_from(&vec![-1.0f32; n + 16])?;
    let module = acc.compile_cuda(SOURCE, &["-DSCALE=2.0f", "--use_fast_math"])?;
    let kernel = module.function("scale_shift")?;
    let dims = LaunchDims::linear(n as u64, 256).with_shared_mem(256 * 4);
    kernel.launch(dims, &[dx.arg(), dy.at(16), (n as i32).into(), 0.5f64.into(), 3i64.into()])?;
    let y = dy.to_vec()?;
    ensure!(y[..16].iter().all(|&v| v == -1.0), "the kernel wrote before the offset");
    let bad = (0..n).filter(|&i| y[16 + i] != 2.0 * x[i] * 0.5 + 3.0).count();
    ensure!(bad == 0, "{bad} of {n} results differ");
    println!("kernel OK: {n} results checked");

    let Err(err) = acc.compile_cuda("extern \"C\" __global__ void k() { oops; }", &[]) else {
        anyhow::bail!("a broken source compiled");
    };
    ensure!(err.kind() == Some(ErrorKind::ModuleLoad), "unexpected error {err}");
    println!("a broken source answers with the compiler's log:\n{err}");
    Ok(())
}
