//! Unmodified CUDA programs on remote accelerators (issue 48): programs built by `nvcc` with
//! its default static runtime, run with `ac-cuda`'s `libcuda.so.1` first on
//! `LD_LIBRARY_PATH`, against a manager and backends whose CUDA devices are the driver
//! stand-in's (`cuda-standin`, which runs these programs' kernels on the CPU; not a GPU).
//! The programs and their build: `ac_tests::cuda`.

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

use std::path::Path;
use std::process::{Command, Output};

use ac_tests::{cuda, TestCluster};

/// A manager and `hosts` backends, each serving the stand-in's two CUDA devices.
pub(crate) async fn cuda_cluster(hosts: usize) -> TestCluster {
    cuda_cluster_timed(hosts, |_| {}, |_| {}).await
}

/// A manager and `hosts` stand-in backends, their test configurations adjusted.
pub(crate) async fn cuda_cluster_timed(
    hosts: usize,
    adjust_arm: impl FnOnce(&mut arm_server::ArmConfig),
    adjust_backend: impl Fn(&mut ac_backend::BackendConfig),
) -> TestCluster {
    let state = tempfile::tempdir().expect("temp dir");
    let mut config = ac_tests::arm_config(state.path());
    adjust_arm(&mut config);
    let arm = arm_server::start(config).await.expect("arm starts");
    let mut backends = Vec::new();
    for _ in 0..hosts {
        backends.push(cuda::standin_backend_with(&adjust_backend).await);
    }
    let cluster = TestCluster { arm, backends, state };
    for i in 0..hosts {
        cluster.add_host(i).await;
    }
    cluster
}

/// A manager and one backend whose sessions run in workers of their own (a GPU's default), the
/// stand-in their driver; the workers' violations go to `record`.
pub(crate) async fn worker_cluster(record: &standin::WorkerRecord) -> TestCluster {
    let program = record.program(&[]);
    cuda_cluster_timed(
        1,
        |_| {},
        |b| {
            b.isolation = ac_backend::Isolation::Process;
            b.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
            b.worker_program = Some(program.clone());
        },
    )
    .await
}

/// Runs `exe` as a job's process through the shim, with `env` added (off the async threads,
/// which serve the manager and backends meanwhile).
pub(crate) async fn run(c: &TestCluster, shim: &Path, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = command(c, shim, exe, args, env);
    tokio::task::spawn_blocking(move || command.output().expect("the program starts")).await.expect("joined")
}

/// The command that runs `exe` as a job's process of `c` through the shim, with `env` added.
pub(crate) fn command(c: &TestCluster, shim: &Path, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
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
    command
}

pub(crate) fn said(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A program that reaches one backend directly (`AC_BACKEND_ADDR`, no manager: a workstation,
/// a GPU host's check) ends its session when it exits: the backend does not hold it for a
/// resumption that never comes (`session_hold_ms`, a minute), so a device at its session limit
/// serves the next run. Python programs (PyTorch's) exit through the same `atexit`.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_reaching_a_backend_directly_ends_its_session_at_exit() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let backend = cuda::standin_backend_with(|c| c.max_sessions = Some(1)).await;
    let shim = cuda::shim_dir(dir.path());
    let ca = backend.backend.ca_cert().to_path_buf();
    for run in ["first", "second"] {
        let mut command = Command::new(&exe);
        command
            .arg("100000")
            .env("LD_LIBRARY_PATH", &shim)
            .env("AC_BACKEND_ADDR", backend.backend.addr().to_string())
            .env("AC_CA_CERT", &ca)
            .env_remove("ARM_ADDR");
        let out = tokio::task::spawn_blocking(move || command.output().expect("starts")).await.unwrap();
        assert!(out.status.success(), "{run} run: {}", said(&out));
        assert!(said(&out).contains("vector_add: 100000 elements on device 0 exact"), "{run} run: {}", said(&out));
        // Held for a resumption, it would end only after the idle timeout and the hold.
        let ended = backend.eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
        assert!(ended, "after the {run} run the backend still holds {} session(s)", backend.backend.sessions());
    }
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unmodified_vector_add_runs_on_a_remote_accelerator_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    assert!(out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("vector_add: 100000 elements on device 0 exact"), "{text}");
    assert!(text.contains("devices: 1; device 0:"), "{text}");
    assert!(text.contains("occupancy: 8 blocks of 256 threads"), "{text}");
    // Everything it called, the runtime's start and exit included, is served.
    assert!(!text.contains("not supported") && !text.contains("unexpectedly"), "{text}");
    standin::assert_no_violations();
}

/// A program that forks once CUDA has started: the child's `exit()` runs the exit handler it
/// inherited without the parent's threads; it must leave the session to the parent (which then
/// computes on), not hang in it or give the parent's accelerator back.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_child_exits_without_touching_its_parents_session() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("fork_exit", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("forked child exited with 0"), "{text}");
    assert!(text.contains("parent computed after the fork exact"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// Programs built for per-thread default streams (`nvcc --default-stream per-thread`) reach the
/// driver through its per-thread variants (`cuMemcpyHtoD_v2_ptds`, `cuLaunchKernel_ptsz`,
/// `cuEventRecord_ptsz`, ...), which the shim serves as the same entry points under a second
/// name: they run as the legacy-stream builds do.
#[tokio::test(flavor = "multi_thread")]
async fn programs_built_for_per_thread_default_streams_run_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let per_thread = ["--default-stream", "per-thread"];
    let Some(vector_add) = cuda::build_with("vector_add", dir.path(), &per_thread) else { return };
    let Some(streams) = cuda::build_with("streams", dir.path(), &per_thread) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let runs = [
        (vector_add, "100000", "vector_add: 100000 elements on device 0 exact"),
        (streams, "4", "streams: 4 threads exact"),
    ];
    for (exe, arg, line) in runs {
        let out = run(&c, &shim, &exe, &[arg], &[("ARM_ACPN", "1")]).await;
        let text = said(&out);
        assert!(out.status.success(), "{text}");
        assert!(text.contains(line), "{text}");
        // streams.cu's deliberate call (a memory pool's file descriptor) aside, every call is served.
        let refused: Vec<&str> = text.lines().filter(|l| l.contains("not supported")).collect();
        assert!(refused.iter().all(|l| l.contains("cuMemPoolExportToShareableHandle")), "{text}");
    }
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_events_and_memsets_from_threads_sharing_a_device() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("streams", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["4"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "streams: 4 threads exact",
        "memset and device-to-device copy exact",
        "event time measured",
        "capture status 0 0 id 0 graph none deps none 0",
        "edge data without dependencies: 1 (cudaErrorInvalidValue)",
        "still working after unsupported calls",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // Unserved calls answer "not supported" and name themselves once on stderr.
    assert!(text.contains("cudaMemPoolExportToShareableHandle: 801 (cudaErrorNotSupported)"), "{text}");
    assert!(text.contains("ac-cuda: cuMemPoolExportToShareableHandle is not supported"), "{text}");
    // It left memory and a stream behind: its exit gave the accelerator back.
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
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
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
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
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
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
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
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
    let Some(runtime) = cuda::runtime_12() else {
        return ac_tests::skip("AC_CUDA_SHIM_REQUIRED", "no libcudart.so.12 (scripts/test fetches it)");
    };
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/probe.py");
    let python = Path::new("python3");
    let out = run(&c, &shim, python, &[probe.to_str().unwrap(), runtime.to_str().unwrap()], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("runtime 12090: 1 device(s), compute 9.0, 132 SMs"), "{text}");
    assert!(text.contains("65536-byte round trip exact"), "{text}");
}

/// Module images go to a backend once per owner: the processes of one job's grant send a
/// framework's images once, and another job's processes learn nothing of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_processes_send_a_module_image_once() {
    let _turn = standin::exclusive().await;
    let c = cuda_cluster(1).await;
    let image = std::fs::read(cuda::source("tests/fixtures/shim_kernels.sm_90.fatbin")).unwrap();
    let credential = c.submit("j1", &["n1"], 1).await;
    let open = || ac_frontend::Session::init(c.session_options("j1", &credential, "n1"));
    let (first, second) = (open().await.expect("AC_Init"), open().await.expect("AC_Init"));
    let source = ac_proto::backend::ModuleSource::Cubin;
    let acc = &first.accelerators()[0].acc;
    let (module, sent) = acc.load_module_cached(source.clone(), &image).await.expect("loaded");
    assert!(sent, "the first load sends the image");
    module.function("_Z4iotaPjj").await.expect("the kernel is in it");
    // The job's second process, on the same accelerator: the backend has it already.
    let acc = &second.accelerators()[0].acc;
    let (module, sent) = acc.load_module_cached(source.clone(), &image).await.expect("loaded");
    assert!(!sent, "the job's second process sent the image again");
    module.function("_Z4vaddPKfS0_Pfi").await.expect("the kernel is in it");
    // Another job on the same backend: its own copy.
    let other = c.submit("j2", &["n1"], 1).await;
    let third = ac_frontend::Session::init(c.session_options("j2", &other, "n1")).await.expect("AC_Init");
    let (_, sent) = third.accelerators()[0].acc.load_module_cached(source, &image).await.expect("loaded");
    assert!(sent, "another job's process loaded an image it never sent");
    for session in [first, second, third] {
        session.finalize().await.expect("finalized");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_taking_a_struct_by_value_runs_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("struct_param", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("struct_param: 10000 elements exact"), "{text}");
    standin::assert_no_violations();
}

/// `cudaMallocPitch`, `cudaMemcpy2D` (host, device, unified), `cudaMemcpy2DAsync`,
/// `cudaMemset2D`, `cudaMalloc3D` with `cudaMemcpy3D` and `cudaMemset3D`: each region lands
/// where CUDA puts it and the bytes between rows are not touched; one past its allocation is
/// refused whole.
#[tokio::test(flavor = "multi_thread")]
async fn pitched_rows_and_boxes_are_copied_and_set_in_place() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("pitched", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("pitched: all exact"), "{text}");
    assert!(text.contains("a region past its allocation refused: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(!text.contains("not supported"), "a 2D or 3D call was refused: {text}");
    standin::assert_no_violations();
}

/// A program's `__constant__` and `__device__` variables, as the CUDA runtime reaches them
/// (`cudaMemcpyToSymbol`, `cudaMemcpyFromSymbol` and its `Async` form, `cudaGetSymbolAddress`,
/// `cudaGetSymbolSize`): an initializer is read back, what the program writes is what its
/// kernel reads, what the kernel writes is what the program reads, at an offset and device to
/// device too; a copy past a variable and a `cudaFree` of one are refused.
#[tokio::test(flavor = "multi_thread")]
async fn module_variables_are_written_read_and_seen_by_kernels() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("variables", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["1000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("variables: all exact"), "{text}");
    assert!(text.contains("sizes 16 16 4") && text.contains("counted 1000 of 1000"), "{text}");
    assert!(text.contains("a copy past a variable: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("a variable freed: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(!text.contains("not supported"), "a variable's call was refused: {text}");
    standin::assert_no_violations();
}

/// Managed memory (`cudaMallocManaged`) as programs use it: host writes, kernels and host reads
/// round after round, synchronized by the device, a stream or an event; copies and memsets
/// between managed, device and host memory; pointer attributes; prefetches and advice; memory
/// attached to the host and then to every stream; threads whose memory is attached to their own
/// streams, each touching it on the host while the others' kernels run. The device says it has
/// no concurrent managed access (the host waits for the work that reaches the memory, as the
/// shim keeps the two copies).
#[tokio::test(flavor = "multi_thread")]
async fn managed_memory_is_one_address_for_the_host_and_the_kernels() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("managed", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1"), ("AC_CUDA_TRACE", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("managed: all exact"), "{text}");
    assert!(text.contains("attributes: managed 1, concurrent 0, pageable 0"), "{text}");
    assert!(text.contains("pointer attributes: type managed, host pointer same, device pointer same"), "{text}");
    assert!(text.contains("4 threads with memory attached to their own streams exact"), "{text}");
    assert!(text.contains("every stream's again after its stream was destroyed, exact"), "{text}");
    assert!(text.contains("attached to the NULL stream alone: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("freed twice: 1 (cudaErrorInvalidValue)"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// `__managed__` variables (`tests/cuda/managed_variables.cu`): host code reads and writes them
/// by name, kernels add into them and take their host address as a pointer, round after round;
/// symbol copies, a memset and a refused free between host accesses; threads launching on their
/// own streams into one of them. The stand-in lays a module's managed variables out one after
/// another, as a driver does, so that one page holds several.
#[tokio::test(flavor = "multi_thread")]
async fn managed_variables_are_one_name_for_host_code_and_kernels() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("managed_variables", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("managed variables: all exact"), "{text}");
    assert!(text.contains("initial: gain 2.5, totals 0 0 0 0"), "{text}");
    assert!(text.contains("3 rounds of host writes, a kernel and host reads exact"), "{text}");
    assert!(text.contains("a device memset, read by the host, its neighbour unchanged exact"), "{text}");
    assert!(text.contains("pointer attributes: type managed, host pointer same, device pointer same"), "{text}");
    assert!(text.contains("a managed variable freed: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("4 threads adding on their own streams exact"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// CUDA graphs as programs use them (`tests/cuda/graphs.cu`): a capture forked and joined over
/// two streams by events (a copy in, kernels, a memset, a host function, a copy out), launched
/// round after round with new input; graphs built node by node, cloned, updated and launched
/// into a capture; nodes' parameters read back and changed in the graph or in an executable
/// graph alone, a kernel node turned off and on; event record and wait nodes, built and
/// captured; four threads capturing at once; and CUDA's refusals (the legacy stream, a
/// synchronization while capturing, a capture ended on the wrong stream or unjoined).
#[tokio::test(flavor = "multi_thread")]
async fn cuda_graphs_captured_and_built_replay_their_work_on_each_launch() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("graphs", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("graphs: all exact"), "{text}");
    for line in [
        "capturing: status 1, joined stream 1, info 1 with 1 dependency; 6 nodes",
        "nothing ran while capturing: exact",
        "captured fork and join, launched 3 rounds with new input, exact",
        "graph API: 4 nodes, 1 root, kernel node type 0",
        "graph API: memset, kernel, host and copy nodes launched twice exact",
        "graph API: a clone exact",
        "graph API: updated from its clone: 0",
        "graph API: launched in a capture, as a child graph, exact",
        "node parameters read back: the same",
        "node parameters changed in the executable graph: exact",
        "a kernel node turned off, then on: exact",
        "a host node turned off: cudaErrorInvalidValue",
        "a kernel node changed in the graph: a new executable graph takes it, the first keeps its own, exact",
        "a memset node given a kernel's parameters: cudaErrorInvalidValue",
        "event nodes: types 7 and 6, events read back the same",
        "event record and wait nodes across two graphs on two streams exact",
        "the record node given another event in the executable graph: cudaSuccess",
        "captured an external wait and record: 1 wait node, 1 record node",
        "captured event nodes' events read back: the same",
        "the captured graph launched, its event waited for, exact",
        "capturing the legacy stream: cudaErrorStreamCaptureUnsupported",
        "synchronized while capturing: cudaErrorStreamCaptureUnsupported, then ended: cudaErrorStreamCaptureInvalidated, graph none",
        "ended on the joined stream: cudaErrorStreamCaptureUnmatched",
        "ended with work not joined back: cudaErrorStreamCaptureUnjoined",
        "streams after the refusals exact",
        "4 threads capturing and launching their own graphs exact",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    assert!(!text.contains("not supported"), "a graph call was refused: {text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// A job's two devices (`--acpn=2`), as a multi-GPU program uses them: peer access is refused
/// as CUDA refuses it between GPUs without a link, and `cudaMemcpyPeer`/`cudaMemcpyPeerAsync`
/// copy between the two devices' memory, on two hosts, through the program's host; one past
/// its allocation is refused.
#[tokio::test(flavor = "multi_thread")]
async fn peer_access_is_refused_and_peer_copies_cross_between_two_hosts_devices() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("peer", dir.path()) else { return };
    // Two hosts of one GPU each: the copies cross from one backend to the other.
    let c = cuda_cluster_timed(2, |_| {}, |b| b.devices = Some(vec![0])).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["65536"], &[("ARM_ACPN", "2")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("peer: 65536 elements each way exact"), "{text}");
    let refused = "can 0, attributes 0 0, enable cudaErrorPeerAccessUnsupported, \
                   disable cudaErrorPeerAccessNotEnabled, itself refused";
    assert!(text.contains(refused), "{text}");
    assert!(text.contains("a peer copy past its allocation: cudaErrorInvalidValue"), "{text}");
    assert!(!text.contains("not supported on remote"), "a peer call was refused: {text}");
    standin::assert_no_violations();
}

/// `cudaLaunchHostFunc` and `cudaStreamAddCallback`: each runs after its stream's earlier work
/// (the bytes a copy to the host brought are there), in the order queued, told its stream and
/// status; all have run when the stream is synchronized; flags other than 0 are refused.
#[tokio::test(flavor = "multi_thread")]
async fn host_functions_and_callbacks_run_in_their_streams_order() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("callbacks", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("callbacks: all in order"), "{text}");
    assert!(text.contains("host functions and callbacks: 3 run, in order 1, saw the copy 1"), "{text}");
    assert!(text.contains("a callback with flags 1: cudaErrorInvalidValue"), "{text}");
    assert!(!text.contains("not supported on remote"), "a callback call was refused: {text}");
    standin::assert_no_violations();
}

/// Memory pools and stream-ordered allocation (`tests/cuda/pools.cu`): a block freed on a
/// stream is handed out again on it with no more memory reserved, and not on another stream
/// before the free is known done; the release threshold, a trim, a pool's maximum size, a
/// current pool destroyed with a block out, threads on their own streams sharing a pool; what
/// CUDA refuses is refused and the program goes on.
#[tokio::test(flavor = "multi_thread")]
async fn memory_pools_hand_freed_blocks_out_again_in_stream_order() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("pools", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("pools: all exact"), "{text}");
    for line in [
        "pools supported 1, the default current 1",
        "8 rounds of cudaMallocAsync, vadd, cudaFreeAsync exact",
        "the same block each round: 8 of 8; reserved holds 3 blocks, used 0",
        "freed on one stream: another stream's block another before the free's stream synchronized, the same after",
        "freed on the legacy stream: its block another before a synchronization, another after the stream's, the same after the device's",
        "threshold: memory held, trimmed to 0; threshold 0: memory held until the synchronization, 0 after",
        "a block of the program's pool exact",
        "2 MiB from a pool of at most 1 MiB: cudaErrorMemoryAllocation",
        "cudaMallocAsync from the current pool: used 4096, high mark kept the round trip, reset to 4096",
        "destroyed with a block out: the block, then the default pool current exact",
        "4 threads allocating on their own streams from one pool exact",
        "cudaFree of cudaMallocAsync memory: used 0",
        "destroying the default pool: cudaErrorInvalidValue",
        "a host pool: cudaErrorNotSupported",
        "the device's own access taken away: cudaErrorInvalidValue",
        "a high-water mark set to 1: cudaErrorInvalidValue; the device's access 3",
        "the default pool after the refusals exact",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// Graph memory (`tests/cuda/graph_memory.cu`): `cudaMallocAsync` and `cudaFreeAsync` on a
/// capturing stream become allocation and free nodes whose addresses are the same at every
/// launch; auto-free launches round after round; without it a second launch before the free is
/// refused; memory its graph does not free outlives the graph until the program frees it;
/// allocation and free nodes built with the graph API; the device's counters; what CUDA refuses
/// is refused and the program goes on.
#[tokio::test(flavor = "multi_thread")]
async fn graph_memory_keeps_its_addresses_across_launches_and_outlives_its_graph_until_freed() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("graph_memory", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("graph memory: all exact"), "{text}");
    for line in [
        "captured: 2 allocation nodes, 1 free node; reserved 2 blocks, used 0 before a launch",
        "auto-free graph launched 3 rounds, its output read at the address the capture gave, exact",
        "used after a launch: 1 block (the output; the temporary freed in the graph)",
        "a second executable graph: cudaErrorNotSupported; a clone: cudaErrorNotSupported",
        "without auto-free: launched again before the free: cudaErrorInvalidValue",
        "without auto-free: launched after cudaFreeAsync exact",
        "launched into a capture: cudaErrorStreamCaptureUnsupported, then ended: cudaErrorStreamCaptureInvalidated",
        "the output after its graph was destroyed exact",
        "freed with cudaFree: used 0, reserved 0",
        "freed in its graph, then by cudaFree: cudaErrorInvalidValue",
        "graph API: node parameters read back the same",
        "graph API: a second free node: cudaErrorInvalidValue; a free node of cudaMalloc memory: cudaErrorInvalidValue",
        "graph API: allocation, copy, kernel, copy and free nodes launched twice exact",
        "freed by other graphs: a free node in the owner's then: cudaErrorInvalidValue",
        "allocated by one graph and freed by another, launched twice exact",
        "a captured free of cudaMalloc memory: cudaErrorStreamCaptureUnsupported, then ended: cudaErrorStreamCaptureInvalidated",
        "high marks reset: used 0, reserved 0; trimmed",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    assert!(!text.contains("not supported"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}
