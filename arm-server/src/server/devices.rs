//! `armctl device list` and `armctl device clear`: each accelerator's identity, health and
//! sessions as its backend reports them, and putting one a critical fault took out back in the
//! pool once an admin has checked it.

use ac_proto::arm::{ArmErrorKind, DeviceView, Response};
use ac_proto::backend::{ComputeMode, DeviceState, Health};

use super::{err, Answer, Arm};
use crate::model::Host;

impl Arm {
    /// Every accelerator, host by host.
    pub(super) fn devices(&self) -> Answer {
        let core = self.core.lock().expect("core poisoned");
        let views = core.hosts().values().flat_map(|host| {
            let states = self.links.states(&host.name);
            host.devices
                .iter()
                .map(|d| device_view(host, d.index, d.memory, states.iter().find(|s| s.index == d.index)))
                .collect::<Vec<_>>()
        });
        Ok(Response::Devices(views.collect()))
    }

    /// Tells the backend of `accelerator` (`host/index`) that an admin cleared its faults.
    #[tracing::instrument(skip(self))]
    pub(super) fn clear_device(&self, accelerator: &str) -> Answer {
        let not_found = || err(ArmErrorKind::NotFound, format!("no accelerator `{accelerator}` (host/index)"));
        let (host, index) = accelerator.rsplit_once('/').ok_or_else(not_found)?;
        let index: u32 = index.parse().map_err(|_| not_found())?;
        let known = {
            let core = self.core.lock().expect("core poisoned");
            core.hosts().get(host).is_some_and(|h| h.devices.iter().any(|d| d.index == index))
        };
        if !known {
            return Err(not_found());
        }
        if !self.links.clear_faults(host, index) {
            return Err(err(ArmErrorKind::Backend, format!("host `{host}` has no link to its backend")));
        }
        tracing::info!(accelerator, "faults cleared by an admin: granted again once its backend reports it");
        Ok(Response::Done)
    }
}

fn device_view(host: &Host, index: u32, memory: u64, state: Option<&DeviceState>) -> DeviceView {
    let id = host.accelerator_id(index);
    let Some(state) = state else {
        return DeviceView {
            id,
            uuid: None,
            pci_bus_id: None,
            health: "unreported".into(),
            reason: Some("its backend has not reported (down, or older than protocol 6)".into()),
            compute_mode: "n/a".into(),
            mig_profile: None,
            memory,
            sessions: 0,
            max_sessions: 0,
        };
    };
    let (health, reason) = match (&state.health, host.unhealthy(index)) {
        (_, Some(reason)) => ("unhealthy", Some(reason)),
        (Health::Unknown(why), None) => ("unknown", Some(why.clone())),
        _ => ("healthy", None),
    };
    DeviceView {
        id,
        uuid: state.uuid.clone(),
        pci_bus_id: state.pci_bus_id.clone(),
        health: health.into(),
        reason,
        compute_mode: compute_mode_name(state.compute_mode).into(),
        mig_profile: state.mig_profile.clone(),
        memory,
        sessions: state.sessions,
        max_sessions: state.max_sessions,
    }
}

/// How `armctl` and the metrics spell a compute mode.
pub fn compute_mode_name(mode: ComputeMode) -> &'static str {
    match mode {
        ComputeMode::NotApplicable => "n/a",
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveProcess => "exclusive_process",
        ComputeMode::Prohibited => "prohibited",
    }
}
