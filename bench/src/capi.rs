//! The C ABI (issue 12): the C saxpy through libac against the same work through the Rust
//! blocking API, and the collective `AC_Get` over 2 MPI ranks against a single-rank `AC_Get`.
//! Every program is a process of its own, against the same in-process manager and backends.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ac_frontend::blocking::Session;
use ac_frontend::LaunchDims;
use anyhow::{bail, Context};

use crate::arm::Cluster;
use crate::setup::{median, percentiles, sibling};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

/// Compiles a C program against libac (built next to this binary).
fn compile(compiler: &str, source: &Path, out: &Path, flags: &[&str]) -> anyhow::Result<()> {
    let lib = sibling("libac.so")?.parent().expect("dir").to_path_buf();
    let status = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(repo().join("ac-capi/include"))
        .arg(source)
        .arg(format!("-L{}", lib.display()))
        .arg("-lac")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out)
        .status()
        .with_context(|| format!("{compiler} (./scripts/install-packages installs it)"))?;
    if !status.success() {
        bail!("{compiler} failed on {}", source.display());
    }
    Ok(())
}

/// Runs a program as an ad-hoc job's process; returns its standard output.
fn run(cluster: &Cluster, command: &mut Command) -> anyhow::Result<String> {
    let output = command
        .env("ARM_ADDR", cluster.arm.addr().to_string())
        .env("ARM_CA_CERT", cluster.arm.ca_cert())
        .env("ARM_ACPN", "1")
        .env("ARM_NODE", "n1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The "ms per round" a saxpy program printed.
fn per_round(output: &str) -> anyhow::Result<f64> {
    let line = output.lines().find_map(|l| l.strip_prefix("saxpy: ")?.strip_suffix(" ms per round"));
    Ok(line.context("no timing line")?.parse()?)
}

/// `ac-bench saxpy-client`: the C saxpy's work through the Rust blocking API, line for line.
pub fn saxpy_client(n: usize, rounds: usize) -> anyhow::Result<()> {
    let session = Session::from_env()?;
    let extra = session.get(1)?;
    let acc = match &extra {
        Some(set) => &set.handles[0].acc,
        None => &session.accelerators().first().context("no accelerator")?.acc,
    };
    let a = 2.0f32;
    let (mut x, mut y) = (vec![0f32; n], vec![0f32; n]);
    let (dx, dy) = (acc.alloc::<f32>(n)?, acc.alloc::<f32>(n)?);
    let saxpy = acc.builtin()?.function("saxpy")?;
    let mut start = std::time::Instant::now();
    for round in 0..=rounds {
        if round == 1 {
            start = std::time::Instant::now(); // round 0 warms up
        }
        for i in 0..n {
            x[i] = (i % 1000) as f32;
            y[i] = round as f32;
        }
        dx.copy_from_host(&x)?;
        dy.copy_from_host(&y)?;
        saxpy.launch(LaunchDims::linear(n as u64, 256), &[a.into(), dx.arg(), dy.arg(), (n as u64).into()])?;
        dy.copy_to_host(&mut y)?;
        if let Some(i) = (0..n).find(|&i| y[i] != a * (i % 1000) as f32 + round as f32) {
            bail!("round {round}: y[{i}] = {}", y[i]);
        }
    }
    println!("saxpy: {:.3} ms per round", start.elapsed().as_secs_f64() * 1e3 / rounds as f64);
    drop((dx, dy));
    if let Some(set) = extra {
        session.free(set)?;
    }
    session.finalize()?;
    Ok(())
}

pub async fn c_abi(quick: bool) -> anyhow::Result<()> {
    let (n, rounds, runs) = if quick { (1 << 16, 3, 1) } else { (1 << 20, 20, 7) };
    let cluster = Cluster::with_backend_processes(3).await?;
    let dir = tempfile::tempdir()?;
    let c_saxpy = dir.path().join("saxpy");
    compile("gcc", &repo().join("examples/c/saxpy.c"), &c_saxpy, &["-O2"])?;
    let rust_saxpy = std::env::current_exe()?;
    let (n_arg, rounds_arg) = (n.to_string(), rounds.to_string());
    println!("## The C ABI (libac)\n");
    println!("saxpy of {n} floats (copy x and y in, run, copy y back, check), {rounds} rounds per run, {runs} runs alternated; the ARM in the benchmark's process, 3 CPU-device backends and each program in processes of their own.\n");
    println!("| program | ms per round, median of runs | runs |");
    println!("|---|---|---|");
    let (mut c_times, mut rust_times) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let args = [n_arg.as_str(), rounds_arg.as_str()];
        c_times.push(per_round(&run(&cluster, Command::new(&c_saxpy).args(args))?)?);
        let rust = run(&cluster, Command::new(&rust_saxpy).arg("saxpy-client").args(args))?;
        rust_times.push(per_round(&rust)?);
    }
    let fmt = |v: &[f64]| v.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(", ");
    let (c, rust) = (median(c_times.clone()), median(rust_times.clone()));
    println!("| C through libac (`examples/c/saxpy.c`) | {c:.2} | {} |", fmt(&c_times));
    println!("| Rust blocking API (`ac-bench saxpy-client`) | {rust:.2} | {} |", fmt(&rust_times));
    println!("| **C / Rust** | **{:.3}** | |\n", c / rust);

    let reps = if quick { 5 } else { 40 };
    let mpi_program = dir.path().join("collective_get");
    compile("mpicc", &repo().join("bench/c/collective_get.c"), &mpi_program, &["-O2", "-DAC_WITH_MPI"])?;
    let output = run(
        &cluster,
        Command::new("mpirun").args(["--oversubscribe", "-n", "2"]).arg(&mpi_program).arg(reps.to_string()),
    )?;
    let samples = |kind: &str| -> Vec<Duration> {
        output
            .lines()
            .filter_map(|l| l.strip_prefix(kind)?.trim().parse::<f64>().ok())
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .collect()
    };
    let (single, collective) = (percentiles(samples("single")), percentiles(samples("collective")));
    println!("`AC_Get` under `mpirun -n 2` (`bench/c/collective_get.c`), {reps} repetitions each, released after each; times include connecting to the granted backends.\n");
    println!("| operation | p50 ms | p99 ms |");
    println!("|---|---|---|");
    println!("| `AC_Get(1)` by rank 0 alone | {:.2} | {:.2} |", single.0 / 1e3, single.1 / 1e3);
    println!("| `AC_Get_comm`, 1 per rank, 2 ranks | {:.2} | {:.2} |", collective.0 / 1e3, collective.1 / 1e3);
    println!("| **collective / single (p50)** | **{:.2}** | |\n", collective.0 / single.0);
    Ok(())
}
