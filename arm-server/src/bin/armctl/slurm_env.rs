//! `armctl slurm prolog|epilog` in Slurm's hands: what Slurm's environment says of the job
//! (its nodes, user and time limit, the accelerators its `--acpn` asked), and where a refusal
//! goes so that an admin finds it (syslog and the job's AdminComment).

use ac_proto::arm::Request;

use crate::{Command, SlurmCommand};

pub(crate) fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .map_err(|_| anyhow::anyhow!("{name} is not set: run this as Slurm's PrologSlurmctld/EpilogSlurmctld"))
}

/// The node names of a Slurm node list (`n[1-2],x3`), as Slurm itself expands them.
pub(crate) fn hostnames(list: &str) -> anyhow::Result<Vec<String>> {
    let output = std::process::Command::new("scontrol").args(["show", "hostnames", list]).output()?;
    anyhow::ensure!(output.status.success(), "scontrol show hostnames: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?.lines().map(str::to_string).collect())
}

/// The time limit Slurm gives job `id` (the ARM plans dynamic grants with it).
pub(crate) fn time_limit(id: &str) -> anyhow::Result<u64> {
    // `-j` of an array's own id lists every task of the array: `%A` (each task's own id)
    // picks the job itself.
    let output = std::process::Command::new("squeue").args(["-h", "-j", id, "-o", "%A %l"]).output()?;
    anyhow::ensure!(output.status.success(), "squeue: {}", String::from_utf8_lossy(&output.stderr));
    let shown = String::from_utf8(output.stdout)?;
    let limit = shown.lines().find_map(|l| l.trim().strip_prefix(id)?.strip_prefix(' '));
    let limit = limit.ok_or_else(|| anyhow::anyhow!("squeue does not list job {id}: `{}`", shown.trim()))?;
    arm_server::slurm::parse_time_limit(limit)
        .ok_or_else(|| anyhow::anyhow!("time limit `{}` not understood", limit.trim()))
}

/// The static accelerators per node the job asked for (`--acpn`, which the SPANK plugin passes
/// as SPANK_ACPN); 0 when it asked for none.
pub(crate) fn spank_acpn() -> anyhow::Result<u32> {
    let acpn = std::env::var("SPANK_ACPN").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "0".into());
    acpn.parse().map_err(|e| anyhow::anyhow!("SPANK_ACPN `{acpn}`: {e}"))
}

/// The binding Slurm's prolog asks for, from the environment Slurm gives it; `None` for a job
/// without static accelerators, which does not depend on the manager to start.
pub(crate) fn prolog_request() -> anyhow::Result<Option<Request>> {
    let acpn = spank_acpn()?;
    if acpn == 0 {
        return Ok(None);
    }
    let id = env("SLURM_JOB_ID")?;
    Ok(Some(Request::JobBind {
        walltime_s: time_limit(&id)?,
        id,
        nodes: hostnames(&env("SLURM_JOB_NODELIST")?)?,
        acpn,
        user: env("SLURM_JOB_USER")?,
        uid: env("SLURM_JOB_UID")?.parse()?,
    }))
}

/// The job Slurm runs this prolog or epilog for.
pub(crate) fn slurm_job() -> String {
    std::env::var("SLURM_JOB_ID").unwrap_or_default()
}

/// Logs a line of the prolog or epilog to syslog, where Slurm's admins look.
pub(crate) fn log_slurm_line(line: &str) {
    let _ = std::process::Command::new("logger").args(["-t", "armctl", "-p", "user.err", "--", line]).output();
}

/// Slurm keeps nothing of what a failing PrologSlurmctld or EpilogSlurmctld prints: the reason
/// goes to syslog and to the job's `AdminComment` (`scontrol show job`), where an admin looks.
pub(crate) fn slurm_refusal(command: &Command, reason: &str) {
    let Command::Slurm(which) = command else { return };
    let what = match which {
        SlurmCommand::Prolog => "prolog",
        SlurmCommand::Epilog => "epilog",
    };
    let job = slurm_job();
    let line = format!("ac {what} of job {job}: {reason}");
    log_slurm_line(&line);
    // `jobid=A` of an array's own id would comment every task of the array: `A_T` is this one.
    let task =
        std::env::var("SLURM_ARRAY_JOB_ID").and_then(|a| Ok(format!("{a}_{}", std::env::var("SLURM_ARRAY_TASK_ID")?)));
    let target = task.unwrap_or_else(|_| job.clone());
    if !target.is_empty() {
        // Appended: a site's own prolog or a requeue's reason may be there already.
        let comment = match admin_comment(&target) {
            Some(earlier) if !earlier.is_empty() && !earlier.contains(&line) => format!("{earlier}; {line}"),
            _ => line,
        };
        let setting = format!("admincomment={comment}");
        let _ = std::process::Command::new("scontrol").args(["update", &format!("jobid={target}"), &setting]).output();
    }
}

/// The job's AdminComment now, as `scontrol show job` prints it (the rest of its line, as it
/// may hold spaces).
pub(crate) fn admin_comment(job: &str) -> Option<String> {
    let output = std::process::Command::new("scontrol").args(["show", "job", job]).output().ok()?;
    let shown = String::from_utf8_lossy(&output.stdout).into_owned();
    shown.lines().find_map(|l| l.trim_start().strip_prefix("AdminComment=").map(|c| c.trim_end().to_string()))
}
