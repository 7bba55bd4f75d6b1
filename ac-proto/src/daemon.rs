//! What every daemon of the project does the same way around its service: announce the bound
//! address to scripts, and wait for the signal to stop.

use std::net::SocketAddr;
use std::path::Path;

/// Writes the bound address to `path`, for scripts that started the daemon on port 0.
pub fn write_addr_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    std::fs::write(path, format!("{addr}\n"))
}

/// Returns when the process gets SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = term.recv() => Ok(()),
    }
}
