//! The soak in two minutes (`scripts/soak` runs it for 30): programs come and go, some killed
//! with `kill -9`, a backend restarted every 30 s, the manager once; between restarts and at
//! the end, quiet checkpoints of every daemon's memory and descriptors; then nothing may be
//! left behind. `ac_tests::soak` has the details, `Report::failures` the verdict.

use ac_tests::soak::{run, Config};

/// The smallest leak per program the 2-minute soak must still catch in the manager and in
/// `h0` (each bounded over about a minute of programs or more), KiB: what its report claims.
const CATCHES_KIB: f64 = 64.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_minutes_of_churn_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&Config::minutes(2.0), dir.path()).await;
    let text = report.render();
    println!("{text}");
    assert!(report.failures().is_empty(), "{text}");
    // What the verdict rests on, stated here too.
    let p = &report.programs;
    assert_eq!((p.wrong, p.crashed, p.hung), (0, 0, 0), "{text}");
    assert!(p.ok > 0 && p.killed > 0 && p.static_programs > 0 && p.dynamic_programs > 0, "{text}");
    assert!(p.unexplained.is_empty(), "{text}");
    assert_eq!((report.backend_restarts, report.manager_restarts), (3, 1), "{text}");
    assert!(report.leaked_accelerators.is_empty() && report.live_jobs.is_empty(), "{text}");
    assert_eq!(report.devices_checked, report.pool, "{text}");
    assert!(report.device_memory_in_use.is_empty(), "{text}");
    // Four checkpoints between restarts and one at the end; every daemon compared at two or
    // more, and the manager and h0 over enough programs to catch a leak of CATCHES_KIB each.
    assert_eq!(report.checkpoints.len(), 5, "{text}");
    for name in ["arm-server", "h0", "h1", "h2"] {
        assert!(report.daemons.iter().any(|d| d.name == name && d.compared()), "{name}: {text}");
    }
    for name in ["arm-server", "h0"] {
        let catches = report.daemons.iter().filter(|d| d.name == name).filter_map(|d| d.catches_per_program());
        assert!(catches.fold(f64::MAX, f64::min) <= CATCHES_KIB, "{name}: {text}");
    }
}
