//! `gpu-probe`: a read-only look at a host's NVIDIA GPUs through NVML, as a backend's health
//! watch sees them (issue 47), for `scripts/gpu-check` to keep as evidence. It loads
//! `libnvidia-ml.so.1` at run time and calls only NVML's getters and event functions: never a
//! `set_*` (a lent GPU's compute mode, MIG mode and clocks are not its to change).
//!
//! - `gpu-probe inventory [--markdown]`: the driver's versions and each GPU by UUID: name, PCI
//!   bus id, compute mode, MIG mode (current and pending), memory, and its MIG instances (UUID,
//!   memory). JSON, or a markdown table. Fails without NVML or without a GPU.
//! - `gpu-probe xid [--expect 13,31,43] [--timeout-s 60] -- COMMAND ARGS...`: registers for
//!   critical-Xid events on every GPU, runs COMMAND (a program whose kernel faults, e.g.
//!   `07_fault_isolation`), then waits for the event. Prints `xid N on UUID` for each seen;
//!   succeeds only when one of the expected Xids (an application's fault: 13 graphics engine
//!   exception, 31 MMU fault, 43 context stopped) was seen.
//! - `gpu-probe memory`: the device memory in use on every GPU, MiB, one line per GPU
//!   (`memory UUID USED_MIB TOTAL_MIB`).
//!
//! `--nvml PATH` (or `AC_NVML_LIBRARY`) loads another library, e.g. an NVML stand-in.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use serde_json::{json, Value};

/// Read-only NVML probe of this host's GPUs.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// The NVML library to load (default: `libnvidia-ml.so.1`, found by the dynamic loader).
    #[arg(long, env = "AC_NVML_LIBRARY", global = true)]
    nvml: Option<PathBuf>,
    #[command(subcommand)]
    command: Probe,
}

/// What to probe.
#[derive(Debug, Subcommand)]
enum Probe {
    /// Every GPU by UUID: compute mode, MIG mode and instances, memory.
    Inventory {
        /// A markdown table instead of JSON.
        #[arg(long)]
        markdown: bool,
    },
    /// Runs a command and waits for the critical-Xid event its fault raises.
    Xid {
        /// The Xids that count as the application's fault.
        #[arg(long, value_delimiter = ',', default_value = "13,31,43")]
        expect: Vec<u64>,
        /// How long to wait for the event after the command ends, seconds.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
        /// The command (and its arguments) whose kernel faults.
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Device memory in use on every GPU.
    Memory,
}

fn open(library: Option<&PathBuf>) -> anyhow::Result<Nvml> {
    let nvml = match library {
        Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
        None => Nvml::builder().lib_path(OsStr::new("libnvidia-ml.so.1")).init(),
    };
    let name = library.map_or("libnvidia-ml.so.1".into(), |p| p.display().to_string());
    nvml.with_context(|| format!("NVML ({name}) did not start: no NVIDIA driver here, or no permission"))
}

/// Every GPU, by NVML index; none is an error (the probe is run where a GPU is lent).
fn devices(nvml: &Nvml) -> anyhow::Result<Vec<Device<'_>>> {
    let count = nvml.device_count().context("nvmlDeviceGetCount")?;
    if count == 0 {
        bail!("NVML sees no GPU");
    }
    (0..count).map(|i| nvml.device_by_index(i).with_context(|| format!("GPU {i}"))).collect()
}

fn compute_mode_name(mode: &Result<ComputeMode, NvmlError>) -> String {
    match mode {
        Ok(ComputeMode::Default) => "DEFAULT".into(),
        Ok(ComputeMode::ExclusiveThread) => "EXCLUSIVE_THREAD".into(),
        Ok(ComputeMode::ExclusiveProcess) => "EXCLUSIVE_PROCESS".into(),
        Ok(ComputeMode::Prohibited) => "PROHIBITED".into(),
        Err(e) => format!("unknown ({e})"),
    }
}

/// A getter's value, or what NVML said instead (`not supported` is an answer, not a failure).
fn or_why<T>(value: Result<T, NvmlError>, map: impl FnOnce(T) -> Value) -> Value {
    value.map_or_else(|e| json!({ "error": e.to_string() }), map)
}

fn memory(device: &Device<'_>) -> Value {
    or_why(device.memory_info(), |m| json!({ "total_mib": m.total >> 20, "used_mib": m.used >> 20 }))
}

/// The MIG instances the admin made on `device` (none when MIG is off).
fn mig_instances(device: &Device<'_>) -> Vec<Value> {
    let slots = device.mig_device_count().unwrap_or(0);
    (0..slots)
        .filter_map(|slot| device.mig_device_by_index(slot).ok())
        .map(|mig| json!({ "uuid": or_why(mig.uuid(), Value::from), "memory": memory(&mig) }))
        .collect()
}

fn inventory(nvml: &Nvml) -> anyhow::Result<Value> {
    let mut gpus = Vec::new();
    for (index, device) in devices(nvml)?.iter().enumerate() {
        let uuid = device.uuid().with_context(|| format!("GPU {index}: its UUID"))?;
        let mig = device.mig_mode();
        let mig_on = mig.as_ref().is_ok_and(|m| m.current == 1);
        gpus.push(json!({
            "index": index,
            "uuid": uuid,
            "name": or_why(device.name(), Value::from),
            "pci_bus_id": or_why(device.pci_info(), |p| Value::from(p.bus_id)),
            "compute_mode": compute_mode_name(&device.compute_mode()),
            "mig_mode": or_why(mig, |m| json!({ "current": m.current == 1, "pending": m.pending == 1 })),
            "mig_instances": if mig_on { mig_instances(device) } else { Vec::new() },
            "memory": memory(device),
        }));
    }
    Ok(json!({
        "driver_version": or_why(nvml.sys_driver_version(), Value::from),
        "cuda_driver_version": or_why(nvml.sys_cuda_driver_version(), Value::from),
        "nvml_version": or_why(nvml.sys_nvml_version(), Value::from),
        "gpus": gpus,
    }))
}

/// A JSON value as a table cell: strings bare, errors as `? (error)`.
fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("error") => format!("? ({})", cell(&o["error"])),
        other => other.to_string(),
    }
}

fn markdown(inventory: &Value) -> String {
    let mut out = format!(
        "driver {}, CUDA driver {}, NVML {}\n\n| index | UUID | name | PCI bus id | compute mode | MIG current | MIG pending | MIG instances | memory total MiB | used MiB |\n|---|---|---|---|---|---|---|---|---|---|\n",
        cell(&inventory["driver_version"]),
        cell(&inventory["cuda_driver_version"]),
        cell(&inventory["nvml_version"])
    );
    for gpu in inventory["gpus"].as_array().into_iter().flatten() {
        let mig = &gpu["mig_mode"];
        let (current, pending) = if mig.get("error").is_some() {
            (cell(mig), cell(mig))
        } else {
            (cell(&mig["current"]), cell(&mig["pending"]))
        };
        let instances: Vec<String> = gpu["mig_instances"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| format!("{} ({} MiB)", cell(&i["uuid"]), cell(&i["memory"]["total_mib"])))
            .collect();
        out += &format!(
            "| {} | {} | {} | {} | {} | {current} | {pending} | {} | {} | {} |\n",
            gpu["index"],
            cell(&gpu["uuid"]),
            cell(&gpu["name"]),
            cell(&gpu["pci_bus_id"]),
            cell(&gpu["compute_mode"]),
            if instances.is_empty() { "none".into() } else { instances.join(", ") },
            cell(&gpu["memory"]["total_mib"]),
            cell(&gpu["memory"]["used_mib"]),
        );
    }
    out
}

/// Registers for critical Xids on every GPU, runs `command`, then waits up to `timeout` for an
/// expected Xid. The Xids seen, each with its GPU's UUID.
fn xid(nvml: &Nvml, expect: &[u64], timeout: Duration, command: &[String]) -> anyhow::Result<Vec<(u64, String)>> {
    let mut set = nvml.create_event_set().context("nvmlEventSetCreate")?;
    let mut registered = 0;
    for (index, device) in devices(nvml)?.iter().enumerate() {
        let supported = device.supported_event_types().with_context(|| format!("GPU {index}: its event types"))?;
        if !supported.contains(EventTypes::CRITICAL_XID_ERROR) {
            println!("probe: GPU {index} does not offer critical-Xid events");
            continue;
        }
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| anyhow::anyhow!("GPU {index}: nvmlDeviceRegisterEvents: {}", e.error))?;
        registered += 1;
    }
    if registered == 0 {
        bail!("no GPU offers critical-Xid events: nothing to observe");
    }
    println!("probe: registered for critical-Xid events on {registered} GPU(s); running {}", command.join(" "));
    // Its exit status is reported, not judged: a program that faults on purpose may fail.
    let status =
        Command::new(&command[0]).args(&command[1..]).status().with_context(|| format!("running {}", command[0]))?;
    println!("probe: the command ended: {status}");
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while seen.iter().all(|(x, _)| !expect.contains(x)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match set.wait(u32::try_from(left.as_millis()).unwrap_or(u32::MAX).max(1)) {
            Ok(event) if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) => {
                let uuid = event.device.uuid().unwrap_or_else(|e| format!("? ({e})"));
                let xid = match event.event_data {
                    Some(XidError::Value(n)) => n,
                    Some(XidError::Unknown) | None => 0,
                };
                println!("xid {xid} on {uuid}");
                seen.push((xid, uuid));
            }
            Ok(_) => {}
            // Returned on a timeout, and early on an interrupt: the deadline decides.
            Err(NvmlError::Timeout) => {}
            Err(e) => bail!("nvmlEventSetWait: {e}"),
        }
    }
    Ok(seen)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let nvml = open(args.nvml.as_ref())?;
    match args.command {
        Probe::Inventory { markdown: table } => {
            let inventory = inventory(&nvml)?;
            if table {
                print!("{}", markdown(&inventory));
            } else {
                println!("{}", serde_json::to_string_pretty(&inventory)?);
            }
        }
        Probe::Xid { expect, timeout_s, command } => {
            let seen = xid(&nvml, &expect, Duration::from_secs(timeout_s), &command)?;
            match seen.iter().find(|(x, _)| expect.contains(x)) {
                Some((x, uuid)) => println!("probe: application Xid {x} observed on {uuid}"),
                None => {
                    let listed: Vec<String> = seen.iter().map(|(x, u)| format!("{x} on {u}")).collect();
                    bail!(
                        "no Xid among {expect:?} within {timeout_s} s of the command's end (seen: {})",
                        if listed.is_empty() { "none".into() } else { listed.join(", ") }
                    );
                }
            }
        }
        Probe::Memory => {
            for device in devices(&nvml)? {
                let info = device.memory_info().context("nvmlDeviceGetMemoryInfo")?;
                println!("memory {} {} {}", device.uuid().context("UUID")?, info.used >> 20, info.total >> 20);
            }
        }
    }
    Ok(())
}
