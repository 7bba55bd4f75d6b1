//! Across a real network: the manager, backends and programs each in its own emulated host
//! (`ac_tests::netns`), deployed as the README says (certificates made by the daemons
//! themselves, `armctl host add` by address), with partitions, random loss and dead processes.
//! Skipped, saying so, where namespaces cannot be made (not root, no `ip` or `nft`), unless
//! `AC_NETNS_REQUIRED` is set, as `scripts/test` sets it: then a skip is a failure.

use std::time::{Duration, Instant};

use ac_tests::netns::{Bed, Proc};
use ac_tests::{need_netns, workspace_binary};

use ac_tests::site::{
    backend_env, device_memory, expect_line, expect_round_after_mark, hold_logged, memory_numbers, start_backend,
    start_backend_with, Site, ARM, BACKEND, PROGRAM,
};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[test]
fn a_program_and_armctl_reach_the_manager_by_address_with_certificates_the_daemons_made() {
    need_netns!();
    let mut site = Site::start(3, "0", &[]);
    let mut program = site.program(PROGRAM, 1, &["work", "3", "0"], &[]);
    expect_line(&mut program, "done", Duration::from_secs(20));
    assert!(program.wait(Duration::from_secs(5)).is_some_and(|s| s.success()), "{}", program.output());

    // A manager listening on every address does not know which one programs dial: the error
    // says which names its certificate holds and how to add one.
    site.stop_arm();
    std::fs::remove_dir_all(site.dir.path().join("arm")).expect("fresh manager state");
    let any = "0.0.0.0:7000";
    site.start_arm(any, &[], &[]);
    let refused = site.armctl(&["host", "list"]).expect_err("the address is not in the certificate");
    assert!(refused.contains("not valid for name \"10.213.0.1\""), "{refused}");
    assert!(refused.contains("127.0.0.1") && refused.contains("ARM_NAMES"), "names held and the fix: {refused}");
    // Adding the name re-issues the certificate from the same CA: the CA file clients hold works.
    site.stop_arm();
    site.start_arm(any, &[], &[("ARM_NAMES", "10.213.0.1".into())]);
    site.armctl(&["host", "list"]).unwrap_or_else(|e| panic!("with the name added: {e}"));
}

/// How soon a program with a bulk lane open learns that its backend process was `kill -9`ed,
/// the host staying up (ARCHITECTURE.md, "a backend process dies": "within a probe interval
/// with lanes"). What the code guarantees: the port watch (`ac_frontend`'s `watch.rs`) wakes
/// every tick (50 ms); the killed process's kernel closes its end of the idle lane at once, so
/// the first wake-up after the kill finds the lane closed, dials the lane port, is refused at
/// once (the host is up), and closes the session. The program learns it at its next call, after
/// its pause (200 ms in even trials). So the error comes within the pause and a tick plus the
/// scheduling of the program and of this test's reader: the bound asserted is twice the probe
/// interval (0.25 s), the rest being room for a loaded 2-core machine. (Without a lane the program waits on ICMP
/// answers, which the kernel rate-limits: p99 1.3 s, and 0.45-1.27 s seen here, over the bound.)
const KILL_NOTICE: f64 = 0.5;

/// The program's pause between rounds in the kill test, by trial: in even trials the kill falls
/// in a 200 ms pause, with the lane idle, and the program's next call fails once the watch has
/// closed the session; in odd ones the program copies without pause, so the kill mostly cuts a
/// copy on the lane, which must wait for the session's reason and name the death (it once waited
/// 100 ms, less than the watch's interval, and said only "the bulk lane broke").
fn kill_pause(trial: usize) -> &'static str {
    if trial.is_multiple_of(2) {
        "200"
    } else {
        "0"
    }
}

/// The trials where the backend comes back after its kill; the 20 before leave its port closed.
const RESTART_TRIALS: std::ops::Range<usize> = 20..32;

/// How long after the kill a restart trial starts the backend again. In the odd ones the kill
/// cuts a copy on the lane, and the copy waits 100 ms for the session's reason
/// (`LANE_REASON_WAIT`) before it asks the lane port. A backend back at once answers the
/// packets the connection sends in those 100 ms (its retransmissions) with its reset; one back
/// later may find the connection silent since its last packet, and is found listening by that
/// ask: its reset must be provoked. The delays step through that window (before the copy
/// provoked it, every one of three runs had a trial here whose copy said only "the bulk lane
/// broke").
fn restart_delay(trial: usize) -> Duration {
    if trial.is_multiple_of(2) {
        Duration::ZERO
    } else {
        Duration::from_millis((trial.saturating_sub(21) as u64) * 5 + 60)
    }
}

/// Two hosts, a program's and a backend's, a directory for the backend's state, and the
/// environment that points a program at the backend.
fn program_and_backend() -> (Bed, tempfile::TempDir, [(&'static str, String); 2]) {
    let bed = Bed::new(2, 1500);
    let dir = tempfile::tempdir().expect("temp dir");
    let env = backend_env(&bed, dir.path());
    (bed, dir, env)
}

/// The seconds from `killed` to the program's error, and its line, which must say that the
/// backend's process died (gone, or replaced: a reset).
fn death_reported(program: &mut Proc, killed: Instant, trial: usize) -> (f64, String) {
    let (at, line) = program
        .wait_for("error: ", Duration::from_secs(5))
        .unwrap_or_else(|| panic!("trial {trial}: no error within 5 s:\n{}", program.output()));
    assert!(at >= killed, "trial {trial}: an error before the kill: {line}");
    assert!(
        line.contains("connection to the accelerator lost")
            && (line.contains("backend process is gone") || line.contains("reset by peer")),
        "trial {trial}: the error says the process died: {line}"
    );
    (at.duration_since(killed).as_secs_f64(), line)
}

#[test]
fn a_killed_backend_reaches_its_program_within_half_a_second_with_a_lane_open() {
    need_netns!();
    let (bed, dir, env) = program_and_backend();
    let lane_port = bed.sock(BACKEND, 7100).to_string();
    let mut times = Vec::new();
    // 20 kills with the port left closed (the host refuses the lane port and answers "port
    // unreachable"), then 12 where the backend comes back (its stateless reset answers
    // the program's next call, after its pause; or the port's refusal before it is up).
    for trial in 0..RESTART_TRIALS.end {
        let mut backend = start_backend(&bed, dir.path(), "0");
        let log = dir.path().join(format!("program-{trial}.log"));
        let mut program =
            bed.spawn(0, &workspace_binary("ac-net-client"), &["work", "0", kill_pause(trial)], &env, &log);
        expect_line(&mut program, "round 0 ok", Duration::from_secs(10));
        // Round 0 copied 256 KiB each way, over the accelerator's lane: it is open now (a lane
        // that could not be dialed would have sent the copies over QUIC, with no TCP here).
        let lanes = bed.exec(0, "ss", &["-Htn", "state", "established", "dst", &lane_port], &[]);
        assert!(lanes.as_ref().is_ok_and(|l| !l.trim().is_empty()), "trial {trial}: no lane open: {lanes:?}");
        // Before the kill: its sockets close before `kill` has reaped it.
        let killed = Instant::now();
        backend.kill();
        let _restarted = RESTART_TRIALS.contains(&trial).then(|| {
            std::thread::sleep(restart_delay(trial));
            start_backend(&bed, dir.path(), "0")
        });
        let (took, line) = death_reported(&mut program, killed, trial);
        eprintln!("trial {trial}: {took:.3} s: {line}");
        times.push(took);
    }
    let mut kills = times[..RESTART_TRIALS.start].to_vec();
    kills.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&kills, 0.5), percentile(&kills, 0.99));
    eprintln!(
        "time to error after kill -9 with a lane open, 20 trials: p50 {p50:.3} s, p99 {p99:.3} s; with a restart: {:?}",
        &times[RESTART_TRIALS]
    );
    assert!(p99 <= KILL_NOTICE, "p99 {p99:.3} s over 20 kills, promised within {KILL_NOTICE} s: {kills:?}");
    let restarts = times[RESTART_TRIALS].iter().copied().fold(0.0, f64::max);
    assert!(restarts <= KILL_NOTICE, "a restarted backend told after {restarts:.3} s: {:?}", &times[RESTART_TRIALS]);
}

/// How soon a program blocked on a long kernel learns that its backend was killed and started
/// again on the same port. While it waits it sends nothing but a keep-alive every 2 s; the new
/// process knows nothing of the old connection and says so (a stateless reset) only to a packet
/// of it. What the code guarantees: the port watch (`ac_frontend`'s `watch.rs`) probes a backend
/// silent for a probe interval (0.25 s), checked every tick (50 ms), and a probe met by no
/// refusal within a tick sends the connection a datagram that earns the reset; an idle lane
/// closed by the kill is seen within a tick and does the same. So the error comes within an
/// interval and three ticks of the kill (0.4 s) plus scheduling: the bound asserted is twice
/// that. Before the datagram the error waited for the keep-alive: 2.0 s (a CI run's trial).
const RESTART_NOTICE: f64 = 0.8;

#[test]
fn a_program_waiting_on_a_kernel_learns_of_its_backends_restart_within_a_second() {
    need_netns!();
    let (bed, dir, env) = program_and_backend();
    let mut times = Vec::new();
    // Even trials with an idle lane open (a round's copies opened it), odd ones without.
    for trial in 0..6 {
        let lane = if trial % 2 == 0 { "1" } else { "0" };
        let mut backend = start_backend(&bed, dir.path(), "0");
        let log = dir.path().join(format!("waiting-{trial}.log"));
        let mut program = bed.spawn(0, &workspace_binary("ac-net-client"), &["kernel", "4096", lane], &env, &log);
        expect_line(&mut program, "waiting", Duration::from_secs(20));
        // Past a probe interval: the wait's request is answered by acknowledgements, and the
        // watch has probed the live backend at least once. The first trial waits for several
        // probes and baits, which a live backend must take without ending the session (an error
        // before the kill fails the trial).
        let wait = if trial == 0 { 2000 } else { 300 + 40 * trial as u64 };
        std::thread::sleep(Duration::from_millis(wait));
        // Before the kill: its sockets close before `kill` has reaped it.
        let killed = Instant::now();
        backend.kill();
        let _restarted = start_backend(&bed, dir.path(), "0");
        let (took, line) = death_reported(&mut program, killed, trial);
        eprintln!("trial {trial} (lane {lane}): {took:.3} s: {line}");
        times.push(took);
    }
    let worst = times.iter().copied().fold(0.0, f64::max);
    assert!(worst <= RESTART_NOTICE, "a waiting program told after {worst:.3} s: {times:?}");
}

/// Outages shorter than QUIC's idle timeout are survived by the connection itself; a longer
/// one, by resuming the session on a new connection (longer outages, their limits and
/// exactly-once: `tests/resumption.rs`).
#[test]
fn outages_shorter_than_the_idle_timeout_are_survived_and_a_longer_one_is_resumed() {
    need_netns!();
    let site = Site::start(4, "0,1", &[]);
    // Default transport (10 s idle timeout) on host 2; a 3 s idle timeout on host 3.
    let mut patient = site.program(PROGRAM, 1, &["work", "0", "50"], &[]);
    let short = [("AC_IDLE_TIMEOUT_MS", "3000".to_string()), ("AC_KEEP_ALIVE_MS", "1000".to_string())];
    let mut hasty = site.program(3, 1, &["work", "0", "50"], &short);
    for p in [&mut patient, &mut hasty] {
        expect_line(p, "round 1 ok", Duration::from_secs(20));
    }
    // 2 s: both survive.
    for h in [PROGRAM, 3] {
        site.bed.partition(h, BACKEND);
    }
    std::thread::sleep(Duration::from_secs(2));
    for h in [PROGRAM, 3] {
        site.bed.heal(h);
    }
    // A round begun after the heal ends: the session outlived the outage (a line printed
    // before the partition would not say mark 1). Not a timed claim: the round cut by the
    // partition waits for the retransmissions' backed-off timers first.
    let healed = Instant::now();
    site.mark(1);
    for (name, p) in [("patient", &mut patient), ("hasty", &mut hasty)] {
        let at = expect_round_after_mark(p, 1, Duration::from_secs(20));
        eprintln!(
            "{name}: a round begun after the 2 s outage ended {:.1} s after the heal",
            (at - healed).as_secs_f64()
        );
    }
    // 8 s: the default survives on its connection; the 3 s idle timeout loses it, and the
    // program resumes its session on a new one.
    for h in [PROGRAM, 3] {
        site.bed.partition(h, BACKEND);
    }
    std::thread::sleep(Duration::from_secs(8));
    for h in [PROGRAM, 3] {
        site.bed.heal(h);
    }
    let healed = Instant::now();
    site.mark(2);
    for (name, p) in [("patient", &mut patient), ("hasty", &mut hasty)] {
        let at = expect_round_after_mark(p, 2, Duration::from_secs(30));
        eprintln!(
            "{name}: a round begun after the 8 s outage ended {:.1} s after the heal",
            (at - healed).as_secs_f64()
        );
    }
    for (name, p, resumed) in [("patient", &mut patient, 0), ("hasty", &mut hasty, 1)] {
        let out = p.output();
        assert!(!out.contains("error") && !out.contains("wrong"), "{name} saw no error:\n{out}");
        let log = p.stderr();
        assert_eq!(log.matches("resumed after").count(), resumed, "{name}'s resumptions:\n{log}");
    }
}

#[test]
fn a_partition_between_manager_and_backend_keeps_programs_working_and_heals_within_a_second() {
    need_netns!();
    let site = Site::start(4, "0,1", &["--backend-timeout-ms", "1000"]);
    let mut first = site.program(PROGRAM, 1, &["work", "0", "50"], &[]);
    expect_line(&mut first, "round 0 ok", Duration::from_secs(20));
    site.bed.partition(BACKEND, ARM);
    let end = Instant::now() + Duration::from_secs(10);
    while site.host_state() != "down" {
        assert!(Instant::now() < end, "the host is never marked down");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The program talks to its backend directly: it goes on working, a round begun while the
    // host is down ends.
    site.mark(1);
    expect_round_after_mark(&mut first, 1, Duration::from_secs(5));
    // Nothing is granted from a host that is down: a second program waits, granted nothing.
    let mut second = site.program(3, 1, &["work", "0", "50"], &[]);
    assert!(second.wait_for("connected", Duration::from_secs(2)).is_none(), "nothing granted from a down host");
    site.bed.heal(BACKEND);
    let healed = Instant::now();
    while site.host_state() != "up" {
        assert!(healed.elapsed() < Duration::from_secs(5), "the host never comes back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let back = healed.elapsed().as_secs_f64();
    eprintln!("host back up {back:.3} s after the partition healed");
    assert!(back < 1.5, "host up {back:.3} s after healing");
    expect_line(&mut second, "round 0 ok", Duration::from_secs(20));
    // Each accelerator went to one job.
    let held: Vec<_> = site.accelerators().into_iter().filter_map(|(id, _, holder)| holder.map(|h| (id, h))).collect();
    assert_eq!(held.len(), 2, "{held:?}");
    assert_ne!(held[0].1, held[1].1, "two jobs, one accelerator each: {held:?}");
    site.mark(2);
    expect_round_after_mark(&mut first, 2, Duration::from_secs(5));
}

#[test]
fn a_vanished_program_frees_its_accelerators_and_memory_within_its_lease() {
    need_netns!();
    let lease_ms = 3000;
    let site = Site::start(3, "0,1", &["--lease-ms", &lease_ms.to_string()]);
    let mut program = site.program(PROGRAM, 2, &["hold", "64"], &[]);
    expect_line(&mut program, "holding", Duration::from_secs(20));
    assert!(site.accelerators().iter().all(|(_, state, _)| state == "allocated"));
    program.kill();
    let killed = Instant::now();
    let limit = Duration::from_millis(lease_ms + 1000);
    while !site.accelerators().iter().all(|(_, state, _)| state == "free") {
        assert!(killed.elapsed() < limit + Duration::from_secs(3), "never freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let freed = killed.elapsed();
    eprintln!("accelerators free {:.3} s after the program vanished (lease {lease_ms} ms)", freed.as_secs_f64());
    assert!(freed <= limit, "free after {freed:?}, promised within {limit:?}");
    let mut probe = site.program(PROGRAM, 2, &["memory"], &[]);
    for _ in 0..2 {
        let (_, line) = probe.wait_for("memory ", Duration::from_secs(10)).expect("memory line");
        let (free, total) = memory_numbers(&line);
        assert_eq!(free, total, "the vanished program's device memory is freed: {line}");
    }
}

#[test]
fn copies_are_exact_under_random_loss() {
    need_netns!();
    let site = Site::start(3, "0", &[]);
    for percent in [1, 5] {
        site.bed.loss(PROGRAM, percent);
        let mut program = site.program(PROGRAM, 1, &["work", "8", "0"], &[]);
        expect_line(&mut program, "done", Duration::from_secs(60));
        let output = program.output();
        assert!(!output.contains("error") && !output.contains("wrong"), "{percent}% loss:\n{output}");
        assert!(program.wait(Duration::from_secs(10)).is_some_and(|s| s.success()), "{output}");
        site.bed.heal(PROGRAM);
    }
}

#[test]
fn a_waiting_get_ends_at_its_deadline_whatever_the_manager_does() {
    need_netns!();
    let mut site = Site::start(3, "0", &[]);
    // The program holds the only accelerator: a further AC_Get waits, then is rejected.
    let mut program = site.program(PROGRAM, 1, &["get", "2000", "2", "2000"], &[]);
    let (_, line) = program.wait_for("after ", Duration::from_secs(10)).expect("first answer");
    let ms = after_ms(&line);
    eprintln!("a 2 s wait on a full pool: {line}");
    assert!(line.starts_with("rejected"), "{line}");
    assert!((2000..2100).contains(&ms), "a 2 s wait ends at its deadline, not before: {line}");
    // The manager dies during the pause: the second wait still ends at its deadline.
    site.stop_arm();
    let (_, line) = program.wait_for("after ", Duration::from_secs(10)).expect("second answer");
    let ms = after_ms(&line);
    eprintln!("a 2 s wait with the manager gone: {line}");
    assert!((2000..2500).contains(&ms), "the deadline holds with the manager gone: {line}");
}

/// Copies over a link shaped to 1 Gbit/s are exact; their rate is printed (a measurement for
/// `BENCHMARKS.md`, not a timed assertion: run with `--run-ignored only --no-capture`).
#[test]
#[ignore = "a measurement: cargo nextest run --run-ignored only -E 'test(shaped)' --no-capture"]
fn copies_over_a_shaped_link_measure_the_link() {
    need_netns!();
    let site = Site::start(3, "0", &[]);
    for rate in ["1gbit", "5gbit"] {
        site.bed.rate(PROGRAM, rate);
        let mut program = site.program(PROGRAM, 1, &["copy", "256", "3"], &[("AC_MTU", "1452".into())]);
        for _ in 0..3 {
            let (_, line) = program.wait_for("h2d ", Duration::from_secs(120)).expect("a copy");
            eprintln!("{rate} link, mtu 1452, 256 MiB: {line} (Mbit/s)");
        }
        assert!(program.wait(Duration::from_secs(10)).is_some_and(|s| s.success()), "{}", program.output());
    }
}

/// The bed's hosts take the TCP congestion control they are given (the net bench names the one
/// its figures were taken under); one the kernel does not know is refused with the kernel's
/// word, and the hosts keep what they had.
#[test]
fn a_bed_gives_its_hosts_a_congestion_control_and_reports_it() {
    need_netns!();
    let bed = Bed::new(2, 1500);
    // Reno is built into every kernel and allowed in every namespace.
    bed.set_congestion("reno").expect("reno on both hosts");
    for host in 0..2 {
        assert_eq!(bed.congestion(host).expect("read back"), "reno", "host {host}");
    }
    let refused = bed.set_congestion("no-such-algorithm").expect_err("an algorithm the kernel does not have");
    assert!(refused.contains("tcp_congestion_control"), "{refused}");
    assert_eq!(bed.congestion(0).expect("read back"), "reno");
}

fn after_ms(line: &str) -> u128 {
    let rest = line.split("after ").nth(1).expect("after MS");
    rest.split(':').next().and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("no time in {line}"))
}

/// A backend host whose firewall passes UDP only: programs cannot dial its bulk lanes, so their
/// large copies go over QUIC streams, exact.
#[test]
fn copies_use_quic_streams_when_the_lane_port_is_refused() {
    need_netns!();
    let (bed, dir, env) = program_and_backend();
    let _backend = start_backend(&bed, dir.path(), "0");
    bed.refuse_tcp(BACKEND, 7100);
    let log = dir.path().join("program.log");
    let mut program = bed.spawn(0, &workspace_binary("ac-net-client"), &["copy", "16", "2"], &env, &log);
    let status = program.wait(Duration::from_secs(60)).expect("the copies end");
    let output = program.output();
    assert!(status.success() && output.matches("h2d ").count() == 2, "{output}");
    assert!(bed.refused_tcp(BACKEND) >= 1, "the program tried a lane first");
}

/// A partition that falls on a copy on a bulk lane: the lane's TCP would retransmit for
/// minutes, but the copy ends with the session's QUIC connection, at the idle timeout; the
/// session is not resumed within the program's deadline (2 s here), and the copy ends with a
/// clear error. The backend, meanwhile, frees the session (and the lane with it) at its own
/// idle timeout and hold (2 s here), while the partition still stands: another host finds the
/// device's memory free.
#[test]
fn a_partition_during_a_lane_copy_ends_the_copy_past_the_hold_on_both_sides() {
    need_netns!();
    const PROBE: usize = 2;
    let bed = Bed::new(3, 1500);
    let dir = tempfile::tempdir().expect("temp dir");
    let _backend = start_backend_with(&bed, dir.path(), "0", &[("AC_BACKEND_SESSION_HOLD_MS", "2000".into())]);
    // 64 MiB at 40 Mbit/s: the first copy takes some 13 s, so the partition catches it.
    bed.rate(0, "40mbit");
    let mut env = backend_env(&bed, dir.path()).to_vec();
    env.extend([
        ("AC_IDLE_TIMEOUT_MS", "3000".to_string()),
        ("AC_KEEP_ALIVE_MS", "1000".to_string()),
        ("AC_RESUME_MS", "2000".to_string()),
    ]);
    let log = dir.path().join("program.log");
    let mut program = bed.spawn(0, &workspace_binary("ac-net-client"), &["copy", "64", "1"], &env, &log);
    expect_line(&mut program, "connected", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    let lanes = bed.exec(0, "ss", &["-Htn", "state", "established", "dst", &bed.sock(BACKEND, 7100).to_string()], &[]);
    assert!(lanes.as_ref().is_ok_and(|l| !l.trim().is_empty()), "the copy runs on a lane: {lanes:?}");
    bed.partition(0, BACKEND);
    let partitioned = Instant::now();
    let (at, error) = program.wait_for("error: ", Duration::from_secs(10)).unwrap_or_else(|| {
        panic!(
            "the copy did not end within 10 s of a partition, with a 3 s idle timeout and a 2 s deadline:\n{}",
            program.output()
        )
    });
    assert!(error.contains("could not be resumed within"), "a clear error: {error}");
    // Not before its deadline, which runs from the connection's loss, after the partition.
    assert!(at - partitioned >= Duration::from_secs(2), "gave up within its 2 s resume deadline");
    assert!(!program.output().contains("h2d "), "the partition fell on the first copy");
    eprintln!("the copy ended {:.1} s into the partition", (at - partitioned).as_secs_f64());
    // QUIC's idle timeout is the smaller of the two sides' (3 s): the backend's session is
    // held 2 s more, then ends too, and the lane and the 64 MiB with it.
    let deadline = partitioned + Duration::from_secs(30);
    let freed = loop {
        let (free, total) = device_memory(&bed, dir.path(), PROBE);
        if free == total {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "the partitioned session still holds memory after 30 s: {free} of {total}");
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("the backend freed the session {:.1} s into the partition", (freed - partitioned).as_secs_f64());
    // Not before its hold ran out: by the backend's own clock, from the connection's loss.
    let held = hold_logged(dir.path());
    assert!(held >= 2.0, "the backend held the session {held:.3} s, not its 2 s hold");
    eprintln!("the backend held the session {held:.3} s");
    bed.heal(0);
}
