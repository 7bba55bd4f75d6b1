//! Batch integration with a real Slurm (`ac_tests::slurm::SlurmCluster`): `--acpn` through the
//! SPANK plugin and `job_submit.lua`, licenses, the prolog's binding, munge-authenticated
//! `AC_Init` in `srun` tasks, dynamic grants recorded in Slurm, and the failure cases.

use std::time::{Duration, Instant};

use ac_tests::slurm::SlurmCluster;
use ac_tests::workspace_binary;

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
    let run_as = |user: &str| {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", user, "--", &client(), "slurm-task"]).envs(c.task_env(&job, "n1"));
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
    c.run("scontrol", &["update", &format!("jobid={job}"), "starttime=now"]);
    let ran = c.wait_until(Duration::from_secs(30), |c| c.output(&job).contains("done")).await;
    assert!(ran, "after the manager came back: {}", c.output(&job));
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
    let (samples, worst) = (Arc::new(AtomicU32::new(0)), Arc::new(Mutex::new((0u32, 0u32, 0u32))));
    let monitor = {
        let (c, stop, samples, worst) = (c.clone(), stop.clone(), samples.clone(), worst.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (total, used, reserved) = c.licenses();
                samples.fetch_add(1, Ordering::Relaxed);
                let mut w = worst.lock().unwrap();
                if used > w.1 {
                    *w = (total, used, reserved);
                    if used > total {
                        let jobs = c.run("squeue", &["-h", "-o", "%i %T %W"]);
                        eprintln!("overdrawn: {used} of {total}, {reserved} reserved; jobs:\n{jobs}");
                    }
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
    let requests = (0..100).map(|i| {
        let (session, held, granted, twice) = (&sessions[i % 20], held.clone(), &granted, &twice);
        async move {
            // Spread over 3 s, so that requests meet Slurm starting the submitted jobs.
            tokio::time::sleep(Duration::from_millis(30 * i as u64)).await;
            let Ok(Some(set)) = session.get(1).await else { return };
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
    monitor.join().unwrap();
    let (total, used, reserved) = *worst.lock().unwrap();
    println!(
        "granted {} of 100; {} samples of Slurm's pool; the most used: {used} of {total} ({reserved} reserved)",
        granted.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed)
    );
    // Slurm's Used never exceeds its total. (Reserved may, for an instant: a grant is held in a
    // reservation while its job's licenses grow, and no job can start into it meanwhile.)
    assert!(used <= total, "Slurm's pool was overdrawn: {used} used of {total} ({reserved} reserved)");
    assert_eq!(twice.load(Ordering::Relaxed), 0, "an accelerator was granted twice at once");
    assert!(granted.load(Ordering::Relaxed) > 0, "no dynamic request was granted at all");
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
