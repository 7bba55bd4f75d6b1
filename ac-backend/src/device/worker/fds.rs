//! Descriptors between the backend and a session worker: the driver's shareable handles of
//! physical memory (`cuMemExportToShareableHandle` of a POSIX descriptor), which one worker
//! exports and another imports (`session::ipc`'s `import_physical`). Pipes cannot carry a
//! descriptor, so each worker gets a Unix socket of its own at its start (`--session-fds`), on
//! which a descriptor travels as `SCM_RIGHTS` with one byte: from the worker after an export,
//! before its reply; to the worker before an import's call, which takes it first. One transfer
//! at a time on a worker's socket ([`Lane`]), so each call takes the descriptor sent for it; as
//! a guard, one left on it (by a worker that broke that order) is thrown away before the next.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ac_proto::backend::{ErrorKind, WireError};

use crate::device::DeviceResult;

/// How long the backend waits for a worker's descriptor once it has answered its export (it
/// sent it before answering: only a worker that broke the order leaves it waiting).
const WAIT: Duration = Duration::from_secs(30);

/// The backend's end of one worker's socket.
#[derive(Debug)]
pub(super) struct Lane(Mutex<UnixStream>);

impl Lane {
    /// A socket pair: the backend's lane, and the end the worker inherits.
    pub(super) fn pair() -> io::Result<(Lane, UnixStream)> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_read_timeout(Some(WAIT))?;
        Ok((Lane(Mutex::new(ours)), theirs))
    }

    /// Runs `export`, a call after which the worker has sent a descriptor, and takes it.
    pub(super) fn export(&self, export: impl FnOnce() -> DeviceResult<()>) -> DeviceResult<OwnedFd> {
        let socket = self.0.lock().unwrap_or_else(|p| p.into_inner());
        discard_stale(&socket);
        export()?;
        receive(&socket, 0).map_err(|e| lost(&e))
    }

    /// Sends `fd` to the worker and runs `import`, the call that takes it.
    pub(super) fn import<T>(&self, fd: BorrowedFd<'_>, import: impl FnOnce() -> DeviceResult<T>) -> DeviceResult<T> {
        let socket = self.0.lock().unwrap_or_else(|p| p.into_inner());
        discard_stale(&socket);
        send(&socket, fd).map_err(|e| lost(&e))?;
        import()
    }
}

/// Closes what a worker sent that no call took (a guard: a worker that keeps the order sends
/// nothing unasked).
fn discard_stale(socket: &UnixStream) {
    while let Ok(stale) = receive(socket, libc::MSG_DONTWAIT) {
        tracing::warn!("a session worker's descriptor that no call took, closed");
        drop(stale);
    }
}

/// The worker's end, inherited as descriptor `fd` (set once, at the worker's start).
static WORKER_END: OnceLock<UnixStream> = OnceLock::new();

/// Adopts the worker's end of its socket, inherited as `fd`: closed on `exec` from here on.
#[allow(unsafe_code)]
pub(super) fn adopt(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process holds; it changes its flags only.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the backend handed this descriptor down to this process alone, and nothing else
    // here owns it.
    let socket = unsafe { UnixStream::from_raw_fd(fd) };
    let _ = WORKER_END.set(socket);
    Ok(())
}

/// In the worker: sends `fd` to the backend.
pub(super) fn send_to_backend(fd: BorrowedFd<'_>) -> DeviceResult<()> {
    send(worker_end()?, fd).map_err(|e| lost(&e))
}

/// In the worker: takes the descriptor the backend sent for this call.
pub(super) fn receive_from_backend() -> DeviceResult<OwnedFd> {
    receive(worker_end()?, 0).map_err(|e| lost(&e))
}

fn worker_end() -> DeviceResult<&'static UnixStream> {
    WORKER_END.get().ok_or_else(|| WireError::new(ErrorKind::Internal, "this worker has no socket for descriptors"))
}

fn lost(e: &io::Error) -> WireError {
    WireError::new(ErrorKind::Internal, format!("a shareable handle's descriptor did not pass: {e}"))
}

/// Room for a control message of a few descriptors, aligned as a `cmsghdr` must be.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// The one byte a descriptor travels with, and room for its control message.
struct Message {
    byte: [u8; 1],
    iov: libc::iovec,
    control: Control,
    header: libc::msghdr,
}

impl Message {
    /// A message of one byte with room for `control` bytes of control message; its pointers
    /// point into itself, so it is boxed and never moved.
    #[allow(unsafe_code)]
    fn new(control: usize) -> Box<Message> {
        // SAFETY: all zeroes is a valid iovec, msghdr and byte array.
        let mut m: Box<Message> = Box::new(unsafe { std::mem::zeroed() });
        m.iov = libc::iovec { iov_base: m.byte.as_mut_ptr().cast(), iov_len: 1 };
        m.header.msg_iov = &raw mut m.iov;
        m.header.msg_iovlen = 1;
        m.header.msg_control = m.control.0.as_mut_ptr().cast();
        m.header.msg_controllen = control.min(m.control.0.len());
        m
    }
}

/// Sends one byte carrying `fd` (`SCM_RIGHTS`).
#[allow(unsafe_code)]
fn send(socket: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: CMSG_SPACE and CMSG_LEN compute sizes.
    let (space, len) = unsafe { (libc::CMSG_SPACE(FD_BYTES), libc::CMSG_LEN(FD_BYTES)) };
    let m = Message::new(space as usize);
    // SAFETY: the control buffer is aligned for a cmsghdr and holds CMSG_SPACE(one descriptor)
    // bytes (msg_controllen), so CMSG_FIRSTHDR answers a header inside it with room for its data.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&m.header);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = len as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd.as_raw_fd());
    }
    loop {
        // SAFETY: the message is complete and its buffers live.
        match unsafe { libc::sendmsg(socket.as_raw_fd(), &m.header, libc::MSG_NOSIGNAL) } {
            1 => return Ok(()),
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            -1 => return Err(io::Error::last_os_error()),
            _ => return Err(io::Error::other("a short send")),
        }
    }
}

/// Bytes of one descriptor in a control message.
const FD_BYTES: u32 = size_of::<RawFd>() as u32;

/// Receives one byte and the descriptor it carries (close-on-exec here), with `flags` for
/// `recvmsg`. Any more descriptors than one are closed.
#[allow(unsafe_code)]
fn receive(socket: &UnixStream, flags: i32) -> io::Result<OwnedFd> {
    let mut m = Message::new(size_of::<Control>());
    let got = loop {
        // SAFETY: the message's buffers are live and as long as it says.
        let got = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut m.header, flags | libc::MSG_CMSG_CLOEXEC) };
        if got != -1 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break got;
        }
    };
    match got {
        -1 => return Err(io::Error::last_os_error()),
        0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other end closed")),
        _ => {}
    }
    // SAFETY: the kernel filled the control buffer up to msg_controllen; CMSG_FIRSTHDR checks
    // that a header fits in it, and the data of an SCM_RIGHTS header is whole descriptors,
    // `cmsg_len` bytes with the header (checked against the buffer below).
    let fds: Vec<OwnedFd> = unsafe {
        let header = libc::CMSG_FIRSTHDR(&m.header);
        if header.is_null() || (*header).cmsg_level != libc::SOL_SOCKET || (*header).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::other("a byte without a descriptor"));
        }
        let data = libc::CMSG_DATA(header);
        let bytes = ((*header).cmsg_len).saturating_sub(libc::CMSG_LEN(0) as usize);
        let room = m.header.msg_controllen.saturating_sub(data.cast_const().offset_from(m.control.0.as_ptr()) as usize);
        let count = bytes.min(room) / FD_BYTES as usize;
        (0..count).map(|i| OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.cast::<RawFd>().add(i)))).collect()
    };
    if m.header.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("descriptors cut off (closed)"));
    }
    // The first is the one sent; any other is closed as it drops.
    fds.into_iter().next().ok_or_else(|| io::Error::other("a control message without a descriptor"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    /// A descriptor sent on one end is a descriptor of the same open file on the other: what
    /// is written through one is read through the other. One that no call took is thrown away
    /// before the next transfer, and a closed end is an error, not a wait.
    #[test]
    fn a_descriptor_crosses_the_socket_as_the_same_open_file() {
        let (lane, theirs) = Lane::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"shared").unwrap();
        let received = lane.import(file.as_fd(), || Ok(receive(&theirs, 0).unwrap())).unwrap();
        let mut same = std::fs::File::from(received);
        same.seek(std::io::SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        same.read_to_string(&mut text).unwrap();
        assert_eq!(text, "shared");
        let other = tempfile::tempfile().unwrap();
        send(&theirs, other.as_fd()).unwrap(); // stale: no call takes it
        let back = lane.export(|| send(&theirs, same.as_fd()).map_err(|e| lost(&e))).unwrap();
        let (mine, got) = (fstat(same.as_raw_fd()), fstat(back.as_raw_fd()));
        assert_eq!((got.st_dev, got.st_ino), (mine.st_dev, mine.st_ino), "the one sent for the call");
        drop(theirs);
        let err = lane.export(|| Ok(())).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Internal, "nothing sent: {}", err.message);
    }

    #[allow(unsafe_code)]
    fn fstat(fd: RawFd) -> libc::stat {
        // SAFETY: a zeroed stat is valid to fill; `fd` is open.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstat(fd, &mut stat) }, 0);
        stat
    }
}
