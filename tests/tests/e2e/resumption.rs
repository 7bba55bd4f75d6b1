//! Sessions that outlive network outages (issue 50; "Resumption" in `ac_proto::backend`), on
//! emulated hosts (`ac_tests::netns`): partitions longer than QUIC's idle timeout in the middle
//! of checked loops, with every call run exactly once; an outage longer than the program's
//! resume deadline and the backend's hold, ending cleanly on both sides; a backend restarted
//! during an outage; the manager's link cut alone. Skipped, saying so, where namespaces cannot
//! be made, unless `AC_NETNS_REQUIRED` is set (as `scripts/test` sets it).

use std::path::Path;
use std::time::{Duration, Instant};

use ac_tests::need_netns;
use ac_tests::netns::Proc;
use ac_tests::site::{
    backend_env, device_memory, expect_line, hold_logged, start_backend_with, Site, ARM, BACKEND, PROGRAM,
};

/// Cuts host `h` off from the manager and the backend: its node's outage.
fn cut(site: &Site, h: usize) {
    site.bed.partition(h, BACKEND);
    site.bed.partition(h, ARM);
}

/// Waits for the first ping begun with mark `n` to complete ([`Site::mark`]): the first call
/// completed after the mark was set.
fn ping_after_mark(site: &Site, proc: &mut Proc, n: u64, limit: Duration) -> Instant {
    let needle = format!("ping mark {n}");
    match proc.wait_for(&needle, limit) {
        Some((at, _)) => at,
        None => panic!(
            "no `{needle}` within {limit:?}; output:\n{}\nstderr:\n{}\nbackend:\n{}",
            proc.output(),
            proc.stderr(),
            std::fs::read_to_string(site.dir.path().join("backend.log")).unwrap_or_default()
        ),
    }
}

/// Waits for each task's first round begun after mark `n` to pass its checks; returns the bulk
/// lanes the last of those rounds' copies used.
fn rounds_after_mark(proc: &mut Proc, tasks: usize, n: u64, limit: Duration) -> u64 {
    let end = Instant::now() + limit;
    let mut seen = vec![false; tasks];
    let mut lanes = 0;
    while seen.iter().any(|s| !s) {
        let left = end.saturating_duration_since(Instant::now());
        let Some((_, line)) = proc.wait_for(" ok mark ", left) else {
            panic!("not every task ran a round begun after mark {n} within {limit:?}; output:\n{}", proc.output());
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let (task, mark): (usize, u64) = (words[1].parse().expect("task"), words[6].parse().expect("mark"));
        if mark >= n {
            seen[task] = true;
            // libac's and Python's programs do not say which lanes they use.
            lanes = words.get(10).map_or(0, |w| w.parse().unwrap_or_else(|e| panic!("lanes in {line:?}: {e}")));
        }
    }
    lanes
}

/// Three tasks share one accelerator handle in each of four programs, two copying over bulk
/// lanes, two over QUIC streams (`AC_LANES=0`); each task queues launches that count
/// themselves and checks its counters and its copies byte for byte every round. The programs'
/// nodes are cut off from the manager and the backend at once, for 15 s (one of each kind)
/// and 45 s (the others): both longer than QUIC's idle timeout (10 s), shorter than the lease
/// (60 s; the defaults throughout). Every round before, during and after passes: no launch ran
/// twice or was lost, no copy came back wrong, no call failed, and the manager kept every
/// grant. Prints the time from the network's return to the first completed call
/// (`BENCHMARKS.md`).
#[test]
fn outages_of_15_and_45_s_are_survived_with_every_call_run_exactly_once() {
    need_netns!();
    const TASKS: usize = 3;
    let site = Site::start(6, "0,1,2,3", &[]);
    let tasks = TASKS.to_string();
    let quic = [("AC_LANES", "0".to_string())];
    // (name, host, outage in seconds, environment)
    type Env<'a> = &'a [(&'a str, String)];
    let plan: [(&str, usize, u64, Env); 4] =
        [("lanes", PROGRAM, 15, &[]), ("quic", 3, 15, &quic), ("lanes", 4, 45, &[]), ("quic", 5, 45, &quic)];
    let mut programs: Vec<Proc> =
        plan.iter().map(|(_, host, _, env)| site.program(*host, 1, &["count", &tasks, "100"], env)).collect();
    for (i, p) in programs.iter_mut().enumerate() {
        let lanes = rounds_after_mark(p, TASKS, 0, Duration::from_secs(60));
        assert_eq!(lanes > 0, plan[i].0 == "lanes", "{} copies over {lanes} lanes", plan[i].0);
    }
    let held = site.accelerators();
    assert_eq!(held.iter().filter(|(_, _, holder)| holder.is_some()).count(), 4, "one accelerator each: {held:?}");
    for (_, host, _, _) in &plan {
        cut(&site, *host);
    }
    let cut_at = Instant::now();
    for (mark, outage) in [(1, 15), (2, 45)] {
        std::thread::sleep((cut_at + Duration::from_secs(outage)).saturating_duration_since(Instant::now()));
        let ending: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].2 == outage).collect();
        for &i in &ending {
            site.bed.heal(plan[i].1);
        }
        let healed = Instant::now();
        site.mark(mark);
        for &i in &ending {
            let at = ping_after_mark(&site, &mut programs[i], mark, Duration::from_secs(20));
            eprintln!(
                "{} after a {outage} s outage: first call completed {:.3} s after the network came back",
                plan[i].0,
                (at - healed).as_secs_f64()
            );
        }
        for &i in &ending {
            // Lanes, again, for the program that copies over them (a lane dialed while the
            // network was down must not leave its copies on QUIC streams for good).
            let lanes = rounds_after_mark(&mut programs[i], TASKS, mark, Duration::from_secs(30));
            assert_eq!(lanes > 0, plan[i].0 == "lanes", "{} copies over {lanes} lanes", plan[i].0);
        }
    }
    assert_eq!(site.accelerators(), held, "the manager kept every grant through the outages");
    for (i, p) in programs.iter_mut().enumerate() {
        let out = p.output();
        let name = format!("{} ({} s)", plan[i].0, plan[i].2);
        assert!(!out.contains("error") && !out.contains("wrong"), "{name}: every call exact:\n{out}");
        let log = p.stderr();
        assert_eq!(log.matches("resumed after").count(), 1, "{name} resumed once:\n{log}");
    }
}

/// C and Python programs get the same resumption, through libac and `import ac`: a C program
/// (`ac-capi/tests/c/outage.c`: two threads sharing a handle and a kernel handle) and a Python
/// one (`tests/python/outage_program.py`: two threads sharing an accelerator) keep queueing
/// launches that count themselves and checking copies byte for byte while their nodes are cut
/// off for 15 s, longer than QUIC's idle timeout, with the default settings. Every round before
/// and after the outage passes (no launch ran twice or was lost, no byte came back wrong, no
/// call failed), each program resumed once, and the manager kept their grants. The Python half
/// needs `AC_PYTHON` (scripts/test's interpreter, with the wheel installed).
#[test]
fn c_and_python_programs_survive_an_outage_through_libac() {
    need_netns!();
    const TASKS: usize = 2;
    const PYTHON_HOST: usize = 3;
    let site = Site::start(4, "0,1", &[]);
    let exe = ac_tests::libac::c_test_program("outage", site.dir.path(), &["-O2", "-pthread"]);
    let tasks = TASKS.to_string();
    let mut programs = vec![("C", site.program_of(&exe, PROGRAM, 1, &[&tasks], &[]))];
    match std::env::var_os("AC_PYTHON") {
        Some(python) => {
            let script = ac_tests::libac::repo().join("tests/python/outage_program.py");
            let script = script.to_string_lossy();
            let program = site.program_of(Path::new(&python), PYTHON_HOST, 1, &[&script, &tasks], &[]);
            programs.push(("Python", program));
        }
        None => ac_tests::skip("AC_PYTHON_REQUIRED", "no AC_PYTHON: the Python half is left out"),
    }
    for (_, p) in programs.iter_mut() {
        rounds_after_mark(p, TASKS, 0, Duration::from_secs(60));
    }
    let held = site.accelerators();
    let holders = held.iter().filter(|(_, _, holder)| holder.is_some()).count();
    assert_eq!(holders, programs.len(), "one accelerator each: {held:?}");
    cut(&site, PROGRAM);
    cut(&site, PYTHON_HOST);
    std::thread::sleep(Duration::from_secs(15));
    site.bed.heal(PROGRAM);
    site.bed.heal(PYTHON_HOST);
    let healed = Instant::now();
    site.mark(1);
    for (name, p) in programs.iter_mut() {
        rounds_after_mark(p, TASKS, 1, Duration::from_secs(30));
        eprintln!(
            "{name}: every task passed a round begun after the network came back, {:.3} s after",
            healed.elapsed().as_secs_f64()
        );
    }
    assert_eq!(site.accelerators(), held, "the manager kept every grant through the outage");
    for (name, p) in programs.iter_mut() {
        let out = p.output();
        assert!(!out.contains("error") && !out.contains("wrong"), "{name}: every call exact:\n{out}");
        let log = p.stderr();
        assert_eq!(log.matches("resumed after").count(), 1, "{name} resumed once:\n{log}");
    }
}

/// The program's link to the manager alone is cut, for longer than that connection's idle
/// timeout (half the 60 s lease): the grants the program holds stay its own, and once the link
/// is back the program's next `AC_Get` is answered on a new connection, and granted.
#[test]
fn a_cut_between_program_and_manager_alone_costs_the_program_nothing() {
    need_netns!();
    let site = Site::start(3, "0,1,2", &[]);
    // AC_Init's accelerator, one AC_Get at once, another 40 s later.
    let mut program = site.program(PROGRAM, 1, &["get", "0", "2", "40000"], &[]);
    expect_line(&mut program, "granted", Duration::from_secs(20));
    let held: Vec<_> = site.accelerators().into_iter().filter(|(_, _, holder)| holder.is_some()).collect();
    assert_eq!(held.len(), 2, "AC_Init's and AC_Get's: {held:?}");
    site.bed.partition(PROGRAM, ARM);
    std::thread::sleep(Duration::from_secs(35));
    site.bed.heal(PROGRAM);
    let (_, line) = program
        .wait_for("granted", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the AC_Get after the cut was not granted:\n{}", program.output()));
    eprintln!("after the cut: {line}");
    let now = site.accelerators();
    for grant in &held {
        assert!(now.contains(grant), "{grant:?} outlived the cut: {now:?}");
    }
    assert_eq!(now.iter().filter(|(_, _, holder)| holder.is_some()).count(), 3, "{now:?}");
}

/// The manager's jobs (`armctl job list --json`).
fn jobs(site: &Site) -> Vec<ac_proto::arm::JobView> {
    let out = site.armctl(&["job", "list", "--json"]).unwrap_or_else(|e| panic!("job list: {e}"));
    match serde_json::from_str(&out).expect("job list JSON") {
        ac_proto::arm::Response::Jobs(jobs) => jobs,
        other => panic!("job list answered {other:?}"),
    }
}

/// The job of the program on host `host` (its ad-hoc job's node is `node{host}`), or a job by id.
fn job(site: &Site, host: Option<usize>, id: &str) -> ac_proto::arm::JobView {
    let node = host.map(|h| format!("node{h}"));
    let found = jobs(site).into_iter().find(|j| node.as_ref().map_or(j.id == id, |n| j.nodes.contains(n)));
    found.unwrap_or_else(|| panic!("no job {node:?} {id}"))
}

/// Waits up to `limit` for `ok`; panics saying `what`.
fn until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the manager decides for a program while its link is cut reaches it once the link is
/// back: a waiting `AC_Get` granted during the cut, and a reclaim of an elastic grant told
/// during the cut. Four accelerators: `lender` holds its static one and one lent, `waiter` its
/// static one and waits for one more, `holder` the last. Both programs' nodes are cut off from
/// the manager (not from the backend) for longer than that link's idle timeout (half the 20 s
/// lease); meanwhile an admin ends `holder`'s job (its accelerator goes to the waiting request)
/// and submits a job of one (the lent accelerator is reclaimed for it, with 40 s of notice). Nothing reaches the
/// programs during the cut; once the link is back the waiter is granted, the lender is told and
/// gives back, the queued job starts, and both programs keep their static accelerators.
#[test]
fn a_waiting_request_and_a_reclaim_decided_during_a_cut_reach_the_program_after_it() {
    need_netns!();
    // Not the first program's host: `armctl` runs there.
    const LENDER: usize = 3;
    const WAITER: usize = 4;
    const HOLDER: usize = 5;
    let site = Site::start(6, "0,1,2,3", &["--lease-ms", "20000"]);
    let mut holder = site.program(HOLDER, 1, &["hold", "1"], &[]);
    expect_line(&mut holder, "holding", Duration::from_secs(20));
    // 40 s of notice: the reclaim's deadline falls well after the heal, whatever the SDK's
    // redial cadence; without the manager telling it again the test still fails (it waits
    // 20 s for the lender to give back).
    let mut lender = site.program(LENDER, 1, &["lend", "40"], &[]);
    expect_line(&mut lender, "lent", Duration::from_secs(20));
    let mut waiter = site.program(WAITER, 1, &["get", "90000", "1", "0"], &[]);
    until(Duration::from_secs(20), "the waiter's AC_Get waits", || {
        jobs(&site).iter().any(|j| j.nodes.contains(&format!("node{WAITER}")) && j.waiting_requests == 1)
    });
    let statics = |host| job(&site, Some(host), "").static_accelerators;
    let (lender_statics, waiter_statics) = (statics(LENDER), statics(WAITER));
    site.bed.partition(LENDER, ARM);
    site.bed.partition(WAITER, ARM);
    let cut_at = Instant::now();
    let held = job(&site, Some(HOLDER), "").id;
    site.armctl(&["job", "end", &held]).unwrap_or_else(|e| panic!("job end: {e}"));
    site.armctl(&["job", "submit", "--job", "queued", "--nodes", "nodeq", "--acpn", "1"])
        .unwrap_or_else(|e| panic!("job submit: {e}"));
    std::thread::sleep((cut_at + Duration::from_secs(14)).saturating_duration_since(Instant::now()));
    assert!(!lender.output().contains("reclaim"), "nothing came through the cut: {}", lender.output());
    assert!(!waiter.output().contains("granted"), "nothing came through the cut: {}", waiter.output());
    site.bed.heal(LENDER);
    site.bed.heal(WAITER);
    let healed = Instant::now();
    expect_line(&mut waiter, "granted", Duration::from_secs(20));
    if lender.wait_for("freed 1", Duration::from_secs(20)).is_none() {
        let log = std::fs::read_to_string(site.dir.path().join("arm.log")).unwrap_or_default();
        panic!(
            "the lender was not told: {}\n{}\njobs: {:#?}\narm: {log}",
            lender.output(),
            lender.stderr(),
            jobs(&site)
        );
    }
    eprintln!("granted and reclaimed by {:.3} s after the link came back", healed.elapsed().as_secs_f64());
    until(Duration::from_secs(10), "the queued job starts on what the lender gave back", || {
        job(&site, None, "queued").state == "running"
    });
    assert_eq!(statics(LENDER), lender_statics, "the lender kept its static accelerator");
    assert_eq!(statics(WAITER), waiter_statics, "the waiter kept its static accelerator");
    for out in [lender.output(), waiter.output()] {
        assert!(!out.contains("error"), "{out}");
    }
}

/// Past the program's resume deadline and the backend's hold (both 4 s here, after a 3 s idle
/// timeout), an outage ends the session on both sides, cleanly: the program is told why, and
/// the backend frees its memory while the partition still stands. Then a backend restarted
/// during an outage: its program is told, as soon as the network is back, that the session is
/// gone; nothing resumes.
#[test]
fn an_outage_past_the_hold_or_a_restarted_backend_ends_the_session_cleanly() {
    need_netns!();
    const PROBE: usize = 2;
    let bed = ac_tests::netns::Bed::new(3, 1500);
    let dir = tempfile::tempdir().expect("temp dir");
    let hold = [("AC_BACKEND_SESSION_HOLD_MS", "4000".to_string())];
    let mut backend = Some(start_backend_with(&bed, dir.path(), "0", &hold));
    let mut env = backend_env(&bed, dir.path()).to_vec();
    env.extend([
        ("AC_IDLE_TIMEOUT_MS", "3000".to_string()),
        ("AC_KEEP_ALIVE_MS", "1000".to_string()),
        ("AC_RESUME_MS", "4000".to_string()),
    ]);
    let spawn = |name: &str, args: &[&str], env: &[(&str, String)]| {
        bed.spawn(0, &ac_tests::workspace_binary("ac-net-client"), args, env, &dir.path().join(name))
    };
    let memory = || device_memory(&bed, dir.path(), PROBE);

    let mut program = spawn("past-hold.log", &["count", "2", "0"], &env);
    rounds_after_mark_direct(&mut program);
    let (free, total) = memory();
    assert!(free < total, "the program holds memory");
    bed.partition(0, BACKEND);
    let partitioned = Instant::now();
    let (at, error) = program
        .wait_for("error: ", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("the program was not told within 15 s of the partition:\n{}", program.output()));
    assert!(error.contains("could not be resumed within"), "a clear error: {error}\n{}", program.stderr());
    eprintln!("the program gave up {:.1} s into the partition", (at - partitioned).as_secs_f64());
    // Not before its deadline, which runs from the connection's loss, after the partition.
    assert!(at - partitioned >= Duration::from_secs(4), "gave up within its 4 s resume deadline");
    let deadline = partitioned + Duration::from_secs(20);
    let freed = loop {
        let (free, total) = memory();
        if free == total {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "the backend still holds the session's memory after 20 s");
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("the backend freed the session {:.1} s into the partition", (freed - partitioned).as_secs_f64());
    // Not before its hold ran out: by the backend's own clock, from the connection's loss.
    let held = hold_logged(dir.path());
    assert!(held >= 4.0, "the backend held the session {held:.3} s, not its 4 s hold");
    eprintln!("the backend held the session {held:.3} s");
    bed.heal(0);

    // A backend restarted during the outage holds nothing: told at once when the network is
    // back, not after the program's deadline (60 s here).
    env.retain(|(name, _)| *name != "AC_RESUME_MS");
    let mut program = spawn("restarted.log", &["count", "2", "0"], &env);
    rounds_after_mark_direct(&mut program);
    bed.partition(0, BACKEND);
    std::thread::sleep(Duration::from_secs(4));
    drop(backend.take());
    backend = Some(start_backend_with(&bed, dir.path(), "0", &hold));
    bed.heal(0);
    let healed = Instant::now();
    let (at, error) = program.wait_for("error: ", Duration::from_secs(10)).unwrap_or_else(|| {
        panic!("the program was not told within 10 s of the network's return:\n{}", program.output())
    });
    assert!(error.contains("is not on this backend"), "the session is gone, and why: {error}\n{}", program.stderr());
    assert!(!program.output().contains("wrong"), "nothing resumed wrongly:\n{}", program.output());
    eprintln!("told {:.1} s after the network came back: {error}", (at - healed).as_secs_f64());
    drop(backend);
}

/// Waits for both tasks of a direct program's first rounds.
fn rounds_after_mark_direct(program: &mut Proc) {
    expect_line(program, "connected", Duration::from_secs(20));
    rounds_after_mark(program, 2, 0, Duration::from_secs(30));
}

/// The protocol itself, on one backend in this process, with a client that says exactly what
/// it has read and resends exactly what the backend lacks (what `ac_frontend` does): a session
/// taken over by a new connection runs each envelope once, answers again the reply its client
/// had not read, and takes the envelope that was cut in half whole, once. Strangers are
/// refused: a wrong token, a session the backend does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_runs_every_envelope_once_and_answers_again_what_was_lost() {
    use ac_proto::backend::link;
    use ac_proto::backend::{
        close, DevicePtr, Envelope, Hello, KernelArg, LaunchDims, ModuleSource, Reply, Request, Response, SessionId,
        StreamId,
    };
    use ac_proto::frame::frame_bytes;

    const N: u64 = 1024;
    let tb = ac_tests::TestBackend::start(64).await;
    let options = tb.options();
    let crypto = link::client_crypto(&options).expect("TLS");
    let open = Hello::Open { capability: vec![], device: 0 };
    let mut first = link::open(&options, crypto.clone(), &open).await.expect("a session");
    let Response::Welcome { session, token, .. } = first.welcome.clone() else { panic!("no welcome") };
    let envelope = |id: u64, request: Request| frame_bytes(&Envelope { id, request }).expect("encodes").to_vec();
    let f32s = |v: f32| (0..N).flat_map(|_| v.to_le_bytes()).collect::<Vec<u8>>();
    // Every counter, when all are equal (else `None`): short failure messages.
    let count = |bytes: bytes::Bytes| {
        let values: Vec<f32> = bytes.chunks(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        values.iter().all(|v| *v == values[0]).then(|| values[0])
    };

    // Set-up, each answer read: 4 replies.
    let mut bytes = envelope(1, Request::MemAlloc { bytes: N * 4 });
    bytes.extend(envelope(2, Request::MemAlloc { bytes: N * 4 }));
    bytes.extend(envelope(3, Request::ModuleLoad { source: ModuleSource::Builtin("builtin".into()), len: 0 }));
    first.send.write_all(&bytes).await.expect("sent");
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(first.reader.expect_frame::<Reply>().await.expect("a reply").response);
    }
    let [Response::Buffer(counters), Response::Buffer(ones), Response::Module(module)] = answers[..] else {
        panic!("set-up answered {answers:?}")
    };
    first.send.write_all(&envelope(4, Request::FunctionLookup { module, name: "saxpy".into() })).await.unwrap();
    let Response::Function { id: saxpy, .. } = first.reader.expect_frame::<Reply>().await.unwrap().response else {
        panic!("no saxpy")
    };
    let at = |buffer| DevicePtr { buffer, offset: 0 };
    // 2 synchronous writes, answered and read (6 replies read; a synchronous call's caller
    // waits for its answer before it goes on), then 3 launches, and a read whose reply this
    // client reads but will say it has not (as if it were lost with the connection).
    let mut bytes = envelope(5, Request::MemWriteSync { dst: at(ones), len: N * 4 });
    bytes.extend(f32s(1.0));
    bytes.extend(envelope(6, Request::MemWriteSync { dst: at(counters), len: N * 4 }));
    bytes.extend(f32s(0.0));
    first.send.write_all(&bytes).await.unwrap();
    for id in [5, 6] {
        let reply: Reply = first.reader.expect_frame().await.unwrap();
        assert_eq!((reply.id, reply.response), (id, Response::Ok));
    }
    let launch = envelope(
        0,
        Request::Launch {
            function: saxpy,
            dims: LaunchDims::linear(N, 256),
            args: vec![KernelArg::F32(1.0), KernelArg::Ptr(at(ones)), KernelArg::Ptr(at(counters)), KernelArg::U64(N)],
            stream: StreamId(0),
        },
    );
    let mut bytes = Vec::new();
    for _ in 0..3 {
        bytes.extend(&launch);
    }
    bytes.extend(envelope(7, Request::MemReadSync { src: at(counters), len: N * 4 }));
    first.send.write_all(&bytes).await.unwrap();
    let read: Reply = first.reader.expect_frame().await.unwrap();
    assert_eq!(read, Reply { id: 7, response: Response::Data { len: N * 4 } });
    assert_eq!(count(first.reader.read_exact_raw((N * 4) as usize).await.unwrap()), Some(3.0), "3 launches ran");
    // Half of a fourth launch: cut off with the connection, so never handled.
    first.send.write_all(&launch[..launch.len() / 2]).await.unwrap();

    // Strangers: the wrong token, a session that is not here.
    let resume = |session, token, replies| Hello::Resume { session, token, capability: vec![], replies };
    for (hello, code) in
        [(resume(session, [0; 16], 6), close::UNAUTHORIZED), (resume(SessionId(999), token, 6), close::SESSION_GONE)]
    {
        let refused: ac_frontend::Error =
            link::open(&options, crypto.clone(), &hello).await.expect_err("refused").into();
        assert!(matches!(refused, ac_frontend::Error::Revoked(_) | ac_frontend::Error::Disconnected(_)), "{refused}");
        let expected = if code == close::UNAUTHORIZED { "wrong session token" } else { "not on this backend" };
        assert!(refused.to_string().contains(expected), "{refused}");
    }

    // The owner resumes, having read 6 replies: the backend had handled 10 envelopes, and
    // answers the read again.
    let mut second = link::open(&options, crypto.clone(), &resume(session, token, 6)).await.expect("resumed");
    assert_eq!(second.welcome, Response::Resumed { handled: 10 });
    let again: Reply = second.reader.expect_frame().await.unwrap();
    assert_eq!(again, Reply { id: 7, response: Response::Data { len: N * 4 } });
    assert_eq!(count(second.reader.read_exact_raw((N * 4) as usize).await.unwrap()), Some(3.0), "the same answer");
    let (code, reason) = ac_tests::closed_by_peer(&first.connection).await;
    assert_eq!(code, u64::from(close::NORMAL), "{reason}");
    // Envelope 11, the cut launch, whole; then a read: 4 launches ran, each once.
    let mut bytes = launch.clone();
    bytes.extend(envelope(8, Request::MemReadSync { src: at(counters), len: N * 4 }));
    second.send.write_all(&bytes).await.unwrap();
    let read: Reply = second.reader.expect_frame().await.unwrap();
    assert_eq!(read, Reply { id: 8, response: Response::Data { len: N * 4 } });
    assert_eq!(
        count(second.reader.read_exact_raw((N * 4) as usize).await.unwrap()),
        Some(4.0),
        "4 launches, once each"
    );
}
