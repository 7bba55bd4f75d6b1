//! The ARM as a companion of a real Slurm controller (`[slurm]` in the configuration): munge
//! credentials of jobs' processes, accelerator grants recorded as the jobs' `ac` licenses, the
//! license-only reservation that keeps unusable accelerators out of Slurm's pool, and the list of
//! jobs Slurm still runs. Everything goes through Slurm's own commands (`scontrol`, `squeue`,
//! `unmunge`), found on `PATH` or configured, with `SLURM_CONF` from the environment.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

/// `[slurm]`: how to reach Slurm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlurmConfig {
    /// Work with Slurm: jobs are bound by its prolog, grants recorded in it.
    pub enabled: bool,
    /// The cluster license that stands for the accelerator pool (`Licenses=ac:N`).
    pub license: String,
    /// The license-only reservation holding the licenses of unusable (down, draining)
    /// accelerators.
    pub unavailable_reservation: String,
    /// The license-only reservation that holds a grant's licenses while it is recorded, so
    /// that Slurm cannot start a job into them meanwhile (empty between grants).
    pub grant_reservation: String,
    /// munged's socket (default: munge's own).
    pub munge_socket: Option<PathBuf>,
    /// Slurm's configuration file, handed to its commands as `SLURM_CONF` (default: the
    /// ARM's own environment, else Slurm's default).
    pub slurm_conf: Option<PathBuf>,
    /// How often jobs Slurm no longer runs are released, and the reservation resized, seconds.
    pub reconcile_s: u64,
    /// `scontrol`.
    pub scontrol: PathBuf,
    /// `squeue`.
    pub squeue: PathBuf,
    /// `unmunge`.
    pub unmunge: PathBuf,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            license: "ac".into(),
            unavailable_reservation: "ac_unavailable".into(),
            grant_reservation: "ac_granting".into(),
            munge_socket: None,
            slurm_conf: None,
            reconcile_s: 10,
            scontrol: "scontrol".into(),
            squeue: "squeue".into(),
            unmunge: "unmunge".into(),
        }
    }
}

/// What went wrong talking to Slurm or munge, for humans.
pub type SlurmError = String;

/// How long a Slurm command may take before the controller counts as unreachable: under the
/// SDK's request timeout (3 s), so that an `AC_Get` is answered with the reason rather than
/// retried. A healthy slurmctld answers in milliseconds.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Slurm's commands, as configured.
#[derive(Debug, Clone)]
pub struct Slurm {
    config: SlurmConfig,
}

/// Who a munge credential vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MungeIdentity {
    /// The Unix uid of the process that made it.
    pub uid: u32,
    /// What it carries.
    pub payload: String,
}

impl Slurm {
    /// Slurm as `config` says.
    pub fn new(config: SlurmConfig) -> Self {
        Self { config }
    }

    /// Runs `program` with `args` (and `input` on its standard input); its standard output.
    async fn run(&self, program: &PathBuf, args: &[&str], input: Option<&str>) -> Result<String, SlurmError> {
        use tokio::io::AsyncWriteExt;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(if input.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(conf) = &self.config.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        let what = format!("{} {}", program.display(), args.join(" "));
        let mut child = command.spawn().map_err(|e| format!("cannot run `{what}`: {e}"))?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(input.as_bytes()).await.map_err(|e| format!("`{what}`: {e}"))?;
        }
        let output = tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| format!("`{what}` did not answer in {COMMAND_TIMEOUT:?}"))?
            .map_err(|e| format!("`{what}`: {e}"))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!("`{what}` failed: {}", stderr.trim()));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// How many of the pool's licenses a job's `licenses` hold.
    pub fn pool_licenses(&self, licenses: &[(String, u32)]) -> u32 {
        licenses.iter().filter(|(name, _)| *name == self.config.license).map(|(_, n)| n).sum()
    }

    /// Decodes a munge credential (munged refuses expired and replayed ones).
    pub async fn verify_munge(&self, credential: &str) -> Result<MungeIdentity, SlurmError> {
        let socket = self.config.munge_socket.as_ref().map(|s| s.display().to_string());
        let mut args = Vec::new();
        if let Some(socket) = &socket {
            args.extend(["--socket", socket.as_str()]);
        }
        let decoded = self.run(&self.config.unmunge, &args, Some(credential)).await?;
        parse_unmunge(&decoded)
    }

    /// The `ac` licenses job `job` holds in Slurm.
    pub async fn job_licenses(&self, job: &str) -> Result<Vec<(String, u32)>, SlurmError> {
        let shown = self.run(&self.config.scontrol, &["show", "job", "-o", job], None).await?;
        Ok(parse_job_licenses(&shown))
    }

    /// Sets job `job`'s `ac` licenses to `count`, keeping its other licenses: `current`, as
    /// [`Slurm::job_licenses`] just read them.
    pub async fn replace_job_licenses(
        &self,
        job: &str,
        current: Vec<(String, u32)>,
        count: u32,
    ) -> Result<(), SlurmError> {
        let mut licenses: Vec<(String, u32)> =
            current.into_iter().filter(|(name, _)| *name != self.config.license).collect();
        if count > 0 {
            licenses.push((self.config.license.clone(), count));
        }
        let list: Vec<String> = licenses.iter().map(|(name, n)| format!("{name}:{n}")).collect();
        let setting = format!("licenses={}", list.join(","));
        self.run(&self.config.scontrol, &["update", &format!("jobid={job}"), &setting], None).await.map(drop)
    }

    /// The pool license's total and how much of it jobs and reservations use.
    pub async fn license_use(&self) -> Result<LicenseUse, SlurmError> {
        let shown = self.run(&self.config.scontrol, &["-o", "show", "lic", &self.config.license], None).await?;
        parse_license_use(&shown)
            .ok_or_else(|| format!("no license `{}` in Slurm: {}", self.config.license, shown.trim()))
    }

    /// The jobs Slurm runs (or is ending): the ones whose accelerators must stay bound.
    pub async fn active_jobs(&self) -> Result<BTreeSet<String>, SlurmError> {
        let args = ["-h", "-o", "%i", "-t", "CONFIGURING,RUNNING,SUSPENDED,COMPLETING,STOPPED,RESIZING,SIGNALING"];
        let listed = self.run(&self.config.squeue, &args, None).await?;
        Ok(listed.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
    }

    /// Slurm's pending jobs that want licenses of the pool, highest priority first.
    pub async fn pending_jobs(&self) -> Result<Vec<PendingJob>, SlurmError> {
        let listed = self.run(&self.config.squeue, &["--json", "-t", "PENDING"], None).await?;
        parse_pending(&listed, &self.config.license)
    }

    /// Holds `count` licenses of the pool in the unavailable-accelerators reservation (created
    /// when needed, deleted at 0).
    pub async fn hold_unavailable(&self, count: u32) -> Result<(), SlurmError> {
        let name = &self.config.unavailable_reservation;
        match (self.reservation_exists(name).await, count) {
            (false, 0) => Ok(()),
            (true, 0) => {
                self.run(&self.config.scontrol, &["delete", &format!("reservationname={name}")], None).await.map(drop)
            }
            (true, _) => self.resize_reservation(name, count).await,
            (false, _) => self.create_reservation(name, count).await,
        }
    }

    /// Holds `count` licenses in the grant reservation (created on first use, kept at 0
    /// between grants). Slurm checks a reservation against the pool's total only, and keeps
    /// reserved licenses from jobs: what it holds, Slurm cannot start a job into.
    pub async fn hold_for_grant(&self, count: u32) -> Result<(), SlurmError> {
        let name = &self.config.grant_reservation;
        match self.resize_reservation(name, count).await {
            Err(_) if !self.reservation_exists(name).await => self.create_reservation(name, count).await,
            done => done,
        }
    }

    async fn reservation_exists(&self, name: &str) -> bool {
        self.run(&self.config.scontrol, &["show", "reservation", name], None).await.is_ok()
    }

    async fn resize_reservation(&self, name: &str, count: u32) -> Result<(), SlurmError> {
        let (name, licenses) = (format!("reservationname={name}"), format!("licenses={}:{count}", self.config.license));
        self.run(&self.config.scontrol, &["update", &name, &licenses], None).await.map(drop)
    }

    async fn create_reservation(&self, name: &str, count: u32) -> Result<(), SlurmError> {
        let (name, licenses) = (format!("reservationname={name}"), format!("licenses={}:{count}", self.config.license));
        let args = ["create", &name, &licenses, "starttime=now", "duration=infinite", "flags=any_nodes", "users=root"];
        self.run(&self.config.scontrol, &args, None).await.map(drop)
    }
}

/// A pending Slurm job, as the scheduler's view needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    /// Job id.
    pub id: String,
    /// User name.
    pub user: String,
    /// Licenses of the pool it asks for.
    pub accelerators: u32,
    /// Its time limit, seconds (0: none).
    pub time_limit_s: u64,
    /// Slurm's priority.
    pub priority: u64,
}

/// `squeue --json`'s pending jobs with licenses of `license`, highest priority first.
fn parse_pending(listed: &str, license: &str) -> Result<Vec<PendingJob>, SlurmError> {
    let doc: serde_json::Value = serde_json::from_str(listed).map_err(|e| format!("squeue --json: {e}"))?;
    let jobs = doc.get("jobs").and_then(|j| j.as_array()).ok_or("squeue --json: no `jobs`")?;
    let number = |v: Option<&serde_json::Value>| -> u64 {
        // 22.05 prints plain numbers; later versions wrap them as {"set": true, "number": N}.
        v.and_then(|v| v.as_u64().or_else(|| v.get("number")?.as_u64())).unwrap_or(0)
    };
    let mut pending: Vec<PendingJob> = jobs
        .iter()
        .filter(|j| j.get("job_state").and_then(|s| s.as_str()).is_none_or(|s| s == "PENDING"))
        .filter_map(|j| {
            let licenses = j.get("licenses").and_then(|l| l.as_str()).unwrap_or("");
            let accelerators = parse_job_licenses(&format!("Licenses={licenses}"))
                .into_iter()
                .find(|(name, _)| name == license)
                .map(|(_, n)| n)?;
            let limit_min = number(j.get("time_limit"));
            Some(PendingJob {
                id: number(j.get("job_id")).to_string(),
                user: j.get("user_name").and_then(|u| u.as_str()).unwrap_or("").to_string(),
                accelerators,
                // Slurm's "infinite" is a huge number of minutes.
                time_limit_s: if limit_min >= u32::MAX as u64 - 2 { 0 } else { limit_min * 60 },
                priority: number(j.get("priority")),
            })
        })
        .collect();
    pending.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
    Ok(pending)
}

/// A license's use, as `scontrol show lic -o` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LicenseUse {
    /// `Total=`.
    pub total: u32,
    /// `Used=`: what jobs hold.
    pub used: u32,
    /// `Reserved=`: what reservations hold (Slurm's `Free=` does not subtract it).
    pub reserved: u32,
}

impl LicenseUse {
    /// What jobs may still take.
    pub fn free(&self) -> u32 {
        self.total.saturating_sub(self.used + self.reserved)
    }

    /// Whether jobs and reservations hold more than there is.
    pub fn overdrawn(&self) -> bool {
        self.used + self.reserved > self.total
    }
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// `LicenseName=ac Total=8 Used=4 Free=4 Reserved=0 Remote=no`.
fn parse_license_use(shown: &str) -> Option<LicenseUse> {
    let line = shown.lines().find(|l| l.contains("LicenseName="))?;
    let number = |key: &str| field(line, key).and_then(|v| v.parse().ok());
    Some(LicenseUse { total: number("Total")?, used: number("Used")?, reserved: number("Reserved").unwrap_or(0) })
}

/// The `Licenses=` of `scontrol show job -o`: `ac:4,matlab:1`, or `(null)`.
fn parse_job_licenses(shown: &str) -> Vec<(String, u32)> {
    let Some(list) = field(shown, "Licenses") else { return Vec::new() };
    list.split(',')
        .filter_map(|entry| {
            let (name, count) = entry.split_once(':').unwrap_or((entry, "1"));
            Some((name.to_string(), count.parse().ok()?))
        })
        .filter(|(name, _)| name != "(null)")
        .collect()
}

/// `unmunge`'s report: `KEY: value` lines (`STATUS: Success (0)`, `UID: alice (1000)`), a
/// blank line, then the payload.
fn parse_unmunge(decoded: &str) -> Result<MungeIdentity, SlurmError> {
    let (header, payload) = decoded.split_once("\n\n").unwrap_or((decoded, ""));
    let value = |key: &str| header.lines().find_map(|l| l.strip_prefix(key)?.trim_start().strip_prefix(':'));
    let status = value("STATUS").map(str::trim).unwrap_or("");
    if !status.starts_with("Success") {
        return Err(format!("munge credential refused: {status}"));
    }
    let uid = value("UID")
        .and_then(|v| v.rsplit_once('(')?.1.trim_end().strip_suffix(')')?.parse().ok())
        .ok_or_else(|| "munge's answer has no UID".to_string())?;
    Ok(MungeIdentity { uid, payload: payload.trim_end_matches('\n').to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_and_munge_outputs_parse() {
        let lic = "LicenseName=ac Total=8 Used=4 Free=4 Reserved=0 Remote=no\n";
        assert_eq!(parse_license_use(lic), Some(LicenseUse { total: 8, used: 4, reserved: 0 }));
        let reserved = parse_license_use("LicenseName=ac Total=8 Used=2 Free=6 Reserved=6 Remote=no").unwrap();
        assert_eq!((reserved.free(), reserved.overdrawn()), (0, false));
        let job = "JobId=7 JobName=wrap Licenses=ac:4,matlab:1 Network=(null)";
        assert_eq!(parse_job_licenses(job), vec![("ac".into(), 4), ("matlab".into(), 1)]);
        assert!(parse_job_licenses("JobId=7 Licenses=(null) Network=(null)").is_empty());
        let decoded = "STATUS:          Success (0)\nUID:             alice (1000)\nGID:             alice (1000)\n\nac-arm:7:n1\n";
        assert_eq!(parse_unmunge(decoded).unwrap(), MungeIdentity { uid: 1000, payload: "ac-arm:7:n1".into() });
        let squeue = r#"{"jobs": [
            {"job_id": 12, "job_state": "PENDING", "licenses": "ac:4", "priority": 10, "time_limit": 60, "user_name": "alice"},
            {"job_id": 13, "job_state": "PENDING", "licenses": "", "priority": 50, "time_limit": 60, "user_name": "bob"},
            {"job_id": 14, "job_state": "PENDING", "licenses": "matlab:1,ac:2", "priority": {"set": true, "number": 20}, "time_limit": 4294967295, "user_name": "carol"}
        ]}"#;
        let pending = parse_pending(squeue, "ac").unwrap();
        assert_eq!(pending.iter().map(|p| (p.id.as_str(), p.accelerators)).collect::<Vec<_>>(), [("14", 2), ("12", 4)]);
        assert_eq!((pending[0].time_limit_s, pending[1].time_limit_s), (0, 3600));
        let replayed = "STATUS:          Replayed credential (15)\nUID:             alice (1000)\n\n";
        assert!(parse_unmunge(replayed).unwrap_err().contains("Replayed"));
    }
}
