//! The batch integration with a real Slurm (issue 11): `AC_Get` of a Slurm job's task, which
//! records the grant in Slurm before answering, and the prolog's binding of 2-node jobs, on the
//! throw-away cluster of the tests (`ac_tests::slurm::SlurmCluster`: needs root, slurm-wlm and
//! munge).

use std::time::{Duration, Instant};

use ac_tests::slurm::SlurmCluster;

use crate::setup::percentiles;

pub async fn with_slurm(quick: bool) -> anyhow::Result<()> {
    let (gets, jobs) = if quick { (10, 3) } else { (100, 20) };
    let c = SlurmCluster::start(4, 4).await;
    println!("## Slurm (a 2-node Slurm 22.05 cluster on loopback, the ARM as a process, 4 CPU-device backends)\n");

    let holder = c.sbatch(&["--acpn=1"], "sleep 600");
    let running = c.wait_until(Duration::from_secs(20), |c| c.job_field(&holder, "JobState") == "RUNNING").await;
    anyhow::ensure!(running, "the job did not start");
    let session = c.task_session(&holder, "n1").await;
    let (mut get, mut free) = (Vec::new(), Vec::new());
    for _ in 0..gets {
        let start = Instant::now();
        let set = session.get(1).await?.ok_or_else(|| anyhow::anyhow!("AC_Get rejected"))?;
        get.push(start.elapsed());
        let start = Instant::now();
        session.free(set).await?;
        free.push(start.elapsed());
    }
    session.finalize().await?;
    c.run("scancel", &[&holder]);
    anyhow::ensure!(c.wait_until(Duration::from_secs(10), |c| c.job_over(&holder)).await, "the job did not end");

    let submitted: Vec<String> = (0..jobs).map(|_| c.sbatch(&["-N2", "--acpn=2"], "true")).collect();
    for job in &submitted {
        anyhow::ensure!(c.wait_until(Duration::from_secs(60), |c| c.job_over(job)).await, "job {job} did not run");
    }
    let prologs: Vec<Duration> = c.prolog_times().into_iter().skip(1).map(Duration::from_micros).collect();

    println!("| operation | n | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    let row = |label: &str, samples: Vec<Duration>| {
        let n = samples.len();
        let (p50, p99) = percentiles(samples);
        println!("| {label} | {n} | {:.2} | {:.2} |", p50 / 1e3, p99 / 1e3);
    };
    row("`AC_Get(1)` of a Slurm job's task (grant recorded in Slurm, connection included)", get);
    row("`AC_Free` of it (licenses shrunk in Slurm)", free);
    row("`PrologSlurmctld` binding of a 2-node `--acpn=2` job (`armctl slurm prolog`)", prologs);
    println!();
    Ok(())
}
