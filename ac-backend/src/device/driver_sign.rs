//! Whether a host has the NVIDIA driver, and what it lacks when CUDA fails to start there:
//! what `device = "auto"` decides by and the failure names.

#[cfg(feature = "cuda")]
use super::cuda;

/// `device = "auto"` after CUDA failed to start with `reason`: the CPU device (`Ok`, with a
/// warning) only where no NVIDIA driver is installed. On a host with one, CUDA failing is a
/// fault to fix (a device node missing, the fabric manager not ready), and a CPU device would
/// be served in place of the GPUs the manager registered: `Err`, with the reason and the sign
/// of the driver. `cuda_driver_set`: the configuration names a driver library.
pub fn auto_fallback(reason: &str, cuda_driver_set: bool) -> Result<(), String> {
    let libcuda = cuda_driver_set || libcuda_loads();
    match nvidia_driver_sign(std::path::Path::new("/"), libcuda) {
        None => {
            tracing::warn!("no usable CUDA device ({reason}); falling back to the CPU device (no NVIDIA driver here)");
            Ok(())
        }
        Some(sign) => Err(format!(
            "{reason}; device = \"auto\" serves the CPU device only on a host without the NVIDIA driver, and this \
             host has it ({sign}): fix CUDA (the device nodes /dev/nvidia*, nvidia-uvm, the fabric manager; \
             systemctl status ac-backend-devices) or set device = \"cpu\""
        )),
    }
}

/// What shows that the NVIDIA driver is installed on the host whose root is `root`: its kernel
/// module's /proc entry, its control device node, or the CUDA driver library loading.
fn nvidia_driver_sign(root: &std::path::Path, libcuda_loads: bool) -> Option<String> {
    let found = ["proc/driver/nvidia/version", "dev/nvidiactl"].into_iter().find(|p| root.join(p).exists());
    match found {
        Some(path) => Some(format!("/{path} exists")),
        None => libcuda_loads.then(|| "the CUDA driver library loads".to_string()),
    }
}

/// Why CUDA failed to start (`reason`), with the NVIDIA device nodes this host lacks: under
/// systemd the backend cannot create them (its sandbox stops `nvidia-modprobe`), and CUDA's own
/// error does not name them.
pub fn explain_cuda_failure(reason: String) -> String {
    match missing_device_nodes(std::path::Path::new("/")) {
        missing if missing.is_empty() => reason,
        missing => format!(
            "{reason} (missing NVIDIA device nodes: {}; the ac-backend-devices unit creates them before the backend: \
             systemctl status ac-backend-devices)",
            missing.join(", ")
        ),
    }
}

/// The NVIDIA device nodes CUDA needs that are absent on the host whose root is `root`: the
/// control node, `nvidia-uvm`, and one per GPU the driver lists (by its device minor). None
/// where the driver is not loaded.
fn missing_device_nodes(root: &std::path::Path) -> Vec<String> {
    let proc = root.join("proc/driver/nvidia");
    if !proc.is_dir() {
        return Vec::new();
    }
    let gpus = std::fs::read_dir(proc.join("gpus")).into_iter().flatten().flatten();
    let minors = gpus.filter_map(|gpu| {
        let text = std::fs::read_to_string(gpu.path().join("information")).ok()?;
        let line = text.lines().find_map(|l| l.strip_prefix("Device Minor:"))?;
        line.trim().parse::<u32>().ok()
    });
    let mut nodes = vec!["nvidiactl".to_string(), "nvidia-uvm".to_string()];
    nodes.extend(minors.map(|m| format!("nvidia{m}")));
    nodes.into_iter().filter(|n| !root.join("dev").join(n).exists()).map(|n| format!("/dev/{n}")).collect()
}

/// Whether the CUDA driver library (`libcuda.so`) loads.
fn libcuda_loads() -> bool {
    #[cfg(feature = "cuda")]
    return cuda::driver::driver_present();
    #[cfg(not(feature = "cuda"))]
    return false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_is_seen_by_its_proc_entry_its_control_node_or_its_library() {
        let dir = std::env::temp_dir().join(format!("ac-driver-sign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = &dir;
        assert_eq!(nvidia_driver_sign(root, false), None);
        assert_eq!(nvidia_driver_sign(root, true).as_deref(), Some("the CUDA driver library loads"));
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::write(root.join("dev/nvidiactl"), "").unwrap();
        assert_eq!(nvidia_driver_sign(root, false).as_deref(), Some("/dev/nvidiactl exists"));
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(root.join("proc/driver/nvidia/version"), "NVRM version: 580").unwrap();
        assert_eq!(nvidia_driver_sign(root, false).as_deref(), Some("/proc/driver/nvidia/version exists"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_device_nodes_are_named_where_the_driver_is_loaded() {
        let dir = std::env::temp_dir().join(format!("ac-device-nodes-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("dev")).unwrap();
        assert!(missing_device_nodes(&dir).is_empty(), "no driver: nothing is missing");
        for (bus, minor) in [("0000:17:00.0", 0), ("0000:65:00.0", 3)] {
            let gpu = dir.join("proc/driver/nvidia/gpus").join(bus);
            std::fs::create_dir_all(&gpu).unwrap();
            std::fs::write(gpu.join("information"), format!("Model: H100\nDevice Minor: \t {minor}\n")).unwrap();
        }
        std::fs::write(dir.join("dev/nvidiactl"), "").unwrap();
        std::fs::write(dir.join("dev/nvidia0"), "").unwrap();
        let mut missing = missing_device_nodes(&dir);
        missing.sort();
        assert_eq!(missing, ["/dev/nvidia-uvm", "/dev/nvidia3"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
