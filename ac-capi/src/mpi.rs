//! The collective forms over an MPI communicator (feature `mpi`). The program initializes MPI;
//! every rank of the communicator makes the same call, and all get the same outcome. libac
//! calls the program's own MPI (Open MPI), found at run time (`dlmpi.rs`).

use std::ffi::c_int;

use ac_frontend::blocking::Session;
use ac_frontend::SessionOptions;

use crate::devices::{acSet, session};
use crate::dlmpi::{DlComm, MPI_Comm};
use crate::error::{acError, ffi, in_session, Failure, Outcome};
use crate::handles::{handle, write_out};
use crate::session::{finalize_with, init_with, register_dynamic, rejected, unregister_dynamic};

/// Collective `AC_Init` over `comm`: a session for every rank; ranks on one node share its
/// static accelerators, each with handles of its own. Without a batch system (`ARM_ACPN`)
/// rank 0 creates the job and the others join it (they must run on rank 0's node).
///
/// Errors: as `AC_Init`, on every rank (the first failing rank's), and `AC_ERROR_MPI` (MPI not
/// loaded in the program, not Open MPI, not initialized, or an MPI call failed).
#[no_mangle]
pub extern "C" fn AC_Init_comm(comm: MPI_Comm, statics: *mut acSet) -> acError {
    init_on(|| DlComm::duplicate(comm), statics)
}

/// Collective `AC_Get` over `comm`: each rank asks for `count` accelerators (0 is allowed) and
/// gets its own share in `*set`; granted to all ranks together, as one set, or to none
/// (`AC_ERROR_REJECTED` on every rank, with the manager's reason and what each rank asked for).
///
/// Errors: as `AC_Get`, the same on every rank (`AC_ERROR_INVALID_ARGUMENT` for `count` < 0),
/// and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Get_comm(comm: MPI_Comm, count: c_int, set: *mut acSet) -> acError {
    get_on(|| DlComm::duplicate(comm), count, set)
}

/// Collective `AC_Free` over `comm` of a set obtained by `AC_Get_comm`.
///
/// Errors: as `AC_Free`, and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Free_comm(comm: MPI_Comm, set: acSet) -> acError {
    free_on(|| DlComm::duplicate(comm), set)
}

/// Collective `AC_Finalize` over `comm`: once every rank is done, each rank's session ends.
///
/// Errors: as `AC_Finalize`, and `AC_ERROR_MPI`.
#[no_mangle]
pub extern "C" fn AC_Finalize_comm(comm: MPI_Comm) -> acError {
    finalize_on(|| DlComm::duplicate(comm))
}

/// `AC_Init_comm` for Fortran: `comm` is a Fortran communicator (`MPI_Fint`: an `integer` of
/// `use mpi`, or `comm%MPI_VAL` of `use mpi_f08`). The Fortran module `ac` calls it
/// `AC_Init_comm`.
#[no_mangle]
pub extern "C" fn AC_Init_fcomm(comm: c_int, statics: *mut acSet) -> acError {
    init_on(|| DlComm::from_fortran(comm), statics)
}

/// `AC_Get_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Get_fcomm(comm: c_int, count: c_int, set: *mut acSet) -> acError {
    get_on(|| DlComm::from_fortran(comm), count, set)
}

/// `AC_Free_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Free_fcomm(comm: c_int, set: acSet) -> acError {
    free_on(|| DlComm::from_fortran(comm), set)
}

/// `AC_Finalize_comm` for Fortran (see `AC_Init_fcomm`).
#[no_mangle]
pub extern "C" fn AC_Finalize_fcomm(comm: c_int) -> acError {
    finalize_on(|| DlComm::from_fortran(comm))
}

/// The body of `AC_Init_comm` and `AC_Init_fcomm`, over the communicator `comm` duplicates.
fn init_on(comm: impl FnOnce() -> Outcome<DlComm>, statics: *mut acSet) -> acError {
    ffi(|| {
        let comm = comm()?;
        init_with(statics, || {
            let options = SessionOptions::from_env()?;
            Session::init_on(&comm, options).map_err(|e| comm.failure(e, Failure::from))
        })
    })
}

/// The body of `AC_Get_comm` and `AC_Get_fcomm`.
fn get_on(comm: impl FnOnce() -> Outcome<DlComm>, count: c_int, set: *mut acSet) -> acError {
    ffi(|| {
        let count = u32::try_from(count).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("count must be at least 0, got {count}"))
        })?;
        if set.is_null() {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the new set"));
        }
        let comm = comm()?;
        let guard = session()?;
        let granted = guard.as_ref().expect("checked").get_on_or_why(&comm, count);
        let granted = granted.map_err(|e| comm.failure(e, in_session))?;
        let granted = granted.map_err(|why| rejected(format!("the collective AC_Get of {why}")))?;
        write_out(set, handle(register_dynamic(granted)), "the new set")
    })
}

/// The body of `AC_Free_comm` and `AC_Free_fcomm`.
fn free_on(comm: impl FnOnce() -> Outcome<DlComm>, set: acSet) -> acError {
    ffi(|| {
        let comm = comm()?;
        let guard = session()?;
        let dynamic = unregister_dynamic(set)?;
        guard.as_ref().expect("checked").free_on(&comm, dynamic).map_err(|e| comm.failure(e, in_session))
    })
}

/// The body of `AC_Finalize_comm` and `AC_Finalize_fcomm`.
fn finalize_on(comm: impl FnOnce() -> Outcome<DlComm>) -> acError {
    ffi(|| {
        let comm = comm()?;
        finalize_with(|session| session.finalize_on(&comm).map_err(|e| comm.failure(e, in_session)))
    })
}
