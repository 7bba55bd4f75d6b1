//! The memory a session's bulk copies cross between the backend and its worker: one shared
//! region per worker (a `memfd`, mapped by both), cut into bays of [`BAY_SLOTS`] slots of
//! [`PIECE`] bytes. A bulk copy takes a bay for its whole life; each piece goes through a slot
//! of it, and only the piece's call and reply cross the pipes.
//!
//! Why: through the pipes every byte was copied four times on the host (gathered, into the
//! pipe, out of it, into the device's staging), and a worker's copies on an H100 moved 0.45-0.80
//! of what the same copies moved with the context in the backend's process (`BENCHMARKS.md`,
//! "CUDA device on a GPU"). Through a slot, twice.
//!
//! Who may touch a slot: the backend writes a piece into it, then sends the call that names
//! it, and touches it again only after the reply (an upload's slot is then free; a download's
//! holds the bytes the worker put there). The worker touches a slot only between a call that
//! names it and its reply. The pipe's write and read order the two processes' accesses.
//!
//! The region is created close-on-exec; only the worker it is made for inherits it (its
//! descriptor is opened to it between fork and exec), so no other session's worker can map it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// Bytes of one piece of a bulk copy, and of a slot.
pub const PIECE: usize = 1 << 20;

/// Pieces of one copy on their way at once (to the worker for an upload, asked ahead for a
/// download).
pub const IN_FLIGHT: usize = 3;

/// Slots of a bay: the pieces in flight and the one the backend fills or empties.
pub const BAY_SLOTS: usize = IN_FLIGHT + 1;

/// Bays of a region: bulk copies of one session that can use shared memory at once. A copy
/// that finds none free sends its pieces through the pipe, as before the region existed.
pub const BAYS: usize = 4;

/// Bytes of a region.
const REGION: usize = BAYS * BAY_SLOTS * PIECE;

/// A shared mapping of a memfd.
#[derive(Debug)]
pub struct Region {
    base: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain memory, valid until drop; who writes which slot when is the
// protocol's (module comment), and every access goes through `slot`'s contract.
#[allow(unsafe_code)]
unsafe impl Send for Region {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Region {}

impl Region {
    /// A fresh region of [`REGION`] bytes, close-on-exec.
    #[allow(unsafe_code)]
    pub fn create() -> io::Result<Self> {
        // SAFETY: a NUL-terminated name; the flags are memfd_create's.
        let fd = unsafe { libc::memfd_create(c"ac-worker-copies".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on the memfd this function owns.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), REGION as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd)
    }

    /// Maps the region the backend handed down as descriptor `fd` (a worker's side).
    #[allow(unsafe_code)]
    pub fn inherited(fd: RawFd) -> io::Result<Self> {
        // SAFETY: fstat fills `stat`, and only reads `fd`.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if stat.st_size as usize != REGION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} holds {} bytes, not a region of {REGION}", stat.st_size),
            ));
        }
        // SAFETY: the backend opened `fd` for this process alone; it is owned from here on.
        Self::map(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    #[allow(unsafe_code)]
    fn map(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: a new shared mapping of the whole file, at an address the kernel picks.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                REGION,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { base: base.cast(), len: REGION, fd })
    }

    /// The descriptor, for the worker to inherit.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Slots in the region.
    pub fn slots(&self) -> usize {
        self.len / PIECE
    }

    /// The first `len` bytes of slot `index`, or `None` past the region or the slot.
    ///
    /// # Safety
    /// The caller holds the slot by the protocol (module comment): the other process does not
    /// touch it, and no other reference to it lives in this process, until the slice is gone.
    #[allow(unsafe_code, clippy::mut_from_ref)]
    pub unsafe fn slot(&self, index: usize, len: usize) -> Option<&mut [u8]> {
        if index >= self.slots() || len > PIECE {
            return None;
        }
        // SAFETY: in bounds of the mapping (checked above); exclusive by the caller's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.add(index * PIECE), len) })
    }
}

impl Drop for Region {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no slice outlives `self`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The backend's side: the region and which of its bays are taken.
#[derive(Debug)]
pub struct Bays {
    region: Region,
    taken: Mutex<[bool; BAYS]>,
}

impl Bays {
    /// A fresh region with every bay free.
    pub fn create() -> io::Result<Self> {
        Ok(Self { region: Region::create()?, taken: Mutex::new([false; BAYS]) })
    }

    /// The region's descriptor, for the worker to inherit.
    pub fn fd(&self) -> RawFd {
        self.region.fd()
    }

    /// A free bay, or `None` if every one is in use.
    pub fn take(self: &Arc<Self>) -> Option<Bay> {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let index = taken.iter().position(|t| !t)?;
        taken[index] = true;
        Some(Bay { bays: self.clone(), index })
    }
}

/// One bulk copy's bay, free again when dropped.
#[derive(Debug)]
pub struct Bay {
    bays: Arc<Bays>,
    index: usize,
}

impl Bay {
    /// The region's index of the bay's slot for piece `n` of the copy (the slots take turns).
    pub fn slot_for(&self, n: u64) -> u32 {
        (self.index * BAY_SLOTS + (n % BAY_SLOTS as u64) as usize) as u32
    }

    /// The first `len` bytes of the region's slot `slot`, which must be this bay's.
    ///
    /// # Safety
    /// As [`Region::slot`]: no call naming the slot is in flight to the worker, and no other
    /// slice of it lives.
    #[allow(unsafe_code, clippy::mut_from_ref)]
    pub unsafe fn slot(&self, slot: u32, len: usize) -> &mut [u8] {
        let slot = slot as usize;
        assert!(slot / BAY_SLOTS == self.index, "slot {slot} is not in bay {}", self.index);
        // SAFETY: the caller's contract; `len` at most a piece (checked by `Region::slot`).
        unsafe { self.bays.region.slot(slot, len) }.expect("a bay's slot holds a piece")
    }
}

impl Drop for Bay {
    fn drop(&mut self) {
        self.bays.taken.lock().unwrap_or_else(|p| p.into_inner())[self.index] = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn two_mappings_of_a_region_see_each_others_bytes() {
        let bays = Arc::new(Bays::create().unwrap());
        // SAFETY (both): this test is the only user of either mapping.
        let dup = unsafe { libc::dup(bays.fd()) };
        let other = Region::inherited(dup).unwrap();
        let bay = bays.take().unwrap();
        let slot = bay.slot_for(5);
        unsafe { bay.slot(slot, 3) }.copy_from_slice(b"abc");
        assert_eq!(unsafe { other.slot(slot as usize, 3) }.unwrap(), b"abc");
        assert!(unsafe { other.slot(other.slots(), 1) }.is_none(), "past the region");
        assert!(unsafe { other.slot(0, PIECE + 1) }.is_none(), "past a slot");
    }

    #[test]
    fn bays_run_out_and_come_back() {
        let bays = Arc::new(Bays::create().unwrap());
        let held: Vec<_> = (0..BAYS).map(|_| bays.take().expect("a free bay")).collect();
        assert!(bays.take().is_none());
        let slots: std::collections::HashSet<u32> =
            held.iter().flat_map(|b| (0..BAY_SLOTS as u64).map(|n| b.slot_for(n))).collect();
        assert_eq!(slots.len(), BAYS * BAY_SLOTS, "no two bays share a slot");
        drop(held);
        assert!(bays.take().is_some());
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_descriptor_of_another_size_is_refused() {
        // SAFETY (all three): a memfd this test makes, sizes and closes.
        let fd = unsafe { libc::memfd_create(c"other".as_ptr(), libc::MFD_CLOEXEC) };
        assert_eq!(unsafe { libc::ftruncate(fd, 4096) }, 0);
        assert!(Region::inherited(fd).is_err());
        unsafe { libc::close(fd) };
    }
}
