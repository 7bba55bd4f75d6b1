//! The backend's peak memory while copying: bounded by the pipeline, not by the copy's size.

use ac_backend::CopySettings;
use ac_frontend::CopyOptions;
use ac_proto::lane;
use ac_proto::transport::Tuning;

use crate::setup::{connect, mib, Child_};

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with(field)).ok_or_else(|| anyhow::anyhow!("{field} missing"))?;
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}

pub async fn peak(quick: bool) -> anyhow::Result<()> {
    let sizes: &[usize] = if quick { &[64 << 20] } else { &[256 << 20, 1 << 30] };
    let backend = Child_::start(2048)?;
    let pid = backend.pid();
    let acc = connect(&backend.options).await?;
    let (stripes, lanes) = (backend.options.stripes, backend.options.lanes);
    let copy = CopySettings::default();
    let tuning = Tuning::default();
    let pipeline = copy.chunk_bytes * stripes;
    let windows = tuning.connection_window as usize * stripes;
    let lane_buffers = (lane::READ_BUFFER + lane::WRITE_BUFFER + lane::record::MAX_RECORD) * lanes;
    println!("## Backend peak memory while copying (separate process, {lanes} bulk lanes)\n");
    println!(
        "Overhead = peak RSS during one host-to-device and one device-to-host copy, minus the RSS before it, minus the device memory itself. Bound from the configuration: on lanes, each lane's read and write buffers, {} KiB in all, plus the TCP sockets' buffers (the kernel's, outside RSS); over QUIC streams (`AC_LANES=0`), one chunk per connection, {}, plus the connection windows, up to {}. Store-and-forward copies hold the whole copy and are refused over the session's payload budget ({} MiB).\n",
        lane_buffers >> 10,
        mib(pipeline),
        mib(windows),
        backend_budget_mib()
    );
    println!("| copy size | pipelined | RSS before MiB | peak RSS MiB | device memory MiB | overhead MiB |");
    println!("|---|---|---|---|---|---|");
    for &size in sizes {
        for pipelined in [true, false] {
            acc.set_copy_options(CopyOptions { pipelined, ..CopyOptions::default() });
            let src = vec![3u8; size];
            let mut dst = vec![0u8; size];
            let buf = acc.alloc::<u8>(size).await?;
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?; // reset the peak (VmHWM)
            let before = status_kib(pid, "VmRSS:")?;
            if !pipelined && size > backend_budget_mib() << 20 {
                let refused = buf.copy_from_host(&src).await.is_err();
                anyhow::ensure!(refused, "a store-and-forward copy over the payload budget was not refused");
                println!("| {} | no (store-and-forward) | refused: over the payload budget | | | |", mib(size));
                buf.free().await?;
                continue;
            }
            buf.copy_from_host(&src).await?;
            buf.copy_to_host(&mut dst).await?;
            let peak = status_kib(pid, "VmHWM:")?;
            anyhow::ensure!(dst == src, "copy corrupted data");
            let overhead = peak as i64 - before as i64 - (size >> 10) as i64;
            let mode = if pipelined { "yes" } else { "no (store-and-forward)" };
            println!(
                "| {} | {mode} | {} | {} | {} | {} |",
                mib(size),
                before >> 10,
                peak >> 10,
                size >> 20,
                overhead >> 10
            );
            buf.free().await?;
        }
    }
    println!();
    Ok(())
}

/// The session's payload budget of a backend with the default configuration.
fn backend_budget_mib() -> usize {
    ac_backend::BackendConfig::default().inline_budget_mib as usize
}
