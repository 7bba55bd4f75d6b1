//! A job's processes through the CUDA shim, each pinned to some of the job's accelerators by
//! `CUDA_VISIBLE_DEVICES` (issue 48), as launchers pin one rank a GPU: each sees the ones named,
//! in the order named, and opens sessions on those alone.

use std::path::Path;

use crate::cuda_shim::{cuda_cluster_timed, run, said};
use crate::standin;

use ac_tests::cuda;

/// The UUIDs `visible_probe.py` printed after `devices N: `, or a panic with what it said.
fn uuids_seen(text: &str) -> Vec<String> {
    let line = text.lines().find(|l| l.starts_with("cuInit 0, devices ")).unwrap_or_else(|| panic!("{text}"));
    line.split_once(": ").map(|(_, u)| u.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

/// Two ranks of one job, pinned to one device each (`CUDA_VISIBLE_DEVICES=1` and `=0`), hold
/// their sessions at the same time on a backend whose devices serve one session each: neither
/// holds one on the other's device. Each sees one device, the job's accelerator it named;
/// `1,0` sees both, reordered; a UUID prefix (`GPU-` and 8 digits) names its device; an index
/// past the job's accelerators names none, and `cuInit` says so.
#[tokio::test(flavor = "multi_thread")]
async fn each_rank_sees_and_holds_only_the_accelerators_cuda_visible_devices_names() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster_timed(1, |_| {}, |b| b.max_sessions = Some(1)).await;
    let credential = c.submit("j1", &["n1"], 2).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/visible_probe.py");
    let python = Path::new("python3");
    let job = [("ARM_JOB_ID", "j1"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let rank = |visible: &str, extra: Vec<String>| {
        let visible = visible.to_string();
        let (c, shim, probe) = (&c, &shim, &probe);
        async move {
            let mut args = vec![probe.to_str().unwrap()];
            args.extend(extra.iter().map(String::as_str));
            let env = [job[0], job[1], ("CUDA_VISIBLE_DEVICES", visible.as_str())];
            said(&run(c, shim, python, &args, &env).await)
        }
    };
    // Each run ends its sessions before the next starts: the devices serve one at once.
    let ended = || c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0);
    // The job's two accelerators, in AC_Init's order.
    let all = uuids_seen(&rank("0,1", vec![]).await);
    assert!(ended().await, "the first run's sessions did not end");
    assert_eq!(all.len(), 2, "{all:?}");
    let mark = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (first, second) = tokio::join!(rank("1", vec![mark("a"), mark("b")]), rank("0", vec![mark("b"), mark("a")]));
    for (text, device) in [(&first, 1), (&second, 0)] {
        assert!(text.contains("peer ready"), "{text}");
        assert_eq!(uuids_seen(text), [all[device].clone()], "{text}");
    }
    assert!(ended().await, "the ranks' sessions did not end");
    assert_eq!(uuids_seen(&rank("1,0", vec![]).await), [all[1].clone(), all[0].clone()]);
    assert!(ended().await, "the reordered run's sessions did not end");
    let prefix = format!("GPU-{}", &all[1][..8]);
    assert_eq!(uuids_seen(&rank(&prefix, vec![]).await), [all[1].clone()]);
    assert!(ended().await, "the UUID run's sessions did not end");
    let none = rank("2", vec![]).await;
    assert!(none.contains("cuInit 100, devices 0"), "{none}");
    assert!(none.contains("CUDA_VISIBLE_DEVICES=2 names none of the job's 2 accelerator(s)"), "{none}");
    standin::assert_no_violations();
}

/// A process pinned to the second of its job's two accelerators (`CUDA_VISIBLE_DEVICES=1`):
/// NVML lists both, as NVIDIA's lists every GPU of a node, the first by UUID alone (its name
/// `NVML_ERROR_NO_PERMISSION`: the process holds no session there), and the driver API's one
/// device is NVML's second by its PCI bus id; PyTorch, which applies the variable to NVML's list
/// itself, counts one device, the second accelerator.
#[tokio::test(flavor = "multi_thread")]
async fn nvml_lists_the_jobs_accelerators_and_pytorch_counts_the_visible_one() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_probe.py");
    let env = [("ARM_ACPN", "2"), ("CUDA_VISIBLE_DEVICES", "1")];
    let out = run(&c, &shim, Path::new("python3"), &[probe.to_str().unwrap(), "pinned"], &env).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("nvml probe done"), "{text}");
    assert!(text.contains("nvml devices 2, driver 1"), "{text}");
    let uuid_of = |i: usize| {
        let line =
            text.lines().find(|l| l.starts_with(&format!("nvml device {i}: GPU-"))).unwrap_or_else(|| panic!("{text}"));
        line["nvml device 0: GPU-".len()..].split(',').next().unwrap().replace('-', "")
    };
    let line = |i: usize| text.lines().find(|l| l.starts_with(&format!("nvml device {i}: "))).unwrap_or_default();
    assert!(line(0).ends_with(", its name 4"), "the hidden device's name is not the process's to ask:\n{text}");
    assert!(line(1).ends_with(", its name 0"), "{text}");
    let driver = format!("driver device 0: {}, bus id 0000:02:00.0, nvml device 1", uuid_of(1));
    assert!(text.contains(&driver), "missing `{driver}`:\n{text}");
    assert!(text.contains("that is driver device 0"), "{text}");
    assert!(text.contains("cuDeviceGetByPCIBusId of the hidden device's: 101"), "{text}");
    assert!(text.contains("driver device 0's PCI bus attribute 2"), "{text}");
    assert_ne!(uuid_of(0), uuid_of(1), "{text}");
    if let Some(python) = cuda::frameworks_python() {
        let script = "import torch; print('torch devices', torch.cuda._raw_device_count_nvml(), \
                      torch.cuda.device_count(), str(torch.cuda.get_device_properties(0).uuid).replace('-', ''))";
        let preload = shim.join("libcuda.so.1");
        let env = [env[0], env[1], ("LD_PRELOAD", preload.to_str().unwrap())];
        let text = said(&run(&c, &shim, &python, &["-c", script], &env).await);
        // NVML's 2 (so PyTorch counted through it), of which the variable leaves 1.
        assert!(text.contains(&format!("torch devices 2 1 {}", uuid_of(1))), "{text}");
    }
    standin::assert_no_violations();
}
