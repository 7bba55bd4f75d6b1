//! The sessions of children forked after NVML opened the session (each opens its own, in its
//! parent's job), ended by the parent when a child dies without closing them.
//!
//! Why: a child that ends with `_exit` (Python's `multiprocessing` workers do) or is killed
//! runs no exit handler. Its connections go silent, and its backends would hold its sessions,
//! memory and all, for a resumption that never comes: the idle timeout and then the hold, over
//! a minute by default. NVIDIA's driver frees a dead process's memory at once; the shim does so
//! through the parent, which lives on.
//!
//! How: when the parent's session is open and CUDA has not started (only then may a child open
//! a session of its own), the fork's prepare handler makes a pipe (a Unix socket pair, so that
//! a child whose parent is gone gets no `SIGPIPE`), closed on `exec`. The child
//! keeps the writing end; once its session is open it writes its sessions' tickets there
//! ([`Report::Opened`]), and once its exit has closed them, [`Report::Closed`]. The parent keeps
//! the reading end and a task that reads it to its end, which comes when the child has exited,
//! however it exited (a grandchild forked without `exec` closes the end it inherits). Tickets
//! without `Closed` after them are then ended (`ac_frontend::end_session`, backend protocol 17).
//! A child that execs (a subprocess) or never opens a session closes the end unwritten.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_frontend::{end_session, Ended, SessionTicket};
use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;

/// The parent's side of what a watch needs: its runtime, and its session at the resource
/// manager, through which a dead child's session is finalized.
pub(crate) trait Parent: Send + Sync + 'static {
    /// The runtime the watches run on.
    fn runtime(&self) -> &tokio::runtime::Runtime;
    /// `AC_Finalize` of a child's manager session `token`, while the parent's is open.
    fn finalize_other(&self, token: String) -> Option<Finalizing>;
}

/// A child's `AC_Finalize`, under way.
pub(crate) type Finalizing = std::pin::Pin<Box<dyn std::future::Future<Output = ac_frontend::Result<()>> + Send>>;

/// What a child tells its parent through the pipe, a frame each.
#[derive(Debug, Serialize, Deserialize)]
enum Report<T = SessionTicket> {
    /// Its sessions opened: one ticket an accelerator, and its session's token at the resource
    /// manager (none without one).
    Opened { tickets: Vec<T>, job_session: Option<String> },
    /// Its exit closed them.
    Closed,
}

/// The pipe made by the prepare handler for the fork under way (reading end in the high half,
/// writing end in the low), or [`NO_PIPE`].
static PENDING: AtomicU64 = AtomicU64::new(NO_PIPE);
const NO_PIPE: u64 = u64::MAX;
/// In a child: the writing end of its pipe to its parent, or -1.
static TO_PARENT: AtomicI32 = AtomicI32::new(-1);
/// Its inode: a program that closed the descriptor (`closerange` in a daemon's start) may have
/// opened another file under its number, which is written to or closed only if it is still
/// the pipe.
static TO_PARENT_INODE: AtomicU64 = AtomicU64::new(0);
/// In a parent: the children being watched.
static WATCHED: Mutex<Vec<Watch>> = Mutex::new(Vec::new());

/// One child's pipe, read by its task.
#[derive(Debug)]
struct Watch {
    fd: Arc<OwnedFd>,
    task: JoinHandle<()>,
    /// The process that watches: a child forked later inherits the list, whose tasks run on a
    /// runtime it has no thread of.
    owner: u32,
}

/// This process's watches, those inherited from a parent closed and forgotten (their tasks
/// are the parent's: never touched here).
fn own_watches() -> std::sync::MutexGuard<'static, Vec<Watch>> {
    let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id();
    if watched.iter().any(|w| w.owner != me) {
        let (mine, inherited): (Vec<Watch>, Vec<Watch>) =
            std::mem::take(&mut *watched).into_iter().partition(|w| w.owner == me);
        *watched = mine;
        for watch in inherited {
            // SAFETY: this process's copy of a parent's reading end, used by nothing here.
            unsafe { libc::close(watch.fd.as_raw_fd()) };
            std::mem::forget(watch);
        }
    }
    watched
}

/// In the fork's prepare handler: a pipe for the child (which may open a session of its own).
pub(crate) fn prepare_pipe() {
    let mut fds = [-1; 2];
    // A socket pair rather than a pipe: the child writes with `MSG_NOSIGNAL`, so that a parent
    // gone (or that closed its end) costs it no `SIGPIPE`.
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return;
    }
    let pending = (u64::from(fds[0] as u32) << 32) | u64::from(fds[1] as u32);
    close_pipe(PENDING.swap(pending, Ordering::AcqRel));
}

/// In the fork's parent handler: keeps the reading end of the child's pipe, if one was made,
/// and watches it on `parent`'s runtime (none: closes it).
pub(crate) fn keep_reading_end(parent: Option<&'static dyn Parent>) {
    let pending = PENDING.swap(NO_PIPE, Ordering::AcqRel);
    if pending == NO_PIPE {
        return;
    }
    let (read, write) = split(pending);
    // SAFETY: both ends were made by `prepare_pipe` for this fork and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) };
    drop(write);
    if let Some(parent) = parent {
        watch(parent, read);
    }
}

/// The fork's child handler (async-signal-safe: descriptors only): keeps the writing end of its
/// own pipe, and closes the one it inherited from its parent's side of the family (its
/// parent's pipe to the grandparent is not its to hold open).
pub(crate) fn in_child() {
    let inherited = TO_PARENT.swap(-1, Ordering::AcqRel);
    if inherited >= 0 && socket_inode(inherited) == Some(TO_PARENT_INODE.load(Ordering::Acquire)) {
        // SAFETY: a descriptor this process inherited and nothing else uses.
        unsafe { libc::close(inherited) };
    }
    let pending = PENDING.swap(NO_PIPE, Ordering::AcqRel);
    if pending != NO_PIPE {
        let (read, write) = split(pending);
        // SAFETY: the parent's end, not this process's to use.
        unsafe { libc::close(read) };
        TO_PARENT_INODE.store(socket_inode(write).unwrap_or(0), Ordering::Release);
        TO_PARENT.store(write, Ordering::Release);
    }
}

/// In a child: tells the parent the tickets of the sessions it opened and its session's token
/// at the manager.
pub(crate) fn report_opened(tickets: Vec<SessionTicket>, job_session: Option<String>) {
    // The reading ends of its parent's other children, inherited: closed, so that a sibling's
    // tickets reach their parent alone.
    drop(own_watches());
    report(&Report::Opened { tickets, job_session });
}

/// In a child: tells the parent its exit closed its sessions (nothing is left to end).
pub(crate) fn report_closed() {
    report(&Report::Closed);
}

fn report(report: &Report) {
    let fd = TO_PARENT.load(Ordering::Acquire);
    if fd < 0 || socket_inode(fd) != Some(TO_PARENT_INODE.load(Ordering::Acquire)) {
        return;
    }
    let mut frame = Vec::new();
    if ac_proto::frame::encode_frame(report, &mut frame).is_err() {
        return;
    }
    let mut written = 0;
    while written < frame.len() {
        // SAFETY: `frame[written..]` is readable for its length.
        let n = unsafe { libc::send(fd, frame[written..].as_ptr().cast(), frame.len() - written, libc::MSG_NOSIGNAL) };
        match n {
            n if n > 0 => written += n as usize,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            // The parent is gone: nobody to tell.
            _ => return,
        }
    }
}

/// Watches a child's pipe on the parent's runtime.
fn watch(parent: &'static dyn Parent, read: OwnedFd) {
    // SAFETY: setting a flag of a descriptor owned here.
    unsafe {
        let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let fd = Arc::new(read);
    let task = parent.runtime().spawn(end_when_dead(parent, fd.clone()));
    let mut watched = own_watches();
    watched.retain(|w| !w.task.is_finished());
    watched.push(Watch { fd, task, owner: std::process::id() });
}

/// Waits for the child's death (its pipe's end) and ends what it left open.
async fn end_when_dead(parent: &'static dyn Parent, fd: Arc<OwnedFd>) {
    if let Some(bytes) = read_to_end(fd).await {
        if let Some((tickets, job_session)) = left_open::<SessionTicket>(&bytes) {
            end_left_open(parent, tickets, job_session).await;
        }
    }
}

/// Everything the child wrote, once every writing end is closed; `None` if the pipe fails.
async fn read_to_end(fd: Arc<OwnedFd>) -> Option<Vec<u8>> {
    // SAFETY: the descriptor stays open while registered: the `AsyncFd` holds its owner.
    let pipe = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut ready = pipe.readable().await.ok()?;
        // SAFETY: `chunk` is writable for its length.
        let read =
            ready.try_io(|fd| match unsafe { libc::read(fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) } {
                n if n >= 0 => Ok(n as usize),
                _ => Err(std::io::Error::last_os_error()),
            });
        match read {
            Ok(Ok(0)) => return Some(bytes),
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(_)) => return None,
            Err(_would_block) => {}
        }
    }
}

/// How long ending one of a dead child's sessions may take (a backend that does not answer
/// keeps it for its hold).
const END_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends a dead child's sessions: on their backends first (their memory), then at the manager.
async fn end_left_open(parent: &'static dyn Parent, tickets: Vec<SessionTicket>, job_session: Option<String>) {
    let mut ending = tokio::task::JoinSet::new();
    for ticket in tickets {
        ending.spawn(async move {
            let ended = tokio::time::timeout(END_LIMIT, end_session(&ticket)).await.unwrap_or_else(|_| {
                Err(ac_frontend::Error::Timeout(format!("the backend did not answer in {END_LIMIT:?}")))
            });
            (ticket, ended)
        });
    }
    while let Some(Ok((ticket, ended))) = ending.join_next().await {
        match ended {
            Ok(Ended::Now) => {
                eprintln!("ac-cuda: a child process ended without closing its session on {}: ended now", ticket.addr)
            }
            Ok(Ended::Already) => {}
            Err(e) => eprintln!(
                "ac-cuda: a child process ended without closing its session on {}, which could not be ended ({e}): \
                 its backend holds it until its hold runs out",
                ticket.addr
            ),
        }
    }
    if let Some(finalizing) = job_session.and_then(|token| parent.finalize_other(token)) {
        if let Err(e) = finalizing.await {
            eprintln!("ac-cuda: a child process ended without AC_Finalize, which its parent could not do for it: {e}");
        }
    }
}

/// What a child's reports leave open: the tickets and manager session of its last `Opened`
/// with no `Closed` after it.
fn left_open<T: serde::de::DeserializeOwned>(mut bytes: &[u8]) -> Option<(Vec<T>, Option<String>)> {
    let mut open = None;
    while bytes.len() >= 4 {
        let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        let Some(frame) = bytes.get(4..4 + len) else { break };
        match ac_proto::codec::decode::<Report<T>>(frame) {
            Ok(Report::Opened { tickets, job_session }) => open = Some((tickets, job_session)),
            Ok(Report::Closed) => open = None,
            Err(_) => break,
        }
        bytes = &bytes[4 + len..];
    }
    open
}

/// At the parent's exit: waits (within `limit`) for the watches of children that have exited
/// to end what they left; children still running keep their sessions, which are theirs.
pub(crate) async fn settle_at_exit(limit: std::time::Duration) {
    let watched = std::mem::take(&mut *own_watches());
    let mut ending = Vec::new();
    for watch in watched {
        if watch.task.is_finished() {
            continue;
        }
        if writers_gone(&watch.fd) {
            ending.push(watch.task);
        } else {
            watch.task.abort();
        }
    }
    let _ = tokio::time::timeout(limit, async {
        for task in ending {
            let _ = task.await;
        }
    })
    .await;
}

/// Whether every writing end of a pipe is closed (its child, and whatever inherited the end,
/// exited), without reading it.
fn writers_gone(fd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: 0, revents: 0 };
    // SAFETY: one pollfd, not waited on.
    unsafe { libc::poll(&mut poll, 1, 0) == 1 && poll.revents & libc::POLLHUP != 0 }
}

/// The inode of socket `fd` (none: not an open socket). `fstat` is async-signal-safe.
fn socket_inode(fd: i32) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value, filled by `fstat`.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is writable; a closed descriptor is an error, not a fault.
    let ok = unsafe { libc::fstat(fd, &mut stat) } == 0;
    (ok && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(stat.st_ino)
}

/// The two descriptors of a pending pipe: (reading, writing).
fn split(pending: u64) -> (i32, i32) {
    ((pending >> 32) as u32 as i32, pending as u32 as i32)
}

/// Closes a pending pipe left over (none, normally).
fn close_pipe(pending: u64) {
    if pending != NO_PIPE {
        let (read, write) = split(pending);
        // SAFETY: descriptors made by `prepare_pipe` and owned by nothing else.
        unsafe {
            libc::close(read);
            libc::close(write);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(reports: &[Report<u32>]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for report in reports {
            ac_proto::frame::encode_frame(report, &mut bytes).unwrap();
        }
        bytes
    }

    fn opened(tickets: Vec<u32>, job_session: Option<&str>) -> Report<u32> {
        Report::Opened { tickets, job_session: job_session.map(String::from) }
    }

    #[test]
    fn a_child_that_opened_and_never_closed_leaves_its_last_tickets() {
        let first = frames(&[opened(vec![1, 2], Some("t"))]);
        assert_eq!(left_open::<u32>(&first), Some((vec![1, 2], Some("t".into()))));
        let twice = frames(&[opened(vec![1], None), Report::Closed, opened(vec![3], None)]);
        assert_eq!(left_open::<u32>(&twice), Some((vec![3], None)));
        // A frame cut off by the child's death: what came before it stands.
        assert_eq!(left_open::<u32>(&first[..first.len() - 1]), None);
        let cut = [first.clone(), frames(&[Report::Closed])[..3].to_vec()].concat();
        assert_eq!(left_open::<u32>(&cut), Some((vec![1, 2], Some("t".into()))));
    }

    #[test]
    fn a_child_that_closed_leaves_nothing_open() {
        assert_eq!(left_open::<u32>(&frames(&[opened(vec![1], Some("t")), Report::Closed])), None);
        assert_eq!(left_open::<u32>(&[]), None);
    }

    #[test]
    fn a_pipe_split_gives_back_both_descriptors() {
        let pending = (u64::from(7u32) << 32) | u64::from(9u32);
        assert_eq!(split(pending), (7, 9));
    }
}
