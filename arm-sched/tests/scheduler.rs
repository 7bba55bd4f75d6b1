//! Behaviour of the scheduling core, one scenario per test.

use arm_sched::{
    Backfill, Config, DelayModel, DynOutcome, DynPolicy, DynRequest, Event, JobSpec, Limits, Rejection, Scheduler,
    Seconds, Unit,
};

fn pool(units: u32, config: Config) -> Scheduler {
    let mut s = Scheduler::new(config);
    for i in 0..units {
        s.add_unit(Unit { host: format!("h{}", i / 2), labels: vec![] });
    }
    s
}

fn job(id: u64, user: &str, size: u32, walltime: u64) -> JobSpec {
    JobSpec { id, user: user.into(), group: "g".into(), size, walltime: Some(walltime), ..Default::default() }
}

fn started(events: &[Event]) -> Vec<u64> {
    events.iter().filter_map(|e| if let Event::Started { job, .. } = e { Some(*job) } else { None }).collect()
}

fn ask(id: u64, job: u64, n: u32) -> DynRequest {
    DynRequest { id, job, min: n, max: n, ..Default::default() }
}

fn config(backfill: Backfill, depth: usize) -> Config {
    let mut c = Config::default();
    c.queue.backfill = backfill;
    c.queue.reservation_depth = depth;
    c
}

#[test]
fn easy_backfills_only_what_does_not_delay_the_head() {
    let mut s = pool(4, config(Backfill::Easy, 1));
    s.submit(job(1, "a", 3, 100), 0).unwrap();
    assert_eq!(started(&s.schedule(0)), [1]);
    s.submit(job(2, "b", 4, 100), 1).unwrap();
    s.submit(job(3, "c", 1, 50), 2).unwrap();
    s.submit(job(4, "d", 1, 200), 3).unwrap();
    let events = s.schedule(3);
    assert_eq!(started(&events), [3], "job 4 would run past 100, when job 2 is reserved");
    assert!(matches!(events[0], Event::Started { backfilled: true, .. }));
    assert_eq!(s.stats().backfilled, 1);
    let plan = s.plan(3);
    assert_eq!((plan[0].job, plan[0].start), (2, Some(100)));
    assert_eq!((plan[1].job, plan[1].start), (4, Some(200)));
}

#[test]
fn conservative_protects_every_queued_job_and_easy_only_the_first() {
    // 4 units, job 1 holds 2 until 100. Queue: job 2 (3 units, planned 100..200), job 3
    // (4 units, planned 200..300), job 4 (1 unit, 250 s). With EASY depth 1, job 4 runs now: it
    // delays job 3 but not job 2. Conservative refuses it.
    for (backfill, expected) in [(Backfill::Easy, vec![4]), (Backfill::Conservative, vec![])] {
        let mut s = pool(4, config(backfill, 1));
        s.submit(job(1, "a", 2, 100), 0).unwrap();
        s.schedule(0);
        s.submit(job(2, "b", 3, 100), 1).unwrap();
        s.submit(job(3, "c", 4, 100), 2).unwrap();
        s.submit(job(4, "d", 1, 250), 3).unwrap();
        assert_eq!(started(&s.schedule(3)), expected, "{backfill:?}");
    }
}

#[test]
fn an_exclusive_job_stops_backfilling_while_it_waits() {
    let mut s = pool(4, config(Backfill::Easy, 5));
    s.submit(job(1, "a", 2, 100), 0).unwrap();
    s.schedule(0);
    s.submit(JobSpec { priority: 1_000_000, exclusive: true, ..job(9, "z", 4, 10) }, 1).unwrap();
    s.submit(job(3, "c", 1, 10), 2).unwrap();
    assert!(started(&s.schedule(2)).is_empty(), "job 3 fits, but Z waits");
    s.finish(1, 50).unwrap();
    assert_eq!(started(&s.schedule(50)), [9]);
    s.finish(9, 60).unwrap();
    assert_eq!(started(&s.schedule(60)), [3]);
}

#[test]
fn priority_factors_reorder_the_queue() {
    let mut c = config(Backfill::None, 1);
    c.priority.users.insert("vip".into(), 100.0);
    let mut s = pool(2, c);
    s.submit(job(1, "a", 2, 100), 0).unwrap();
    s.schedule(0);
    s.submit(job(2, "u", 2, 100), 1).unwrap();
    s.submit(job(3, "vip", 2, 100), 2).unwrap();
    assert_eq!(s.plan(2).iter().map(|p| p.job).collect::<Vec<_>>(), [3, 2]);
}

#[test]
fn advance_reservations_fit_or_are_refused_and_start_on_time() {
    let mut s = pool(4, config(Backfill::Easy, 1));
    s.submit(job(1, "a", 3, 100), 0).unwrap();
    s.schedule(0);
    let reserved = JobSpec { start_at: Some(50), ..job(2, "r", 4, 100) };
    assert!(s.submit(reserved.clone(), 0).is_err(), "only 1 unit is free at 50");
    s.submit(JobSpec { start_at: Some(120), ..reserved }, 0).unwrap();
    s.submit(job(3, "b", 1, 200), 1).unwrap();
    s.submit(job(4, "c", 1, 50), 1).unwrap();
    assert_eq!(started(&s.schedule(1)), [4], "job 3 would still run at 120");
    let plan = s.plan(1);
    assert_eq!((plan[0].job, plan[0].start), (3, Some(220)));
    assert_eq!((plan[1].job, plan[1].start), (2, Some(120)));
    s.finish(1, 100).unwrap();
    s.finish(4, 100).unwrap();
    assert!(started(&s.schedule(100)).is_empty());
    assert_eq!(s.next_wakeup(), Some(120));
    assert_eq!(started(&s.schedule(120)), [2]);
}

/// The paper's Fig. 1: A (2 units, 8 h) and B (2 units, 4 h) run on 6 units; C needs 4.
fn figure_1(c: Config) -> Scheduler {
    let mut s = pool(6, c);
    s.submit(job(1, "evolving", 2, 8 * 3600), 0).unwrap();
    s.submit(job(2, "other", 2, 4 * 3600), 0).unwrap();
    s.schedule(0);
    s.submit(job(3, "rigid", 4, 3600), 1).unwrap();
    s.schedule(1);
    s
}

#[test]
fn highest_priority_grants_idle_units_whatever_the_delay() {
    let mut s = figure_1(Config::default());
    let (outcome, _) = s.request(ask(1, 1, 2), 10).unwrap();
    assert!(matches!(outcome, DynOutcome::Granted(ref u) if u.len() == 2));
    assert_eq!(s.plan(10)[0].start, Some(8 * 3600), "C is pushed from 4 h to 8 h");
    let (outcome, _) = s.request(ask(2, 1, 1), 10).unwrap();
    assert_eq!(outcome, DynOutcome::Rejected(Rejection::NoIdleUnits { idle: 0 }));
}

#[test]
fn fairness_policies_refuse_grants_that_delay_protected_users() {
    let mut c = Config::default();
    c.dynamic.policy = DynPolicy::SingleJobDelay;
    c.dynamic.users.insert("rigid".into(), Limits { dyn_delay_perm: Some(false), ..Default::default() });
    let mut s = figure_1(c.clone());
    let (outcome, _) = s.request(ask(1, 1, 2), 10).unwrap();
    assert_eq!(outcome, DynOutcome::Rejected(Rejection::Forbidden { job: 3, user: "rigid".into() }));

    c.dynamic.users.clear();
    c.dynamic.default.single_delay = Some(Seconds(3600));
    let mut s = figure_1(c.clone());
    assert!(matches!(s.request(ask(1, 1, 2), 10).unwrap().0, DynOutcome::Rejected(Rejection::OverLimit { .. })));
    c.dynamic.default.single_delay = Some(Seconds(4 * 3600));
    let mut s = figure_1(c);
    assert!(matches!(s.request(ask(1, 1, 2), 10).unwrap().0, DynOutcome::Granted(_)));
    assert_eq!(s.ledger().caused["rigid"], 4.0 * 3600.0);
}

#[test]
fn a_delay_to_the_requesters_own_jobs_does_not_count() {
    let mut c = Config::default();
    c.dynamic.policy = DynPolicy::SingleJobDelay;
    c.dynamic.default.dyn_delay_perm = Some(false);
    let mut s = pool(6, c);
    s.submit(job(1, "me", 2, 8 * 3600), 0).unwrap();
    s.submit(job(2, "other", 2, 4 * 3600), 0).unwrap();
    s.schedule(0);
    s.submit(job(3, "me", 4, 3600), 1).unwrap();
    assert!(matches!(s.request(ask(1, 1, 2), 10).unwrap().0, DynOutcome::Granted(_)));
}

#[test]
fn partial_grants_give_what_delays_nobody() {
    // 6 units: job 1 holds 1 until 8 h, job 2 holds 2 until 4 h; job 3 needs 4. Three idle units,
    // but C starts at 4 h on 2 + 2 of them: only 1 can go without delaying it.
    let mut c = Config::default();
    c.dynamic.policy = DynPolicy::SingleJobDelay;
    c.dynamic.default.dyn_delay_perm = Some(false);
    let mut s = pool(6, c);
    s.submit(job(1, "evolving", 1, 8 * 3600), 0).unwrap();
    s.submit(job(2, "other", 2, 4 * 3600), 0).unwrap();
    s.schedule(0);
    s.submit(job(3, "rigid", 4, 3600), 1).unwrap();
    let (outcome, _) = s.request(DynRequest { id: 1, job: 1, min: 1, max: 3, ..Default::default() }, 10).unwrap();
    assert!(matches!(outcome, DynOutcome::Granted(ref u) if u.len() == 1), "{outcome:?}");
    assert_eq!(s.plan(10)[0].start, Some(4 * 3600));
}

#[test]
fn a_timeout_waits_for_units_then_gives_up() {
    let mut s = pool(2, Config::default());
    s.submit(job(1, "a", 1, 1000), 0).unwrap();
    s.submit(job(2, "b", 1, 100), 0).unwrap();
    s.schedule(0);
    let req = DynRequest { timeout: 200, ..ask(7, 1, 1) };
    assert_eq!(s.request(req.clone(), 10).unwrap().0, DynOutcome::Pending);
    assert_eq!(s.next_wakeup(), Some(210));
    s.finish(2, 100).unwrap();
    let events = s.schedule(100);
    assert!(matches!(&events[..], [Event::Granted { request: 7, job: 1, units }] if units.len() == 1));
    assert_eq!(s.request(DynRequest { id: 8, ..req }, 110).unwrap().0, DynOutcome::Pending);
    assert!(s.schedule(150).is_empty());
    let events = s.schedule(310);
    assert!(matches!(&events[..], [Event::Rejected { request: 8, reason: Rejection::TimedOut, .. }]));
}

#[test]
fn preallocated_units_are_lent_preemptibly_and_taken_back() {
    let mut s = pool(4, Config::default());
    s.submit(JobSpec { peak: Some(4), ..job(1, "owner", 2, 1000) }, 0).unwrap();
    s.submit(job(2, "filler", 1, 1000), 0).unwrap();
    assert_eq!(started(&s.schedule(0)), [1], "the peak is set aside: nothing is left for job 2");
    s.finish(2, 0).unwrap();
    s.submit(job(3, "filler", 1, 1000), 0).unwrap();
    s.insert_running(job(4, "x", 1, 1), 0, 0, &[]).ok();
    // Job 4 runs with no units (allowed for a rebuilt job) and borrows preemptibly.
    let borrow = DynRequest { preemptible: true, ..ask(1, 4, 2) };
    let (outcome, _) = s.request(borrow, 1).unwrap();
    assert!(matches!(outcome, DynOutcome::Granted(ref u) if u.len() == 2));
    let (outcome, events) = s.request(ask(2, 1, 2), 2).unwrap();
    assert!(matches!(outcome, DynOutcome::Granted(ref u) if u.len() == 2), "the owner grows within its peak");
    assert!(matches!(&events[..], [Event::Preempted { job: 4, units }] if units.len() == 2));
    assert_eq!(s.job_units(4), Some(vec![]));
    s.check_invariants().unwrap();
}

#[test]
fn declared_speedups_make_delays_exact() {
    // Fig. 1 again, but A declares it ends at 2 h with the extra units (linear speed-up):
    // then C is not delayed at all, and the grant passes a zero-delay policy.
    let mut c = Config::default();
    c.dynamic.policy = DynPolicy::SingleJobDelay;
    c.dynamic.default.dyn_delay_perm = Some(false);
    let req = DynRequest { end_if_granted: Some(2 * 3600), ..ask(1, 1, 2) };
    let mut s = figure_1(c.clone());
    assert!(matches!(s.request(req.clone(), 10).unwrap().0, DynOutcome::Rejected(_)), "walltime model");
    c.dynamic.delay_model = DelayModel::Declared;
    let mut s = figure_1(c);
    assert!(matches!(s.request(req, 10).unwrap().0, DynOutcome::Granted(_)));
    assert_eq!(s.job_end(1), Some(2 * 3600), "the declared end binds");
}

#[test]
fn any_subset_can_be_released_and_strangers_cannot_release() {
    let mut s = pool(4, Config::default());
    s.submit(job(1, "a", 3, 100), 0).unwrap();
    s.submit(job(2, "b", 1, 100), 0).unwrap();
    s.schedule(0);
    let units = s.job_units(1).unwrap();
    assert!(s.release(2, &units[..1], 1).is_err());
    s.release(1, &units[1..], 1).unwrap();
    assert_eq!(s.job_units(1).unwrap(), units[..1]);
    assert_eq!(s.idle_units(), 2);
    s.check_invariants().unwrap();
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let mut s = pool(2, Config::default());
    assert!(s.submit(job(1, "a", 3, 10), 0).is_err(), "bigger than the pool");
    assert!(s.submit(job(1, "a", 0, 10), 0).is_err(), "empty");
    s.submit(job(1, "a", 1, 10), 0).unwrap();
    assert!(s.submit(job(1, "a", 1, 10), 0).is_err(), "duplicate");
    assert!(s.request(ask(1, 1, 1), 0).is_err(), "not running yet");
    s.schedule(0);
    assert!(s.request(DynRequest { min: 2, max: 1, ..ask(1, 1, 1) }, 0).is_err());
    assert!(s.request(ask(1, 1, 5), 0).is_err());
    assert!(s.request(ask(1, 99, 1), 0).is_err());
    assert!(s.finish(99, 0).is_err());
    assert!(s.set_usable(99, false).is_err());
}

#[test]
fn unusable_units_are_never_handed_out() {
    let mut s = pool(2, Config::default());
    s.set_usable(0, false).unwrap();
    s.submit(job(1, "a", 2, 10), 0).unwrap();
    assert!(s.schedule(0).is_empty());
    assert_eq!(s.plan(0)[0].start, None, "it cannot start with the units that are up");
    s.set_usable(0, true).unwrap();
    assert_eq!(started(&s.schedule(1)), [1]);
}

#[test]
fn nothing_overtakes_a_job_whose_start_cannot_be_planned() {
    let mut s = pool(3, config(Backfill::Easy, 1));
    s.submit(JobSpec { walltime: None, ..job(1, "a", 2, 0) }, 0).unwrap();
    s.schedule(0);
    s.submit(job(2, "b", 2, 100), 1).unwrap();
    s.submit(job(3, "c", 1, 100), 2).unwrap();
    assert!(s.schedule(2).is_empty(), "job 1 never ends in the plan: job 3 could delay job 2 forever");
    assert_eq!(s.plan(2)[0].start, None);
}

#[test]
fn one_jobs_expected_start_agrees_with_the_whole_plan() {
    let mut s = pool(4, config(Backfill::Easy, 1));
    s.submit(job(1, "a", 3, 100), 0).unwrap();
    s.schedule(0);
    s.submit(job(2, "b", 4, 100), 1).unwrap();
    s.submit(job(3, "c", 2, 300), 2).unwrap();
    s.submit(JobSpec { start_at: Some(500), ..job(4, "r", 4, 10) }, 3).unwrap();
    for planned in s.plan(3) {
        assert_eq!(s.expected_start(planned.job, 3), planned.start, "job {}", planned.job);
    }
    assert_eq!(s.expected_start(1, 3), None, "running, not queued");
}
