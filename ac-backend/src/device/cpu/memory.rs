//! One allocation of the CPU device: its bytes, locked by range rather than whole.
//!
//! Why: a copy's stripes arrive on lanes of their own, each writing its own part of the same
//! allocation, and a lane opens its records straight into the allocation while it holds the
//! lock (`Context::write_with`). Under one lock per allocation the lanes took turns, so a
//! host-to-device copy opened its records on one core however many lanes carried it (measured on
//! 16 cores: `BENCHMARKS.md`, "Stop 46"). Here writers of disjoint ranges proceed at once.
//!
//! Invariants:
//! - a byte is borrowed mutably by at most one guard, and then by no shared guard: a request
//!   waits until no earlier request that overlaps it conflicts (two reads never conflict);
//! - requests are granted in the order they were made among those that conflict, so a steady
//!   stream of reads cannot starve a write (nor writes a read);
//! - a thread holds at most one guard of an allocation at a time (the device's code never nests
//!   them), so waiting in order cannot deadlock; a guard cannot leave its thread (it is not
//!   `Send`), so it is never held across an `.await`.
//!
//! The guards lend their ranges as slices of one allocation, which safe Rust cannot split by
//! ranges chosen at run time; this module's `unsafe` is that lending, bounded by the invariants.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::sync::{Condvar, Mutex};

/// An allocation's bytes and the ranges of them that are lent or waited for.
pub(super) struct Memory {
    bytes: Box<[UnsafeCell<u8>]>,
    requests: Mutex<Requests>,
    released: Condvar,
}

// SAFETY: the bytes are reached only through `Reading` and `Writing`, whose ranges the request
// queue keeps from conflicting (see the module's invariants).
unsafe impl Sync for Memory {}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("len", &self.len()).finish_non_exhaustive()
    }
}

/// The requests for ranges, granted and waiting, in the order they were made.
#[derive(Default)]
struct Requests {
    next: u64,
    queue: Vec<Request>,
    /// Requests waiting for a release: only then does a release wake anyone (a wake-up is a
    /// system call, and a copy's lane asks for a range per 16 KiB record).
    waiting: usize,
}

struct Request {
    id: u64,
    range: Range<usize>,
    write: bool,
}

impl Request {
    fn conflicts_with(&self, other: &Request) -> bool {
        (self.write || other.write) && self.range.start < other.range.end && other.range.start < self.range.end
    }
}

impl Requests {
    /// Whether request `id` may proceed: no request made before it conflicts with it.
    fn may_proceed(&self, id: u64) -> bool {
        let at = self.queue.iter().position(|r| r.id == id).expect("a waiting request is queued");
        let this = &self.queue[at];
        !self.queue[..at].iter().any(|earlier| earlier.conflicts_with(this))
    }
}

impl Memory {
    /// `len` zeroed bytes. Zeroed by the allocator (calloc), so pages are mapped on first touch
    /// as device memory is committed lazily.
    pub(super) fn zeroed(len: usize) -> Self {
        let bytes: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8` (`repr(transparent)`), so the slice's
        // allocation and length carry over unchanged.
        let bytes = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        Self { bytes, requests: Mutex::default(), released: Condvar::new() }
    }

    /// The allocation's size in bytes.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Borrows `range` to read, once no earlier overlapping write is pending.
    pub(super) fn read(&self, range: Range<usize>) -> Reading<'_> {
        Reading(self.acquire(range, false))
    }

    /// Borrows `range` to write, once no earlier overlapping read or write is pending.
    pub(super) fn write(&self, range: Range<usize>) -> Writing<'_> {
        Writing(self.acquire(range, true))
    }

    fn acquire(&self, range: Range<usize>, write: bool) -> Grant<'_> {
        assert!(range.start <= range.end && range.end <= self.len(), "range checked by the caller");
        let mut requests = self.requests.lock().expect("range requests poisoned");
        let id = requests.next;
        requests.next += 1;
        requests.queue.push(Request { id, range: range.clone(), write });
        if !requests.may_proceed(id) {
            requests.waiting += 1;
            while !requests.may_proceed(id) {
                requests = self.released.wait(requests).expect("range requests poisoned");
            }
            requests.waiting -= 1;
        }
        Grant { memory: self, range, id, _here: PhantomData }
    }

    fn release(&self, id: u64) {
        let mut requests = self.requests.lock().expect("range requests poisoned");
        requests.queue.retain(|r| r.id != id);
        let anyone_waits = requests.waiting > 0;
        drop(requests);
        if anyone_waits {
            self.released.notify_all();
        }
    }
}

/// A granted request: its range is lent until it drops.
struct Grant<'a> {
    memory: &'a Memory,
    range: Range<usize>,
    id: u64,
    /// Not `Send`: released on the thread that took it.
    _here: PhantomData<*const ()>,
}

impl Grant<'_> {
    /// A raw pointer to the first byte of the range.
    fn start(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.memory.bytes[self.range.start..self.range.end].as_ptr())
    }
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        self.memory.release(self.id);
    }
}

/// A range of an allocation lent to read; others may read it too, none may write it.
pub(super) struct Reading<'a>(Grant<'a>);

impl Deref for Reading<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: this read's granted request keeps every writer of these bytes out until it
        // drops, and the slice lives no longer than the guard.
        unsafe { std::slice::from_raw_parts(self.0.start(), self.0.range.len()) }
    }
}

/// A range of an allocation lent to write; no one else may read or write it meanwhile.
pub(super) struct Writing<'a>(Grant<'a>);

impl Deref for Writing<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: as in `deref_mut`; a shared borrow of the guard gives a shared slice.
        unsafe { std::slice::from_raw_parts(self.0.start(), self.0.range.len()) }
    }
}

impl DerefMut for Writing<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: this write's granted request excludes every other guard of these bytes until
        // it drops, and the slice borrows the guard mutably, so it is the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.0.start(), self.0.range.len()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::*;

    #[test]
    fn overlapping_reads_are_held_at_once() {
        let memory = Arc::new(Memory::zeroed(64));
        let first = memory.read(0..40);
        let second = memory.read(20..64);
        assert_eq!(first.len() + second.len(), 84);
    }

    /// An overlapping request waits for the holder: the waiter's progress is observed through
    /// a channel, and it may only report once the holder has dropped its guard.
    fn waits_for_holder(hold_write: bool, want_write: bool) {
        let memory = Arc::new(Memory::zeroed(64));
        let held = if hold_write { (Some(memory.write(10..30)), None) } else { (None, Some(memory.read(10..30))) };
        let released = Arc::new(AtomicBool::new(false));
        let (done, granted) = mpsc::channel();
        let waiter = {
            let (memory, released) = (memory.clone(), released.clone());
            std::thread::spawn(move || {
                if want_write {
                    drop(memory.write(25..40));
                } else {
                    drop(memory.read(25..40));
                }
                done.send(released.load(Ordering::SeqCst)).unwrap();
            })
        };
        // Not granted while the holder holds: nothing arrives (the wait is what is tested;
        // a grant would arrive at once).
        assert!(granted.recv_timeout(Duration::from_millis(100)).is_err());
        released.store(true, Ordering::SeqCst);
        drop(held);
        assert!(granted.recv().unwrap(), "granted only after the holder let go");
        waiter.join().unwrap();
    }

    #[test]
    fn a_write_waits_for_an_overlapping_read_and_write() {
        waits_for_holder(false, true);
        waits_for_holder(true, true);
    }

    #[test]
    fn a_read_waits_for_an_overlapping_write() {
        waits_for_holder(true, false);
    }

    #[test]
    fn a_waiting_write_goes_before_later_reads() {
        let memory = Arc::new(Memory::zeroed(64));
        let first_read = memory.read(0..64);
        let (events, order) = mpsc::channel();
        let writer = {
            let (memory, events) = (memory.clone(), events.clone());
            std::thread::spawn(move || {
                let mut all = memory.write(0..64);
                all.fill(9);
                events.send("write").unwrap();
            })
        };
        // The writer is queued once the request queue holds two entries.
        while memory.requests.lock().unwrap().queue.len() < 2 {
            std::thread::yield_now();
        }
        let reader = {
            let (memory, events) = (memory.clone(), events.clone());
            std::thread::spawn(move || {
                let seen = memory.read(0..64)[0];
                events.send(if seen == 9 { "read after write" } else { "read before write" }).unwrap();
            })
        };
        while memory.requests.lock().unwrap().queue.len() < 3 {
            std::thread::yield_now();
        }
        drop(first_read);
        writer.join().unwrap();
        reader.join().unwrap();
        drop(events);
        assert_eq!(order.iter().collect::<Vec<_>>(), ["write", "read after write"]);
    }
}
