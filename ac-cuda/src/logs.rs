//! The driver's error log's entry points (`cuLogsRegisterCallback`, `cuLogsUnregisterCallback`,
//! `cuLogsCurrent`, `cuLogsDumpToMemory`, `cuLogsDumpToFile`): [`crate::driver_log`] keeps the
//! messages and the callbacks.

use std::ffi::{c_char, c_uint, c_void};
use std::io::Write;

use crate::driver_log::{self, CallbackFn};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::init::text_of;
use crate::state::put;

/// `flags` must be 0 (reserved).
fn no_flags(flags: c_uint) -> CuResult<()> {
    if flags != 0 {
        return Err(Error::said(code::INVALID_VALUE, format!("flags {flags}: reserved, must be 0")));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuLogsRegisterCallback(function: *const c_void, data: *mut c_void, out: *mut usize) -> u32 {
    guard("cuLogsRegisterCallback", || {
        if function.is_null() {
            return Err(Error::said(code::INVALID_VALUE, "the callback cannot be NULL"));
        }
        // SAFETY: a non-null `CUlogsCallback`, as cuda.h types it.
        let function = std::mem::transmute::<*const c_void, CallbackFn>(function);
        let handle = driver_log::register(function, data);
        // The handle is optional: a caller that never unregisters may pass no place for it.
        if !out.is_null() {
            *out = handle;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuLogsUnregisterCallback(handle: usize) -> u32 {
    guard("cuLogsUnregisterCallback", || {
        if !driver_log::unregister(handle) {
            return Err(Error::said(code::INVALID_VALUE, "no such callback"));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLogsCurrent(out: *mut c_uint, flags: c_uint) -> u32 {
    guard("cuLogsCurrent", || {
        no_flags(flags)?;
        put(out, driver_log::current())
    })
}

/// The iterator's message number, if given.
unsafe fn start(iterator: *const c_uint) -> Option<u32> {
    (!iterator.is_null()).then(|| *iterator)
}

#[no_mangle]
pub unsafe extern "C" fn cuLogsDumpToMemory(
    iterator: *mut c_uint,
    buffer: *mut c_char,
    size: *mut usize,
    flags: c_uint,
) -> u32 {
    guard("cuLogsDumpToMemory", || {
        no_flags(flags)?;
        if buffer.is_null() {
            return Err(Error::said(code::INVALID_VALUE, "buffer cannot be NULL"));
        }
        let room = *size.as_ref().ok_or_else(|| Error::said(code::INVALID_VALUE, "size cannot be NULL"))?;
        // One byte is the terminating NUL's: a buffer of none holds not even an empty dump.
        let dump = driver_log::dump(start(iterator), room.saturating_sub(1)).filter(|_| room > 0);
        let Some(dump) = dump else {
            *size = 0;
            return Err(Error::said(code::INVALID_VALUE, format!("{room} bytes hold no log message")));
        };
        std::ptr::copy_nonoverlapping(dump.text.as_ptr(), buffer as *mut u8, dump.text.len());
        *buffer.add(dump.text.len()) = 0;
        *size = dump.text.len();
        if !iterator.is_null() {
            *iterator = dump.next;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLogsDumpToFile(iterator: *mut c_uint, path: *const c_char, flags: c_uint) -> u32 {
    guard("cuLogsDumpToFile", || {
        no_flags(flags)?;
        let path = text_of(path)?.into_owned();
        let dump = driver_log::dump(start(iterator), usize::MAX);
        let dump = dump.expect("any message fits in usize::MAX bytes");
        let wrote = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        wrote
            .and_then(|mut file| file.write_all(dump.text.as_bytes()))
            .map_err(|e| Error::said(code::INVALID_VALUE, format!("{path}: {e}")))?;
        if !iterator.is_null() {
            *iterator = dump.next;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_of_no_bytes_is_not_written() {
        let mut buffer = [b'x' as c_char; 4];
        let (mut size, mut iterator) = (0usize, driver_log::current());
        // SAFETY: a buffer of 4 bytes said to hold 0, a size and an iterator.
        let answer = unsafe { cuLogsDumpToMemory(&mut iterator, buffer.as_mut_ptr(), &mut size, 0) };
        assert_eq!((answer, size), (code::INVALID_VALUE, 0));
        assert_eq!(buffer[0], b'x' as c_char, "nothing written past a buffer of 0 bytes");
        // The refusal was logged: nothing new after it.
        (size, iterator) = (buffer.len(), driver_log::current());
        // SAFETY: as above, 4 bytes said to hold 4.
        let answer = unsafe { cuLogsDumpToMemory(&mut iterator, buffer.as_mut_ptr(), &mut size, 0) };
        assert_eq!((answer, size, buffer[0]), (code::SUCCESS, 0, 0), "nothing new: an empty, terminated dump");
    }
}
