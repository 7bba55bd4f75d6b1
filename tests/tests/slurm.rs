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
