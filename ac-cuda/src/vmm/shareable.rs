//! Physical memory shared with the job's other processes (`cuMemExportToShareableHandle`,
//! `cuMemImportFromShareableHandle` of `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`), as
//! PyTorch's expandable segments and NCCL share memory between the processes of a node.
//!
//! The memory is on a remote GPU, so the descriptor a program passes to another process (over
//! a Unix socket, or by `pidfd_getfd`) cannot be the driver's. It is a sealed memory file
//! (`memfd`) that names the accelerator (its UUID, the same in every process of the job), the
//! secret its backend gave the physical memory (backend protocol 19), its size and properties.
//! The backend imports it only in a session of the same job on the same accelerator, so a
//! descriptor that reaches another job imports nothing. An import is physical memory of the
//! importer's, mapped and released as any; the memory goes once every process has released
//! and unmapped it. In the process that exported it, an import is one more reference to the
//! same handle, as `cuMemRetainAllocationHandle` takes. Unlike the driver's, the descriptor
//! holds nothing: an import after the exporter has released and unmapped all of its own (no
//! other process holding an import) finds nothing, and is refused.
//!
//! Not served: the other handle types (a fabric handle names memory on an NVLink fabric that a
//! remote GPU is not on; Windows' handles).

use std::collections::HashMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::{device_of_prop, retain, AllocationProp, Location, Physical, VMM};
use crate::error::{code, served, CuResult, Error};
use crate::guard;
use crate::state::{self, put};

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, a bit of `CUmemAllocationProp::requestedHandleTypes`.
const POSIX_DESCRIPTOR: u32 = 1;
/// The first bytes of the shim's shareable handles.
const MAGIC: [u8; 8] = *b"acVMMfd\x01";
/// Bytes of a handle's file.
const HANDLE_BYTES: usize = 64;
/// The backend protocol that shares physical memory.
const PROTOCOL: u16 = 19;

/// Whether `device` exports physical memory as POSIX descriptors
/// (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`): it serves virtual memory
/// management, behind a backend of protocol 19.
pub fn supported(device: usize) -> bool {
    let protocol = state::shim().ok().and_then(|s| s.devices.get(device).map(|d| d.acc.protocol()));
    protocol.is_some_and(|p| p >= PROTOCOL) && super::supported(device)
}

/// What a handle's file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shareable {
    uuid: [u8; 16],
    secret: [u8; 16],
    size: u64,
    /// `CUmemAllocationProp`'s type, handle types, location type and device (as the exporter
    /// numbers its devices).
    prop: [u32; 4],
}

impl Shareable {
    fn encode(&self) -> [u8; HANDLE_BYTES] {
        let mut bytes = [0; HANDLE_BYTES];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[8..24].copy_from_slice(&self.uuid);
        bytes[24..40].copy_from_slice(&self.secret);
        bytes[40..48].copy_from_slice(&self.size.to_le_bytes());
        for (i, word) in self.prop.iter().enumerate() {
            bytes[48 + 4 * i..52 + 4 * i].copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        (bytes.len() == HANDLE_BYTES && bytes[..8] == MAGIC).then_some(())?;
        let field = |at: usize| -> [u8; 16] { bytes[at..at + 16].try_into().expect("16 bytes") };
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let size = u64::from_le_bytes(bytes[40..48].try_into().expect("8 bytes"));
        Some(Shareable { uuid: field(8), secret: field(24), size, prop: [word(48), word(52), word(56), word(60)] })
    }
}

/// Physical memory this process exported, by secret: an import here takes its handle again.
fn exported() -> std::sync::MutexGuard<'static, HashMap<[u8; 16], Weak<Physical>>> {
    static EXPORTED: OnceLock<Mutex<HashMap<[u8; 16], Weak<Physical>>>> = OnceLock::new();
    let mut exported = EXPORTED.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner());
    exported.retain(|_, p| p.strong_count() > 0);
    exported
}

#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: u64,
    handle_type: u32,
    flags: u64,
) -> u32 {
    guard("cuMemExportToShareableHandle", || {
        check_type(handle_type)?;
        if shareable.is_null() || flags != 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let physical = VMM.physical.get(handle as usize)?;
        if physical.prop.handle_types & POSIX_DESCRIPTOR == 0 {
            let why = "the physical memory was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in its requestedHandleTypes";
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        let shim = state::shim()?;
        let device = &shim.devices[physical.device];
        let secret = shim.block_on(device.acc.export_physical(&physical.memory)).map_err(served)?;
        exported().insert(secret, Arc::downgrade(&physical));
        let p = &physical.prop;
        let prop = [p.kind, p.handle_types, p.location.kind, p.location.id as u32];
        let file = handle_file(&Shareable { uuid: device.uuid, secret, size: physical.memory.len(), prop })?;
        put(shareable.cast::<i32>(), file.into_raw_fd())
    })
}

/// Refuses a handle type other than a POSIX descriptor, saying why.
fn check_type(handle_type: u32) -> CuResult<()> {
    match handle_type {
        POSIX_DESCRIPTOR => Ok(()),
        // Fabric (8): memory on an NVLink fabric; Windows' (2, 4).
        2 | 4 | 8 => Err(Error::said(
            code::NOT_SUPPORTED,
            format!("handle type {handle_type}: remote accelerators share physical memory by POSIX descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) alone"),
        )),
        _ => Err(Error::Code(code::INVALID_VALUE)),
    }
}

/// A sealed memory file holding `handle`, closed on `exec` (the program passes it on as it
/// would the driver's).
fn handle_file(handle: &Shareable) -> CuResult<OwnedFd> {
    let failed = |what: &str| Error::said(code::OUT_OF_MEMORY, format!("{what}: {}", std::io::Error::last_os_error()));
    // SAFETY: a NUL-terminated name; the descriptor returned is ours alone.
    let fd = unsafe { libc::memfd_create(c"ac-cuda-shareable".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(failed("no memory file for a shareable handle"));
    }
    // SAFETY: just created, owned here.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let bytes = handle.encode();
    // SAFETY: `bytes` holds HANDLE_BYTES bytes.
    let wrote = unsafe { libc::pwrite(file.as_raw_fd(), bytes.as_ptr().cast(), HANDLE_BYTES, 0) };
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor owned here.
    if wrote != HANDLE_BYTES as isize || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(failed("cannot write a shareable handle"));
    }
    Ok(file)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(handle: *mut u64, os_handle: *mut c_void, kind: u32) -> u32 {
    guard("cuMemImportFromShareableHandle", || {
        check_type(kind)?;
        if handle.is_null() {
            return Err(Error::Code(code::INVALID_VALUE)); // before a reference is taken
        }
        // The descriptor type passes the descriptor itself as the pointer (cuda.h).
        let shareable = read_handle(os_handle as usize as i32)?;
        if let Some(physical) = exported().get(&shareable.secret).and_then(Weak::upgrade) {
            return put(handle, retain(&physical));
        }
        put(handle, import(&shareable)? as u64)
    })
}

/// What the descriptor `fd` holds, if it is one of the shim's shareable handles.
fn read_handle(fd: i32) -> CuResult<Shareable> {
    let mut bytes = [0u8; HANDLE_BYTES];
    // SAFETY: `bytes` holds HANDLE_BYTES bytes; a descriptor that is not open fails the read.
    let read = unsafe { libc::pread(fd, bytes.as_mut_ptr().cast(), HANDLE_BYTES, 0) };
    let not_one = || {
        Error::said(
            code::INVALID_VALUE,
            format!("descriptor {fd} is not a shareable handle of this shim's (cuMemExportToShareableHandle)"),
        )
    };
    if read != HANDLE_BYTES as isize {
        return Err(not_one());
    }
    Shareable::decode(&bytes).ok_or_else(not_one)
}

/// Imports the physical memory `shareable` names from the backend: its handle.
fn import(shareable: &Shareable) -> CuResult<usize> {
    let device = crate::ipc::device_of_uuid(&shareable.uuid)?;
    let shim = state::shim()?;
    let memory = shim.block_on(shim.devices[device].acc.import_physical(shareable.secret)).map_err(served)?;
    let [kind, handle_types, location, _] = shareable.prop;
    // The location is this process's number of the device.
    let prop = AllocationProp {
        kind,
        handle_types,
        location: Location { kind: location, id: device as i32 },
        win32_metadata: std::ptr::null_mut(),
        flags: [0; 8],
    };
    // SAFETY: the properties are the exporter's, checked there; only the device is checked again.
    let (device, prop) = unsafe { device_of_prop(&prop) }?;
    Ok(VMM.physical.insert(Physical { device, prop, memory, references: Mutex::new(1) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_what_it_was_made_of_and_nothing_else_reads_as_one() {
        let handle = Shareable { uuid: [3; 16], secret: [5; 16], size: 2 << 20, prop: [1, 1, 1, 0] };
        assert_eq!(Shareable::decode(&handle.encode()), Some(handle));
        let mut other = handle.encode();
        other[0] ^= 1;
        assert_eq!(Shareable::decode(&other), None, "another magic");
        assert_eq!(Shareable::decode(&handle.encode()[..40]), None, "cut short");
        let file = handle_file(&handle).unwrap();
        assert_eq!(read_handle(file.as_raw_fd()).unwrap(), handle, "through its file");
        // SAFETY: a sealed file's write is refused, whatever the descriptor.
        let wrote = unsafe { libc::pwrite(file.as_raw_fd(), [0u8].as_ptr().cast(), 1, 0) };
        assert_eq!(wrote, -1, "sealed: a receiver cannot rewrite what it names");
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(read_handle(null.as_raw_fd()).is_err(), "not a handle");
    }
}
