//! `acStreamCreate`, `acStreamSynchronize`, `acStreamDestroy`.

use ac_frontend::blocking;

use crate::devices::{acDevice, DEVICES};
use crate::error::{acError, ffi};
use crate::handles::{handle, value, write_out, Table};

/// A stream on one accelerator: work queued on it runs in order; streams may overlap.
#[allow(non_camel_case_types)]
pub type acStream = *mut acStream_st;

/// Never defined: a handle's value is a tagged number, not an address (opaque to C).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct acStream_st {
    _never: [u8; 0],
}

/// A stream and the accelerator it belongs to.
#[derive(Debug)]
pub(crate) struct StreamEntry {
    pub(crate) device: u64,
    pub(crate) stream: blocking::Stream,
}

pub(crate) static STREAMS: Table<StreamEntry> = Table::new(0xac05, "acStream");

/// Forgets the streams on `device`.
pub(crate) fn forget_on(device: u64) {
    STREAMS.remove_where(|s| s.device == device);
}

/// Creates a stream on `device`.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `stream`), and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acStreamCreate(device: acDevice, stream: *mut acStream) -> acError {
    ffi(|| {
        let created = DEVICES.get(value(device))?.acc.create_stream()?;
        let entry = StreamEntry { device: value(device), stream: created };
        write_out(stream, handle(STREAMS.insert(entry)), "the new acStream")
    })
}

/// Waits for the stream's work; returns its first error since the last synchronize.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, the first error of the stream's work, and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acStreamSynchronize(stream: acStream) -> acError {
    ffi(|| Ok(STREAMS.get(value(stream))?.stream.synchronize()?))
}

/// Waits for the stream's work, then destroys it.
///
/// Errors: as `acStreamSynchronize`.
#[no_mangle]
pub extern "C" fn acStreamDestroy(stream: acStream) -> acError {
    ffi(|| {
        let entry = STREAMS.remove(value(stream))?;
        match std::sync::Arc::try_unwrap(entry) {
            Ok(entry) => Ok(entry.stream.destroy()?),
            Err(entry) => Ok(entry.stream.synchronize()?),
        }
    })
}
