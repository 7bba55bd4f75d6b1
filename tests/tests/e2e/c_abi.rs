//! The C ABI (`libac`) from C, C++, Fortran and MPI programs: each is compiled here with the
//! system's compilers against `ac-capi/include` and `target/release/libac.so`, and run as its own
//! process against a real manager and backends. `./scripts/test` installs the compilers (gcc,
//! g++, gfortran, Open MPI) and builds libac with MPI.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ac_frontend::Session;
use ac_proto::arm::{Request, Response};
use ac_tests::libac::{c_test_program, compile, lib_dir, repo};
use ac_tests::{eventually, TestCluster};

/// Runs `program` as a job's process: `ARM_ACPN` (ad hoc) unless `env` names a job.
fn run(c: &TestCluster, program: &mut Command, env: &[(&str, &str)]) -> Output {
    environment(c, program, env).output().expect("the program starts")
}

/// Sets up `program`'s environment to reach the test cluster's manager, then `env`.
fn environment<'a>(c: &TestCluster, program: &'a mut Command, env: &[(&str, &str)]) -> &'a mut Command {
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
    program
}

/// A program started as [`run`] starts it, with pipes for stdin and stdout.
struct Running {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    seen: String,
}

impl Running {
    fn start(c: &TestCluster, program: &mut Command, env: &[(&str, &str)]) -> Self {
        let program = environment(c, program, env).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = program.spawn().expect("the program starts");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdout, seen: String::new() }
    }

    /// Reads the program's output up to a line that starts with `prefix`.
    fn wait_for(&mut self, prefix: &str) {
        loop {
            let mut line = String::new();
            let read = self.stdout.read_line(&mut line).expect("read the program's output");
            self.seen.push_str(&line);
            assert!(read > 0, "the program ended before printing `{prefix}`:\n{}", self.seen);
            if line.starts_with(prefix) {
                return;
            }
        }
    }

    /// Sends the program a line, lets it finish, and returns all it printed; it must succeed.
    fn finish(mut self, line: &str) -> String {
        if let Some(stdin) = self.child.stdin.as_mut() {
            stdin.write_all(line.as_bytes()).expect("write to the program");
        }
        drop(self.child.stdin.take());
        self.stdout.read_to_string(&mut self.seen).expect("read the program's output");
        let status = self.child.wait().expect("the program ends");
        assert!(status.success(), "the program failed:\n{}", self.seen);
        self.seen
    }
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
/// compiles as both, and the program includes it twice, as one whose own header includes it).
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
        assert!(out.contains("device 5: 24 (no accelerator at that index of the set): no accelerator 5"), "{out}");
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

/// Every function of the Fortran module (but the MPI collectives), each checked by the program.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fortran_program_calls_every_function_of_the_module() {
    let c = TestCluster::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("every");
    let sources = [repo().join("ac-capi/include/ac.f90"), repo().join("ac-capi/tests/fortran/every.f90")];
    compile("gfortran", &sources, &["-std=f2008", "-Wall", "-Werror"], &exe);
    let out = succeeds(&c, &mut Command::new(&exe), &ad_hoc());
    assert!(out.contains("0 failure(s)"), "{out}");
    assert_eq!(c.arm.free_accelerators(), 2);
}

/// The MPI collectives from Fortran under mpirun, with `use mpi` and with `use mpi_f08`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fortran_mpi_ranks_get_their_own_accelerators_with_use_mpi_and_use_mpi_f08() {
    let c = TestCluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let sources = [repo().join("ac-capi/include/ac.f90"), repo().join("ac-capi/tests/fortran/mpi.F90")];
    for (name, flags) in [("mpi_f", &[][..]), ("mpi_f08", &["-DAC_F08"][..])] {
        let exe = dir.path().join(name);
        compile("mpifort", &sources, flags, &exe);
        let out = succeeds(&c, &mut mpirun(2, &exe, &[]), &ad_hoc());
        for rank in 0..2 {
            let line = format!("rank {rank}: 1 accelerator(s) of my own, filled and given back");
            assert!(out.contains(&line), "{name}: {out}");
        }
        assert_eq!(c.arm.free_accelerators(), 3, "{name}: everything given back");
    }
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
    // Every rank hears the manager's reason, and what each rank asked for.
    let why = "rejected: the resource manager rejected the collective AC_Get of 1 accelerator(s) for rank 0 on \
               n1, 1 for rank 1 on n1 (2 in all): ";
    for rank in 0..2 {
        assert!(out.contains(&format!("rank {rank}: AC_Get_comm(1 per rank): {why}")), "{out}");
    }
    assert_eq!(out.matches("only 1 accelerator(s) idle").count(), 2, "{out}");
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

/// Compiles a test program of libac's (`ac-capi/tests/c/NAME.c`) with gcc.
fn c_program(name: &str, dir: &Path) -> PathBuf {
    c_test_program(name, dir, &[])
}

/// The code an `AC_Init` line of `init.c` reports.
fn init_code(out: &str) -> &str {
    out.split(": ").nth(1).unwrap_or(out)
}

/// Each cause of a failed `AC_Init` has its own code and says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac_init_failures_have_one_code_per_cause() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("init", dir.path());
    let init = |env: &[(&str, &str)], unset: &[&str]| {
        let mut command = Command::new(&exe);
        for name in unset {
            command.env_remove(name);
        }
        let out = text(&run(&c, &mut command, env));
        assert!(out.starts_with("AC_Init: "), "{out}");
        out
    };
    let out = init(&[], &["ARM_ACPN", "ARM_JOB_ID"]);
    assert!(init_code(&out).starts_with("19 (set-up failed"), "no job named: {out}");
    let out = init(&[("ARM_JOB_ID", "nobody"), ("ARM_JOB_CREDENTIAL", "wrong")], &[]);
    assert!(init_code(&out).starts_with("16 (not authorized"), "a wrong credential: {out}");
    assert!(out.contains("nobody"), "{out}");
    // The only accelerator is held by a job: an ad-hoc one waits, then gives up.
    let holder = c.submit("holder", &["n1"], 1).await;
    let out = init(&[("ARM_ACPN", "1"), ("ARM_INIT_TIMEOUT_S", "1")], &[]);
    assert!(init_code(&out).starts_with("17 (timed out"), "still queued: {out}");
    // The manager refuses a node that is not the job's.
    let out = init(&[("ARM_JOB_ID", "holder"), ("ARM_JOB_CREDENTIAL", &holder), ("ARM_NODE", "n9")], &[]);
    assert!(init_code(&out).starts_with("16 (not authorized"), "a node not the job's: {out}");
    assert!(out.contains("n9"), "it names the node: {out}");
    // A manager that is not there (a port nothing listens on).
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = init(&[("ARM_ACPN", "1"), ("ARM_ADDR", &port.to_string())], &[]);
    assert!(init_code(&out).starts_with("10 (the resource manager cannot be reached"), "{out}");
    // Managers that answer every request with one refusal, as a real one does: one of another
    // protocol version, and one whose store failed.
    use ac_proto::arm::{ArmError, ArmErrorKind, VERSION};
    let version = format!("protocol version mismatch: the resource manager speaks 99, the client {VERSION}");
    let cases = [
        (ArmError::new(ArmErrorKind::VersionMismatch, version), "18 (", "speaks 99"),
        (ArmError::new(ArmErrorKind::Internal, "store: disk full"), "9 (", "disk full"),
    ];
    for (i, (refusal, code, words)) in cases.into_iter().enumerate() {
        let (addr, ca) = refusing_manager(&dir.path().join(format!("refusing{i}")), refusal).await;
        let out = init(&[("ARM_ACPN", "1"), ("ARM_ADDR", &addr.to_string()), ("ARM_CA_CERT", &ca)], &[]);
        assert!(init_code(&out).starts_with(code), "expected {code}: {out}");
        assert!(out.contains(words), "the manager's words reach the program: {out}");
    }
}

/// A manager that answers every request with `refusal`. Returns its address and the CA to
/// trust.
async fn refusing_manager(dir: &Path, refusal: ac_proto::arm::ArmError) -> (std::net::SocketAddr, String) {
    use ac_proto::arm::{ArmResponse, ALPN};
    use ac_proto::{frame, tls, transport};
    let files = tls::ensure_self_signed(dir, &tls::default_names(), &[]).expect("certificate");
    let identity = tls::load_identity(&files.cert, &files.key).expect("identity");
    let crypto = tls::server_crypto(identity, ALPN).expect("TLS");
    let tuning = ac_proto::transport::Tuning::default();
    let endpoint = transport::server_endpoint("127.0.0.1:0".parse().unwrap(), crypto, &tuning, None).expect("endpoint");
    let addr = endpoint.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let Ok(conn) = incoming.await else { continue };
            let answer = frame::frame_bytes(&ArmResponse::Err(refusal.clone())).expect("encodes");
            tokio::spawn(async move {
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let _ = recv.read_to_end(1 << 20).await;
                    let _ = send.write_all(&answer).await;
                    let _ = send.finish();
                }
            });
        }
    });
    (addr, files.ca_cert.to_string_lossy().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collective_call_before_mpi_init_fails_with_the_mpi_code() {
    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("init_mpi");
    compile("mpicc", &[repo().join("ac-capi/tests/c/init.c")], &["-Wall", "-Werror", "-DAC_WITH_MPI"], &exe);
    let out = text(&run(&c, Command::new(&exe).arg("mpi"), &ad_hoc()));
    assert!(out.contains("AC_Init_comm: 20 (MPI failed"), "{out}");
    assert!(out.contains("call MPI_Init first"), "{out}");
}

/// libac built with MPI needs no MPI library (issue 54): it finds the program's MPI at run time,
/// so a program without MPI neither loads one nor needs one installed, and a collective call in
/// it says that MPI is not loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libac_with_mpi_needs_no_mpi_library_and_runs_programs_without_mpi() {
    let dynamic = Command::new("readelf").arg("-d").arg(lib_dir().join("libac.so")).output().expect("readelf runs");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(dynamic.contains("(SONAME)"), "readelf -d libac.so:\n{dynamic}");
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(!needed.iter().any(|l| l.contains("libmpi")), "libac.so needs an MPI library: {needed:#?}");

    let c = TestCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("init", dir.path());
    let libraries = Command::new("ldd").arg(&exe).output().expect("ldd runs");
    let libraries = String::from_utf8_lossy(&libraries.stdout);
    assert!(libraries.contains("libac.so") && !libraries.contains("libmpi"), "ldd init:\n{libraries}");
    let out = text(&run(&c, Command::new(&exe).arg("nompi"), &ad_hoc()));
    assert!(out.contains("AC_Init_fcomm: 20 (MPI failed"), "{out}");
    assert!(out.contains("MPI is not loaded in this program"), "{out}");
    let out = text(&run(&c, &mut Command::new(&exe), &ad_hoc()));
    assert!(out.contains("AC_Init: 0 "), "{out}");
}

/// libac speaks Open MPI's ABI only: a program with another MPI (MPICH's handles are ints) is
/// told so by name, rather than having its handles misread.
#[test]
fn a_collective_call_in_a_program_with_another_mpi_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("not_openmpi");
    let source = repo().join("ac-capi/tests/c/not_openmpi.c");
    compile("gcc", &[source], &["-std=c99", "-Wall", "-Wextra", "-Werror", "-rdynamic"], &exe);
    let out = text(&Command::new(&exe).output().expect("the program starts"));
    assert!(out.contains("AC_Init_fcomm: 20 (MPI failed"), "{out}");
    assert!(
        out.contains("MPICH Version: 4.1 (a stand-in): libac's collective forms speak Open MPI's ABI only"),
        "{out}"
    );
}

/// A job ended under a running C program: its accelerators' calls say they were taken back,
/// `AC_Get`, `AC_Free` and `AC_Finalize` that the job's allocation has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_whose_job_ends_is_told_revoked_then_job_ended() {
    let c = TestCluster::start(2).await;
    let credential = c.submit("ends", &["n1"], 1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("ended", dir.path());
    let job = [("ARM_JOB_ID", "ends"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let mut program = Running::start(&c, Command::new(&exe).arg("job"), &job);
    tokio::task::block_in_place(|| program.wait_for("ready"));
    c.admin().await.request(Request::JobEnd { id: "ends".into() }).await.unwrap();
    let out = tokio::task::block_in_place(|| program.finish("go\n"));
    assert!(out.contains("0 failure(s)"), "{out}");
    assert!(out.contains("a copy from the ended job's accelerator: 22 (the resource manager took"), "{out}");
    assert!(out.contains("revoked by the resource manager"), "{out}");
    assert!(out.contains("free after the end: 23 (the job's allocation has ended"), "{out}");
    assert!(out.contains("stop using accelerators"), "the message says what to do: {out}");
    assert_eq!(c.arm.free_accelerators(), 2);
}

/// The daemon of a C program's accelerator stops: calls on it say the connection was lost, and
/// the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_whose_accelerator_daemon_stops_is_told_disconnected() {
    let mut c = TestCluster::start(2).await;
    let credential = c.submit("loses", &["n1"], 1).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("ended", dir.path());
    let job = [("ARM_JOB_ID", "loses"), ("ARM_JOB_CREDENTIAL", credential.as_str())];
    let mut program = Running::start(&c, Command::new(&exe).arg("daemon"), &job);
    tokio::task::block_in_place(|| program.wait_for("ready"));
    let (_, held) = c.job("loses").await.static_accelerators[0].clone();
    let host: usize = held.trim_start_matches('h').split('/').next().unwrap().parse().unwrap();
    c.backends.remove(host).backend.shutdown().await;
    let out = tokio::task::block_in_place(|| program.finish("go\n"));
    assert!(out.contains("0 failure(s)"), "{out}");
    assert!(out.contains("daemon's accelerator: 11 (the connection to the accelerator was lost"), "{out}");
}

/// Starts a cluster of 4 with an owner job on n1 holding 1 accelerator and 2 spare (peak 3),
/// and a borrower job on n2; returns the cluster and the two credentials.
async fn preallocation() -> (TestCluster, String, String) {
    let c = TestCluster::start_with(4, |config| config.preemption_grace_s = 1).await;
    let owner = c.submit_with_peak("owner", "n1", 1, "olga", 3).await;
    let borrower = c.submit_as("borrower", &["n2"], 1, "bert", 0).await;
    (c, owner, borrower)
}

/// Runs `preempt.c` in `mode` as the borrower; once it has borrowed, the owner grows into one
/// of its spare accelerators. Returns what the borrower printed.
async fn borrow_and_preempt(mode: &str) -> String {
    let (c, owner_credential, borrower_credential) = preallocation().await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("preempt", dir.path());
    let job = [("ARM_JOB_ID", "borrower"), ("ARM_JOB_CREDENTIAL", borrower_credential.as_str()), ("ARM_NODE", "n2")];
    let mut program = Running::start(&c, Command::new(&exe).arg(mode), &job);
    tokio::task::block_in_place(|| program.wait_for("borrowed 2"));
    let owner = Session::init(c.session_options("owner", &owner_credential, "n1")).await.unwrap();
    let grown = owner.get(1).await.unwrap().expect("the owner grows within its peak");
    let out = tokio::task::block_in_place(|| program.finish(""));
    owner.free(grown).await.unwrap();
    owner.finalize().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_borrower_is_told_of_the_preemption_and_goes_on_with_the_rest() {
    let out = borrow_and_preempt("listen").await;
    assert!(out.contains("is taken back, usable for"), "{out}");
    assert_eq!(out.matches("still computes").count(), 1, "{out}");
    assert!(out.contains("told again: no"), "each accelerator is told once: {out}");
    assert!(out.contains("done"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_borrower_that_ignores_the_preemption_is_revoked_with_a_clear_error() {
    let out = borrow_and_preempt("ignore").await;
    assert!(out.contains(": 22 (the resource manager took the accelerator back (revoked)): "), "{out}");
    assert!(out.contains("of preemptible set"), "the error names the preemption: {out}");
    assert!(out.contains("as AC_PollPreemption would have told"), "{out}");
    assert!(out.contains("done"), "AC_Free and AC_Finalize work after it: {out}");
}

/// A C program that resizes at reconfiguration points (`AC_Check`, `AC_FreeDevice`;
/// `ac-capi/tests/c/resize.c`) computes the right result across resizes: from its one static
/// accelerator in a pool of 4 it expands to its preferred 4 (lent), then, once a queued job of 2
/// could start on the lent ones, gives back one per check as the reclaim asks, and the queued
/// job starts; no check expands it again onto that job's accelerators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_resizing_at_check_points_computes_right_across_resizes() {
    let c = TestCluster::start(4).await;
    let credential = c.submit_as("iter", &["n1"], 1, "ida", 0).await;
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program("resize", dir.path());
    let job = [("ARM_JOB_ID", "iter"), ("ARM_JOB_CREDENTIAL", credential.as_str()), ("AC_CHECK_EVERY_MS", "200")];
    let mut program = Running::start(&c, &mut Command::new(&exe), &job);
    tokio::task::block_in_place(|| program.wait_for("size 4"));
    c.submit_as("queued", &["n3"], 2, "quinn", 60).await;
    let out = tokio::task::block_in_place(|| program.finish(""));
    assert!(out.contains("size 1\nsize 4\nsize 3\nsize 2\nrounds "), "expanded, then shrunk by the reclaim:\n{out}");
    assert!(out.contains(" wrong 0\ndone"), "every iteration right:\n{out}");
    assert!(!out.contains("short notice"), "{out}");
    assert_eq!(c.job("queued").await.state, "running", "the queued job started on what was given back");
}
