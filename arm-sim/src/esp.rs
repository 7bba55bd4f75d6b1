//! Workload generators: the Dynamic ESP benchmark of Prabhakaran et al. (Table I) and a
//! synthetic workload of any size for speed tests.

use arm_sched::Time;

use crate::workload::{Evolve, SimJob, Workload};

/// One row of the paper's Table I.
#[derive(Debug, Clone, Copy)]
pub struct JobType {
    /// Type letter.
    pub name: &'static str,
    /// User number (`user01` is 1).
    pub user: u32,
    /// Fraction of the machine.
    pub fraction: f64,
    /// How many.
    pub count: u32,
    /// Static execution time, seconds.
    pub set: Time,
    /// Evolving (types F to J).
    pub evolving: bool,
}

/// Table I of the fairness paper.
pub const TABLE_I: [JobType; 14] = [
    JobType { name: "A", user: 1, fraction: 0.03125, count: 75, set: 267, evolving: false },
    JobType { name: "B", user: 2, fraction: 0.06250, count: 9, set: 322, evolving: false },
    JobType { name: "C", user: 3, fraction: 0.50000, count: 3, set: 534, evolving: false },
    JobType { name: "D", user: 4, fraction: 0.25000, count: 3, set: 616, evolving: false },
    JobType { name: "E", user: 5, fraction: 0.50000, count: 3, set: 315, evolving: false },
    JobType { name: "F", user: 6, fraction: 0.06250, count: 9, set: 1846, evolving: true },
    JobType { name: "G", user: 6, fraction: 0.12500, count: 6, set: 1334, evolving: true },
    JobType { name: "H", user: 6, fraction: 0.15820, count: 6, set: 1067, evolving: true },
    JobType { name: "I", user: 6, fraction: 0.03125, count: 24, set: 1432, evolving: true },
    JobType { name: "J", user: 6, fraction: 0.06250, count: 24, set: 725, evolving: true },
    JobType { name: "K", user: 7, fraction: 0.09570, count: 15, set: 487, evolving: false },
    JobType { name: "L", user: 8, fraction: 0.12500, count: 36, set: 366, evolving: false },
    JobType { name: "M", user: 9, fraction: 0.25000, count: 15, set: 187, evolving: false },
    JobType { name: "Z", user: 10, fraction: 1.00000, count: 2, set: 100, evolving: false },
];

/// Extra units an evolving job asks for.
pub const EXTRA_UNITS: u32 = 4;
/// Z jobs' own priority: above any queue-time factor the benchmark can reach.
pub const Z_PRIORITY: i64 = 1_000_000;

/// A job type's size on `units`: the fraction rounded to the nearest unit, halves up
/// (7.5 becomes 8), never less than 1.
pub fn size(fraction: f64, units: u32) -> u32 {
    ((fraction * f64::from(units)).round() as u32).max(1)
}

/// The Dynamic ESP workload on `units` units, in the submission order drawn from `seed`:
/// the 228 non-Z jobs shuffled, the first 50 at time 0, then one every 30 s; the two Z jobs
/// 30 minutes after the last. Walltimes equal static run times. Evolving jobs ask for 4
/// units at 16% of their static run time and retry once at 25%.
pub fn dynamic_esp(seed: u64, units: u32) -> Workload {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut types: Vec<&JobType> =
        TABLE_I.iter().filter(|t| t.name != "Z").flat_map(|t| std::iter::repeat_n(t, t.count as usize)).collect();
    rng.shuffle(&mut types);
    let mut jobs: Vec<SimJob> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let submit = if i < 50 { 0 } else { (i as Time - 49) * 30 };
            esp_job(i as u64 + 1, submit, t, units)
        })
        .collect();
    let z_time = jobs.last().map(|j| j.submit).unwrap_or(0) + 30 * 60;
    let z = TABLE_I.iter().find(|t| t.name == "Z").expect("Z is in Table I");
    for k in 0..z.count {
        let mut job = esp_job(jobs.len() as u64 + 1, z_time, z, units);
        job.priority = Z_PRIORITY - i64::from(k);
        job.exclusive = true;
        jobs.push(job);
    }
    Workload { max_procs: Some(units), jobs }
}

fn esp_job(id: u64, submit: Time, t: &JobType, units: u32) -> SimJob {
    let at_fraction = |f: f64| (t.set as f64 * f).round() as Time;
    SimJob {
        id,
        submit,
        size: size(t.fraction, units),
        runtime: t.set,
        walltime: t.set,
        user: t.user,
        group: 1,
        priority: 0,
        exclusive: false,
        kind: t.name.to_string(),
        evolve: t.evolving.then(|| Evolve {
            at: at_fraction(0.16),
            extra: EXTRA_UNITS,
            retry: Some(at_fraction(0.25)),
        }),
    }
}

/// A synthetic workload of `count` jobs on `units` units that keeps a long queue: sizes from
/// 1 to `units / 4` (mostly small), run times from 1 minute to 4 hours, walltimes 1 to 3
/// times the run time, arrivals a little faster than the machine drains them, and 10% of
/// the jobs evolving.
pub fn synthetic(count: usize, units: u32, seed: u64) -> Workload {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut submit: Time = 0;
    let jobs = (0..count)
        .map(|i| {
            let size = if rng.u8(..) < 200 { rng.u32(1..=8.min(units)) } else { rng.u32(1..=(units / 4).max(1)) };
            let runtime = rng.u64(60..4 * 3600);
            let walltime = runtime + rng.u64(0..=2 * runtime);
            // Mean work per job is about size * runtime; arrive slightly faster than drained.
            let gap = (size as f64 * runtime as f64 / f64::from(units) * 0.9 * rng.f64() * 2.0) as Time;
            submit += gap;
            let evolve =
                (rng.u8(..) < 26).then(|| Evolve { at: runtime / 6, extra: rng.u32(1..=4), retry: Some(runtime / 4) });
            SimJob {
                id: i as u64 + 1,
                submit,
                size,
                runtime,
                walltime,
                user: rng.u32(1..=50),
                group: rng.u32(1..=5),
                priority: 0,
                exclusive: false,
                kind: String::new(),
                evolve,
            }
        })
        .collect();
    Workload { max_procs: Some(units), jobs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_esp_workload_has_the_papers_shape() {
        let w = dynamic_esp(1, 120);
        assert_eq!(w.jobs.len(), 230);
        assert_eq!(w.jobs.iter().filter(|j| j.evolve.is_some()).count(), 69);
        assert_eq!(w.jobs.iter().filter(|j| j.submit == 0).count(), 50);
        let last = w.jobs[227].submit;
        assert_eq!(last, 178 * 30);
        assert!(w.jobs[228..].iter().all(|j| j.kind == "Z" && j.submit == last + 1800 && j.size == 120));
        assert_ne!(dynamic_esp(2, 120).jobs, w.jobs, "seeds change the order");
        assert_eq!(dynamic_esp(1, 120), w, "and only the seed does");
        // Rounding: 0.0625 * 120 = 7.5 -> 8; 0.1582 * 120 = 18.98 -> 19; 0.0957 * 120 = 11.48 -> 11.
        assert_eq!((size(0.0625, 120), size(0.1582, 120), size(0.0957, 120)), (8, 19, 11));
    }
}
