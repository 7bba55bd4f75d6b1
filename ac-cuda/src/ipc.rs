//! CUDA IPC: the processes of one job hand each other device memory and events by 64-byte
//! handles (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`, `cuIpcGetEventHandle`, ...), as
//! PyTorch's `multiprocessing` shares CUDA tensors and a node's MPI ranks share buffers.
//!
//! A memory handle names the accelerator (its UUID, the same in every process of the job) and
//! the secret its backend gave the allocation (backend protocol 18). The backend opens it only
//! in a session of the same job on the same accelerator, so a handle that reaches another job
//! opens nothing; the memory stays until its owner has freed it and every process that opened
//! it has closed it. As NVIDIA's driver does, a handle is refused in the process that made it
//! (known by its id and a random mark, since processes on other nodes may have the same id),
//! and opening one handle twice in a process answers the same address (closed as often).
//! Opened memory belongs to no context the program creates: it stays until it is closed.
//!
//! An event handle needs no backend: the shim's events are kept in the program's process. A
//! record of an interprocess event waits for the work before it (`stream::record`), so when
//! another process learns of the record (through a pipe, once the record has returned) the work
//! is done, and a wait there on the opened event has nothing left to wait for.

use std::collections::HashMap;
use std::ffi::c_uint;
use std::sync::{Arc, Mutex, OnceLock};

use crate::context::current_device;
use crate::error::{code, served, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Allocation};

/// Bytes of a `CUipcMemHandle` or `CUipcEventHandle`.
const HANDLE_BYTES: usize = 64;
/// The first bytes of the shim's memory handles.
const MEMORY: [u8; 8] = *b"acIPCm\0\x01";
/// The first bytes of the shim's event handles.
const EVENT: [u8; 8] = *b"acIPCe\0\x01";

/// A `CUipcMemHandle` or `CUipcEventHandle`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Handle {
    bytes: [u8; HANDLE_BYTES],
}

/// A process, as handles name the one that made them: its id and a random mark (processes of
/// one job on two nodes may have the same id; a child forked after the mark was drawn has the
/// parent's mark and another id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Maker {
    pid: u32,
    mark: u64,
}

impl Maker {
    /// This process.
    fn this() -> Maker {
        static MARK: OnceLock<u64> = OnceLock::new();
        let mark = *MARK.get_or_init(|| std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8));
        Maker { pid: std::process::id(), mark }
    }

    fn write(&self, to: &mut [u8]) {
        to[..4].copy_from_slice(&self.pid.to_le_bytes());
        to[4..12].copy_from_slice(&self.mark.to_le_bytes());
    }

    fn read(from: &[u8]) -> Maker {
        let pid = u32::from_le_bytes(from[..4].try_into().expect("4 bytes"));
        Maker { pid, mark: u64::from_le_bytes(from[4..12].try_into().expect("8 bytes")) }
    }

    /// Refuses a handle made by this process, as NVIDIA's driver does.
    fn check_other(&self) -> CuResult<()> {
        match *self == Maker::this() {
            true => {
                Err(Error::said(code::INVALID_CONTEXT, "an IPC handle cannot be opened in the process that made it"))
            }
            false => Ok(()),
        }
    }
}

/// What a memory handle says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MemoryHandle {
    uuid: [u8; 16],
    secret: [u8; 16],
    maker: Maker,
}

impl MemoryHandle {
    fn encode(&self) -> Handle {
        let mut bytes = [0; HANDLE_BYTES];
        bytes[..8].copy_from_slice(&MEMORY);
        bytes[8..24].copy_from_slice(&self.uuid);
        bytes[24..40].copy_from_slice(&self.secret);
        self.maker.write(&mut bytes[40..52]);
        Handle { bytes }
    }

    fn decode(handle: &Handle) -> CuResult<Self> {
        let b = &handle.bytes;
        if b[..8] != MEMORY {
            return Err(Error::said(code::INVALID_VALUE, "not an IPC memory handle of this shim's"));
        }
        let field = |r: std::ops::Range<usize>| -> [u8; 16] { b[r].try_into().expect("16 bytes") };
        Ok(MemoryHandle { uuid: field(8..24), secret: field(24..40), maker: Maker::read(&b[40..52]) })
    }
}

/// Memory this process opened, by its secret: where it lies and how often it is open.
#[derive(Debug, Clone, Copy)]
struct Open {
    device: usize,
    address: u64,
    count: usize,
}

fn opened() -> std::sync::MutexGuard<'static, HashMap<[u8; 16], Open>> {
    static OPENED: OnceLock<Mutex<HashMap<[u8; 16], Open>>> = OnceLock::new();
    OPENED.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `address` on `device` is memory opened by `cuIpcOpenMemHandle`.
fn is_opened(device: usize, address: u64) -> bool {
    opened().values().any(|o| o.device == device && o.address == address)
}

/// Refuses a free of memory opened by `cuIpcOpenMemHandle`: `cuIpcCloseMemHandle` closes it.
pub(crate) fn check_not_opened(device: usize, address: u64) -> CuResult<()> {
    match is_opened(device, address) {
        true => Err(Error::said(
            code::INVALID_VALUE,
            "memory opened by cuIpcOpenMemHandle is closed by cuIpcCloseMemHandle",
        )),
        false => Ok(()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcGetMemHandle(out: *mut Handle, address: u64) -> u32 {
    guard("cuIpcGetMemHandle", || {
        let shim = state::shim()?;
        // The allocation holding it, found as `memory::locate` finds one (not called: `memory`
        // asks this module whether memory was opened).
        let device = shim.device_of(address, current_device().ok()).ok_or(Error::Code(code::INVALID_VALUE))?;
        let (allocation, offset) = shim.find(device, address, 1)?;
        let start = address - offset;
        check_shareable(&allocation, device, start)?;
        let secret = shim.block_on(shim.devices[device].acc.export_memory(&allocation.buffer)).map_err(served)?;
        let uuid = shim.devices[device].uuid;
        put(out, MemoryHandle { uuid, secret, maker: Maker::this() }.encode())
    })
}

/// Refuses memory that `cuMemAlloc` did not make: the driver shares only such allocations.
fn check_shareable(allocation: &Allocation, device: usize, start: u64) -> CuResult<()> {
    let what = if crate::pool::of(device, start).is_some() {
        Some("stream-ordered (cuMemAllocAsync) memory")
    } else if crate::managed::range_on(device, start).is_some() {
        Some("managed memory")
    } else if crate::vmm::is_range(device, start) {
        Some("a reserved range (cuMemAddressReserve)")
    } else if crate::graph::memory::is_graph_memory(device, start) {
        Some("graph memory")
    } else if allocation.variable_of.is_some() {
        Some("a module's variable")
    } else if is_opened(device, start) {
        Some("memory opened from another process's handle")
    } else {
        None
    };
    match what {
        Some(what) => Err(Error::said(code::INVALID_VALUE, format!("{what} cannot be shared by an IPC handle"))),
        None => Ok(()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(out: *mut u64, handle: Handle, _flags: c_uint) -> u32 {
    guard("cuIpcOpenMemHandle", || put(out, open_memory(&handle)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle(out: *mut u64, handle: Handle, flags: c_uint) -> u32 {
    cuIpcOpenMemHandle_v2(out, handle, flags)
}

/// Opens the memory `handle` names (again, if this process has it open): its address.
fn open_memory(handle: &Handle) -> CuResult<u64> {
    let handle = MemoryHandle::decode(handle)?;
    handle.maker.check_other()?;
    let shim = state::shim()?;
    let device = device_of_uuid(&handle.uuid)?;
    let mut opened = opened();
    if let Some(open) = opened.get_mut(&handle.secret) {
        open.count += 1;
        return Ok(open.address);
    }
    let imported = shim.block_on(shim.devices[device].acc.import_memory(handle.secret));
    let (buffer, address, size) = imported.map_err(served)?;
    // No created context's: it stays until closed, whatever context was current.
    let allocation = Allocation { device, size, buffer: Arc::new(buffer), variable_of: None, context: None };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, address), allocation);
    opened.insert(handle.secret, Open { device, address, count: 1 });
    Ok(address)
}

/// The device of this process's whose UUID a handle names (one of the job's accelerators).
pub(crate) fn device_of_uuid(uuid: &[u8; 16]) -> CuResult<usize> {
    state::shim()?.devices.iter().position(|d| d.uuid == *uuid).ok_or_else(|| {
        let uuid = crate::uuid::text(uuid);
        let why = format!("the handle's memory is on {uuid}, which this process holds no session on");
        Error::said(code::INVALID_DEVICE, why)
    })
}

#[no_mangle]
pub extern "C" fn cuIpcCloseMemHandle(address: u64) -> u32 {
    guard("cuIpcCloseMemHandle", || {
        let shim = state::shim()?;
        let device = shim.device_of(address, current_device().ok());
        let mut opened = opened();
        let found = opened.iter_mut().find(|(_, o)| Some(o.device) == device && o.address == address);
        let Some((&secret, open)) = found else {
            return Err(Error::said(code::INVALID_VALUE, format!("{address:#x} was not opened by cuIpcOpenMemHandle")));
        };
        open.count -= 1;
        if open.count == 0 {
            let device = open.device;
            opened.remove(&secret);
            // Dropping the buffer closes it remotely, after the work queued before.
            shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(device, address));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcGetEventHandle(out: *mut Handle, event: usize) -> u32 {
    guard("cuIpcGetEventHandle", || {
        if !crate::stream::is_interprocess(event)? {
            return Err(Error::said(code::INVALID_VALUE, "the event was not created with CU_EVENT_INTERPROCESS"));
        }
        let mut bytes = [0; HANDLE_BYTES];
        bytes[..8].copy_from_slice(&EVENT);
        Maker::this().write(&mut bytes[8..20]);
        bytes[20..28].copy_from_slice(&(event as u64).to_le_bytes());
        put(out, Handle { bytes })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenEventHandle(out: *mut usize, handle: Handle) -> u32 {
    guard("cuIpcOpenEventHandle", || {
        state::shim()?;
        if handle.bytes[..8] != EVENT {
            return Err(Error::said(code::INVALID_VALUE, "not an IPC event handle of this shim's"));
        }
        Maker::read(&handle.bytes[8..20]).check_other()?;
        put(out, crate::stream::insert_event(true))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_handle_reads_back_what_it_was_made_of_and_nothing_else_reads_as_one() {
        let handle = MemoryHandle { uuid: [7; 16], secret: [9; 16], maker: Maker { pid: 4242, mark: 77 } };
        assert_eq!(MemoryHandle::decode(&handle.encode()).unwrap(), handle);
        let mut event = handle.encode();
        event.bytes[..8].copy_from_slice(&EVENT);
        assert!(MemoryHandle::decode(&event).is_err(), "an event handle is not a memory handle");
        assert!(MemoryHandle::decode(&Handle { bytes: [0; HANDLE_BYTES] }).is_err());
    }
}
