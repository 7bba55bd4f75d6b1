//! `AC_PollPreemption`: how a C program learns that the owner of accelerators it borrowed with
//! `AC_GetPreemptible` takes them back (or the manager reclaims an elastic grant's); the
//! notices themselves are kept in `notices.rs`.

use std::ffi::c_int;

use std::time::Duration;

use crate::devices::{acDevice, acSet, session, DEVICES, SETS};
use crate::error::{acError, ffi, Failure};
use crate::handles::{handle, write_out};
use crate::notices::{notices, Taken};

/// The next accelerator that the owner of a preemptible set (`AC_GetPreemptible`) takes back,
/// waiting up to `wait_ms` milliseconds for one (0: only what has arrived). `*device` is the
/// accelerator and `*set` its set, or both NULL if none was taken back; `*revoke_at` is the Unix
/// time (seconds, as `time()`) from which calls on it fail with `AC_ERROR_REVOKED`. Until then
/// the program may finish its work there, copy its results back, and move on. Each accelerator
/// is told once; accelerators of sets already freed are skipped. One thread waits at a time:
/// while one does, another's call returns at once with what has arrived.
///
/// Errors: `AC_ERROR_NOT_INITIALIZED`, `AC_ERROR_INVALID_ARGUMENT` (a NULL pointer, `wait_ms`
/// < 0).
#[no_mangle]
pub extern "C" fn AC_PollPreemption(
    wait_ms: c_int,
    set: *mut acSet,
    device: *mut acDevice,
    revoke_at: *mut i64,
) -> acError {
    ffi(|| {
        if set.is_null() || device.is_null() || revoke_at.is_null() {
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the set, device or time"));
        }
        let wait = u64::try_from(wait_ms).map_err(|_| {
            Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("wait_ms must be at least 0, got {wait_ms}"))
        })?;
        drop(session()?);
        let found = next(Duration::from_millis(wait));
        let (found_set, found_device, at) = found.unwrap_or((0, 0, 0));
        write_out(set, handle(found_set), "the set")?;
        write_out(device, handle(found_device), "the device")?;
        write_out(revoke_at, at, "the time")
    })
}

/// The next accelerator taken back that the program still holds a handle of: (set, device,
/// revoke_at), waiting up to `wait` for a notice.
pub(crate) fn next(wait: Duration) -> Option<(u64, u64, i64)> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let (mut rx, generation) = {
            let mut notices = notices();
            notices.drain();
            while let Some(taken) = notices.queue.pop_front() {
                if let Some(found) = handles_of(&taken) {
                    return Some(found);
                }
            }
            // Waited for outside the lock, so that other threads' errors can still take hints.
            match notices.rx.take() {
                Some(rx) => (rx, notices.generation),
                None => return None,
            }
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let notice = if left.is_zero() { None } else { rx.next(left) };
        let mut notices = notices();
        if notices.generation != generation {
            return None; // AC_Finalize ended the session while this thread waited
        }
        notices.rx = Some(rx);
        match notice {
            Some(notice) => notices.record(notice),
            None => return None,
        }
    }
}

/// The handles of the set and device a notice names, if the program still has them.
fn handles_of(taken: &Taken) -> Option<(u64, u64, i64)> {
    let (set, entry) = SETS.find(|s| s.id == Some(taken.set))?;
    let device = entry.devices().into_iter().find(|d| DEVICES.get(*d).is_ok_and(|e| e.id == taken.accelerator))?;
    Some((set, device, i64::try_from(taken.revoke_at).unwrap_or(i64::MAX)))
}
