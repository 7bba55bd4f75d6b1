//! Programs' sessions (`AC_Init`): opened with a job's credential, a batch job's munge proof or
//! as an ad-hoc job, and what each sees of its static allocation.

use ac_proto::arm::{ArmErrorKind, JobAuth};

use super::view::usable_free;
use super::{err, Core, Key, Outcome};
use crate::model::{Host, Job, JobState, Session};

/// What a session sees of its static allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticState {
    /// Bound: accelerator ids for the session's node, in a stable order.
    Bound(Vec<String>),
    /// Queued behind `position` jobs; needs `needed`, `free` are free.
    Queued {
        /// Jobs ahead.
        position: u32,
        /// Accelerators needed.
        needed: u32,
        /// Accelerators free.
        free: u32,
        /// When the plan expects it to start (Unix time).
        expected_start: Option<u64>,
    },
}

impl Core {
    /// The live, batch-submitted job `job` whose credential is `secret`, if `node` is one of its
    /// nodes.
    fn job_with_credential(&self, job: &str, secret: &str, node: &str) -> Outcome<&Job> {
        let found = self.jobs.get(job).filter(|j| j.state != JobState::Ended && !j.ad_hoc);
        let Some(found) =
            found.filter(|j| crate::keys::constant_time_eq(&j.credential_hash, &crate::keys::hash(secret)))
        else {
            return Err(err(ArmErrorKind::Unauthorized, format!("no running job `{job}` with that credential")));
        };
        if !found.nodes.iter().any(|n| n == node) {
            return Err(err(ArmErrorKind::Unauthorized, format!("node `{node}` is not one of job `{job}`'s nodes")));
        }
        Ok(found)
    }

    /// The accelerators the job of `auth` holds for `node`, with their hosts (`Request::Routes`):
    /// read-only, and only for a job credential that checks out.
    pub fn routes(&self, auth: &JobAuth, node: &str) -> Outcome<Vec<(String, &Host)>> {
        let JobAuth::Credential { job, secret } = auth else {
            return Ok(Vec::new());
        };
        let job = self.job_with_credential(job, secret, node)?;
        let held = self.held_by(&job.id).into_iter().filter(|(_, holder)| holder.node == node);
        Ok(held
            .filter_map(|(id, _)| {
                let host = self.hosts.get(id.rsplit_once('/')?.0)?;
                Some((id, host))
            })
            .collect())
    }

    /// `AC_Init`: opens a session for a job's node (creating an ad-hoc job if asked). A retry
    /// with the same token finds the session the first call opened.
    pub fn open_session(&mut self, token_hash: String, auth: &JobAuth, node: &str, now: u64) -> Outcome<String> {
        if let Some(session) = self.sessions.get(&token_hash) {
            return Ok(session.job.clone());
        }
        let job_id = match auth {
            JobAuth::Credential { job, secret } => self.job_with_credential(job, secret, node)?.id.clone(),
            JobAuth::AdHoc { acpn } => {
                let id = format!("adhoc-{}", self.next_id + 1);
                let job = Job {
                    id: id.clone(),
                    user: "adhoc".into(),
                    group: "adhoc".into(),
                    nodes: vec![node.to_string()],
                    acpn: *acpn,
                    walltime_s: 0,
                    submitted: now,
                    started: None,
                    state: JobState::Queued,
                    credential_hash: String::new(),
                    seq: 0,
                    ad_hoc: true,
                    reservation: None,
                    peak: None,
                    ended: None,
                    batch: None,
                };
                self.submit(job, now)?;
                id
            }
            JobAuth::Munge { .. } => {
                return Err(err(ArmErrorKind::Internal, "a munge credential is checked before the core sees it"));
            }
            JobAuth::SameJob { token } => {
                let unknown = || err(ArmErrorKind::Unauthorized, "no session with that token");
                let first = self.sessions.get(&crate::keys::hash(token)).ok_or_else(unknown)?;
                let job = self.jobs.get(&first.job).filter(|j| j.state != JobState::Ended).ok_or_else(unknown)?;
                // An ad-hoc job lives on its first node; its other processes must run there too.
                if !job.nodes.iter().any(|n| n == node) {
                    return Err(err(
                        ArmErrorKind::Unauthorized,
                        format!("node `{node}` is not one of job `{}`'s nodes", job.id),
                    ));
                }
                job.id.clone()
            }
        };
        self.insert_session(token_hash, job_id, node)
    }

    /// `AC_Init` of a process whose user munge vouched for (`uid`): a session of batch job
    /// `job` on `node`, if the job is that user's and runs there.
    pub fn open_batch_session(&mut self, token_hash: String, job: &str, uid: u32, node: &str) -> Outcome<String> {
        if let Some(session) = self.sessions.get(&token_hash) {
            return Ok(session.job.clone());
        }
        let refused = |why: String| err(ArmErrorKind::Unauthorized, why);
        let found = self.jobs.get(job).filter(|j| j.state == JobState::Running);
        let found = found.ok_or_else(|| refused(format!("no running batch job `{job}`")))?;
        match &found.batch {
            Some(batch) if batch.uid == uid => {}
            Some(_) => return Err(refused(format!("job `{job}` is not a job of uid {uid}"))),
            None => return Err(refused(format!("job `{job}` was not bound by the batch system"))),
        }
        if !found.nodes.iter().any(|n| n == node) {
            return Err(refused(format!("node `{node}` is not one of job `{job}`'s nodes")));
        }
        self.insert_session(token_hash, job.to_string(), node)
    }

    fn insert_session(&mut self, token_hash: String, job: String, node: &str) -> Outcome<String> {
        let session = Session { token_hash: token_hash.clone(), job: job.clone(), node: node.to_string() };
        self.sessions.insert(token_hash.clone(), session);
        self.dirty.insert(Key::Session(token_hash));
        Ok(job)
    }

    /// The session for a token hash.
    pub fn session(&self, token_hash: &str) -> Outcome<&Session> {
        self.sessions.get(token_hash).ok_or_else(|| err(ArmErrorKind::Unauthorized, "unknown or expired session"))
    }

    /// Where a session's static allocation stands.
    pub fn static_state(&self, token_hash: &str, now: u64) -> Outcome<StaticState> {
        let session = self.session(token_hash)?;
        let job = &self.jobs[&session.job];
        if job.state == JobState::Queued {
            let position = self.queue().iter().position(|j| j.id == job.id).unwrap_or(0) as u32;
            return Ok(StaticState::Queued {
                position,
                needed: job.nodes.len() as u32 * job.acpn,
                free: usable_free(&self.hosts) as u32,
                expected_start: self.expected_start(&job.id, now),
            });
        }
        let bound = self
            .held_by(&job.id)
            .into_iter()
            .filter(|(_, h)| h.set.is_none() && h.node == session.node)
            .map(|(a, _)| a)
            .collect();
        Ok(StaticState::Bound(bound))
    }
}
