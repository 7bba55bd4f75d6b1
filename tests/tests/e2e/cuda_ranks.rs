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
    // The job's two accelerators, in AC_Init's order.
    let all = uuids_seen(&rank("0,1", vec![]).await);
    assert_eq!(all.len(), 2, "{all:?}");
    let mark = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (first, second) = tokio::join!(rank("1", vec![mark("a"), mark("b")]), rank("0", vec![mark("b"), mark("a")]));
    for (text, device) in [(&first, 1), (&second, 0)] {
        assert!(text.contains("peer ready"), "{text}");
        assert_eq!(uuids_seen(text), [all[device].clone()], "{text}");
    }
    assert_eq!(uuids_seen(&rank("1,0", vec![]).await), [all[1].clone(), all[0].clone()]);
    let prefix = format!("GPU-{}", &all[1][..8]);
    assert_eq!(uuids_seen(&rank(&prefix, vec![]).await), [all[1].clone()]);
    let none = rank("2", vec![]).await;
    assert!(none.contains("cuInit 100, devices 0"), "{none}");
    assert!(none.contains("CUDA_VISIBLE_DEVICES=2 names none of the job's 2 accelerator(s)"), "{none}");
    standin::assert_no_violations();
}
