//! Property tests of the scheduling core's invariants, over random operation sequences.

use arm_sched::{
    Backfill, Config, DynOutcome, DynPolicy, DynRequest, Event, JobSpec, Limits, Planned, Scheduler, Seconds, Time,
    Unit,
};
use proptest::prelude::*;

const UNITS: u32 = 12;
const USERS: [&str; 3] = ["p", "q", "r"];

#[derive(Debug, Clone)]
enum Op {
    Submit { size: u32, walltime: Time, user: usize, extra_peak: u32, exclusive: bool },
    Advance(Time),
    Finish(usize),
    Request { job: usize, min: u32, extra: u32, preemptible: bool, timeout: Time },
    Release { job: usize, count: usize },
    Usable { unit: u32, usable: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=8u32, 10..500u64, 0..3usize, prop_oneof![4 => Just(0u32), 1 => 1..3u32], prop::bool::weighted(0.05))
            .prop_map(|(size, walltime, user, extra_peak, exclusive)| Op::Submit { size, walltime, user, extra_peak, exclusive }),
        3 => (0..120u64).prop_map(Op::Advance),
        2 => (0..64usize).prop_map(Op::Finish),
        3 => (0..64usize, 1..4u32, 0..3u32, prop::bool::weighted(0.2), prop_oneof![3 => Just(0u64), 1 => 1..200u64])
            .prop_map(|(job, min, extra, preemptible, timeout)| Op::Request { job, min, extra, preemptible, timeout }),
        1 => (0..64usize, 1..3usize).prop_map(|(job, count)| Op::Release { job, count }),
        1 => (0..UNITS, prop::bool::weighted(0.7)).prop_map(|(unit, usable)| Op::Usable { unit, usable }),
    ]
}

fn scheduler(config: Config) -> Scheduler {
    let mut s = Scheduler::new(config);
    for i in 0..UNITS {
        s.add_unit(Unit { host: format!("h{}", i / 4), labels: vec![] });
    }
    s
}

/// Applies one operation; calls `observe` around each dynamic request. Returns the events.
fn apply(
    s: &mut Scheduler,
    op: &Op,
    now: &mut Time,
    ids: &mut Vec<u64>,
    observe: &mut dyn FnMut(&Scheduler, &DynRequest, &DynOutcome, &Scheduler),
) -> Vec<Event> {
    let mut events = Vec::new();
    match *op {
        Op::Submit { size, walltime, user, extra_peak, exclusive } => {
            let id = (ids.len() as u64 + 1) * 4 + user as u64;
            let peak = (extra_peak > 0).then_some(size + extra_peak);
            let spec = JobSpec {
                id,
                user: USERS[user].into(),
                group: format!("g{user}"),
                size,
                walltime: Some(walltime),
                priority: if exclusive { 1000 } else { 0 },
                exclusive,
                peak,
                ..Default::default()
            };
            if s.submit(spec, *now).is_ok() {
                ids.push(id);
            }
        }
        Op::Advance(dt) => *now += dt,
        Op::Finish(i) => {
            if let Some(&id) = ids.get(i) {
                let _ = s.finish(id, *now);
            }
        }
        Op::Request { job, min, extra, preemptible, timeout } => {
            if let Some(&id) = ids.get(job) {
                let req = DynRequest {
                    id: job as u64,
                    job: id,
                    min,
                    max: min + extra,
                    preemptible,
                    timeout,
                    ..Default::default()
                };
                let before = s.clone();
                if let Ok((outcome, more)) = s.request(req.clone(), *now) {
                    observe(&before, &req, &outcome, s);
                    events.extend(more);
                }
            }
        }
        Op::Release { job, count } => {
            if let Some(units) = ids.get(job).and_then(|id| s.job_units(*id)) {
                let _ = s.release(ids[job], &units[..count.min(units.len())], *now);
            }
        }
        Op::Usable { unit, usable } => s.set_usable(unit, usable).unwrap(),
    }
    events.extend(s.schedule(*now));
    events
}

fn starts(plan: &[Planned]) -> std::collections::BTreeMap<u64, Option<Time>> {
    plan.iter().map(|p| (p.job, p.start)).collect()
}

fn fair_config() -> Config {
    let mut c = Config::default();
    c.queue.reservation_depth = 3;
    c.dynamic.policy = DynPolicy::SingleAndTargetDelay;
    c.dynamic.reservation_delay_depth = 1000;
    c.dynamic.default =
        Limits { dyn_delay_perm: Some(true), target_delay: Some(Seconds(400)), single_delay: Some(Seconds(150)) };
    c.dynamic.users.insert("p".into(), Limits { dyn_delay_perm: Some(false), ..Default::default() });
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn never_allocates_more_than_exists(ops in prop::collection::vec(op(), 1..80)) {
        let mut s = scheduler(fair_config());
        let (mut now, mut ids) = (0, Vec::new());
        for op in &ops {
            apply(&mut s, op, &mut now, &mut ids, &mut |_, _, _, _| {});
            prop_assert_eq!(s.check_invariants(), Ok(()), "after {:?}", op);
            // A lent unit is listed by its owner and its borrower: count units, not listings.
            let held: std::collections::BTreeSet<u32> = ids.iter().filter_map(|id| s.job_units(*id)).flatten().collect();
            prop_assert!(held.len() + s.idle_units() as usize <= UNITS as usize);
        }
    }

    #[test]
    fn grants_never_delay_a_protected_user_or_exceed_a_limit(ops in prop::collection::vec(op(), 1..80)) {
        let mut s = scheduler(fair_config());
        let (mut now, mut ids) = (0, Vec::new());
        let mut failures = Vec::new();
        for op in &ops {
            let at = now;
            apply(&mut s, op, &mut now, &mut ids, &mut |before, req, outcome, after| {
                if !matches!(outcome, DynOutcome::Granted(_)) {
                    return;
                }
                let (b, a) = (starts(&before.plan(at)), starts(&after.plan(at)));
                let requester = ids_user(req.job);
                for (job, start) in &b {
                    let user = ids_user(*job);
                    if user == requester { continue; }
                    let delay = match (start, a.get(job).copied().flatten()) {
                        (Some(b), Some(a)) => a.saturating_sub(*b),
                        (Some(_), None) => Time::MAX,
                        _ => 0,
                    };
                    let limit = if user == "p" { 0 } else { 150 };
                    if delay > limit { failures.push((req.clone(), *job, delay)); }
                }
            });
        }
        prop_assert!(failures.is_empty(), "{:?}", failures);
    }

    #[test]
    fn backfilling_never_delays_reserved_jobs(
        ops in prop::collection::vec(op(), 1..60),
        conservative in any::<bool>(),
    ) {
        let mut c = Config::default();
        c.queue.backfill = if conservative { Backfill::Conservative } else { Backfill::Easy };
        c.queue.reservation_depth = 2;
        let mut s = scheduler(c);
        let (mut now, mut ids) = (0, Vec::new());
        for op in &ops {
            if let Op::Usable { .. } = op { continue; }
            apply(&mut s, op, &mut now, &mut ids, &mut |_, _, _, _| {});
            // The next pass happens later, after jobs may have ended.
            now += 7;
            let before = s.plan(now);
            let started: Vec<u64> = s.schedule(now).iter().filter_map(|e| match e {
                Event::Started { job, .. } => Some(*job),
                _ => None,
            }).collect();
            let after = starts(&s.plan(now));
            let protected = before.iter().filter(|p| !started.contains(&p.job));
            let protected: Vec<&Planned> = if conservative { protected.collect() } else { protected.take(2).collect() };
            for p in protected {
                let later = after.get(&p.job).copied().flatten();
                prop_assert!(p.start.is_none() || later <= p.start, "job {} planned {:?}, now {:?}", p.job, p.start, later);
            }
        }
    }

    #[test]
    fn the_same_input_gives_the_same_schedule(ops in prop::collection::vec(op(), 1..80)) {
        let run = || {
            let mut s = scheduler(fair_config());
            let (mut now, mut ids) = (0, Vec::new());
            let events: Vec<Vec<Event>> = ops.iter().map(|op| apply(&mut s, op, &mut now, &mut ids, &mut |_, _, _, _| {})).collect();
            (events, s.plan(now), s.stats())
        };
        prop_assert_eq!(run(), run());
    }
}

/// A job id carries its user's index in its low bits (see `apply`).
fn ids_user(job: u64) -> &'static str {
    USERS[(job % 4) as usize]
}
