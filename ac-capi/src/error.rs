//! Error codes, their strings, and the calling thread's last error message.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::AssertUnwindSafe;

use ac_frontend::{Error, ErrorKind};
use ac_proto::arm::ArmErrorKind;

/// What every function returns: `AC_SUCCESS` (0) or the reason it failed. The message of the
/// calling thread's last failure is `acGetLastErrorMessage()`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum acError {
    /// The call succeeded.
    AC_SUCCESS = 0,
    /// A handle is NULL, already released, or of another kind.
    AC_ERROR_INVALID_HANDLE = 1,
    /// An argument is out of its domain (a NULL pointer, an unknown enum value, a bad size).
    AC_ERROR_INVALID_ARGUMENT = 2,
    /// A copy's operands do not match its direction (a host pointer where an `acMem` belongs).
    AC_ERROR_INVALID_DIRECTION = 3,
    /// A copy, memset or kernel argument reaches outside its `acMem`.
    AC_ERROR_OUT_OF_RANGE = 4,
    /// The accelerator has not enough free memory.
    AC_ERROR_OUT_OF_MEMORY = 5,
    /// `AC_Get`: the resource manager rejected the request; the program goes on with what it has.
    AC_ERROR_REJECTED = 6,
    /// `AC_Init` has not been called (or `AC_Finalize` has).
    AC_ERROR_NOT_INITIALIZED = 7,
    /// `AC_Init` was called twice.
    AC_ERROR_ALREADY_INITIALIZED = 8,
    /// The resource manager refused the request as malformed or conflicting with its state, or
    /// failed (its storage, the batch system); the message has its reason.
    AC_ERROR_MANAGER = 9,
    /// The resource manager cannot be reached.
    AC_ERROR_MANAGER_UNREACHABLE = 10,
    /// The connection to an accelerator was lost (its daemon died or stopped answering, the
    /// network failed); its handles no longer work.
    AC_ERROR_DISCONNECTED = 11,
    /// A kernel module did not load or compile, or has no kernel of that name.
    AC_ERROR_KERNEL = 12,
    /// The operation needs a CUDA device (PTX, cubin, CUDA C on the CPU device).
    AC_ERROR_NEEDS_CUDA = 13,
    /// The device failed while executing (a driver error).
    AC_ERROR_DEVICE = 14,
    /// A kernel fault left this process's context on the accelerator unusable.
    AC_ERROR_CONTEXT_LOST = 15,
    /// `AC_Init`: the resource manager refused this process's job credentials (unknown job,
    /// wrong credential, a node that is not the job's, another user's job); or an accelerator
    /// refused the capability it was handed.
    AC_ERROR_UNAUTHORIZED = 16,
    /// Waiting took longer than allowed.
    AC_ERROR_TIMEOUT = 17,
    /// The peer speaks another protocol version.
    AC_ERROR_VERSION_MISMATCH = 18,
    /// Local set-up failed: environment variables, certificates, sockets.
    AC_ERROR_SETUP = 19,
    /// An MPI operation failed, or the collective call failed on another rank.
    AC_ERROR_MPI = 20,
    /// A bug in this library (it was caught; the process goes on).
    AC_ERROR_INTERNAL = 21,
    /// The resource manager took the accelerator back: its set was freed, the owner of a
    /// preemptible loan took it back after the grace, or its host was removed. Its handles no
    /// longer work; `AC_Free` its set and go on without it (or `AC_Get` another).
    AC_ERROR_REVOKED = 22,
    /// The job's allocation has ended (`armctl job end`, its walltime, the batch system, or this
    /// process's session expired): every accelerator is released already. Stop using them; the
    /// failed `AC_Free` or `AC_Finalize` has released everything locally all the same.
    AC_ERROR_JOB_ENDED = 23,
    /// `acSetDevice`: no accelerator at that index of the set (see `acSetSize`).
    AC_ERROR_INVALID_DEVICE = 24,
    /// The accelerator refuses a new session: its backend's session limit, a GPU in
    /// `EXCLUSIVE_PROCESS` compute mode already in use, or its health. The message says which.
    AC_ERROR_DEVICE_REFUSED = 25,
}

use acError::*;

/// A failure on its way to C: the code, and the message kept for `acGetLastErrorMessage`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: acError,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: acError, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Remote { kind, .. } => match kind {
                ErrorKind::OutOfMemory => AC_ERROR_OUT_OF_MEMORY,
                ErrorKind::OutOfBounds => AC_ERROR_OUT_OF_RANGE,
                ErrorKind::InvalidBuffer | ErrorKind::InvalidFunction | ErrorKind::InvalidStream => {
                    AC_ERROR_INVALID_HANDLE
                }
                ErrorKind::InvalidArgument => AC_ERROR_INVALID_ARGUMENT,
                ErrorKind::InvalidModule | ErrorKind::UnknownKernel | ErrorKind::ModuleLoad => AC_ERROR_KERNEL,
                ErrorKind::NeedsCuda => AC_ERROR_NEEDS_CUDA,
                ErrorKind::Device => AC_ERROR_DEVICE,
                ErrorKind::ContextLost => AC_ERROR_CONTEXT_LOST,
                ErrorKind::Unauthorized => AC_ERROR_UNAUTHORIZED,
                ErrorKind::Internal => AC_ERROR_INTERNAL,
            },
            Error::Manager { kind: ArmErrorKind::Unauthorized, .. } => AC_ERROR_UNAUTHORIZED,
            Error::Manager { .. } => AC_ERROR_MANAGER,
            Error::ManagerUnreachable { .. } => AC_ERROR_MANAGER_UNREACHABLE,
            Error::VersionMismatch(_) => AC_ERROR_VERSION_MISMATCH,
            Error::Disconnected(_) | Error::Protocol(_) => AC_ERROR_DISCONNECTED,
            Error::DeviceRefused(_) => AC_ERROR_DEVICE_REFUSED,
            Error::Revoked(_) => {
                let what = "its set was freed, a preemptible loan's owner took it back, the job ended or its \
                            host was removed: its handles no longer work; AC_Free its set and go on without it";
                let message = format!("{e} ({what}){}", crate::notices::revoked_hint());
                return Self { code: AC_ERROR_REVOKED, message };
            }
            Error::InvalidArgument(_) => AC_ERROR_INVALID_ARGUMENT,
            Error::Timeout(_) => AC_ERROR_TIMEOUT,
            Error::Setup(_) => AC_ERROR_SETUP,
        };
        Self { code, message: e.to_string() }
    }
}

/// The failure of a call made within the session (`AC_Get`, `AC_Free`, `AC_Finalize` and their
/// collective forms): the manager no longer knowing the session's token means that the job's
/// allocation has ended, which the program must hear as such, not as a refused credential.
pub(crate) fn in_session(e: Error) -> Failure {
    match e {
        Error::Manager { kind: ArmErrorKind::Unauthorized, message } => Failure::new(
            AC_ERROR_JOB_ENDED,
            format!(
                "the job's allocation has ended (armctl job end, its walltime, the batch system, or this \
                 process's session expired; the resource manager says: {message}): all its accelerators \
                 are released already; stop using accelerators and finish (AC_Free and AC_Finalize release \
                 what this process still holds here, answering this same code)"
            ),
        ),
        other => other.into(),
    }
}

/// The code and message that libac returns for `e`, for the SDK's other bindings (the Python
/// SDK's exceptions carry the same codes). `in_session`: the call was one of the session's own
/// (`AC_Get`, `AC_Free`, `AC_Finalize`), where an unknown session token means the job ended.
pub fn code_of(e: Error, in_session: bool) -> (acError, String) {
    let failure = if in_session { self::in_session(e) } else { Failure::from(e) };
    (failure.code, failure.message)
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs the body of an exported function: its failure becomes a code and this thread's last
/// message, and a panic stops here, at the boundary.
pub(crate) fn ffi(body: impl FnOnce() -> Outcome) -> acError {
    let failure = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return AC_SUCCESS,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Failure::new(AC_ERROR_INTERNAL, format!("internal error (a bug in libac): {what}"))
        }
    };
    let message = CString::new(failure.message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|last| *last.borrow_mut() = message);
    failure.code
}

/// Each code's description.
const DESCRIPTIONS: &[(acError, &[u8])] = &[
    (AC_SUCCESS, b"success\0"),
    (AC_ERROR_INVALID_HANDLE, b"invalid handle\0"),
    (AC_ERROR_INVALID_ARGUMENT, b"invalid argument\0"),
    (AC_ERROR_INVALID_DIRECTION, b"operands do not match the copy direction\0"),
    (AC_ERROR_OUT_OF_RANGE, b"outside the acMem (a copy, memset or kernel argument past its end)\0"),
    (AC_ERROR_OUT_OF_MEMORY, b"out of device memory\0"),
    (AC_ERROR_REJECTED, b"the resource manager rejected the request\0"),
    (AC_ERROR_NOT_INITIALIZED, b"AC_Init has not been called\0"),
    (AC_ERROR_ALREADY_INITIALIZED, b"AC_Init was already called\0"),
    (AC_ERROR_MANAGER, b"the resource manager refused the request\0"),
    (AC_ERROR_MANAGER_UNREACHABLE, b"the resource manager cannot be reached\0"),
    (AC_ERROR_DISCONNECTED, b"the connection to the accelerator was lost (its daemon or the network failed)\0"),
    (AC_ERROR_KERNEL, b"kernel module or kernel not found or not loadable\0"),
    (AC_ERROR_NEEDS_CUDA, b"the operation needs a CUDA device\0"),
    (AC_ERROR_DEVICE, b"the device failed\0"),
    (AC_ERROR_CONTEXT_LOST, b"the device context was lost after a kernel fault\0"),
    (AC_ERROR_UNAUTHORIZED, b"not authorized (the job's credentials or a capability were refused)\0"),
    (AC_ERROR_TIMEOUT, b"timed out\0"),
    (AC_ERROR_VERSION_MISMATCH, b"protocol version mismatch\0"),
    (AC_ERROR_SETUP, b"set-up failed (environment, certificates, sockets)\0"),
    (AC_ERROR_MPI, b"MPI failed, or the collective call failed on another rank\0"),
    (AC_ERROR_INTERNAL, b"internal error\0"),
    (AC_ERROR_REVOKED, b"the resource manager took the accelerator back (revoked)\0"),
    (AC_ERROR_JOB_ENDED, b"the job's allocation has ended; its accelerators are released\0"),
    (AC_ERROR_INVALID_DEVICE, b"no accelerator at that index of the set\0"),
    (AC_ERROR_DEVICE_REFUSED, b"the accelerator refuses a new session (its limit, its compute mode or its health)\0"),
];

/// A short description of error code `code`, for humans. The string is static; never free it.
/// Never fails: an unknown code gives "unknown error code".
#[no_mangle]
pub extern "C" fn acGetErrorString(code: c_int) -> *const c_char {
    let found = DESCRIPTIONS.iter().find(|(c, _)| *c as c_int == code).map(|(_, text)| *text);
    found.unwrap_or(b"unknown error code\0").as_ptr().cast()
}

/// The message of the calling thread's last failed call ("" if none failed). It stays valid
/// until this thread's next failed call; copy it to keep it.
#[no_mangle]
pub extern "C" fn acGetLastErrorMessage() -> *const c_char {
    LAST.with(|last| last.borrow().as_ptr())
}
