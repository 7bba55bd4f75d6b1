//! 07: a kernel that faults on purpose (a write to an illegal address) in one session, while a
//! second session on the same GPU keeps computing. The faulting session gets `ContextLost` and
//! must reconnect; the other never notices. Needs a backend with a CUDA device and its default
//! `--isolation process` (a worker process per session): CUDA makes a fault sticky for the
//! whole process, so with `--isolation context` the other session is lost too.
//!
//! `AC_BACKEND_ADDR=... AC_CA_CERT=... cargo run --bin 07_fault_isolation`

use ac_frontend::blocking::Accelerator;
use ac_frontend::{ErrorKind, LaunchDims};
use anyhow::{ensure, Context};

const FAULTY: &str = r#"
extern "C" __global__ void write_wild(unsigned long long address) {
    *(volatile int*)address = 42;
}
"#;

fn saxpy_round(acc: &Accelerator, n: usize) -> anyhow::Result<()> {
    let x = acc.alloc_from(&vec![1.0f32; n])?;
    let y = acc.alloc_from(&vec![2.0f32; n])?;
    let saxpy = acc.builtin()?.function("saxpy")?;
    saxpy.launch(LaunchDims::linear(n as u64, 256), &[3.0f32.into(), x.arg(), y.arg(), (n as u64).into()])?;
    ensure!(y.to_vec()?.iter().all(|&v| v == 5.0), "saxpy result wrong");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let healthy = Accelerator::from_env()?;
    let victim = Accelerator::from_env()?;
    println!("two sessions on {}", healthy.info().name);
    saxpy_round(&healthy, 1 << 20).context("healthy session before the fault")?;

    let kernel = victim.compile_cuda(FAULTY, &[])?.function("write_wild")?;
    kernel.launch(LaunchDims::linear(1, 1), &[0x10u64.into()])?;
    let err = victim.synchronize().err().context("the faulting kernel must report an error")?;
    ensure!(err.kind() == Some(ErrorKind::ContextLost), "expected ContextLost, got {err}");
    println!("faulting session: {err}");
    let again = victim.alloc::<f32>(16).err().context("a lost context refuses further calls")?;
    ensure!(again.kind() == Some(ErrorKind::ContextLost), "expected ContextLost again, got {again}");

    for round in 0..5 {
        saxpy_round(&healthy, 1 << 20).with_context(|| format!("healthy session, round {round} after the fault"))?;
    }
    let fresh = Accelerator::from_env()?;
    saxpy_round(&fresh, 1 << 16).context("a new session after the fault")?;
    println!("isolation OK: the other session and a new one kept working");
    Ok(())
}
