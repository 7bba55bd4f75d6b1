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
    format!("status {:?}\nstdout:\n{}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
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
