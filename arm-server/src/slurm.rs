//! The ARM as a companion of a real Slurm controller (`[slurm]` in the configuration): munge
//! credentials of jobs' processes, accelerator grants recorded as the jobs' `ac` licenses, the
//! license-only reservation that keeps unusable accelerators out of Slurm's pool, and the list of
//! jobs Slurm still runs. Everything goes through Slurm's own commands (`scontrol`, `squeue`,
//! `unmunge`), found on `PATH` or configured, with `SLURM_CONF` from the environment.

use std::collections::BTreeMap;
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
    /// The license-only reservation holding the licenses of accelerators lent to batch jobs
    /// (elastic grants), ending when the first of them is due back: Slurm plans its pending
    /// jobs onto them then, and counts none of them as the jobs' own.
    pub lent_reservation: String,
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
            lent_reservation: "ac_lent".into(),
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

    /// The license that stands for the pool.
    pub fn license(&self) -> &str {
        &self.config.license
    }

    /// How many of the pool's licenses a job holds.
    pub fn pool_licenses(&self, job: &JobLicenses) -> u32 {
        job.licenses.iter().filter(|(name, _)| *name == self.config.license).map(|(_, n)| n).sum()
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

    /// The licenses job `job` holds in Slurm.
    pub async fn job_licenses(&self, job: &str) -> Result<JobLicenses, SlurmError> {
        let shown = self.run(&self.config.scontrol, &["show", "job", "-o", job], None).await?;
        parse_job(&shown, job).ok_or_else(|| format!("Slurm does not list job {job}"))
    }

    /// What the manager needs to register running job `job` on demand (a job without static
    /// accelerators, whose prolog did not call the manager): its user, nodes and time limit.
    pub async fn running_job(&self, job: &str) -> Result<RunningJob, SlurmError> {
        let shown = self.run(&self.config.scontrol, &["show", "job", "-o", job], None).await?;
        let (running, node_list) = parse_running_job(&shown, job)?;
        let nodes = self.run(&self.config.scontrol, &["show", "hostnames", &node_list], None).await?;
        Ok(RunningJob { nodes: nodes.lines().map(str::to_string).filter(|n| !n.is_empty()).collect(), ..running })
    }

    /// Sets the job's `ac` licenses to `count`, keeping its other licenses (`current`, as
    /// [`Slurm::job_licenses`] just read them).
    pub async fn replace_job_licenses(&self, current: JobLicenses, count: u32) -> Result<(), SlurmError> {
        let mut licenses: Vec<(String, u32)> =
            current.licenses.into_iter().filter(|(name, _)| *name != self.config.license).collect();
        if count > 0 {
            licenses.push((self.config.license.clone(), count));
        }
        let list: Vec<String> = licenses.iter().map(|(name, n)| format!("{name}:{n}")).collect();
        let setting = format!("licenses={}", list.join(","));
        let target = format!("jobid={}", current.target);
        self.run(&self.config.scontrol, &["update", &target, &setting], None).await.map(drop)
    }

    /// The pool license's total and how much of it jobs and reservations use.
    pub async fn license_use(&self) -> Result<LicenseUse, SlurmError> {
        let shown = self.run(&self.config.scontrol, &["-o", "show", "lic", &self.config.license], None).await?;
        parse_license_use(&shown)
            .ok_or_else(|| format!("no license `{}` in Slurm: {}", self.config.license, shown.trim()))
    }

    /// Every job Slurm lists, in one `squeue --json` (which ignores `-t` in 22.05): the ones it
    /// runs (whose accelerators stay bound, with their current time limits and licenses) and the
    /// pending ones that want licenses of the pool, highest priority first. Job ids are the
    /// unique ones (`job_id`), never an array's `1_3` form, which names no job the manager binds.
    pub async fn jobs(&self) -> Result<SlurmJobs, SlurmError> {
        let listed = self.run(&self.config.squeue, &["--json"], None).await?;
        parse_jobs(&listed, &self.config.license)
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

    /// Holds `count` licenses in the lent-accelerators reservation, ending `ends_in_s` from
    /// now (created when needed, kept at 0 until it ends on its own). Slurm keeps its pending
    /// jobs off them until then, and plans them onto them from then.
    pub async fn hold_lent(&self, count: u32, ends_in_s: u64) -> Result<(), SlurmError> {
        let name = &self.config.lent_reservation;
        let (named, licenses) =
            (format!("reservationname={name}"), format!("licenses={}:{count}", self.config.license));
        let end = format!("endtime=now+{}", ends_in_s.max(1));
        match self.run(&self.config.scontrol, &["update", &named, &licenses, &end], None).await {
            Err(_) if count > 0 && !self.reservation_exists(name).await => {
                let args = ["create", &named, &licenses, "starttime=now", &end, "flags=any_nodes", "users=root"];
                self.run(&self.config.scontrol, &args, None).await.map(drop)
            }
            done => done.map(drop),
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
    /// Why it is pending (`Licenses`: it would start if Slurm had the licenses).
    pub reason: String,
}

/// A job Slurm runs (or is starting, suspending, ending), as the reconciliation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveJob {
    /// Its time limit now (an admin may have changed it), seconds (0: none).
    pub time_limit_s: u64,
    /// Licenses of the pool it holds in Slurm's count.
    pub accelerators: u32,
    /// When Slurm started this run of it (Unix time; a requeued job starts again).
    pub start_time: u64,
}

/// What `squeue --json` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmJobs {
    /// Jobs Slurm runs, by job id.
    pub active: BTreeMap<String, ActiveJob>,
    /// Pending jobs that want licenses of the pool, highest priority first.
    pub pending: Vec<PendingJob>,
}

/// States of a job whose processes may still run (22.05's JSON names the base state only: a
/// completing job already shows as COMPLETED, and its epilog releases it as the reconciliation
/// would).
const ACTIVE_STATES: [&str; 6] = ["CONFIGURING", "RUNNING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING"];

/// `squeue --json`'s jobs: the active ones, and the pending ones with licenses of `license`.
#[doc(hidden)] // public for the fuzz targets (`fuzz/`), not API
pub fn parse_jobs(listed: &str, license: &str) -> Result<SlurmJobs, SlurmError> {
    let doc: serde_json::Value = serde_json::from_str(listed).map_err(|e| format!("squeue --json: {e}"))?;
    let jobs = doc.get("jobs").and_then(|j| j.as_array()).ok_or("squeue --json: no `jobs`")?;
    let number = |v: Option<&serde_json::Value>| -> u64 {
        // 22.05 prints plain numbers; later versions wrap them as {"set": true, "number": N}.
        v.and_then(|v| v.as_u64().or_else(|| v.get("number")?.as_u64())).unwrap_or(0)
    };
    // Slurm's "infinite" is a huge number of minutes.
    let limit_s = |j: &serde_json::Value| match number(j.get("time_limit")) {
        m if m >= u32::MAX as u64 - 2 => 0,
        m => m * 60,
    };
    let pool = |j: &serde_json::Value| {
        let licenses = j.get("licenses").and_then(|l| l.as_str()).unwrap_or("");
        parse_job_licenses(&format!("Licenses={licenses}"))
            .into_iter()
            .find(|(name, _)| name == license)
            .map(|(_, n)| n)
    };
    let mut listed = SlurmJobs::default();
    for j in jobs {
        let id = number(j.get("job_id")).to_string();
        // Later versions print the state as a list of words.
        let state = match j.get("job_state") {
            Some(serde_json::Value::Array(words)) => words.first().and_then(|w| w.as_str()).unwrap_or(""),
            Some(state) => state.as_str().unwrap_or(""),
            None => "",
        };
        if ACTIVE_STATES.contains(&state) {
            let active = ActiveJob {
                time_limit_s: limit_s(j),
                accelerators: pool(j).unwrap_or(0),
                start_time: number(j.get("start_time")),
            };
            listed.active.insert(id, active);
        } else if state == "PENDING" {
            let Some(accelerators) = pool(j) else { continue };
            listed.pending.push(PendingJob {
                id,
                user: j.get("user_name").and_then(|u| u.as_str()).unwrap_or("").to_string(),
                accelerators,
                time_limit_s: limit_s(j),
                priority: number(j.get("priority")),
                reason: j.get("state_reason").and_then(|r| r.as_str()).unwrap_or("").to_string(),
            });
        }
    }
    listed.pending.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
    Ok(listed)
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
        // Widened: Slurm's figures are u32s each, their sum need not be.
        (self.total as u64).saturating_sub(self.used as u64 + self.reserved as u64) as u32
    }

    /// Whether jobs and reservations hold more than there is.
    pub fn overdrawn(&self) -> bool {
        self.used as u64 + self.reserved as u64 > self.total as u64
    }
}

/// A job Slurm runs, as an on-demand registration needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    /// User name.
    pub user: String,
    /// User id.
    pub uid: u32,
    /// Its nodes, expanded.
    pub nodes: Vec<String>,
    /// Its time limit, seconds (0: none).
    pub time_limit_s: u64,
}

/// Job `job` of `scontrol show job -o` when it runs: the job (nodes not yet expanded) and its
/// node list.
#[doc(hidden)] // public for tests, not API
pub fn parse_running_job(shown: &str, job: &str) -> Result<(RunningJob, String), SlurmError> {
    let own = format!("JobId={job} ");
    let line = shown.lines().find(|l| l.starts_with(&own)).ok_or_else(|| format!("Slurm does not list job {job}"))?;
    let state = field(line, "JobState").unwrap_or("");
    if state != "RUNNING" {
        return Err(format!("job {job} is {state} in Slurm, not running"));
    }
    // `UserId=alice(1000)`.
    let (user, uid) = field(line, "UserId")
        .and_then(|u| {
            let (name, rest) = u.split_once('(')?;
            Some((name.to_string(), rest.strip_suffix(')')?.parse().ok()?))
        })
        .ok_or_else(|| format!("job {job}: no UserId in Slurm's answer"))?;
    let nodes = field(line, "NodeList").ok_or_else(|| format!("job {job}: no NodeList in Slurm's answer"))?;
    let limit = field(line, "TimeLimit").unwrap_or("UNLIMITED");
    let time_limit_s =
        parse_time_limit(limit).ok_or_else(|| format!("job {job}: time limit `{limit}` not understood"))?;
    Ok((RunningJob { user, uid, nodes: Vec::new(), time_limit_s }, nodes.to_string()))
}

/// A time limit in seconds (0: none), as Slurm prints it: `UNLIMITED`, `MM:SS`, `HH:MM:SS` or
/// `D-HH:MM:SS`.
pub fn parse_time_limit(limit: &str) -> Option<u64> {
    let limit = limit.trim();
    if limit.eq_ignore_ascii_case("UNLIMITED") || limit.eq_ignore_ascii_case("NOT_SET") {
        return Some(0);
    }
    let (days, clock) = limit.split_once('-').map_or(Ok((0, limit)), |(d, c)| d.parse().map(|d: u64| (d, c))).ok()?;
    let parts: Vec<u64> = clock.split(':').map(str::parse).collect::<Result<_, _>>().ok()?;
    let seconds = match parts[..] {
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(days * 86_400 + seconds)
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// `LicenseName=ac Total=8 Used=4 Free=4 Reserved=0 Remote=no`.
#[doc(hidden)] // public for the fuzz targets (`fuzz/`), not API
pub fn parse_license_use(shown: &str) -> Option<LicenseUse> {
    let line = shown.lines().find(|l| l.contains("LicenseName="))?;
    let number = |key: &str| field(line, key).and_then(|v| v.parse().ok());
    Some(LicenseUse { total: number("Total")?, used: number("Used")?, reserved: number("Reserved").unwrap_or(0) })
}

/// A job's licenses in Slurm, and how to name that job alone in an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLicenses {
    /// `A_T` for a task of array `A` (an update of job id `A` would change every task of the
    /// array when `A` is the task that keeps the array's id), else the job id.
    pub target: String,
    /// Its licenses, by name.
    pub licenses: Vec<(String, u32)>,
}

/// Job `job` in `scontrol show job -o`: an array's own id lists every task of the array, one
/// line each, and only the line of the job itself counts.
#[doc(hidden)] // public for the fuzz targets (`fuzz/`), not API
pub fn parse_job(shown: &str, job: &str) -> Option<JobLicenses> {
    let own = format!("JobId={job} ");
    let line = shown.lines().find(|l| l.starts_with(&own))?;
    let target = match (field(line, "ArrayJobId"), field(line, "ArrayTaskId")) {
        (Some(array), Some(task)) => format!("{array}_{task}"),
        _ => job.to_string(),
    };
    Some(JobLicenses { target, licenses: parse_job_licenses(line) })
}

/// The `Licenses=` of `scontrol show job -o`: `ac:4,matlab:1`, or `(null)`.
#[doc(hidden)] // public for the fuzz targets (`fuzz/`), not API
pub fn parse_job_licenses(shown: &str) -> Vec<(String, u32)> {
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
#[doc(hidden)] // public for the fuzz targets (`fuzz/`), not API
pub fn parse_unmunge(decoded: &str) -> Result<MungeIdentity, SlurmError> {
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
    fn a_running_job_parses_and_a_pending_one_is_refused() {
        let shown = "JobId=7 JobName=x UserId=alice(1000) GroupId=alice(1000) JobState=RUNNING Reason=None \
                     TimeLimit=01:00:00 NodeList=n[1-2] BatchHost=n1\n";
        let (job, nodes) = parse_running_job(shown, "7").unwrap();
        assert_eq!((job.user.as_str(), job.uid, job.time_limit_s, nodes.as_str()), ("alice", 1000, 3600, "n[1-2]"));
        let pending = shown.replace("RUNNING", "PENDING");
        assert!(parse_running_job(&pending, "7").unwrap_err().contains("PENDING"));
        assert!(parse_running_job(shown, "8").is_err());
    }

    #[test]
    fn slurm_time_limits_parse() {
        assert_eq!(parse_time_limit("UNLIMITED\n"), Some(0));
        assert_eq!(parse_time_limit("5:00"), Some(300));
        assert_eq!(parse_time_limit("1:00:00"), Some(3600));
        assert_eq!(parse_time_limit("2-00:00:10"), Some(2 * 86_400 + 10));
        assert_eq!(parse_time_limit("soon"), None);
    }

    #[test]
    fn slurm_and_munge_outputs_parse() {
        let lic = "LicenseName=ac Total=8 Used=4 Free=4 Reserved=0 Remote=no\n";
        assert_eq!(parse_license_use(lic), Some(LicenseUse { total: 8, used: 4, reserved: 0 }));
        let reserved = parse_license_use("LicenseName=ac Total=8 Used=2 Free=6 Reserved=6 Remote=no").unwrap();
        assert_eq!((reserved.free(), reserved.overdrawn()), (0, false));
        // Found reading the code for the `slurm` fuzz target: Used + Reserved overflowed u32
        // (a panic with overflow checks; wrapped, a full pool looked free).
        let huge = parse_license_use("LicenseName=ac Total=8 Used=4294967295 Reserved=1").unwrap();
        assert_eq!((huge.free(), huge.overdrawn()), (0, true));
        let job = "JobId=7 JobName=wrap Licenses=ac:4,matlab:1 Network=(null)";
        assert_eq!(parse_job_licenses(job), vec![("ac".into(), 4), ("matlab".into(), 1)]);
        assert!(parse_job_licenses("JobId=7 Licenses=(null) Network=(null)").is_empty());
        let array =
            "JobId=2 ArrayJobId=1 ArrayTaskId=1 Licenses=ac:2\nJobId=1 ArrayJobId=1 ArrayTaskId=4 Licenses=ac:1\n";
        let own = JobLicenses { target: "1_4".into(), licenses: vec![("ac".into(), 1)] };
        assert_eq!(parse_job(array, "1"), Some(own), "the array's own id names its last task alone");
        assert_eq!(parse_job(job, "7").map(|j| j.target), Some("7".into()));
        assert_eq!(parse_job(job, "70"), None);
        let decoded = "STATUS:          Success (0)\nUID:             alice (1000)\nGID:             alice (1000)\n\nac-arm:7:n1\n";
        assert_eq!(parse_unmunge(decoded).unwrap(), MungeIdentity { uid: 1000, payload: "ac-arm:7:n1".into() });
        let squeue = r#"{"jobs": [
            {"job_id": 12, "job_state": "PENDING", "licenses": "ac:4", "priority": 10, "time_limit": 60, "user_name": "alice"},
            {"job_id": 13, "job_state": "PENDING", "licenses": "", "priority": 50, "time_limit": 60, "user_name": "bob"},
            {"job_id": 14, "job_state": "PENDING", "licenses": "matlab:1,ac:2", "priority": {"set": true, "number": 20}, "time_limit": 4294967295, "user_name": "carol"},
            {"job_id": 3, "array_job_id": 1, "array_task_id": 2, "job_state": "RUNNING", "licenses": "ac:2", "time_limit": 10, "start_time": 1700000000},
            {"job_id": 4, "job_state": ["RUNNING"], "licenses": "", "time_limit": 4294967295},
            {"job_id": 5, "job_state": "COMPLETED", "licenses": "ac:1", "time_limit": 10}
        ]}"#;
        let jobs = parse_jobs(squeue, "ac").unwrap();
        let pending = &jobs.pending;
        assert_eq!(pending.iter().map(|p| (p.id.as_str(), p.accelerators)).collect::<Vec<_>>(), [("14", 2), ("12", 4)]);
        assert_eq!((pending[0].time_limit_s, pending[1].time_limit_s), (0, 3600));
        let array_task = ActiveJob { time_limit_s: 600, accelerators: 2, start_time: 1_700_000_000 };
        assert_eq!(jobs.active.get("3"), Some(&array_task), "an array task by its own job id");
        assert_eq!(jobs.active.keys().collect::<Vec<_>>(), ["3", "4"]);
        assert_eq!(jobs.active["4"].time_limit_s, 0);
        let replayed = "STATUS:          Replayed credential (15)\nUID:             alice (1000)\n\n";
        assert!(parse_unmunge(replayed).unwrap_err().contains("Replayed"));
    }
}
