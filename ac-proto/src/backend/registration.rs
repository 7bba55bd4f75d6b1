//! The manager's registration link to a backend: its proof, the backend's reports (heartbeats,
//! device states, acknowledged revocations), the manager's orders, and the description of a
//! device (also in a session's welcome).

use serde::{Deserialize, Serialize};

/// The bytes a registration proof signs.
pub fn register_message(host: &str, time: u64) -> Vec<u8> {
    format!("ac-register:{host}:{time}").into_bytes()
}

/// The bytes a replicated manager's registration proof signs: the set of keys as well, so that
/// nobody can swap it.
pub fn register_cluster_message(host: &str, time: u64, cluster: &[[u8; 32]]) -> Vec<u8> {
    let keys: Vec<String> = cluster.iter().map(|k| k.iter().map(|b| format!("{b:02x}")).collect()).collect();
    format!("ac-register-cluster:{host}:{time}:{}", keys.join(",")).into_bytes()
}

/// What a backend sends on its registration stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// At every heartbeat interval.
    Heartbeat(Heartbeat),
    /// A [`Revoke`] is in force and stored: the backend refuses the capability until it
    /// expires, restarts included. The manager may forget the revocation.
    Revoked {
        /// The capability's id.
        capability: u64,
    },
    /// Protocol 6, in place of [`Report::Heartbeat`]: at every heartbeat interval, and at once
    /// when a device's health changes.
    Status(Status),
}

/// What a backend reports of itself on a registration that speaks protocol 6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Live sessions.
    pub sessions: u32,
    /// Every device the backend serves.
    pub devices: Vec<DeviceInfo>,
    /// Each served device's state, by the same indexes.
    pub states: Vec<DeviceState>,
}

/// One served device's identity, health and load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    /// Index on its backend.
    pub index: u32,
    /// The GPU's UUID (`GPU-...`), or the MIG instance's (`MIG-...`); none for a CPU device.
    pub uuid: Option<String>,
    /// The GPU's PCI bus id (`00000000:17:00.0`).
    pub pci_bus_id: Option<String>,
    /// What the health watch sees now.
    pub health: Health,
    /// Critical events (Xids that are not an application's fault) since the backend started or
    /// an admin last cleared them ([`Order::ClearFaults`]): the manager grants the device only
    /// while this is 0.
    pub faults: u32,
    /// The last such event, for admins.
    pub last_fault: Option<String>,
    /// The GPU's compute mode.
    pub compute_mode: ComputeMode,
    /// The MIG profile (`1g.10gb`) of a MIG instance.
    pub mig_profile: Option<String>,
    /// Its sessions now.
    pub sessions: u32,
    /// The most sessions it admits at once.
    pub max_sessions: u32,
}

/// A device's health as its backend's watch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// Nothing watches it (no NVML on the host, a CPU device); the reason says why. Never a
    /// failure: the device is served.
    Unknown(String),
    /// The watch sees nothing wrong.
    Healthy,
    /// A condition that persists (the GPU fell off the bus, pages wait for retirement,
    /// uncorrectable ECC errors, a mode that admits no session): not served, the reason says why.
    Unhealthy(String),
}

/// A GPU's compute mode (`nvidia-smi -q`, "Compute Mode"); the backend never changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComputeMode {
    /// Not a GPU, or not known.
    NotApplicable,
    /// Any number of processes.
    Default,
    /// One process at a time: one session at a time.
    ExclusiveProcess,
    /// No process: not served.
    Prohibited,
}

/// Sent by a backend on its registration stream at every heartbeat interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Live sessions.
    pub sessions: u32,
    /// Every device the backend serves.
    pub devices: Vec<DeviceInfo>,
}

/// What the resource manager sends on a registration stream of protocol 6 (protocol 5 and
/// before: bare [`Revoke`] frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    /// See [`Revoke`].
    Revoke(Revoke),
    /// An admin cleared the device's faults (`armctl device clear`): its
    /// [`DeviceState::faults`] count starts again from zero.
    ClearFaults {
        /// The device.
        index: u32,
    },
    /// *Protocol 8.* Sent first on a registration: hold a session whose connection timed out
    /// this long for its program to resume it (the manager's lease, which keeps the program's
    /// grants as long), in place of the backend's own `session_hold_ms`.
    Hold {
        /// Milliseconds.
        ms: u64,
    },
}

/// Sent by the resource manager on a registration stream: end the sessions opened with this
/// capability and refuse it from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoke {
    /// The capability's id.
    pub capability: u64,
    /// When it expires anyway (the backend may forget it then).
    pub expires: u64,
}

/// What kind of device a backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeviceKind {
    /// Host memory and Rust kernels: an emulated accelerator.
    Cpu,
    /// An NVIDIA GPU through the CUDA driver API.
    Cuda,
}

/// Description of a backend's device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Index on its backend (the CUDA ordinal for GPUs).
    pub index: u32,
    /// Human-readable name.
    pub name: String,
    /// Device kind.
    pub kind: DeviceKind,
    /// Compute capability (major, minor) for CUDA devices.
    pub compute_capability: Option<(u32, u32)>,
    /// Total device memory in bytes.
    pub memory_total: u64,
    /// Free device memory in bytes.
    pub memory_free: u64,
}
