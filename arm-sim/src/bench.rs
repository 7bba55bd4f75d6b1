//! Speed of the scheduling core under load (the targets): a scheduling pass with
//! 10,000 queued and 1,000 running jobs, a dynamic decision under that load, one Dynamic ESP
//! simulation, and a 100,000-job synthetic workload.

use std::time::{Duration, Instant};

use arm_sched::{Backfill, Config, DynPolicy, DynRequest, JobSpec, Scheduler, Seconds, Time, Unit};
use serde::Serialize;

use crate::engine::simulate;
use crate::esp::{dynamic_esp, synthetic};
use crate::experiment::{parse_config, CONFIGS};
use crate::SimError;

/// Percentiles of a set of timings, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// What was timed.
    pub what: String,
    /// Samples.
    pub samples: usize,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Slowest.
    pub max_us: f64,
}

fn timing(what: &str, mut samples: Vec<Duration>) -> Timing {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    Timing { what: what.into(), samples: samples.len(), p50_us: at(0.5), p99_us: at(0.99), max_us: at(1.0) }
}

/// A loaded pool: `running` jobs holding nearly every unit and `queued` jobs waiting, at time
/// `NOW`.
pub fn loaded(config: Config, queued: usize, running: usize, seed: u64) -> Scheduler {
    let mut rng = fastrand::Rng::with_seed(seed);
    let units = running as u32 * 3 + 64;
    let mut s = Scheduler::new(config);
    for i in 0..units {
        s.add_unit(Unit { host: format!("h{}", i / 8), labels: Vec::new() });
    }
    let spec = |id: u64, size: u32, walltime: Time, user: u32| JobSpec {
        id,
        user: format!("u{user}"),
        group: format!("g{}", user % 10),
        size,
        walltime: Some(walltime),
        ..Default::default()
    };
    let mut next = 0u32;
    for id in 0..running as u64 {
        let size = rng.u32(2..=4);
        let units: Vec<u32> = (next..next + size).collect();
        next += size;
        let job = spec(id, size, rng.u64(600..86_400), rng.u32(0..100));
        s.insert_running(job, 0, NOW - rng.u64(0..600), &units).expect("fits by construction");
    }
    for k in 0..queued as u64 {
        let size = if rng.bool() { rng.u32(1..=8) } else { rng.u32(8..=256) };
        s.submit(spec(running as u64 + k, size, rng.u64(600..86_400), rng.u32(0..100)), NOW - rng.u64(0..3600))
            .expect("valid job");
    }
    s
}

const NOW: Time = 1_000_000;

fn config(backfill: Backfill, policy: DynPolicy) -> Config {
    let mut c = Config::default();
    c.queue.backfill = backfill;
    c.queue.reservation_depth = 5;
    c.dynamic.policy = policy;
    c.dynamic.reservation_delay_depth = 5;
    c.dynamic.default.target_delay = Some(Seconds(500));
    c
}

/// Runs every measurement. `quick` uses fewer repetitions and a 10,000-job synthetic workload.
pub fn run(quick: bool) -> Result<Vec<Timing>, SimError> {
    let reps = if quick { 5 } else { 30 };
    let mut out = Vec::new();
    for backfill in [Backfill::Easy, Backfill::Conservative] {
        let base = loaded(config(backfill, DynPolicy::TargetDelay), 10_000, 1_000, 7);
        let samples = (0..reps)
            .map(|_| {
                let mut s = base.clone();
                let t = Instant::now();
                std::hint::black_box(s.schedule(NOW));
                t.elapsed()
            })
            .collect();
        out.push(timing(&format!("scheduling pass, {backfill:?}, 10,000 queued + 1,000 running"), samples));
    }
    let mut settled = loaded(config(Backfill::Easy, DynPolicy::TargetDelay), 10_000, 1_000, 7);
    settled.schedule(NOW);
    // Free a few units without a pass, as when jobs have just ended: the decision then has
    // idle units to weigh against the queue's reservations, its expensive case.
    for id in 0..8 {
        settled.finish(id, NOW).expect("running");
    }
    let plan = (0..reps.min(5))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(settled.plan(NOW));
            t.elapsed()
        })
        .collect();
    out.push(timing("planning view of all 10,000 queued jobs", plan));
    let idle = settled.idle_units();
    for policy in [DynPolicy::TargetDelay, DynPolicy::HighestPriority] {
        let mut settled = settled.clone();
        settled.set_config(config(Backfill::Easy, policy));
        let mut samples = Vec::new();
        for i in 0..(if quick { 200 } else { 2000 }) {
            let mut s = settled.clone();
            let req = DynRequest { id: i, job: 8 + i % 992, min: 1, max: 4, ..Default::default() };
            let t = Instant::now();
            let answer = s.request(req, NOW + 1)?;
            samples.push(t.elapsed());
            std::hint::black_box(answer);
        }
        out.push(timing(&format!("dynamic decision ({policy:?}) under that load, {idle} idle units"), samples));
    }
    for name in ["Static", "Dyn-HP", "Dyn-Plan (ours)"] {
        let named = CONFIGS.iter().find(|c| c.name == name).expect("known");
        let (config, behaviour) = parse_config(named.text)?;
        let workload = dynamic_esp(1, 120);
        let mut samples = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            simulate(&workload, config.clone(), 120, behaviour, &mut |_| {})?;
            samples.push(t.elapsed());
        }
        out.push(timing(&format!("Dynamic ESP end to end, {name}"), samples));
    }
    let jobs = if quick { 10_000 } else { 100_000 };
    let workload = synthetic(jobs, 1024, 1);
    let (config, behaviour) = parse_config(CONFIGS[2].text)?;
    let t = Instant::now();
    let result = simulate(&workload, config, 1024, behaviour, &mut |_| {})?;
    let elapsed = t.elapsed();
    let m = crate::metrics::Metrics::of(&result);
    out.push(Timing {
        what: format!(
            "synthetic {jobs}-job SWF workload, 1,024 units, Dyn-500 (mean wait {:.0} min, {} dynamic requests)",
            m.mean_wait_s / 60.0,
            m.dyn_requests
        ),
        samples: 1,
        p50_us: elapsed.as_secs_f64() * 1e6,
        p99_us: elapsed.as_secs_f64() * 1e6,
        max_us: elapsed.as_secs_f64() * 1e6,
    });
    Ok(out)
}
