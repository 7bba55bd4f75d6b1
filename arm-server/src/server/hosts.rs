//! The backends' hosts: registering one (`probe`), and what its link reports (up, what it
//! serves, its devices' health, acknowledged revocations).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ac_proto::arm::{ArmError, ArmErrorKind};
use ac_proto::backend::link::{self, ConnectOptions};
use ac_proto::capability::unix_now;
use tokio::sync::mpsc;

use super::{err, Arm};
use crate::links::LinkEvent;
use crate::model::{Device, Host};

pub(super) async fn host_events(arm: Arc<Arm>, mut events: mpsc::UnboundedReceiver<LinkEvent>) {
    let mut next = events.recv().await;
    while let Some(event) = next.take() {
        match event {
            LinkEvent::Up { host, up } => {
                if up {
                    resend_unacked(&arm, &host);
                }
                let _ = arm
                    .mutate(|core, now| {
                        core.set_up(&host, up, now);
                        Ok(())
                    })
                    .await;
                arm.link_reported(&host);
            }
            LinkEvent::Served { host, devices } => {
                let changed = arm.mutate(|core, now| Ok(core.set_served(&host, &devices, now))).await;
                if changed.unwrap_or(false) {
                    match arm.core.lock().expect("core poisoned").hosts().get(&host).and_then(|h| h.mismatch.clone()) {
                        Some(m) => tracing::warn!(
                            host,
                            differences = %m.differences.join("; "),
                            "the backend serves other devices than it was registered with: those are not granted"
                        ),
                        None => tracing::info!(host, "the backend serves the devices it was registered with"),
                    }
                }
            }
            LinkEvent::States { host, states } => {
                let changed = arm.mutate(|core, now| Ok(core.set_states(&host, states, now))).await;
                if changed.unwrap_or(false) {
                    let core = arm.core.lock().expect("core poisoned");
                    for (h, d) in core.hosts().get(&host).iter().flat_map(|h| h.devices.iter().map(move |d| (*h, d))) {
                        match h.unhealthy(d.index) {
                            Some(reason) => {
                                tracing::error!(accelerator = h.accelerator_id(d.index), reason, "not granted")
                            }
                            None => tracing::info!(accelerator = h.accelerator_id(d.index), "grantable"),
                        }
                    }
                }
            }
            LinkEvent::Revoked { host, capability } => {
                // One acknowledgement comes per freed accelerator: those already queued commit
                // together rather than one transaction each.
                let mut acks = vec![(host, capability)];
                loop {
                    match events.try_recv() {
                        Ok(LinkEvent::Revoked { host, capability }) => acks.push((host, capability)),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = arm
                    .mutate(|core, _| {
                        acks.iter().for_each(|(host, capability)| core.acknowledge(host, *capability));
                        Ok(())
                    })
                    .await;
            }
        }
        if next.is_none() {
            next = events.recv().await;
        }
    }
}

/// What `host` had not acknowledged (it may have died before storing it) goes out again on its
/// new link.
fn resend_unacked(arm: &Arm, host: &str) {
    let unacked: Vec<u64> = {
        let core = arm.core.lock().expect("core poisoned");
        core.unacked().iter().filter(|(h, _)| h == host).map(|(_, c)| *c).collect()
    };
    let expires = unix_now() + arm.config.capability_ttl_s + 86_400;
    for capability in unacked {
        arm.links.revoke(host, capability, expires);
    }
}

impl Arm {
    /// Connects to a backend, registers this manager with it and learns its device.
    pub(super) async fn probe(
        &self,
        addr: SocketAddr,
        name: String,
        server_name: String,
        ca_pem: String,
        labels: Vec<(String, String)>,
    ) -> Result<Host, ArmError> {
        let backend = |e: ac_proto::ProtoError| err(ArmErrorKind::Backend, format!("backend {addr}: {e}"));
        let mut options = ConnectOptions::new(addr, "");
        options.server_name = server_name.clone();
        options.ca_pem = Some(ca_pem.clone());
        let crypto = link::client_crypto(&options).map_err(backend)?;
        let hello = self.keys.registration(&name);
        let probe = tokio::time::timeout(Duration::from_secs(5), link::open(&options, crypto, &hello))
            .await
            .map_err(|_| err(ArmErrorKind::Backend, format!("backend {addr} did not answer in 5 s")))?
            .map_err(backend)?;
        let ac_proto::backend::Response::Devices(infos) = &probe.welcome else {
            return Err(err(ArmErrorKind::Backend, "backend did not list its devices"));
        };
        let devices = infos
            .iter()
            .map(|info| Device { index: info.index, name: info.name.clone(), memory: info.memory_total, holder: None })
            .collect();
        probe.connection.close(0u32.into(), b"probe done");
        Ok(Host {
            name,
            addr,
            server_name,
            ca_pem,
            labels,
            draining: false,
            up: false,
            devices,
            mismatch: None,
            states: Default::default(),
        })
    }
}
