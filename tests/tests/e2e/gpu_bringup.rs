//! GPUs under systemd: the units bring a GPU host up in order (the NVIDIA device nodes, after
//! the fabric manager, before the backend, whose sandbox cannot make them), the device script
//! makes and checks the nodes, and `device = "auto"` never turns a GPU host whose CUDA fails
//! into a CPU backend.
//!
//! No test here starts a unit: this machine's PID 1 is not systemd (where it is, the package
//! test installs the units). `systemd-analyze verify` reads the units without a running
//! systemd; the device script runs against a stand-in /proc and /dev and a stand-in
//! `nvidia-modprobe`; the backend runs with the CUDA driver stand-in as its driver.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ac_tests::workspace_binary;

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

fn packaged(name: &str) -> PathBuf {
    checkout().join("packaging/ac-backend").join(name)
}

/// The values of `key` in a unit file, each space-separated word (every line of the key).
fn values(unit: &str, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(packaged(unit)).expect("unit");
    let prefix = format!("{key}=");
    let lines = text.lines().filter_map(|l| l.trim().strip_prefix(&prefix).map(str::to_string));
    lines.flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>()).collect()
}

#[test]
fn the_units_verify_cleanly() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        return ac_tests::skip("AC_PACKAGES_REQUIRED", "systemd-analyze is not installed");
    }
    // As installed, but with the programs where this checkout has them (verify checks that
    // each ExecStart= program exists).
    let dir = tempfile::tempdir().unwrap();
    let script = packaged("ac-backend-devices");
    let backend = workspace_binary("ac-backend");
    for unit in ["ac-backend.service", "ac-backend-devices.service"] {
        let text = std::fs::read_to_string(packaged(unit)).unwrap();
        let text = text
            .replace("ExecStart=/usr/bin/ac-backend ", &format!("ExecStart={} ", backend.display()))
            .replace("ExecStart=/usr/lib/ac-backend/ac-backend-devices", &format!("ExecStart={}", script.display()));
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("ac-backend.service"))
        .arg(dir.path().join("ac-backend-devices.service"))
        .output()
        .expect("systemd-analyze runs");
    let said = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

#[test]
fn the_device_nodes_come_first_after_the_fabric_manager() {
    let (devices, backend) = ("ac-backend-devices.service", "ac-backend.service");
    // The backend needs the nodes unit, starts after it and after the fabric manager.
    assert!(values(backend, "Requires").contains(&devices.to_string()), "{backend} requires {devices}");
    let after = values(backend, "After");
    for unit in [devices, "nvidia-fabricmanager.service", "nvidia-persistenced.service"] {
        assert!(after.contains(&unit.to_string()), "{backend} is not after {unit}: {after:?}");
    }
    // The nodes unit: after the fabric manager and persistence daemon, before the backend,
    // once, only where the driver is, and not sandboxed (it loads modules and makes nodes).
    let after = values(devices, "After");
    for unit in ["nvidia-fabricmanager.service", "nvidia-persistenced.service"] {
        assert!(after.contains(&unit.to_string()), "{devices} is not after {unit}: {after:?}");
    }
    assert_eq!(values(devices, "Before"), [backend]);
    assert_eq!(values(devices, "Type"), ["oneshot"]);
    assert_eq!(values(devices, "ConditionPathIsDirectory"), ["/proc/driver/nvidia"]);
    for sandbox in ["NoNewPrivileges", "ProtectKernelModules", "DevicePolicy", "User", "CapabilityBoundingSet"] {
        assert!(values(devices, sandbox).is_empty(), "{devices} sets {sandbox}");
    }
    // The backend keeps its sandbox, and has descriptors for its sessions.
    assert_eq!(values(backend, "NoNewPrivileges"), ["yes"]);
    assert_eq!(values(backend, "DevicePolicy"), ["closed"]);
    let files: u64 = values(backend, "LimitNOFILE")[0].parse().expect("a number");
    assert!(files >= 65_536, "LimitNOFILE={files}");
    // What sessions cost the host is bounded: tasks for 8 GPUs' default session limits (a worker
    // and its threads each), memory short of the whole host.
    let tasks: u64 = values(backend, "TasksMax")[0].parse().expect("a number");
    let config = ac_backend::BackendConfig::default();
    let per_gpu = u64::from(config.gpu_max_sessions(80 << 30));
    assert!(tasks >= 8 * per_gpu * 16, "TasksMax={tasks} for 8 GPUs of {per_gpu} sessions");
    assert_eq!(values(backend, "MemoryMax"), ["80%"]);
}

/// A stand-in host for the device script: `root/proc/driver/nvidia` (when `driver`) with GPUs
/// of device minors 0 and 3 and a MIG instance on GPU 0, an empty `root/dev`, and a stand-in
/// `nvidia-modprobe` that logs its arguments and makes the nodes a real one would (none when
/// `sandboxed`, as where it cannot load modules or make nodes, and fails).
struct Host {
    root: tempfile::TempDir,
    log: PathBuf,
    modprobe: PathBuf,
}

impl Host {
    fn new(driver: bool, sandboxed: bool) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("dev")).unwrap();
        if driver {
            for (bus, minor) in [("0000:17:00.0", 0), ("0000:65:00.0", 3)] {
                let gpu = r.join("proc/driver/nvidia/gpus").join(bus);
                std::fs::create_dir_all(&gpu).unwrap();
                std::fs::write(gpu.join("information"), format!("Model:\t\t NVIDIA H100\nDevice Minor:\t {minor}\n"))
                    .unwrap();
            }
            let caps = r.join("proc/driver/nvidia/capabilities");
            std::fs::create_dir_all(caps.join("mig")).unwrap();
            std::fs::create_dir_all(caps.join("gpu0/mig/gi1/ci0")).unwrap();
            for file in ["mig/config", "mig/monitor", "gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access"] {
                std::fs::write(caps.join(file), "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
                    .unwrap();
            }
        }
        let log = r.join("modprobe.log");
        let modprobe = r.join("nvidia-modprobe");
        let make = if sandboxed {
            "exit 1".to_string()
        } else {
            format!(
                "for a in \"$@\"; do case \"$a\" in -u) uvm=1;; -c=255) touch '{dev}/nvidiactl';; \
                 -c=*) if [ -n \"$uvm\" ]; then touch '{dev}/nvidia-uvm' '{dev}/nvidia-uvm-tools'; \
                 else touch '{dev}/nvidia'\"${{a#-c=}}\"; fi;; esac; done",
                dev = r.join("dev").display()
            )
        };
        let text = format!("#!/bin/sh\necho \"$*\" >> '{}'\nuvm=\n{make}\n", log.display());
        std::fs::write(&modprobe, text).unwrap();
        std::fs::set_permissions(&modprobe, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { root, log, modprobe }
    }

    /// Runs the packaged device script on this host: (success, stdout and stderr).
    fn run_script(&self) -> (bool, String) {
        let out = Command::new(packaged("ac-backend-devices"))
            .env("AC_DEVICES_ROOT", self.root.path())
            .env("AC_NVIDIA_MODPROBE", &self.modprobe)
            .output()
            .expect("the script runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[test]
fn the_device_script_does_nothing_without_the_driver() {
    let host = Host::new(false, false);
    let (ok, said) = host.run_script();
    assert!(ok && said.contains("no NVIDIA driver"), "{said}");
    assert_eq!(host.calls(), "", "nvidia-modprobe was run");
}

#[test]
fn the_device_script_makes_every_node_as_nvidia_does() {
    let host = Host::new(true, false);
    let (ok, said) = host.run_script();
    assert!(ok, "{said}");
    let caps = host.root.path().join("proc/driver/nvidia/capabilities");
    let cap = |file: &str| format!("-f {}", caps.join(file).display());
    let expected = [
        "-c=255 -c=0 -c=3".to_string(),
        "-u -c=0".into(),
        [cap("mig/config"), cap("mig/monitor"), cap("gpu0/mig/gi1/access"), cap("gpu0/mig/gi1/ci0/access")].join(" "),
    ];
    assert_eq!(host.calls().lines().collect::<Vec<_>>(), expected);
    for node in ["nvidiactl", "nvidia0", "nvidia3", "nvidia-uvm"] {
        assert!(host.root.path().join("dev").join(node).exists(), "/dev/{node}");
    }
}

#[test]
fn the_device_script_fails_naming_the_nodes_it_could_not_make() {
    let host = Host::new(true, true);
    let (ok, said) = host.run_script();
    assert!(!ok, "{said}");
    let dev = host.root.path().join("dev");
    for node in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia3"] {
        assert!(said.contains(&dev.join(node).display().to_string()), "{node} is not named: {said}");
    }
}

/// `ac-backend --device DEVICE` with the CUDA driver stand-in as its driver, whose `cuInit`
/// answers `CUDA_ERROR_SYSTEM_NOT_READY` (an NVSwitch host before its fabric manager). Returns
/// its exit status (`None`: still running after 10 s, killed) and what it wrote.
fn backend_whose_cuda_fails(device: &str) -> (Option<std::process::ExitStatus>, String) {
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("log");
    let mut child = Command::new(workspace_binary("ac-backend"))
        .args(["--listen", "127.0.0.1:0", "--memory-mib", "16", "--device", device])
        .arg("--state-dir")
        .arg(state.path())
        .arg("--cuda-driver")
        .arg(workspace_binary("libcuda_standin.so"))
        .env("CUDA_STANDIN_INIT_ERROR", "802")
        .env("RUST_LOG", "info")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("ac-backend starts");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

#[test]
fn auto_on_a_host_whose_cuda_fails_exits_with_the_reason_and_serves_no_cpu_device() {
    let (status, said) = backend_whose_cuda_fails("auto");
    assert!(status.is_some_and(|s| !s.success()), "it serves ({status:?}): {said}");
    assert!(!said.contains("device 0: CPU device"), "{said}");
    assert!(said.contains("cuInit: CUDA_ERROR_SYSTEM_NOT_READY"), "{said}");
    assert!(said.contains("serves the CPU device only on a host without the NVIDIA driver"), "{said}");
    // And `cuda` fails as it always did, with the same reason.
    let (status, said) = backend_whose_cuda_fails("cuda");
    assert!(status.is_some_and(|s| !s.success()) && said.contains("CUDA_ERROR_SYSTEM_NOT_READY"), "{said}");
}
