//! The backend's Prometheus metrics (`ac_backend_*`). Counters and histograms are bumped where
//! the event happens (a copy completes, a launch is queued, an error is answered); sessions and
//! device memory are read from the live state at each scrape ([`StateCollector`]), and so are a
//! GPU's sensors where its host has NVML (utilization, temperature, power, energy).

use std::sync::Arc;
use std::time::Duration;

use ac_proto::backend::{DeviceInfo, Direction, ErrorKind, Response, Telemetry};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::device::Device;

type Labels = [(&'static str, &'static str); 1];
type OwnedLabels = [(&'static str, String); 1];

/// What the backend counts as it works.
#[derive(Debug, Clone)]
pub struct Metrics {
    copied: Family<Labels, Counter>,
    copy_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    launches: Counter,
    errors: Family<OwnedLabels, Counter>,
    sessions_opened: Counter,
    sessions_held: Counter,
    sessions_resumed: Counter,
    lanes_refused: Counter,
}

/// Copy durations from 100 µs to about 100 s, a factor of 4 apart.
fn copy_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 4.0, 11))
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            copied: Family::default(),
            copy_seconds: Family::new_with_constructor(copy_histogram),
            launches: Counter::default(),
            errors: Family::default(),
            sessions_opened: Counter::default(),
            sessions_held: Counter::default(),
            sessions_resumed: Counter::default(),
            lanes_refused: Counter::default(),
        };
        // Both directions exist from the start, so that `rate()` sees the first copy.
        for way in [Direction::HostToDevice, Direction::DeviceToHost] {
            let _ = metrics.copied.get_or_create(&direction(way));
            let _ = metrics.copy_seconds.get_or_create(&direction(way));
        }
        metrics
    }
}

fn direction(direction: Direction) -> Labels {
    match direction {
        Direction::HostToDevice => [("direction", "host_to_device")],
        Direction::DeviceToHost => [("direction", "device_to_host")],
    }
}

impl Metrics {
    /// A registry holding these metrics and a collector of `devices`' state and the number of
    /// live sessions (`sessions`, counted at each scrape).
    pub fn registry(&self, devices: Vec<Arc<dyn Device>>, sessions: LiveSessions) -> Registry {
        let mut registry = Registry::with_prefix("ac_backend");
        registry.register_with_unit(
            "copied",
            "Bytes of completed copies between a program's memory and device memory",
            Unit::Bytes,
            self.copied.clone(),
        );
        registry.register_with_unit(
            "copy_duration",
            "Time of completed synchronous copies, from their fence (the work before them done) to their last byte",
            Unit::Seconds,
            self.copy_seconds.clone(),
        );
        registry.register("launches", "Kernel launches queued on a device stream", self.launches.clone());
        registry.register("errors", "Errors answered to programs, by kind", self.errors.clone());
        registry.register("sessions_opened", "Sessions opened", self.sessions_opened.clone());
        registry.register(
            "sessions_held",
            "Sessions whose connection timed out (a network outage), held for their program to resume them",
            self.sessions_held.clone(),
        );
        registry.register(
            "sessions_resumed",
            "Sessions resumed on a new connection after an outage",
            self.sessions_resumed.clone(),
        );
        registry.register(
            "lanes_refused",
            "Bulk lanes refused: an unknown session or wrong secret, or a session holding twice its lanes_per_session",
            self.lanes_refused.clone(),
        );
        registry.register_collector(Box::new(StateCollector { devices, sessions }));
        registry
    }

    /// A copy of `bytes` completed; `took` is its time behind its fence (asynchronous writes,
    /// queued on a stream, have none).
    pub fn copied(&self, way: Direction, bytes: u64, took: Option<Duration>) {
        self.copied.get_or_create(&direction(way)).inc_by(bytes);
        if let Some(took) = took {
            self.copy_seconds.get_or_create(&direction(way)).observe(took.as_secs_f64());
        }
    }

    /// A launch was queued.
    pub fn launched(&self) {
        self.launches.inc();
    }

    /// A session opened.
    pub fn session_opened(&self) {
        self.sessions_opened.inc();
    }

    /// A session's connection timed out: the session is held.
    pub fn session_held(&self) {
        self.sessions_held.inc();
    }

    /// A held (or still attached) session was resumed on a new connection.
    pub fn session_resumed(&self) {
        self.sessions_resumed.inc();
    }

    /// A bulk lane was refused.
    pub fn lane_refused(&self) {
        self.lanes_refused.inc();
    }

    /// A response is about to go to a program: an error is counted by its kind.
    pub fn answered(&self, response: &Response) {
        if let Response::Error(e) = response {
            self.errors.get_or_create(&[("kind", kind_label(e.kind))]).inc();
        }
    }
}

/// `OutOfMemory` -> `out_of_memory`: label values in Prometheus's usual snake case.
fn kind_label(kind: ErrorKind) -> String {
    let mut label = String::new();
    for (i, c) in format!("{kind:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    label
}

/// Counts the live sessions when asked (the session registry, which itself counts opened
/// sessions here: a function keeps the two modules from depending on each other).
pub type LiveSessions = Box<dyn Fn() -> usize + Send + Sync>;

/// Sessions and device memory, read at each scrape.
struct StateCollector {
    devices: Vec<Arc<dyn Device>>,
    sessions: LiveSessions,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCollector").field("devices", &self.devices.len()).finish()
    }
}

/// One per-device memory gauge family: name, help and how to read it.
type MemoryFamily<'a> = (&'a str, &'a str, &'a dyn Fn(&DeviceInfo) -> u64);

/// How a sensor family is kept: a reading now, or a total that only grows (until its driver
/// reloads, which `rate()` and `increase()` take as a counter's reset).
#[derive(Debug, Clone, Copy)]
enum Kept {
    Gauge,
    Counter,
}

/// One per-device sensor family: name, help, unit, how it is kept, and how to read it in the
/// unit.
type SensorFamily<'a> = (&'a str, &'a str, Unit, Kept, &'a dyn Fn(&Telemetry) -> Option<f64>);

/// A percentage as Prometheus's ratio.
fn ratio(percent: Option<u32>) -> Option<f64> {
    percent.map(|p| f64::from(p) / 100.0)
}

/// The sensor families, each in Prometheus's base unit.
fn sensor_families<'a>() -> [SensorFamily<'a>; 5] {
    [
        (
            "device_utilization",
            "Share of the last sample period in which a kernel ran on each GPU (its host's NVML)",
            Unit::Other("ratio".into()),
            Kept::Gauge,
            &|t| ratio(t.utilization_gpu),
        ),
        (
            "device_memory_utilization",
            "Share of the last sample period in which each GPU's memory was read or written",
            Unit::Other("ratio".into()),
            Kept::Gauge,
            &|t| ratio(t.utilization_memory),
        ),
        ("device_temperature", "Each GPU's die temperature", Unit::Celsius, Kept::Gauge, &|t| {
            t.temperature_c.map(f64::from)
        }),
        ("device_power", "Power each GPU draws", Unit::Other("watts".into()), Kept::Gauge, &|t| {
            t.power_mw.map(|mw| f64::from(mw) / 1000.0)
        }),
        ("device_energy", "Energy each GPU used since its driver was loaded", Unit::Joules, Kept::Counter, &|t| {
            t.energy_mj.map(|mj| mj as f64 / 1000.0)
        }),
    ]
}

/// Encodes one sensor family of the devices that read it (`(device index, reading)`).
fn encode_sensor_family(
    encoder: &mut DescriptorEncoder,
    (name, help, unit, kept): (&str, &str, &Unit, Kept),
    read: &[(&str, f64)],
) -> Result<(), std::fmt::Error> {
    let kind = match kept {
        Kept::Gauge => ConstGauge::new(0.0f64).metric_type(),
        Kept::Counter => ConstCounter::new(0.0f64).metric_type(),
    };
    let mut family = encoder.encode_descriptor(name, help, Some(unit), kind)?;
    for &(index, reading) in read {
        let labels = [("device", index)];
        let sample = family.encode_family(&labels)?;
        match kept {
            Kept::Gauge => ConstGauge::new(reading).encode(sample)?,
            Kept::Counter => ConstCounter::new(reading).encode(sample)?,
        }
    }
    Ok(())
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sessions = ConstGauge::new((self.sessions)() as i64);
        sessions.encode(encoder.encode_descriptor("sessions", "Live sessions", None, sessions.metric_type())?)?;
        let infos: Vec<DeviceInfo> = self.devices.iter().map(|d| d.info()).collect();
        let total = |i: &DeviceInfo| i.memory_total;
        let used = |i: &DeviceInfo| i.memory_total.saturating_sub(i.memory_free);
        let families: [MemoryFamily; 2] = [
            ("device_memory_total", "Memory of each device", &total),
            ("device_memory_used", "Memory of each device in use (by sessions; on a GPU also by others)", &used),
        ];
        let bytes = Unit::Bytes;
        for (name, help, value) in families {
            let kind = ConstGauge::new(0i64).metric_type();
            let mut family = encoder.encode_descriptor(name, help, Some(&bytes), kind)?;
            for info in &infos {
                let index = info.index.to_string();
                let gauge = ConstGauge::new(value(info) as i64);
                gauge.encode(family.encode_family(&[("device", index.as_str())])?)?;
            }
        }
        let readings: Vec<(String, Telemetry)> = self
            .devices
            .iter()
            .zip(&infos)
            .map(|(d, info)| (info.index.to_string(), d.telemetry().unwrap_or_default()))
            .collect();
        for (name, help, unit, kept, value) in sensor_families() {
            // A family no device reads (CPU devices, hosts without NVML) is left out whole.
            let read: Vec<(&str, f64)> =
                readings.iter().filter_map(|(index, t)| Some((index.as_str(), value(t)?))).collect();
            if !read.is_empty() {
                encode_sensor_family(&mut encoder, (name, help, &unit, kept), &read)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_become_snake_case_labels() {
        assert_eq!(kind_label(ErrorKind::OutOfMemory), "out_of_memory");
        assert_eq!(kind_label(ErrorKind::Device), "device");
        assert_eq!(kind_label(ErrorKind::ContextLost), "context_lost");
    }
}
