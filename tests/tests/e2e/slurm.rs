// shape: the batch integration's scenarios against a real Slurm, each a short story on a cluster
// of its own; together they are the checks of what docs/slurm.md promises.
//! Batch integration with a real Slurm (`ac_tests::slurm::SlurmCluster`): `--acpn` through the
//! SPANK plugin and `job_submit.lua`, licenses, the prolog's binding, munge-authenticated
//! `AC_Init` in `srun` tasks, dynamic grants recorded in Slurm, and the failure cases.

use std::time::{Duration, Instant};

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

use ac_proto::arm::{Request, Response};
use ac_tests::slurm::SlurmCluster;
use ac_tests::{eventually, workspace_binary};

fn client() -> String {
    workspace_binary("ac-test-client").display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srun_tasks_of_a_two_node_job_get_their_nodes_accelerators() {
    let c = SlurmCluster::start(4, 4).await;
    let job = c.sbatch(&["-N2", "--acpn=2"], &format!("srun --ntasks-per-node=1 {} slurm-task", client()));
    assert_eq!(c.job_field(&job, "Licenses"), "ac:4", "job_submit.lua turned --acpn=2 on 2 nodes into licenses");
    let done = c.wait_until(Duration::from_secs(30), |c| c.output(&job).matches("done").count() == 2).await;
    let out = c.output(&job);
    assert!(done, "the tasks did not finish: {out}");
    assert!(out.contains("node n1 static 2 ok") && out.contains("node n2 static 2 ok"), "{out}");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.job_over(&job)).await);
    let back = c.wait_until(Duration::from_secs(5), |c| c.licenses().1 == 0).await;
    assert!(back, "Slurm's licenses: {:?}", c.licenses());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_does_not_fit_waits_for_licenses_and_starts_when_the_first_ends() {
    let c = SlurmCluster::start(2, 2).await;
    let first = c.sbatch(&["--acpn=2"], &format!("{} slurm-task\nsleep 3", client()));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&first).contains("done")).await, "{}", c.output(&first));
    let second = c.sbatch(&["--acpn=1"], &format!("{} slurm-task", client()));
    let waits = c.wait_until(Duration::from_secs(5), |c| c.job_field(&second, "Reason") == "Licenses").await;
    assert!(waits, "second job: {} / {}", c.job_field(&second, "JobState"), c.job_field(&second, "Reason"));
    assert!(c.output(&second).is_empty(), "it must not have started");
    let ran = c.wait_until(Duration::from_secs(20), |c| c.output(&second).contains("node n1 static 1 ok")).await;
    assert!(ran, "second job: {}", c.output(&second));
    assert!(c.job_over(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_grant_shows_in_slurms_licenses_until_ac_free() {
    let c = SlurmCluster::start(3, 3).await;
    let job = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 2 2 2", client()));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("holding")).await, "{}", c.output(&job));
    assert_eq!(c.job_field(&job, "Licenses"), "ac:3", "the grant is recorded before AC_Get returns");
    assert_eq!(c.licenses().1, 3);
    assert!(c.wait_until(Duration::from_secs(10), |c| c.output(&job).contains("freed")).await);
    assert_eq!(c.job_field(&job, "Licenses"), "ac:1", "AC_Free shrinks it back before it returns");
    assert_eq!(c.licenses().1, 1);
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("done")).await, "{}", c.output(&job));
    assert!(c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_frees_a_jobs_accelerators_static_and_dynamic_within_5_s() {
    let c = SlurmCluster::start(3, 3).await;
    let job = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 2 600", client()));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("holding")).await, "{}", c.output(&job));
    assert_eq!(c.free_accelerators().await, 0);
    let start = Instant::now();
    c.run("scancel", &[&job]);
    let mut free = 0;
    while start.elapsed() < Duration::from_secs(5) && free < 3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        free = c.free_accelerators().await;
    }
    assert_eq!(free, 3, "not all released 5 s after scancel");
    println!("scancel to all released: {:?}", start.elapsed());
    assert!(c.wait_until(Duration::from_secs(5), |c| c.licenses().1 == 0).await, "{:?}", c.licenses());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_of_another_user_is_refused_the_jobs_accelerators() {
    let c = SlurmCluster::start(1, 1).await;
    let job = c.sbatch(&["--acpn=1"], "sleep 60");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.job_field(&job, "JobState") == "RUNNING").await);
    // The other user may not enter the checkout (cloned under /root, or a private temporary
    // directory): it runs a copy in the cluster's directory, which every user may enter.
    let copy = c.dir.path().join("ac-test-client");
    std::fs::copy(client(), &copy).expect("client copied");
    let run_as = |user: &str| {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", user, "--", copy.to_str().expect("path"), "slurm-task"]).envs(c.task_env(&job, "n1"));
        command.output().expect("runuser")
    };
    let stranger = run_as("acother");
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(!stranger.status.success(), "acother got root's job");
    assert!(said.contains("Unauthorized") && said.contains("not a job of uid"), "{said}");
    // The job's own user, the same way, is let in: the refusal was about the user.
    let owner = run_as("root");
    assert!(owner.status.success(), "{}", String::from_utf8_lossy(&owner.stderr));
    c.run("scancel", &[&job]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_manager_down_the_prolog_fails_and_slurm_requeues_the_job() {
    let mut c = SlurmCluster::start(1, 1).await;
    c.kill_arm();
    let job = c.sbatch(&["--acpn=1"], &format!("{} slurm-task", client()));
    let requeued = c
        .wait_until(Duration::from_secs(30), |c| {
            c.job_field(&job, "Restarts").parse::<u32>().unwrap_or(0) >= 1 && c.job_field(&job, "JobState") == "PENDING"
        })
        .await;
    assert!(requeued, "state {} reason {}", c.job_field(&job, "JobState"), c.job_field(&job, "Reason"));
    assert!(c.output(&job).is_empty(), "the job must not start without its accelerators: {}", c.output(&job));
    c.restart_arm();
    // Not within the second of the requeue (see the requeue test below).
    c.run("scontrol", &["update", &format!("jobid={job}"), "starttime=now+2"]);
    let ran = c.wait_until(Duration::from_secs(30), |c| c.output(&job).contains("done")).await;
    assert!(ran, "after the manager came back: {}", c.output(&job));
}

/// With the manager down, only jobs that asked for accelerators fail: a job without `--acpn`
/// starts and ends as if the manager were not there, and one with `--acpn` is held back with
/// the reason appended to what its AdminComment already said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_manager_down_only_jobs_that_asked_for_accelerators_fail() {
    let mut c = SlurmCluster::start(1, 1).await;
    c.kill_arm();
    let plain = c.sbatch(&[], "echo plain ran");
    let asked = c.sbatch(&["--acpn=1", "--hold"], &format!("{} slurm-task", client()));
    c.run("scontrol", &["update", &format!("jobid={asked}"), "admincomment=site: checked by ops"]);
    c.run("scontrol", &["release", &asked]);
    let ran = c.wait_until(Duration::from_secs(30), |c| c.job_over(&plain)).await;
    assert!(ran && c.output(&plain).contains("plain ran"), "{}: {}", c.show_job(&plain), c.output(&plain));
    assert_eq!(c.job_field(&plain, "JobState"), "COMPLETED", "{}", c.show_job(&plain));
    let told = c
        .wait_until(Duration::from_secs(30), |c| c.show_job(&asked).contains(&format!("ac prolog of job {asked}: ")))
        .await;
    let shown = c.show_job(&asked);
    assert!(told, "{shown}");
    assert!(
        shown.contains(&format!("AdminComment=site: checked by ops; ac prolog of job {asked}: ")),
        "the reason is appended to the comment that was there: {shown}"
    );
    assert!(c.output(&asked).is_empty(), "it must not run without its accelerator: {}", c.output(&asked));
    c.run("scancel", &[&asked]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_keeps_its_binding_across_kill_9_of_the_manager() {
    let mut c = SlurmCluster::start(3, 3).await;
    let job = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 1 4", client()));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("holding")).await, "{}", c.output(&job));
    c.kill_arm();
    c.restart_arm();
    let view = c.arm_job(&job).await.expect("the job survived the restart");
    assert_eq!(
        (view.state.as_str(), view.static_accelerators.len(), view.dynamic_accelerators.len()),
        ("running", 1, 1)
    );
    let done = c.wait_until(Duration::from_secs(20), |c| c.output(&job).contains("done")).await;
    let out = c.output(&job);
    assert!(done && out.contains("freed") && out.contains("static again ok"), "{out}");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await);
}

/// A replicated manager under Slurm: the prolog, the epilog, the SPANK plugin's tasks and the
/// reconciliation are given every replica's address, and the leader is killed while a job holds
/// accelerators. The running job frees and finishes through the new leader, a job submitted
/// after the kill is bound by its prolog there, and both epilogs release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_bound_and_released_across_a_failover_of_a_replicated_manager() {
    let mut c = SlurmCluster::start_replicated(4, 4, 58).await;
    let first = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 1 4", client()));
    let holding = c.wait_until(Duration::from_secs(20), |c| c.output(&first).contains("holding")).await;
    assert!(holding, "{}\n{}", c.output(&first), c.logs());
    let killed = c.kill_leader().await;
    let second = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 1 0", client()));
    for job in [&first, &second] {
        let done = c.wait_until(Duration::from_secs(40), |c| c.output(job).contains("done")).await;
        let out = c.output(job);
        let whole = out.contains("got 1") && out.contains("freed") && out.contains("static again ok");
        assert!(done && whole, "job {job} (leader {killed} killed):\n{out}\n{}", c.logs());
    }
    let released = c.wait_until(Duration::from_secs(20), |c| c.licenses().1 == 0).await;
    assert!(released, "licenses still used: {:?}\n{}", c.licenses(), c.logs());
    for job in [&first, &second] {
        let view = c.arm_job(job).await.expect("the new leader knows the job");
        assert_eq!(view.state, "ended", "job {job}: {view:?}");
        assert!(view.static_accelerators.is_empty() && view.dynamic_accelerators.is_empty(), "{view:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_host_takes_its_accelerators_out_of_slurms_pool() {
    let c = SlurmCluster::start(2, 2).await;
    let drain = |undo: bool| ac_proto::arm::Request::HostDrain { name: "h1".into(), drain: !undo };
    c.admin().await.request(drain(false)).await.unwrap();
    let held = c.wait_until(Duration::from_secs(5), |c| c.licenses().2 == 1).await;
    assert!(held, "the drained accelerator's license is not reserved: {:?}", c.licenses());
    let job = c.sbatch(&["--acpn=2"], "true");
    let waits = c.wait_until(Duration::from_secs(5), |c| c.job_field(&job, "Reason") == "Licenses").await;
    assert!(waits, "a job needing the drained accelerator must wait: {}", c.job_field(&job, "Reason"));
    c.admin().await.request(drain(true)).await.unwrap();
    assert!(c.wait_until(Duration::from_secs(5), |c| c.licenses().2 == 0).await, "{:?}", c.licenses());
    assert!(c.wait_until(Duration::from_secs(15), |c| c.job_over(&job)).await, "the job ran once undrained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_slurmctld_unreachable_ac_get_is_rejected_and_static_accelerators_keep_working() {
    let c = SlurmCluster::start(2, 2).await;
    let go = c.dir.path().join("go");
    let body = format!("AC_TEST_WAIT_FOR={} {} slurm-task 1 0", go.display(), client());
    let job = c.sbatch(&["--acpn=1"], &body);
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("waiting")).await, "{}", c.output(&job));
    let pid = std::fs::read_to_string(c.slurm_dir().join("slurmctld.pid")).unwrap();
    std::process::Command::new("kill").args(["-STOP", pid.trim()]).status().unwrap();
    std::fs::write(&go, "").unwrap();
    let rejected = c.wait_until(Duration::from_secs(30), |c| c.output(&job).contains("static again ok")).await;
    std::process::Command::new("kill").args(["-CONT", pid.trim()]).status().unwrap();
    let out = c.output(&job);
    assert!(rejected, "{out}");
    assert!(out.contains("rejected: ") && out.contains("Slurm: `scontrol"), "the reason names Slurm: {out}");
}

/// 100 concurrent dynamic requests while 20 jobs are submitted: Slurm's pool is never
/// overdrawn, and no accelerator is granted twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_requests_racing_slurms_own_scheduling_never_overdraw_the_pool() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    let c = Arc::new(SlurmCluster::start(8, 8).await);
    let holders: Vec<String> = (0..2).map(|_| c.sbatch(&["--acpn=1"], "sleep 300")).collect();
    for job in &holders {
        assert!(c.wait_until(Duration::from_secs(10), |c| c.job_field(job, "JobState") == "RUNNING").await);
    }
    let mut sessions = Vec::new();
    for i in 0..20 {
        sessions.push(c.task_session(&holders[i % 2], "n1").await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Every sample is read strictly (`licenses` fails the monitor on an answer it cannot read,
    // and the join below fails the test); each one that is overdrawn is counted.
    let (samples, overdrawn) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let worst = Arc::new(Mutex::new((0u32, 0u32, 0u32)));
    let monitor = {
        let (c, stop, samples, overdrawn, worst) =
            (c.clone(), stop.clone(), samples.clone(), overdrawn.clone(), worst.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (total, used, reserved) = c.licenses();
                samples.fetch_add(1, Ordering::Relaxed);
                if used > total {
                    overdrawn.fetch_add(1, Ordering::Relaxed);
                    let jobs = c.run("squeue", &["-h", "-o", "%i %T %W"]);
                    eprintln!("overdrawn: {used} of {total}, {reserved} reserved; jobs:\n{jobs}");
                }
                let mut w = worst.lock().unwrap();
                if used > w.1 {
                    *w = (total, used, reserved);
                }
            }
        })
    };
    let submitter = {
        let c = c.clone();
        std::thread::spawn(move || (0..20).map(|_| c.sbatch(&["--acpn=1"], "sleep 1")).collect::<Vec<_>>())
    };
    let held: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let (granted, twice) = (AtomicU32::new(0), AtomicU32::new(0));
    let failed: Mutex<Vec<String>> = Mutex::default();
    let requests = (0..100).map(|i| {
        let (session, held, granted, twice, failed) = (&sessions[i % 20], held.clone(), &granted, &twice, &failed);
        async move {
            // Spread over 3 s, so that requests meet Slurm starting the submitted jobs.
            tokio::time::sleep(Duration::from_millis(30 * i as u64)).await;
            // Granted or rejected: a race with Slurm is no reason for an error.
            let set = match session.get(1).await {
                Ok(Some(set)) => set,
                Ok(None) => return,
                Err(e) => return failed.lock().unwrap().push(e.to_string()),
            };
            granted.fetch_add(1, Ordering::Relaxed);
            for h in &set.handles {
                if !held.lock().unwrap().insert(h.id.clone()) {
                    twice.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            for h in &set.handles {
                held.lock().unwrap().remove(&h.id);
            }
            session.free(set).await.expect("free");
        }
    });
    futures_util::future::join_all(requests).await;
    let jobs = submitter.join().unwrap();
    for job in &jobs {
        assert!(c.wait_until(Duration::from_secs(60), |c| c.job_over(job)).await, "job {job} never ran");
    }
    stop.store(true, Ordering::Relaxed);
    monitor.join().expect("the monitor read every sample of Slurm's pool");
    let (total, used, reserved) = *worst.lock().unwrap();
    println!(
        "granted {} of 100; {} samples of Slurm's pool; the most used: {used} of {total} ({reserved} reserved)",
        granted.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed)
    );
    // Slurm's Used never exceeds its total. (Reserved may, for an instant: a grant is held in a
    // reservation while its job's licenses grow, and no job can start into it meanwhile.)
    assert!(samples.load(Ordering::Relaxed) > 0, "no sample of Slurm's pool");
    let overdrawn = overdrawn.load(Ordering::Relaxed);
    assert_eq!(overdrawn, 0, "Slurm's pool was overdrawn in {overdrawn} samples (the most used: {used} of {total})");
    assert_eq!(twice.load(Ordering::Relaxed), 0, "an accelerator was granted twice at once");
    assert!(granted.load(Ordering::Relaxed) > 0, "no dynamic request was granted at all");
    let failed = failed.into_inner().unwrap();
    assert!(failed.is_empty(), "{} requests failed rather than be granted or rejected: {failed:?}", failed.len());
    for job in &holders {
        c.run("scancel", &[job]);
    }
}

/// A job that ends while the manager is down (its epilog cannot reach it) is released by the
/// reconciliation once the manager is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_slurm_ended_while_the_manager_was_down_are_released_when_it_comes_back() {
    let mut c = SlurmCluster::start(2, 2).await;
    let job = c.sbatch(&["--acpn=2"], "sleep 300");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.job_field(&job, "JobState") == "RUNNING").await);
    assert_eq!(c.free_accelerators().await, 0);
    c.kill_arm();
    c.run("scancel", &[&job]);
    assert!(c.wait_until(Duration::from_secs(30), |c| c.job_over(&job)).await, "Slurm did not end the job");
    c.restart_arm();
    let released = ac_tests::eventually(Duration::from_secs(10), || async { c.free_accelerators().await == 2 }).await;
    assert!(released, "the manager still holds the ended job's accelerators");
    assert_eq!(c.arm_job(&job).await.map(|v| v.state), Some("ended".into()));
}

/// The tasks of a job array are jobs of their own to the manager (Slurm's `job_id`, never the
/// `1_3` form): each is bound when it starts, none is released while it runs (each holds its
/// accelerator across several reconciliations, then uses it again), and the task that keeps
/// the array's own id starts at its first try (its prolog reads its own time limit, not every
/// task's), so the array runs in a few rounds instead of waiting out a requeue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_tasks_are_bound_and_kept_as_jobs_of_their_own() {
    let c = SlurmCluster::start(4, 4).await;
    c.sbatch(&["-a", "1-6", "-N1", "--acpn=1"], &format!("{} slurm-task 1 0 3", client()));
    let finished = |c: &SlurmCluster| c.outputs().iter().filter(|o| o.contains("static again ok\ndone")).count();
    // 6 tasks, 4 at a time, about 5 s each; a requeue would add 2 minutes.
    let all = c.wait_until(Duration::from_secs(60), |c| finished(c) == 6).await;
    assert!(all, "{} of 6 tasks finished: {:#?}", finished(&c), c.outputs());
    assert!(c.outputs().iter().all(|o| o.starts_with("node n")), "each task ran once: {:#?}", c.outputs());
    assert!(c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await, "{:?}", c.licenses());
}

/// A job requeued after a dynamic grant goes back to Slurm's queue with its static licenses
/// only, and runs again with them: Slurm and the manager agree on what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_job_starts_again_with_its_static_licenses_only() {
    let c = SlurmCluster::start(3, 3).await;
    let body = format!(
        "if [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then {0} slurm-task 1 600; else {0} slurm-task && sleep 600; fi",
        client()
    );
    let job = c.sbatch(&["--acpn=1"], &body);
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&job).contains("holding")).await, "{}", c.output(&job));
    assert_eq!(c.job_field(&job, "Licenses"), "ac:2");
    c.run("scontrol", &["requeue", &job]);
    let requeued = c
        .wait_until(Duration::from_secs(15), |c| {
            c.job_field(&job, "Restarts") == "1" && c.job_field(&job, "JobState") == "PENDING"
        })
        .await;
    assert!(requeued, "{}", c.show_job(&job));
    // Slurm holds a requeued job back for a while; `starttime` releases it, once the job's
    // first run is over (its epilog reached the manager, and Slurm no longer lists it as
    // completing). Not within the second of the requeue: slurmd refuses a credential made in
    // the second its job's earlier credential was revoked ("Job credential revoked"), so the
    // second run starts 2 s on.
    let ended = eventually(Duration::from_secs(10), || async {
        c.arm_job(&job).await.is_some_and(|v| v.state == "ended")
            && c.run("squeue", &["-h", "-t", "CG", "-o", "%A"]).trim().is_empty()
    })
    .await;
    assert!(ended, "the first run did not end: {}\n{}", c.show_job(&job), c.logs());
    c.run("scontrol", &["update", &format!("jobid={job}"), "starttime=now+2"]);
    let again = c.wait_until(Duration::from_secs(30), |c| c.output(&job).contains("done")).await;
    assert!(again, "the second run: {}\n{}\npool {:?}\n{}", c.output(&job), c.show_job(&job), c.licenses(), c.logs());
    assert_eq!((c.job_field(&job, "JobState").as_str(), c.job_field(&job, "Licenses").as_str()), ("RUNNING", "ac:1"));
    assert_eq!(c.licenses().1, 1, "Slurm counts what the manager holds");
    let view = c.arm_job(&job).await.expect("the second run is bound");
    assert_eq!((view.static_accelerators.len(), view.dynamic_accelerators.len()), (1, 0));
    c.run("scancel", &[&job]);
    let back = c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await;
    assert!(back, "Slurm lost count of the pool: {:?}", c.licenses());
}

/// The manager plans with Slurm's current time limit of a running job, raised or lowered by an
/// admin (`scontrol update timelimit=`); it never ends a batch job itself (the core's test
/// `batch_jobs_outlive_their_walltime_at_the_manager` checks that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_follows_a_running_jobs_changed_time_limit() {
    let c = SlurmCluster::start(1, 1).await;
    let job = c.sbatch(&["--acpn=1", "-t", "5"], "sleep 600");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.job_field(&job, "JobState") == "RUNNING").await);
    let walltime = || async { c.arm_job(&job).await.map(|v| v.walltime_s) };
    assert_eq!(walltime().await, Some(300), "the prolog's limit");
    for (minutes, seconds) in [("10", 600), ("3", 180)] {
        c.run("scontrol", &["update", &format!("jobid={job}"), &format!("timelimit={minutes}")]);
        let followed = eventually(Duration::from_secs(10), || async { walltime().await == Some(seconds) }).await;
        assert!(followed, "time limit {minutes} min: the manager has {:?}", walltime().await);
    }
    c.run("scancel", &[&job]);
}

/// A job with no static accelerators (no `--acpn`, or `--acpn=0`) is an ordinary job: its
/// processes find an empty set at `AC_Init` and get accelerators with `AC_Get`, through the SDK
/// and through the C ABI; and the same without Slurm (`ARM_ACPN=0`, `armctl job submit --acpn
/// 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_without_static_accelerators_get_them_with_ac_get_with_slurm_and_without() {
    let c = SlurmCluster::start(2, 2).await;
    let saxpy = c.dir.path().join("saxpy");
    compile_c_example("saxpy.c", &saxpy);
    let sdk = c.sbatch(&[], &format!("{} slurm-task 1", client()));
    let cabi = c.sbatch(&["--acpn=0"], &format!("{} 1000", saxpy.display()));
    for job in [&sdk, &cabi] {
        assert!(c.wait_until(Duration::from_secs(30), |c| c.job_over(job)).await, "{}", c.output(job));
    }
    let (sdk, cabi) = (c.output(&sdk), c.output(&cabi));
    assert!(sdk.contains("static 0 ok") && sdk.contains("got 1") && sdk.contains("done"), "{sdk}");
    assert!(cabi.contains("AC_Init: 0 static accelerator(s)") && cabi.contains("AC_Get(1): granted"), "{cabi}");
    assert!(cabi.contains("saxpy: 1000 elements OK"), "{cabi}");

    let without_slurm = |program: &std::path::Path, args: &[&str], env: &[(&str, &str)]| {
        let output = std::process::Command::new(program)
            .args(args)
            .env("ARM_ADDR", c.arm_addr.to_string())
            .env("ARM_CA_CERT", c.arm_dir().join("ca.pem"))
            .env("ARM_NODE", "n1")
            .envs(env.iter().copied())
            .output()
            .expect("the program runs");
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{program:?}: {said}");
        said
    };
    let ad_hoc = without_slurm(&saxpy, &["1000"], &[("ARM_ACPN", "0")]);
    assert!(ad_hoc.contains("AC_Init: 0 static accelerator(s)") && ad_hoc.contains("AC_Get(1): granted"), "{ad_hoc}");
    let (submitted, said) = c.armctl(&["job", "submit", "--job", "plain", "--nodes", "n1", "--acpn", "0"]);
    assert!(submitted, "armctl job submit --acpn 0: {said}");
    let credential = said.lines().find_map(|l| l.strip_prefix("ARM_JOB_CREDENTIAL=")).expect("a credential");
    let env = [("ARM_JOB_ID", "plain"), ("ARM_JOB_CREDENTIAL", credential)];
    let plain = without_slurm(&workspace_binary("ac-test-client"), &["slurm-task", "1"], &env);
    assert!(plain.contains("static 0 ok") && plain.contains("got 1") && plain.contains("done"), "{plain}");
}

/// Compiles `examples/c/NAME` against libac (built with the workspace) into `out`.
fn compile_c_example(name: &str, out: &std::path::Path) {
    let source = ac_tests::libac::repo().join("examples/c").join(name);
    ac_tests::libac::compile("gcc", &[source], &["-std=c99", "-O2"], out);
}

/// A Slurm pool that disagrees with the manager's (an admin raised `Licenses=` and
/// reconfigured) is reported by `armctl health` with both numbers; when Slurm then starts a job
/// the manager cannot bind, the prolog's refusal and its reason reach the job's
/// `AdminComment`, where an admin sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_out_of_step_is_reported_and_the_prologs_refusal_reaches_the_admin() {
    let c = SlurmCluster::start(2, 2).await;
    let ok = c.wait_until(Duration::from_secs(10), |c| c.armctl(&["health"]) == (true, "ok\n".to_string())).await;
    assert!(ok, "pools that agree: {}", c.armctl(&["health"]).1);
    c.set_slurm_pool(3);
    let reported = c
        .wait_until(Duration::from_secs(10), |c| {
            let (_, said) = c.armctl(&["health"]);
            said.contains("Licenses=ac:3") && said.contains("2 accelerator(s) registered")
        })
        .await;
    assert!(reported, "armctl health: {}", c.armctl(&["health"]).1);
    let Ok(Response::Health(problems)) = c.admin().await.request(Request::Health).await else { panic!("health") };
    assert!(problems.iter().any(|p| p.contains("out of step")), "{problems:?}");
    let first = c.sbatch(&["--acpn=2"], "sleep 600");
    assert!(c.wait_until(Duration::from_secs(10), |c| c.job_field(&first, "JobState") == "RUNNING").await);
    let second = c.sbatch(&["--acpn=1"], "echo ran");
    let told = c
        .wait_until(Duration::from_secs(20), |c| {
            c.show_job(&second).contains(&format!("AdminComment=ac prolog of job {second}: "))
        })
        .await;
    let shown = c.show_job(&second);
    assert!(told && shown.contains("out of step"), "{shown}");
    assert!(c.output(&second).is_empty(), "it must not run without its accelerator");
    c.run("scancel", &[&first, &second]);
}

/// `--acpn` beyond the pool is refused at submission, in words: what was asked per node and in
/// all, and what the pool holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_more_than_the_pool_is_refused_at_submit_in_words() {
    let c = SlurmCluster::start(1, 4).await;
    let (ok, said) = c.try_sbatch(&["-N1", "--acpn=8", "--wrap", "true"]);
    assert!(!ok && said.contains("--acpn=8 on 1 node(s) asks for 8 accelerator(s) in all; the pool holds 4"), "{said}");
    let (ok, said) = c.try_sbatch(&["-N2", "--acpn=3", "--wrap", "true"]);
    assert!(!ok && said.contains("--acpn=3 on 2 node(s) asks for 6 accelerator(s) in all"), "{said}");
    let (ok, said) = c.try_sbatch(&["-N2", "--acpn=2", "-o", "/dev/null", "--wrap", "true"]);
    assert!(ok, "the whole pool is not too much: {said}");
}

/// Heterogeneous jobs: `--acpn` on any component is refused at submission with the reason;
/// without it, the job runs and its program gets accelerators with `AC_Get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heterogeneous_jobs_refuse_acpn_at_submit_and_may_ac_get() {
    let c = SlurmCluster::start(1, 1).await;
    let first = ["--acpn=1", "-N1", "--wrap", "true", ":", "-N1", "--wrap", "true"];
    let second = ["-N1", "--wrap", "true", ":", "-N1", "--acpn=1", "--wrap", "true"];
    for args in [first, second] {
        let (ok, said) = c.try_sbatch(&args);
        assert!(!ok && said.contains("--acpn is not supported on heterogeneous jobs"), "{args:?}: {said}");
    }
    let out = c.dir.path().join("out-het.txt");
    let script = c.dir.path().join("het.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{} slurm-task 1\n", client())).unwrap();
    let output = format!("--output={}", out.display());
    let (ok, said) = c.try_sbatch(&["-N1", &output, ":", "-N1", script.to_str().unwrap()]);
    assert!(ok, "{said}");
    let ran = c
        .wait_until(Duration::from_secs(30), |_| std::fs::read_to_string(&out).is_ok_and(|o| o.contains("done")))
        .await;
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(ran && said.contains("static 0 ok") && said.contains("got 1"), "{said}");
}

/// Slurm reuses job ids (here a new cluster starts again at 1). A job that ended while the
/// manager could not hear of it (down through the epilog, and the reconciliation not yet run)
/// is not confused with the new job of its id: the new one is bound afresh, with nothing of the
/// old one's (its grant, its user's sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_job_reusing_an_old_jobs_id_gets_a_binding_of_its_own() {
    let mut c = SlurmCluster::start(2, 2).await;
    let old = c.sbatch(&["--acpn=1"], &format!("{} slurm-task 1 600", client()));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.output(&old).contains("holding")).await, "{}", c.output(&old));
    c.kill_arm();
    c.stop_slurm();
    // Back while Slurm is down (its reconciliation at start fails), with no other for the
    // test's length: the old job stays bound here, and only the new job's prolog can tell the
    // two apart.
    c.set_reconcile_s(3600);
    c.restart_arm();
    c.start_slurm_afresh(2);
    let view = c.arm_job(&old).await.expect("the old binding survived");
    assert_eq!((view.state.as_str(), view.dynamic_accelerators.len()), ("running", 1));
    let new = c.sbatch(&["--acpn=1"], &format!("{} slurm-task\nsleep 600", client()));
    assert_eq!(new, old, "the new cluster reuses the id");
    let ran = c.wait_until(Duration::from_secs(30), |c| c.output(&new).contains("done")).await;
    assert!(ran, "{}", c.output(&new));
    let view = c.arm_job(&new).await.expect("bound");
    assert_eq!((view.static_accelerators.len(), view.dynamic_accelerators.len()), (1, 0), "{view:?}");
    assert_eq!(c.free_accelerators().await, 1, "the old job's grant went back");
    assert_eq!(c.job_field(&new, "Licenses"), "ac:1");
    c.run("scancel", &[&new]);
}

/// An unmodified CUDA program in a batch job with `--acpn=2`: its two CUDA devices are the
/// job's two accelerators (issue 48). The backend's devices are the CUDA driver stand-in's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_runs_an_unmodified_cuda_program_on_both_its_accelerators() {
    let _turn = standin::exclusive().await;
    let c = SlurmCluster::start_with_pool(vec![ac_tests::cuda::standin_backend().await], 2).await;
    let Some(exe) = ac_tests::cuda::build("vector_add", c.dir.path()) else { return };
    let shim = ac_tests::cuda::shim_dir(c.dir.path());
    let run = |device: u32| format!("LD_LIBRARY_PATH={} {} 20000 {device}", shim.display(), exe.display());
    let job = c.sbatch(&["--acpn=2"], &format!("{} && {}", run(0), run(1)));
    assert!(c.wait_until(Duration::from_secs(60), |c| c.job_over(&job)).await, "{}", c.output(&job));
    let out = c.output(&job);
    assert!(out.contains("devices: 2; device 0:") && out.contains("20000 elements on device 0 exact"), "{out}");
    assert!(out.contains("20000 elements on device 1 exact"), "{out}");
    let back = c.wait_until(Duration::from_secs(5), |c| c.licenses().1 == 0).await;
    assert!(back, "Slurm's licenses: {:?}", c.licenses());
    standin::assert_no_violations();
}

/// A Python program in a batch job with `--acpn=1` (issue 49): `import ac` finds the job's
/// accelerator through Slurm as libac does. The interpreter is the test environment's
/// (`AC_PYTHON`: scripts/test's virtual environment, with the wheel installed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_runs_a_python_program_on_its_accelerator() {
    let Some(python) = std::env::var_os("AC_PYTHON") else {
        return ac_tests::skip("AC_PYTHON_REQUIRED", "no AC_PYTHON (scripts/test builds the wheel into .cache/py)");
    };
    let c = SlurmCluster::start(2, 2).await;
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/saxpy.py");
    let job = c.sbatch(&["--acpn=1"], &format!("{} {}", python.to_string_lossy(), example.display()));
    assert!(c.wait_until(Duration::from_secs(60), |c| c.job_over(&job)).await, "{}", c.output(&job));
    let out = c.output(&job);
    assert!(out.contains("saxpy on h") && out.contains("saxpy OK: 1048576 results checked"), "{out}");
    let back = c.wait_until(Duration::from_secs(5), |c| c.licenses().1 == 0).await;
    assert!(back, "Slurm's licenses: {:?}", c.licenses());
}

/// Licenses follow the nodes a job gets. With a node range (`-N1-2`) or a task count alone
/// (`-n2 --ntasks-per-node=1`), Slurm chooses how many nodes at start, and the prolog binds
/// `--acpn` on each; Slurm must count every accelerator bound, or it could start another job
/// on one that is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ranges_and_task_counts_are_counted_on_the_nodes_slurm_gives() {
    let c = SlurmCluster::start(2, 2).await;
    for args in
        [&["-N1-2", "--acpn=1"][..], &["-n2", "--ntasks-per-node=1", "--acpn=1"], &["-n2", "--spread-job", "--acpn=1"]]
    {
        let job = c.sbatch(args, &format!("srun --ntasks-per-node=1 {} slurm-task\nsleep 3", client()));
        let ran = c.wait_until(Duration::from_secs(30), |c| c.output(&job).matches("done").count() == 2).await;
        assert!(ran, "{args:?}: {}\n{}\n{}", c.output(&job), c.show_job(&job), c.logs());
        let out = c.output(&job);
        assert!(out.contains("node n1 static 1 ok") && out.contains("node n2 static 1 ok"), "{args:?}: {out}");
        let bound = c.arm_job(&job).await.expect("bound").static_accelerators.len();
        assert_eq!(bound, 2, "{args:?}");
        assert_eq!(c.job_field(&job, "Licenses"), "ac:2", "{args:?}: Slurm counts what is bound");
        let (total, used, _) = c.licenses();
        assert_eq!((total, used), (2, 2), "{args:?}");
        assert!(c.wait_until(Duration::from_secs(15), |c| c.job_over(&job)).await);
        assert!(c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await, "{:?}", c.licenses());
    }
}

/// Accelerators lent to a batch job (an elastic `AC_Get`) are announced to Slurm as the ARM's
/// lent reservation, ending when they are due back, not as the job's licenses; a job that
/// Slurm then holds back for want of licenses makes the manager reclaim them, and starts once
/// they are given back. Slurm's count never exceeds its total meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_licenses_reclaims_lent_accelerators_and_starts_once_they_are_back() {
    let c = SlurmCluster::start(2, 2).await;
    let lender = c.sbatch(&["--acpn=1"], &format!("{} slurm-lend 5", client()));
    let lent = c.wait_until(Duration::from_secs(20), |c| c.output(&lender).contains("lent 1")).await;
    assert!(lent, "{}\n{}", c.output(&lender), c.logs());
    assert_eq!(c.job_field(&lender, "Licenses"), "ac:1", "the lent accelerator is not the job's own");
    assert_eq!(c.licenses(), (2, 1, 1), "(total, used, reserved): the lent one is in the reservation");
    let reservation = c.run("scontrol", &["-o", "show", "reservation", "ac_lent"]);
    assert!(reservation.contains("Licenses=ac:1"), "{reservation}");
    let submitted = Instant::now();
    let waiting = c.sbatch(&["--acpn=1"], &format!("{} slurm-task", client()));
    let (mut peak, mut reasons, mut freed) = (0, std::collections::BTreeSet::new(), None);
    let ran = c
        .wait_until(Duration::from_secs(40), |c| {
            let (total, used, reserved) = c.licenses();
            assert!(used + reserved <= total, "Slurm's count exceeds its total: {used} + {reserved} of {total}");
            peak = peak.max(used + reserved);
            if c.job_field(&waiting, "JobState") == "PENDING" {
                reasons.insert(c.job_field(&waiting, "Reason"));
            }
            if freed.is_none() && c.output(&lender).contains("freed 1") {
                freed = Some(Instant::now());
            }
            c.output(&waiting).contains("static 1 ok")
        })
        .await;
    assert!(ran, "the waiting job: {}\nlender: {}\n{}", c.show_job(&waiting), c.output(&lender), c.logs());
    println!(
        "submitted to running: {:?}; given back to running: {:?}",
        submitted.elapsed(),
        freed.map(|f| f.elapsed())
    );
    assert!(reasons.contains("Licenses"), "it waited for licenses, as Slurm said: {reasons:?}");
    let out = c.output(&lender);
    assert!(out.contains("freed 1") && out.contains("static again ok"), "lender: {out}");
    assert_eq!(peak, 2);
    let given_back = c.arm_job(&lender).await.expect("the lender still runs");
    assert_eq!((given_back.static_accelerators.len(), given_back.dynamic_accelerators.len()), (1, 0));
    assert!(c.wait_until(Duration::from_secs(15), |c| c.job_over(&waiting)).await);
    c.run("scancel", &[&lender]);
    assert!(c.wait_until(Duration::from_secs(10), |c| c.licenses().1 == 0).await, "{:?}", c.licenses());
}
