//! What a session's kernels print, in its worker process.
//!
//! CUDA's device-side `printf` writes into a buffer on the GPU, which the driver writes out to
//! the process's standard output (descriptor 1) at synchronizations. A worker's descriptor 1 was
//! its reply pipe to the backend, so a kernel's `printf` broke the replies and lost the session.
//! [`redirect_stdout`] therefore moves the replies to a descriptor of their own first, and puts
//! a pipe of this module's in place of descriptor 1: whatever the driver (or anything else in
//! the worker) prints is kept here and [`Printed::take`]n with the next reply the worker sends,
//! as [`super::wire::Reply::Printed`], ahead of it. The backend sends it on to the session's
//! client (backend protocol 11's `Response::Printed`), whose program prints it.
//!
//! A thread drains the pipe all along, so that a driver writing more than a pipe holds never
//! waits for the next reply. What a session prints and nobody takes is bounded by [`HELD`].

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Kernel output kept until the next reply; past it, output is dropped and counted (a GPU's
/// printf buffer, 1 MiB by default, drops too when full).
pub const HELD: usize = 4 << 20;

/// The worker's captured standard output.
#[derive(Debug)]
pub struct Printed {
    pipe: File,
    kept: Mutex<Kept>,
}

/// Kernel output not yet sent on: at most [`HELD`] bytes, and a count of those dropped past it.
#[derive(Debug, Default)]
pub struct Kept {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Kept {
    /// Keeps `bytes`, as far as there is room.
    pub fn keep(&mut self, bytes: &[u8]) {
        let room = HELD.saturating_sub(self.bytes.len()).min(bytes.len());
        self.bytes.extend_from_slice(&bytes[..room]);
        self.dropped += (bytes.len() - room) as u64;
    }

    /// Everything kept, and a line saying how much was dropped, if any.
    pub fn take(&mut self) -> Vec<u8> {
        let dropped = std::mem::take(&mut self.dropped);
        let mut bytes = std::mem::take(&mut self.bytes);
        if dropped > 0 {
            bytes.extend_from_slice(format!("\n[ac-backend: {dropped} bytes of kernel output dropped]\n").as_bytes());
        }
        bytes
    }
}

/// Moves this process's standard output to a new descriptor, returned for the worker's replies,
/// and captures what is printed on descriptor 1 from now on.
#[allow(unsafe_code)] // dup, pipe2, dup2 and fcntl on descriptors this function owns
pub fn redirect_stdout() -> io::Result<(File, Arc<Printed>)> {
    let check = |r: i32| if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) };
    // SAFETY: plain descriptor calls; every descriptor made is owned by one value below.
    let (replies, read, write) = unsafe {
        let replies = OwnedFd::from_raw_fd(check(libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3))?);
        let mut ends = [0i32; 2];
        check(libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC))?;
        let (read, write) = (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]));
        check(libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK))?;
        (replies, read, write)
    };
    let printed = Arc::new(Printed { pipe: File::from(read), kept: Mutex::default() });
    let drained = printed.clone();
    std::thread::Builder::new().name("ac-worker-printed".into()).spawn(move || drained.drain())?;
    // Last, once nothing else can fail: until here descriptor 1 still reaches the backend, which
    // then reads why the worker could not start.
    // SAFETY: both descriptors are open; descriptor 1 now names the pipe's write end.
    check(unsafe { libc::dup2(write.as_raw_fd(), 1) })?;
    Ok((File::from(replies), printed))
}

impl Printed {
    /// Everything printed so far: the C library's buffers flushed first (a driver may print
    /// through `stdout`), then the pipe read to its end, so that what the call just answered
    /// printed is in it.
    pub fn take(&self) -> Vec<u8> {
        // SAFETY: flushing every open stream, as `exit` does.
        #[allow(unsafe_code)]
        unsafe {
            libc::fflush(std::ptr::null_mut())
        };
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        self.read_available(&mut kept);
        kept.take()
    }

    /// Reads what the pipe holds now into `kept`, up to [`HELD`]; the rest is counted.
    fn read_available(&self, kept: &mut Kept) {
        let mut chunk = [0u8; 16 << 10];
        loop {
            match (&self.pipe).read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => kept.keep(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return, // WouldBlock: read to the end for now
            }
        }
    }

    /// Keeps the pipe from filling between replies: waits for output and reads it.
    fn drain(&self) {
        let mut ready = libc::pollfd { fd: self.pipe.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one pollfd, owned here.
            #[allow(unsafe_code)]
            let polled = unsafe { libc::poll(&mut ready, 1, -1) };
            if polled < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            self.read_available(&mut kept);
            if ready.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_output_is_bounded_and_says_how_much_was_dropped() {
        let mut kept = Kept::default();
        kept.keep(b"kernel 1\n");
        assert_eq!(kept.take(), b"kernel 1\n");
        assert!(kept.take().is_empty(), "taken once");
        kept.keep(&vec![b'x'; HELD - 1]);
        kept.keep(b"ab\n");
        let taken = kept.take();
        assert_eq!(taken.len(), HELD + "\n[ac-backend: 2 bytes of kernel output dropped]\n".len());
        assert!(taken.ends_with(b"xa\n[ac-backend: 2 bytes of kernel output dropped]\n"));
        kept.keep(b"after\n");
        assert_eq!(kept.take(), b"after\n", "the count starts again");
    }
}
