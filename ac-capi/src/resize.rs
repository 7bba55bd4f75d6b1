//! `AC_Check`, a reconfiguration point (the SDK's `Resizer`; DMR's `dmr_check_status`), and
//! `AC_FreeDevice`, which gives back one accelerator of a set, as a reclaim asks.

use std::ffi::c_int;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ac_frontend::{Bounds, Pacing};

use crate::devices::{acDevice, acSet, session, DEVICES, SETS};
use crate::error::{acError, ffi, in_session, Failure, Outcome};
use crate::handles::{handle, value, write_out};
use crate::session::{count_arg, forget_device, register_dynamic, unregister_dynamic};
use crate::{notices, preempt};

/// What `AC_Check` tells the program to do before its next iteration.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum acCheckAction {
    /// Go on with what it holds.
    AC_CHECK_KEEP = 0,
    /// Run on the accelerators of `set` too: an elastic set, lent until a queued job needs them.
    AC_CHECK_EXPAND = 1,
    /// Give back `device` of `set` (`AC_FreeDevice`) by `by`; after that, calls on it fail with
    /// `AC_ERROR_REVOKED`.
    AC_CHECK_SHRINK = 2,
}

/// `AC_Check`'s answer.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct acCheckResult {
    /// What to do.
    pub action: acCheckAction,
    /// The new set (`AC_CHECK_EXPAND`), or the set of the device to give back
    /// (`AC_CHECK_SHRINK`); NULL for `AC_CHECK_KEEP`.
    pub set: acSet,
    /// The device to give back (`AC_CHECK_SHRINK`); NULL otherwise.
    pub device: acDevice,
    /// Unix time (seconds, as `time()`) by which to give it back (`AC_CHECK_SHRINK`); 0 otherwise.
    pub by: i64,
    /// Unix time until which the manager's plan leaves the new set to the program, the planned
    /// start of the first queued job (`AC_CHECK_EXPAND`; its reclaim falls due by then at the
    /// latest, or sooner for a job that arrives meanwhile); 0 otherwise, or when no queued job
    /// is planned.
    pub until: i64,
}

/// The pacing of this process's `AC_Check` requests (`AC_CHECK_EVERY_MS`, 1000 by default).
static PACING: Mutex<Option<Pacing>> = Mutex::new(None);

/// The interval between two requests of `AC_Check`'s.
fn check_interval() -> Duration {
    let ms = std::env::var("AC_CHECK_EVERY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    Duration::from_millis(ms)
}

/// A reconfiguration point for an iterative program holding `held` accelerators that can run on
/// `min` to `max`, best on `preferred`: call it between iterations. A reclaim (or the
/// preemption of an `AC_GetPreemptible` loan) comes first,
/// one accelerator per call (`AC_CHECK_SHRINK`: free it with `AC_FreeDevice` by `by`); else,
/// below `preferred`, it asks the manager for what is idle, lent as `AC_GetElastic` with
/// `notice_s` (`AC_CHECK_EXPAND` with the new set), at most once per `AC_CHECK_EVERY_MS`
/// milliseconds (1000 by default) however often it is called; else `AC_CHECK_KEEP`. Needs a
/// manager of protocol 7.
///
/// Errors: `AC_ERROR_INVALID_ARGUMENT` (NULL `result`, `held` or `notice_s` below 0, `min` or
/// `max` below 1, `min` above `max`), `AC_ERROR_NOT_INITIALIZED`, `AC_ERROR_MANAGER_UNREACHABLE`,
/// `AC_ERROR_MANAGER`, `AC_ERROR_JOB_ENDED`, `AC_ERROR_VERSION_MISMATCH`.
#[no_mangle]
pub extern "C" fn AC_Check(
    held: c_int,
    min: c_int,
    max: c_int,
    preferred: c_int,
    notice_s: c_int,
    result: *mut acCheckResult,
) -> acError {
    ffi(|| {
        let (min, max) = (count_arg(min, "min")?, count_arg(max, "max")?);
        if min > max {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("min {min} is above max {max}")));
        }
        let held = u32::try_from(held).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("held must be at least 0, got {held}"))
        })?;
        let notice = u64::try_from(notice_s).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("notice_s must be at least 0, got {notice_s}"))
        })?;
        if result.is_null() {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the result"));
        }
        let bounds = Bounds::new(min, max, u32::try_from(preferred).unwrap_or(0));
        let answer = check(held, bounds, Duration::from_secs(notice))?;
        write_out(result, answer, "the result")
    })
}

/// `AC_Check`'s decision.
fn check(held: u32, bounds: Bounds, notice: Duration) -> Outcome<acCheckResult> {
    let guard = session()?;
    let session = guard.as_ref().expect("checked");
    // Listening before any elastic set exists, so that no reclaim of one goes to stderr.
    notices::listen(session);
    if let Some((set, device, by)) = preempt::next(Duration::ZERO) {
        return Ok(acCheckResult {
            action: acCheckAction::AC_CHECK_SHRINK,
            set: handle(set),
            device: handle(device),
            by,
            until: 0,
        });
    }
    let request = PACING.lock().expect("pacing poisoned").get_or_insert_with(|| Pacing::new(check_interval())).ask(
        held,
        bounds,
        notice,
        Instant::now(),
    );
    let keep =
        acCheckResult { action: acCheckAction::AC_CHECK_KEEP, set: handle(0), device: handle(0), by: 0, until: 0 };
    let Some(request) = request else { return Ok(keep) };
    match session.get_or_why(request).map_err(in_session)? {
        Ok(set) => {
            let until = set.until.map_or(0, |t| t as i64);
            let set = handle(register_dynamic(set));
            Ok(acCheckResult { set, action: acCheckAction::AC_CHECK_EXPAND, until, ..keep })
        }
        Err(_) => Ok(keep),
    }
}

/// Gives back `device` of dynamic set `set` (as a reclaim asks); the set's other accelerators
/// keep working, and its size and indices shrink by one. Everything made on the device is
/// released and its handle becomes invalid. Giving back a set's last device releases the set,
/// as `AC_Free` does: its handle becomes invalid too.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (the static set, a device of
/// another set), `AC_ERROR_NOT_INITIALIZED`, `AC_ERROR_JOB_ENDED`, `AC_ERROR_MANAGER` (the
/// manager no longer counts the device in the set: revoked at its deadline, say),
/// `AC_ERROR_MANAGER_UNREACHABLE`.
#[no_mangle]
pub extern "C" fn AC_FreeDevice(set: acSet, device: acDevice) -> acError {
    ffi(|| {
        let guard = session()?;
        let session = guard.as_ref().expect("checked");
        let entry = SETS.get(value(set))?;
        let id = DEVICES.get(value(device))?.id.clone();
        let devices = entry.devices();
        if !devices.contains(&value(device)) {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("{id} is not a device of this set")));
        }
        if devices.len() == 1 {
            let whole = unregister_dynamic(set)?;
            return session.free(whole).map_err(in_session);
        }
        {
            // The set's `devices` lock is not held across the request: notices and errors
            // (`preempt.rs`) look the set's devices up meanwhile.
            let mut dynamic = entry.dynamic.lock().expect("set poisoned");
            let Some(dynamic) = dynamic.as_mut() else {
                return Err(Failure::new(
                    acError::AC_ERROR_INVALID_ARGUMENT,
                    "the static set is released by AC_Finalize, not AC_FreeDevice",
                ));
            };
            session.free_some(dynamic, &[&id]).map_err(in_session)?;
        }
        entry.devices.lock().expect("set poisoned").retain(|d| *d != value(device));
        forget_device(value(device));
        Ok(())
    })
}
