//! The Dynamic ESP experiment: the fairness paper's four configurations, and ours, each over
//! several submission orders.

use std::collections::BTreeMap;
use std::fmt::Write;

use arm_sched::Config;

use crate::engine::{simulate, Behaviour, SimResult};
use crate::esp::dynamic_esp;
use crate::metrics::Metrics;
use crate::SimError;

/// A named configuration file, shipped in `arm-sim/configs/`.
#[derive(Debug, Clone, Copy)]
pub struct Named {
    /// Name in tables.
    pub name: &'static str,
    /// TOML text.
    pub text: &'static str,
    /// The paper's Table II row: minutes, satisfied, utilisation %, jobs/min.
    pub paper: Option<(f64, u32, f64, f64)>,
}

/// The paper's configurations and ours.
pub const CONFIGS: [Named; 7] = [
    Named { name: "Static", text: include_str!("../configs/static.toml"), paper: Some((265.78, 0, 77.45, 0.86)) },
    Named { name: "Dyn-HP", text: include_str!("../configs/dyn-hp.toml"), paper: Some((238.78, 43, 85.02, 0.96)) },
    Named { name: "Dyn-500", text: include_str!("../configs/dyn-500.toml"), paper: Some((248.85, 20, 82.26, 0.92)) },
    Named { name: "Dyn-600", text: include_str!("../configs/dyn-600.toml"), paper: Some((241.06, 27, 83.57, 0.95)) },
    Named { name: "Dyn-Plan (ours)", text: include_str!("../configs/dyn-plan.toml"), paper: None },
    Named { name: "Dyn-Elastic (ours)", text: include_str!("../configs/dyn-elastic.toml"), paper: None },
    Named { name: "Dyn-Malleable (ours)", text: include_str!("../configs/dyn-malleable.toml"), paper: None },
];

/// Reads a simulation configuration: the scheduler's TOML, plus an optional `[sim]` table
/// for the applications' behaviour.
pub fn parse_config(text: &str) -> Result<(Config, Behaviour), SimError> {
    let bad = |e: toml::de::Error| SimError::Config(e.to_string());
    let mut table: toml::Table = text.parse().map_err(bad)?;
    let behaviour = match table.remove("sim") {
        Some(value) => value.try_into().map_err(bad)?,
        None => Behaviour::default(),
    };
    let config = toml::Value::Table(table).try_into().map_err(bad)?;
    Ok((config, behaviour))
}

/// One configuration's runs.
#[derive(Debug, Clone)]
pub struct Row {
    /// The configuration.
    pub config: Named,
    /// Metrics per seed.
    pub runs: Vec<Metrics>,
}

/// Runs every configuration over `seeds` on `units` units. Returns the rows and, per
/// configuration, the full result of the first seed (for plots).
pub fn reproduce(seeds: &[u64], units: u32) -> Result<(Vec<Row>, BTreeMap<&'static str, SimResult>), SimError> {
    let mut rows = Vec::new();
    let mut first = BTreeMap::new();
    for named in CONFIGS {
        let (config, behaviour) = parse_config(named.text)?;
        let mut runs = Vec::new();
        for (k, seed) in seeds.iter().enumerate() {
            let result = simulate(&dynamic_esp(*seed, units), config.clone(), units, behaviour, &mut |_| {})?;
            runs.push(Metrics::of(&result));
            if k == 0 {
                first.insert(named.name, result);
            }
        }
        rows.push(Row { config: named, runs });
    }
    Ok((rows, first))
}

fn stat(values: impl Iterator<Item = f64> + Clone) -> (f64, f64, f64) {
    let n = values.clone().count().max(1) as f64;
    let mean = values.clone().sum::<f64>() / n;
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    (mean, lo, hi)
}

/// A Markdown table in the shape of the paper's Table II, with our means and ranges beside
/// the paper's numbers, and the extra columns the issue asks for.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Config | Time [min] (paper) | Satisfied dyn jobs (paper) | Util [%] (paper) | Throughput [jobs/min] (paper) | \
         Throughput increase (paper) | Mean wait [min] | Max wait [min] | Backfilled | Worst delay to one user in one hour [s] |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let base = rows.first().map(|r| stat(r.runs.iter().map(|m| m.throughput_per_min)).0).unwrap_or(1.0);
    for row in rows {
        let f = |pick: &dyn Fn(&Metrics) -> f64, digits: usize| {
            let (m, lo, hi) = stat(row.runs.iter().map(pick));
            format!("{m:.digits$} [{lo:.digits$}–{hi:.digits$}]")
        };
        let paper = row.config.paper;
        let p = |v: Option<String>| v.map(|v| format!(" ({v})")).unwrap_or_default();
        let tp = stat(row.runs.iter().map(|m| m.throughput_per_min)).0;
        let increase =
            if row.config.name == "Static" { "–".to_string() } else { format!("{:+.1}%", 100.0 * (tp / base - 1.0)) };
        let paper_increase =
            paper.filter(|_| row.config.name != "Static").map(|p| format!("{:+.1}%", 100.0 * (p.3 / 0.86 - 1.0)));
        let _ = writeln!(
            out,
            "| {} | {}{} | {}{} | {}{} | {}{} | {}{} | {} | {} | {} | {} |",
            row.config.name,
            f(&|m| m.makespan_min, 2),
            p(paper.map(|p| format!("{:.2}", p.0))),
            f(&|m| m.dyn_satisfied as f64, 1),
            p(paper.map(|p| p.1.to_string())),
            f(&|m| m.utilisation_pct, 2),
            p(paper.map(|p| format!("{:.2}", p.2))),
            f(&|m| m.throughput_per_min, 3),
            p(paper.map(|p| format!("{:.2}", p.3))),
            increase,
            p(paper_increase),
            f(&|m| m.mean_wait_s / 60.0, 1),
            f(&|m| m.max_wait_s as f64 / 60.0, 1),
            f(&|m| m.backfilled as f64, 1),
            f(&|m| m.worst_interval_delay_s, 0),
        );
    }
    out
}
