//! Starting a session worker: its pipes, the shared region handed down to it alone, its tie to
//! this process's life, and the one thread that forks every worker.

use std::process::{Child, Command};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Mutex, OnceLock};

use super::lock;
use super::shared::PIECE;

/// Bytes a pipe to or from a worker holds: a whole piece, so that one passes with one wake-up
/// of each side rather than sixteen (Linux's default is 64 KiB).
pub(super) const PIPE_BYTES: i32 = PIECE as i32;

/// Gives a pipe [`PIPE_BYTES`] where the system allows (`fs.pipe-max-size`, 1 MiB by default);
/// a smaller pipe only costs speed.
#[allow(unsafe_code)] // one fcntl
pub(super) fn widen_pipe(pipe: &impl std::os::fd::AsRawFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe this process owns; it changes the pipe's capacity only.
    let got = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    if got < 0 {
        tracing::debug!("cannot widen a worker's pipe: {}", std::io::Error::last_os_error());
    }
}

/// Opens descriptor `fd` (close-on-exec here) to the worker `command` starts, and tells it
/// which it is by `flag`: only that child inherits it.
#[allow(unsafe_code)]
pub(super) fn hand_down(command: &mut Command, flag: &str, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    command.arg(flag).arg(fd.to_string());
    // SAFETY: runs in the child between fork and exec and calls only fcntl, which is
    // async-signal-safe; it changes the child's descriptor table alone.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the worker `command` starts die (SIGKILL) when this process does, however it ends:
/// `PR_SET_PDEATHSIG`, set in the child between fork and exec. It is kept across the exec of
/// `ac-backend` (or of a wrapper that execs it), which is neither set-user-ID nor given
/// capabilities. If this process died before the `prctl`, the child is already an orphan
/// (its parent is no longer this process) and must not start: it checks `getppid()` after
/// the `prctl` (prctl(2)'s advice), so either the signal or the check catches every order.
#[allow(unsafe_code)]
pub(super) fn tie_to_this_process(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: runs in the child between fork and exec and calls only prctl and getppid, which
    // are async-signal-safe; the error is made from a code, without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A worker to start, and where the started child (or why none) goes.
type SpawnRequest = (Command, SyncSender<std::io::Result<Child>>);

/// Starts `command` on the one thread that starts every session worker (`spawner`).
pub(super) fn spawn(command: Command) -> std::io::Result<Child> {
    let (tx, rx) = sync_channel(1);
    spawner()?.send((command, tx)).map_err(|_| std::io::Error::other("the worker spawner has ended"))?;
    rx.recv().map_err(|_| std::io::Error::other("the worker spawner has ended"))?
}

/// The thread that forks every session worker. `PR_SET_PDEATHSIG` fires when the *thread*
/// that forked the child ends, not the process (prctl(2)): forked from a task of Tokio's
/// blocking pool (`open_context` runs on one), a worker would be killed when that pool
/// thread idles out (10 s), with its session live. This thread lives as long as the process:
/// it waits on a channel whose sender is a static, never dropped.
fn spawner() -> std::io::Result<&'static SyncSender<SpawnRequest>> {
    static SPAWNER: OnceLock<SyncSender<SpawnRequest>> = OnceLock::new();
    static START: Mutex<()> = Mutex::new(());
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    let _once = lock(&START);
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    let (tx, rx) = sync_channel::<SpawnRequest>(0);
    std::thread::Builder::new().name("ac-worker-spawner".into()).spawn(move || {
        for (mut command, started) in rx {
            let _ = started.send(command.spawn());
        }
    })?;
    Ok(SPAWNER.get_or_init(|| tx))
}
