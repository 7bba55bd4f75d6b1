//! The CUDA device's code against the CUDA driver stand-in (`cuda-standin`): a test-only
//! library loaded in place of `libcuda.so` that enforces the driver API's documented contract
//! and runs the builtin kernels on the CPU. **It is not a GPU**: these tests check the backend's
//! CUDA code paths against the contract (current contexts, handle lifetimes, deferred copies,
//! pinned memory, argument lists, stream and event order), not performance or a GPU's
//! behaviour; `scripts/gpu-check` on real hardware stays the judge. The shared cases are in
//! `gpu_cases` and run on a GPU from `gpu.rs`.
//!
//! The stand-in library is built by `cargo build --workspace --release` (as `scripts/test`
//! does first) and found next to the test executables.

mod gpu_cases;
mod standin;

use std::time::Duration;

use ac_backend::{DeviceChoice, Isolation};
use ac_frontend::{Accelerator, ErrorKind, LaunchDims};
use ac_tests::TestBackend;

/// A backend whose CUDA device is the stand-in's, with 64 MiB of pinned staging per device.
/// Its sessions' contexts live in the backend's process (`isolation = "context"`), so that the
/// tests read what the stand-in saw.
async fn standin_backend(staging_mib: u64) -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = staging_mib;
        c.isolation = Isolation::Context;
    })
    .await
}

/// A backend whose GPU sessions each run in a worker process (`ac-backend --session-worker`,
/// the default for GPUs), each loading the stand-in as its driver.
async fn standin_workers_backend() -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = 64;
        c.isolation = Isolation::Process;
        c.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
    })
    .await
}

/// This process's children that are session workers.
fn session_workers() -> Vec<u32> {
    let me = std::process::id();
    let tasks = std::fs::read_dir(format!("/proc/{me}/task")).expect("/proc");
    let children: String =
        tasks.flatten().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ").collect();
    let pids = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok());
    let is_worker = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"--session-worker"))
    };
    pids.filter(is_worker).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_functions_of_an_unloaded_module_are_refused() {
    let tb = TestBackend::start(64).await;
    gpu_cases::functions_of_an_unloaded_module_are_refused(&tb.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_reports_itself() {
    let _turn = standin::exclusive().await;
    gpu_cases::reports_itself(&standin_backend(64).await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_builtin_kernels_match_the_cpu() {
    let _turn = standin::exclusive().await;
    gpu_cases::builtin_kernels_match_the_cpu(&standin_backend(64).await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_round_trip_through_the_pinned_pipeline() {
    let _turn = standin::exclusive().await;
    gpu_cases::copies_round_trip_through_the_staging_pipeline(&standin_backend(64).await).await;
    standin::assert_no_violations();
}

/// No pinned pool: every copy goes through one pageable buffer, which the stand-in copies from
/// only when the copy is waited for (finding 6: a buffer refilled early sends the wrong bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_round_trip_through_pageable_memory() {
    let _turn = standin::exclusive().await;
    gpu_cases::copies_round_trip_through_the_staging_pipeline(&standin_backend(0).await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_fault_in_one_session_leaves_the_others_working() {
    let _turn = standin::exclusive().await;
    gpu_cases::fault_in_one_session_leaves_the_others_working(&standin_workers_backend().await).await;
    standin::assert_no_violations();
}

/// Bulk copies in both directions through a session worker: its context's pinned pipeline,
/// with pieces passed between the processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_round_trip_through_a_session_worker() {
    let _turn = standin::exclusive().await;
    gpu_cases::copies_round_trip_through_the_staging_pipeline(&standin_workers_backend().await).await;
}

/// More bulk copies at once than a session worker's shared memory has bays (a copy striped
/// over 6 lanes, three such copies at once): copies without a bay go through the worker's pipe,
/// and every byte lands where it belongs, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_outnumbering_a_workers_shared_bays_all_arrive() {
    let _turn = standin::exclusive().await;
    let tb = standin_workers_backend().await;
    let mut options = tb.options();
    options.lanes = 6;
    let acc = ac_frontend::Accelerator::connect(&options).await.unwrap();
    let copies: Vec<_> = (0..3u32)
        .map(|seed| {
            let acc = acc.clone();
            tokio::spawn(async move {
                // Six stripes of several pieces each, and a short last one.
                let data = ac_tests::pattern((24 << 20) / 4 + 5, seed);
                for _ in 0..2 {
                    let buf = acc.alloc_from(&data).await?;
                    assert!(buf.to_vec().await? == data, "copy {seed} came back changed");
                }
                Ok::<_, ac_frontend::Error>(())
            })
        })
        .collect();
    for copy in copies {
        copy.await.unwrap().unwrap();
    }
    ac_tests::computes(&acc).await.expect("the session goes on");
}

/// A host-to-device copy whose DMA fails halfway, after the lane has put bytes into pinned
/// buffers: the copy answers the driver's error, and the lane stays in step, so the next copy
/// on it arrives whole (the bytes taken off the lane are counted before the device takes them;
/// counted after, the lane waited for bytes the program never sends).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_copy_failing_halfway_on_the_device_leaves_the_lane_in_step() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    let acc = tb.connect().await;
    standin::fail_host_to_device_after(5 << 20);
    a_copy_fails_halfway_and_the_next_arrives_whole(&acc).await;
    standin::assert_no_violations();
}

/// A 24 MiB host-to-device copy that the driver fails past its first 5 MiB answers the
/// driver's error; the next copy on the lane arrives whole and the session computes on.
async fn a_copy_fails_halfway_and_the_next_arrives_whole(acc: &Accelerator) {
    let data = ac_tests::pattern((24 << 20) / 4 + 3, 5);
    let buf = acc.alloc::<f32>(data.len()).await.unwrap();
    // A bound on a hang, not a measurement: the refusal answers at once.
    let failed = tokio::time::timeout(Duration::from_secs(60), buf.copy_from_host(&data)).await;
    let err = failed.expect("the failed copy was never answered").unwrap_err();
    assert!(err.to_string().contains("cuMemcpyHtoDAsync"), "{err}");
    buf.copy_from_host(&data).await.expect("the next copy on the lane");
    assert!(buf.to_vec().await.unwrap() == data, "the next copy arrived changed");
    ac_tests::computes(acc).await.expect("the session goes on");
}

/// The same through a session worker (the default for GPUs): the pieces cross its shared bays
/// and its DMA fails halfway; the copy answers the worker's driver error and the lane stays in
/// step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_copy_failing_halfway_in_a_session_worker_leaves_the_lane_in_step() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let program = standin::failing_worker_program(dir.path(), 5 << 20);
    let tb = TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = 64;
        c.isolation = Isolation::Process;
        c.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
        c.worker_program = Some(program);
    })
    .await;
    let before = session_workers();
    let acc = tb.connect().await;
    assert!(session_workers().iter().any(|p| !before.contains(p)), "the session runs in a worker");
    a_copy_fails_halfway_and_the_next_arrives_whole(&acc).await;
}

/// With contexts in one process, a fault breaks every session of it (the stand-in breaks the
/// process as the H100 did): the reason session workers are the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_fault_in_a_shared_process_reaches_the_other_session() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    let (healthy, victim) = (tb.connect().await, tb.connect().await);
    ac_tests::computes(&healthy).await.unwrap();
    let wild = victim.load_ptx(gpu_cases::ILLEGAL_STORE_PTX).await.unwrap().function("illegal_store").await.unwrap();
    wild.launch(LaunchDims::linear(1, 1), &[0x10u64.into()]).await.unwrap();
    assert_eq!(victim.synchronize().await.unwrap_err().kind(), Some(ErrorKind::ContextLost));
    let err = ac_tests::computes(&healthy).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ContextLost), "{err}");
}

/// A worker that dies (killed here) ends its session with a clear error naming how it ended;
/// the backend and the other sessions go on, and sessions that end take their workers along.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_killed_session_worker_ends_only_its_session() {
    let _turn = standin::exclusive().await;
    let tb = standin_workers_backend().await;
    let healthy = tb.connect().await;
    let before = session_workers();
    let victim = tb.connect().await;
    let buffer = victim.alloc_from(&[1.0f32; 64]).await.unwrap();
    let new: Vec<u32> = session_workers().into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "one worker per session: {before:?} then {new:?}");
    let killed = std::process::Command::new("kill").args(["-KILL", &new[0].to_string()]).status().unwrap();
    assert!(killed.success());
    let err = buffer.to_vec().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ContextLost), "{err}");
    assert!(err.to_string().contains("worker process ended") && err.to_string().contains("signal: 9"), "{err}");
    ac_tests::computes(&healthy).await.expect("the other session goes on");
    ac_tests::computes(&tb.connect().await).await.expect("a new session works");
    drop((buffer, victim, healthy));
    let gone = ac_tests::eventually(Duration::from_secs(20), || async { session_workers().is_empty() }).await;
    assert!(gone, "workers outlived their sessions: {:?}", session_workers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_functions_of_an_unloaded_module_are_refused() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    gpu_cases::functions_of_an_unloaded_module_are_refused(&tb.connect().await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_sessions_on_two_devices_work_side_by_side() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    assert_eq!(tb.backend.devices().len(), 2, "the stand-in has two devices");
    let mut sessions = Vec::new();
    for device in [0, 1, 1, 0] {
        let mut options = tb.options();
        options.device = device;
        let acc = ac_frontend::Accelerator::connect(&options).await.unwrap();
        assert_eq!(acc.info().index, device);
        sessions.push(acc);
    }
    let work = sessions.iter().map(|acc| async move {
        for _ in 0..5 {
            ac_tests::computes(acc).await?;
        }
        Ok::<_, ac_frontend::Error>(())
    });
    for outcome in futures_util::future::join_all(work).await {
        outcome.unwrap();
    }
    standin::assert_no_violations();
}

/// A driver before CUDA 12.4 cannot report a kernel's parameters: they come from the image
/// (PTX `.entry`, cubin `.nv.info`), and a launch that does not match is refused before the
/// driver reads a single argument (finding 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_launches_without_driver_param_info_use_the_image_signature() {
    let _turn = standin::exclusive().await;
    standin::set_param_info(false);
    let tb = standin_backend(64).await;
    let acc = tb.connect().await;
    ac_tests::computes(&acc).await.expect("builtin kernels launch with their own signatures");
    let buf = acc.alloc::<f32>(64).await.unwrap();
    let ptx = acc.load_ptx(include_str!("../fixtures/add_one.ptx")).await.unwrap();
    let cubin = acc.load_cubin(include_bytes!("../fixtures/add_one.sm_90.cubin")).await.unwrap();
    for module in [ptx, cubin] {
        let add_one = module.function("add_one").await.unwrap();
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg()]).await.unwrap();
        let err = acc.synchronize().await.unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
        assert!(err.to_string().contains("takes 2 arguments, got 1"), "{err}");
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg(), 64u64.into()]).await.unwrap();
        let err = acc.synchronize().await.unwrap_err();
        assert!(err.to_string().contains("argument 1 is 4 bytes wide"), "{err}");
        // The right arguments reach the stand-in, which runs no user kernel.
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg(), 64u32.into()]).await.unwrap();
        let err = acc.synchronize().await.unwrap_err();
        assert!(err.to_string().contains("not a GPU"), "{err}");
    }
    standin::assert_no_violations();
}

/// The pinned staging pool goes with the backend: nothing pinned, no context left (finding 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_pinned_staging_and_contexts_are_freed_when_the_backend_stops() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    let acc = tb.connect().await;
    let data = ac_tests::pattern(3 << 20, 9);
    assert!(acc.alloc_from(&data).await.unwrap().to_vec().await.unwrap() == data);
    assert!(standin::pinned_outstanding() > 0, "the copy went through pinned buffers");
    acc.close().await;
    let TestBackend { backend, .. } = tb;
    backend.shutdown().await;
    let freed = ac_tests::eventually(Duration::from_secs(10), || async {
        standin::pinned_outstanding() == 0 && standin::contexts() == 0
    })
    .await;
    assert!(freed, "{} pinned buffers and {} contexts left", standin::pinned_outstanding(), standin::contexts());
    standin::assert_no_violations();
}

/// Where a fault breaks the whole process (NVIDIA allows it), the check after the first fault
/// finds that a fresh context fails, and new sessions are refused with the reason and the
/// fallback (finding 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_fault_that_breaks_the_process_refuses_new_sessions() {
    let _turn = standin::exclusive().await;
    standin::set_fault_poisons_process(true);
    let tb = standin_backend(64).await;
    let victim = tb.connect().await;
    let wild = victim.load_ptx(gpu_cases::ILLEGAL_STORE_PTX).await.unwrap().function("illegal_store").await.unwrap();
    wild.launch(LaunchDims::linear(1, 1), &[0x10u64.into()]).await.unwrap();
    assert_eq!(victim.synchronize().await.unwrap_err().kind(), Some(ErrorKind::ContextLost));
    let refused = ac_tests::eventually(Duration::from_secs(10), || async {
        tb.connect_raw().await.is_err_and(|e| e.to_string().contains("a fresh context no longer works"))
    })
    .await;
    assert!(refused, "new sessions are refused once the check failed: {:?}", tb.connect_raw().await.err());
    standin::assert_no_violations();
}
