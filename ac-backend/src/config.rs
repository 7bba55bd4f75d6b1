//! The backend's configuration: a TOML file, overridden by flags and environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;

use ac_proto::transport::Tuning;
use serde::{Deserialize, Serialize};

use crate::BackendError;

/// Which device to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// The CPU-emulated device.
    Cpu,
    /// CUDA when a driver is found, else the CPU device.
    Auto,
    /// CUDA, or fail.
    Cuda,
}

/// Where a GPU session's CUDA context lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A worker process per session (`ac-backend --session-worker`): a kernel fault, which
    /// CUDA makes sticky for the whole process, ends only the session that caused it.
    Process,
    /// A CUDA context per session inside the daemon: no process start per session, but one
    /// session's kernel fault ends every session of the daemon (see `device::worker`).
    Context,
}

/// How bulk copies are cut into chunks. Chosen from the measurements in `BENCHMARKS.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CopySettings {
    /// Bytes handed to the device at a time.
    pub chunk_bytes: usize,
    /// Chunks in flight between the network and the device. The copy path holds at most
    /// `chunk_bytes * (depth + 2)` bytes per copy stream, whatever the copy's size.
    pub depth: usize,
}

impl Default for CopySettings {
    fn default() -> Self {
        Self { chunk_bytes: 1 << 20, depth: 4 }
    }
}

/// Everything the daemon needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where certificates are created and kept.
    pub state_dir: PathBuf,
    /// Which device to run.
    pub device: DeviceChoice,
    /// Which devices to serve, by index. Unset: every GPU (or MIG instance) of the host, or one
    /// CPU device. Where NVML is (every host with NVIDIA's driver), a GPU's index is its place
    /// in NVML's list, which is PCI order and what `nvidia-smi` shows, with a GPU in MIG mode
    /// replaced by its instances; without NVML, the CUDA ordinal. For the CPU device, each
    /// index listed is one emulated accelerator.
    pub devices: Option<Vec<u32>>,
    /// Which GPUs or MIG instances to serve, by UUID (`GPU-...`, `MIG-...`, as `nvidia-smi -L`
    /// lists them): names that survive reboots and `CUDA_VISIBLE_DEVICES`. Needs NVML; not
    /// together with `devices`.
    pub gpu_uuids: Option<Vec<String>>,
    /// NVIDIA's management library to load (`libnvidia-ml.so.1`) for GPU identity and health.
    /// Unset: the loader's search. Without it GPU health is "unknown" (said, never a failure).
    pub nvml_library: Option<PathBuf>,
    /// How often the health watch polls each GPU, milliseconds (critical Xids arrive as events
    /// in between).
    pub health_poll_ms: u64,
    /// The most sessions a device serves at once. Unset: for a GPU, half its memory divided by
    /// what a session's context costs ([`SESSION_CONTEXT_MIB`]); for a CPU device, none.
    pub max_sessions: Option<u32>,
    /// The most device memory one session may allocate, MiB. Unset: no limit but the device's.
    pub session_memory_mib: Option<u64>,
    /// Devices (indexes) whose sessions run as clients of NVIDIA's Multi-Process Service: the
    /// backend runs an MPS control daemon for each, and a fatal fault in one session then ends
    /// every session of that GPU (`crate::device::mps`). Needs NVML and session workers. Unset: none.
    pub mps_devices: Option<Vec<u32>>,
    /// The MPS control program. Unset: `nvidia-cuda-mps-control` on the `PATH`.
    pub mps_control: Option<PathBuf>,
    /// The share of an MPS GPU's threads each session may use, percent.
    pub mps_thread_percentage: u32,
    /// The device memory an MPS session may pin, MiB. Unset: the GPU's memory divided by its
    /// session limit.
    pub mps_pinned_memory_mib: Option<u64>,
    /// Memory of each CPU device, MiB.
    pub memory_mib: u64,
    /// Where GPU sessions run (the CPU device has no faults to confine and ignores it).
    pub isolation: Isolation,
    /// The `ac-backend` program that session workers run. Unset: this program, when it is
    /// `ac-backend`, else an `ac-backend` beside it or one directory up.
    pub worker_program: Option<PathBuf>,
    /// The NVIDIA driver library to load (`libcuda.so`) when it is not where the dynamic
    /// loader looks. Unset: the loader's search.
    pub cuda_driver: Option<PathBuf>,
    /// Page-locked host memory for staging bulk copies to and from each GPU, MiB. Copies that
    /// find the pool empty fall back to the driver's own (slower) staging.
    pub staging_mib: u64,
    /// Certificate chain (PEM); created in `state_dir` when unset.
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of `cert`.
    pub key: Option<PathBuf>,
    /// Extra names (DNS or IP) for a created certificate, besides loopback, the host name and
    /// the listening address when it is a specific one.
    pub names: Vec<String>,
    /// The resource manager's Ed25519 public key (hex) to trust (`armctl manager-key` prints
    /// it); a replicated manager's: every replica's, separated by commas. Unset: the first manager that registers this backend is trusted and remembered in
    /// `state_dir` (trust on first use), which `open_until_registered = false` refuses.
    pub arm_public_key: Option<String>,
    /// Serve sessions without a capability until a manager registers this backend (standalone
    /// use, the embedded default). `false` (the packaged default): nobody is served until the
    /// manager named by `arm_public_key` registers it, and no other manager may.
    pub open_until_registered: bool,
    /// Speak only this protocol version, as a backend of that version would (tests of rolling
    /// upgrades); unset: every version this build speaks.
    #[doc(hidden)]
    #[serde(skip)]
    pub only_protocol: Option<u16>,
    /// Interval of heartbeats to the resource manager, milliseconds.
    pub heartbeat_ms: u64,
    /// How long a session whose connection timed out (a network outage) is held for its
    /// program to resume it, milliseconds: its memory, modules, streams and queued work stay.
    /// Set it to the manager's `lease_ms`, which keeps the program's grants as long (both 60 s
    /// by default). 0: a session ends with its connection.
    pub session_hold_ms: u64,
    /// Bytes of asynchronous-write payload a session may have queued.
    pub inline_budget_mib: u32,
    /// Bulk copy chunking.
    pub copy: CopySettings,
    /// QUIC transport.
    pub transport: Tuning,
    /// Serve bulk lanes (TLS over TCP, on the TCP port of the same number as the QUIC port when
    /// it is free): large copies move several times faster than over QUIC streams (see
    /// `ac_proto::lane`). Off: copies use QUIC streams only.
    pub lanes: bool,
    /// The lanes one session may use at once, which its welcome names (1 to 64). Unset: one per
    /// four of this host's cores, from 1 to 4 (each lane opens or seals its records on a core of
    /// its own; see `ac_proto::lane::lanes_here`). A lane past twice this many is refused: the
    /// room is for lanes a program replaced (after a copy given up halfway) before the backend
    /// has seen the old ones close.
    pub lanes_per_session: Option<u16>,
    /// Serve Prometheus metrics over HTTP at `/metrics` on this address (`ac_backend_*`; see
    /// docs/admin.md, "Monitoring"). Unset: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7100".parse().expect("addr"),
            state_dir: PathBuf::from(".state/ac-backend"),
            device: DeviceChoice::Cpu,
            devices: None,
            gpu_uuids: None,
            nvml_library: None,
            health_poll_ms: 5000,
            max_sessions: None,
            session_memory_mib: None,
            mps_devices: None,
            mps_control: None,
            mps_thread_percentage: 25,
            mps_pinned_memory_mib: None,
            open_until_registered: true,
            only_protocol: None,
            memory_mib: 4096,
            isolation: Isolation::Process,
            worker_program: None,
            cuda_driver: None,
            staging_mib: 256,
            cert: None,
            key: None,
            names: Vec::new(),
            arm_public_key: None,
            heartbeat_ms: 500,
            session_hold_ms: 60_000,
            inline_budget_mib: 64,
            copy: CopySettings::default(),
            transport: Tuning::default(),
            lanes: true,
            lanes_per_session: None,
            metrics_listen: None,
        }
    }
}

/// The most lanes `lanes_per_session` may name: each holds about 1 MiB of buffers.
pub const MAX_LANES_PER_SESSION: u16 = 64;

/// Device memory a GPU session costs before it allocates anything: its context's local memory,
/// printf buffer and loaded modules (523 MiB measured on an H100 with driver 580, `BENCHMARKS.md`,
/// rounded up).
pub const SESSION_CONTEXT_MIB: u64 = 544;

/// Sessions a CPU device serves at once unless `max_sessions` says otherwise: no limit.
pub const CPU_MAX_SESSIONS: u32 = u32::MAX;

impl BackendConfig {
    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Self, BackendError> {
        toml::from_str(text).map_err(|e| BackendError::Config(e.to_string()))
    }

    /// The program session workers run (see [`BackendConfig::worker_program`]).
    pub fn worker_program(&self) -> Result<PathBuf, BackendError> {
        if let Some(program) = &self.worker_program {
            return Ok(program.clone());
        }
        let exe = std::env::current_exe()?;
        if exe.file_name().is_some_and(|n| n == "ac-backend") {
            return Ok(exe);
        }
        // Tests and benchmarks run the backend in-process from target/<profile>[/deps].
        let beside = exe.ancestors().skip(1).take(2).map(|d| d.join("ac-backend")).find(|p| p.is_file());
        beside.ok_or_else(|| {
            BackendError::Config(format!(
                "isolation = \"process\" needs the ac-backend program, and none is beside {}: set worker_program",
                exe.display()
            ))
        })
    }

    /// Checks values that would make the daemon misbehave.
    pub fn validate(&self) -> Result<(), BackendError> {
        if self.copy.chunk_bytes < 4096 || self.copy.depth == 0 {
            return Err(BackendError::Config("copy.chunk_bytes must be >= 4096 and copy.depth >= 1".into()));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(BackendError::Config("cert and key must be given together".into()));
        }
        if self.inline_budget_mib == 0 || self.memory_mib == 0 {
            return Err(BackendError::Config("inline_budget_mib and memory_mib must be positive".into()));
        }
        if self.devices.as_ref().is_some_and(|d| d.is_empty()) {
            return Err(BackendError::Config("devices must list at least one device".into()));
        }
        if self.gpu_uuids.as_ref().is_some_and(|d| d.is_empty()) {
            return Err(BackendError::Config("gpu_uuids must list at least one UUID".into()));
        }
        if self.devices.is_some() && self.gpu_uuids.is_some() {
            return Err(BackendError::Config("set devices or gpu_uuids, not both".into()));
        }
        if !(1..=100).contains(&self.mps_thread_percentage) {
            return Err(BackendError::Config("mps_thread_percentage must be 1 to 100".into()));
        }
        if self.mps_devices.is_some() && self.isolation != Isolation::Process {
            return Err(BackendError::Config("mps_devices needs isolation = \"process\"".into()));
        }
        if self.max_sessions == Some(0) || self.session_memory_mib == Some(0) || self.health_poll_ms == 0 {
            return Err(BackendError::Config(
                "max_sessions, session_memory_mib and health_poll_ms must be positive".into(),
            ));
        }
        if self.lanes_per_session.is_some_and(|n| !(1..=MAX_LANES_PER_SESSION).contains(&n)) {
            return Err(BackendError::Config(format!(
                "lanes_per_session must be 1 to {MAX_LANES_PER_SESSION} (`lanes = false` serves none)"
            )));
        }
        Ok(())
    }

    /// The protocol versions this backend speaks (see `ac_proto::backend`'s "Versions").
    pub fn protocols(&self) -> std::ops::RangeInclusive<u16> {
        use ac_proto::backend::{MIN_VERSION, VERSION};
        match self.only_protocol {
            Some(version) => version..=version,
            None => MIN_VERSION..=VERSION,
        }
    }

    /// The session limit of a GPU with `memory_total` bytes (see [`BackendConfig::max_sessions`]).
    pub fn gpu_max_sessions(&self, memory_total: u64) -> u32 {
        self.max_sessions.unwrap_or_else(|| ((memory_total / 2) / (SESSION_CONTEXT_MIB << 20)).clamp(1, 4096) as u32)
    }

    /// The lanes one session may use at once: 0 without lanes.
    pub fn session_lanes(&self) -> u16 {
        match (self.lanes, self.lanes_per_session) {
            (false, _) => 0,
            (true, Some(most)) => most,
            (true, None) => ac_proto::lane::lanes_here() as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_per_session_is_bounded_and_none_without_lanes() {
        for (most, valid) in [(0, false), (1, true), (MAX_LANES_PER_SESSION, true), (MAX_LANES_PER_SESSION + 1, false)]
        {
            let config = BackendConfig { lanes_per_session: Some(most), ..BackendConfig::default() };
            assert_eq!(config.validate().is_ok(), valid, "lanes_per_session = {most}");
        }
        let config = BackendConfig { lanes_per_session: Some(3), ..BackendConfig::default() };
        assert_eq!(config.session_lanes(), 3);
        assert_eq!(BackendConfig { lanes: false, ..config }.session_lanes(), 0);
        assert!((1..=4).contains(&BackendConfig::default().session_lanes()));
    }

    #[test]
    fn toml_overrides_defaults_and_rejects_typos() {
        let c = BackendConfig::from_toml("memory_mib = 128\n[transport]\nmtu = 1452\n").unwrap();
        assert_eq!(c.memory_mib, 128);
        assert_eq!(c.transport.mtu, 1452);
        assert_eq!(c.copy.chunk_bytes, CopySettings::default().chunk_bytes);
        assert!(BackendConfig::from_toml("memroy_mib = 1").is_err());
        let c = BackendConfig::from_toml("metrics_listen = \"127.0.0.1:9101\"\n").unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9101".parse().unwrap()));
        assert_eq!(BackendConfig::default().metrics_listen, None);
    }
}
