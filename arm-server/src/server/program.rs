//! Programs' requests: sessions (`AC_Init`), dynamic requests (`AC_Get` and its waiting,
//! cancelled and collective forms), notices, frees and `AC_Finalize`. Each is answered with the
//! capabilities the manager signs for what the program holds.

use std::time::Duration;

use ac_proto::arm::{
    ArmError, ArmErrorKind, Ask, Grant, JobAuth, Request, Response, Route, SessionState, MIN_TOKEN_LEN,
};
use ac_proto::capability::{self, unix_now};

use super::commit::Promise;
use super::lease::Link;
use super::{batch, err, Answer, Arm};
use crate::core::{Core, GetOutcome, StaticState};
use crate::keys;
use crate::model::Holder;

/// How long one `AwaitGet` waits before answering "still waiting" (under the client's
/// request timeout).
const AWAIT_LIMIT: Duration = Duration::from_secs(1);

impl Arm {
    /// Answers a program's request (one that needs no role).
    pub(super) async fn program_request(&self, request: Request, link: &Link) -> Answer {
        match request {
            Request::ManagerKey => Ok(Response::ManagerKey(self.keys.pinned())),
            Request::Init { auth, node, token } => {
                if matches!(auth, JobAuth::AdHoc { .. }) && !self.config.ad_hoc_allowed() {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        "ad-hoc jobs are disabled (allow_ad_hoc = false, the default with [slurm]): run inside a \
                         batch job",
                    ));
                }
                if token.len() < MIN_TOKEN_LEN {
                    return Err(err(
                        ArmErrorKind::Invalid,
                        format!("a session token has {MIN_TOKEN_LEN} characters or more"),
                    ));
                }
                let token_hash = keys::hash(&token);
                match &auth {
                    JobAuth::Munge { job, credential } => {
                        self.open_munge_session(&token_hash, job, credential, &node).await?;
                    }
                    _ => self
                        .mutate(|core, now| core.open_session(token_hash.clone(), &auth, &node, now))
                        .await
                        .map(drop)?,
                }
                self.attach(&token_hash, link);
                self.session_answer(token, &token_hash)
            }
            Request::Routes { auth, node } => {
                let core = self.core.lock().expect("core poisoned");
                let routes = core.routes(&auth, &node)?;
                Ok(Response::Routes(
                    routes
                        .into_iter()
                        .map(|(id, host)| Route {
                            id,
                            addr: host.addr,
                            server_name: host.server_name.clone(),
                            ca_pem: host.ca_pem.clone(),
                        })
                        .collect(),
                ))
            }
            Request::Poll { token } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                self.session_answer(token, &token_hash)
            }
            Request::Get { token, ask } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self
                    .get_decided(&token_hash, &ask.key, |core, now| core.get(&token_hash, &[], false, &ask, now))
                    .await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, ask.max)
            }
            Request::GetElastic { token, ask, notice_s } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self
                    .get_decided(&token_hash, &ask.key, |core, now| core.get_elastic(&token_hash, &ask, notice_s, now))
                    .await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, ask.max)
            }
            Request::CollectiveGet { token, parts, key } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let total = parts.iter().map(|(_, n)| n).sum();
                let ask = Ask::exactly(total, key);
                let _in_flight = batch::InFlight::new(&self.grants_in_flight);
                let outcome = self
                    .get_decided(&token_hash, &ask.key, |core, now| core.get(&token_hash, &parts, true, &ask, now))
                    .await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, true, total)
            }
            Request::AwaitGet { token, request } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let decided = self
                    .long_poll(|core| {
                        let outcome = core.peek_get(&token_hash, request)?;
                        Ok((!matches!(outcome, GetOutcome::Waiting(_))).then_some(()))
                    })
                    .await?;
                // Granted, or rejected (then forgotten, durably, once told); or still waiting.
                let outcome = match decided {
                    Some(()) => self.mutate(|core, _| core.await_get(&token_hash, request)).await?,
                    None => GetOutcome::Waiting(request),
                };
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, 0)
            }
            Request::CancelGet { token, request } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let outcome = self.mutate(|core, now| core.cancel_get(&token_hash, request, now)).await?;
                let outcome = self.record_grant(outcome, &token_hash).await?;
                self.get_answer(outcome, &token_hash, false, 0)
            }
            Request::LentUntil { token, set } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let core = self.core.lock().expect("core poisoned");
                core.own_set(&token_hash, set)?;
                Ok(Response::LentUntil(core.lent_until(set, unix_now())))
            }
            Request::Notices { token } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let notices = self
                    .long_poll(|core| {
                        let notices = core.take_notices(&token_hash, link.id, unix_now())?;
                        Ok((!notices.is_empty()).then_some(notices))
                    })
                    .await?;
                Ok(Response::Notices(notices.unwrap_or_default()))
            }
            Request::JoinSet { token, set } => {
                let token_hash = keys::hash(&token);
                self.attach(&token_hash, link);
                let node = {
                    let core = self.core.lock().expect("core poisoned");
                    core.own_set(&token_hash, set)?;
                    core.session(&token_hash)?.node.clone()
                };
                self.granted(set, Some(&node))
            }
            Request::Free { token, set, accelerators } => {
                let token_hash = keys::hash(&token);
                let job = self.batch_job_for_release(&token_hash);
                self.mutate(|core, now| core.free(&token_hash, set, accelerators.as_deref(), now)).await?;
                self.record_release(job).await;
                Ok(Response::Done)
            }
            Request::Finalize { token } => {
                let token_hash = keys::hash(&token);
                let job = self.batch_job_for_release(&token_hash);
                self.mutate(|core, now| core.finalize(&token_hash, now)).await?;
                self.leases.lock().expect("leases poisoned").deadline.remove(&token_hash);
                self.record_release(job).await;
                Ok(Response::Done)
            }
            other => Err(err(
                ArmErrorKind::Internal,
                format!("{} is not a program's request", crate::roles::request_name(&other)),
            )),
        }
    }

    fn grant(&self, core: &Core, accel: &str, holder: &Holder, now: u64) -> Grant {
        let (host_name, index) = accel.rsplit_once('/').expect("accelerator ids are host/index");
        let host = &core.hosts()[host_name];
        let job = core.jobs().get(&holder.job);
        let ttl_end = now + self.config.capability_ttl_s;
        let expires = match job {
            Some(j) if j.walltime_s > 0 => {
                (j.started.unwrap_or(now) + j.walltime_s + self.config.walltime_grace_s).min(ttl_end)
            }
            _ => ttl_end,
        };
        let device = index.parse().expect("accelerator ids end in a device index");
        let grant = capability::Grant {
            id: holder.capability,
            job: holder.job.clone(),
            host: host_name.to_string(),
            device,
            expires,
        };
        Grant {
            id: accel.to_string(),
            device,
            node: holder.node.clone(),
            addr: host.addr,
            server_name: host.server_name.clone(),
            ca_pem: host.ca_pem.clone(),
            capability: self.keys.signer.issue(&grant),
        }
    }

    fn session_answer(&self, token: String, token_hash: &str) -> Answer {
        let core = self.core.lock().expect("core poisoned");
        let job = core.session(token_hash)?.job.clone();
        let state = match core.static_state(token_hash, unix_now())? {
            StaticState::Queued { position, needed, free, expected_start } => {
                SessionState::Queued { position, needed, free, expected_start }
            }
            StaticState::Bound(ids) => {
                let now = unix_now();
                let held = core.held_by(&job);
                let grants = ids
                    .iter()
                    .filter_map(|id| held.iter().find(|(a, _)| a == id).map(|(a, h)| self.grant(&core, a, h, now)))
                    .collect();
                SessionState::Bound(grants)
            }
        };
        Ok(Response::Session { token, job, state })
    }

    fn granted(&self, set: u64, node: Option<&str>) -> Answer {
        let core = self.core.lock().expect("core poisoned");
        let now = unix_now();
        let grants = core.set_members(set, node).iter().map(|(a, h)| self.grant(&core, a, h, now)).collect();
        Ok(Response::Granted { set, grants })
    }

    /// Looks at the core (`look`) until it finds something, waking at each change, for at most
    /// [`AWAIT_LIMIT`]; `None` when nothing came.
    async fn long_poll<T>(
        &self,
        mut look: impl FnMut(&mut Core) -> Result<Option<T>, ArmError>,
    ) -> Result<Option<T>, ArmError> {
        let until = tokio::time::Instant::now() + AWAIT_LIMIT;
        loop {
            // Armed before looking, so that a change in between is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(found) = look(&mut self.core.lock().expect("core poisoned"))? {
                return Ok(Some(found));
            }
            if tokio::time::Instant::now() >= until {
                return Ok(None);
            }
            let _ = tokio::time::timeout_at(until, changed).await;
        }
    }

    /// An `AC_Get` decided on the core: a fresh rejection (the request not remembered: not a
    /// replay of one decided earlier) promises nothing and is told at once; anything else once
    /// durable.
    async fn get_decided(
        &self,
        token_hash: &str,
        key: &str,
        decide: impl FnOnce(&mut Core, u64) -> Result<GetOutcome, ArmError>,
    ) -> Result<GetOutcome, ArmError> {
        self.decide(|core, now| {
            let outcome = decide(core, now)?;
            let fresh_rejection = matches!(outcome, GetOutcome::Rejected(_)) && !core.remembers(token_hash, key);
            Ok((outcome, if fresh_rejection { Promise::Nothing } else { Promise::Durable }))
        })
        .await
    }

    /// The answer to an `AC_Get`: this node's share of a granted set (every node's for a
    /// collective one), the rejection, or where a waiting request stands.
    fn get_answer(&self, outcome: GetOutcome, token_hash: &str, collective: bool, asked: u32) -> Answer {
        match &outcome {
            GetOutcome::Granted(_) => self.metrics.granted(),
            GetOutcome::Rejected(reason) => self.metrics.rejected(reason),
            GetOutcome::Waiting(_) => {}
        }
        match outcome {
            GetOutcome::Granted(set) => {
                let node = self.core.lock().expect("core poisoned").session(token_hash)?.node.clone();
                self.granted(set, (!collective).then_some(node.as_str()))
            }
            GetOutcome::Rejected(reason) if asked > 0 => Ok(self.rejection(asked, &reason)),
            GetOutcome::Rejected(reason) => Ok(Response::Rejected { reason }),
            GetOutcome::Waiting(request) => {
                let core = self.core.lock().expect("core poisoned");
                let deadline = core.pending().get(&request).map_or(0, |g| g.deadline);
                Ok(Response::Waiting {
                    request,
                    idle: core.usable_free() as u32,
                    ahead: core.waiting_ahead(request),
                    deadline,
                })
            }
        }
    }

    fn rejection(&self, count: u32, why: &str) -> Response {
        let free = self.core.lock().expect("core poisoned").usable_free();
        Response::Rejected { reason: format!("{count} accelerator(s) asked, {free} free: {why}") }
    }
}
