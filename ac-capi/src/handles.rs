//! Opaque handles. A handle is never a pointer into this library's memory: it is a number,
//! tagged with its kind in the top 16 bits, looked up in that kind's table. So a NULL, stale,
//! forged or wrong-kind handle is an `AC_ERROR_INVALID_HANDLE`, not a crash; and since the tags
//! put every handle outside the canonical user-space address range of 64-bit Linux, a handle is
//! never equal to a host pointer (which is how `acMemCpy` tells the two apart).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{acError, Failure, Outcome};

const TAG_SHIFT: u32 = 48;
const ID_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// The handles of one kind.
#[derive(Debug)]
pub(crate) struct Table<T> {
    tag: u64,
    name: &'static str,
    next: AtomicU64,
    items: Mutex<BTreeMap<u64, Arc<T>>>,
}

impl<T> Table<T> {
    pub(crate) const fn new(tag: u16, name: &'static str) -> Self {
        Self { tag: tag as u64, name, next: AtomicU64::new(1), items: Mutex::new(BTreeMap::new()) }
    }

    /// Stores `item`; returns its handle.
    pub(crate) fn insert(&self, item: T) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) & ID_MASK;
        self.items.lock().expect("handle table poisoned").insert(id, Arc::new(item));
        (self.tag << TAG_SHIFT) | id
    }

    /// Whether `handle` carries this kind's tag (live or not).
    pub(crate) fn tagged(&self, handle: u64) -> bool {
        handle >> TAG_SHIFT == self.tag
    }

    fn id(&self, handle: u64) -> Outcome<u64> {
        match handle {
            0 => Err(Failure::new(acError::AC_ERROR_INVALID_HANDLE, format!("NULL {}", self.name))),
            h if self.tagged(h) => Ok(h & ID_MASK),
            h => Err(Failure::new(acError::AC_ERROR_INVALID_HANDLE, format!("{h:#x} is not an {}", self.name))),
        }
    }

    fn gone(&self, handle: u64) -> Failure {
        Failure::new(acError::AC_ERROR_INVALID_HANDLE, format!("{} {handle:#x} was released", self.name))
    }

    /// The item behind `handle`.
    pub(crate) fn get(&self, handle: u64) -> Outcome<Arc<T>> {
        let id = self.id(handle)?;
        self.items.lock().expect("handle table poisoned").get(&id).cloned().ok_or_else(|| self.gone(handle))
    }

    /// Takes the item behind `handle` out; the handle is dead from now on.
    pub(crate) fn remove(&self, handle: u64) -> Outcome<Arc<T>> {
        let id = self.id(handle)?;
        self.items.lock().expect("handle table poisoned").remove(&id).ok_or_else(|| self.gone(handle))
    }

    /// The handle and item of the first item for which `which` holds.
    pub(crate) fn find(&self, which: impl Fn(&T) -> bool) -> Option<(u64, Arc<T>)> {
        let items = self.items.lock().expect("handle table poisoned");
        items.iter().find(|(_, item)| which(item)).map(|(id, item)| ((self.tag << TAG_SHIFT) | id, item.clone()))
    }

    /// Takes out every item for which `which` holds.
    pub(crate) fn remove_where(&self, which: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        let mut items = self.items.lock().expect("handle table poisoned");
        let ids: Vec<u64> = items.iter().filter(|(_, item)| which(item)).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| items.remove(&id)).collect()
    }
}

/// The value of a handle, as its table knows it.
pub(crate) fn value<T>(handle: *mut T) -> u64 {
    handle as usize as u64
}

/// The handle for a value.
pub(crate) fn handle<T>(value: u64) -> *mut T {
    value as usize as *mut T
}

/// Writes `value` through `out`, refusing a NULL `out`.
pub(crate) fn write_out<T>(out: *mut T, value: T, what: &str) -> Outcome {
    if out.is_null() {
        return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, format!("NULL pointer for {what}")));
    }
    // SAFETY: C passed a non-NULL pointer to a `T` it owns, as the header asks.
    unsafe { out.write(value) };
    Ok(())
}
