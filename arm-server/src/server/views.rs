//! What the admin requests and the metrics show of the state: hosts, reservations, jobs.

use ac_proto::arm::{AcceleratorView, HostView, JobView, ReservationView};

use crate::core::Core;
use crate::model::{Host, Job, JobState, Reservation};

pub(super) fn host_view(host: &Host) -> HostView {
    let state = if !host.up {
        "down"
    } else if host.draining {
        "draining"
    } else if host.mismatch.is_some() {
        // Its backend serves other devices than registered: `armctl health` says which.
        "mismatch"
    } else {
        "up"
    };
    HostView {
        name: host.name.clone(),
        addr: host.addr,
        state: state.into(),
        labels: host.labels.clone(),
        accelerators: host
            .devices
            .iter()
            .map(|d| AcceleratorView {
                id: host.accelerator_id(d.index),
                device: d.name.clone(),
                memory: d.memory,
                state: match (&d.holder, host.up && !host.unserved(d.index), host.draining) {
                    (_, false, _) => "down",
                    (Some(_), _, _) => "allocated",
                    (None, _, true) => "draining",
                    (None, _, false) if host.unhealthy(d.index).is_some() => "unhealthy",
                    (None, _, false) => "free",
                }
                .into(),
                holder: d.holder.as_ref().map(|h| h.job.clone()),
            })
            .collect(),
    }
}

pub(super) fn reservation_view(core: &Core, r: &Reservation, now: u64) -> ReservationView {
    ReservationView {
        id: r.id,
        count: r.count,
        start: r.start,
        duration_s: r.duration,
        user: r.user.clone(),
        jobs: core.jobs().values().filter(|j| j.reservation == Some(r.id)).map(|j| j.id.clone()).collect(),
        state: if r.start > now { "planned" } else { "active" }.into(),
    }
}

pub(super) fn job_view(core: &Core, job: &Job, expected_start: Option<u64>) -> JobView {
    let held = core.held_by(&job.id);
    JobView {
        id: job.id.clone(),
        user: job.user.clone(),
        group: job.group.clone(),
        nodes: job.nodes.clone(),
        acpn: job.acpn,
        state: match job.state {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Ended => "ended",
        }
        .into(),
        submitted: job.submitted,
        walltime_s: job.walltime_s,
        expected_start,
        static_accelerators: held
            .iter()
            .filter(|(_, h)| h.set.is_none())
            .map(|(a, h)| (h.node.clone(), a.clone()))
            .collect(),
        dynamic_accelerators: held.iter().filter_map(|(a, h)| h.set.map(|s| (s, a.clone()))).collect(),
        waiting_requests: core.pending().values().filter(|g| g.job == job.id && g.rejected.is_none()).count() as u32,
        reservation: job.reservation,
        peak: job.peak,
        preallocated_unused: core
            .owned_by(&job.id)
            .into_iter()
            .filter(|(_, h)| h.spare() || h.loan.is_some())
            .map(|(a, _)| a)
            .collect(),
    }
}
