//! 01: connect to a backend and print what it offers.
//!
//! `AC_BACKEND_ADDR=127.0.0.1:7100 AC_CA_CERT=.state/ac-backend/ca.pem cargo run --bin 01_device_info`

use ac_frontend::blocking::Accelerator;

fn main() -> anyhow::Result<()> {
    let acc = Accelerator::from_env()?;
    let info = acc.device_info()?;
    println!("device:  {}", info.name);
    println!("kind:    {:?}", info.kind);
    if let Some((major, minor)) = info.compute_capability {
        println!("compute: {major}.{minor}");
    }
    println!("memory:  {} MiB total, {} MiB free", info.memory_total >> 20, info.memory_free >> 20);
    Ok(())
}
