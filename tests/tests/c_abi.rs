//! The C ABI (`libac`) from C, C++, Fortran and MPI programs: each is compiled here with the
//! system's compilers against `ac-capi/include` and `target/release/libac.so`, and run as its own
//! process against a real manager and backends. `./scripts/test` installs the compilers (gcc,
//! g++, gfortran, Open MPI) and builds libac with MPI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use ac_proto::arm::{Request, Response};
use ac_tests::{eventually, workspace_binary, TestCluster};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

/// Where libac is built (`cargo build -p ac-capi --release --features mpi`).
fn lib_dir() -> PathBuf {
    let dir = workspace_binary("ac-test-client").parent().expect("target dir").to_path_buf();
    assert!(dir.join("libac.so").exists(), "libac.so is not built: cargo build -p ac-capi --release --features mpi");
    dir
}

/// Compiles `sources` with `compiler` into `out` (in a fresh directory), linked with libac.
fn compile(compiler: &str, sources: &[PathBuf], flags: &[&str], out: &Path) {
    let lib = lib_dir();
    let output = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(repo().join("ac-capi/include"))
        .args(sources)
        .arg("-L")
        .arg(&lib)
        .arg("-lac")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out)
        .current_dir(out.parent().expect("build dir"))
        .output()
        .unwrap_or_else(|e| panic!("{compiler} runs (./scripts/test installs it): {e}"));
    assert!(output.status.success(), "{compiler} failed:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// Runs `program` as a job's process: `ARM_ACPN` (ad hoc) unless `env` names a job.
fn run(c: &TestCluster, program: &mut Command, env: &[(&str, &str)]) -> Output {
    program
        .env("ARM_ADDR", c.arm.addr().to_string())
        .env("ARM_CA_CERT", c.arm.ca_cert())
        .env("ARM_NODE", "n1")
        .env("ARM_INIT_TIMEOUT_S", "20")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    for (k, v) in env {
        program.env(k, v);
    }
    program.output().expect("the program starts")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Runs `program` as [`run`] does and returns what it printed; it must succeed.
fn succeeds(c: &TestCluster, program: &mut Command, env: &[(&str, &str)]) -> String {
    let output = run(c, program, env);
    let out = text(&output);
    assert!(output.status.success(), "{program:?} failed:\n{out}");
    out
}

fn ad_hoc() -> [(&'static str, &'static str); 1] {
    [("ARM_ACPN", "1")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_runs_saxpy_on_an_accelerator_it_got_with_ac_get() {
    let c = TestCluster::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("saxpy");
    compile("gcc", &[repo().join("examples/c/saxpy.c")], &["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"], &exe);
    let out = succeeds(&c, Command::new(&exe).arg("300000"), &ad_hoc());
    assert!(out.contains("AC_Init: 1 static accelerator(s)"), "{out}");
    assert!(out.contains("AC_Get(1): granted"), "{out}");
    assert!(out.contains("saxpy: 300000 elements OK"), "{out}");
    assert_eq!(c.arm.free_accelerators(), 2, "AC_Free and AC_Finalize gave everything back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_goes_on_with_its_static_accelerator_when_ac_get_is_rejected() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("saxpy");
    compile("gcc", &[repo().join("examples/c/saxpy.c")], &["-O2"], &exe);
    let out = succeeds(&c, Command::new(&exe).arg("1000"), &ad_hoc());
    assert!(out.contains("AC_Get(1): rejected"), "{out}");
    assert!(out.contains("saxpy: 1000 elements OK"), "{out}");
}

/// Null and forged handles, wrong directions, out-of-range copies, a rejected `AC_Get`, ...:
/// each with its code and string (the program checks them), built as C and as C++ (the header
/// compiles as both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_paths_through_the_abi_give_their_codes_in_c_and_cpp() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let source = repo().join("ac-capi/tests/c/errors.c");
    let as_c = dir.path().join("errors_c");
    compile("gcc", std::slice::from_ref(&source), &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"], &as_c);
    let as_cpp = dir.path().join("errors_cpp");
    compile("g++", &[source], &["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror"], &as_cpp);
    for exe in [as_c, as_cpp] {
        let out = succeeds(&c, &mut Command::new(&exe), &ad_hoc());
        assert!(out.contains("0 failure(s)"), "{}:\n{out}", exe.display());
        assert!(out.contains("wrong direction: host destination: 3 (operands do not match"), "{out}");
        assert!(out.contains("rejected AC_Get: 6 (the resource manager rejected the request)"), "{out}");
        assert_eq!(c.arm.free_accelerators(), 1, "nothing held after AC_Finalize");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fortran_program_runs_saxpy_through_iso_c_binding() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("saxpy_f");
    let sources = [repo().join("ac-capi/include/ac.f90"), repo().join("examples/fortran/saxpy.f90")];
    compile("gfortran", &sources, &["-std=f2008", "-O2"], &exe);
    let out = succeeds(&c, &mut Command::new(&exe), &ad_hoc());
    assert!(out.contains("saxpy (Fortran): 1000000 elements OK"), "{out}");
    assert_eq!(c.arm.free_accelerators(), 1);
}

/// Builds an MPI program of libac's (`examples/c/...` or `ac-capi/tests/c/...`).
fn mpi_program(source: &str, dir: &Path) -> PathBuf {
    let exe = dir.join(Path::new(source).file_stem().expect("name"));
    compile("mpicc", &[repo().join(source)], &["-O2", "-Wall", "-Werror", "-DAC_WITH_MPI"], &exe);
    exe
}

fn mpirun(ranks: usize, exe: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("mpirun");
    command.args(["--oversubscribe", "-n", &ranks.to_string()]).arg(exe).args(args);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi_ranks_get_their_own_accelerators_with_one_collective_ac_get() {
    let c = TestCluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = mpi_program("examples/c/mpi_saxpy.c", dir.path());
    let out = succeeds(&c, &mut mpirun(2, &exe, &["1"]), &ad_hoc());
    for rank in 0..2 {
        assert!(out.contains(&format!("rank {rank}: AC_Init_comm: 1 static accelerator(s)")), "{out}");
        assert!(out.contains(&format!("rank {rank}: AC_Get_comm: 1 accelerator(s) of my own; saxpy OK")), "{out}");
    }
    assert_eq!(c.arm.free_accelerators(), 3, "the collective free and finalize gave everything back");
    let Response::Jobs(jobs) = c.admin().await.request(Request::JobList { all: true }).await.unwrap() else {
        panic!("jobs")
    };
    assert_eq!(jobs.len(), 1, "the ranks shared one ad-hoc job: {jobs:?}");
    assert_eq!(jobs[0].state, "ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collective_ac_get_that_cannot_be_met_is_rejected_on_every_rank() {
    // One static accelerator shared by the ranks, one free: two ranks asking one each get none.
    let c = TestCluster::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = mpi_program("examples/c/mpi_saxpy.c", dir.path());
    let out = succeeds(&c, &mut mpirun(2, &exe, &["1"]), &ad_hoc());
    for rank in 0..2 {
        assert!(out.contains(&format!("rank {rank}: AC_Get_comm(1 per rank): rejected")), "{out}");
    }
    assert!(!out.contains("of my own"), "no rank got a share: {out}");
    assert_eq!(c.arm.free_accelerators(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpi_batch_job_shares_its_node_accelerators_between_ranks() {
    let c = TestCluster::start(3).await;
    let credential = c.submit("mpi-job", &["n1"], 1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = mpi_program("examples/c/mpi_saxpy.c", dir.path());
    let job = [("ARM_JOB_ID", "mpi-job"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let out = succeeds(&c, &mut mpirun(2, &exe, &["1"]), &job);
    assert_eq!(out.matches("AC_Init_comm: 1 static accelerator(s)").count(), 2, "{out}");
    assert_eq!(out.matches("accelerator(s) of my own; saxpy OK").count(), 2, "{out}");
    let view = c.job("mpi-job").await;
    assert_eq!(view.static_accelerators.len(), 1, "the job keeps its static accelerator");
    assert!(view.dynamic_accelerators.is_empty(), "the collective set was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_killed_in_a_collective_ac_get_fails_the_job_and_leaks_nothing() {
    let c = TestCluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = mpi_program("ac-capi/tests/c/mpi_kill.c", dir.path());
    let output = run(&c, &mut mpirun(2, &exe, &[]), &ad_hoc());
    let out = text(&output);
    assert!(!output.status.success(), "the MPI job must fail: {out}");
    assert!(out.contains("rank 0: AC_Init_comm: success"), "{out}");
    assert!(!out.contains("rank 1: AC_Get_comm"), "rank 1 died before: {out}");
    // The sessions' leases (1 s in tests) run out; the manager takes everything back.
    let back = eventually(Duration::from_secs(15), || async { c.arm.free_accelerators() == 3 }).await;
    assert!(back, "accelerators leaked: {} free of 3", c.arm.free_accelerators());
    let Response::Jobs(jobs) = c.admin().await.request(Request::JobList { all: true }).await.unwrap() else {
        panic!("jobs")
    };
    assert!(jobs.iter().all(|j| j.state == "ended"), "{jobs:?}");
}

/// Threads of a C program share one accelerator and one kernel handle with no synchronize, on a
/// loaded machine: each thread's copy back sees its own launch, and frees from one round never
/// make the next round's allocations fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_threads_sharing_a_device_and_a_kernel_see_their_own_work_in_order() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("threads");
    compile("gcc", &[repo().join("ac-capi/tests/c/threads.c")], &["-O2", "-pthread", "-Wall", "-Werror"], &exe);
    let _load = ac_tests::Load::start();
    // 8 threads x 2 buffers of 4 MB (61 MiB) fit the test backend's 64 MiB only if each
    // round's frees reach it before the next round's allocations.
    let out = succeeds(&c, Command::new(&exe).args(["8", "10", "1000000"]), &ad_hoc());
    assert!(out.contains("threads: 8, rounds: 10, elements: 1000000, wrong: 0"), "{out}");
}
