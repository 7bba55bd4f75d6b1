//! `armctl device`: each accelerator's identity (UUID, PCI bus id, MIG profile), health,
//! compute mode and sessions, as its backend reports them; and `clear`, which puts an
//! accelerator a critical fault took out back in the pool.

use ac_proto::arm::{DeviceView, Request};
use clap::Subcommand;

/// `armctl device ...`.
#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// Every accelerator: UUID, health (with the reason), compute mode, MIG profile, memory,
    /// sessions and the backend's session limit.
    List,
    /// After checking (or resetting) a GPU its backend reported a critical fault on (an Xid),
    /// grant it again. A condition that persists (a lost GPU, pages waiting for retirement)
    /// keeps it out all the same.
    Clear {
        /// `host/index`, as `armctl host list` shows it.
        accelerator: String,
    },
}

impl DeviceCommand {
    /// The manager request.
    pub fn request(&self) -> Request {
        match self {
            DeviceCommand::List => Request::Devices,
            DeviceCommand::Clear { accelerator } => Request::ClearDevice { accelerator: accelerator.clone() },
        }
    }
}

/// The human table.
pub fn print(devices: &[DeviceView]) {
    println!(
        "{:<16} {:<42} {:<13} {:<10} {:<17} {:<9} {:>9} {:>9} REASON",
        "ACCELERATOR", "UUID", "PCI", "HEALTH", "COMPUTE MODE", "MIG", "MEM MiB", "SESSIONS"
    );
    for d in devices {
        println!(
            "{:<16} {:<42} {:<13} {:<10} {:<17} {:<9} {:>9} {:>9} {}",
            d.id,
            d.uuid.as_deref().unwrap_or("-"),
            d.pci_bus_id.as_deref().map(short_bus_id).unwrap_or("-"),
            d.health,
            d.compute_mode,
            d.mig_profile.as_deref().unwrap_or("-"),
            d.memory >> 20,
            format!("{}/{}", d.sessions, d.max_sessions),
            d.reason.as_deref().unwrap_or("")
        );
    }
}

/// `00000000:17:00.0` as `nvidia-smi` shows it: `17:00.0` where the domain is 0.
fn short_bus_id(id: &str) -> &str {
    id.strip_prefix("00000000:").unwrap_or(id)
}
