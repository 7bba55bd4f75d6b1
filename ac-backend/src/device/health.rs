//! Each served device's health, identity and admission: what the backend reports to its manager
//! ([`DeviceState`]) and what decides whether a device takes one more session. No I/O and no
//! clock: the NVML watch ([`crate::device::nvml`]) feeds it observations; tests feed it their own.
//!
//! # The model
//! - A **condition** is what a poll sees now and holds while it lasts: the GPU fell off the bus
//!   ("GPU lost"), pages wait for retirement, rows wait for remapping, uncorrectable ECC errors
//!   grew, the compute mode became `PROHIBITED`. A device with a condition is
//!   [`Health::Unhealthy`] and takes no session; it recovers when a poll no longer sees it.
//! - A **fault** is an event: a critical Xid (any but the application Xids
//!   [`APPLICATION_XIDS`], as the Kubernetes device plugin does). The backend counts them and
//!   reports the count; the manager grants the device only while the count is 0. An admin
//!   clears it (`armctl device clear`, which the manager passes on); a restart of the manager
//!   forgets nothing, and a backend restarted after a GPU reset starts at zero.
//! - An **application Xid** (13, 31, 43, 45, 68, 109) is the program's fault: the session whose
//!   worker faulted gets `ContextLost` from CUDA and ends; the device stays healthy.
//! - **Unknown**: nothing watches the device (no NVML, a CPU device). Said, never a failure.
//!
//! # Admission
//! A device admits a session when it has no condition, fewer sessions than its limit
//! (`max_sessions`; one in `EXCLUSIVE_PROCESS` compute mode, which admits one process), and is
//! not `PROHIBITED`. A refusal names the reason; the session is refused with
//! `close::DEVICE_REFUSED`.

use std::collections::BTreeMap;

use ac_proto::backend::{ComputeMode, DeviceState, Health};

/// Xids that NVIDIA's catalog attributes to the application (a bad address, a trap, a
/// timeout of its own kernel): they end the faulting session only.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// Whether Xid `xid` is an application's fault rather than the GPU's.
pub fn is_application_xid(xid: u64) -> bool {
    APPLICATION_XIDS.contains(&xid)
}

/// Xid `xid` with what NVIDIA's catalog says of it, for admins.
pub fn describe_xid(xid: u64) -> String {
    let what = match xid {
        13 => "graphics engine exception (an application's fault)",
        31 => "GPU memory page fault (an application's fault)",
        43 => "GPU stopped processing (an application's fault)",
        45 => "preemptive cleanup after a fault (an application's fault)",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller error",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failed",
        68 => "video processor exception (an application's fault)",
        74 => "NVLink error",
        79 => "the GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout (an application's fault)",
        119 | 120 => "GSP error",
        _ => "see NVIDIA's Xid catalog",
    };
    format!("Xid {xid}: {what}")
}

/// What one poll of a device saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Nothing wrong; the compute mode it is in.
    Fine(ComputeMode),
    /// A condition, described for admins.
    Condition(String),
    /// The device could not be asked (NVML missing or unable); the reason.
    Unknown(String),
}

/// One device as the watch knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// UUID of the GPU or MIG instance.
    pub uuid: Option<String>,
    /// PCI bus id of the GPU.
    pub pci_bus_id: Option<String>,
    /// The MIG profile of an instance.
    pub mig_profile: Option<String>,
    /// Now.
    pub health: Health,
    /// Its compute mode.
    pub compute_mode: ComputeMode,
    /// Critical events since the backend started.
    pub faults: u32,
    /// The last one.
    pub last_fault: Option<String>,
    /// Its session limit.
    pub max_sessions: u32,
    /// Sessions open now.
    pub sessions: u32,
    /// Its sessions are MPS clients: one process (the MPS server) holds the GPU, whatever the
    /// compute mode.
    pub mps: bool,
}

impl Watched {
    /// A device nothing watches yet: `why` says why its health is unknown.
    pub fn unwatched(why: &str, max_sessions: u32) -> Self {
        Self {
            uuid: None,
            pci_bus_id: None,
            mig_profile: None,
            health: Health::Unknown(why.to_string()),
            compute_mode: ComputeMode::NotApplicable,
            faults: 0,
            last_fault: None,
            max_sessions,
            sessions: 0,
            mps: false,
        }
    }

    /// The sessions it admits at once: one in `EXCLUSIVE_PROCESS` mode, else its limit.
    pub fn capacity(&self) -> u32 {
        match self.compute_mode {
            ComputeMode::ExclusiveProcess if !self.mps => self.max_sessions.min(1),
            ComputeMode::Prohibited => 0,
            _ => self.max_sessions,
        }
    }

    /// Why it takes no further session now, if it does not.
    pub fn refusal(&self, index: u32) -> Option<String> {
        if let Health::Unhealthy(reason) = &self.health {
            return Some(format!("device {index} is unhealthy: {reason}"));
        }
        if self.compute_mode == ComputeMode::Prohibited {
            return Some(format!("device {index} is in PROHIBITED compute mode: it admits no process (nvidia-smi -c)"));
        }
        if self.sessions >= self.capacity() {
            return Some(match self.compute_mode {
                ComputeMode::ExclusiveProcess => format!(
                    "device {index} is in EXCLUSIVE_PROCESS compute mode and already serves a session: one at a time"
                ),
                _ => format!("device {index} serves its limit of {} sessions (max_sessions)", self.max_sessions),
            });
        }
        None
    }
}

/// Every served device's [`Watched`] state, by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Board {
    devices: BTreeMap<u32, Watched>,
}

impl Board {
    /// A board of these devices.
    pub fn new(devices: impl IntoIterator<Item = (u32, Watched)>) -> Self {
        Self { devices: devices.into_iter().collect() }
    }

    /// One device's state.
    pub fn get(&self, index: u32) -> Option<&Watched> {
        self.devices.get(&index)
    }

    /// Records what a poll of device `index` saw. Returns whether its reported state changed.
    pub fn polled(&mut self, index: u32, poll: Poll) -> bool {
        let Some(device) = self.devices.get_mut(&index) else { return false };
        let before = (device.health.clone(), device.compute_mode);
        match poll {
            Poll::Fine(mode) => {
                device.health = Health::Healthy;
                device.compute_mode = mode;
            }
            Poll::Condition(reason) => device.health = Health::Unhealthy(reason),
            // An NVML that cannot answer says nothing about a condition seen before: it stays
            // until a poll sees the device fine.
            Poll::Unknown(_) if matches!(device.health, Health::Unhealthy(_)) => {}
            Poll::Unknown(reason) => device.health = Health::Unknown(reason),
        }
        before != (device.health.clone(), device.compute_mode)
    }

    /// Records Xid `xid` on device `index`: a critical one counts as a fault; an application's
    /// changes nothing (its session ends by CUDA's own error). Returns whether the reported state
    /// changed.
    pub fn xid(&mut self, index: u32, xid: u64) -> bool {
        let Some(device) = self.devices.get_mut(&index) else { return false };
        if is_application_xid(xid) {
            return false;
        }
        device.faults += 1;
        device.last_fault = Some(describe_xid(xid));
        true
    }

    /// An admin cleared device `index`'s faults. Returns whether its reported state changed.
    pub fn clear_faults(&mut self, index: u32) -> bool {
        let Some(device) = self.devices.get_mut(&index) else { return false };
        std::mem::take(&mut device.faults) > 0
    }

    /// Takes a session slot on device `index`, or says why not.
    pub fn admit(&mut self, index: u32) -> Result<(), String> {
        let Some(device) = self.devices.get_mut(&index) else { return Err(format!("no device {index} here")) };
        if let Some(refusal) = device.refusal(index) {
            return Err(refusal);
        }
        device.sessions += 1;
        Ok(())
    }

    /// Gives back a slot [`Board::admit`] took.
    pub fn release(&mut self, index: u32) {
        if let Some(device) = self.devices.get_mut(&index) {
            device.sessions = device.sessions.saturating_sub(1);
        }
    }

    /// What the manager is told.
    pub fn states(&self) -> Vec<DeviceState> {
        self.devices
            .iter()
            .map(|(&index, d)| DeviceState {
                index,
                uuid: d.uuid.clone(),
                pci_bus_id: d.pci_bus_id.clone(),
                health: d.health.clone(),
                faults: d.faults,
                last_fault: d.last_fault.clone(),
                compute_mode: d.compute_mode,
                mig_profile: d.mig_profile.clone(),
                sessions: d.sessions,
                max_sessions: d.max_sessions,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(mode: ComputeMode, max: u32) -> Watched {
        Watched { health: Health::Healthy, compute_mode: mode, ..Watched::unwatched("", max) }
    }

    #[test]
    fn a_critical_xid_counts_and_an_application_xid_does_not() {
        let mut board = Board::new([(0, gpu(ComputeMode::Default, 4))]);
        assert!(!board.xid(0, 13));
        assert_eq!(board.get(0).unwrap().faults, 0);
        assert!(board.xid(0, 79));
        let device = board.get(0).unwrap();
        assert_eq!(device.faults, 1);
        assert!(device.last_fault.as_deref().unwrap().contains("fallen off the bus"));
        // A fault does not refuse sessions here: the manager decides, an admin clears.
        assert!(board.admit(0).is_ok());
        assert!(board.clear_faults(0));
        assert_eq!(board.get(0).unwrap().faults, 0);
        assert!(!board.clear_faults(0), "nothing to clear: no push");
    }

    #[test]
    fn a_condition_refuses_sessions_until_a_poll_no_longer_sees_it() {
        let mut board = Board::new([(0, gpu(ComputeMode::Default, 4))]);
        assert!(board.polled(0, Poll::Condition("GPU lost".into())));
        assert!(board.admit(0).unwrap_err().contains("unhealthy: GPU lost"));
        assert!(!board.polled(0, Poll::Condition("GPU lost".into())), "no change, no push");
        assert!(!board.polled(0, Poll::Unknown("NVML timed out".into())), "no answer clears nothing");
        assert!(board.admit(0).is_err());
        assert!(board.polled(0, Poll::Fine(ComputeMode::Default)));
        assert!(board.admit(0).is_ok());
    }

    #[test]
    fn exclusive_process_admits_one_session_and_prohibited_none() {
        let mut board = Board::new([(0, gpu(ComputeMode::ExclusiveProcess, 8)), (1, gpu(ComputeMode::Prohibited, 8))]);
        board.admit(0).unwrap();
        assert!(board.admit(0).unwrap_err().contains("EXCLUSIVE_PROCESS"));
        board.release(0);
        board.admit(0).unwrap();
        assert!(board.admit(1).unwrap_err().contains("PROHIBITED"));
    }

    #[test]
    fn the_session_limit_holds_and_slots_come_back() {
        let mut board = Board::new([(0, gpu(ComputeMode::Default, 2))]);
        board.admit(0).unwrap();
        board.admit(0).unwrap();
        assert!(board.admit(0).unwrap_err().contains("limit of 2 sessions"));
        board.release(0);
        board.admit(0).unwrap();
        assert_eq!(board.states()[0].sessions, 2);
    }

    #[test]
    fn unknown_health_is_said_and_serves() {
        let mut board = Board::new([(0, Watched::unwatched("no NVML on this host", 4))]);
        assert_eq!(board.states()[0].health, Health::Unknown("no NVML on this host".into()));
        assert!(board.admit(0).is_ok());
    }
}
