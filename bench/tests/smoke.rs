//! The benchmark must keep running: a quick pass of its in-process sections prints full tables;
//! and its load section must fail on what it claims to count (and `holdings.rs`'s unit test
//! of how it counts double grants runs here, and `stats.rs`'s of its medians: the binary has no
//! test harness).

#[path = "../src/holdings.rs"]
#[allow(dead_code)]
mod holdings;
#[path = "../src/stats.rs"]
#[allow(dead_code)]
mod stats;

/// What `ac-bench --quick --only SECTIONS` prints; fails the test if it fails.
fn quick_run(sections: &str) -> String {
    run_bench(&["--quick", "--only", sections])
}

/// What `ac-bench ARGS` prints; fails the test if it fails.
fn run_bench(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ac-bench")).args(args).output().expect("ac-bench runs");
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ac-bench failed: {err}\n{text}");
    text.into_owned()
}

#[test]
fn quick_in_process_sections_print_their_tables() {
    let text = quick_run("copies,tuning");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| 16 MiB") || l.starts_with("| quinn") || l.starts_with("| default"))
        .collect();
    assert_eq!(rows.len(), 5 + 2, "unexpected tables:\n{text}");
    for row in rows {
        let rate: f64 =
            row.split('|').nth(if row.starts_with("| 16") { 5 } else { 2 }).unwrap().trim().parse().unwrap();
        assert!(rate > 1.0, "no throughput measured in {row}");
    }
}

#[test]
fn quick_record_layer_section_measures_both_ways_of_sealing_and_opening() {
    let text = quick_run("records");
    let rates: Vec<f64> = ["| copy each", "| seal from", "| open in place"]
        .iter()
        .map(|start| {
            let row = text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start} row:\n{text}"));
            row.split('|').nth(2).unwrap().trim().parse().unwrap()
        })
        .collect();
    assert!(rates.iter().all(|&r| r > 0.05), "no rate measured: {rates:?}\n{text}");
}

/// The value in the load table's row that starts with `measure`, as a number.
fn load_row(text: &str, measure: &str) -> u64 {
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| {measure}")))
        .unwrap_or_else(|| panic!("no {measure} row:\n{text}"));
    row.split('|').nth(2).unwrap().trim().parse().unwrap_or_else(|_| panic!("not a count: {row}"))
}

/// A short saturated load, each grant held 10 ms: no error and no double grant, or the run
/// fails. And it does fail on double grants: programs that free before they stop holding (a
/// fault of the bench's, `--load-order free-then-hold`) see the manager grant their
/// accelerator to another program during the hold, as a double grant of the manager's would.
#[test]
fn a_short_load_counts_no_double_grant_and_fails_on_one() {
    let args = ["--quick", "--only", "load", "--load-runs", "saturated", "--load-seconds", "2", "--load-hold-ms", "10"];
    let text = run_bench(&args);
    assert!(load_row(&text, "pairs (granted") > 0, "no grant freed:\n{text}");
    assert_eq!(load_row(&text, "errors"), 0, "{text}");
    assert_eq!(load_row(&text, "double grants"), 0, "{text}");

    let faulty = std::process::Command::new(env!("CARGO_BIN_EXE_ac-bench"))
        .args(args)
        .args(["--load-order", "free-then-hold"])
        .output()
        .expect("ac-bench runs");
    let (text, err) = (String::from_utf8_lossy(&faulty.stdout), String::from_utf8_lossy(&faulty.stderr));
    assert!(!faulty.status.success(), "double grants and still a success:\n{text}");
    assert!(load_row(&text, "double grants") > 0, "{text}");
    assert!(err.contains("double grants"), "{err}");
}
