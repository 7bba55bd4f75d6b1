//! `AC_Init`, `AC_Get`, `AC_Free`, `AC_Finalize`, and what a program asks of the sets and devices
//! they hand out (their size, members, information); `devices.rs` holds their handles.

use std::ffi::{c_char, c_int};
use std::sync::Mutex;
use std::time::Duration;

use ac_frontend::blocking::{self, Session};
use ac_frontend::{DeviceKind, GetRequest};

use crate::devices::{acDevice, acSet, session, DeviceEntry, SetEntry, DEVICES, SESSION, SETS};
use crate::error::{acError, ffi, in_session, Failure, Outcome};
use crate::handles::{handle, value, write_out};
use crate::{kernel, memory, notices, stream};

/// Registers accelerators as a set; returns the set's handle.
fn register_set(handles: &[blocking::Handle], dynamic: Option<blocking::DynamicSet>) -> u64 {
    let devices =
        handles.iter().map(|h| DEVICES.insert(DeviceEntry { id: h.id.clone(), acc: h.acc.clone() })).collect();
    let id = dynamic.as_ref().map(|set| set.id);
    SETS.insert(SetEntry { devices: Mutex::new(devices), id, dynamic: Mutex::new(dynamic) })
}

/// Registers a dynamic set.
pub(crate) fn register_dynamic(mut set: blocking::DynamicSet) -> u64 {
    // The device entries take the handles' ids and connections; the set keeps what `AC_Free`
    // gives back.
    let handles = std::mem::take(&mut set.handles);
    register_set(&handles, Some(set))
}

/// Takes a dynamic set out of its handle, with everything made on its devices.
pub(crate) fn unregister_dynamic(set: acSet) -> Outcome<blocking::DynamicSet> {
    let entry = SETS.get(value(set))?;
    let Some(dynamic) = entry.dynamic.lock().expect("set poisoned").take() else {
        return Err(Failure::new(
            acError::AC_ERROR_INVALID_ARGUMENT,
            "the static set is released by AC_Finalize, not AC_Free",
        ));
    };
    SETS.remove(value(set))?;
    for device in entry.devices() {
        forget_device(device);
    }
    Ok(dynamic)
}

/// Forgets a device and the memory, kernels and streams made on it.
pub(crate) fn forget_device(device: u64) {
    memory::forget_on(device);
    kernel::forget_on(device);
    stream::forget_on(device);
    DEVICES.remove(device).ok();
}

/// Opens the process's session (`AC_Init`) with `open`, registering its static set.
pub(crate) fn init_with(statics: *mut acSet, open: impl FnOnce() -> Outcome<Session>) -> Outcome {
    if statics.is_null() {
        return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the static set"));
    }
    let mut slot = SESSION.write().expect("session poisoned");
    if slot.is_some() {
        return Err(Failure::new(acError::AC_ERROR_ALREADY_INITIALIZED, "AC_Init was already called"));
    }
    let session = open()?;
    // Kernels' printf lines keep their place among the program's own.
    ac_frontend::set_kernel_output(ac_frontend::print_through_c_stdout);
    let set = register_set(session.accelerators(), None);
    *slot = Some(session);
    write_out(statics, handle(set), "the static set")
}

/// Ends the process's session (`AC_Finalize`) with `close`, forgetting every handle.
pub(crate) fn finalize_with(close: impl FnOnce(Session) -> Outcome) -> Outcome {
    let mut slot = SESSION.write().expect("session poisoned");
    let session =
        slot.take().ok_or_else(|| Failure::new(acError::AC_ERROR_NOT_INITIALIZED, "AC_Init was not called"))?;
    for set in SETS.remove_where(|_| true) {
        for device in set.devices() {
            forget_device(device);
        }
    }
    notices::forget();
    close(session)
}

pub(crate) fn count_arg(n: c_int, what: &str) -> Outcome<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("{what} must be at least 1, got {n}")))
}

pub(crate) fn rejected(what: String) -> Failure {
    Failure::new(acError::AC_ERROR_REJECTED, format!("the resource manager rejected {what}"))
}

/// Starts this process's use of accelerators and gives the set of accelerators bound to this
/// job on this node before it started (empty if none). Waits while the job is queued.
///
/// The environment says where the resource manager is and who the job is: `ARM_ADDR`,
/// `ARM_CA_CERT`, then `ARM_JOB_ID` and `ARM_JOB_CREDENTIAL` (a batch job) or `ARM_ACPN`
/// (no batch system: an ad-hoc job of `ARM_ACPN` accelerators); optionally `ARM_NODE`,
/// `ARM_INIT_TIMEOUT_S`, `AC_STRIPES`.
///
/// Errors: `AC_ERROR_INVALID_ARGUMENT` (NULL `statics`), `AC_ERROR_ALREADY_INITIALIZED`,
/// `AC_ERROR_SETUP` (a variable missing or wrong, an unreadable CA file),
/// `AC_ERROR_MANAGER_UNREACHABLE`, `AC_ERROR_UNAUTHORIZED` (unknown job, wrong credential, a
/// node that is not the job's), `AC_ERROR_MANAGER` (ad-hoc jobs not allowed, too many
/// accelerators asked), `AC_ERROR_TIMEOUT` (still queued after `ARM_INIT_TIMEOUT_S`),
/// `AC_ERROR_DISCONNECTED`, `AC_ERROR_VERSION_MISMATCH`.
#[no_mangle]
pub extern "C" fn AC_Init(statics: *mut acSet) -> acError {
    ffi(|| init_with(statics, || Ok(Session::from_env()?)))
}

/// Asks for `count` more accelerators now: granted whole (`*set` is the new set) or rejected
/// (`AC_ERROR_REJECTED`; the program goes on with what it has).
///
/// Errors: `AC_ERROR_INVALID_ARGUMENT` (`count` < 1, NULL `set`), `AC_ERROR_NOT_INITIALIZED`,
/// `AC_ERROR_REJECTED` (the message says why: too few idle, an advance reservation, the
/// fairness policy), `AC_ERROR_MANAGER` (more than exist), `AC_ERROR_MANAGER_UNREACHABLE`,
/// `AC_ERROR_JOB_ENDED`, `AC_ERROR_DISCONNECTED` (a granted accelerator could not be reached;
/// the grant is released).
#[no_mangle]
pub extern "C" fn AC_Get(count: c_int, set: *mut acSet) -> acError {
    AC_GetRange(count, count, 0, set)
}

/// Asks for between `min` and `max` more accelerators, waiting up to `wait_s` seconds for at
/// least `min` of them. `AC_ERROR_REJECTED` if they cannot be had in time.
///
/// Errors: as `AC_Get` (`AC_ERROR_INVALID_ARGUMENT` also for `min` > `max`).
#[no_mangle]
pub extern "C" fn AC_GetRange(min: c_int, max: c_int, wait_s: c_int, set: *mut acSet) -> acError {
    ffi(|| get(Kind::Firm, min, max, wait_s, set))
}

/// Borrows between `min` and `max` accelerators that other jobs pre-allocated and do not use,
/// waiting up to `wait_s` seconds for at least `min`. Their owner may take them back: the
/// program is told by `AC_PollPreemption` and may go on using them for the manager's grace
/// (`preemption_grace_s`, 10 s by default); then they are revoked and calls on them fail with
/// `AC_ERROR_REVOKED`. Free the set (`AC_Free`) as usual.
///
/// Errors: as `AC_GetRange` (`AC_ERROR_REJECTED` when nothing is spare to borrow).
#[no_mangle]
pub extern "C" fn AC_GetPreemptible(min: c_int, max: c_int, wait_s: c_int, set: *mut acSet) -> acError {
    ffi(|| get(Kind::Preemptible, min, max, wait_s, set))
}

/// Asks for between `min` and `max` accelerators elastically: they are lent, and the manager
/// may reclaim some when a queued job could start with them, with at least `notice_s` seconds
/// of notice. `AC_PollPreemption` tells the program which accelerator and by when; it may go on
/// using it until then, and should free what it can (`AC_Free` of the set), since afterwards
/// calls on it fail with `AC_ERROR_REVOKED`. With `wait_s` > 0 the request is an offer: it is
/// granted what no queued job can start on, as soon as there is some. Needs a manager of
/// protocol 7.
///
/// Errors: as `AC_GetRange` (`AC_ERROR_INVALID_ARGUMENT` also for `notice_s` < 0).
#[no_mangle]
pub extern "C" fn AC_GetElastic(min: c_int, max: c_int, wait_s: c_int, notice_s: c_int, set: *mut acSet) -> acError {
    ffi(|| {
        let notice = u64::try_from(notice_s).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("notice_s must be at least 0, got {notice_s}"))
        })?;
        get(Kind::Elastic(Duration::from_secs(notice)), min, max, wait_s, set)
    })
}

/// What a dynamic request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Accelerators of the job's own until freed.
    Firm,
    /// A loan of other jobs' spare ones, which their owners may take back.
    Preemptible,
    /// Lent, reclaimed for queued jobs with this notice.
    Elastic(Duration),
}

/// `AC_GetRange`, a preemptible loan, or an elastic grant.
fn get(kind: Kind, min: c_int, max: c_int, wait_s: c_int, set: *mut acSet) -> Outcome {
    let (min, max) = (count_arg(min, "min")?, count_arg(max, "max")?);
    if min > max {
        return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("min {min} is above max {max}")));
    }
    if set.is_null() {
        return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the new set"));
    }
    let wait = Duration::from_secs(u64::try_from(wait_s).unwrap_or(0));
    let request = GetRequest::new(max).at_least(min).wait_up_to(wait);
    let guard = session()?;
    let session = guard.as_ref().expect("checked");
    if kind != Kind::Firm {
        // Listening before the loan exists, so that no notice of it can go elsewhere.
        notices::listen(session);
    }
    let (request, name) = match kind {
        Kind::Firm => (request, "AC_Get"),
        Kind::Preemptible => (request.preemptible(), "preemptible AC_Get"),
        Kind::Elastic(notice) => (request.elastic(notice), "elastic AC_Get"),
    };
    let granted = session.get_or_why(request).map_err(in_session)?;
    let granted = granted.map_err(|why| rejected(format!("{name} of {min}..{max} accelerator(s): {why}")))?;
    write_out(set, handle(register_dynamic(granted)), "the new set")
}

/// Releases a set obtained by `AC_Get`, and everything made on its devices. The static set is
/// released by `AC_Finalize`.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (the static set),
/// `AC_ERROR_NOT_INITIALIZED`, `AC_ERROR_JOB_ENDED` (released already; the handle is released
/// all the same), `AC_ERROR_MANAGER_UNREACHABLE`.
#[no_mangle]
pub extern "C" fn AC_Free(set: acSet) -> acError {
    ffi(|| {
        let guard = session()?;
        let dynamic = unregister_dynamic(set)?;
        guard.as_ref().expect("checked").free(dynamic).map_err(in_session)
    })
}

/// Releases every accelerator of this process and ends its session. Every handle becomes
/// invalid. `AC_Init` may be called again afterwards.
///
/// Errors: `AC_ERROR_NOT_INITIALIZED`, `AC_ERROR_JOB_ENDED` (the job had ended before:
/// everything is released and the session is closed all the same), `AC_ERROR_MANAGER_UNREACHABLE`
/// (the session is closed here; the manager releases its accelerators when its lease runs out).
#[no_mangle]
pub extern "C" fn AC_Finalize() -> acError {
    ffi(|| finalize_with(|session| session.finalize().map_err(in_session)))
}

/// How many accelerators `set` holds.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `count`).
#[no_mangle]
pub extern "C" fn acSetSize(set: acSet, count: *mut c_int) -> acError {
    ffi(|| {
        let entry = SETS.get(value(set))?;
        write_out(count, entry.devices().len() as c_int, "the count")
    })
}

/// Accelerator `index` (from 0) of `set`.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_DEVICE` (`index` not below
/// `acSetSize`), `AC_ERROR_INVALID_ARGUMENT` (NULL `device`).
#[no_mangle]
pub extern "C" fn acSetDevice(set: acSet, index: c_int, device: *mut acDevice) -> acError {
    ffi(|| {
        let entry = SETS.get(value(set))?;
        let devices = entry.devices();
        let found = usize::try_from(index).ok().and_then(|i| devices.get(i)).ok_or_else(|| {
            Failure::new(
                acError::AC_ERROR_INVALID_DEVICE,
                format!("no accelerator {index} in a set of {} (indices start at 0)", devices.len()),
            )
        })?;
        write_out(device, handle(*found), "the device")
    })
}

/// What `acDeviceGetInfo` tells of an accelerator.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct acDeviceInfo {
    /// Its name, NUL-terminated (cut to fit).
    pub name: [c_char; 64],
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Free memory when asked, bytes.
    pub memory_free: u64,
    /// 1 for a CUDA GPU, 0 for the CPU device.
    pub is_cuda: c_int,
}

/// Describes `device` (a round trip: its free memory is current).
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `info`), and those of
/// any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acDeviceGetInfo(device: acDevice, info: *mut acDeviceInfo) -> acError {
    ffi(|| {
        let found = DEVICES.get(value(device))?.acc.device_info()?;
        let mut name = [0 as c_char; 64];
        for (slot, byte) in name.iter_mut().zip(found.name.bytes().take(63)) {
            *slot = byte as c_char;
        }
        let is_cuda = c_int::from(found.kind == DeviceKind::Cuda);
        let out = acDeviceInfo { name, memory_total: found.memory_total, memory_free: found.memory_free, is_cuda };
        write_out(info, out, "the device info")
    })
}

/// Waits for all work queued on `device`; returns the first error of that work.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, the first error of the queued work (`AC_ERROR_OUT_OF_RANGE`,
/// `AC_ERROR_INVALID_ARGUMENT`, `AC_ERROR_DEVICE`, `AC_ERROR_CONTEXT_LOST`, ...), and those of
/// any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acDeviceSynchronize(device: acDevice) -> acError {
    ffi(|| Ok(DEVICES.get(value(device))?.acc.synchronize()?))
}
