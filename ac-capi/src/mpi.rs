//! The collective forms over an MPI communicator (feature `mpi`). The program initializes MPI;
//! every rank of the communicator makes the same call, and all get the same outcome.

use std::ffi::c_int;

use ac_frontend::blocking::Session;
use ac_frontend::SessionOptions;
use mpi::ffi::MPI_Comm;
use mpi::raw::FromRaw;
use mpi::topology::SimpleCommunicator;

use crate::error::{acError, ffi, Failure, Outcome};
use crate::handles::{handle, write_out};
use crate::session::{acSet, finalize_with, init_with, register_dynamic, session, unregister_dynamic};

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
#[no_mangle]
pub extern "C" fn AC_Init_comm(comm: MPI_Comm, statics: *mut acSet) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        init_with(statics, || Ok(Session::init_on(&comm, SessionOptions::from_env()?)?))
    })
}

/// Collective `AC_Get` over `comm`: each rank asks for `count` accelerators (0 is allowed) and
/// gets its own share in `*set`; granted to all ranks together, as one set, or to none
/// (`AC_ERROR_REJECTED` on every rank).
#[no_mangle]
pub extern "C" fn AC_Get_comm(comm: MPI_Comm, count: c_int, set: *mut acSet) -> acError {
    ffi(|| {
        let count = u32::try_from(count)
            .map_err(|_| Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("count {count}")))?;
        let comm = duplicate(comm)?;
        let guard = session()?;
        let granted = guard.as_ref().expect("checked").get_on(&comm, count)?;
        let granted = granted.ok_or_else(|| {
            Failure::new(acError::AC_ERROR_REJECTED, "the resource manager rejected the collective AC_Get")
        })?;
        write_out(set, handle(register_dynamic(granted)), "the new set")
    })
}

/// Collective `AC_Free` over `comm` of a set obtained by `AC_Get_comm`.
#[no_mangle]
pub extern "C" fn AC_Free_comm(comm: MPI_Comm, set: acSet) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        let guard = session()?;
        let dynamic = unregister_dynamic(set)?;
        Ok(guard.as_ref().expect("checked").free_on(&comm, dynamic)?)
    })
}

/// Collective `AC_Finalize` over `comm`: once every rank is done, each rank's session ends.
#[no_mangle]
pub extern "C" fn AC_Finalize_comm(comm: MPI_Comm) -> acError {
    ffi(|| {
        let comm = duplicate(comm)?;
        finalize_with(|session| Ok(session.finalize_on(&comm)?))
    })
}
