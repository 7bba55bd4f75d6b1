//! `AC_Init`, `AC_Get`, `AC_Free`, `AC_Finalize`, and preemption notices.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ac_frontend::blocking;
use ac_frontend::{Bounds, GetRequest, Pacing, SessionOptions};
use pyo3::prelude::*;

use crate::comm::PyComm;
use crate::device::Accelerator;
use crate::error;
use crate::wait::{Local, Owner};

/// A program's session with the resource manager (`ac.init()`).
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Session {
    owner: Owner,
    /// Taken out by `finalize`. Calls clone the `Arc` out and never hold the lock while they
    /// wait (the lock is taken with the GIL held).
    inner: Local<Mutex<Option<Arc<blocking::Session>>>>,
    job: String,
    accelerators: Vec<Py<Accelerator>>,
    preemptions: Local<Mutex<Option<blocking::Preemptions>>>,
    rejection: Mutex<Option<String>>,
    /// `check`'s pacing of its requests, and the interval it was made with.
    pacing: Mutex<Option<(Pacing, Duration)>>,
}

/// What `check` tells the program: `("keep", None, None, [], 0)`, `("expand", set, its id, [],
/// until: unix time, 0 if unknown)` or `("shrink", None, set id, accelerator ids, unix time of
/// their revocation)`.
type Check = (&'static str, Option<Set>, Option<u64>, Vec<String>, u64);

/// Accelerators obtained together by one `get` (`AC_Get`).
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Set {
    id: u64,
    until: Option<u64>,
    /// Fewer after a partial free.
    accelerators: Mutex<Vec<Py<Accelerator>>>,
    inner: Local<Mutex<Option<blocking::DynamicSet>>>,
}

fn wrap_handles(py: Python<'_>, owner: &Owner, handles: &[blocking::Handle]) -> PyResult<Vec<Py<Accelerator>>> {
    handles.iter().map(|h| Py::new(py, Accelerator::new(owner.clone(), h.id.clone(), h.acc.clone()))).collect()
}

fn get_request(
    count: u32,
    min: Option<u32>,
    wait: Option<f64>,
    preemptible: bool,
    notice: Option<f64>,
) -> PyResult<GetRequest> {
    let mut request = GetRequest::new(count);
    if let Some(min) = min {
        if min > count {
            return Err(error::invalid(format!("min={min} is more than count={count}")));
        }
        request = request.at_least(min);
    }
    if let Some(wait) = wait {
        let wait = Duration::try_from_secs_f64(wait)
            .map_err(|_| error::invalid(format!("wait={wait} is not a number of seconds >= 0")))?;
        request = request.wait_up_to(wait);
    }
    if preemptible {
        request = request.preemptible();
    }
    if let Some(notice) = notice {
        let notice = Duration::try_from_secs_f64(notice)
            .map_err(|_| error::invalid(format!("notice={notice} is not a number of seconds >= 0")))?;
        request = request.elastic(notice);
    }
    Ok(request)
}

impl Session {
    /// The open session; a finalized one is an error.
    fn open(&self) -> PyResult<Arc<blocking::Session>> {
        self.owner.check()?;
        self.inner.lock().expect("session lock").clone().ok_or_else(|| error::released("the session"))
    }

    /// Takes the session's preemption notices (off stderr), once.
    fn subscribe(&self, session: &blocking::Session) -> PyResult<MutexGuard<'_, Option<blocking::Preemptions>>> {
        // Never block on this lock with the GIL held: a waiting thread would need the GIL back.
        let mut slot = self
            .preemptions
            .try_lock()
            .map_err(|_| error::invalid("another thread is already waiting for preemption notices"))?;
        if slot.is_none() {
            *slot = Some(session.preemptions());
        }
        Ok(slot)
    }

    fn wrap_set(&self, py: Python<'_>, set: blocking::DynamicSet) -> PyResult<Set> {
        let accelerators = wrap_handles(py, &self.owner, &set.handles)?;
        Ok(Set {
            id: set.id,
            until: set.until,
            accelerators: Mutex::new(accelerators),
            inner: Local::new(Mutex::new(Some(set))),
        })
    }
}

#[pymethods]
impl Session {
    /// `AC_Init`: opens the session (the environment names the manager and the job, as for
    /// libac), collectively over `comm` (an mpi4py communicator) when given.
    #[staticmethod]
    #[pyo3(signature = (comm=None))]
    fn init(py: Python<'_>, comm: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let options = SessionOptions::from_env().map_err(error::sdk)?;
        // AC_Init's failures are libac's AC_Init's: a refused credential is not an ended job.
        let session = match comm {
            None => py.detach(|| blocking::Session::init(options)).map_err(error::sdk)?,
            Some(comm) => {
                let comm = PyComm::new(comm)?;
                py.detach(|| blocking::Session::init_on(&comm, options)).map_err(|e| comm.error(e, error::sdk))?
            }
        };
        let owner = Owner::new(session.runtime().clone());
        let accelerators = wrap_handles(py, &owner, session.accelerators())?;
        Ok(Self {
            job: session.job().to_string(),
            owner,
            accelerators,
            preemptions: Local::new(Mutex::new(None)),
            rejection: Mutex::new(None),
            pacing: Mutex::new(None),
            inner: Local::new(Mutex::new(Some(Arc::new(session)))),
        })
    }

    /// The job's static accelerators on this node (`AC_Init`'s set).
    #[getter]
    fn accelerators(&self, py: Python<'_>) -> Vec<Py<Accelerator>> {
        self.accelerators.iter().map(|a| a.clone_ref(py)).collect()
    }

    /// The job this session belongs to.
    #[getter]
    fn job(&self) -> &str {
        &self.job
    }

    /// Why the last `get` was rejected (`None` after a grant).
    #[getter]
    fn rejection(&self) -> Option<String> {
        self.rejection.lock().expect("rejection lock").clone()
    }

    /// Whether `finalize` has run.
    #[getter]
    fn finalized(&self) -> bool {
        self.inner.lock().expect("session lock").is_none()
    }

    /// `AC_Get`: `count` more accelerators (at least `min`, waiting up to `wait` seconds for
    /// them; `preemptible`: borrowed from idle reservations, taken back with notice), or `None`
    /// when the manager rejects the request (`rejection` says why). With `comm`, collective:
    /// every rank asks for its own count and all are granted together, or none.
    #[pyo3(signature = (count, min=None, wait=None, preemptible=false, comm=None, notice=None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, each optional
    fn get(
        &self,
        py: Python<'_>,
        count: u32,
        min: Option<u32>,
        wait: Option<f64>,
        preemptible: bool,
        comm: Option<&Bound<'_, PyAny>>,
        notice: Option<f64>,
    ) -> PyResult<Option<Set>> {
        let session = self.open()?;
        let answer = match comm {
            Some(comm) => {
                if min.is_some() || wait.is_some() || preemptible || notice.is_some() {
                    return Err(error::invalid("a collective get takes no min, wait, preemptible or notice"));
                }
                let comm = PyComm::new(comm)?;
                py.detach(|| session.get_on_or_why(&comm, count)).map_err(|e| comm.error(e, error::session))
            }
            None => {
                let request = get_request(count, min, wait, preemptible, notice)?;
                if preemptible || notice.is_some() {
                    // As libac: from the first preemptible get on, notices are the program's.
                    // (A thread waiting for notices holds the slot: subscribed already.)
                    if let Ok(mut slot) = self.preemptions.try_lock() {
                        slot.get_or_insert_with(|| session.preemptions());
                    }
                }
                let asked = self.owner.wait(py, session.as_async().get_or_why(request))?;
                asked.map(|answer| answer.map(|set| session.wrap_set(set))).map_err(error::session)
            }
        };
        match answer? {
            Ok(set) => {
                *self.rejection.lock().expect("rejection lock") = None;
                self.wrap_set(py, set).map(Some)
            }
            Err(reason) => {
                *self.rejection.lock().expect("rejection lock") = Some(reason);
                Ok(None)
            }
        }
    }

    /// `AC_Free`: releases a set got by `get` (collectively, with the `comm` it was got with).
    #[pyo3(signature = (set, comm=None))]
    fn free(&self, py: Python<'_>, set: &Set, comm: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let session = self.open()?;
        let comm = comm.map(PyComm::new).transpose()?;
        let taken = set.inner.lock().expect("set lock").take().ok_or_else(|| error::released("the set"))?;
        match comm {
            Some(comm) => py.detach(|| session.free_on(&comm, taken)).map_err(|e| comm.error(e, error::session)),
            None => py.detach(|| session.free(taken)).map_err(error::session),
        }
    }

    /// `AC_Free` of some accelerators of a set (by id): the others keep working. Freeing the
    /// last of them frees the set.
    fn free_some(&self, py: Python<'_>, set: &Set, accelerators: Vec<String>) -> PyResult<()> {
        let session = self.open()?;
        let mut slot = set.inner.lock().expect("set lock");
        let inner = slot.as_mut().ok_or_else(|| error::released("the set"))?;
        let ids: Vec<&str> = accelerators.iter().map(String::as_str).collect();
        if let Some(unknown) = ids.iter().find(|id| !inner.handles.iter().any(|h| h.id == **id)) {
            return Err(error::invalid(format!("accelerator {unknown} is not in set {}", set.id)));
        }
        py.detach(|| session.free_some(inner, &ids)).map_err(error::session)?;
        let kept = |a: &Py<Accelerator>| !accelerators.iter().any(|id| id == a.get().id_str());
        set.accelerators.lock().expect("set lock").retain(kept);
        if inner.handles.is_empty() {
            *slot = None;
        }
        Ok(())
    }

    /// `AC_Check`, a reconfiguration point: what to do before the next iteration of a program
    /// holding `held` accelerators that can run on `min..=max`, best on `preferred`. A reclaim
    /// first (`"shrink"`: give those back by then); else, below `preferred`, an elastic `get`
    /// of what is idle, lent with `notice` seconds, at most once per `every` seconds
    /// (`"expand"`: the new set); else `"keep"`. It becomes the session's listener of notices.
    #[pyo3(signature = (held, min, max, preferred, notice=30.0, every=1.0))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn check(
        &self,
        py: Python<'_>,
        held: u32,
        min: u32,
        max: u32,
        preferred: u32,
        notice: f64,
        every: f64,
    ) -> PyResult<Check> {
        let session = self.open()?;
        let seconds = |name: &str, value: f64| {
            Duration::try_from_secs_f64(value)
                .map_err(|_| error::invalid(format!("{name}={value} is not a number of seconds >= 0")))
        };
        let (notice, every) = (seconds("notice", notice)?, seconds("every", every)?);
        if min > max {
            return Err(error::invalid(format!("min={min} is more than max={max}")));
        }
        {
            let mut slot = self.subscribe(&session)?;
            if let Some(p) = slot.as_mut().expect("subscribed").next(Duration::ZERO) {
                return Ok(("shrink", None, Some(p.set), p.accelerators, p.revoke_at));
            }
        }
        let request = {
            let mut pacing = self.pacing.lock().expect("pacing lock");
            if pacing.as_ref().is_none_or(|(_, made_with)| *made_with != every) {
                *pacing = Some((Pacing::new(every), every));
            }
            let (pacing, _) = pacing.as_mut().expect("made");
            pacing.ask(held, Bounds::new(min, max, preferred), notice, std::time::Instant::now())
        };
        let Some(request) = request else { return Ok(("keep", None, None, Vec::new(), 0)) };
        let asked = self.owner.wait(py, session.as_async().get_or_why(request))?.map_err(error::session)?;
        match asked {
            Ok(set) => {
                let set = self.wrap_set(py, session.wrap_set(set))?;
                let (id, until) = (set.id, set.until.unwrap_or(0));
                Ok(("expand", Some(set), Some(id), Vec::new(), until))
            }
            Err(reason) => {
                *self.rejection.lock().expect("rejection lock") = Some(reason);
                Ok(("keep", None, None, Vec::new(), 0))
            }
        }
    }

    /// `AC_Finalize`: releases every set and ends the session (collectively over `comm`). It
    /// waits for the calls of other threads in flight.
    #[pyo3(signature = (comm=None))]
    fn finalize(&self, py: Python<'_>, comm: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.owner.check()?;
        let comm = comm.map(PyComm::new).transpose()?;
        let Some(mut session) = self.inner.lock().expect("session lock").take() else {
            return Ok(());
        };
        // Other threads' calls in flight hold the session: wait for them, hearing Ctrl-C (which
        // leaves the session open).
        let waited_at = std::time::Instant::now();
        let session = loop {
            match Arc::try_unwrap(session) {
                Ok(session) => break session,
                Err(shared) => {
                    session = shared;
                    py.detach(|| std::thread::sleep(Duration::from_millis(5)));
                    if waited_at.elapsed() >= Duration::from_millis(100) {
                        if let Err(interrupted) = py.check_signals() {
                            *self.inner.lock().expect("session lock") = Some(session);
                            return Err(interrupted);
                        }
                    }
                }
            }
        };
        match comm {
            Some(comm) => py.detach(|| session.finalize_on(&comm)).map_err(|e| comm.error(e, error::session)),
            None => py.detach(|| session.finalize()).map_err(error::session),
        }
    }

    /// The next notice that a preemptible set is being taken back, waiting up to `timeout`
    /// seconds: `(set id, accelerator ids, unix time of the revocation)`, or `None`. From the
    /// first call on, notices come here instead of stderr.
    #[pyo3(signature = (timeout=0.0))]
    fn next_preemption(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<(u64, Vec<String>, u64)>> {
        let session = self.open()?;
        let wait = Duration::try_from_secs_f64(timeout)
            .map_err(|_| error::invalid(format!("timeout={timeout} is not a number of seconds >= 0")))?;
        // Never block on this lock with the GIL held: a waiting thread would need the GIL back.
        let mut slot = self.subscribe(&session)?;
        // The wait holds the notices, not the session: finalize need not wait for it.
        drop(session);
        let notices = slot.as_mut().expect("subscribed");
        // Wait in slices so that Ctrl-C is heard.
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let slice = left.min(Duration::from_millis(100));
            if let Some(p) = py.detach(|| notices.next(slice)) {
                return Ok(Some((p.set, p.accelerators, p.revoke_at)));
            }
            if left.is_zero() {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl Set {
    /// The set's id at the manager.
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// A lent set: unix time until which the manager's plan leaves it to the program (the
    /// planned start of the first queued job); `None` otherwise.
    #[getter]
    fn until(&self) -> Option<u64> {
        self.until
    }

    /// This process's accelerators of the set.
    #[getter]
    fn accelerators(&self, py: Python<'_>) -> Vec<Py<Accelerator>> {
        self.accelerators.lock().expect("set lock").iter().map(|a| a.clone_ref(py)).collect()
    }

    /// Whether the set was freed.
    #[getter]
    fn freed(&self) -> bool {
        self.inner.lock().expect("set lock").is_none()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.owner.is_current() {
            return; // `Local` leaks it: the connections are the parent's.
        }
        // Dropped by the garbage collector without finalize: end the session without the GIL
        // (ending it waits for the manager).
        if let Some(Ok(session)) = self.inner.get_mut().expect("session lock").take().map(Arc::try_unwrap) {
            Python::try_attach(|py| py.detach(|| session.finalize().ok()));
        }
    }
}
