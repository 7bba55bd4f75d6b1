//! Where a program asked the JIT's logs and wall time to go (`CU_JIT_INFO_LOG_BUFFER` ..
//! `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`, `CU_JIT_WALL_TIME`), as `cuLinkCreate`,
//! `cuModuleLoadDataEx` and `cuLibraryLoadData` take them: addresses in its memory, written
//! when the JIT's work ends, as the driver writes them.

use std::ffi::{c_int, c_uint, c_void};
use std::time::Instant;

use crate::error::{code, CuResult, Error};

/// The `CUjit_option`s of the outputs.
pub(super) mod option {
    pub const WALL_TIME: u32 = 2;
    pub const INFO_LOG_BUFFER: u32 = 3;
    pub const INFO_LOG_BUFFER_SIZE_BYTES: u32 = 4;
    pub const ERROR_LOG_BUFFER: u32 = 5;
    pub const ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
}

/// Where the logs and wall time go (addresses in the program's memory).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Outputs {
    pub info: Log,
    pub errors: Log,
    /// The option value that receives the wall time (a `float`, milliseconds).
    pub wall_time: Option<usize>,
}

/// A log buffer the program gave: its address, capacity, and the option value its size came in
/// (and the bytes written go back to).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Log {
    buffer: Option<usize>,
    capacity: usize,
    size_value: Option<usize>,
}

impl Log {
    /// Writes `text` into the buffer (cut to fit, NUL-terminated) and the bytes written, NUL
    /// left out, into its size's option value.
    ///
    /// # Safety
    /// The buffer holds `capacity` bytes and the size's value is a live `void*`, as the program
    /// promised.
    pub unsafe fn write(&self, text: &str) {
        let (Some(buffer), Some(room)) = (self.buffer, self.capacity.checked_sub(1)) else {
            return;
        };
        let n = text.len().min(room);
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer as *mut u8, n);
        *(buffer as *mut u8).add(n) = 0;
        if let Some(value) = self.size_value {
            *(value as *mut *mut c_void) = n as *mut c_void;
        }
    }
}

impl Outputs {
    /// Takes `option`, whose value is at `slot`, if it is one of the outputs; whether it was.
    ///
    /// # Safety
    /// `slot` is a live option value.
    pub unsafe fn take(&mut self, option: u32, slot: *mut *mut c_void) -> bool {
        let value = *slot as usize;
        match option {
            option::WALL_TIME => self.wall_time = Some(slot as usize),
            option::INFO_LOG_BUFFER => self.info.buffer = Some(value).filter(|&b| b != 0),
            option::ERROR_LOG_BUFFER => self.errors.buffer = Some(value).filter(|&b| b != 0),
            option::INFO_LOG_BUFFER_SIZE_BYTES => {
                (self.info.capacity, self.info.size_value) = (value as c_uint as usize, Some(slot as usize))
            }
            option::ERROR_LOG_BUFFER_SIZE_BYTES => {
                (self.errors.capacity, self.errors.size_value) = (value as c_uint as usize, Some(slot as usize))
            }
            _ => return false,
        }
        true
    }

    /// The outputs among a load's `count` options; the others (compiler options) are not sent:
    /// the backend's driver compiles with its defaults.
    ///
    /// # Safety
    /// `options` and `values` hold `count` entries each, or `count` is 0.
    pub unsafe fn of_load(count: c_uint, options: *const c_int, values: *mut *mut c_void) -> CuResult<Self> {
        let mut outputs = Outputs::default();
        if count == 0 {
            return Ok(outputs);
        }
        if options.is_null() || values.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        for i in 0..count as usize {
            outputs.take(*options.add(i) as u32, values.add(i));
        }
        Ok(outputs)
    }

    /// `load`'s result, with these outputs written: empty logs, or the error (the remote
    /// driver's JIT log with it) in the error log; and the wall time.
    ///
    /// # Safety
    /// As [`Outputs::write`].
    pub unsafe fn around<T>(&self, load: impl FnOnce() -> CuResult<T>) -> CuResult<T> {
        let started = Instant::now();
        let loaded = load();
        match &loaded {
            Ok(_) => self.write(started, Ok("")),
            Err(e) => self.write(started, Err(&e.to_string())),
        }
        loaded
    }

    /// Writes what the JIT's work begun at `started` ended in: its info log and an empty error
    /// log, or an empty info log and the error; and the wall time.
    ///
    /// # Safety
    /// As [`Log::write`]; the wall time's option value is a live `void*`.
    pub unsafe fn write(&self, started: Instant, ended: Result<&str, &str>) {
        if let Some(at) = self.wall_time {
            *(at as *mut f32) = started.elapsed().as_secs_f32() * 1000.0;
        }
        let (info, errors) = match ended {
            Ok(info) => (info, ""),
            Err(error) => ("", error),
        };
        self.info.write(info);
        self.errors.write(errors);
    }
}
