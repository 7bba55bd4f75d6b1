//! CUDA IPC between the processes of one job through the shim (issue 48, backend protocol 18):
//! `tests/cuda/ipc.cu` spawns processes of its own job that open its memory and events by their
//! handles; `tests/cuda/shareable.cu` shares physical memory by POSIX descriptors likewise
//! (protocol 19). The PyTorch cases (`torch.multiprocessing`) are in `cuda_frameworks`.

use crate::cuda_shim::{cuda_cluster, run, said, worker_cluster};
use crate::device_contract::standin_workers_backend_with;
use crate::standin;

use ac_frontend::ErrorKind;
use ac_tests::{cuda, TestBackend, TestCluster};

/// Runs `program` (`tests/cuda/<program>.cu`, built here) as a process of job `j1` on a cluster
/// whose backend runs each session in a worker of its own (the stand-in as their driver), so
/// that the processes it spawns are the same job's (`ARM_JOB_ID` and its credential,
/// inherited): the cluster and what the program said, or `None` without nvcc.
async fn run_in_a_job_on_workers(
    program: &str,
    record: &standin::WorkerRecord,
) -> Option<(TestCluster, std::process::Output, String)> {
    let dir = tempfile::tempdir().unwrap();
    let exe = cuda::build(program, dir.path())?;
    let c = worker_cluster(record).await;
    let credential = c.submit("j1", &["n1"], 1).await;
    let shim = cuda::shim_dir(dir.path());
    // A job's processes, not an ad-hoc job (ARM_ACPN) of each.
    let job = [("ARM_JOB_ID", "j1"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let out = run(&c, &shim, &exe, &[], &job).await;
    let text = said(&out);
    Some((c, out, text))
}

/// Every process of job `j1` ended its session, the job holds its one static accelerator until
/// it ends and nothing after, the sessions' workers ended, and none of their stand-ins saw a
/// call out of CUDA's contract.
async fn assert_the_job_leaves_nothing(c: &TestCluster, record: &mut standin::WorkerRecord) {
    let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    assert_eq!(c.arm.held_accelerators(), 1, "the job's static accelerator alone, while it runs");
    c.admin().await.request(ac_proto::arm::Request::JobEnd { id: "j1".into() }).await.expect("the job ends");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the job ended");
    assert!(standin::worker_gone(&c.backends[0].backend, &[]).await, "the sessions' workers ended");
    record.assert_none();
    standin::assert_no_violations();
}

/// CUDA IPC between processes of one job (`tests/cuda/ipc.cu`): a process exports device memory
/// and an interprocess event by their 64-byte handles, and processes it spawns (the same job's:
/// `ARM_JOB_ID` and its credential, inherited) open them. A child opening the memory twice gets
/// one address, orders its kernel after the parent's by the event, and its writes are what the
/// parent reads back; opened memory is not the child's to free, each open takes one close. The
/// memory outlives the exporter's `cudaFree` while another process holds it open, and once freed
/// and closed everywhere its handle opens nothing. The exporter cannot open its own handle, and
/// an event created without `cudaEventInterprocess` has no handle. None of these calls is the
/// shim's "not supported"; the job's processes leave no session behind. The backend runs each
/// session in a worker of its own (a GPU's default), whose stand-ins open each other's memory
/// through the driver's IPC handles, and none of them saw a call out of CUDA's contract.
#[tokio::test(flavor = "multi_thread")]
async fn processes_of_one_job_share_device_memory_and_events_through_ipc_handles() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let Some((c, out, text)) = run_in_a_job_on_workers("ipc", &record).await else { return };
    assert!(out.status.success(), "{text}");
    for line in [
        "ipc: 4096 elements",
        // NVIDIA's driver's code for a handle in its own process (the runtime names it so).
        "own handle refused: 201 (cudaErrorDeviceUninitialized)",
        "plain event refused: 1 (cudaErrorInvalidValue)",
        "reopened at the same address",
        "child: one added exact",
        "free of opened memory refused: 1 (cudaErrorInvalidValue)",
        "stream-ordered free of opened memory refused: 1 (cudaErrorInvalidValue)",
        "third close refused: 1 (cudaErrorInvalidValue)",
        "ipc: the child's writes seen exact",
        "child: memory kept after the parent freed it exact",
        "late open refused: 1 (cudaErrorInvalidValue)",
        "ipc: done",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // Refused for what they are, each saying why, not because IPC is unserved.
    for why in [
        "cuIpcOpenMemHandle: an IPC handle cannot be opened in the process that made it",
        "cuMemFree: memory opened by cuIpcOpenMemHandle is closed by cuIpcCloseMemHandle",
        "cuIpcOpenMemHandle: accelerator error (InvalidBuffer): no memory is shared by that handle on this backend",
    ] {
        assert!(text.contains(why), "missing `{why}`:\n{text}");
    }
    assert!(!text.contains("not supported") && !text.contains("cudaErrorNotSupported"), "{text}");
    assert!(!text.contains("FAILED"), "{text}");
    assert_the_job_leaves_nothing(&c, &mut record).await;
}

/// A backend whose sessions share its process (`isolation = "context"`) cannot open one
/// session's allocation in another's context: `cudaIpcOpenMemHandle` answers "not supported"
/// with the backend's reason, and the job's processes go on.
#[tokio::test(flavor = "multi_thread")]
async fn ipc_handles_are_refused_with_a_reason_where_sessions_share_a_process() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("ipc", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let credential = c.submit("j1", &["n1"], 1).await;
    let shim = cuda::shim_dir(dir.path());
    let job = [("ARM_JOB_ID", "j1"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let out = run(&c, &shim, &exe, &[], &job).await;
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess): 801"), "{text}");
    assert!(text.contains("needs session workers (isolation = \"process\""), "{text}");
    let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    standin::assert_no_violations();
}

/// Through the SDK (`Accelerator::export_memory`, `import_memory`), two sessions of one backend
/// share an allocation over the wire: on the CPU device the second session's buffer is the same
/// memory at the same address, each sees the other's writes, and it outlives the owner's free.
/// A backend of protocol 17 is not asked: the SDK refuses by name, and the session goes on; nor
/// is one of protocol 18 for physical memory (protocol 19).
#[tokio::test(flavor = "multi_thread")]
async fn two_sessions_share_an_allocation_through_the_sdk_and_an_older_backend_is_not_asked() {
    let backend = TestBackend::start(64).await;
    let (owner, other) = (backend.connect().await, backend.connect().await);
    let (buffer, address) = owner.alloc_addressed(64).await.expect("an allocation");
    buffer.copy_from_host(&[5u8; 64]).await.expect("written");
    let secret = owner.export_memory(&buffer).await.expect("shared");
    let (opened, at, size) = other.import_memory(secret).await.expect("opened");
    assert_eq!((at, size), (address, 64), "the same memory, whole");
    assert_eq!(opened.to_vec().await.unwrap(), [5u8; 64]);
    opened.copy_from_host(&[9u8; 64]).await.expect("written through the other session");
    assert_eq!(buffer.to_vec().await.unwrap(), [9u8; 64], "the owner sees the other's writes");
    drop(buffer);
    owner.synchronize().await.expect("the free is done");
    assert_eq!(opened.to_vec().await.unwrap(), [9u8; 64], "kept while the other holds it");
    let late = backend.connect().await.import_memory(secret).await.expect_err("nothing is shared by it now");
    assert!(late.to_string().contains("no memory is shared by that handle"), "{late}");

    let older = TestBackend::start_with(|c| c.only_protocol = Some(17)).await;
    let acc = older.connect().await;
    let (buffer, _) = acc.alloc_addressed(16).await.expect("an allocation");
    let refused = acc.export_memory(&buffer).await.expect_err("protocol 17 shares nothing");
    assert!(refused.to_string().contains("needs backend protocol 18"), "{refused}");
    let refused = acc.import_memory([1; 16]).await.expect_err("protocol 17 opens nothing");
    assert!(refused.to_string().contains("needs backend protocol 18"), "{refused}");
    assert_eq!(buffer.to_vec().await.expect("the session goes on"), [0u8; 16]);

    // Physical memory (protocol 19) likewise: a backend of 18 is not asked.
    let older = TestBackend::start_with(|c| c.only_protocol = Some(18)).await;
    let acc = older.connect().await;
    let refused = acc.import_physical([1; 16]).await.expect_err("protocol 18 imports no physical memory");
    assert!(refused.to_string().contains("needs backend protocol 19"), "{refused}");
    let (buffer, _) = acc.alloc_addressed(16).await.expect("the session goes on");
    assert_eq!(buffer.to_vec().await.expect("and copies"), [0u8; 16]);
}

/// Physical memory shared between processes of one job by POSIX descriptors
/// (`tests/cuda/shareable.cu`: `cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`,
/// as PyTorch's expandable segments and NCCL share memory): the parent exports physical memory
/// it mapped; it imports the descriptor itself (the same bytes through a second mapping); a
/// child it spawns imports it (the parent's properties, the parent's bytes) and writes, and the
/// parent reads the child's writes through its own mapping; a second child's import keeps the
/// memory after the parent has unmapped and released all of its own. Memory created without the
/// descriptor type, and a descriptor that is not a handle, are refused with their reasons. The
/// backend runs each session in a worker of its own, whose stand-ins pass the driver's
/// descriptors through the backend; every session and worker ends, and no stand-in saw a call
/// out of CUDA's contract.
#[tokio::test(flavor = "multi_thread")]
async fn processes_of_one_job_share_physical_memory_through_posix_descriptors() {
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let Some((c, out, text)) = run_in_a_job_on_workers("shareable", &record).await else { return };
    assert!(out.status.success(), "{text}");
    for line in [
        "shareable: 524288 elements",
        "POSIX descriptor handles: 1",
        "shareable: exportable memory mapped and written exact",
        "export without a handle type refused: 1 (CUDA_ERROR_INVALID_VALUE)",
        "imported in its own process: same bytes exact",
        "child: properties exact",
        "child: the parent's bytes exact",
        "shareable: the child's writes seen exact",
        "child: memory kept after the parent released it exact",
        "a foreign descriptor refused: 1 (CUDA_ERROR_INVALID_VALUE)",
        "shareable: no descriptor left open exact",
        "shareable: done",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    for why in [
        "cuMemExportToShareableHandle: the physical memory was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
        "cuMemImportFromShareableHandle: descriptor",
    ] {
        assert!(text.contains(why), "missing `{why}`:\n{text}");
    }
    assert!(!text.contains("not supported") && !text.contains("FAILED"), "{text}");
    assert_the_job_leaves_nothing(&c, &mut record).await;
}

/// Physical memory one session shares with another (protocol 19: `export_physical`,
/// `import_physical`, through the stand-ins' descriptors between two session workers) is the
/// same memory in both: what one writes through its mapping the other reads through its own.
/// It counts against its creator's quota alone (the importer may still create its own quota's
/// worth) and stays counted after the creator has let go of all of its own, until the import
/// goes too; imported twice it is one import, of the one descriptor the backend keeps while the
/// memory lives. An import outlives its creator's session and worker. A session cannot import
/// what it shared itself, nor share what it imported.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_shared_physical_memory_counts_against_its_creator_until_every_import_goes() {
    const GRAN: u64 = 2 << 20;
    let _turn = standin::exclusive().await;
    let mut record = standin::WorkerRecord::new();
    let backend = standin_workers_backend_with(&record, &[], |c| c.session_memory_mib = Some(4)).await;
    let (owner, other) = (backend.connect().await, backend.connect().await);
    let created = owner.create_physical(GRAN).await.unwrap();
    let secret = owner.export_physical(&created).await.unwrap();
    assert_eq!(owner.export_physical(&created).await.unwrap(), secret, "one secret for one memory");
    let imported = other.import_physical(secret).await.unwrap();
    assert_eq!(imported.len(), GRAN);
    let again = other.import_physical(secret).await.unwrap();
    // The driver exported it once, for both imports, and the importer imported it once.
    assert_eq!(standin::physical_files(std::process::id()), 1, "the backend keeps the descriptor it exported");
    let in_workers: usize = standin::session_workers().into_iter().map(standin::physical_files).sum();
    assert_eq!(in_workers, 2, "the memory in its creator's worker and one import in the importer's");

    let (mine, _) = owner.reserve_range(GRAN, 0).await.unwrap();
    owner.map_physical(&mine, 0, GRAN, &created).await.unwrap();
    let pattern: Vec<u8> = (0..GRAN).map(|i| (i % 251) as u8).collect();
    mine.copy_from_host(&pattern).await.unwrap();
    let (theirs, _) = other.reserve_range(GRAN, 0).await.unwrap();
    other.map_physical(&theirs, 0, GRAN, &again).await.unwrap();
    assert!(theirs.to_vec().await.unwrap() == pattern, "the importer reads the creator's writes");

    // The importer's quota is its own: its imports cost it nothing.
    let own = (other.create_physical(GRAN).await.unwrap(), other.create_physical(GRAN).await.unwrap());
    drop(own);
    let refusals = [
        (owner.import_physical(secret).await.unwrap_err(), ErrorKind::InvalidArgument),
        (other.export_physical(&imported).await.unwrap_err(), ErrorKind::InvalidBuffer),
    ];
    for (refused, kind) in refusals {
        assert_eq!(refused.kind(), Some(kind), "{refused}");
    }

    // The creator lets go of all of its own: the memory stays counted against its quota.
    owner.unmap_range(&mine, 0, GRAN).await.unwrap();
    drop((created, mine));
    let first = owner.create_physical(GRAN).await.unwrap();
    let over = owner.create_physical(GRAN).await.unwrap_err();
    assert_eq!(over.kind(), Some(ErrorKind::OutOfMemory), "still counted: {over}");
    assert!(theirs.to_vec().await.unwrap() == pattern, "and still there for the importer");
    owner.synchronize().await.unwrap(); // its release is done
    assert_eq!(standin::physical_files(std::process::id()), 0, "the descriptor went with the creator's memory");
    // Then the importer does, both of its ids and its mapping.
    other.unmap_range(&theirs, 0, GRAN).await.unwrap();
    drop((imported, again));
    other.synchronize().await.unwrap(); // its releases are done
    let second = owner.create_physical(GRAN).await.unwrap();

    // An import outlives its creator's session and worker: the importer's driver holds it.
    let secret = owner.export_physical(&second).await.unwrap();
    let last = other.import_physical(secret).await.unwrap();
    let (ours, _) = owner.reserve_range(GRAN, 0).await.unwrap();
    owner.map_physical(&ours, 0, GRAN, &second).await.unwrap();
    let reversed: Vec<u8> = pattern.iter().rev().copied().collect();
    ours.copy_from_host(&reversed).await.unwrap();
    drop((first, second, ours, owner));
    let limit = std::time::Duration::from_secs(10);
    assert!(ac_tests::eventually(limit, || async { backend.backend.sessions() == 1 }).await, "the creator's ended");
    let one_worker = || async { standin::session_workers().len() == 1 };
    assert!(ac_tests::eventually(limit, one_worker).await, "the creator's worker exited");
    other.map_physical(&theirs, 0, GRAN, &last).await.unwrap();
    assert!(theirs.to_vec().await.unwrap() == reversed, "the import still reads the creator's writes");

    drop((last, theirs, other));
    assert!(standin::worker_gone(&backend.backend, &[]).await, "the sessions and their workers ended");
    standin::assert_no_violations();
    record.assert_none();
}
