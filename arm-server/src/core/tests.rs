//! The core driven directly: no I/O, no clock.
use ac_proto::arm::{Ask, JobAuth};

use super::*;
use crate::model::Device;

fn host(name: &str, up: bool) -> Host {
    Host {
        name: name.into(),
        addr: "127.0.0.1:1".parse().unwrap(),
        server_name: "x".into(),
        ca_pem: String::new(),
        labels: vec![],
        draining: false,
        up,
        devices: vec![Device { index: 0, name: "cpu".into(), memory: 1, holder: None }],
        mismatch: None,
        states: Default::default(),
    }
}

pub(super) fn job(id: &str, nodes: &[&str], acpn: u32) -> Job {
    Job {
        id: id.into(),
        user: "u".into(),
        group: "g".into(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        acpn,
        walltime_s: 0,
        submitted: 0,
        started: None,
        state: JobState::Queued,
        credential_hash: crate::keys::hash("secret"),
        seq: 0,
        ad_hoc: false,
        reservation: None,
        peak: None,
        ended: None,
        batch: None,
    }
}

pub(super) fn ask(min: u32, max: u32, key: &str) -> Ask {
    Ask { min, max, wait_s: 0, preemptible: false, key: key.into() }
}

pub(super) fn core(hosts: usize) -> Core {
    let mut core = Core::default();
    for i in 0..hosts {
        core.add_host(host(&format!("h{i}"), true)).unwrap();
    }
    core
}

fn held(core: &Core) -> usize {
    core.hosts.values().flat_map(|h| &h.devices).filter(|d| d.holder.is_some()).count()
}

#[test]
fn static_requests_bind_in_fifo_order_without_overtaking() {
    let mut core = core(3);
    core.submit(job("a", &["n1", "n2"], 1), 0).unwrap();
    core.submit(job("b", &["n1"], 2), 0).unwrap();
    core.submit(job("c", &["n1"], 1), 0).unwrap();
    assert_eq!(core.jobs["a"].state, JobState::Running);
    assert_eq!(core.jobs["b"].state, JobState::Queued);
    assert_eq!(core.jobs["c"].state, JobState::Queued, "FIFO: c must not overtake b");
    core.end_job("a", 1).unwrap();
    assert_eq!(core.jobs["b"].state, JobState::Running);
    assert_eq!(core.jobs["c"].state, JobState::Running);
    assert_eq!(held(&core), 3);
    assert!(core.submit(job("huge", &["n1"], 4), 2).is_err(), "more than the pool has");
}

#[test]
fn dynamic_requests_are_granted_or_rejected_and_never_overallocate() {
    let mut core = core(4);
    core.submit(job("j", &["n1"], 1), 0).unwrap();
    let auth = JobAuth::Credential { job: "j".into(), secret: "secret".into() };
    core.open_session("t".into(), &auth, "n1", 0).unwrap();
    let GetOutcome::Granted(set) = core.get("t", &[], false, &ask(2, 2, "k1"), 0).unwrap() else { panic!() };
    assert_eq!(core.get("t", &[], false, &ask(2, 2, "k1"), 0).unwrap(), GetOutcome::Granted(set), "a retry");
    assert!(matches!(core.get("t", &[], false, &ask(2, 2, "k2"), 0).unwrap(), GetOutcome::Rejected(_)));
    // A grant is remembered (a retry repeats it); a rejection is not: the server tells it at once.
    assert!(core.remembers("t", "k1") && !core.remembers("t", "k2"));
    assert_eq!(held(&core), 3);
    let first = core.sets[&set].accelerators[0].clone();
    core.free("t", set, Some(std::slice::from_ref(&first)), 1).unwrap();
    assert_eq!(held(&core), 2);
    core.finalize("t", 2).unwrap();
    assert_eq!(held(&core), 1, "finalize releases dynamic sets only");
    let revoked = core.take_revocations();
    assert_eq!(revoked.len(), 2);
}

#[test]
fn partial_grants_and_waiting_requests() {
    let mut core = core(4);
    core.submit(job("a", &["n1"], 1), 0).unwrap();
    core.submit(job("b", &["n2"], 1), 0).unwrap();
    let auth = |j: &str| JobAuth::Credential { job: j.into(), secret: "secret".into() };
    core.open_session("ta".into(), &auth("a"), "n1", 0).unwrap();
    core.open_session("tb".into(), &auth("b"), "n2", 0).unwrap();
    let GetOutcome::Granted(set) = core.get("ta", &[], false, &ask(1, 5, "a1"), 0).unwrap() else { panic!() };
    assert_eq!(core.sets[&set].accelerators.len(), 2, "a partial grant of what is idle");
    let waits = Ask { wait_s: 10, ..ask(2, 2, "b1") };
    let GetOutcome::Waiting(request) = core.get("tb", &[], false, &waits, 1).unwrap() else { panic!() };
    assert_eq!(core.await_get("tb", request).unwrap(), GetOutcome::Waiting(request));
    core.free("ta", set, None, 2).unwrap();
    assert_eq!(core.await_get("tb", request).unwrap(), GetOutcome::Granted(request), "granted by the pass");
    assert_eq!(core.sets[&request].accelerators.len(), 2);
    // A request that times out is rejected once, then forgotten; a dead session leaves nothing.
    let GetOutcome::Waiting(late) = core.get("ta", &[], false, &Ask { wait_s: 5, ..ask(1, 1, "a2") }, 3).unwrap()
    else {
        panic!()
    };
    core.schedule(9);
    // Rejected while it waited: a retry repeats a decision made earlier, which the server tells
    // only once durable.
    let retried = core.get("ta", &[], false, &Ask { wait_s: 5, ..ask(1, 1, "a2") }, 9).unwrap();
    assert!(matches!(retried, GetOutcome::Rejected(_)) && core.remembers("ta", "a2"), "{retried:?}");
    assert!(matches!(core.await_get("ta", late).unwrap(), GetOutcome::Rejected(_)));
    assert!(core.await_get("ta", late).is_err());
    let GetOutcome::Waiting(_) = core.get("ta", &[], false, &Ask { wait_s: 5, ..ask(1, 1, "a3") }, 10).unwrap() else {
        panic!()
    };
    core.finalize("ta", 11).unwrap();
    assert!(core.pending.is_empty());
}

#[test]
fn ended_jobs_are_purged_after_the_retention() {
    let mut core = core(1);
    core.submit(job("a", &["n1"], 1), 0).unwrap();
    core.end_job("a", 100).unwrap();
    assert_eq!(core.purge_ended(150, 100), 0);
    assert_eq!(core.purge_ended(200, 100), 1);
    assert!(core.jobs.is_empty());
}

#[test]
fn down_and_draining_hosts_get_nothing_new() {
    let mut core = core(2);
    core.set_up("h0", false, 0);
    core.drain("h1", true, 0).unwrap();
    core.submit(job("j", &["n1"], 1), 0).unwrap();
    assert_eq!(core.jobs["j"].state, JobState::Queued);
    core.drain("h1", false, 1).unwrap();
    assert_eq!(core.jobs["j"].state, JobState::Running);
    assert_eq!(core.held_by("j")[0].0, "h1/0");
}

#[test]
fn wrong_credentials_and_foreign_nodes_are_refused() {
    let mut core = core(1);
    core.submit(job("j", &["n1"], 1), 0).unwrap();
    let wrong = JobAuth::Credential { job: "j".into(), secret: "guess".into() };
    assert_eq!(core.open_session("t".into(), &wrong, "n1", 0).unwrap_err().kind, ArmErrorKind::Unauthorized);
    let right = JobAuth::Credential { job: "j".into(), secret: "secret".into() };
    assert_eq!(core.open_session("t".into(), &right, "n9", 0).unwrap_err().kind, ArmErrorKind::Unauthorized);
    assert!(core.sessions.is_empty());
}

#[test]
fn a_preallocation_grows_lends_and_preempts() {
    let mut core = core(4);
    core.preemption_grace_s = 10;
    core.submit(Job { peak: Some(3), ..job("owner", &["n1"], 1) }, 0).unwrap();
    core.submit(job("other", &["n2"], 1), 0).unwrap();
    assert_eq!(held(&core), 4, "1 static + 2 spare for the owner, 1 for the other");
    let auth = |j: &str| JobAuth::Credential { job: j.into(), secret: "secret".into() };
    core.open_session("to".into(), &auth("owner"), "n1", 0).unwrap();
    core.open_session("tb".into(), &auth("other"), "n2", 0).unwrap();
    assert!(matches!(core.get("tb", &[], false, &ask(1, 1, "b0"), 0).unwrap(), GetOutcome::Rejected(_)), "no idle");
    let borrow = Ask { preemptible: true, ..ask(1, 2, "b1") };
    let GetOutcome::Granted(loan) = core.get("tb", &[], false, &borrow, 1).unwrap() else { panic!() };
    assert_eq!(core.sets[&loan].accelerators.len(), 2, "both spare units lent");
    assert_eq!(core.held_by("other").len(), 3);
    // The owner grows into one of them: the borrower loses it, is told, and its capability goes
    // after the grace.
    let GetOutcome::Granted(grown) = core.get("to", &[], false, &ask(1, 1, "o1"), 5).unwrap() else { panic!() };
    let taken = core.sets[&grown].accelerators.clone();
    assert_eq!(core.sets[&loan].accelerators.len(), 1);
    let notices = core.take_notices("tb", 1, 5).unwrap();
    assert_eq!((notices[0].set, &notices[0].accelerators, notices[0].revoke_at), (loan, &taken, 15));
    assert!(core.take_notices("tb", 1, 6).unwrap().is_empty(), "told once on a connection");
    // The answer may have been lost with its connection: the next one hears it again, until
    // its deadline.
    assert_eq!(core.take_notices("tb", 2, 7).unwrap(), notices, "told again on a new connection");
    assert!(core.take_notices("tb", 2, 8).unwrap().is_empty());
    assert!(core.take_notices("tb", 3, 15).unwrap().is_empty(), "not past its deadline");
    core.take_revocations();
    core.revoke_due(14);
    assert!(core.take_revocations().is_empty(), "still in its grace");
    core.revoke_due(15);
    assert_eq!(core.take_revocations().len(), 1);
    // Released, the owner's unit is spare again; the owner's end leaves the borrower its loan.
    core.free("to", grown, None, 20).unwrap();
    assert!(core.owned_by("owner").iter().filter(|(_, h)| h.spare()).count() == 1);
    core.end_job("owner", 30).unwrap();
    assert_eq!(core.held_by("other").len(), 2, "the lent unit stays with the borrower");
    assert_eq!(core.sets[&loan].accelerators.len(), 1);
    core.free("tb", loan, None, 31).unwrap();
    assert_eq!(held(&core), 1);
}

#[test]
fn processes_of_one_ad_hoc_program_share_its_job_until_the_last_one_finalizes() {
    let mut core = core(2);
    let first = crate::keys::hash("first-token");
    let job = core.open_session(first.clone(), &JobAuth::AdHoc { acpn: 1 }, "n1", 0).unwrap();
    let same = JobAuth::SameJob { token: "first-token".into() };
    assert_eq!(core.open_session("second".into(), &same, "n1", 0).unwrap(), job);
    let StaticState::Bound(mine) = core.static_state("second", 0).unwrap() else { panic!("bound") };
    assert_eq!(mine.len(), 1, "the node's static accelerator, for each process");
    let wrong = JobAuth::SameJob { token: "not-a-token".into() };
    assert_eq!(core.open_session("third".into(), &wrong, "n1", 0).unwrap_err().kind, ArmErrorKind::Unauthorized);
    let elsewhere = core.open_session("fourth".into(), &same, "n2", 0).unwrap_err();
    assert_eq!(elsewhere.kind, ArmErrorKind::Unauthorized, "an ad-hoc job lives on its node");
    core.finalize(&first, 1).unwrap();
    assert_eq!(core.jobs[&job].state, JobState::Running, "another process still runs");
    core.finalize("second", 2).unwrap();
    assert_eq!(core.jobs[&job].state, JobState::Ended);
    assert_eq!(held(&core), 0);
}

fn batch_job(id: &str, nodes: &[&str], acpn: u32, uid: u32) -> Job {
    Job { batch: Some(crate::model::BatchJob { uid }), credential_hash: String::new(), ..job(id, nodes, acpn) }
}

#[test]
fn the_batch_system_binds_now_or_not_at_all_and_its_users_prove_themselves() {
    let mut core = core(2);
    core.bind_batch_job(batch_job("7", &["n1", "n2"], 1, 1000), 0).unwrap();
    assert_eq!(core.jobs["7"].state, JobState::Running);
    core.open_batch_session("old".into(), "7", 1000, "n1").unwrap();
    let again = core.bind_batch_job(batch_job("7", &["n1", "n2"], 1, 1000), 1).expect("the job runs again");
    assert_eq!(again, Some(0), "an earlier run of the same id (requeued, or the id reused) was ended");
    assert!(core.session("old").is_err(), "nothing of the earlier run passes to the new one");
    assert_eq!(core.jobs["7"].started, Some(1));
    let refused = core.bind_batch_job(batch_job("8", &["n1"], 1, 1000), 1).unwrap_err();
    assert_eq!(refused.kind, ArmErrorKind::Conflict, "nothing free: the prolog fails and Slurm requeues");
    assert!(!core.jobs.contains_key("8"), "a refused binding leaves no trace");
    core.bind_batch_job(batch_job("9", &["n1"], 0, 1000), 1).expect("a job may hold nothing static");

    assert_eq!(core.open_batch_session("a".into(), "7", 1000, "n2").unwrap(), "7");
    let StaticState::Bound(mine) = core.static_state("a", 1).unwrap() else { panic!("bound") };
    assert_eq!(mine.len(), 1);
    let stranger = core.open_batch_session("b".into(), "7", 1001, "n1").unwrap_err();
    assert_eq!(stranger.kind, ArmErrorKind::Unauthorized, "another user's process");
    let elsewhere = core.open_batch_session("c".into(), "7", 1000, "n3").unwrap_err();
    assert_eq!(elsewhere.kind, ArmErrorKind::Unauthorized, "a node the job does not run on");
    core.submit(job("arm-job", &["n1"], 1), 1).ok();
    let not_batch = core.open_batch_session("d".into(), "arm-job", 1000, "n1").unwrap_err();
    assert_eq!(not_batch.kind, ArmErrorKind::Unauthorized, "munge opens only batch jobs");

    core.end_job("7", 2).unwrap();
    let reused = core.bind_batch_job(batch_job("7", &["n1"], 1, 1000), 3).expect("Slurm reuses ids of ended jobs");
    assert_eq!(reused, None);
    assert_eq!(core.jobs["7"].state, JobState::Running);
}

#[test]
fn dynamic_decisions_plan_around_the_batch_systems_queue() {
    let mut core = core(4);
    core.bind_batch_job(batch_job("1", &["n1"], 1, 1000), 0).unwrap();
    core.open_batch_session("s".into(), "1", 1000, "n1").unwrap();
    // Slurm's queue holds a job that wants the 3 others: the view must see it.
    let waiting_in_slurm = Job { walltime_s: 3600, ..job("2", &["(pending in Slurm)"], 3) };
    core.batch_queue = vec![waiting_in_slurm];
    let view = core.view_with_batch_queue("1", 0);
    assert_eq!(view.jobs.len(), 2, "the running job and Slurm's pending one");
    assert!(!core.jobs.contains_key("2"), "Slurm's pending jobs are never ARM jobs");
}

/// 3 accelerators: batch job `1` (session `s`) holds 1 and is lent the other 2 with 30 s of
/// notice, as set `set`.
fn batch_job_lent_two() -> (Core, u64) {
    let mut core = core(3);
    core.bind_batch_job(batch_job("1", &["n1"], 1, 1000), 0).unwrap();
    core.open_batch_session("s".into(), "1", 1000, "n1").unwrap();
    let GetOutcome::Granted(set) = core.get_elastic("s", &ask(2, 2, "k"), 30, 1).unwrap() else { panic!("lent") };
    (core, set)
}

#[test]
fn a_batch_job_waiting_for_licenses_reclaims_what_is_lent_and_is_started_by_slurm_only() {
    let (mut core, set) = batch_job_lent_two();
    assert_eq!((core.held_by("1").len(), core.firm_held_by("1")), (3, 1), "one own, two lent");
    assert_eq!(core.lent_to_batch_jobs(10), (2, Some(40)), "back at the notice from now");
    let pending = Job { walltime_s: 600, ..job("2", &["(pending in Slurm)"], 1) };
    // Slurm holds it back for another reason: nothing is reclaimed for it.
    core.set_batch_queue(vec![pending.clone()], BTreeSet::new());
    core.tick(10);
    assert!(core.take_notices("s", 1, 10).unwrap().is_empty(), "not waiting for licenses");
    core.set_batch_queue(vec![pending], BTreeSet::from(["2".to_string()]));
    core.tick(11);
    let notices = core.take_notices("s", 1, 11).unwrap();
    assert_eq!(notices.len(), 1, "reclaimed for Slurm's job");
    assert_eq!((notices[0].set, notices[0].revoke_at, notices[0].accelerators.len()), (set, 41, 1), "the fewest");
    assert_eq!(core.lent_to_batch_jobs(12), (2, Some(41)), "the first due back by the reclaim's deadline");
    core.free("s", set, Some(&notices[0].accelerators), 12).unwrap();
    assert_eq!(core.lent_to_batch_jobs(13), (1, Some(43)));
    // The pass sees Slurm's job start on the accelerator given back: Slurm starts it, not the
    // manager, and the accelerator stays free for its prolog.
    core.schedule(13);
    assert!(!core.jobs.contains_key("2") && core.usable_free() == 1, "kept free for Slurm's job");
    // Asked again (its answer lost) with the other one: the first is done already, the other
    // goes now; the job's static accelerator is not this set's to free.
    let own = core.held_by("1").into_iter().find(|(a, _)| !core.leases.contains_key(a)).unwrap().0;
    let wrong = core.free("s", set, Some(&[own]), 14).unwrap_err();
    assert_eq!(wrong.kind, ArmErrorKind::NotFound);
    let other = core.sets[&set].accelerators.clone();
    let again: Vec<String> = notices[0].accelerators.iter().chain(&other).cloned().collect();
    core.free("s", set, Some(&again), 14).unwrap();
    assert!(!core.sets.contains_key(&set) && core.lent_to_batch_jobs(14) == (0, None));
}

#[test]
fn a_host_removed_takes_its_lent_accelerators_out_of_the_leases() {
    let (mut core, set) = batch_job_lent_two();
    let lent_host = core.leases.keys().next().unwrap().split('/').next().unwrap().to_string();
    core.take_dirty();
    core.remove_host(&lent_host, true).unwrap();
    assert_eq!(core.lent_to_batch_jobs(2).0, 1, "only the other host's is still lent");
    assert!(core.leases.keys().all(|a| !a.starts_with(&format!("{lent_host}/"))));
    assert!(core.take_dirty().iter().any(|k| matches!(k, Key::Lease(a) if a.starts_with(&lent_host))), "stored");
    assert_eq!(core.sets[&set].accelerators.len(), 1);
}

#[test]
fn an_accelerator_given_back_by_a_reclaim_stays_held_for_its_job_across_passes() {
    // 3 accelerators: the lender holds 1 and borrows 1 (30 s of notice), a job of 1 runs to
    // t=60. A job of 2 is queued: it can start at 60, on the lent one and the running job's.
    let mut core = core(3);
    core.submit(job("lender", &["n1"], 1), 0).unwrap();
    core.open_session("s".into(), &JobAuth::Credential { job: "lender".into(), secret: "secret".into() }, "n1", 0)
        .unwrap();
    let GetOutcome::Granted(set) = core.get_elastic("s", &ask(1, 1, "k"), 30, 0).unwrap() else { panic!("lent") };
    core.submit(Job { walltime_s: 60, ..job("runs", &["n2"], 1) }, 0).unwrap();
    core.submit(Job { walltime_s: 600, ..job("queued", &["n3"], 2) }, 1).unwrap();
    core.tick(30);
    let notices = core.take_notices("s", 1, 30).unwrap();
    assert_eq!(notices.len(), 1, "reclaimed in time for the start at 60");
    core.free("s", set, None, 31).unwrap();
    assert_eq!(core.jobs["queued"].state, JobState::Queued, "it still waits for the running job");
    // Another program asks for the one given back, elastically, before the queued job starts.
    core.submit(job("other", &["n4"], 0), 32).unwrap();
    core.open_session("o".into(), &JobAuth::Credential { job: "other".into(), secret: "secret".into() }, "n4", 32)
        .unwrap();
    let asked = core.get_elastic("o", &ask(1, 1, "o"), 5, 33).unwrap();
    assert!(matches!(asked, GetOutcome::Rejected(_)), "held for the queued job: {asked:?}");
    core.expire_walltimes(60, 0);
    core.schedule(60);
    assert_eq!(core.jobs["queued"].state, JobState::Running);
    assert!(core.held_for.is_empty(), "held no more once it started");
}

#[test]
fn routes_name_only_the_jobs_own_accelerators_on_that_node_and_need_its_credential() {
    let mut core = core(4);
    core.submit(job("a", &["n1", "n2"], 1), 0).unwrap();
    core.submit(job("b", &["n1"], 2), 0).unwrap();
    core.take_dirty();
    let auth = |j: &str, secret: &str| JobAuth::Credential { job: j.into(), secret: secret.into() };
    let ids = |routes: Vec<(String, &Host)>| routes.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    let a_n1 = ids(core.routes(&auth("a", "secret"), "n1").unwrap());
    let a_n2 = ids(core.routes(&auth("a", "secret"), "n2").unwrap());
    let b_n1 = ids(core.routes(&auth("b", "secret"), "n1").unwrap());
    assert_eq!((a_n1.len(), a_n2.len(), b_n1.len()), (1, 1, 2));
    assert!(a_n1.iter().chain(&a_n2).all(|id| !b_n1.contains(id)), "another job's accelerators are not named");
    let held_by_a: Vec<String> = core.held_by("a").into_iter().map(|(id, _)| id).collect();
    assert!(a_n1.iter().chain(&a_n2).all(|id| held_by_a.contains(id)));
    // A wrong secret, a node outside the job and an ad-hoc request learn nothing.
    assert!(core.routes(&auth("a", "wrong"), "n1").is_err());
    assert!(core.routes(&auth("b", "secret"), "n2").is_err());
    assert!(core.routes(&JobAuth::AdHoc { acpn: 1 }, "n1").unwrap().is_empty());
    // Nothing changed: routes are read-only.
    assert!(core.take_dirty().is_empty());
}

#[test]
fn a_job_with_no_static_accelerators_runs_at_once_and_asks_at_run_time() {
    let mut core = core(2);
    core.submit(job("busy", &["n1"], 2), 0).unwrap();
    core.submit(job("none", &["n1"], 0), 0).expect("acpn 0 is an ordinary job");
    assert_eq!(core.jobs["none"].state, JobState::Running, "nothing to wait for, even on a full pool");
    core.bind_batch_job(batch_job("b", &["n1"], 0, 1000), 1).unwrap();
    core.open_batch_session("s".into(), "b", 1000, "n1").unwrap();
    assert_eq!(core.static_state("s", 1).unwrap(), StaticState::Bound(vec![]));
    let full = core.get("s", &[], false, &Ask::exactly(1, String::new()), 1).unwrap();
    assert!(matches!(full, GetOutcome::Rejected(_)), "decided by the policy: {full:?}");
    core.end_job("busy", 2).unwrap();
    let granted = core.get("s", &[], false, &Ask::exactly(1, String::new()), 2).unwrap();
    assert!(matches!(granted, GetOutcome::Granted(_)), "{granted:?}");
}

#[test]
fn batch_jobs_outlive_their_walltime_at_the_manager() {
    let mut core = core(2);
    core.bind_batch_job(Job { walltime_s: 60, ..batch_job("slurm", &["n1"], 1, 1000) }, 0).unwrap();
    core.submit(Job { walltime_s: 60, ..job("own", &["n1"], 1) }, 0).unwrap();
    assert_eq!(core.expire_walltimes(1000, 10), vec!["own".to_string()], "the manager's own job ends");
    assert_eq!(core.jobs["slurm"].state, JobState::Running, "Slurm ends its jobs, with its current limit");
    core.set_walltime("slurm", 600).unwrap();
    assert_eq!(core.jobs["slurm"].walltime_s, 600);
}

#[test]
fn running_jobs_that_hold_nothing_stay_out_of_the_view_and_rejections_change_nothing() {
    let mut core = core(2);
    // Fifty running jobs that hold nothing, as programs that only ever use AC_Get.
    for i in 0..50 {
        core.submit(job(&format!("idle{i}"), &["n1"], 0), 0).unwrap();
    }
    let auth = |j: &str| JobAuth::Credential { job: j.into(), secret: "secret".into() };
    core.open_session("t0".into(), &auth("idle0"), "n1", 0).unwrap();
    core.open_session("t1".into(), &auth("idle1"), "n1", 0).unwrap();
    assert_eq!(core.view_with_batch_queue("idle0", 0).jobs.len(), 1, "only the requester");

    let GetOutcome::Granted(set) = core.get("t0", &[], false, &ask(2, 2, "a"), 1).unwrap() else { panic!() };
    let view = core.view_with_batch_queue("idle1", 1);
    let mut in_view: Vec<&str> = view.jobs.values().map(String::as_str).collect();
    in_view.sort_unstable();
    assert_eq!(in_view, ["idle0", "idle1"], "the holder and the requester");

    core.take_dirty();
    let next_id = core.next_id;
    assert!(matches!(core.get("t1", &[], false, &ask(1, 1, "b"), 2).unwrap(), GetOutcome::Rejected(_)));
    assert!(core.take_dirty().is_empty(), "a rejection is no durable change");
    assert_eq!(core.next_id, next_id, "a rejection takes no id");

    core.free("t0", set, None, 3).unwrap();
    let GetOutcome::Granted(again) = core.get("t1", &[], false, &ask(1, 1, "c"), 4).unwrap() else { panic!() };
    assert_eq!(again, next_id + 1, "the id a rejection did not take");
    assert_eq!(held(&core), 1);
}

/// The view's answer to a request, built the long way.
fn full_decision(core: &Core, job: &str, ask: &Ask, now: u64) -> super::view::Decision {
    core.view_with_batch_queue(job, now).request(job, ask, None, core.next_id + 1, now)
}

#[test]
fn plain_decisions_are_the_cores_own_answers_and_only_when_they_are_sure() {
    use super::view::Decision;
    let mut core = core(4);
    core.preemption_grace_s = 10;
    core.submit(Job { peak: Some(3), ..job("owner", &["n1"], 1) }, 0).unwrap();
    core.submit(job("a", &["n1"], 1), 0).unwrap();
    core.submit(job("idle", &["n1"], 0), 0).unwrap();
    assert_eq!(held(&core), 4, "the pool is full: the owner's 1 static and 2 spare, a's 1 static");
    let (one, two, five) = (ask(1, 1, ""), ask(2, 2, ""), ask(5, 5, ""));

    let sure = core.plain_decision("idle", &one, 1).expect("nothing idle, nothing spare: sure");
    assert!(matches!(sure, Decision::Rejected(_)));
    assert_eq!(full_decision(&core, "idle", &one, 1), sure);
    assert_eq!(core.plain_decision("owner", &one, 1), None, "the owner grows into its spare unit");
    assert!(matches!(full_decision(&core, "owner", &one, 1), Decision::Granted(_)));
    assert_eq!(core.plain_decision("idle", &Ask { preemptible: true, ..one.clone() }, 1), None, "may borrow");
    assert_eq!(core.plain_decision("idle", &Ask { wait_s: 5, ..one.clone() }, 1), None, "may wait");
    assert_eq!(core.plain_decision("idle", &five, 1), None, "more than the pool: the core words it");

    // One unit freed, another host down: 1 usable idle unit.
    let freed = core.held_by("a")[0].0.clone();
    let down = core.hosts.keys().find(|h| !freed.starts_with(&format!("{h}/"))).unwrap().clone();
    core.end_job("a", 2).unwrap();
    core.set_up(&down, false, 2);
    assert_eq!(usable_free(&core.hosts), 1);
    let sure = core.plain_decision("idle", &two, 3).expect("fewer idle than the minimum");
    assert_eq!(full_decision(&core, "idle", &two, 3), sure);
    assert!(matches!(&sure, Decision::Rejected(r) if r.contains("only 1 ")), "{sure:?}");
    let granted = core.plain_decision("idle", &ask(1, 3, ""), 3).expect("nothing queued: a plain grant");
    assert_eq!(granted, Decision::Granted(vec![freed]));
    assert_eq!(full_decision(&core, "idle", &ask(1, 3, ""), 3), granted);

    // A queued job could be delayed, a reservation holds units: only the core can tell.
    core.submit(job("big", &["n1", "n2", "n3", "n4"], 1), 3).unwrap();
    assert_eq!(core.plain_decision("idle", &one, 3), None, "a job is queued");
    core.end_job("big", 3).unwrap();
    core.set_up(&down, true, 4);
    core.reserve(1, 10, 100, ReservationOwner::User("v".into()), 5).unwrap();
    assert_eq!(core.plain_decision("idle", &one, 5), None, "a reservation is ahead");
    assert_eq!(core.plain_decision("idle", &ask(4, 4, ""), 20), None, "a reservation is open");
}

#[test]
fn plain_decisions_match_the_core_across_many_pools() {
    use super::view::Decision;
    let mut random = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % n
    };
    let (mut plain, mut compared) = (0, 0);
    for round in 0..300 {
        let hosts = 2 + next(5) as usize;
        let mut core = core(hosts);
        for j in 0..next(4) {
            let peak = (next(3) == 0).then_some(2);
            let _ = core.submit(Job { peak, ..job(&format!("s{j}"), &["n1"], next(2) as u32) }, 0);
        }
        core.submit(job("me", &["n1"], 0), 0).unwrap();
        core.open_session("t".into(), &JobAuth::Credential { job: "me".into(), secret: "secret".into() }, "n1", 0)
            .unwrap();
        // Some of its own grants, a host down or draining, sometimes a queued job.
        if next(2) == 0 {
            let _ = core.get("t", &[], false, &ask(1, 1 + next(2) as u32, &format!("k{round}")), 1);
        }
        let name = format!("h{}", next(hosts as u64));
        match next(4) {
            0 => drop(core.set_up(&name, false, 1)),
            1 => drop(core.drain(&name, true, 1)),
            _ => {}
        }
        if next(4) == 0 {
            let _ = core.submit(Job { walltime_s: 100, ..job("q", &["n1", "n2"], 1) }, 1);
        }
        let min = 1 + next(3) as u32;
        let asked = Ask { wait_s: if next(4) == 0 { 5 } else { 0 }, ..ask(min, min + next(3) as u32, "") };
        let full = full_decision(&core, "me", &asked, 2);
        if let Some(quick) = core.plain_decision("me", &asked, 2) {
            assert_eq!(quick, full, "round {round}: {asked:?}");
            plain += 1;
            if matches!(quick, Decision::Granted(_)) {
                compared += 1;
            }
        }
    }
    assert!(plain > 100 && compared > 30, "{plain} plain decisions, {compared} grants: the comparison means something");
}

#[test]
fn a_cpu_device_served_where_a_gpu_was_registered_is_not_granted() {
    use ac_proto::backend::{DeviceInfo, DeviceKind};
    let mut core = Core::default();
    let mut h = host("h", true);
    h.devices = vec![Device { index: 0, name: "NVIDIA H100 80GB HBM3".into(), memory: 80 << 30, holder: None }];
    core.add_host(h).unwrap();
    let gpu = DeviceInfo {
        index: 0,
        name: "NVIDIA H100 80GB HBM3".into(),
        kind: DeviceKind::Cuda,
        compute_capability: Some((9, 0)),
        memory_total: 80 << 30,
        memory_free: 1 << 30,
    };
    assert!(!core.set_served("h", std::slice::from_ref(&gpu), 0), "as registered: nothing changes");
    assert_eq!(usable_free(&core.hosts), 1);
    let cpu = DeviceInfo {
        name: "CPU device".into(),
        kind: DeviceKind::Cpu,
        compute_capability: None,
        memory_total: 256 << 20,
        ..gpu.clone()
    };
    assert!(core.set_served("h", &[cpu], 0));
    assert_eq!(usable_free(&core.hosts), 0, "a CPU device is not the GPU registered");
    let problems = core.host_problems();
    assert!(
        problems[0]
            .contains("h/0: registered as NVIDIA H100 80GB HBM3 (81920 MiB), served as CPU device (Cpu, 256 MiB)"),
        "{problems:?}"
    );
    assert!(core.set_served("h", &[gpu], 0));
    assert_eq!(usable_free(&core.hosts), 1);
    assert!(core.host_problems().is_empty());
}
