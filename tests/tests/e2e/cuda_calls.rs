//! Driver calls programs make around their kernels (issue 48), run through the shim against
//! stand-in backends: batches of copies (`cudaMemcpyBatchAsync`, as key-value cache offload
//! makes them) and the settings and queries CUDA answers without running anything (the
//! profiler, device flags, bank sizes, a stream's device and attributes, a kernel's parameters,
//! module and library), user objects handed to graphs, graphs built with the generic node
//! API and read and changed as tools do, and a module's kernels listed. Each must be served,
//! not answered "not supported".

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

use ac_tests::cuda;

use crate::cuda_shim::{cuda_cluster, run, said, worker_cluster};
use ac_tests::TestCluster;

/// The shim's line for a call it does not serve.
const NOT_SERVED: &str = "not supported on remote accelerators";

/// Runs `tests/cuda/<name>.cu` through the shim as a job's process with `acpn` accelerators
/// (on one stand-in backend of two devices), and checks that it ends `<name>: all exact`, says
/// each of `lines`, meets no call the shim does not serve, and leaves the stand-in no call out
/// of CUDA's contract. Without nvcc (and not required) it checks nothing.
async fn assert_program_says(name: &str, acpn: u32, lines: &[&str]) {
    let _turn = standin::exclusive().await;
    assert_program_says_on(&cuda_cluster(1).await, (name, &["100000"]), acpn, lines).await;
    standin::assert_no_violations();
}

/// [`assert_program_says`]'s run and checks of program `name` run with `args`, on cluster `c`
/// (the stand-in's violations are the caller's to check: in this process, or its session
/// workers').
async fn assert_program_says_on(c: &TestCluster, program: (&str, &[&str]), acpn: u32, lines: &[&str]) {
    assert_program_says_with(c, program, &[], acpn, lines).await;
}

/// [`assert_program_says_on`] with `env` set for the program too.
async fn assert_program_says_with(
    c: &TestCluster,
    (name, args): (&str, &[&str]),
    env: &[(&str, &str)],
    acpn: u32,
    lines: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build(name, dir.path()) else { return };
    let shim = cuda::shim_dir(dir.path());
    let acpn = acpn.to_string();
    let out = run(c, &shim, &exe, args, &[&[("ARM_ACPN", acpn.as_str())][..], env].concat()).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains(&format!("{name}: all exact")), "{text}");
    for line in lines {
        assert!(text.contains(line), "{line}: {text}");
    }
    assert!(!text.contains(NOT_SERVED), "{text}");
}

/// A batch of four copies under three sets of attributes (host to device from `malloc`'d
/// memory, a stack array read during the call and overwritten as soon as it returns, device to
/// host and device to device in stream order after a kernel) lands whole; a copy with
/// attributes too; malformed batches, and one with a copy past its allocation, are refused
/// with nothing of them done (CUDA 12.8's form names the copy refused).
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_copies_lands_whole_and_a_malformed_one_not_at_all() {
    let lines = [
        "device to host after the kernel exact",
        "host to device exact",
        "device to device exact",
        "a stack source overwritten after the call exact",
        "a copy with attributes exact",
        "attributes not starting at copy 0: 1 (cudaErrorInvalidValue)",
        "attribute starts not increasing: 1 (cudaErrorInvalidValue)",
        "no source access order: 1 (cudaErrorInvalidValue)",
        "more attributes than copies: 1 (cudaErrorInvalidValue)",
        "the legacy default stream: 1 (cudaErrorInvalidValue)",
        "a copy past its allocation: 1 (cudaErrorInvalidValue)",
        "the copy past its allocation, by CUDA 12.8's form: 1, copy 1",
        "nothing of a refused batch exact",
        "the good copy of a batch refused for a bad one: not done",
    ];
    assert_program_says("batch_copies", 1, &lines).await;
}

/// The profiler starts and stops; device and context flags read back what was set, and a
/// schedule of spin and yield at once is refused; a bank size is taken (and stays four bytes
/// wide, as on every device since Volta); each of two devices' streams names its own device;
/// a stream's access policy window and synchronization policy read back, copied to another
/// stream, and a bad window or a launch's attribute is refused; a kernel's parameter count and
/// layout, library, module and loading state are CUDA's; the persisting L2 lines reset; no
/// atomic operation is native over the host's link or between two devices (CUDA 13's
/// queries), an unknown operation and a device's link to itself refused; and a kernel after
/// them all is exact.
#[tokio::test(flavor = "multi_thread")]
async fn settings_and_queries_around_the_work_are_answered_as_cuda_answers_them() {
    let lines = [
        "the profiler started and stopped exact",
        "the device's flags read back exact",
        "spin and yield at once: 1 (cudaErrorInvalidValue)",
        "the context's flags set by the driver read back exact",
        "an unknown context flag: 1",
        "the bank size after asking for eight bytes: 1",
        "a bank size of 3: 1 (cudaErrorInvalidValue)",
        "a stream's device, 0 exact",
        "a stream's device, 1 exact",
        "an access policy window and a synchronization policy, set and copied exact",
        "a hit ratio of 1.5: 1 (cudaErrorInvalidValue)",
        "persisting misses: 1 (cudaErrorInvalidValue)",
        "a launch's attribute on a stream: 1 (cudaErrorInvalidValue)",
        "the second parameter at offset 8, 4 bytes exact",
        "the kernel's library holds it by name exact",
        "the function's module holds it by name exact",
        "an untouched kernel before cuFuncLoad: 0",
        "the function loaded exact",
        "the kernel's parameter count, 3 exact",
        "the function's parameter count, 3 exact",
        "the persisting L2 lines reset exact",
        "host atomics: 0 0 0, native 0",
        "an unknown atomic operation: 1",
        "peer atomics: 0 0 0",
        "a device's link to itself: 101",
        "a kernel after them all exact",
    ];
    assert_program_says("settings", 2, &lines).await;
}

/// A user object moved into a capturing stream's graph outlives the capture and the graph
/// while an executable graph of it lives, and its destructor runs once, after that graph's
/// launches, when it is destroyed; a clone and a child graph node hold references of their
/// own, the program's releases count, and a graph releasing more than it holds is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_object_lives_while_a_graph_holds_it_and_is_destroyed_once() {
    let lines = [
        "the object outlives its graph while an executable graph of it lives exact",
        "3 launches of the captured graph exact",
        "its destructor ran once, after its executable graph was destroyed exact",
        "its destructor ran after the 3 launches' host functions exact",
        "a clone holds references of its own exact",
        "a graph releasing more than it holds: 1 (cudaErrorInvalidValue)",
        "an object without its flag: 1 (cudaErrorInvalidValue)",
        "still held after the refusals exact",
        "its destructor ran once, when the clone let it go exact",
        "an object of a child graph held by its node exact",
        "its destructor ran once, when the parent graph went exact",
    ];
    assert_program_says("user_objects", 1, &lines).await;
}

/// A graph built with `cudaGraphAddNode` alone (a copy, a kernel, a memset, a host function, a
/// child graph built so too, an event record) launches twice exactly; a kernel node changed in
/// the graph reaches the next instantiation, and changed in one executable graph its next
/// launch alone; the driver reads a memset node's parameters back; a copy node with flags is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_graph_built_with_the_generic_node_api_runs_and_changes_as_a_typed_one() {
    let lines = [
        "copy, kernel, memset, host, child graph and event record nodes launched twice exact",
        "a kernel node changed in the graph and in one executable graph exact",
        "the memset node's parameters read back exact",
        "a copy node with flags: 1",
        "the same copy node without: 0",
    ];
    assert_program_says("graph_nodes", 1, &lines).await;
}

/// A graph's edges and a node's dependents read back with their default edge data; an edge
/// removed (twice: the second refused) and a node destroyed, and the rest runs; a clone's node
/// found from the original's; the ids tools name graphs and nodes by and the DOT file naming
/// them; a child graph node's own graph changed through the node (the program's graph stays as
/// it was); an executable graph's child graph replaced by one of the same shape and not by one
/// of another; a capture into the program's graph after one of its nodes; an executable
/// graph's flags; a kernel node's launch attributes (a window read back, copied to another
/// node and kept by a clone, a bad one refused; two cooperative nodes still exact).
#[tokio::test(flavor = "multi_thread")]
async fn a_graphs_shape_is_read_and_changed_as_cuda_reads_and_changes_it() {
    let lines = [
        "three edges with their default data exact",
        "two edges in a room of two exact",
        "adding an edge that is there: 1",
        "the memset's dependents, the kernel and the empty node exact",
        "removing an edge that is not there: 1",
        "an edge removed and a node destroyed, the rest run exact",
        "the clone's kernel node found from the original's exact",
        "a node of the clone in the clone: 1",
        "graph and node ids, and the node's graph exact",
        "the graph written as a DOT file exact",
        "a child graph changed through its node exact",
        "the program's child graph unchanged exact",
        "a child graph of another shape: 1",
        "a child graph with other edges: 1",
        "a memory node in a node's graph: 1",
        "an executable graph's child graph replaced exact",
        "a child graph node's parameters read back exact",
        "a graph moved into a node runs there exact",
        "a moved graph instantiated alone: 1",
        "a capture into the program's graph, after its node exact",
        "a synchronization in the capture: 900",
        "its end: 901",
        "the program's graph after the failed capture: 0",
        "the executable graph's flags read back exact",
        "a kernel node's access policy window read back exact",
        "a kernel node's attributes copied to another exact",
        "a clone's kernel node keeps its window exact",
        "a window with a hit ratio of 2: 1",
        "two cooperative kernel nodes of a few blocks exact",
    ];
    assert_program_says("graph_topology", 1, &lines).await;
}

/// A PTX image of two kernels, loaded from a file as a library, from memory as a library and as
/// a module, lists both kernels by name each time (`cudaLibraryGetKernelCount`, as PyTorch
/// imports it, `cudaLibraryEnumerateKernels`, `cuModuleEnumerateFunctions`: backend protocol
/// 20), a listed kernel is the one a lookup by its name gives, and a file that is not there is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_modules_and_a_librarys_kernels_are_listed_by_name() {
    let lines = [
        "a library loaded from a file lists its two kernels exact",
        "a library loaded from memory lists its two kernels exact",
        "one kernel in a room of one exact",
        "a library file that is not there: 301",
        "a module lists its two kernels exact",
        "a listed kernel is the one looked up by its name exact",
    ];
    assert_program_says("module_kernels", 1, &lines).await;
}

/// The driver API's older names, which programs written for CUDA 2.0 to 11 call, and CUDA
/// 12.5's context-wide events, are served: a kernel launched by CUDA 2.0's parameter, shape and
/// grid calls runs on the grid asked (a lone launch one block; a grid's height is the unit
/// tests'), CUDA 2.0's context stack and destroy calls and CUDA 10's graph
/// instantiation and update work, the legacy device properties are the device's attributes, a
/// stream's context comes with no green one, a context's event stands for its work, and
/// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` is set on device memory while no other attribute may be.
#[tokio::test(flavor = "multi_thread")]
async fn the_driver_apis_older_names_are_served() {
    let lines = [
        "setting a pointer's context: 1",
        "cuLaunchGrid scaled every element once exact",
        "cuLaunchGridAsync scaled every element on the stream exact",
        "cuLaunch ran one block exact",
        "CUDA 2.0's pop and push gave the context back exact",
        "CUDA 2.0's stream and event destroyed exact",
        "CUDA 10's update allowed exact",
        "CUDA 10's graph ran, then its update exact",
        "legacy properties: 1024 threads a block, warp 32, 49152 bytes shared",
        "cuDeviceGetProperties is the device's attributes exact",
        "cuStreamGetCtx_v2 gave the stream's context and no green one exact",
        "the context's event stood for its work exact",
        "the context's event timed the work after it: 0",
    ];
    assert_program_says("legacy_driver", 1, &lines).await;
}

/// Device code linked at run time (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`,
/// `cuLinkComplete`), by the device's driver (the stand-in's linker): a kernel calling another
/// input's function runs exact, before and after its link state is destroyed, and from two
/// threads linking at once, and with the device runtime library (whose compressed images the
/// stand-in reads nothing of); the logs, verbosity and wall time asked for come back; a
/// missing function and malformed inputs are refused, an object that is not one and a library
/// member past its end where they are added, the stand-in seeing neither.
#[tokio::test(flavor = "multi_thread")]
async fn device_code_linked_at_run_time_runs_and_a_bad_link_is_refused() {
    let _turn = standin::exclusive().await;
    assert_link_says(&cuda_cluster(1).await).await;
    standin::assert_no_violations();
}

/// Runs `link.cu` with the device runtime library on cluster `c`, and checks it says [`LINK_LINES`].
async fn assert_link_says(c: &TestCluster) {
    let Some(library) = cuda::device_runtime_library() else {
        return ac_tests::skip("AC_CUDA_SHIM_REQUIRED", "no libcudadevrt.a beside nvcc");
    };
    assert_program_says_on(c, ("link", &[library.to_str().unwrap()]), 1, &LINK_LINES).await;
}

/// What `link.cu` says through the shim.
const LINK_LINES: [&str; 22] = [
    "two inputs linked exact",
    "the wall time written back exact",
    "the verbose info log written back exact",
    "an empty error log exact",
    "the linked kernel calling the other input's function exact",
    "the module after its link state is destroyed exact",
    "two threads linking at once exact",
    "an input's own verbosity: info log written",
    "a link missing a function refused, the error log naming it exact",
    "an input's own target: 1",
    "an input type cuda.h does not define: 1",
    "an input of no bytes: 1",
    "a file that is not there: 301",
    "the info log of a refused link: written",
    "a fallback strategy for a link: 1",
    "a link with the device runtime library exact",
    "an object that is PTX: 200",
    "its reason in the error log: written",
    "a library member past its end: 200",
    "a module calling a function it does not define refused, its error log naming it exact",
    "a module that loads, its error log empty exact",
    "the wall time of a load written back exact",
];

/// The same link through the backend's session workers (a GPU's default), whose driver is the
/// stand-in: the worker's call carries the inputs and its reply the image; no worker saw a call
/// out of CUDA's contract.
#[tokio::test(flavor = "multi_thread")]
async fn device_code_is_linked_through_a_session_worker() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let c = worker_cluster(&record).await;
    assert_link_says(&c).await;
    record.assert_none();
}

/// The same listing through the backend's session workers (a GPU's default), whose driver is the
/// stand-in: the worker's call and reply carry the names; no worker saw a call out of CUDA's
/// contract.
#[tokio::test(flavor = "multi_thread")]
async fn a_modules_kernels_are_listed_through_a_session_worker() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let c = worker_cluster(&record).await;
    let lines = ["a library loaded from memory lists its two kernels exact", "a module lists its two kernels exact"];
    assert_program_says_on(&c, ("module_kernels", &["100000"]), 1, &lines).await;
    record.assert_none();
}

/// The driver's error log (CUDA 12.9's `cuLogs*`, which the CUDA 13 runtime also reads): a
/// call refused with a reason (a dump into a NULL buffer, NVIDIA's own example) is logged in
/// NVIDIA's form and heard at once by the program's callback; a dump from an iterator holds it
/// and advances the iterator, a buffer too small for any message is refused with a size of 0, a
/// dump to a file holds it, the runtime's `cudaLogsDumpToMemory` holds it, and an unregistered
/// callback hears no more. With `CUDA_LOG_FILE` naming a file, each message is written there
/// as it is made, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_calls_reason_is_in_the_drivers_log() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let (file, written) = (dir.path().join("dumped.log"), dir.path().join("written.log"));
    let lines = [
        "a dump into NULL refused exact",
        "][CUDA][E][cuLogsDumpToMemory] buffer cannot be NULL",
        "the callback heard the refusal in NVIDIA's form exact",
        "the dump from the iterator holds the refusal exact",
        "the advanced iterator has nothing new exact",
        "a buffer too small for any message refused exact",
        "the dump to a file holds the refusal exact",
        "the runtime's dump holds the driver's messages exact",
        "an unregistered callback hears no more exact",
    ];
    let program = ("logs", &[file.to_str().unwrap()][..]);
    let env = [("CUDA_LOG_FILE", written.to_str().unwrap())];
    assert_program_says_with(&cuda_cluster(1).await, program, &env, 1, &lines).await;
    standin::assert_no_violations();
    if cuda::nvcc().is_some() {
        let written = std::fs::read_to_string(&written).unwrap();
        let refusals: Vec<&str> =
            written.lines().filter(|l| l.ends_with("[cuLogsDumpToMemory] buffer cannot be NULL")).collect();
        // Twice refused: the first dump into NULL, and the one after the callback went.
        assert_eq!(refusals.len(), 2, "{written}");
        assert!(written.lines().all(|l| l.starts_with('[') && l.contains("][CUDA][")), "{written}");
    }
}
