//! A real Slurm beside a real manager, for the batch-integration tests: `slurm/testing/
//! start-cluster` makes a two-node cluster (n1, n2, its own munged) in a temporary directory,
//! with the SPANK plugin and `job_submit.lua` of `slurm/`, and `armctl slurm prolog`/`epilog`
//! as `PrologSlurmctld`/`EpilogSlurmctld`; `arm-server` runs as a process with `[slurm]`
//! pointing at that cluster (or three, the replicas of one manager, each with `[slurm]`), and
//! CPU-device backends in this process are its pool.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{register_hosts, workspace_binary, ArmProcess, TestBackend};

/// A Slurm cluster, a manager working with it, and the manager's backends.
#[derive(Debug)]
pub struct SlurmCluster {
    /// Everything's files: `arm/` (the manager's state), `slurm/` (the cluster's).
    pub dir: tempfile::TempDir,
    /// The manager (None while a test has it stopped); a replicated manager's first replica.
    pub arm: Option<ArmProcess>,
    /// Its address (kept across restarts).
    pub arm_addr: std::net::SocketAddr,
    /// A replicated manager's other replicas (`arm` is the first): empty for a single manager.
    pub replicas: Vec<Replica>,
    /// Each replica's `[replication]` section, the first one's included.
    replication: Vec<String>,
    /// The backends, registered as `h0`, `h1`, ...
    pub backends: Vec<TestBackend>,
    /// How often the manager reconciles with Slurm, seconds.
    reconcile_s: u64,
}

/// A replica of a replicated manager beside Slurm, after the first.
#[derive(Debug)]
pub struct Replica {
    /// Its process (None while a test has it stopped).
    pub process: Option<ArmProcess>,
    /// Its address.
    pub addr: std::net::SocketAddr,
    /// Its state directory.
    pub dir: PathBuf,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("script written");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("script mode");
}

impl SlurmCluster {
    /// `backends` CPU-device backends, Slurm's pool of `licenses` accelerators.
    pub async fn start(backends: usize, licenses: u32) -> Self {
        let mut pool = Vec::new();
        for _ in 0..backends {
            pool.push(TestBackend::start(64).await);
        }
        Self::start_with_pool(pool, licenses).await
    }

    /// The backends of `pool` (registered as `h0`, `h1`, ...), Slurm's pool of `licenses`
    /// accelerators.
    pub async fn start_with_pool(pool: Vec<TestBackend>, licenses: u32) -> Self {
        Self::start_managed(pool, licenses, None).await
    }

    /// As [`SlurmCluster::start`], with a replicated manager: three replicas on
    /// `127.0.<net>.1-3` (clients on port 7000, Raft on 7100), each with `[slurm]`; the
    /// prolog, the epilog, the SPANK plugin and the tasks are given all three addresses.
    pub async fn start_replicated(backends: usize, licenses: u32, net: u8) -> Self {
        let mut pool = Vec::new();
        for _ in 0..backends {
            pool.push(TestBackend::start(64).await);
        }
        Self::start_managed(pool, licenses, Some(net)).await
    }

    async fn start_managed(pool: Vec<TestBackend>, licenses: u32, replicated: Option<u8>) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        // Other users' processes (the refused-user test) reach the manager's CA in here.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("dir mode");
        let (arm_dir, slurm_dir) = (dir.path().join("arm"), dir.path().join("slurm"));
        std::fs::create_dir_all(&slurm_dir).expect("slurm dir");
        let cluster = match replicated {
            None => {
                std::fs::create_dir_all(&arm_dir).expect("arm dir");
                let arm = ArmProcess::start_with_config(&arm_dir, "127.0.0.1:0", &Self::arm_toml(&slurm_dir, 1));
                let arm_addr = arm.addr;
                let (replicas, replication) = (Vec::new(), Vec::new());
                Self { dir, arm: Some(arm), arm_addr, replicas, replication, backends: pool, reconcile_s: 1 }
            }
            Some(net) => Self::start_replicas(dir, pool, net),
        };
        register_hosts(&cluster.admin().await, &cluster.backends).await;
        // The prolog and epilog hold a certificate of the batch role, as docs/slurm.md says.
        let issued = Command::new(workspace_binary("armctl"))
            .args(["cert", "issue", "--role", "batch", "--name", "slurmctld", "--out"])
            .arg(&arm_dir)
            .arg("--state-dir")
            .arg(&arm_dir)
            .output()
            .expect("armctl runs");
        assert!(issued.status.success(), "armctl cert issue: {}", String::from_utf8_lossy(&issued.stderr));
        cluster.start_slurm(licenses);
        cluster
    }

    /// Three replicas, prepared as docs/admin.md says, the first one in `arm/`.
    fn start_replicas(dir: tempfile::TempDir, pool: Vec<TestBackend>, net: u8) -> Self {
        let dirs: Vec<PathBuf> = ["arm", "arm2", "arm3"].iter().map(|d| dir.path().join(d)).collect();
        let keys = arm_server::keys::prepare_replicas(&dirs).expect("the replicas' directories");
        let addr = |id: u64, port: u16| -> std::net::SocketAddr {
            format!("127.0.{net}.{id}:{port}").parse().expect("address")
        };
        let members: Vec<arm_server::config::Member> = (1..=3)
            .map(|id| arm_server::config::Member {
                id,
                raft: addr(id, 7100),
                api: addr(id, 7000),
                key: keys[id as usize - 1].clone(),
            })
            .collect();
        let replication: Vec<String> = (1..=3)
            .map(|id| {
                let config = arm_server::config::ReplicationConfig {
                    id,
                    members: members.clone(),
                    join: false,
                    election_timeout_ms: 500,
                };
                config.to_toml().expect("a configuration")
            })
            .collect();
        let slurm_dir = dir.path().join("slurm");
        let start = |i: usize| {
            let toml = Self::arm_toml(&slurm_dir, 1) + &replication[i];
            ArmProcess::start_with_config(&dirs[i], &addr(i as u64 + 1, 7000).to_string(), &toml)
        };
        let arm = start(0);
        let replicas = (1..3)
            .map(|i| Replica { process: Some(start(i)), addr: addr(i as u64 + 1, 7000), dir: dirs[i].clone() })
            .collect();
        Self { dir, arm: Some(arm), arm_addr: addr(1, 7000), replicas, replication, backends: pool, reconcile_s: 1 }
    }

    /// Every address of the manager as `ARM_ADDR` takes them: one, or each replica's.
    pub fn arm_addrs(&self) -> String {
        let mut addrs = vec![self.arm_addr.to_string()];
        addrs.extend(self.replicas.iter().map(|r| r.addr.to_string()));
        addrs.join(",")
    }

    /// Client options naming every address of the manager.
    fn arm_options(&self) -> ac_frontend::arm::ArmOptions {
        let mut options = ac_frontend::arm::ArmOptions::new(self.arm_addr, self.arm_dir().join("ca.pem"));
        options.alternates = self.replicas.iter().map(|r| r.addr).collect();
        options.tuning = crate::quick_tuning();
        options
    }

    fn arm_toml(slurm_dir: &Path, reconcile_s: u64) -> String {
        format!(
            // Ad-hoc programs beside Slurm (one test runs one), counted against Slurm's pool.
            "allow_ad_hoc = true\n[slurm]\nenabled = true\nreconcile_s = {reconcile_s}\nmunge_socket = \"{}\"\nslurm_conf = \"{}\"\n",
            slurm_dir.join("munge.sock").display(),
            slurm_dir.join("slurm.conf").display()
        )
    }

    /// How long each prolog binding took, in microseconds, in the order they ran.
    pub fn prolog_times(&self) -> Vec<u64> {
        let recorded = std::fs::read_to_string(self.dir.path().join("prolog-times")).unwrap_or_default();
        recorded.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// The manager's state directory.
    pub fn arm_dir(&self) -> PathBuf {
        self.dir.path().join("arm")
    }

    /// The cluster's directory.
    pub fn slurm_dir(&self) -> PathBuf {
        self.dir.path().join("slurm")
    }

    /// What `armctl` needs to reach the manager as its admin.
    fn armctl_env(&self) -> String {
        let arm = self.arm_dir();
        format!(
            "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ARM_ADDR={} ARM_CA_CERT={} ARMCTL_CERT={} ARMCTL_KEY={}",
            self.arm_addrs(),
            arm.join("ca.pem").display(),
            arm.join("slurmctld.pem").display(),
            arm.join("slurmctld.key").display()
        )
    }

    /// From the next restart of the manager on, it reconciles every `seconds`.
    pub fn set_reconcile_s(&mut self, seconds: u64) {
        self.reconcile_s = seconds;
    }

    /// Stops Slurm (its jobs are cancelled first).
    pub fn stop_slurm(&self) {
        let _ = Command::new(repo().join("slurm/testing/stop-cluster")).arg(self.slurm_dir()).status();
    }

    /// Starts a new cluster in place of a stopped one (same files, same manager): its job ids
    /// start again at 1.
    pub fn start_slurm_afresh(&self, licenses: u32) {
        std::fs::remove_dir_all(self.slurm_dir()).expect("old cluster removed");
        std::fs::create_dir_all(self.slurm_dir()).expect("slurm dir");
        self.start_slurm(licenses);
    }

    /// Sets Slurm's pool (`Licenses=ac:N` in slurm.conf) and reconfigures Slurm.
    pub fn set_slurm_pool(&self, licenses: u32) {
        let path = self.slurm_dir().join("slurm.conf");
        let conf = std::fs::read_to_string(&path).expect("slurm.conf");
        let conf: Vec<String> = conf
            .lines()
            .map(|l| if l.starts_with("Licenses=") { format!("Licenses=ac:{licenses}") } else { l.to_string() })
            .collect();
        std::fs::write(&path, conf.join("\n") + "\n").expect("slurm.conf written");
        self.run("scontrol", &["reconfigure"]);
    }

    /// Runs `armctl` as the manager's admin; its exit status and standard output.
    pub fn armctl(&self, args: &[&str]) -> (bool, String) {
        let arm = self.arm_dir();
        let output = self
            .command(workspace_binary("armctl").to_str().expect("path"))
            .args(args)
            .env("ARM_ADDR", self.arm_addrs())
            .env("ARM_CA_CERT", arm.join("ca.pem"))
            .env("ARMCTL_CERT", arm.join("admin.pem"))
            .env("ARMCTL_KEY", arm.join("admin.key"))
            .output()
            .expect("armctl runs");
        (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The ends of the manager's and slurmctld's logs, for a failing test to show.
    pub fn logs(&self) -> String {
        let arm = crate::tail(&self.arm_dir().join("arm-server.log"), 40);
        let ctld = crate::tail(&self.slurm_dir().join("log/slurmctld.log"), 40);
        format!("--- arm-server.log\n{arm}\n--- slurmctld.log\n{ctld}")
    }

    /// Everything `scontrol show job` says of job `job` ("" once Slurm forgot it).
    pub fn show_job(&self, job: &str) -> String {
        let output = self.command("scontrol").args(["show", "job", job]).output().expect("scontrol");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs `sbatch` with `args` (no script: `--wrap` or a script among them); its exit status
    /// and everything it printed.
    pub fn try_sbatch(&self, args: &[&str]) -> (bool, String) {
        let output = self.command("sbatch").args(args).output().expect("sbatch runs");
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), said)
    }

    /// The outputs of every job so far (`out-*.txt`), for jobs whose ids are not known ahead
    /// (array tasks).
    pub fn outputs(&self) -> Vec<String> {
        let files = std::fs::read_dir(self.dir.path()).expect("cluster dir");
        let names = files.filter_map(|e| e.ok()).map(|e| e.path());
        let outputs = names.filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("out-")));
        outputs.map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect()
    }

    fn start_slurm(&self, licenses: u32) {
        let (armctl, env) = (workspace_binary("armctl"), self.armctl_env());
        // The prolog records how long each binding took (microseconds), for the benchmark.
        let prolog = self.dir.path().join("prolog");
        let times = self.dir.path().join("prolog-times");
        let timed = format!(
            "{env}\nstart=$(date +%s%N)\n{} slurm prolog\nrc=$?\necho $(( ($(date +%s%N) - start) / 1000 )) >> {}\nexit $rc",
            armctl.display(),
            times.display()
        );
        script(&prolog, &timed);
        let epilog = self.dir.path().join("epilog");
        script(&epilog, &format!("{env}\nexec {} slurm epilog", armctl.display()));
        let plugstack = format!(
            "arm_addr={} arm_ca={} munge_socket={}",
            self.arm_addrs(),
            self.arm_dir().join("ca.pem").display(),
            self.slurm_dir().join("munge.sock").display()
        );
        let output = Command::new(repo().join("slurm/testing/start-cluster"))
            .arg(self.slurm_dir())
            .args(["--licenses", &licenses.to_string()])
            .arg("--prolog")
            .arg(&prolog)
            .arg("--epilog")
            .arg(&epilog)
            .args(["--plugstack-args", &plugstack])
            .output()
            .expect("start-cluster runs (./scripts/test installs slurm-wlm and munge)");
        assert!(output.status.success(), "Slurm did not start:\n{}", String::from_utf8_lossy(&output.stderr));
    }

    /// A Slurm command of this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", self.slurm_dir().join("slurm.conf"));
        command
    }

    /// Runs a Slurm command; its standard output (panics on failure).
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let output = self.command(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(output.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Submits a batch script (`sbatch` with `args`); returns the job id. The job's output goes
    /// to [`SlurmCluster::output`].
    pub fn sbatch(&self, args: &[&str], body: &str) -> String {
        let path = self.dir.path().join(format!("job-{}.sh", ac_proto::random_hex(4)));
        script(&path, body);
        let out = self.dir.path().join("out-%j.txt");
        let mut all: Vec<String> = vec!["--parsable".into(), format!("--output={}", out.display())];
        all.extend(args.iter().map(|a| a.to_string()));
        all.push(path.display().to_string());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        self.run("sbatch", &refs).trim().split(';').next().unwrap_or("").to_string()
    }

    /// What job `job` has printed so far.
    pub fn output(&self, job: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("out-{job}.txt"))).unwrap_or_default()
    }

    /// A field of `scontrol show job` (`JobState`, `Reason`, `Licenses`), or "" once Slurm
    /// forgot the job.
    pub fn job_field(&self, job: &str, field: &str) -> String {
        let output = self.command("scontrol").args(["-o", "show", "job", job]).output().expect("scontrol");
        let shown = String::from_utf8_lossy(&output.stdout);
        let prefix = format!("{field}=");
        shown.split_whitespace().find_map(|w| w.strip_prefix(&prefix)).unwrap_or("").to_string()
    }

    /// `(total, used, reserved)` of the `ac` license; fails the test on an answer it cannot
    /// read ([`parse_licenses`]).
    pub fn licenses(&self) -> (u32, u32, u32) {
        let shown = self.run("scontrol", &["-o", "show", "lic", "ac"]);
        parse_licenses(&shown).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits up to `limit` for `check`; whether it held.
    pub async fn wait_until(&self, limit: Duration, mut check: impl FnMut(&Self) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if check(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        check(self)
    }

    /// Whether Slurm has forgotten job `job` (it ended, its epilog ran, `MinJobAge` passed) or
    /// lists it as ended.
    pub fn job_over(&self, job: &str) -> bool {
        matches!(self.job_field(job, "JobState").as_str(), "" | "COMPLETED" | "CANCELLED" | "FAILED" | "TIMEOUT")
    }

    /// SIGKILLs the manager, as a crash.
    pub fn kill_arm(&mut self) {
        if let Some(arm) = self.arm.take() {
            arm.kill_9();
        }
    }

    /// Starts the manager (a replicated one's first replica) again, on the same address and
    /// state.
    pub fn restart_arm(&mut self) {
        let toml = Self::arm_toml(&self.slurm_dir(), self.reconcile_s) + self.replication.first().map_or("", |r| r);
        self.arm = Some(ArmProcess::start_with_config(&self.arm_dir(), &self.arm_addr.to_string(), &toml));
    }

    /// Free, usable accelerators as the manager reports them.
    pub async fn free_accelerators(&self) -> usize {
        let request = ac_proto::arm::Request::HostList;
        let Ok(ac_proto::arm::Response::Hosts(hosts)) = self.admin().await.request(request).await else {
            return usize::MAX;
        };
        hosts.iter().filter(|h| h.state == "up").flat_map(|h| &h.accelerators).filter(|a| a.holder.is_none()).count()
    }

    /// The manager's view of a job.
    pub async fn arm_job(&self, id: &str) -> Option<ac_proto::arm::JobView> {
        match self.admin().await.request(ac_proto::arm::Request::JobShow { id: id.into() }).await {
            Ok(ac_proto::arm::Response::Job(view)) => Some(*view),
            _ => None,
        }
    }

    /// The environment the SPANK plugin gives a task of job `job` on `node`.
    pub fn task_env(&self, job: &str, node: &str) -> Vec<(String, String)> {
        [
            ("ARM_ADDR", self.arm_addrs()),
            ("ARM_CA_CERT", self.arm_dir().join("ca.pem").display().to_string()),
            ("ARM_JOB_ID", job.to_string()),
            ("ARM_NODE", node.to_string()),
            ("ARM_AUTH", "munge".to_string()),
            ("ARM_MUNGE_SOCKET", self.slurm_dir().join("munge.sock").display().to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }

    /// A session of batch job `job` on `node` opened by this (root) process, as a task would:
    /// with a munge credential made by `munge`.
    pub async fn task_session(&self, job: &str, node: &str) -> ac_frontend::Session {
        let socket = self.slurm_dir().join("munge.sock");
        let credential = ac_frontend::munge_credential(job, node, socket.to_str()).expect("munge's credential");
        let options = ac_frontend::SessionOptions {
            arm: self.arm_options(),
            job: ac_proto::arm::JobAuth::Munge { job: job.into(), credential },
            node: node.into(),
            init_timeout: Some(Duration::from_secs(10)),
            stripes: 1,
            progress: false,
        };
        ac_frontend::Session::init(options).await.expect("a task's session")
    }

    /// An admin client of the manager (of whichever replica leads).
    pub async fn admin(&self) -> ac_frontend::arm::ArmClient {
        let mut options = self.arm_options();
        options.identity = Some((self.arm_dir().join("admin.pem"), self.arm_dir().join("admin.key")));
        ac_frontend::arm::ArmClient::connect(options).await.expect("admin connects")
    }

    /// SIGKILLs the replica that leads (a replicated manager); its address.
    pub async fn kill_leader(&mut self) -> std::net::SocketAddr {
        let Ok(ac_proto::arm::Response::Cluster(status)) =
            self.admin().await.request(ac_proto::arm::Request::ClusterStatus).await
        else {
            panic!("no cluster status")
        };
        let leader = status.leader.expect("a leader");
        let addr = status.members.iter().find(|m| m.id == leader).and_then(|m| m.api).expect("the leader's address");
        if addr == self.arm_addr {
            self.kill_arm();
        } else if let Some(replica) = self.replicas.iter_mut().find(|r| r.addr == addr) {
            replica.process.take().expect("running").kill_9();
        }
        addr
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("slurm/testing/stop-cluster")).arg(self.slurm_dir()).status();
    }
}

/// `(total, used, reserved)` from `scontrol -o show lic ac`: one line naming the `ac` license,
/// each count given once as a number. Anything else is an error, never a stand-in number: a
/// count that was not read must not pass a comparison (`used <= total` holds for any two equal
/// stand-ins).
pub fn parse_licenses(shown: &str) -> Result<(u32, u32, u32), String> {
    let lines: Vec<&str> = shown.lines().filter(|l| !l.trim().is_empty()).collect();
    let [line] = lines[..] else { return Err(format!("`scontrol -o show lic ac`: not one line: {shown:?}")) };
    let words: Vec<&str> = line.split_whitespace().collect();
    if !words.contains(&"LicenseName=ac") {
        return Err(format!("`scontrol -o show lic ac`: not the `ac` license: {shown:?}"));
    }
    let get = |key: &str| {
        let prefix = format!("{key}=");
        let values: Vec<&str> = words.iter().filter_map(|w| w.strip_prefix(prefix.as_str())).collect();
        match values[..] {
            [value] => value.parse::<u32>().map_err(|e| format!("`scontrol -o show lic ac`: {key}={value}: {e}")),
            _ => Err(format!("`scontrol -o show lic ac`: {} `{key}=` in {shown:?}", values.len())),
        }
    };
    Ok((get("Total")?, get("Used")?, get("Reserved")?))
}

#[cfg(test)]
mod tests {
    use super::parse_licenses;

    #[test]
    fn license_counts_are_read_or_refused() {
        let shown = "LicenseName=ac Total=8 Used=3 Free=5 Reserved=1 Remote=no\n";
        assert_eq!(parse_licenses(shown), Ok((8, 3, 1)));
        // What a lax reading turned into equal stand-ins, and so into `used <= total`.
        for bad in [
            "",
            "slurm_load_licenses error: Unable to contact slurm controller\n",
            "LicenseName=ac Total=8 Free=5 Reserved=0\n",
            "LicenseName=ac Total=8 Used=x Free=5 Reserved=0\n",
            "LicenseName=ac Total=8 Used=-1 Free=5 Reserved=0\n",
            "LicenseName=ac Total=8 Used=1 Used=2 Reserved=0\n",
            "LicenseName=gpu Total=8 Used=3 Free=5 Reserved=0\n",
            "LicenseName=ac Total=8 Used=3 Reserved=0\nLicenseName=ac Total=9 Used=3 Reserved=0\n",
        ] {
            assert!(parse_licenses(bad).is_err(), "read {bad:?} as {:?}", parse_licenses(bad));
        }
    }
}
