//! The handles of sets and devices (`acSet`, `acDevice`) and the process's session: what every
//! other file of the C ABI looks its arguments up in. Nothing here calls into them.

use std::sync::{Mutex, RwLock, RwLockReadGuard};

use ac_frontend::blocking::{self, Session};

use crate::error::{acError, Failure, Outcome};
use crate::handles::Table;

/// Accelerators obtained together: this node's static ones (`AC_Init`) or one `AC_Get`.
#[allow(non_camel_case_types)]
pub type acSet = *mut acSet_st;

/// Never defined: a handle's value is a tagged number, not an address (opaque to C).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct acSet_st {
    _never: [u8; 0],
}
/// One accelerator of a set. It lives as long as its set.
#[allow(non_camel_case_types)]
pub type acDevice = *mut acDevice_st;

/// Never defined: a handle's value is a tagged number, not an address (opaque to C).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct acDevice_st {
    _never: [u8; 0],
}

/// A set: its devices and, for a dynamic set, its id at the manager and what `AC_Free` gives
/// back.
#[derive(Debug)]
pub(crate) struct SetEntry {
    /// Its devices' handles; `AC_FreeDevice` takes one out.
    pub(crate) devices: Mutex<Vec<u64>>,
    pub(crate) id: Option<u64>,
    pub(crate) dynamic: Mutex<Option<blocking::DynamicSet>>,
}

impl SetEntry {
    /// Its devices' handles now.
    pub(crate) fn devices(&self) -> Vec<u64> {
        self.devices.lock().expect("set poisoned").clone()
    }
}

/// One accelerator.
#[derive(Debug)]
pub(crate) struct DeviceEntry {
    /// Its id at the manager (`host/device`), which preemption notices name.
    pub(crate) id: String,
    pub(crate) acc: blocking::Accelerator,
}

pub(crate) static SETS: Table<SetEntry> = Table::new(0xac01, "acSet");
pub(crate) static DEVICES: Table<DeviceEntry> = Table::new(0xac02, "acDevice");

/// The process's session: one per process, as in the reference API.
pub(crate) static SESSION: RwLock<Option<Session>> = RwLock::new(None);

/// The session, for a call that needs it.
pub(crate) fn session() -> Outcome<RwLockReadGuard<'static, Option<Session>>> {
    let guard = SESSION.read().expect("session poisoned");
    if guard.is_none() {
        return Err(Failure::new(acError::AC_ERROR_NOT_INITIALIZED, "call AC_Init first"));
    }
    Ok(guard)
}
