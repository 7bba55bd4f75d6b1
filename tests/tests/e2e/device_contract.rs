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

use crate::gpu_cases;
use crate::standin;

use std::time::Duration;

use ac_backend::{DeviceChoice, Isolation};
use ac_frontend::{Accelerator, ErrorKind, LaunchDims};
use ac_tests::TestBackend;

/// A backend whose CUDA device is the stand-in's, with 64 MiB of pinned staging per device.
/// Its sessions' contexts live in the backend's process (`isolation = "context"`), so that the
/// tests read what the stand-in saw.
pub(crate) async fn standin_backend(staging_mib: u64) -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = staging_mib;
        c.isolation = Isolation::Context;
    })
    .await
}

/// A backend whose GPU sessions each run in a worker process (`ac-backend --session-worker`,
/// the default for GPUs), each loading the stand-in as its driver, with `env` in the workers'
/// environment. What their stand-ins see is checked when `record` is.
async fn standin_workers_backend(record: &standin::WorkerRecord, env: &[(&str, String)]) -> TestBackend {
    standin_workers_backend_with(record, env, |_| {}).await
}

/// As [`standin_workers_backend`], the configuration changed by `change` too.
pub(crate) async fn standin_workers_backend_with(
    record: &standin::WorkerRecord,
    env: &[(&str, String)],
    change: impl FnOnce(&mut ac_backend::BackendConfig),
) -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = 64;
        c.isolation = Isolation::Process;
        c.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
        c.worker_program = Some(record.program(env));
        change(c);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_functions_of_an_unloaded_module_are_refused() {
    let tb = TestBackend::start(64).await;
    gpu_cases::functions_of_an_unloaded_module_are_refused(&tb.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_module_variables_belong_to_their_module() {
    let _turn = standin::exclusive().await;
    gpu_cases::module_variables_belong_to_their_module(&standin_backend(64).await.connect().await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_tensor_maps_describe_only_the_sessions_memory() {
    let _turn = standin::exclusive().await;
    gpu_cases::tensor_maps_describe_only_the_sessions_memory(&standin_backend(64).await.connect().await).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_arrays_reach_only_the_sessions_memory() {
    let _turn = standin::exclusive().await;
    let tb = standin_backend(64).await;
    let (acc, other) = (tb.connect().await, tb.connect().await);
    gpu_cases::arrays::arrays_reach_only_the_sessions_memory(&acc, &other).await;
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_layered_arrays_take_and_give_back_every_layer() {
    let _turn = standin::exclusive().await;
    gpu_cases::arrays::layered_arrays_take_and_give_back_every_layer(&standin_backend(64).await.connect().await).await;
    standin::assert_no_violations();
}

/// The same through session workers, a process each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_arrays_reach_only_the_sessions_memory_in_session_workers() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let tb = standin_workers_backend(&record, &[]).await;
    let (acc, other) = (tb.connect().await, tb.connect().await);
    gpu_cases::arrays::arrays_reach_only_the_sessions_memory(&acc, &other).await;
    standin::assert_no_violations();
    record.assert_none();
}

/// Ranges through a session worker (a mapping is its process's: the backend serves ranges only
/// to a session with a process of its own), its driver slow to unmap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_ranges_hold_only_their_mapped_memory_in_a_session_worker() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    // A slow unmap: a map of the same bytes answered before it is done would be refused.
    let tb = standin_workers_backend(&record, &[("CUDA_STANDIN_UNMAP_DELAY_MS", "100".to_string())]).await;
    gpu_cases::ranges_hold_only_their_mapped_memory(&tb.connect().await).await;
    // The worker's stand-in saw each unmap before its release and its range's free.
    assert!(standin::worker_gone(&tb.backend, &[]).await, "the session and its worker ended");
    standin::assert_no_violations();
    record.assert_none();
}

/// Ranges and physical memory are refused to a session that shares its process with others'
/// (`isolation = "context"`): a mapping is the process's, reachable from every context on the
/// GPU. The session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_sessions_sharing_a_process_reserve_no_ranges() {
    let _turn = standin::exclusive().await;
    let acc = standin_backend(64).await.connect().await;
    for err in
        [acc.reserve_range(2 << 20, 0).await.unwrap_err(), acc.create_physical(2 << 20).await.map(drop).unwrap_err()]
    {
        assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
        assert!(err.to_string().contains("needs session workers"), "{err}");
    }
    assert_eq!(acc.alloc_from(&[4u8]).await.unwrap().to_vec().await.unwrap(), [4]);
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_kernel_opts_in_to_more_dynamic_shared_memory() {
    let _turn = standin::exclusive().await;
    gpu_cases::a_kernel_opts_in_to_more_dynamic_shared_memory(&standin_backend(64).await.connect().await).await;
    standin::assert_no_violations();
}

/// The same through a session worker: the attributes cross the worker's pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_kernel_opts_in_to_more_dynamic_shared_memory_in_a_session_worker() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let tb = standin_workers_backend(&record, &[]).await;
    gpu_cases::a_kernel_opts_in_to_more_dynamic_shared_memory(&tb.connect().await).await;
    standin::assert_no_violations();
    record.assert_none();
}

/// The CPU device's builtins use no shared memory and keep the default 48 KiB limit of dynamic
/// shared memory: a larger or smaller limit is refused, and so is a launch over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_kernels_keep_the_default_dynamic_shared_memory() {
    use ac_frontend::KernelSetting::MaxDynamicShared;
    let acc = TestBackend::start(64).await.connect().await;
    let fill = acc.builtin().await.unwrap().function("fill").await.unwrap();
    let attributes = fill.attributes().await.unwrap();
    assert_eq!((attributes.static_shared, attributes.max_dynamic_shared), (0, 48 << 10), "{attributes:?}");
    fill.set_attribute(MaxDynamicShared(48 << 10)).await.unwrap();
    let err = fill.set_attribute(MaxDynamicShared((48 << 10) + 1)).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
    assert!(err.to_string().contains("exceed the kernel's limit of 49152"), "{err}");
    let err = fill.set_attribute(MaxDynamicShared(16 << 10)).await.unwrap_err();
    assert!(err.to_string().contains("keeps every kernel's dynamic shared memory limit at 49152"), "{err}");
    let x = acc.alloc::<f32>(16).await.unwrap();
    let dims = LaunchDims::linear(16, 16).with_shared_mem((48 << 10) + 1);
    fill.launch(dims, &[x.arg(), 1.0f32.into(), 16u64.into()]).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert!(err.to_string().contains("exceed the kernel's limit"), "{err}");
}

/// Thread block clusters on the CPU device (backend protocol 12): its builtins share nothing
/// across blocks, so a launch in clusters that divide the grid runs as any launch; one that does
/// not divide it, or of more than 16 blocks, is refused at the launch; the cluster occupancy
/// query is a CUDA GPU's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_launches_in_clusters_are_checked_and_run() {
    let acc = TestBackend::start(64).await.connect().await;
    let fill = acc.builtin().await.unwrap().function("fill").await.unwrap();
    let x = acc.alloc::<f32>(64).await.unwrap();
    let stream = acc.create_stream().await.unwrap();
    let args = [x.arg(), 3.0f32.into(), 64u64.into()];
    fill.launch_clustered_on(&stream, LaunchDims::new([8, 1, 1], [8, 1, 1]), [2, 1, 1], &args).await.unwrap();
    stream.synchronize().await.unwrap();
    assert_eq!(x.to_vec().await.unwrap(), vec![3.0f32; 64]);
    for (grid, cluster, why) in [
        ([6, 1, 1], [4, 1, 1], "does not divide the grid"),
        ([8, 2, 1], [1, 0, 1], "does not divide the grid"),
        ([32, 1, 1], [32, 1, 1], "a cluster of 32 blocks: at most 16"),
    ] {
        let launched = fill.launch_clustered_on(&stream, LaunchDims::new(grid, [8, 1, 1]), cluster, &args).await;
        let err = match launched {
            Err(err) => err,
            Ok(()) => stream.synchronize().await.unwrap_err(),
        };
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{cluster:?}: {err}");
        assert!(err.to_string().contains(why), "{cluster:?}: {err}");
    }
    let err = fill.max_active_clusters(LaunchDims::linear(8, 8), [2, 1, 1]).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
    stream.synchronize().await.unwrap();
}

/// CUDA arrays are a CUDA GPU's (its texture units read them): the CPU device says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_devices_make_no_arrays() {
    let acc = TestBackend::start(64).await.connect().await;
    let spec = ac_frontend::ArraySpec { width: 4, height: 4, depth: 0, format: 0x20, channels: 1, flags: 0 };
    let err = acc.create_array(spec).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
    assert_eq!(acc.alloc_from(&[4u8]).await.unwrap().to_vec().await.unwrap(), [4], "the session goes on");
}

/// Tensor maps are a CUDA GPU's (the descriptors of its copy engine): the CPU device says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_devices_encode_no_tensor_maps() {
    use ac_proto::backend::{DevicePtr, TensorMapLayout, TensorMapSpec};
    let acc = TestBackend::start(64).await.connect().await;
    let x = acc.alloc::<f32>(64).await.unwrap();
    let spec = TensorMapSpec {
        data_type: 7,
        address: Some(DevicePtr { buffer: x.id(), offset: 0 }),
        dims: vec![64],
        strides: vec![],
        element_strides: vec![1],
        interleave: 0,
        swizzle: 0,
        l2_promotion: 0,
        oob_fill: 0,
        layout: TensorMapLayout::Tiled { box_dims: vec![16] },
    };
    let err = acc.encode_tensor_map(spec).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
}

/// Physical memory counts against the session's quota (`session_memory_mib`) from its creation
/// until it is both released and unmapped, as CUDA keeps it; reserved ranges cost none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_physical_memory_counts_against_the_quota_until_unmapped_and_released() {
    const GRAN: u64 = 2 << 20;
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let backend = standin_workers_backend_with(&record, &[], |c| c.session_memory_mib = Some(4)).await;
    let acc = backend.connect().await;
    let (range, _) = acc.reserve_range(64 * GRAN, 0).await.unwrap();
    let first = acc.create_physical(GRAN).await.unwrap();
    let second = acc.create_physical(GRAN).await.unwrap();
    let over = acc.create_physical(GRAN).await.unwrap_err();
    assert_eq!(over.kind(), Some(ErrorKind::OutOfMemory), "{over}");
    assert!(over.to_string().contains("quota"), "{over}");
    acc.map_physical(&range, 0, GRAN, &first).await.unwrap();
    drop(first);
    let still = acc.create_physical(GRAN).await.unwrap_err();
    assert_eq!(still.kind(), Some(ErrorKind::OutOfMemory), "released but mapped: {still}");
    acc.unmap_range(&range, 0, GRAN).await.unwrap();
    let third = acc.create_physical(GRAN).await.unwrap();

    drop((second, third, range, acc));
    assert!(standin::worker_gone(&backend.backend, &[]).await, "the session and its worker ended");
    standin::assert_no_violations();
    record.assert_none();
}

/// Virtual memory management is a CUDA GPU's: the CPU device says so, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_devices_reserve_no_ranges() {
    let acc = TestBackend::start(64).await.connect().await;
    let err = acc.reserve_range(2 << 20, 0).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
    let err = acc.create_physical(2 << 20).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NeedsCuda), "{err}");
    assert_eq!(acc.alloc_from(&[4u8]).await.unwrap().to_vec().await.unwrap(), [4]);
}

/// The CPU device's one module (the builtins) holds no variables: a lookup says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_modules_hold_no_variables() {
    let acc = TestBackend::start(64).await.connect().await;
    let err = acc.builtin().await.unwrap().global("counted").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::UnknownKernel), "{err}");
    assert!(err.to_string().contains("no variable `counted`: this device's modules hold none"), "{err}");
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
    let mut record = standin::WorkerRecord::new();
    gpu_cases::fault_in_one_session_leaves_the_others_working(&standin_workers_backend(&record, &[]).await).await;
    standin::assert_no_violations();
    record.assert_none();
}

/// Bulk copies in both directions through a session worker: its context's pinned pipeline,
/// with pieces passed between the processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_round_trip_through_a_session_worker() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    gpu_cases::copies_round_trip_through_the_staging_pipeline(&standin_workers_backend(&record, &[]).await).await;
    standin::assert_no_violations();
    record.assert_none();
}

/// More bulk copies at once than a session worker's shared memory has bays (a copy striped
/// over 6 lanes, three such copies at once): copies without a bay go through the worker's pipe,
/// and every byte lands where it belongs, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_copies_outnumbering_a_workers_shared_bays_all_arrive() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let tb = standin_workers_backend(&record, &[]).await;
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
    standin::assert_no_violations();
    record.assert_none();
}

/// A host-to-device DMA that faults halfway through a bulk copy, after the lane has put bytes
/// into pinned buffers and after the driver call that queued it succeeded (as a real DMA fault
/// arrives): with contexts in the backend's process and faults confined to their context, the
/// copy answers "context lost", the session stays lost, and the backend serves new sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_dma_fault_halfway_on_the_device_loses_only_its_session() {
    let _turn = standin::exclusive().await;
    standin::set_fault_poisons_process(false);
    let tb = standin_backend(64).await;
    let (healthy, victim) = (tb.connect().await, tb.connect().await);
    standin::fail_host_to_device_after(5 << 20);
    a_dma_fault_halfway_loses_only_its_session(&tb, &victim).await;
    ac_tests::computes(&healthy).await.expect("the other session goes on");
    standin::assert_no_violations();
}

/// The same through a session worker (the default for GPUs), with the driver's default that a
/// fault breaks the whole process: the pieces cross the worker's shared bays, its DMA faults
/// halfway, and only the worker's session is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_dma_fault_halfway_in_a_session_worker_loses_only_its_session() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let env = [("CUDA_STANDIN_FAIL_HOST_TO_DEVICE_AFTER", (5usize << 20).to_string())];
    let tb = standin_workers_backend(&record, &env).await;
    let healthy = tb.connect().await;
    let before = standin::session_workers();
    let victim = tb.connect().await;
    assert!(standin::session_workers().iter().any(|p| !before.contains(p)), "the session runs in a worker");
    a_dma_fault_halfway_loses_only_its_session(&tb, &victim).await;
    ac_tests::computes(&healthy).await.expect("the other session goes on");
    standin::assert_no_violations();
    record.assert_none();
}

/// A host-to-device DMA that faults partway through a bulk copy, after the call that queued it
/// succeeded (the stand-in injects it, so this runs only against it; a real one is sticky the same way): the copy
/// answers "context lost" naming the driver's error, every later call of the session answers
/// the same at once, and the backend serves new sessions.
pub async fn a_dma_fault_halfway_loses_only_its_session(tb: &TestBackend, victim: &Accelerator) {
    let data = ac_tests::pattern((24 << 20) / 4 + 3, 5);
    let buf = victim.alloc::<f32>(data.len()).await.unwrap();
    // A bound on a hang, not a measurement: the fault is answered when the copy is waited for.
    let failed = tokio::time::timeout(Duration::from_secs(60), buf.copy_from_host(&data)).await;
    let err = failed.expect("the faulted copy was never answered").unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ContextLost), "{err}");
    assert!(err.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "the driver's error is named: {err}");
    let again = tokio::time::timeout(Duration::from_secs(60), buf.copy_from_host(&data)).await;
    let again = again.expect("a copy after the fault was never answered").unwrap_err();
    assert_eq!(again.kind(), Some(ErrorKind::ContextLost), "sticky: {again}");
    let read = buf.to_vec().await.unwrap_err();
    assert_eq!(read.kind(), Some(ErrorKind::ContextLost), "sticky: {read}");
    ac_tests::computes(&tb.connect().await).await.expect("a new session works");
}

/// New memory reads as zeros on the stand-in, whose new memory holds stale bytes as a GPU's
/// does: in the backend's process and in a session worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_new_memory_reads_as_zeros() {
    let _turn = standin::exclusive().await;
    gpu_cases::new_memory_reads_as_zeros(&standin_backend(64).await.connect().await).await;
    let mut record = standin::WorkerRecord::new();
    gpu_cases::new_memory_reads_as_zeros(&standin_workers_backend(&record, &[]).await.connect().await).await;
    standin::assert_no_violations();
    record.assert_none();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_new_memory_reads_as_zeros() {
    gpu_cases::new_memory_reads_as_zeros(&TestBackend::start(64).await.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_a_launch_runs_only_the_threads_it_launched() {
    let _turn = standin::exclusive().await;
    gpu_cases::a_launch_runs_only_the_threads_it_launched(&standin_backend(64).await.connect().await).await;
    standin::assert_no_violations();
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
    let mut record = standin::WorkerRecord::new();
    let tb = standin_workers_backend(&record, &[]).await;
    let healthy = tb.connect().await;
    let before = standin::session_workers();
    let victim = tb.connect().await;
    let buffer = victim.alloc_from(&[1.0f32; 64]).await.unwrap();
    let new: Vec<u32> = standin::session_workers().into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "one worker per session: {before:?} then {new:?}");
    let killed = std::process::Command::new("kill").args(["-KILL", &new[0].to_string()]).status().unwrap();
    assert!(killed.success());
    let err = buffer.to_vec().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ContextLost), "{err}");
    assert!(err.to_string().contains("worker process ended") && err.to_string().contains("signal: 9"), "{err}");
    ac_tests::computes(&healthy).await.expect("the other session goes on");
    ac_tests::computes(&tb.connect().await).await.expect("a new session works");
    drop((buffer, victim, healthy));
    let gone = ac_tests::eventually(Duration::from_secs(20), || async { standin::session_workers().is_empty() }).await;
    assert!(gone, "workers outlived their sessions: {:?}", standin::session_workers());
    standin::assert_no_violations();
    record.assert_none();
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
    let ptx = acc.load_ptx(include_str!("../../fixtures/add_one.ptx")).await.unwrap();
    let cubin = acc.load_cubin(include_bytes!("../../fixtures/add_one.sm_90.cubin")).await.unwrap();
    for module in [ptx, cubin] {
        let add_one = module.function("add_one").await.unwrap();
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg()]).await.unwrap();
        let err = acc.synchronize().await.unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
        assert!(err.to_string().contains("takes 2 arguments, got 1"), "{err}");
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg(), 64u64.into()]).await.unwrap();
        let err = acc.synchronize().await.unwrap_err();
        assert!(err.to_string().contains("argument 1 is 4 bytes wide"), "{err}");
        // The right arguments reach the stand-in, which runs this fixture over 64 threads.
        add_one.launch(LaunchDims::linear(64, 64), &[buf.arg(), 64u32.into()]).await.unwrap();
        acc.synchronize().await.unwrap();
    }
    assert_eq!(buf.to_vec().await.unwrap(), vec![2.0; 64], "each module's add_one ran once");
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
