//! The collective forms over an MPI communicator (feature `mpi`). The program initializes MPI;
//! every rank of the communicator makes the same call, and all get the same outcome.

use std::ffi::c_int;

use ac_frontend::blocking::Session;
use ac_frontend::SessionOptions;
use mpi::ffi::MPI_Comm;
use mpi::raw::FromRaw;
use mpi::topology::SimpleCommunicator;

use crate::error::{acError, ffi, in_session, Failure, Outcome};
use crate::handles::{handle, write_out};
use crate::session::{acSet, finalize_with, init_with, register_dynamic, rejected, session, unregister_dynamic};

/// A private duplicate of `comm`, freed when dropped: this library's messages never meet the
/// program's.
fn duplicate(comm: MPI_Comm) -> Outcome<SimpleCommunicator> {
    if !mpi::environment::is_initialized() {
        return Err(Failure::new(acError::AC_ERROR_MPI, "MPI is not initialized: call MPI_Init first"));
    }
    let mut dup: MPI_Comm = unsafe { mpi::ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is the program's live communicator, as the header asks; MPI writes `dup`.
    let code = unsafe { mpi::ffi::MPI_Comm_dup(comm, &mut dup) };
    if code != 0 {
        return Err(Failure::new(acError::AC_ERROR_MPI, format!("MPI_Comm_dup failed ({code})")));
    }
    // SAFETY: `dup` is a fresh intra-communicator that only this value owns.
    Ok(unsafe { SimpleCommunicator::from_raw(dup) })
}

/// Collective `AC_Init` over `comm`: a session for every rank; ranks on one node share its
/// static accelerators, each with handles of its own. Without a batch system (`ARM_ACPN`)
/// rank 0 creates the job and the others join it (they must run on rank 0's node).
///
/// Errors: as `AC_Init`, on every rank (the first failing rank's), and `AC_ERROR_MPI` (MPI not
/// initialized, or an MPI call failed).
#[no_mangle]
pub extern "C" fn AC_Init_comm(comm: MPI_Comm, statics: *mut acSet) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        init_with(statics, || Ok(Session::init_on(&comm, SessionOptions::from_env()?)?))
    })
}

/// Collective `AC_Get` over `comm`: each rank asks for `count` accelerators (0 is allowed) and
/// gets its own share in `*set`; granted to all ranks together, as one set, or to none
/// (`AC_ERROR_REJECTED` on every rank, with the manager's reason and what each rank asked for).
///
/// Errors: as `AC_Get`, the same on every rank (`AC_ERROR_INVALID_ARGUMENT` for `count` < 0),
/// and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Get_comm(comm: MPI_Comm, count: c_int, set: *mut acSet) -> acError {
    ffi(|| {
        let count = u32::try_from(count).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("count must be at least 0, got {count}"))
        })?;
        if set.is_null() {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the new set"));
        }
        let comm = duplicate(comm)?;
        let guard = session()?;
        let granted = guard.as_ref().expect("checked").get_on_or_why(&comm, count).map_err(in_session)?;
        let granted = granted.map_err(|why| rejected(format!("the collective AC_Get of {why}")))?;
        write_out(set, handle(register_dynamic(granted)), "the new set")
    })
}

/// Collective `AC_Free` over `comm` of a set obtained by `AC_Get_comm`.
///
/// Errors: as `AC_Free`, and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Free_comm(comm: MPI_Comm, set: acSet) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        let guard = session()?;
        let dynamic = unregister_dynamic(set)?;
        guard.as_ref().expect("checked").free_on(&comm, dynamic).map_err(in_session)
    })
}

/// Collective `AC_Finalize` over `comm`: once every rank is done, each rank's session ends.
///
/// Errors: as `AC_Finalize`, and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Finalize_comm(comm: MPI_Comm) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        finalize_with(|session| session.finalize_on(&comm).map_err(in_session))
    })
}

/// The C communicator of a Fortran one (`MPI_Comm_f2c`).
fn from_fortran(comm: c_int) -> MPI_Comm {
    if !mpi::environment::is_initialized() {
        // No MPI call before MPI_Init; `duplicate` says what is wrong.
        return unsafe { mpi::ffi::RSMPI_COMM_NULL };
    }
    // SAFETY: MPI_Comm_f2c only converts the Fortran handle the program passed.
    unsafe { mpi::ffi::MPI_Comm_f2c(comm) }
}

/// `AC_Init_comm` for Fortran: `comm` is a Fortran communicator (`MPI_Fint`: an `integer` of
/// `use mpi`, or `comm%MPI_VAL` of `use mpi_f08`). The Fortran module `ac` calls it
/// `AC_Init_comm`.
#[no_mangle]
pub extern "C" fn AC_Init_fcomm(comm: c_int, statics: *mut acSet) -> acError {
    AC_Init_comm(from_fortran(comm), statics)
}

/// `AC_Get_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Get_fcomm(comm: c_int, count: c_int, set: *mut acSet) -> acError {
    AC_Get_comm(from_fortran(comm), count, set)
}

/// `AC_Free_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Free_fcomm(comm: c_int, set: acSet) -> acError {
    AC_Free_comm(from_fortran(comm), set)
}

/// `AC_Finalize_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Finalize_fcomm(comm: c_int) -> acError {
    AC_Finalize_comm(from_fortran(comm))
}
