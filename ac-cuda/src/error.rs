//! The shim's error: a `CUresult` and, where there is more to say, why (on stderr once).

/// `CUresult` values (cuda.h).
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const INVALID_VALUE: u32 = 1;
    pub const OUT_OF_MEMORY: u32 = 2;
    pub const NOT_INITIALIZED: u32 = 3;
    pub const DEINITIALIZED: u32 = 4;
    pub const NO_DEVICE: u32 = 100;
    pub const INVALID_DEVICE: u32 = 101;
    pub const INVALID_IMAGE: u32 = 200;
    pub const INVALID_CONTEXT: u32 = 201;
    pub const NO_BINARY_FOR_GPU: u32 = 209;
    pub const INVALID_PTX: u32 = 218;
    pub const FILE_NOT_FOUND: u32 = 301;
    pub const PEER_ACCESS_UNSUPPORTED: u32 = 217;
    pub const INVALID_HANDLE: u32 = 400;
    pub const NOT_FOUND: u32 = 500;
    pub const NOT_READY: u32 = 600;
    pub const ILLEGAL_ADDRESS: u32 = 700;
    pub const PEER_ACCESS_NOT_ENABLED: u32 = 705;
    pub const CONTEXT_IS_DESTROYED: u32 = 709;
    pub const LAUNCH_FAILED: u32 = 719;
    pub const COOPERATIVE_LAUNCH_TOO_LARGE: u32 = 720;
    pub const INVALID_CLUSTER_SIZE: u32 = 912;
    pub const NOT_PERMITTED: u32 = 800;
    pub const NOT_SUPPORTED: u32 = 801;
    pub const UNKNOWN: u32 = 999;
}

/// Whether lookups, and calls that fail with no more to say, are traced on stderr
/// (`AC_CUDA_TRACE=1`).
pub fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("AC_CUDA_TRACE").is_ok_and(|v| v == "1"))
}

/// Why a driver call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plain `CUresult`, nothing more to say (a bad argument, a stale handle).
    #[error("CUresult {0}")]
    Code(u32),
    /// A `CUresult` with a reason the program's user should read (printed once per call name).
    #[error("{message}")]
    Said {
        /// The result.
        code: u32,
        /// Why.
        message: String,
    },
    /// The SDK failed the call: the accelerator, its connection or the resource manager.
    #[error(transparent)]
    Remote(#[from] ac_frontend::Error),
}

/// A driver call's result.
pub type CuResult<T> = Result<T, Error>;

impl Error {
    /// An error with a reason for the user.
    pub fn said(code: u32, message: impl Into<String>) -> Self {
        Error::Said { code, message: message.into() }
    }

    /// The `CUresult` the program gets.
    pub fn code(&self) -> u32 {
        match self {
            Error::Code(code) | Error::Said { code, .. } => *code,
            Error::Remote(e) => remote_code(e),
        }
    }

    /// Says why on stderr (what the driver would keep for `cuGetErrorString`), and in the
    /// driver's log, and answers the code. A bare code is said only when tracing
    /// (`AC_CUDA_TRACE=1`), and never logged: runtimes and libraries probe with calls that fail,
    /// and poll with `CUDA_ERROR_NOT_READY`.
    pub fn report(&self, call: &str) -> u32 {
        let bare = matches!(self, Error::Code(_));
        if !bare || tracing() {
            eprintln!("ac-cuda: {call}: {self}");
        }
        if !bare {
            crate::driver_log::record(crate::driver_log::Level::Error, call, &self.to_string());
        }
        self.code()
    }
}

/// A remote refusal of what the backend cannot serve (a CPU device, sessions sharing one
/// process, a backend of an older protocol) becomes `CUDA_ERROR_NOT_SUPPORTED`, with its reason.
pub fn served(e: ac_frontend::Error) -> Error {
    use ac_frontend::{Error as E, ErrorKind as K};
    match e {
        E::Remote { kind: K::NeedsCuda, .. } | E::VersionMismatch(_) => Error::said(code::NOT_SUPPORTED, e.to_string()),
        e => e.into(),
    }
}

/// The `CUresult` closest to an SDK error.
fn remote_code(e: &ac_frontend::Error) -> u32 {
    use ac_frontend::{Error as E, ErrorKind as K};
    match e {
        E::Remote { kind, .. } => match kind {
            K::OutOfMemory => code::OUT_OF_MEMORY,
            K::InvalidBuffer | K::OutOfBounds | K::InvalidArgument => code::INVALID_VALUE,
            K::InvalidModule | K::InvalidFunction | K::InvalidStream => code::INVALID_HANDLE,
            K::UnknownKernel => code::NOT_FOUND,
            K::NeedsCuda => code::NO_BINARY_FOR_GPU,
            K::ModuleLoad => code::INVALID_IMAGE,
            // A kernel fault poisoned the remote context, as CUDA's sticky errors do.
            K::ContextLost => code::LAUNCH_FAILED,
            K::Unauthorized => code::NOT_PERMITTED,
            K::Device | K::Internal => code::UNKNOWN,
        },
        E::InvalidArgument(_) => code::INVALID_VALUE,
        E::DeviceRefused(_) | E::Manager { .. } | E::ManagerUnreachable { .. } => code::NO_DEVICE,
        E::Revoked(_) | E::Disconnected(_) | E::Timeout(_) => code::LAUNCH_FAILED,
        E::VersionMismatch(_) => code::NOT_SUPPORTED,
        E::Protocol(_) | E::Setup(_) => code::UNKNOWN,
    }
}

impl From<u32> for Error {
    fn from(code: u32) -> Self {
        Error::Code(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver_log;

    #[test]
    fn a_reason_is_logged_and_a_bare_code_is_not() {
        let before = driver_log::current();
        assert_eq!(Error::Code(code::INVALID_VALUE).report("cuStreamQuery"), code::INVALID_VALUE);
        assert_eq!(driver_log::current(), before, "a bare code, as a poll's, is no message");
        Error::said(code::INVALID_VALUE, "why").report("cuMemAlloc");
        assert_eq!(driver_log::current(), before.wrapping_add(1));
        let dump = driver_log::dump(Some(before), usize::MAX).unwrap();
        assert!(dump.text.ends_with("][CUDA][E][cuMemAlloc] why\n"), "{}", dump.text);
    }
}
