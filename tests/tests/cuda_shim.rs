//! Unmodified CUDA programs on remote accelerators (issue 48): programs built by `nvcc` with
//! its default static runtime, run with `ac-cuda`'s `libcuda.so.1` first on
//! `LD_LIBRARY_PATH`, against a manager and backends whose CUDA devices are the driver
//! stand-in's (`cuda-standin`, which runs these programs' kernels on the CPU; not a GPU).
//!
//! `nvcc` comes from NVIDIA's PyPI wheels, which `scripts/test` fetches into `.cache/nvcc`
//! (`AC_NVCC` names another). Without it the tests skip, unless `AC_CUDA_SHIM_REQUIRED` is set.

#[allow(dead_code)] // the stand-in's helpers these tests do not need
mod standin;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ac_backend::{DeviceChoice, Isolation};
use ac_tests::{TestBackend, TestCluster};

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// `nvcc`, if this machine has one.
fn nvcc() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AC_NVCC") {
        return Some(PathBuf::from(path));
    }
    let cached = checkout().join(".cache/nvcc/nvidia/cu13/bin/nvcc");
    cached.exists().then_some(cached)
}

/// Builds `tests/cuda/<name>.cu` into `dir` with nvcc's defaults (static runtime), for sm_90
/// (the stand-in's compute capability).
fn build(name: &str, dir: &Path) -> Option<PathBuf> {
    let Some(nvcc) = nvcc() else {
        ac_tests::skip("AC_CUDA_SHIM_REQUIRED", "no nvcc (scripts/test fetches it into .cache/nvcc)");
        return None;
    };
    let exe = dir.join(name);
    let out = Command::new(&nvcc)
        .args(["-arch=sm_90", "-o"])
        .arg(&exe)
        .arg(checkout().join(format!("tests/cuda/{name}.cu")))
        .output()
        .expect("nvcc runs");
    assert!(out.status.success(), "nvcc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// A directory holding the shim as `libcuda.so.1`, as the package installs it.
fn shim_dir(dir: &Path) -> PathBuf {
    let lib = dir.join("shim");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(ac_tests::workspace_binary("libac_cuda.so"), lib.join("libcuda.so.1")).unwrap();
    lib
}

/// A manager and `hosts` backends, each serving the stand-in's two CUDA devices.
async fn cuda_cluster(hosts: usize) -> TestCluster {
    let state = tempfile::tempdir().expect("temp dir");
    let arm = arm_server::start(ac_tests::arm_config(state.path())).await.expect("arm starts");
    let mut backends = Vec::new();
    for _ in 0..hosts {
        backends.push(
            TestBackend::start_with(|c| {
                c.device = DeviceChoice::Cuda;
                c.staging_mib = 16;
                c.isolation = Isolation::Context;
            })
            .await,
        );
    }
    let cluster = TestCluster { arm, backends, state };
    for i in 0..hosts {
        cluster.add_host(i).await;
    }
    cluster
}

/// Runs `exe` as a job's process through the shim, with `env` added (off the async threads,
/// which serve the manager and backends meanwhile).
async fn run(c: &TestCluster, shim: &Path, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(exe);
    command
        .args(args)
        .env("LD_LIBRARY_PATH", shim)
        .env("ARM_ADDR", c.arm.addr().to_string())
        .env("ARM_CA_CERT", c.arm.ca_cert())
        .env("ARM_NODE", "n1")
        .env("ARM_INIT_TIMEOUT_S", "20");
    for (k, v) in env {
        command.env(k, v);
    }
    tokio::task::spawn_blocking(move || command.output().expect("the program starts")).await.expect("joined")
}

fn said(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unmodified_vector_add_runs_on_a_remote_accelerator_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    assert!(out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("vector_add: 100000 elements on device 0 exact"), "{text}");
    assert!(text.contains("devices: 1; device 0:"), "{text}");
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_events_and_memsets_from_threads_sharing_a_device() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("streams", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let all_free = c.arm.free_accelerators();
    let shim = shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["4"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "streams: 4 threads exact",
        "memset and device-to-device copy exact",
        "event time measured",
        "still working after unsupported calls",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // Unserved calls answer "not supported" and name themselves once on stderr.
    assert!(text.contains("cudaMallocManaged: 801 (cudaErrorNotSupported)"), "{text}");
    assert!(text.contains("ac-cuda: cuMemAllocManaged is not supported"), "{text}");
    assert!(text.contains("cudaStreamBeginCapture: 801"), "{text}");
    // It left memory and a stream behind: its exit gave the accelerator back.
    assert_eq!(c.arm.free_accelerators(), all_free, "nothing held after the program exited");
    let backend = &c.backends[0].backend;
    assert!(
        c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await,
        "the backend still holds {} session(s)",
        backend.sessions()
    );
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_driver_function_the_runtime_asks_for_resolves() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["1000"], &[("ARM_ACPN", "1"), ("AC_CUDA_TRACE", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    let found = text.lines().filter(|l| l.starts_with("ac-cuda: cuGetProcAddress(") && l.ends_with(": found")).count();
    let unresolved: Vec<&str> = text.lines().filter(|l| l.contains("unresolved")).collect();
    assert!(unresolved.is_empty(), "the runtime asked for what the shim lacks:\n{}", unresolved.join("\n"));
    assert!(found > 300, "the CUDA 13 runtime looks up some 430 functions; traced {found}:\n{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_accelerators_are_two_cuda_devices() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = shim_dir(dir.path());
    // Two static accelerators (as `--acpn=2` gives a job), the program on the second.
    let out = run(&c, &shim, &exe, &["5000", "1"], &[("ARM_ACPN", "2")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("devices: 2; device 1:") && text.contains("5000 elements on device 1 exact"), "{text}");
    // One static, one asked for at start (`AC_GET`, decided as AC_Get).
    let out = run(&c, &shim, &exe, &["5000", "1"], &[("ARM_ACPN", "1"), ("AC_GET", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("devices: 2;"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_without_accelerators_is_told_there_is_no_device_and_why() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = shim_dir(dir.path());
    // No static accelerators and a dynamic request the pool cannot grant.
    let out = run(&c, &shim, &exe, &["10"], &[("ARM_ACPN", "0"), ("AC_GET", "5")]).await;
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAILED cudaGetDeviceCount(&count): 100"), "{text}");
    assert!(text.contains("ac-cuda: AC_GET=5: rejected"), "{text}");
    assert!(text.contains("holds no CUDA accelerator"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_program_drives_the_12_9_runtime_through_ctypes() {
    let _turn = standin::exclusive().await;
    let runtime = checkout().join(".cache/nvcc/nvidia/cuda_runtime/lib/libcudart.so.12");
    if !runtime.exists() {
        return ac_tests::skip("AC_CUDA_SHIM_REQUIRED", "no libcudart.so.12 (scripts/test fetches it)");
    }
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster(1).await;
    let shim = shim_dir(dir.path());
    let probe = checkout().join("tests/cuda/probe.py");
    let python = Path::new("python3");
    let out = run(&c, &shim, python, &[probe.to_str().unwrap(), runtime.to_str().unwrap()], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("runtime 12090: 1 device(s), compute 9.0, 132 SMs"), "{text}");
    assert!(text.contains("65536-byte round trip exact"), "{text}");
}
