//! Paired comparisons: a candidate configuration against a baseline on the same Dynamic ESP
//! submission orders, with the mean difference, its standard error and the wins, overall and
//! per job type. Pairing by order removes most of the order-to-order spread (12-16 min of
//! makespan), which is larger than the differences between policies.

use std::collections::BTreeMap;
use std::fmt::Write;

use arm_sched::{Config, Time};
use serde::Serialize;

use crate::engine::{simulate, Behaviour, SimResult};
use crate::esp::dynamic_esp;
use crate::metrics::Metrics;
use crate::SimError;

/// A configuration and how its applications behave.
pub type Setup = (Config, Behaviour);

/// One metric over the paired runs: candidate minus baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Paired {
    /// The baseline's mean.
    pub baseline: f64,
    /// The candidate's mean.
    pub candidate: f64,
    /// Mean of the per-order differences (candidate - baseline).
    pub diff: f64,
    /// Standard error of that mean.
    pub se: f64,
    /// Orders on which the candidate is lower (better, for times).
    pub lower: usize,
    /// Orders compared.
    pub n: usize,
}

impl Paired {
    /// From per-order (baseline, candidate) values.
    pub fn of(pairs: &[(f64, f64)]) -> Self {
        let n = pairs.len();
        let mean = |f: &dyn Fn(&(f64, f64)) -> f64| pairs.iter().map(f).sum::<f64>() / n.max(1) as f64;
        let diff = mean(&|p| p.1 - p.0);
        let var = pairs.iter().map(|p| (p.1 - p.0 - diff).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
        Self {
            baseline: mean(&|p| p.0),
            candidate: mean(&|p| p.1),
            diff,
            se: (var / n.max(1) as f64).sqrt(),
            lower: pairs.iter().filter(|p| p.1 < p.0).count(),
            n,
        }
    }

    /// The candidate is lower by more than two standard errors.
    pub fn clearly_lower(&self) -> bool {
        self.diff < -2.0 * self.se
    }
}

/// The candidate against the baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Units of the machine.
    pub units: u32,
    /// Makespan, minutes.
    pub makespan_min: Paired,
    /// Mean wait, seconds.
    pub mean_wait_s: Paired,
    /// Mean wait per job type, seconds.
    pub wait_by_type_s: BTreeMap<String, Paired>,
    /// The work over the units: no schedule ends sooner (minutes).
    pub lower_bound_min: f64,
    /// Evolving jobs that got units, candidate's mean per order.
    pub satisfied: f64,
    /// Reclaims per order, candidate's mean.
    pub reclaims: f64,
    /// Units revoked per order, candidate's mean.
    pub revoked: f64,
    /// Idle unit-seconds per order (units free while jobs waited or not), candidate's mean.
    pub idle_unit_s: f64,
}

/// Runs both setups on the Dynamic ESP orders of `seeds` on `units` units.
pub fn compare(baseline: &Setup, candidate: &Setup, seeds: &[u64], units: u32) -> Result<Comparison, SimError> {
    let mut makespan = Vec::new();
    let mut wait = Vec::new();
    let mut by_type: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let (mut satisfied, mut reclaims, mut revoked, mut idle, mut work) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &seed in seeds {
        let workload = dynamic_esp(seed, units);
        work = workload.jobs.iter().map(|j| f64::from(j.size) * j.runtime as f64).sum::<f64>();
        let a = simulate(&workload, baseline.0.clone(), units, baseline.1, &mut |_| {})?;
        let b = simulate(&workload, candidate.0.clone(), units, candidate.1, &mut |_| {})?;
        let (ma, mb) = (Metrics::of(&a), Metrics::of(&b));
        makespan.push((ma.makespan_min, mb.makespan_min));
        wait.push((ma.mean_wait_s, mb.mean_wait_s));
        let (wa, wb) = (waits_by_type(&a), waits_by_type(&b));
        for (kind, w) in wa {
            by_type.entry(kind.clone()).or_default().push((w, wb[&kind]));
        }
        satisfied += mb.dyn_satisfied as f64;
        reclaims += b.reclaims as f64;
        revoked += b.revoked as f64;
        idle += idle_unit_seconds(&b);
    }
    let n = seeds.len().max(1) as f64;
    Ok(Comparison {
        units,
        makespan_min: Paired::of(&makespan),
        mean_wait_s: Paired::of(&wait),
        wait_by_type_s: by_type.into_iter().map(|(k, v)| (k, Paired::of(&v))).collect(),
        lower_bound_min: work / f64::from(units) / 60.0,
        satisfied: satisfied / n,
        reclaims: reclaims / n,
        revoked: revoked / n,
        idle_unit_s: idle / n,
    })
}

fn waits_by_type(result: &SimResult) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for job in &result.jobs {
        if let Some(w) = job.wait() {
            let entry = sums.entry(job.kind.clone()).or_default();
            entry.0 += w as f64;
            entry.1 += 1.0;
        }
    }
    sums.into_iter().map(|(k, (sum, count))| (k, sum / count)).collect()
}

/// Unit-seconds no job held, from the first submission to the last end.
fn idle_unit_seconds(result: &SimResult) -> f64 {
    let busy: f64 = result.busy.windows(2).map(|w| f64::from(w[0].1) * (w[1].0 - w[0].0) as f64).sum();
    let first = result.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last: Time = result.jobs.iter().filter_map(|j| j.end).max().unwrap_or(first);
    f64::from(result.units) * (last - first) as f64 - busy
}

/// The comparison as Markdown: the two headline metrics, then waits per job type.
pub fn report(c: &Comparison, baseline: &str, candidate: &str) -> String {
    let mut out = String::new();
    let row = |out: &mut String, what: &str, p: &Paired, unit: &str| {
        let verdict = if p.clearly_lower() { "lower by > 2 SE" } else { "not clearly lower" };
        let _ = writeln!(
            out,
            "| {what} | {:.2} {unit} | {:.2} {unit} | {:+.2} ± {:.2} {unit} | {}/{} | {verdict} |",
            p.baseline, p.candidate, p.diff, p.se, p.lower, p.n
        );
    };
    let _ = writeln!(out, "{candidate} against {baseline}, {} units, {} orders\n", c.units, c.makespan_min.n);
    let _ = writeln!(out, "| metric | {baseline} | {candidate} | difference ± SE | orders lower | |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    row(&mut out, "makespan", &c.makespan_min, "min");
    row(&mut out, "mean wait", &c.mean_wait_s, "s");
    for (kind, p) in &c.wait_by_type_s {
        row(&mut out, &format!("mean wait, type {kind}"), p, "s");
    }
    let _ = writeln!(
        out,
        "\nLower bound {:.1} min (makespan {:.1}% above it); satisfied evolving jobs {:.1}; reclaims {:.1}, \
         revoked units {:.1}, idle unit-seconds {:.0} per order.",
        c.lower_bound_min,
        100.0 * (c.makespan_min.candidate / c.lower_bound_min - 1.0),
        c.satisfied,
        c.reclaims,
        c.revoked,
        c.idle_unit_s
    );
    out
}
