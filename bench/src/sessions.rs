//! `--only sessions`: many sessions open at once against a running CUDA backend (a standalone
//! `ac-backend --device cuda`, as `scripts/gpu-check` starts one), each doing a little work:
//! what a session costs (open time, device memory, its worker's resident memory) and whether
//! closing them frees all of it. A GPU's session limit is derived from such figures (issue 47
//! measured about 523 MiB of device memory per session on an H100), so they are measured
//! where the GPU is. Device memory is read through NVML (`libnvidia-ml.so.1`); workers are the
//! backend's children started with `--session-worker`, found in `/proc`.

use std::time::{Duration, Instant};

use ac_frontend::{Accelerator, ConnectOptions, LaunchDims};
use anyhow::{bail, Context};
use futures_util::future::try_join_all;

/// How far above its level before the sessions device memory may stay once they are closed:
/// the driver's own allocations move by a few MiB; a session's context is hundreds.
const FREED_SLACK_MIB: u64 = 64;
/// How long the workers and their memory may take to go once every session has closed (a
/// worker that lingers is killed by the backend after its exit grace), and how long workers of
/// earlier sessions may take to go before a row starts.
const FREE_WITHIN: Duration = Duration::from_secs(30);
/// Elements each session's saxpy works on.
const WORK_ELEMENTS: usize = 1 << 16;

/// What a run of the section measures.
#[derive(Debug)]
pub struct Plan {
    /// Sessions open at once, a row for each (1, 4, 16, 64 when empty).
    pub counts: Vec<usize>,
    /// The backend's process, whose session workers are counted and measured.
    pub backend_pid: u32,
    /// Read device memory through NVML; `false` where there is none (the CUDA stand-in).
    pub nvml: bool,
}

/// The device memory in use on every GPU together, bytes.
fn device_used(nvml: Option<&nvml_wrapper::Nvml>) -> anyhow::Result<Option<u64>> {
    let Some(nvml) = nvml else { return Ok(None) };
    let mut used = 0;
    for i in 0..nvml.device_count().context("nvmlDeviceGetCount")? {
        used += nvml.device_by_index(i)?.memory_info().context("nvmlDeviceGetMemoryInfo")?.used;
    }
    Ok(Some(used))
}

/// The session workers of `backend`: its children whose command line has `--session-worker`.
fn workers(backend: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent(*pid) == Some(backend))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"--session-worker"))
        })
        .collect()
}

/// The parent of `pid`, from `/proc/PID/stat` (field 4, after the command name).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Resident memory of `pid`, bytes (`VmRSS` of `/proc/PID/status`; 0 once it is gone).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

/// Opens a session, timed.
async fn open(options: &ConnectOptions) -> anyhow::Result<(Duration, Accelerator)> {
    let start = Instant::now();
    let acc = Accelerator::connect(options).await.context("opening a session")?;
    Ok((start.elapsed(), acc))
}

/// A saxpy in the session, checked: the session's worker serves it, not only opened it.
async fn work(acc: &Accelerator) -> anyhow::Result<()> {
    let x = vec![1.0f32; WORK_ELEMENTS];
    let dx = acc.alloc_from(&x).await?;
    let dy = acc.alloc_from(&vec![2.0f32; WORK_ELEMENTS]).await?;
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    let n = WORK_ELEMENTS as u64;
    saxpy.launch(LaunchDims::linear(n, 256), &[3.0f32.into(), dx.arg(), dy.arg(), n.into()]).await?;
    anyhow::ensure!(dy.to_vec().await?.iter().all(|&v| v == 5.0), "saxpy result wrong");
    Ok(())
}

/// One row: `count` sessions open at once. The problems it found go to `problems`.
async fn row(
    options: &ConnectOptions,
    plan: &Plan,
    nvml: Option<&nvml_wrapper::Nvml>,
    count: usize,
    problems: &mut Vec<String>,
) -> anyhow::Result<String> {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    // Sessions that ended without closing (a program that exited) go at the transport's idle
    // timeout: wait for their workers, so that the row counts its own.
    let waiting = Instant::now();
    while !workers(plan.backend_pid).is_empty() {
        if waiting.elapsed() > FREE_WITHIN {
            let left = workers(plan.backend_pid).len();
            bail!("{left} session worker(s) of the backend still ran {FREE_WITHIN:?} before {count} sessions were to open");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = device_used(nvml)?;
    let start = Instant::now();
    let opened = try_join_all((0..count).map(|_| open(options))).await?;
    let wall = start.elapsed();
    try_join_all(opened.iter().map(|(_, acc)| work(acc))).await.context("a session's work")?;
    let pids = workers(plan.backend_pid);
    let worker_rss: u64 = pids.iter().map(|p| rss(*p)).sum();
    let open_used = device_used(nvml)?;
    if pids.len() != count {
        problems.push(format!("{count} sessions open: {} session workers (expected one each)", pids.len()));
    }
    let mut times: Vec<Duration> = opened.iter().map(|(t, _)| *t).collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (p50, max) = (ms(times[times.len() / 2]), ms(times[times.len() - 1]));
    for (_, acc) in opened {
        acc.close().await;
    }
    // Every worker gone and the device memory back, within the bound.
    let closed = Instant::now();
    let freed = loop {
        let (left, used) = (workers(plan.backend_pid), device_used(nvml)?);
        let memory_back = match (before, used) {
            (Some(b), Some(u)) => u <= b + (FREED_SLACK_MIB << 20),
            _ => true,
        };
        if left.is_empty() && memory_back {
            break Some(closed.elapsed());
        }
        if closed.elapsed() > FREE_WITHIN {
            problems.push(format!(
                "{count} sessions closed: after {FREE_WITHIN:?}, {} worker(s) left, device memory {} MiB above its level before",
                left.len(),
                match (before, used) {
                    (Some(b), Some(u)) => format!("{:.0}", mib(u.saturating_sub(b))),
                    _ => "(not measured)".into(),
                }
            ));
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let after = device_used(nvml)?;
    let delta = |x: Option<u64>| match (before, x) {
        (Some(b), Some(x)) => format!("{:.0}", mib(x.saturating_sub(b))),
        _ => "n/a".into(),
    };
    let per_session = match (before, open_used) {
        (Some(b), Some(u)) => format!("{:.0}", mib(u.saturating_sub(b)) / count as f64),
        _ => "n/a".into(),
    };
    Ok(format!(
        "| {count} | {p50:.1} | {max:.1} | {:.1} | {} | {per_session} | {} | {:.0} | {:.1} | {} | {} | {} |",
        ms(wall),
        delta(open_used),
        pids.len(),
        mib(worker_rss),
        mib(worker_rss) / count as f64,
        freed.map_or("not freed".into(), |d| format!("{:.0}", ms(d))),
        delta(after),
        workers(plan.backend_pid).len(),
    ))
}

/// Runs the sweep against the backend of `AC_BACKEND_ADDR` (`AC_CA_CERT`); fails, after
/// printing the table, when a row found a problem (a session without its worker, a worker or
/// device memory left after closing).
pub async fn sweep(plan: &Plan) -> anyhow::Result<()> {
    let options = ConnectOptions::from_env().context("the sessions section connects to AC_BACKEND_ADDR")?;
    let nvml = if plan.nvml {
        Some(nvml_wrapper::Nvml::builder().lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1")).init().context(
            "the sessions section reads device memory through NVML (libnvidia-ml.so.1); --sessions-no-nvml leaves it out",
        )?)
    } else {
        None
    };
    if std::fs::metadata(format!("/proc/{}", plan.backend_pid)).is_err() {
        bail!("no process {}: --backend-pid names the backend whose workers are counted", plan.backend_pid);
    }
    let counts = if plan.counts.is_empty() { vec![1, 4, 16, 64] } else { plan.counts.clone() };
    println!("## Concurrent sessions on one backend (session workers)\n");
    println!(
        "Each row opens that many sessions at once against backend process {} (`ac-backend --device cuda`, its default `isolation = process`), runs a checked saxpy of {WORK_ELEMENTS} floats in each, measures, closes them all and waits until every worker is gone and device memory is within {FREED_SLACK_MIB} MiB of its level before (at most {FREE_WITHIN:?}). Device memory: NVML's used memory of every GPU together{}, MiB above its level before the sessions opened. Worker RSS: `VmRSS` of the backend's `--session-worker` children.\n",
        plan.backend_pid,
        if nvml.is_none() { " (not measured: no NVML)" } else { "" }
    );
    println!("| sessions | open p50 ms | open max ms | all open ms | device MiB, open | device MiB per session | workers | worker RSS MiB | RSS MiB per session | freed in ms | device MiB after | workers after |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut problems = Vec::new();
    for count in counts {
        anyhow::ensure!(count > 0, "a row of 0 sessions measures nothing");
        let line = row(&options, plan, nvml.as_ref(), count, &mut problems).await?;
        println!("{line}");
    }
    println!();
    if !problems.is_empty() {
        bail!("the sessions section found: {}", problems.join("; "));
    }
    Ok(())
}
