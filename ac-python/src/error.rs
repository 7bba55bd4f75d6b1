//! SDK errors as Python exceptions. The classes live in `ac/errors.py`, where each derives from
//! `ac.Error` and, where one fits, the matching builtin (`MemoryError`, `ValueError`,
//! `TimeoutError`, `ConnectionError`); each carries libac's code for the same failure.

use ac::acError;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

/// The `ac.errors` class for a libac code.
fn class_of(code: acError) -> &'static str {
    use acError::*;
    match code {
        AC_ERROR_OUT_OF_MEMORY => "OutOfMemoryError",
        AC_ERROR_INVALID_ARGUMENT | AC_ERROR_OUT_OF_RANGE | AC_ERROR_INVALID_DIRECTION | AC_ERROR_INVALID_DEVICE => {
            "InvalidArgumentError"
        }
        AC_ERROR_INVALID_HANDLE => "InvalidHandleError",
        AC_ERROR_TIMEOUT => "TimeoutError",
        AC_ERROR_DISCONNECTED | AC_ERROR_MANAGER_UNREACHABLE => "DisconnectedError",
        AC_ERROR_REVOKED => "RevokedError",
        AC_ERROR_JOB_ENDED => "JobEndedError",
        AC_ERROR_CONTEXT_LOST => "KernelFaultError",
        AC_ERROR_KERNEL | AC_ERROR_NEEDS_CUDA => "KernelError",
        AC_ERROR_REJECTED => "RejectedError",
        AC_ERROR_DEVICE_REFUSED => "DeviceRefusedError",
        AC_ERROR_UNAUTHORIZED | AC_ERROR_MANAGER => "ManagerError",
        AC_ERROR_MPI => "MpiError",
        _ => "Error",
    }
}

/// Builds `ac.errors.<class>(message, code)`.
fn make(class: &str, message: String, code: i32) -> PyErr {
    Python::attach(|py| {
        let built =
            py.import("ac.errors").and_then(|m| m.getattr(class)).and_then(|c| c.call1((message.clone(), code)));
        match built {
            Ok(instance) => PyErr::from_value(instance),
            // The package is broken (the extension imported on its own): still say what failed.
            Err(_) => PyRuntimeError::new_err(format!("{message} (libac code {code})")),
        }
    })
}

/// An SDK error from a call on an accelerator.
pub(crate) fn sdk(e: ac_frontend::Error) -> PyErr {
    raise(e, false)
}

/// An SDK error from one of the session's own calls (get, free, finalize): an unknown token
/// there means that the job's allocation ended.
pub(crate) fn session(e: ac_frontend::Error) -> PyErr {
    raise(e, true)
}

fn raise(e: ac_frontend::Error, in_session: bool) -> PyErr {
    let (code, message) = ac::code_of(e, in_session);
    make(class_of(code), message, code as i32)
}

/// The error of a call made in a child forked after `ac.init()`.
pub(crate) fn fork_error(parent: u32) -> PyErr {
    let message = format!(
        "this process was forked from process {parent} after ac.init(): the session's connections \
         belong to the parent; call ac.init() in the child (or fork before ac.init())"
    );
    make("ForkError", message, acError::AC_ERROR_NOT_INITIALIZED as i32)
}

/// A collective call whose mpi4py collective raised.
pub(crate) fn mpi(message: String) -> PyErr {
    make("MpiError", message, acError::AC_ERROR_MPI as i32)
}

/// A call on something already released (a finalized session, a freed buffer or set).
pub(crate) fn released(what: &str) -> PyErr {
    make("InvalidHandleError", format!("{what} was already released"), acError::AC_ERROR_INVALID_HANDLE as i32)
}

/// An argument error found before anything is sent.
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    make("InvalidArgumentError", message.into(), acError::AC_ERROR_INVALID_ARGUMENT as i32)
}

/// A copy, memset or argument past the end of a buffer, found before anything is sent.
pub(crate) fn out_of_range(message: impl Into<String>) -> PyErr {
    make("InvalidArgumentError", message.into(), acError::AC_ERROR_OUT_OF_RANGE as i32)
}

/// A value of the wrong Python type.
pub(crate) fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}
