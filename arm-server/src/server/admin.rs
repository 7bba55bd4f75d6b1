//! Admin and batch requests (mutual TLS, a role per certificate): hosts, jobs, reservations,
//! devices, accounting. Each is checked against the caller's role and written to the audit log.

use std::time::Duration;

use ac_proto::arm::{ArmError, ArmErrorKind, Request, Response};
use ac_proto::capability::unix_now;

use super::views::{host_view, job_view, reservation_view};
use super::{err, Answer, Arm};
use crate::core::ReservationOwner;
use crate::keys;
use crate::model::{Job, JobState};
use crate::roles::{self, Caller, Role};

impl Arm {
    /// Refuses a request the caller's role may not make (or whose certificate was revoked), and
    /// writes the others to the audit log.
    pub(super) fn authorize(&self, request: &Request, caller: &Caller, needed: Role) -> Result<(), ArmError> {
        let (call, role) = (roles::request_name(request), caller.role.map(Role::unit));
        let revoked = self.revocations.revoked(&caller.fingerprint);
        if revoked || !caller.may(request) {
            let why = match (revoked, caller.role) {
                (true, _) => "its certificate was revoked".to_string(),
                (false, None) => format!("it needs a client certificate of role {}", needed.unit()),
                (false, Some(role)) => {
                    format!("the {} role may not make it (role {} may)", role.unit(), needed.unit())
                }
            };
            tracing::warn!(target: "audit", who = caller.name, ?role, call, why, "request refused");
            return Err(err(ArmErrorKind::Unauthorized, format!("{call} refused: {why}")));
        }
        // Who did what: every admin and batch request, at info (`target: audit`).
        let cert = caller.fingerprint.get(..16).unwrap_or("");
        tracing::info!(target: "audit", who = caller.name, ?role, cert, "{}", audit_summary(request));
        Ok(())
    }

    /// Answers an admin or batch request, once authorized.
    pub(super) async fn admin_request(&self, request: Request) -> Answer {
        match request {
            Request::HostAdd { addr, name, server_name, ca_pem, labels } => {
                let host = self.probe(addr, name, server_name, ca_pem, labels).await?;
                self.mutate(|core, _| core.add_host(host.clone())).await?;
                // Only a live link marks a host up; answer once it is (or say it is not, yet).
                self.links.start(&host);
                for _ in 0..150 {
                    if self.core.lock().expect("core poisoned").hosts().get(&host.name).is_some_and(|h| h.up) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let core = self.core.lock().expect("core poisoned");
                Ok(Response::Host(host_view(&core.hosts()[&host.name])))
            }
            Request::HostList => {
                let core = self.core.lock().expect("core poisoned");
                Ok(Response::Hosts(core.hosts().values().map(host_view).collect()))
            }
            Request::HostDrain { name, drain } => {
                self.mutate(|core, now| core.drain(&name, drain, now)).await?;
                Ok(Response::Done)
            }
            Request::HostRemove { name, force } => {
                self.mutate(|core, _| core.remove_host(&name, force)).await?;
                self.links.stop(&name);
                Ok(Response::Done)
            }
            Request::JobSubmit { id, nodes, acpn, user, walltime_s, group, reservation, peak } => {
                let credential = keys::random_secret();
                let group = group.or_else(|| self.config.accounts.get(&user).cloned()).unwrap_or_else(|| user.clone());
                let job = Job {
                    credential_hash: keys::hash(&credential),
                    reservation,
                    peak,
                    ..Job::queued(id.clone(), user, group, nodes, acpn, walltime_s)
                };
                self.mutate(|core, now| core.submit(job, now)).await?;
                Ok(Response::Submitted { id, credential })
            }
            Request::JobBind { id, nodes, acpn, user, uid, walltime_s } => {
                self.bind_job(id, nodes, acpn, user, uid, walltime_s).await?;
                Ok(Response::Done)
            }
            Request::JobEnd { id } => {
                self.end_job(id).await?;
                Ok(Response::Done)
            }
            Request::Health => Ok(Response::Health(self.health())),
            Request::Devices => self.devices(),
            Request::ClearDevice { accelerator } => self.clear_device(&accelerator),
            Request::Accounting { since_ms, until_ms, by } => self.accounting(since_ms, until_ms, by).await,
            Request::ClusterStatus => self.cluster_status(),
            Request::ClusterAdd { replica } => self.cluster_add(replica).await,
            Request::ClusterRemove { id } => self.cluster_remove(id).await,
            Request::ClusterReplace { old, new } => self.cluster_replace(old, new).await,
            Request::JobList { all } => {
                let core = self.core.lock().expect("core poisoned");
                let starts = core.expected_starts(unix_now());
                let view = |j: &Job| job_view(&core, j, starts.get(&j.id).copied().flatten());
                let shown = core.jobs().values().filter(|j| all || j.state != JobState::Ended);
                Ok(Response::Jobs(shown.map(view).collect()))
            }
            Request::ReservationCreate { count, start, duration_s, user, job } => {
                let owner = match (user, job) {
                    (Some(user), None) => ReservationOwner::User(user),
                    (None, Some(job)) => ReservationOwner::Job(job),
                    _ => return Err(err(ArmErrorKind::Invalid, "a reservation is for a user or for a job")),
                };
                let id = self.mutate(|core, now| core.reserve(count, start, duration_s, owner, now)).await?;
                let core = self.core.lock().expect("core poisoned");
                let reservation =
                    core.reservations().get(&id).ok_or_else(|| err(ArmErrorKind::NotFound, "deleted meanwhile"))?;
                Ok(Response::Reservation(reservation_view(&core, reservation, unix_now())))
            }
            Request::ReservationList => {
                let core = self.core.lock().expect("core poisoned");
                let now = unix_now();
                Ok(Response::Reservations(
                    core.reservations().values().map(|r| reservation_view(&core, r, now)).collect(),
                ))
            }
            Request::ReservationDelete { id } => {
                self.mutate(|core, now| core.unreserve(id, now)).await?;
                Ok(Response::Done)
            }
            Request::JobShow { id } => {
                let core = self.core.lock().expect("core poisoned");
                let job = core.jobs().get(&id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
                let start = core.expected_start(&id, unix_now());
                Ok(Response::Job(Box::new(job_view(&core, job, start))))
            }
            other => {
                Err(err(ArmErrorKind::Internal, format!("{} is not an admin request", roles::request_name(&other))))
            }
        }
    }
}

/// What an admin or batch request asks, for the audit log: its arguments, never a secret or a
/// certificate.
fn audit_summary(request: &Request) -> String {
    match request {
        Request::HostAdd { addr, name, labels, .. } => format!("host add {name} at {addr} {labels:?}"),
        Request::HostDrain { name, drain } => format!("host {} {name}", if *drain { "drain" } else { "undrain" }),
        Request::HostRemove { name, force } => format!("host remove {name} (force {force})"),
        Request::JobSubmit { id, nodes, acpn, user, .. } => {
            format!("job submit {id} user {user} acpn {acpn} on {nodes:?}")
        }
        Request::JobBind { id, nodes, acpn, user, .. } => format!("job bind {id} user {user} acpn {acpn} on {nodes:?}"),
        Request::JobEnd { id } => format!("job end {id}"),
        Request::ReservationCreate { count, user, .. } => format!("reservation create of {count} for {user:?}"),
        Request::ReservationDelete { id } => format!("reservation delete {id}"),
        Request::ClearDevice { accelerator } => format!("device clear {accelerator}"),
        Request::ClusterAdd { replica: r } => {
            format!("cluster add {} raft {} api {} key {}", r.id, r.raft, r.api, r.key)
        }
        Request::ClusterRemove { id } => format!("cluster remove {id}"),
        Request::ClusterReplace { old, new: r } => {
            format!("cluster replace {old} by {} raft {} api {} key {}", r.id, r.raft, r.api, r.key)
        }
        other => roles::request_name(other).to_string(),
    }
}
