//! The pool's hosts: registered, up or down, serving what they were registered with, healthy,
//! drained and removed.

use ac_proto::arm::ArmErrorKind;

use super::{err, Core, Key, Outcome, Revocation};
use crate::model::{Holder, Host};

impl Core {
    /// Registers a host with its devices.
    pub fn add_host(&mut self, host: Host) -> Outcome<()> {
        if self.hosts.contains_key(&host.name) {
            return Err(err(ArmErrorKind::Conflict, format!("host `{}` is already registered", host.name)));
        }
        if host.name.contains('/') || host.name.is_empty() {
            return Err(err(ArmErrorKind::Invalid, "host names must be non-empty and contain no `/`"));
        }
        self.dirty.insert(Key::Host(host.name.clone()));
        self.hosts.insert(host.name.clone(), host);
        Ok(())
    }

    /// Marks a host up or down (heartbeats). Returns whether it changed.
    pub fn set_up(&mut self, name: &str, up: bool, now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        if host.up == up {
            return false;
        }
        host.up = up;
        if up {
            self.schedule(now);
        }
        true
    }

    /// Records the devices `name`'s backend serves (from its link): registered devices it does
    /// not serve as registered are not granted until it does again (runtime state, not
    /// stored). Returns whether that changed.
    pub fn set_served(&mut self, name: &str, served: &[ac_proto::backend::DeviceInfo], now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        let mismatch = host.compare(served);
        if host.mismatch == mismatch {
            return false;
        }
        let unserved = |m: &Option<crate::model::Mismatch>| m.as_ref().map_or(0, |m| m.unserved.len());
        let fewer = unserved(&mismatch) < unserved(&host.mismatch);
        host.mismatch = mismatch;
        if fewer {
            self.schedule(now);
        }
        true
    }

    /// Records each device's state as `name`'s backend reports it. Returns whether a device
    /// became grantable or ungrantable (health or faults).
    pub fn set_states(&mut self, name: &str, states: Vec<ac_proto::backend::DeviceState>, now: u64) -> bool {
        let Some(host) = self.hosts.get_mut(name) else { return false };
        let out = |h: &crate::model::Host| -> Vec<u32> {
            h.devices.iter().map(|d| d.index).filter(|&i| h.unhealthy(i).is_some()).collect()
        };
        let before = out(host);
        host.states = states.into_iter().map(|s| (s.index, s)).collect();
        let after = out(host);
        // One back in the pool may start a queued job.
        if before.iter().any(|i| !after.contains(i)) {
            self.schedule(now);
        }
        before != after
    }

    /// What admins should know about the hosts: backends that serve other devices than they were
    /// registered with, and accelerators their backends report unhealthy or faulty.
    pub fn host_problems(&self) -> Vec<String> {
        let unhealthy = self.hosts.values().flat_map(|h| {
            h.devices.iter().filter_map(move |d| {
                let reason = h.unhealthy(d.index)?;
                Some(format!("accelerator {} is not granted: {reason}", h.accelerator_id(d.index)))
            })
        });
        let mismatched = self.hosts.values().filter_map(|h| Some((h, h.mismatch.as_ref()?)));
        let mut problems: Vec<String> = unhealthy.collect();
        problems.extend(mismatched
            .map(|(h, m)| {
                format!(
                    "host {} serves other devices than it was registered with ({}); {} of its accelerator(s) are not \
                     granted until its backend serves them again (or remove and add the host to register what it serves)",
                    h.name,
                    m.differences.join("; "),
                    m.unserved.len()
                )
            }));
        problems
    }

    /// Drains (or resumes) a host.
    pub fn drain(&mut self, name: &str, drain: bool, now: u64) -> Outcome<()> {
        let host = self.hosts.get_mut(name).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no host `{name}`")))?;
        host.draining = drain;
        self.dirty.insert(Key::Host(name.to_string()));
        if !drain {
            self.schedule(now);
        }
        Ok(())
    }

    /// Removes a host: refused while allocated unless `force`, which revokes the allocations.
    pub fn remove_host(&mut self, name: &str, force: bool) -> Outcome<Host> {
        let host = self.hosts.get(name).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no host `{name}`")))?;
        let held: Vec<Holder> = host.devices.iter().filter_map(|d| d.holder.clone()).collect();
        if !held.is_empty() && !force {
            return Err(err(
                ArmErrorKind::Conflict,
                format!("host `{name}` has {} allocated accelerator(s); drain it, or remove with --force", held.len()),
            ));
        }
        for holder in held.iter().filter_map(Holder::user) {
            // Sent as the link closes; a removed host acknowledges nothing, so none is kept.
            self.revocations.push(Revocation { host: name.to_string(), capability: holder.capability });
            if let Some(set_id) = holder.set {
                let prefix = format!("{name}/");
                if let Some(set) = self.sets.get_mut(&set_id) {
                    set.accelerators.retain(|a| !a.starts_with(&prefix));
                    self.dirty.insert(Key::Set(set_id));
                }
            }
        }
        // Its accelerators lent are lent no more (nor counted in Slurm's lent reservation).
        let prefix = format!("{name}/");
        let lent: Vec<String> = self.leases.keys().filter(|a| a.starts_with(&prefix)).cloned().collect();
        for accel in lent {
            self.leases.remove(&accel);
            self.dirty.insert(Key::Lease(accel));
        }
        let delayed: Vec<(u64, String, u64)> = self.delayed.iter().filter(|(_, h, _)| h == name).cloned().collect();
        for (at, host, capability) in delayed {
            self.delayed.remove(&(at, host.clone(), capability));
            self.dirty.insert(Key::Delayed(at, host, capability));
        }
        let forgotten: Vec<(String, u64)> = self.unacked.iter().filter(|(h, _)| h == name).cloned().collect();
        for (host, capability) in forgotten {
            self.acknowledge(&host, capability);
        }
        self.dirty.insert(Key::Host(name.to_string()));
        Ok(self.hosts.remove(name).expect("checked above"))
    }
}
