//! `AC_Init` / `AC_Get` / `AC_Free` / `AC_Finalize` without `.await`.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::{runtime, Accelerator};
use crate::{GetRequest, Preemption, Result, SessionOptions};

/// One accelerator handed to this program (blocking). The session closes its connection.
#[derive(Debug)]
pub struct Handle {
    /// The accelerator's id (`host/device`).
    pub id: String,
    /// The connected accelerator.
    pub acc: Accelerator,
}

/// Accelerators obtained together by `get` (blocking).
#[derive(Debug)]
pub struct DynamicSet {
    /// The set's id (shared by every participant of a collective set).
    pub id: u64,
    /// This process's accelerators of the set.
    pub handles: Vec<Handle>,
    /// Until when a lent set is left to the program ([`crate::DynamicSet::until`]).
    pub until: Option<u64>,
    pub(crate) inner: crate::DynamicSet,
}

/// A program's session with the resource manager (blocking).
#[derive(Debug)]
pub struct Session {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) inner: crate::Session,
    handles: Vec<Handle>,
}

impl Session {
    /// `AC_Init`: opens the session and connects to this node's static accelerators.
    #[doc(alias = "AC_Init")]
    pub fn init(options: SessionOptions) -> Result<Self> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Session::init(options))?;
        Ok(Self::wrap(rt, inner))
    }

    /// `AC_Init` with the options of the environment ([`SessionOptions::from_env`]).
    pub fn from_env() -> Result<Self> {
        Self::init(SessionOptions::from_env()?)
    }

    pub(crate) fn wrap(rt: Arc<Runtime>, inner: crate::Session) -> Self {
        let handles = blocking_handles(&rt, inner.accelerators());
        Self { rt, inner, handles }
    }

    /// This node's statically allocated accelerators, in a stable order.
    pub fn accelerators(&self) -> &[Handle] {
        &self.handles
    }

    /// The runtime that drives the session's connections: a binding that waits on the async
    /// calls itself (the Python SDK, to stay interruptible) drives them here.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The async session underneath.
    pub fn as_async(&self) -> &crate::Session {
        &self.inner
    }

    /// The job this session belongs to.
    pub fn job(&self) -> &str {
        self.inner.job()
    }

    /// `AC_Get`: `count` more accelerators now, or `None` when the manager rejects the request.
    #[doc(alias = "AC_Get")]
    pub fn get(&self, count: u32) -> Result<Option<DynamicSet>> {
        self.get_with(GetRequest::new(count))
    }

    /// `AC_Get` as `request` says (partial grants, waits, preemptible loans).
    pub fn get_with(&self, request: GetRequest) -> Result<Option<DynamicSet>> {
        Ok(self.get_or_why(request)?.ok())
    }

    /// [`Session::get_with`], saying why the manager rejected the request.
    pub fn get_or_why(&self, request: GetRequest) -> Result<std::result::Result<DynamicSet, String>> {
        let answer = self.rt.block_on(self.inner.get_or_why(request))?;
        Ok(answer.map(|set| self.wrap_set(set)))
    }

    /// Wraps a set that the async session granted (to a binding that waits on
    /// [`crate::Session::get_or_why`] itself).
    pub fn wrap_set(&self, inner: crate::DynamicSet) -> DynamicSet {
        DynamicSet { id: inner.id, handles: blocking_handles(&self.rt, &inner.handles), until: inner.until, inner }
    }

    /// `AC_Free`: releases a whole set.
    #[doc(alias = "AC_Free")]
    pub fn free(&self, set: DynamicSet) -> Result<()> {
        self.rt.block_on(self.inner.free(set.inner))
    }

    /// `AC_Free` of some accelerators of a set (by id); the others keep working.
    pub fn free_some(&self, set: &mut DynamicSet, ids: &[&str]) -> Result<()> {
        self.rt.block_on(self.inner.free_some(&mut set.inner, ids))?;
        set.handles.retain(|h| !ids.contains(&h.id.as_str()));
        Ok(())
    }

    /// Preemptions of this session's preemptible sets, as [`crate::Session::preemptions`]: from
    /// now on they go to the returned receiver instead of stderr.
    pub fn preemptions(&self) -> Preemptions {
        Preemptions { rt: self.rt.clone(), rx: self.inner.preemptions() }
    }

    /// `AC_Finalize`: releases every dynamic set and ends the session.
    #[doc(alias = "AC_Finalize")]
    pub fn finalize(self) -> Result<()> {
        self.rt.block_on(self.inner.finalize())
    }
}

fn blocking_handles(rt: &Arc<Runtime>, handles: &[crate::Handle]) -> Vec<Handle> {
    handles.iter().map(|h| Handle { id: h.id.clone(), acc: Accelerator::borrowed(rt.clone(), h.acc.clone()) }).collect()
}

/// Where a blocking program learns of its preemptible sets' preemptions.
#[derive(Debug)]
pub struct Preemptions {
    rt: Arc<Runtime>,
    rx: mpsc::UnboundedReceiver<Preemption>,
}

impl Preemptions {
    /// The next preemption, waiting up to `wait` for one; `None` if none came (or the session
    /// ended).
    pub fn next(&mut self, wait: Duration) -> Option<Preemption> {
        if let Ok(notice) = self.rx.try_recv() {
            return Some(notice);
        }
        if wait.is_zero() {
            return None;
        }
        self.rt.block_on(async { tokio::time::timeout(wait, self.rx.recv()).await.ok().flatten() })
    }
}
