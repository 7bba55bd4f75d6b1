//! Small simulations whose metrics are checked, through the library and the real binary.

use std::process::Command;

use arm_sim::engine::simulate;
use arm_sim::esp::dynamic_esp;
use arm_sim::experiment::{parse_config, CONFIGS};
use arm_sim::metrics::Metrics;

fn run(config: &str, seed: u64) -> Metrics {
    let named = CONFIGS.iter().find(|c| c.name == config).expect("known configuration");
    let (config, behaviour) = parse_config(named.text).unwrap();
    let result = simulate(&dynamic_esp(seed, 120), config, 120, behaviour, &mut |_| {}).unwrap();
    Metrics::of(&result)
}

#[test]
fn dynamic_esp_runs_to_completion_with_sane_metrics() {
    let stat = run("Static", 1);
    assert_eq!((stat.jobs, stat.completed), (230, 230));
    // Table I's work is 1,348,971 unit-seconds: 187.4 minutes on 120 units at best.
    assert!(stat.makespan_min > 187.4 && stat.makespan_min < 300.0, "{stat:?}");
    assert!(stat.utilisation_pct > 60.0 && stat.utilisation_pct < 100.0, "{stat:?}");
    assert_eq!((stat.dyn_requests, stat.dyn_satisfied), (0, 0), "Static: nobody asks");
    assert!(stat.backfilled > 0);

    let hp = run("Dyn-HP", 1);
    assert_eq!(hp.completed, 230);
    assert_eq!(hp.dyn_jobs, 69, "every evolving job asks");
    assert!(hp.dyn_satisfied > 10 && hp.dyn_satisfied <= 69, "{hp:?}");
    assert!(hp.makespan_min < stat.makespan_min, "growing jobs finish sooner: {hp:?} vs {stat:?}");
}

#[test]
fn fairness_limits_hold_in_the_simulation() {
    for seed in 1..=3 {
        for (name, limit) in [("Dyn-500", 500.0), ("Dyn-600", 600.0), ("Dyn-Plan (ours)", 500.0)] {
            let m = run(name, seed);
            assert!(m.worst_interval_delay_s <= limit, "{name} seed {seed}: {m:?}");
            assert_eq!(m.completed, 230);
        }
    }
    let hp: Vec<Metrics> = (1..=3).map(|s| run("Dyn-HP", s)).collect();
    assert!(hp.iter().any(|m| m.worst_interval_delay_s > 500.0), "HP ignores the limit somewhere: {hp:?}");
}

#[test]
fn elastic_and_malleable_grants_are_reclaimed_and_every_job_completes() {
    for seed in 1..=3 {
        for name in ["Dyn-Elastic (ours)", "Dyn-Malleable (ours)"] {
            let named = CONFIGS.iter().find(|c| c.name == name).unwrap();
            let (config, behaviour) = parse_config(named.text).unwrap();
            let result = simulate(&dynamic_esp(seed, 120), config, 120, behaviour, &mut |_| {}).unwrap();
            let m = Metrics::of(&result);
            assert_eq!(m.completed, 230, "{name} seed {seed}");
            assert!(result.reclaims > 0, "{name} seed {seed}: queued jobs reclaimed lent units");
            assert_eq!(result.revoked, 0, "the simulated programs give units back in time");
            let extra_held = result.jobs.iter().map(|j| j.granted - j.reclaimed).max().unwrap();
            assert!(extra_held > 0, "{name}: some job kept lent units to its end");
            if name.starts_with("Dyn-Malleable") {
                let widest = result.jobs.iter().filter(|j| j.size > 4).map(|j| j.granted).max().unwrap();
                assert!(widest > 4, "malleable jobs grow beyond the 4 units of an evolving request");
            }
        }
    }
}

#[test]
fn the_cli_compares_two_configurations_paired() {
    let sim = env!("CARGO_BIN_EXE_arm-sim");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/");
    let out = Command::new(sim)
        .args(["compare", "--seeds", "1-4", "--baseline"])
        .arg(format!("{dir}dyn-hp.toml"))
        .arg("--config")
        .arg(format!("{dir}dyn-elastic.toml"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["makespan_min"]["n"], 4);
    assert_eq!(json["wait_by_type_s"].as_object().unwrap().len(), 14, "every ESP job type");
    assert!((json["lower_bound_min"].as_f64().unwrap() - 187.36).abs() < 0.1);
    let bad = Command::new(sim).args(["compare", "--seeds", "7", "--baseline", "x", "--config", "y"]).output().unwrap();
    assert!(!bad.status.success());
}

#[test]
fn the_cli_replays_a_workload_it_wrote() {
    let dir = std::env::temp_dir().join(format!("arm-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sim = env!("CARGO_BIN_EXE_arm-sim");
    let swf = dir.join("esp.swf");
    let ok = Command::new(sim).args(["esp", "--seed", "3", "--out"]).arg(&swf).status().unwrap();
    assert!(ok.success());
    let out = dir.join("out");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/dyn-500.toml");
    let run = Command::new(sim)
        .args(["run", "--config", config, "--workload"])
        .arg(&swf)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let metrics: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["completed"], 230);
    assert!(std::fs::read_to_string(out.join("utilisation.svg")).unwrap().starts_with("<svg"));
    let bad = Command::new(sim).args(["run", "--workload", config, "--out"]).arg(&out).output().unwrap();
    assert!(!bad.status.success(), "a TOML file is not a workload");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line"));
    std::fs::remove_dir_all(&dir).unwrap();
}
