//! Waiting without the GIL, interruptibly; and the process that owns the connections.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::error;

/// How long a wait runs between checks for signals: Ctrl-C is heard within this.
const SLICE: Duration = Duration::from_millis(100);

/// A value of the SDK held by a Python object: dropped in the process that made it, leaked in
/// a forked child. A child has a copy of the parent's memory but none of its threads: dropping
/// a runtime there would wait forever for its workers, and closing a connection would write to
/// the parent's sockets.
#[derive(Debug)]
pub(crate) struct Local<T> {
    value: ManuallyDrop<T>,
    pid: u32,
}

impl<T> Local<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { value: ManuallyDrop::new(value), pid: std::process::id() }
    }
}

impl<T: Clone> Clone for Local<T> {
    fn clone(&self) -> Self {
        Self { value: self.value.clone(), pid: self.pid }
    }
}

impl<T> Deref for Local<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for Local<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if self.pid == std::process::id() {
            // SAFETY: dropped once, here; the field is not used after.
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}

/// The runtime that drives a session's connections, and the process it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    rt: Local<Arc<Runtime>>,
    pid: u32,
}

impl Owner {
    pub(crate) fn new(rt: Arc<Runtime>) -> Self {
        Self { rt: Local::new(rt), pid: std::process::id() }
    }

    /// Whether this is still the process that opened the session (not a forked child, whose
    /// copy of the runtime has no threads and whose sockets are the parent's).
    pub(crate) fn is_current(&self) -> bool {
        self.pid == std::process::id()
    }

    /// Refuses a forked child's call.
    pub(crate) fn check(&self) -> PyResult<()> {
        if self.is_current() {
            return Ok(());
        }
        Err(error::fork_error(self.pid))
    }

    /// Runs `fut` with the GIL released, checking for signals every [`SLICE`]. A signal handler
    /// that raises (Ctrl-C's `KeyboardInterrupt`) ends the wait and drops `fut`: the SDK's calls
    /// are cancel-safe (a copy given up halfway drops its stream or lane, never leaving the
    /// connection mid-message), and the caller's buffer is not touched after this returns.
    pub(crate) fn wait<F>(&self, py: Python<'_>, fut: F) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.check()?;
        let mut fut = std::pin::pin!(fut);
        loop {
            let rt = &self.rt;
            let polled = py.detach(|| rt.block_on(async { tokio::time::timeout(SLICE, &mut fut).await }));
            match polled {
                Ok(out) => return Ok(out),
                Err(_) => py.check_signals()?,
            }
        }
    }

    /// Runs a call that does not wait on the network (a launch, a memset: they queue without a
    /// round trip): polled once in place, which finishes it unless its queue is full; only then
    /// does it wait, as [`Owner::wait`]. (A launch rate of Python's own is the point.)
    pub(crate) fn run<F>(&self, py: Python<'_>, fut: F) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.check()?;
        let mut fut = std::pin::pin!(fut);
        let polled = {
            let _context = self.rt.enter();
            fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        match polled {
            Poll::Ready(out) => Ok(out),
            Poll::Pending => self.wait(py, fut),
        }
    }
}
