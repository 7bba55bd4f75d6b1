//! The program's own MPI, found at run time: libac calls the MPI that the program calling
//! `AC_Init_comm` has loaded already, so that libac.so needs no `libmpi.so` of its own and
//! programs without MPI run with any MPI, or none, installed (issue 54).
//!
//! The functions are looked up in the program's global scope (`RTLD_DEFAULT`: a program linked
//! with `-lmpi`, or a profiling layer in front of it), then in an Open MPI library loaded
//! locally (`RTLD_LOCAL`, as a Python extension module loads it), never loading one.
//!
//! Only Open MPI's ABI is spoken (the MPI libac is built and shipped with): its handles
//! (`MPI_Comm`, `MPI_Datatype`, `MPI_Op`) are pointers and its predefined ones are the
//! addresses of its globals (`MPI_BYTE` is `&ompi_mpi_byte`). MPICH and its derivatives (Intel
//! MPI, MVAPICH, Cray MPICH) pass `int` handles and define `MPI_Comm_f2c` as a macro: such a
//! program is told so with `AC_ERROR_MPI`, rather than having its handles misread.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use ac_frontend::mpi::Communicator;
use ac_frontend::Error;

use crate::error::{acError, Failure, Outcome};

/// A communicator as Open MPI's `mpi.h` declares it (a pointer); the C header takes the
/// program's own `MPI_Comm` from `mpi.h`.
#[allow(non_camel_case_types)]
pub type MPI_Comm = *mut c_void;

/// An Open MPI datatype or reduction operation handle.
type Handle = *mut c_void;

/// MPICH's `MPI_MAX_LIBRARY_VERSION_STRING`, the larger of the two.
const VERSION_MAX: usize = 8192;

/// The MPI functions and predefined handles libac uses, from the program's Open MPI.
struct Mpi {
    initialized: unsafe extern "C" fn(*mut c_int) -> c_int,
    finalized: unsafe extern "C" fn(*mut c_int) -> c_int,
    comm_dup: unsafe extern "C" fn(MPI_Comm, *mut MPI_Comm) -> c_int,
    comm_free: unsafe extern "C" fn(*mut MPI_Comm) -> c_int,
    comm_rank: unsafe extern "C" fn(MPI_Comm, *mut c_int) -> c_int,
    comm_size: unsafe extern "C" fn(MPI_Comm, *mut c_int) -> c_int,
    comm_f2c: unsafe extern "C" fn(c_int) -> MPI_Comm,
    barrier: unsafe extern "C" fn(MPI_Comm) -> c_int,
    bcast: unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, MPI_Comm) -> c_int,
    allgather: unsafe extern "C" fn(*const c_void, c_int, Handle, *mut c_void, c_int, Handle, MPI_Comm) -> c_int,
    allreduce: unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, MPI_Comm) -> c_int,
    byte: Handle,
    int: Handle,
    min: Handle,
    comm_null: MPI_Comm,
}

// SAFETY: the fields are addresses of functions and of constant globals of the MPI library,
// which stays loaded while the program uses MPI; any thread may call MPI through them (MPI's
// thread level is the program's business, as with direct calls).
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

static MPI: OnceLock<Mpi> = OnceLock::new();

/// The program's MPI; found once, and looked for again while it is not loaded (a program may
/// load it later).
fn mpi() -> Outcome<&'static Mpi> {
    if let Some(mpi) = MPI.get() {
        return Ok(mpi);
    }
    let found = Mpi::find()?;
    Ok(MPI.get_or_init(|| found))
}

fn mpi_error(message: impl Into<String>) -> Failure {
    Failure::new(acError::AC_ERROR_MPI, message)
}

/// `name` in `scope` (a `dlopen` handle, or `RTLD_DEFAULT`), if there.
fn symbol(scope: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; dlsym only looks the name up.
    let found = unsafe { libc::dlsym(scope, name.as_ptr()) };
    (!found.is_null()).then_some(found)
}

/// Where the program's MPI is: the global scope, or an Open MPI library already loaded.
fn scope() -> Option<*mut c_void> {
    if symbol(libc::RTLD_DEFAULT, c"MPI_Initialized").is_some() {
        return Some(libc::RTLD_DEFAULT);
    }
    [c"libmpi.so.40", c"libmpi.so"].into_iter().find_map(|library| {
        // SAFETY: RTLD_NOLOAD only returns a library that is loaded already; none is loaded or
        // initialized here. The handle is kept: it keeps the library loaded for `MPI`.
        let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!handle.is_null() && symbol(handle, c"MPI_Initialized").is_some()).then_some(handle)
    })
}

/// The first line of `MPI_Get_library_version`, to name an MPI libac cannot use.
fn library_version(scope: *mut c_void) -> String {
    let Some(get) = symbol(scope, c"MPI_Get_library_version") else { return "an MPI that is not Open MPI".into() };
    // SAFETY: MPI_Get_library_version(char *version, int *resultlen) in every MPI; callable
    // before MPI_Init.
    type GetVersion = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;
    let get = unsafe { std::mem::transmute::<*mut c_void, GetVersion>(get) };
    let mut text = vec![0u8; VERSION_MAX + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` holds the longest version string of any MPI, and its NUL.
    if unsafe { get(text.as_mut_ptr().cast(), &mut len) } != 0 {
        return "an MPI that is not Open MPI".into();
    }
    let text = CStr::from_bytes_until_nul(&text).map(CStr::to_string_lossy).unwrap_or_default();
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// The function at `address`, as `F`.
///
/// # Safety
/// `F` must be an `unsafe extern "C" fn` type of the function's C signature.
unsafe fn as_function<F: Copy>(address: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>(), "a function pointer");
    // SAFETY: as the caller promises; the sizes match.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) }
}

impl Mpi {
    fn find() -> Outcome<Self> {
        let Some(scope) = scope() else {
            return Err(mpi_error(
                "MPI is not loaded in this program: AC_Init_comm and the other collective forms use the \
                 program's own MPI (link it with mpicc or -lmpi, and call MPI_Init first)",
            ));
        };
        if symbol(scope, c"ompi_mpi_comm_world").is_none() {
            return Err(mpi_error(format!(
                "this program's MPI is {}: libac's collective forms speak Open MPI's ABI only (MPICH and \
                 its derivatives pass integer handles); use Open MPI, or AC_Init and AC_Get on each rank",
                library_version(scope)
            )));
        }
        let data = |name: &CStr| symbol(scope, name).ok_or_else(|| mpi_error(format!("Open MPI has no {name:?}")));
        macro_rules! function {
            ($name:literal) => {{
                let found = data($name)?;
                // SAFETY: the symbol is Open MPI's function of that name, whose C signature
                // (mpi.h) the field's type spells.
                unsafe { as_function(found) }
            }};
        }
        Ok(Self {
            initialized: function!(c"MPI_Initialized"),
            finalized: function!(c"MPI_Finalized"),
            comm_dup: function!(c"MPI_Comm_dup"),
            comm_free: function!(c"MPI_Comm_free"),
            comm_rank: function!(c"MPI_Comm_rank"),
            comm_size: function!(c"MPI_Comm_size"),
            comm_f2c: function!(c"MPI_Comm_f2c"),
            barrier: function!(c"MPI_Barrier"),
            bcast: function!(c"MPI_Bcast"),
            allgather: function!(c"MPI_Allgather"),
            allreduce: function!(c"MPI_Allreduce"),
            byte: data(c"ompi_mpi_byte")?,
            int: data(c"ompi_mpi_int")?,
            min: data(c"ompi_mpi_op_min")?,
            comm_null: data(c"ompi_mpi_comm_null")?,
        })
    }

    /// Fails unless MPI is initialized and not yet finalized: no other MPI call is allowed.
    fn usable(&self) -> Outcome {
        let (mut initialized, mut finalized) = (0, 0);
        // SAFETY: both may be called at any time, and write one int.
        unsafe {
            (self.initialized)(&mut initialized);
            (self.finalized)(&mut finalized);
        }
        match (initialized, finalized) {
            (0, _) => Err(mpi_error("MPI is not initialized: call MPI_Init first")),
            (_, 0) => Ok(()),
            _ => Err(mpi_error("MPI is finalized already: call the collective forms before MPI_Finalize")),
        }
    }
}

/// A private duplicate of the program's communicator, freed when dropped: libac's messages
/// never meet the program's.
pub(crate) struct DlComm {
    mpi: &'static Mpi,
    comm: MPI_Comm,
    rank: c_int,
    size: c_int,
    /// The MPI call that failed, if one did: it makes the collective call's error
    /// `AC_ERROR_MPI` (see [`DlComm::failure`]).
    failed: RefCell<Option<String>>,
}

impl std::fmt::Debug for DlComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DlComm").field("rank", &self.rank).field("size", &self.size).finish_non_exhaustive()
    }
}

impl DlComm {
    /// Duplicates the program's `comm` (a C `MPI_Comm`).
    pub(crate) fn duplicate(comm: MPI_Comm) -> Outcome<Self> {
        let mpi = mpi()?;
        mpi.usable()?;
        let mut dup = mpi.comm_null;
        // SAFETY: `comm` is the program's live communicator, as the header asks; MPI writes `dup`.
        let code = unsafe { (mpi.comm_dup)(comm, &mut dup) };
        if code != 0 {
            return Err(mpi_error(format!("MPI_Comm_dup failed ({code})")));
        }
        let mut this = Self { mpi, comm: dup, rank: 0, size: 0, failed: RefCell::new(None) };
        // SAFETY: `dup` is a live communicator that `this` owns; MPI writes one int each.
        let codes = unsafe { [(mpi.comm_rank)(dup, &mut this.rank), (mpi.comm_size)(dup, &mut this.size)] };
        match codes {
            [0, 0] => Ok(this),
            _ => Err(mpi_error(format!("MPI_Comm_rank or MPI_Comm_size failed ({codes:?})"))),
        }
    }

    /// Duplicates the program's Fortran communicator `comm` (`MPI_Fint`).
    pub(crate) fn from_fortran(comm: c_int) -> Outcome<Self> {
        let mpi = mpi()?;
        mpi.usable()?;
        // SAFETY: MPI_Comm_f2c only converts the Fortran handle the program passed.
        Self::duplicate(unsafe { (mpi.comm_f2c)(comm) })
    }

    /// The C ABI's failure for an error of a collective call over this communicator:
    /// `AC_ERROR_MPI` if one of its MPI calls failed, else `other`'s.
    pub(crate) fn failure(&self, e: Error, other: impl FnOnce(Error) -> Failure) -> Failure {
        match self.failed.borrow_mut().take() {
            Some(message) => mpi_error(message),
            None => other(e),
        }
    }

    /// `Ok` for MPI's success code; otherwise remembers which call failed.
    fn check(&self, call: &str, code: c_int) -> ac_frontend::Result<()> {
        if code == 0 {
            return Ok(());
        }
        let message = format!("{call} failed (MPI error {code})");
        *self.failed.borrow_mut() = Some(message.clone());
        Err(Error::Setup(message))
    }

    fn count(&self, len: usize) -> ac_frontend::Result<c_int> {
        c_int::try_from(len).map_err(|_| Error::InvalidArgument(format!("{len} bytes is too many for one MPI call")))
    }
}

impl Communicator for DlComm {
    fn rank(&self) -> i32 {
        self.rank
    }

    fn size(&self) -> i32 {
        self.size
    }

    fn barrier(&self) -> ac_frontend::Result<()> {
        // SAFETY: `comm` is this value's live communicator.
        self.check("MPI_Barrier", unsafe { (self.mpi.barrier)(self.comm) })
    }

    fn broadcast(&self, root: i32, bytes: &mut [u8]) -> ac_frontend::Result<()> {
        let count = self.count(bytes.len())?;
        // SAFETY: `bytes` holds `count` bytes, which MPI reads (root) or writes (others).
        let code = unsafe { (self.mpi.bcast)(bytes.as_mut_ptr().cast(), count, self.mpi.byte, root, self.comm) };
        self.check("MPI_Bcast", code)
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> ac_frontend::Result<()> {
        let count = self.count(mine.len())?;
        if all.len() != mine.len() * self.size as usize {
            return Err(Error::InvalidArgument("all_gather: the receive buffer is not size() slots".into()));
        }
        let (send, receive) = (mine.as_ptr().cast(), all.as_mut_ptr().cast());
        // SAFETY: `mine` holds `count` bytes and `all` one such slot per rank.
        let code =
            unsafe { (self.mpi.allgather)(send, count, self.mpi.byte, receive, count, self.mpi.byte, self.comm) };
        self.check("MPI_Allgather", code)
    }

    fn all_reduce_min(&self, value: i32) -> ac_frontend::Result<i32> {
        let mut least: c_int = value;
        let (send, receive) = ((&value as *const c_int).cast(), (&mut least as *mut c_int).cast());
        // SAFETY: one int each way.
        let code = unsafe { (self.mpi.allreduce)(send, receive, 1, self.mpi.int, self.mpi.min, self.comm) };
        self.check("MPI_Allreduce", code).map(|()| least)
    }
}

impl Drop for DlComm {
    fn drop(&mut self) {
        let mut finalized = 0;
        // SAFETY: `comm` is this value's; MPI_Finalized may be called at any time.
        unsafe {
            (self.mpi.finalized)(&mut finalized);
            if finalized == 0 {
                (self.mpi.comm_free)(&mut self.comm);
            }
        }
    }
}
