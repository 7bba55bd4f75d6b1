//! Descriptors between the backend and a session worker: the driver's shareable handles of
//! physical memory (`cuMemExportToShareableHandle` of a POSIX descriptor), which one worker
//! exports and another imports (`session::vmm`'s `import_physical`). Pipes cannot carry a
//! descriptor, so each worker gets a Unix socket of its own at its start (`--session-fds`), on
//! which a descriptor travels as `SCM_RIGHTS` with one byte: from the worker after an export,
//! before its reply; to the worker before an import's call, which takes it first. One transfer
//! at a time on a worker's socket ([`Lane`]), so each call finds its own descriptor.

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
        export()?;
        receive(&socket).map_err(|e| lost(&e))
    }

    /// Sends `fd` to the worker and runs `import`, the call that takes it.
    pub(super) fn import<T>(&self, fd: BorrowedFd<'_>, import: impl FnOnce() -> DeviceResult<T>) -> DeviceResult<T> {
        let socket = self.0.lock().unwrap_or_else(|p| p.into_inner());
        send(&socket, fd).map_err(|e| lost(&e))?;
        import()
    }
}

/// The worker's end, inherited as descriptor `fd` (set once, at the worker's start).
static WORKER_END: OnceLock<UnixStream> = OnceLock::new();

/// Adopts the worker's end of its socket, inherited as `fd`.
#[allow(unsafe_code)]
pub(super) fn adopt(fd: RawFd) {
    // SAFETY: the backend handed this descriptor down to this process alone, and nothing else
    // here owns it.
    let socket = unsafe { UnixStream::from_raw_fd(fd) };
    let _ = WORKER_END.set(socket);
}

/// In the worker: sends `fd` to the backend.
pub(super) fn send_to_backend(fd: BorrowedFd<'_>) -> DeviceResult<()> {
    send(worker_end()?, fd).map_err(|e| lost(&e))
}

/// In the worker: takes the descriptor the backend sent for this call.
pub(super) fn receive_from_backend() -> DeviceResult<OwnedFd> {
    receive(worker_end()?).map_err(|e| lost(&e))
}

fn worker_end() -> DeviceResult<&'static UnixStream> {
    WORKER_END.get().ok_or_else(|| WireError::new(ErrorKind::Internal, "this worker has no socket for descriptors"))
}

fn lost(e: &io::Error) -> WireError {
    WireError::new(ErrorKind::Internal, format!("a shareable handle's descriptor did not pass: {e}"))
}

/// Room for one descriptor's control message.
const CONTROL_BYTES: usize = 64;

/// Sends one byte carrying `fd` (`SCM_RIGHTS`).
#[allow(unsafe_code)]
fn send(socket: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut control = [0u8; CONTROL_BYTES];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE computes a size.
    message.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    // SAFETY: the control buffer holds CMSG_SPACE(one descriptor) bytes (asserted by its size),
    // so the first header and its data lie inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd.as_raw_fd());
    }
    // SAFETY: the message is complete and its buffers live.
    match unsafe { libc::sendmsg(socket.as_raw_fd(), &message, libc::MSG_NOSIGNAL) } {
        1 => Ok(()),
        -1 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::other("a short send")),
    }
}

/// Receives one byte and the descriptor it carries (close-on-exec here).
#[allow(unsafe_code)]
fn receive(socket: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut control = [0u8; CONTROL_BYTES];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_BYTES;
    // SAFETY: the message's buffers are live and as long as it says.
    let got = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
    match got {
        -1 => return Err(io::Error::last_os_error()),
        0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other end closed")),
        _ => {}
    }
    // SAFETY: the kernel filled the control buffer up to msg_controllen; CMSG_FIRSTHDR checks
    // that a header fits, and the data of an SCM_RIGHTS header is descriptors.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null() || (*header).cmsg_level != libc::SOL_SOCKET || (*header).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::other("a byte without a descriptor"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    /// A descriptor sent on one end is a descriptor of the same open file on the other: what
    /// is written through one is read through the other.
    #[test]
    fn a_descriptor_crosses_the_socket_as_the_same_open_file() {
        let (lane, theirs) = Lane::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"shared").unwrap();
        let received = lane.import(file.as_fd(), || Ok(receive(&theirs).unwrap())).unwrap();
        let mut same = std::fs::File::from(received);
        same.seek(std::io::SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        same.read_to_string(&mut text).unwrap();
        assert_eq!(text, "shared");
        send(&theirs, same.as_fd()).unwrap();
        let back = lane.export(|| Ok(())).unwrap();
        assert_ne!(back.as_raw_fd(), same.as_raw_fd(), "a new descriptor of the same file");
        drop(theirs);
        let err = lane.export(|| Ok(())).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Internal, "nothing sent: {}", err.message);
    }
}
