//! Emulated hosts for the network tests: each host is a network namespace with one veth link to
//! a bridge, which lives in a namespace of its own (the "switch"), so nothing touches this
//! machine's own network. Addresses are 10.213.0.N/24, used only inside these namespaces; each
//! bed is an isolated network, so beds of tests running at once never meet.
//!
//! Faults: `partition` (nftables drops between two hosts), `loss` (nftables drops a random
//! share of a host's packets), `rate` (a tbf qdisc on a host's link). Daemons and programs run
//! in a host with [`Bed::spawn`]; their stdout lines arrive with the time they were read.
//! Dropping the bed kills its processes and deletes its namespaces (and with them every link,
//! qdisc and rule), also when a test fails; a bed left by a killed test run is removed by the
//! next one.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Namespaces of this test bed are named `acnet-PID-BED-...`.
const PREFIX: &str = "acnet";

/// A set of emulated hosts on one bridge.
#[derive(Debug)]
pub struct Bed {
    name: String,
    hosts: usize,
    procs: std::sync::Mutex<Vec<u32>>,
}

/// A process running in a host, with its stdout lines as they come.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    /// Every line read so far.
    pub seen: Vec<String>,
    /// Where its stderr goes.
    log: std::path::PathBuf,
}

/// Runs `ip`/`nft`/`tc` (or any command) and fails with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why namespaces cannot be made here, if they cannot (not root, no `ip`, no `nft`, no `tc`).
pub fn unavailable() -> Option<String> {
    unavailable_with(&["ip", "nft", "tc"])
}

/// Why namespaces cannot be made here with only `tools` (of `ip`, `nft`, `tc`), if they
/// cannot: a benchmark that shapes no link and drops nothing needs only `ip`.
pub fn unavailable_with(tools: &[&str]) -> Option<String> {
    let uid = run("id", &["-u"]).unwrap_or_default();
    if uid.trim() != "0" {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    for tool in tools {
        let version = if *tool == "nft" { "--version" } else { "-V" };
        if run(tool, &[version]).is_err() {
            return Some(format!("`{tool}` is missing (scripts/install-packages installs it)"));
        }
    }
    None
}

/// Skips the calling test (returns from it) when namespaces cannot be made, saying why; fails
/// it instead where `AC_NETNS_REQUIRED` is set ([`crate::skip`]).
#[macro_export]
macro_rules! need_netns {
    () => {
        if let Some(why) = $crate::netns::unavailable() {
            $crate::skip("AC_NETNS_REQUIRED", &why);
            return;
        }
    };
}

impl Bed {
    /// `hosts` hosts on one bridge, links of `mtu` bytes.
    pub fn new(hosts: usize, mtu: u32) -> Self {
        static BEDS: AtomicUsize = AtomicUsize::new(0);
        remove_stale();
        let name = format!("{PREFIX}-{}-{}", std::process::id(), BEDS.fetch_add(1, Ordering::Relaxed));
        let bed = Self { name, hosts, procs: std::sync::Mutex::new(Vec::new()) };
        bed.build(mtu).unwrap_or_else(|e| panic!("building the test bed: {e}"));
        bed
    }

    fn build(&self, mtu: u32) -> Result<(), String> {
        let switch = self.switch();
        run("ip", &["netns", "add", &switch])?;
        self.exec_ok(&switch, "ip", &["link", "add", "br0", "type", "bridge"])?;
        self.exec_ok(&switch, "ip", &["link", "set", "br0", "up"])?;
        let mtu = mtu.to_string();
        for i in 0..self.hosts {
            let ns = self.ns(i);
            let port = format!("p{i}");
            run("ip", &["netns", "add", &ns])?;
            run("ip", &["-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &switch])?;
            self.exec_ok(&switch, "ip", &["link", "set", &port, "master", "br0", "mtu", &mtu, "up"])?;
            self.exec_ok(&ns, "ip", &["link", "set", "lo", "up"])?;
            self.exec_ok(&ns, "ip", &["link", "set", "eth0", "mtu", &mtu, "up"])?;
            self.exec_ok(&ns, "ip", &["addr", "add", &format!("{}/24", self.addr(i)), "dev", "eth0"])?;
        }
        Ok(())
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.name)
    }

    /// Host `i`'s namespace.
    pub fn ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.name)
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, 0, i as u8 + 1)
    }

    /// Host `i`'s address with `port`.
    pub fn sock(&self, i: usize, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr(i).into(), port)
    }

    fn exec_ok(&self, ns: &str, program: &str, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["netns", "exec", ns, program];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs a command in host `i` to its end; its stdout, or its stderr as the error.
    pub fn exec(&self, i: usize, program: &str, args: &[&str], env: &[(&str, String)]) -> Result<String, String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns(i), program])
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts a process in host `i`; it is killed when the bed is dropped. Its stderr goes to
    /// `log` (for the failure message of a test).
    pub fn spawn(&self, i: usize, program: &Path, args: &[&str], env: &[(&str, String)], log: &Path) -> Proc {
        let stderr = std::fs::File::create(log).expect("log file");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns(i)])
            .arg(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        self.procs.lock().expect("procs").push(child.id());
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines, seen: Vec::new(), log: log.to_path_buf() }
    }

    /// Starts daemon `binary` (`arm-server`, `ac-backend`) in host `i` with `args`, and returns
    /// once it listens (it writes `DIR/TAG.addr`; its log is `DIR/TAG.log`).
    pub fn start_daemon(
        &self,
        i: usize,
        binary: &str,
        args: &[&str],
        env: &[(&str, String)],
        dir: &Path,
        tag: &str,
    ) -> Proc {
        let addr_file = dir.join(format!("{tag}.addr"));
        let _ = std::fs::remove_file(&addr_file);
        let addr_arg = addr_file.to_string_lossy().into_owned();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--addr-file", &addr_arg]);
        let mut proc = self.spawn(i, &crate::workspace_binary(binary), &all, env, &dir.join(format!("{tag}.log")));
        let end = Instant::now() + Duration::from_secs(10);
        while !addr_file.exists() {
            if Instant::now() > end || proc.child.try_wait().ok().flatten().is_some() {
                let log = std::fs::read_to_string(dir.join(format!("{tag}.log"))).unwrap_or_default();
                panic!("{binary} did not start in host {i}:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        proc
    }

    /// Drops every packet between hosts `a` and `b` (both ways), until [`Bed::heal`].
    pub fn partition(&self, a: usize, b: usize) {
        let b = self.addr(b);
        let rules = format!(
            "table inet acpart {{\n\
             chain input {{ type filter hook input priority 0; ip saddr {b} drop; }}\n\
             chain output {{ type filter hook output priority 0; ip daddr {b} drop; }}\n\
             }}\n"
        );
        self.nft(a, &rules);
    }

    /// Host `a` refuses TCP connections to `port` (a firewall that passes only UDP), until
    /// [`Bed::heal`].
    pub fn refuse_tcp(&self, a: usize, port: u16) {
        let rules = format!(
            "table inet acrefuse {{\n\
             chain input {{ type filter hook input priority 0; tcp dport {port} counter reject with tcp reset; }}\n\
             }}\n"
        );
        self.nft(a, &rules);
    }

    /// How many connection attempts [`Bed::refuse_tcp`] refused on host `a`.
    pub fn refused_tcp(&self, a: usize) -> u64 {
        let listed = self.exec_ok(&self.ns(a), "nft", &["list", "table", "inet", "acrefuse"]).unwrap_or_default();
        let after = listed.split("packets ").nth(1).unwrap_or("");
        after.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Ends the partitions, losses and refusals of host `a`.
    pub fn heal(&self, a: usize) {
        for table in ["acpart", "acloss", "acrefuse"] {
            let _ = self.exec_ok(&self.ns(a), "nft", &["delete", "table", "inet", table]);
        }
    }

    /// Drops `percent` % of host `a`'s packets at random, both ways.
    pub fn loss(&self, a: usize, percent: u32) {
        let drop = format!("numgen random mod 100 < {percent} drop;");
        let rules = format!(
            "table inet acloss {{\n\
             chain input {{ type filter hook input priority 0; {drop} }}\n\
             chain output {{ type filter hook output priority 0; {drop} }}\n\
             }}\n"
        );
        self.nft(a, &rules);
    }

    /// Limits host `a`'s link to `rate` (tc syntax, e.g. `1gbit`), both ways.
    pub fn rate(&self, a: usize, rate: &str) {
        let args = ["qdisc", "replace", "dev", "X", "root", "tbf", "rate", rate, "burst", "512kb", "latency", "20ms"];
        let mut mine = args;
        mine[3] = "eth0";
        self.exec_ok(&self.ns(a), "tc", &mine).expect("tc on the host");
        let port = format!("p{a}");
        let mut theirs = args;
        theirs[3] = &port;
        self.exec_ok(&self.switch(), "tc", &theirs).expect("tc on the switch");
    }

    /// The TCP congestion control that host `i`'s new sockets get (`bbr`, `cubic`, ...): a new
    /// namespace starts with the machine's default.
    pub fn congestion(&self, i: usize) -> Result<String, String> {
        Ok(self.exec_ok(&self.ns(i), "sysctl", &["-n", "net.ipv4.tcp_congestion_control"])?.trim().to_owned())
    }

    /// Gives every host's new TCP sockets congestion control `name`. Inside a namespace the
    /// kernel accepts only an algorithm that `net.ipv4.tcp_allowed_congestion_control` lists.
    pub fn set_congestion(&self, name: &str) -> Result<(), String> {
        let setting = format!("net.ipv4.tcp_congestion_control={name}");
        for i in 0..self.hosts {
            self.exec_ok(&self.ns(i), "sysctl", &["-w", &setting])?;
        }
        Ok(())
    }

    fn nft(&self, a: usize, rules: &str) {
        let file = std::env::temp_dir().join(format!("{}-{a}.nft", self.name));
        std::fs::write(&file, rules).expect("nft rules");
        let result = self.exec_ok(&self.ns(a), "nft", &["-f", &file.to_string_lossy()]);
        let _ = std::fs::remove_file(&file);
        result.expect("nft rules load");
    }

    fn remove(&self) {
        for pid in self.procs.lock().map(|p| p.clone()).unwrap_or_default() {
            kill_tree(pid);
        }
        remove_namespaces(|ns| ns.starts_with(&format!("{}-", self.name)));
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Kills `pid` (an `ip netns exec` that exec'd the program, so the program itself) and waits.
fn kill_tree(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).stderr(Stdio::null()).status();
}

fn remove_namespaces(pick: impl Fn(&str) -> bool) {
    let list = run("ip", &["netns", "list"]).unwrap_or_default();
    for ns in list.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| pick(n)) {
        // Processes still inside keep a namespace alive after its name goes: kill them first.
        if let Ok(pids) = run("ip", &["netns", "pids", ns]) {
            for pid in pids.split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).stderr(Stdio::null()).status();
            }
        }
        let _ = run("ip", &["netns", "del", ns]);
    }
}

/// Removes the beds of test processes that no longer run (killed before they could clean up).
fn remove_stale() {
    remove_namespaces(|ns| {
        let mut parts = ns.split('-');
        parts.next() == Some(PREFIX)
            && parts
                .next()
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
    });
}

impl Proc {
    /// The next line containing `needle`, with when it was read; `None` after `limit`.
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> Option<(Instant, String)> {
        let end = Instant::now() + limit;
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            let (at, line) = self.lines.recv_timeout(left).ok()?;
            self.seen.push(line.clone());
            if line.contains(needle) {
                return Some((at, line));
            }
        }
    }

    /// Kills the process (`kill -9`), now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to end; its exit status.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every line read so far and those still buffered.
    pub fn output(&mut self) -> String {
        while let Ok((_, line)) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
