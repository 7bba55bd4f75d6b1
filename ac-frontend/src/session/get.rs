//! `AC_Get`: asking the manager for more accelerators, waiting for them (through an outage
//! of the manager too), withdrawing at the deadline, and giving back what a caller that stopped
//! waiting was granted.

use std::time::Duration;

use ac_proto::arm::{Request, Response};

use super::{DynamicSet, Session};
use crate::get_request::GetRequest;
use crate::{Error, Result};

impl Session {
    /// `AC_Get`: `count` more accelerators now, or `None` when the manager rejects the request.
    #[doc(alias = "AC_Get")]
    pub async fn get(&self, count: u32) -> Result<Option<DynamicSet>> {
        self.get_with(GetRequest::new(count)).await
    }

    /// `AC_Get` as `request` says: a partial grant, a wait for accelerators (with progress on
    /// stderr when the session prints progress), a preemptible loan. `None` when rejected.
    pub async fn get_with(&self, request: GetRequest) -> Result<Option<DynamicSet>> {
        Ok(self.get_or_why(request).await?.ok())
    }

    /// [`Session::get_with`], saying why the manager rejected the request (`Err(reason)`: too
    /// few idle, the fairness policy, the batch system refused, ...).
    pub async fn get_or_why(&self, request: GetRequest) -> Result<Result<DynamicSet, String>> {
        let ask = request.ask();
        let deadline = (!request.wait.is_zero()).then(|| tokio::time::Instant::now() + request.wait);
        let token = self.token.clone();
        let first = match request.notice {
            // Whole seconds, rounded up: never less notice than asked for.
            Some(notice) => Request::GetElastic { token, ask, notice_s: notice.as_secs_f64().ceil() as u64 },
            None => Request::Get { token, ask },
        };
        let mut response = match deadline {
            // Asked again while the manager cannot be reached: the ask's key makes a request the
            // manager had taken, its answer lost, the same request.
            Some(at) => match self.ask_until(first, at).await? {
                Asked::Answer(answer) => answer,
                Asked::Deadline { unreachable: Some(e) } => return Err(e),
                Asked::Deadline { unreachable: None } => {
                    return Err(Error::Timeout(format!(
                        "AC_Get: the resource manager did not answer within the {:?} wait",
                        request.wait
                    )))
                }
            },
            None => self.client.request(first).await?,
        };
        let mut last_report = None;
        // Dropped while the request waits at the manager (the caller gave up: Ctrl-C in Python),
        // it withdraws the request in the background and gives back a grant made meanwhile.
        let rt = tokio::runtime::Handle::try_current().ok();
        let mut abandoned = Abandoned { session: self, request: None, rt };
        while let Response::Waiting { request: id, idle, ahead, .. } = response {
            abandoned.request = Some(id);
            let at = deadline.unwrap_or_else(tokio::time::Instant::now);
            if self.progress && last_report != Some((idle, ahead)) {
                let left = at.saturating_duration_since(tokio::time::Instant::now()).as_secs_f64();
                eprintln!(
                    "AC_Get: waiting for {}..{} accelerator(s): {idle} idle, {ahead} request(s) ahead, up to {left:.1} s more",
                    request.min, request.max
                );
                last_report = Some((idle, ahead));
            }
            let poll = Request::AwaitGet { token: self.token.clone(), request: id };
            response = match self.ask_until(poll, at).await? {
                Asked::Answer(answer) => answer,
                Asked::Deadline { unreachable } => match (self.withdraw(id).await, unreachable) {
                    (Some(answer), _) => answer,
                    // Still out of reach at the deadline: said so, not as too few accelerators.
                    (None, Some(e)) => return Err(e),
                    (None, None) => Response::Rejected {
                        reason: format!("no accelerators were granted within the {:?} wait", request.wait),
                    },
                },
            };
        }
        abandoned.request = None;
        let mut answer = self.granted_or_why(response, true).await?;
        if let (Ok(set), Some(_)) = (&mut answer, request.notice) {
            set.until = self.lent_until(set.id).await;
        }
        Ok(answer)
    }

    /// Until when the manager's plan leaves lent set `set` to this program
    /// ([`DynamicSet::until`]). Asked after the grant, so a manager that cannot say (older
    /// than protocol 8, or unreachable a moment) leaves it unknown rather than failing it.
    async fn lent_until(&self, set: u64) -> Option<u64> {
        match self.client.request(Request::LentUntil { token: self.token.clone(), set }).await {
            Ok(Response::LentUntil(until)) => until,
            other => {
                tracing::debug!(set, answer = ?other, "the manager did not say until when the set is lent");
                None
            }
        }
    }

    /// Sends `request` until it is answered or `at` comes, again while the manager cannot be
    /// reached (a network outage, a restart: a waiting program's calls wait through it), paced
    /// for a manager that refuses at once (its port closed). Only for requests that are the same
    /// request when sent again (an `AC_Get` with its key, a poll).
    async fn ask_until(&self, request: Request, at: tokio::time::Instant) -> Result<Asked> {
        let mut unreachable = None;
        loop {
            // A request that fails at its first poll would never meet `timeout_at`'s deadline.
            if tokio::time::Instant::now() >= at {
                return Ok(Asked::Deadline { unreachable });
            }
            match tokio::time::timeout_at(at, self.client.request(request.clone())).await {
                Ok(Ok(answer)) => return Ok(Asked::Answer(answer)),
                Ok(Err(e @ Error::ManagerUnreachable { .. })) => {
                    tracing::debug!(error = %e, "the manager cannot be reached; asking again");
                    unreachable = Some(e);
                    tokio::time::sleep_until(at.min(tokio::time::Instant::now() + crate::resume::REDIAL)).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(Asked::Deadline { unreachable }),
            }
        }
    }

    /// Withdraws waiting request `id` at its deadline: the manager's answer when it gives one in
    /// time (a grant made meanwhile is kept), else none: the program's deadline holds even when
    /// the manager cannot be reached.
    async fn withdraw(&self, id: u64) -> Option<Response> {
        let cancel = self.client.request(Request::CancelGet { token: self.token.clone(), request: id });
        match tokio::time::timeout(WITHDRAW_LIMIT, cancel).await {
            Ok(Ok(answer @ (Response::Granted { .. } | Response::Rejected { .. }))) => Some(answer),
            _ => None,
        }
    }
}

/// What [`Session::ask_until`] came to.
enum Asked {
    /// The manager's answer.
    Answer(Response),
    /// No answer by the deadline; the last failure to reach the manager, if that was why.
    Deadline { unreachable: Option<Error> },
}

/// How long withdrawing a waiting `AC_Get` at its deadline may take.
const WITHDRAW_LIMIT: Duration = Duration::from_millis(40);

/// A waiting `AC_Get` whose caller stopped waiting (its future dropped): on drop, the request
/// is withdrawn from a task of the runtime, and a grant made meanwhile is freed, so that the
/// job does not hold accelerators nobody will use until `AC_Finalize`.
struct Abandoned<'a> {
    session: &'a Session,
    request: Option<u64>,
    /// The runtime polling the request (a future may be dropped outside it).
    rt: Option<tokio::runtime::Handle>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let (Some(id), Some(rt)) = (self.request, self.rt.as_ref()) else { return };
        let (client, token) = (self.session.client.clone(), self.session.token.clone());
        rt.spawn(async move {
            let cancel = Request::CancelGet { token: token.clone(), request: id };
            if let Ok(Response::Granted { set, .. }) = client.request(cancel).await {
                let free = Request::Free { token, set, accelerators: None };
                client.request(free).await.ok();
            }
        });
    }
}
