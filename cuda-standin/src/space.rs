//! The host side of the stand-in's virtual memory ([`crate::vmm`]): a reserved range's address
//! space, anonymous and lazily backed, into which mappings place the pages of physical memory,
//! a memory file (`memfd`) each; and an allocation shared with other processes
//! ([`crate::ipc`]), a memory file mapped whole.
// As in lib.rs: raw memory calls (`mmap`), each with its contract stated.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A reserved range's host side.
#[derive(Debug)]
pub struct Space {
    host: *mut u8,
    pub(crate) len: usize,
    /// Its mappings, by offset.
    pub(crate) mappings: BTreeMap<usize, Mapped>,
}

// SAFETY: the space is host memory owned by the driver's state, touched under its lock.
unsafe impl Send for Space {}

/// One mapping of a range.
#[derive(Debug, Clone, Copy)]
pub struct Mapped {
    pub(crate) len: usize,
    pub(crate) physical: u64,
    /// `cuMemSetAccess` made it readable and writable by the device.
    pub(crate) accessible: bool,
}

impl Space {
    pub(crate) fn new(len: usize) -> Option<Space> {
        // SAFETY: a fresh anonymous mapping, placed by the kernel.
        let host = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (host != libc::MAP_FAILED).then_some(Space { host: host.cast(), len, mappings: BTreeMap::new() })
    }

    /// All of the range's bytes (only its accessible mappings' may be touched: [`Space::covers`]).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of address space mapped read-write for the space's life.
        unsafe { std::slice::from_raw_parts(self.host, self.len) }
    }

    /// As [`Space::bytes`], writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is the only way in.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.len) }
    }

    /// Whether every byte of `len` at `offset` (the byte at `offset` when `len` is 0) lies in
    /// an accessible mapping.
    pub fn covers(&self, offset: usize, len: usize) -> bool {
        let end = offset.saturating_add(len.max(1));
        let mut at = offset;
        let first = self.mappings.range(..=offset).next_back().map_or(offset, |(&start, _)| start);
        for (&start, m) in self.mappings.range(first..) {
            if at >= end || start > at || !m.accessible {
                break;
            }
            at = at.max(start + m.len);
        }
        at >= end
    }

    /// Places `len` bytes of `file` at `offset`.
    pub(crate) fn place(&mut self, offset: usize, len: usize, file: &OwnedFd) {
        let flags = libc::MAP_SHARED | libc::MAP_FIXED;
        // SAFETY: `offset + len` lies within the space (checked by the caller), which this
        // replaces pages of; the file holds at least `len` bytes.
        let at = unsafe { self.host.add(offset) };
        let placed =
            unsafe { libc::mmap(at.cast(), len, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), 0) };
        // MAP_FIXED has replaced the pages, or failed and may have dropped them: not a state
        // the range can be read in.
        assert!(placed == at.cast(), "the stand-in could not map {len} bytes into a range");
    }

    /// Puts anonymous pages back over `len` bytes at `offset`.
    pub(crate) fn clear(&mut self, offset: usize, len: usize) {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
        // SAFETY: within the space, as in `place`.
        let at = unsafe { self.host.add(offset) };
        // SAFETY: as above.
        let cleared = unsafe { libc::mmap(at.cast(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        // A failure would leave the old pages (or none) where the range's bytes are read.
        assert!(cleared == at.cast(), "the stand-in could not unmap {len} bytes of a range");
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        // SAFETY: the space's own mapping; nothing refers into it once it is dropped.
        unsafe { libc::munmap(self.host.cast(), self.len) };
    }
}

/// Physical memory of a device.
#[derive(Debug)]
pub struct Physical {
    pub device: i32,
    pub len: usize,
    pub(crate) file: OwnedFd,
    /// `cuMemRelease` was called: it goes when its last mapping does.
    pub(crate) released: bool,
    pub(crate) mappings: u32,
    /// Created asking for POSIX descriptors (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`), or
    /// imported by one: `cuMemExportToShareableHandle` may give one.
    pub(crate) exportable: bool,
    /// Imported from another process's (`cuMemImportFromShareableHandle`): its memory is the
    /// exporter's, not counted again here.
    pub(crate) imported: bool,
}

/// A new memory file (`memfd`, closed on `exec`) of `len` zero bytes.
pub(crate) fn memory_file(name: &std::ffi::CStr, len: usize) -> Option<OwnedFd> {
    // SAFETY: a NUL-terminated name; the descriptor returned is ours alone.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: just created, owned by nothing else.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a descriptor of ours.
    (unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0).then_some(file)
}

/// An allocation's bytes in a memory file, mapped whole: what another process maps too.
#[derive(Debug)]
pub struct Shared {
    host: *mut u8,
    pub(crate) len: usize,
    /// The file (the exporter's descriptor names it to the importers).
    pub(crate) file: OwnedFd,
    /// Opened from another process's handle: closed by `cuIpcCloseMemHandle`, never freed,
    /// and counted as its exporter's memory.
    pub(crate) opened: bool,
}

// SAFETY: as `Space`: host memory owned by the driver's state, touched under its lock.
unsafe impl Send for Shared {}

impl Shared {
    /// A new memory file holding `bytes` (not empty), mapped.
    pub(crate) fn copy_of(bytes: &[u8]) -> Option<Shared> {
        let mut shared = Shared::map(memory_file(c"cuda-standin-ipc", bytes.len())?, bytes.len(), false)?;
        shared.bytes_mut().copy_from_slice(bytes);
        Some(shared)
    }

    /// Another process's memory file, descriptor `fd` of process `pid`, of `len` bytes.
    pub(crate) fn open(pid: u32, fd: i32, len: usize) -> Option<Shared> {
        let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).ok()?;
        // SAFETY: a NUL-terminated path; the descriptor returned is ours alone.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: just opened, owned by nothing else.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero `stat` is valid to be written over.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor of ours and a valid out-pointer.
        if unsafe { libc::fstat(file.as_raw_fd(), &mut stat) } != 0 || (stat.st_size as usize) < len {
            return None;
        }
        Shared::map(file, len, true)
    }

    fn map(file: OwnedFd, len: usize, opened: bool) -> Option<Shared> {
        let flags = libc::MAP_SHARED;
        // SAFETY: the file holds at least `len` bytes; the kernel places the mapping.
        let host = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), 0)
        };
        (host != libc::MAP_FAILED).then_some(Shared { host: host.cast(), len, file, opened })
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped read-write for the value's life.
        unsafe { std::slice::from_raw_parts(self.host, self.len) }
    }

    /// Its bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is the only way in.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the value's own mapping; nothing refers into it once it is dropped.
        unsafe { libc::munmap(self.host.cast(), self.len) };
    }
}
