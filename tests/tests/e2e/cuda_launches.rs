//! Unmodified CUDA programs that ask more of a kernel launch or of the driver's contexts (issue
//! 48): a kernel's dynamic shared memory limit raised past 48 KiB (backend protocol 10), launch
//! attributes (`cudaLaunchKernelEx`), thread block clusters (backend protocol 12), tensor maps
//! (backend protocol 13), virtual memory management (`cuMemCreate`, `cuMemMap`: backend
//! protocol 14), and contexts the program creates (`cuCtxCreate`), run as
//! `cuda_shim`'s programs are, through `ac-cuda`'s `libcuda.so.1` against the driver stand-in.

use crate::cuda_shim::{cuda_cluster_timed, run, said, worker_cluster};
use crate::standin;

use ac_tests::cuda;

/// Dynamic shared memory past the default 48 KiB (`cudaFuncSetAttribute` with
/// `cudaFuncAttributeMaxDynamicSharedMemorySize`, backend protocol 10): refused before the
/// kernel opts in and after its limit is lowered, as the driver refuses it, and run in between;
/// a limit past the device's opt-in maximum less the kernel's static shared memory refused; the
/// kernel's static shared memory as its cubin declares it, and the occupancy it allows; threads
/// sharing the kernel set its limit at once and launch on their own streams.
#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_opts_in_to_more_dynamic_shared_memory_within_the_devices_limit() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("shared_memory", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["8"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("shared memory: all exact"), "{text}");
    // nvcc 13.5 gives the kernel's 1 KiB array 2 KiB of static shared memory; 48 KiB less it.
    assert!(text.contains("static 2048, limit 47104, registers 32"), "{text}");
    assert!(text.contains("64 KiB before opting in: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("a limit past the opt-in maximum: 1 (cudaErrorInvalidValue)"), "{text}");
    // 228 KiB a multiprocessor over 64 KiB + 2 KiB static + 1 KiB reserved a block.
    assert!(text.contains("resident blocks of 64 KiB: 3"), "{text}");
    assert!(text.contains("64 KiB after lowering the limit: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("a carveout of 101: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("4 threads setting the limit and launching on their own streams exact"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    standin::assert_no_violations();
}

/// `cudaLaunchKernelEx` with launch attributes: hints (a priority, programmatic stream
/// serialization, a 1x1x1 cluster, a memory synchronization domain) run the kernel as asked, a
/// launch completion event and a programmatic event are reached after it (another stream waits
/// for the latter); a cooperative launch by attribute runs; a launch in clusters of two blocks
/// runs (backend protocol 12), a cooperative one in clusters is refused, and the stream goes on.
#[tokio::test(flavor = "multi_thread")]
async fn launch_attributes_that_need_nothing_of_the_gpu_are_served_and_the_others_refused() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("launch_ex", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("launch_ex: all exact"), "{text}");
    assert!(text.contains("a cooperative launch: 0 (cudaSuccess)"), "{text}");
    assert!(text.contains("a cluster of 2 blocks: 0 (cudaSuccess)"), "{text}");
    assert!(text.contains("a launch in clusters of 2 blocks exact"), "{text}");
    assert!(text.contains("a cooperative launch in clusters: 801 (cudaErrorNotSupported)"), "{text}");
    assert!(text.contains("a cooperative launch in clusters is not supported on remote accelerators"), "{text}");
    standin::assert_no_violations();
}

/// Contexts the program creates (`cuCtxCreate`, as driver API programs and PyCUDA make them):
/// current, not the primary one, the runtime working in it; an allocation names it; pushed and
/// popped; destroyed, it leaves the stack, a thread that still holds it is told so, and the
/// memory `cuMemAlloc` made in it is gone, while the primary context goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_created_context_is_current_until_destroyed_and_takes_its_memory_with_it() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let shim = cuda::shim_dir(dir.path());
    // A driver API program links against libcuda.so: the shim's, under that name.
    std::os::unix::fs::symlink("libcuda.so.1", shim.join("libcuda.so")).unwrap();
    let link = [format!("-L{}", shim.display()), "-lcuda".to_string()];
    let Some(exe) = cuda::build_with("contexts", dir.path(), &link) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("contexts: all exact"), "{text}");
    assert!(text.contains("a thread holding the destroyed context: 709"), "{text}");
    assert!(text.contains("the destroyed context pushed again: 709"), "{text}");
    assert!(text.contains("the destroyed context's cuMemAlloc memory: 1"), "{text}");
    standin::assert_no_violations();
}

/// A cooperative launch (`cudaLaunchCooperativeKernel`, backend protocol 10): a grid of as many
/// blocks as the device holds at once runs a kernel whose blocks wait for each other, exactly;
/// one block more is refused before anything is sent, and the stream goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_cooperative_launch_runs_every_resident_block_and_a_larger_one_is_refused() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("cooperative", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("cooperative: all exact"), "{text}");
    // 132 multiprocessors of 8 blocks of 256 threads (64 warps each).
    assert!(text.contains("cooperative launch 1, 1056 blocks at once"), "{text}");
    assert!(text.contains("one block more: 720 (cudaErrorCooperativeLaunchTooLarge)"), "{text}");
    standin::assert_no_violations();
}

/// Kernels that print (device-side `printf`, backend protocol 11), on a backend whose sessions
/// run in worker processes (the default on GPU hosts), where the driver writes its printf
/// buffer to the worker's standard output, which carried the worker's replies: every line
/// reaches the program's standard output before the synchronization after its launch returns,
/// in its place among the program's own lines (a pipe, fully buffered); the session goes on
/// (a vector add after it is exact); a stream's synchronization brings its kernel's lines; a
/// kernel launched just before exit prints at exit.
#[tokio::test(flavor = "multi_thread")]
async fn what_kernels_print_reaches_the_programs_output_at_its_synchronizations() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("printf", dir.path()) else { return };
    let mut record = standin::WorkerRecord::new();
    let c = worker_cluster(&record).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["3", "4"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("printf: all exact"), "{text}");
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    let at = |line: &str| lines.iter().position(|l| *l == line).unwrap_or_else(|| panic!("no {line:?} in {text}"));
    let mut first: Vec<&str> = lines[at("before the launch") + 1..at("synchronized")].to_vec();
    first.sort_unstable();
    let mut want: Vec<String> =
        (0..3).flat_map(|b| (0..4).map(move |t| format!("kernel 1: block {b} thread {t}"))).collect();
    want.sort_unstable();
    assert_eq!(first, want, "{text}");
    assert!(text.contains("a vector add after the kernel printed: exact"), "{text}");
    let stream = &lines[at("a vector add after the kernel printed: exact") + 1..at("stream synchronized")];
    assert_eq!(stream, ["kernel 2: block 0 thread 0", "kernel 2: block 0 thread 1"], "{text}");
    assert_eq!(lines[at("printf: all exact") + 1..], ["kernel 3: block 0 thread 0"], "{text}");
    record.assert_none();
}

/// Context limits (`cudaDeviceSetLimit`, backend protocol 11): a thread's stack, the printf
/// buffer and the in-kernel heap set on the remote GPU's context and read back; a stack past
/// what a thread may have refused (`cudaErrorInvalidValue`), a heap past the session's memory
/// quota refused (`cudaErrorMemoryAllocation`: the quota counts the limits' reservations beyond
/// their defaults, here 7 KiB more stack for each of 270,336 resident threads, 1.80 GiB), each
/// with the old value kept; a 1 GiB heap then fits (the refused one is not counted); the
/// device's work goes on.
#[tokio::test(flavor = "multi_thread")]
async fn context_limits_are_set_on_the_remote_gpu_within_the_sessions_quota() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("limits", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |b| b.session_memory_mib = Some(4096)).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["3072"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("limits: all exact"), "{text}");
    assert!(text.contains("default stack 1024"), "{text}");
    assert!(text.contains("an 8 KiB stack: 8192") && text.contains("a 64 MiB heap: 67108864"), "{text}");
    assert!(text.contains("a 1 GiB stack: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("a heap past the quota: 2 (cudaErrorMemoryAllocation)"), "{text}");
    assert!(text.contains("a 1 GiB heap after the refusal: 1073741824"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    standin::assert_no_violations();
}

/// Thread block clusters (`tests/cuda/clusters.cu`, backend protocol 12): `cudaLaunchKernelEx`
/// with a cluster dimension runs the grid in clusters of the shape asked (each block sees its
/// rank in its cluster and the cluster's size), in one and two dimensions; the clusters the
/// device holds at once are the remote driver's answer (the stand-in's: 16 multiprocessors a
/// processing cluster, 32 blocks of 64 threads each: 1,024 clusters of 4); a cluster that does not
/// divide the grid and one of 16 blocks refused at the launch, then run once the kernel allows
/// non-portable sizes (backend protocol 13; 32 refused, 16 again once disallowed); threads launching in clusters
/// of their own sizes on their own streams; a launch in clusters captured into a graph, its
/// node's parameters changed; a cluster width required of the kernel, which its plain launches
/// take.
#[tokio::test(flavor = "multi_thread")]
async fn kernels_launch_in_thread_block_clusters_of_the_shape_asked() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("clusters", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["64"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("clusters: all exact"), "{text}");
    assert!(text.contains("cluster launch: 1"), "{text}");
    assert!(text.contains("clusters of 2 blocks exact") && text.contains("clusters of 2 x 2 blocks exact"), "{text}");
    // (16 x 32 blocks) / 4, in each of 132 / 16 = 8 processing clusters.
    assert!(text.contains("active clusters of 4: 1024; largest portable cluster: 8"), "{text}");
    assert!(text.contains("a cluster not dividing the grid: 1 (cudaErrorInvalidValue)"), "{text}");
    assert!(text.contains("a cluster of 16 blocks: 912 (cudaErrorInvalidClusterSize)"), "{text}");
    assert!(text.contains("clusters of 16 blocks, non-portable sizes allowed, exact"), "{text}");
    // 32 blocks of 64 threads a multiprocessor, 16 of them a processing cluster: 32 clusters
    // of 16 in each of 8.
    assert!(text.contains("active clusters of 16: 256; largest cluster: 16"), "{text}");
    assert!(text.contains("a cluster of 32 blocks: 912 (cudaErrorInvalidClusterSize)"), "{text}");
    assert!(text.contains("clusters of 16 blocks launched just before they were disallowed, exact"), "{text}");
    let again = "16 blocks once non-portable sizes are disallowed again: 912 (cudaErrorInvalidClusterSize)";
    assert!(text.contains(again), "{text}");
    assert!(text.contains("4 threads launching in clusters on their own streams exact"), "{text}");
    assert!(text.contains("a captured launch in clusters, its node's parameters changed exact"), "{text}");
    assert!(text.contains("a required cluster width of 4, launched with <<<>>> exact"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    standin::assert_no_violations();
}

/// Tensor maps (`tests/cuda/tensor_maps.cu`, backend protocol 13): the program takes
/// `cuTensorMapEncodeTiled` through `cudaGetDriverEntryPointByVersion`, the remote driver
/// encodes the map (the stand-in's own layout, which its fixture reads as a GPU's copy engine
/// reads NVIDIA's), and a kernel taking it as a `__grid_constant__` parameter copies the
/// tensor's boxes, edges zero- or NaN-filled as asked; `cuTensorMapReplaceAddress` points the
/// map at a second tensor, and a map of a null address at the first; an im2col map encodes; a stride the driver refuses, a tensor past
/// its allocation, host memory, a misaligned map and a map no encoding made are refused, and
/// the device goes on; threads encode and launch on their own streams.
#[tokio::test(flavor = "multi_thread")]
async fn kernels_copy_the_boxes_of_a_tensor_map_the_remote_driver_encoded() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("tensor_maps", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("tensor_maps: all exact"), "{text}");
    let has_line = |line: &str| text.lines().any(|l| l == line);
    for line in [
        "encode: 0",
        "replace address: 0",
        "a map of a null address: 0",
        "its address replaced: 0",
        "encode with NaN fill: 0",
        "an im2col map: 0",
    ] {
        assert!(has_line(line), "{line}: {text}");
    }
    assert!(text.contains("a 40 x 24 tensor copied in 16 x 16 boxes, its edges zero-filled exact"), "{text}");
    assert!(
        text.contains("the map's address replaced exact") && text.contains("edges filled with NaN exact"),
        "{text}"
    );
    for refused in [
        "a stride not a multiple of 16: 1",
        "a tensor past its allocation: 1",
        "a tensor in host memory: 1",
        "a map not 64-byte aligned: 1",
        "an address replaced in a map no encoding made: 1",
    ] {
        assert!(has_line(refused), "{refused}: {text}");
    }
    assert!(text.contains("a map encoded at a null address, then at the tensor's exact"), "{text}");
    assert!(text.contains("the device after the refusals exact"), "{text}");
    assert!(text.contains("4 threads encoding and launching on their own streams exact"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    standin::assert_no_violations();
}

/// CUDA arrays, texture and surface objects (`tests/cuda/textures.cu`, backend protocol 16):
/// the program's arrays live on the backend, written and read from pitched host rows, device
/// memory and another array; its kernels read them through texture objects (point sampling,
/// clamped and border addressing, linear filtering; a 3-D array; linear memory) and write them
/// through a surface object, as the stand-in's texture unit reads them; copies and kernels
/// queued on a stream keep their order; a copy into a 1-D array is captured into a graph; a
/// region past the array and a texture past its allocation are refused and the device goes on;
/// an array freed before its texture stays until the texture goes (the stand-in records a
/// violation if the backend destroys an array or frees memory an object still reads).
#[tokio::test(flavor = "multi_thread")]
async fn kernels_read_arrays_through_texture_and_surface_objects() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("textures", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("textures: all exact"), "{text}");
    for check in [
        "the array's descriptor",
        "a 37 x 23 float array written from pitched host rows and read back",
        "a 5 x 4 block at (3, 2) replaced",
        "the array written from device memory",
        "tex2D at the texels' centres",
        "tex2D moved by (-3, 2), clamped at the edges",
        "the texture's resource",
        "tex2D past the edge reads the border colour",
        "tex2D with linear filtering",
        "a surface doubling the array, copied to a second array",
        "the second array copied to device memory",
        "copies and a kernel queued on a stream",
        "a 9 x 6 x 5 array through cudaMemcpy3D and tex3D",
        "tex1Dfetch over linear device memory",
        "a copy into a 1-D array captured into a graph",
        "the device after the refusals",
    ] {
        assert!(text.lines().any(|l| l == format!("{check} exact")), "{check}: {text}");
    }
    // cudaErrorInvalidValue (1) for both refusals.
    assert!(text.lines().any(|l| l == "a region past the array's row: 1"), "{text}");
    assert!(text.lines().any(|l| l == "a texture past its allocation: 1"), "{text}");
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    standin::assert_no_violations();
}

/// Virtual memory management (`tests/cuda/vmm.cu`, backend protocol 14), as PyTorch's
/// expandable segments use it: a reserved range with pieces of physical memory mapped side by
/// side, a copy and a kernel across the boundary, growth in place, a piece mapped elsewhere
/// keeping its bytes, a handle retained from an address; a mapping over mapped bytes, an unmap
/// of nothing, `cudaFree` of a range and a copy into unmapped bytes refused, the device going
/// on; threads growing ranges of their own. The stand-in keeps physical memory in memory files
/// mapped into the range's address space, so the pieces are one run of bytes as on a GPU.
#[tokio::test(flavor = "multi_thread")]
async fn memory_grows_in_place_through_ranges_the_remote_driver_maps() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vmm", dir.path()) else { return };
    // Session workers: a mapping is its process's, so the backend serves ranges only to a
    // session with a process of its own.
    let mut record = standin::WorkerRecord::new();
    let c = worker_cluster(&record).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("vmm: all exact"), "{text}");
    let has_line = |line: &str| text.lines().any(|l| l == line);
    for line in [
        "virtual memory management: 1",
        "granularity: 2097152",
        "a copy and a kernel across two pieces of physical memory exact",
        "the segment grown in place by a third piece exact",
        "access: 3",
        "retained the second piece: 1",
        "its properties: type 1 on device 0",
        "a piece mapped elsewhere keeps its bytes exact",
        "a piece mapped back where it was unmapped keeps its bytes exact",
        "a mapping over mapped bytes refused: 1",
        "an unmap of nothing refused: 1",
        "cudaFree of a range refused: 1",
        "a copy into unmapped bytes refused: 1",
        "the device after the refusals exact",
        "released and freed: 0",
        "4 threads growing ranges of their own exact",
    ] {
        assert!(has_line(line), "{line}: {text}");
    }
    assert!(!text.contains("not supported"), "a call was refused: {text}");
    // The workers' stand-ins saw every unmap before its release and its range's free.
    assert!(standin::worker_gone(&c.backends[0].backend, &[]).await, "the session and its worker ended");
    record.assert_none();
}

/// A backend whose sessions share its process (`isolation = "context"`) serves no ranges: the
/// device says so (`CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` 0, asked of the
/// backend), so that a program that reads it (NCCL, PyTorch) allocates otherwise.
#[tokio::test(flavor = "multi_thread")]
async fn a_device_whose_sessions_share_a_process_says_it_has_no_virtual_memory_management() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vmm", dir.path()) else { return };
    let c = cuda_cluster_timed(1, |_| {}, |_| {}).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.lines().any(|l| l == "virtual memory management: 0"), "{text}");
    assert!(text.contains("vmm: not served here"), "{text}");
    standin::assert_no_violations();
}
