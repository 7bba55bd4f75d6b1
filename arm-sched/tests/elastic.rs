//! Elastic grants: lent units, reclaims with notice, forced revocations, offers. Scenario
//! tests first, then properties over random queues driven to completion the way `arm-server`
//! drives the core (a pass at every job end and at every wake-up the core asks for).

use std::collections::BTreeMap;

use arm_sched::{Config, DynOutcome, DynRequest, Event, JobId, JobSpec, Scheduler, Time, Unit, UnitId};
use proptest::prelude::*;

fn pool(units: u32, config: Config) -> Scheduler {
    let mut s = Scheduler::new(config);
    for i in 0..units {
        s.add_unit(Unit { host: format!("h{i}"), labels: vec![] });
    }
    s
}

fn job(id: JobId, size: u32, walltime: Time) -> JobSpec {
    JobSpec { id, user: format!("u{id}"), group: "g".into(), size, walltime: Some(walltime), ..Default::default() }
}

fn elastic(id: u64, job: JobId, max: u32, notice: Time) -> DynRequest {
    DynRequest { id, job, min: 1, max, elastic: Some(notice), ..Default::default() }
}

fn granted(outcome: DynOutcome) -> Vec<UnitId> {
    match outcome {
        DynOutcome::Granted(units) => units,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// A pool of `units` where job 1 (`size` units, 10,000 s) runs and has `lent` more lent with
/// `notice`.
fn lending(units: u32, size: u32, lent: u32, notice: Time) -> Scheduler {
    let mut s = pool(units, Config::default());
    s.submit(job(1, size, 10_000), 0).unwrap();
    s.schedule(0);
    assert_eq!(granted(s.request(elastic(1, 1, lent, notice), 0).unwrap().0).len(), lent as usize);
    s
}

#[test]
fn a_reclaim_takes_the_fewest_units_and_gives_the_notice() {
    let mut s = pool(6, Config::default());
    s.submit(job(1, 2, 10_000), 0).unwrap();
    s.submit(job(2, 1, 10_000), 0).unwrap();
    s.schedule(0);
    let lent = granted(s.request(elastic(1, 1, 3, 60), 10).unwrap().0);
    assert_eq!(lent.len(), 3, "everything idle is lent");
    assert_eq!(s.idle_units(), 0);
    // A job of 2 units could start with 2 of the 3 lent units.
    s.submit(job(3, 2, 100), 20).unwrap();
    assert_eq!(s.plan(20)[0].start, Some(80), "planned when the notice is up");
    let events = s.schedule(20);
    let [Event::Reclaim { job: 1, units, by: 80, for_job: 3 }] = &events[..] else { panic!("{events:?}") };
    assert_eq!(units.len(), 2, "the fewest units");
    assert!(units.iter().all(|u| lent.contains(u)));
    // A program that complies gives them back early; the job starts at once.
    s.release(1, units, 30).unwrap();
    let events = s.schedule(30);
    assert!(matches!(&events[..], [Event::Started { job: 3, .. }]), "{events:?}");
    assert_eq!(s.lent_units(1).len(), 1, "one unit is still lent");
    s.check_invariants().unwrap();
}

#[test]
fn a_program_that_ignores_a_reclaim_loses_the_units_exactly_at_the_deadline() {
    let mut s = lending(3, 1, 2, 45);
    s.submit(job(2, 2, 100), 100).unwrap();
    let events = s.schedule(100);
    let [Event::Reclaim { by: 145, units, .. }] = &events[..] else { panic!("{events:?}") };
    let units = units.clone();
    assert_eq!(s.next_wakeup(), Some(145), "the core asks for a pass at the deadline");
    assert!(s.schedule(144).is_empty(), "not a second early");
    assert_eq!(s.job_units(1).unwrap().len(), 3);
    let events = s.schedule(145);
    assert_eq!(events[0], Event::Revoked { job: 1, units: units.clone() });
    assert!(matches!(&events[1], Event::Started { job: 2, units: started, .. } if *started == units), "{events:?}");
    assert_eq!(s.job_units(1).unwrap().len(), 1, "its static unit stays");
    s.check_invariants().unwrap();
}

#[test]
fn a_reclaim_waits_until_the_start_is_within_the_notice() {
    let mut s = pool(4, Config::default());
    s.submit(job(1, 2, 10_000), 0).unwrap();
    s.submit(job(2, 1, 1000), 0).unwrap();
    s.schedule(0);
    granted(s.request(elastic(1, 1, 1, 60), 0).unwrap().0);
    // Job 3 needs 2 units: job 2's at 1000 and the lent one. It starts at 1000 either way, so
    // the lender keeps its unit until 940.
    s.submit(job(3, 2, 100), 10).unwrap();
    assert!(s.schedule(10).is_empty());
    assert_eq!(s.next_wakeup(), Some(940));
    let events = s.schedule(940);
    assert!(matches!(&events[..], [Event::Reclaim { job: 1, by: 1000, for_job: 3, .. }]), "{events:?}");
}

#[test]
fn units_given_back_are_held_for_the_job_they_were_reclaimed_for() {
    let mut s = lending(3, 1, 2, 60);
    s.submit(job(2, 2, 100), 10).unwrap();
    let events = s.schedule(10);
    let [Event::Reclaim { units, .. }] = &events[..] else { panic!("{events:?}") };
    let units = units.clone();
    s.release(1, &units, 20).unwrap();
    // The lender asks again before the pass: it does not get the unit held for job 2.
    let again = s.request(elastic(2, 1, 1, 60), 20).unwrap().0;
    assert!(matches!(again, DynOutcome::Rejected(_)), "{again:?}");
}

#[test]
fn an_elastic_grant_is_judged_on_its_notice_not_on_the_lenders_walltime() {
    let mut config = Config::default();
    config.dynamic.policy = arm_sched::DynPolicy::SingleJobDelay;
    config.dynamic.default.single_delay = Some(arm_sched::Seconds(100));
    let mut s = pool(4, config);
    s.submit(job(1, 2, 10_000), 0).unwrap();
    s.submit(job(2, 1, 50), 0).unwrap();
    s.schedule(0);
    // Job 3 (2 units) plans to start at 50, on job 2's unit and the idle one.
    s.submit(job(3, 2, 100), 0).unwrap();
    assert_eq!(s.plan(0)[0].start, Some(50));
    // A firm unit would delay it by 9,950 s; lent with 80 s of notice, by 30 s at most.
    assert!(matches!(
        s.request(DynRequest { id: 1, job: 1, min: 1, max: 1, ..Default::default() }, 0).unwrap().0,
        DynOutcome::Rejected(_)
    ));
    let outcome = s.request(elastic(2, 1, 1, 80), 0).unwrap().0;
    assert!(matches!(outcome, DynOutcome::Rejected(_)), "the idle unit is needed at 50, within the notice");
    let units = granted(s.request(elastic(3, 1, 1, 40), 0).unwrap().0);
    assert_eq!(units.len(), 1, "40 s of notice returns it by 40");
}

#[test]
fn a_waiting_elastic_request_is_offered_what_no_queued_job_can_use() {
    let mut s = pool(4, Config::default());
    s.submit(job(1, 2, 10_000), 0).unwrap();
    s.submit(job(2, 2, 100), 0).unwrap();
    s.schedule(0);
    // Nothing is idle: job 1's request waits for an offer.
    let ask = DynRequest { timeout: 5000, ..elastic(7, 1, 4, 30) };
    assert_eq!(s.request(ask, 0).unwrap().0, DynOutcome::Pending);
    s.submit(job(3, 1, 500), 50).unwrap();
    assert!(s.schedule(50).is_empty());
    // Job 2 ends: the queued job starts first, and the offer gets what is left.
    s.finish(2, 100).unwrap();
    let events = s.schedule(100);
    assert!(matches!(&events[0], Event::Started { job: 3, .. }), "{events:?}");
    let [_, Event::Granted { request: 7, job: 1, units }] = &events[..] else { panic!("{events:?}") };
    assert_eq!(units.len(), 1);
    assert_eq!(s.lent_units(1).len(), 1, "an offer is lent");
    s.check_invariants().unwrap();
}

/// What happened while a scenario ran to completion.
#[derive(Debug, Default)]
struct Trace {
    starts: BTreeMap<JobId, Time>,
    /// Reclaimed units: the lender, the deadline, and whether the program gave them back.
    reclaims: BTreeMap<UnitId, (JobId, Time, bool)>,
    revoked: Vec<(JobId, UnitId, Time)>,
    passes: usize,
}

/// Runs passes at every job end and wake-up until nothing is left, starting with the events
/// of a first pass at 0. Jobs end at their walltime; a program gives reclaimed units back at
/// once if `complies(job)`.
fn drive(
    s: &mut Scheduler,
    jobs: &BTreeMap<JobId, Time>,
    first: Vec<Event>,
    complies: &dyn Fn(JobId) -> bool,
) -> Trace {
    let mut trace = Trace::default();
    let mut now = 0;
    let mut ends: BTreeMap<JobId, Time> = BTreeMap::new();
    let mut first = Some(first);
    for _ in 0..10_000 {
        // The first pass's events, then a pass at 0 again: the core plans its reclaims in a
        // pass, and asks for one (a wake-up at 0) after it lent units.
        let mut events = first.take().unwrap_or_else(|| s.schedule(now));
        while !events.is_empty() {
            let mut more = false;
            for event in std::mem::take(&mut events) {
                match event {
                    Event::Started { job, .. } => {
                        trace.starts.insert(job, now);
                        ends.insert(job, now + jobs[&job]);
                    }
                    Event::Reclaim { job, units, by, .. } => {
                        let give = complies(job);
                        for u in &units {
                            trace.reclaims.insert(*u, (job, by, give));
                        }
                        if give {
                            s.release(job, &units, now).unwrap();
                            more = true;
                        }
                    }
                    Event::Revoked { job, units } => trace.revoked.extend(units.iter().map(|u| (job, *u, now))),
                    _ => {}
                }
            }
            if more {
                events = s.schedule(now);
            }
        }
        s.check_invariants().unwrap();
        let next_end = ends.values().copied().min();
        let wake = s.next_wakeup().filter(|w| *w > now || trace.passes == 0);
        trace.passes += 1;
        let Some(next) = [next_end, wake].into_iter().flatten().min() else {
            return trace;
        };
        now = next;
        let ended: Vec<JobId> = ends.iter().filter(|(_, e)| **e <= now).map(|(j, _)| *j).collect();
        for j in ended {
            ends.remove(&j);
            s.finish(j, now).unwrap();
        }
    }
    panic!("the scenario did not end");
}

const UNITS: u32 = 12;
const DEPTH: usize = 3;

/// Jobs (size, walltime), elastic asks (which running job, how many), the notice, and a seed
/// for which lenders give units back.
type Scenario = (Vec<(u32, Time)>, Vec<(usize, u32)>, Time, u8);

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec((1..=8u32, 10..400u64), 2..16),
        prop::collection::vec((0..16usize, 1..5u32), 0..6),
        prop_oneof![Just(5u64), Just(30), Just(100)],
        any::<u8>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Lending idle units delays no reserved job by more than the notice, whether the lenders
    /// give the units back or lose them at the deadline; and each revocation happens exactly
    /// at its reclaim's deadline, to the units that were not given back.
    #[test]
    fn reserved_jobs_start_by_their_plan_plus_the_notice((specs, asks, notice, obey) in scenario()) {
        let mut config = Config::default();
        config.queue.reservation_depth = DEPTH;
        let mut s = pool(UNITS, config);
        let mut jobs = BTreeMap::new();
        for (i, (size, walltime)) in specs.iter().enumerate() {
            let id = i as JobId + 1;
            s.submit(job(id, *size, *walltime), 0).unwrap();
            jobs.insert(id, *walltime);
        }
        let first = s.schedule(0);
        let running: Vec<JobId> = first.iter().filter_map(|e| match e { Event::Started { job, .. } => Some(*job), _ => None }).collect();
        // The plan with nothing lent: the first DEPTH queued jobs are protected.
        let plan: Vec<(JobId, Time)> = s.plan(0).iter().take(DEPTH).filter_map(|p| Some((p.job, p.start?))).collect();
        for (k, (which, max)) in asks.iter().enumerate() {
            if running.is_empty() { break; }
            let lender = running[which % running.len()];
            let _ = s.request(elastic(k as u64, lender, *max, notice), 0).unwrap();
        }
        let complies = |job: JobId| (job as u8).wrapping_mul(37) & 1 == obey & 1;
        let mut trace = drive(&mut s, &jobs, first, &complies);
        for (job, planned) in plan {
            let started = trace.starts[&job];
            prop_assert!(started <= planned + notice, "job {} planned at {}, started at {}", job, planned, started);
        }
        for (job, unit, at) in &trace.revoked {
            let (lender, by, gave) = trace.reclaims.remove(unit).expect("only reclaimed units are revoked");
            prop_assert_eq!((lender, *at, gave), (*job, by, false), "unit {}", unit);
        }
    }

    /// However lenders behave, no unit is ever held twice and the bookkeeping holds.
    #[test]
    fn no_unit_is_held_twice((specs, asks, notice, obey) in scenario()) {
        let mut s = pool(UNITS, Config::default());
        let mut jobs = BTreeMap::new();
        for (i, (size, walltime)) in specs.iter().enumerate() {
            let id = i as JobId + 1;
            // Arrivals spread over time, so loans and reclaims interleave with starts.
            s.submit(job(id, *size, *walltime), 0).unwrap();
            jobs.insert(id, *walltime);
        }
        let first = s.schedule(0);
        for (k, (which, max)) in asks.iter().enumerate() {
            let lender = *which as JobId % jobs.len() as JobId + 1;
            let ask = DynRequest { timeout: if k % 2 == 0 { 0 } else { 300 }, ..elastic(k as u64, lender, *max, notice) };
            let _ = s.request(ask, 0);
        }
        let complies = |job: JobId| (job as u8) ^ obey < 128;
        drive(&mut s, &jobs, first, &complies);
        let held: usize = jobs.keys().filter_map(|j| s.job_units(*j)).map(|u| u.len()).sum();
        prop_assert_eq!(held, 0, "everything ended");
        prop_assert_eq!(s.idle_units(), UNITS);
    }
}
