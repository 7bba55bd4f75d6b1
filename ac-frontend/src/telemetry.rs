//! What a device's sensors read (backend protocol 15): utilization, temperature, power, energy,
//! clocks and performance state, as the GPU host's NVML reads them, and the memory the session
//! holds. The CUDA shim's NVML answers from it.

use ac_proto::backend::{Request, Response, Telemetry};
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, Result};

/// The backend protocol that serves a device's sensors.
const TELEMETRY: u16 = 15;

impl Accelerator {
    /// What the device's sensors read now. A reading is `None` where the device cannot say: a
    /// CPU device, a GPU whose host has no NVML, or one its NVML does not support. The
    /// readings are the whole GPU's, every session's work on it counted; the memory is this
    /// session's.
    pub async fn telemetry(&self) -> Result<Telemetry> {
        self.needs_protocol(TELEMETRY, "a device's telemetry")?;
        match self.call(Request::Telemetry, Bytes::new()).await? {
            Answer::Response(Response::Telemetry(readings)) => Ok(readings),
            other => Err(unexpected(other)),
        }
    }
}
