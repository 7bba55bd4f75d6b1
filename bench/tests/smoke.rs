//! The benchmark must keep running: a quick pass of its in-process sections prints full tables.

/// What `ac-bench --quick --only SECTIONS` prints; fails the test if it fails.
fn quick_run(sections: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ac-bench"))
        .args(["--quick", "--only", sections])
        .output()
        .expect("ac-bench runs");
    assert!(out.status.success(), "ac-bench failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
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
