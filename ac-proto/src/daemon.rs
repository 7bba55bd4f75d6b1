//! What every daemon of the project does the same way around its service: announce the bound
//! address to scripts, and wait for the signal to stop.

use std::net::SocketAddr;
use std::path::Path;

/// Writes the bound address to `path`, for scripts that started the daemon on port 0.
pub fn write_addr_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    std::fs::write(path, format!("{addr}\n"))
}

/// Makes a closed pipe end a command-line tool quietly, as it ends other Unix tools
/// (`armctl host list | head -1`): Rust ignores SIGPIPE, so each print to a closed pipe would
/// panic with a backtrace instead. For tools that print, not for daemons: their sockets and
/// logs must not end them.
#[allow(unsafe_code)]
pub fn quiet_on_closed_pipe() {
    // SAFETY: `signal` only sets the process's disposition of SIGPIPE back to the default; it
    // touches no memory of ours and is safe to call from any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Whether log lines on stderr get colours: only on a terminal, so that log files and journals
/// hold no escape codes.
pub fn log_colours() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Returns when the process gets SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = term.recv() => Ok(()),
    }
}
