//! `armctl status`: the pool, the queue, who holds what and the manager's health on one screen,
//! gathered from the requests `host list`, `job list`, `reservation list` and `health` make.

use std::collections::BTreeMap;

use ac_frontend::arm::ArmClient;
use ac_proto::arm::{HostView, JobView, Request, Response};
use serde::Serialize;

/// The accelerator states a status counts, in the order it shows them (the metrics' too).
use arm_server::server::ACCELERATOR_STATES as STATES;

/// Everything `armctl status` shows; `--json` prints it as it is.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Hosts and accelerators by state.
    pub pool: Pool,
    /// Jobs waiting to start and `AC_Get` requests waiting for accelerators.
    pub queue: Queue,
    /// Running jobs with the accelerators they hold.
    pub holders: Vec<Holder>,
    /// Backend links and Slurm's agreement with the manager.
    pub health: Health,
}

/// The pool.
#[derive(Debug, Serialize)]
pub struct Pool {
    /// Each host with its accelerators counted by state.
    pub hosts: Vec<HostStatus>,
    /// Accelerators of every host by state (every state present, zeros too).
    pub accelerators: BTreeMap<String, usize>,
}

/// One host of the pool.
#[derive(Debug, Serialize)]
pub struct HostStatus {
    /// Its name.
    pub name: String,
    /// Its backend's address.
    pub addr: String,
    /// `up`, `down` or `draining`.
    pub state: String,
    /// Its accelerators by state (every state present, zeros too).
    pub accelerators: BTreeMap<String, usize>,
}

/// The queue.
#[derive(Debug, Serialize)]
pub struct Queue {
    /// Jobs not yet started.
    pub jobs: Vec<QueuedJob>,
    /// `AC_Get` requests of running jobs waiting for accelerators, all jobs together.
    pub waiting_requests: u32,
}

/// A job not yet started.
#[derive(Debug, Serialize)]
pub struct QueuedJob {
    /// Its id.
    pub id: String,
    /// Its user.
    pub user: String,
    /// Accelerators per node.
    pub acpn: u32,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// When the plan expects it to start (Unix time); none: not in the plan.
    pub expected_start: Option<u64>,
}

/// A running job and what it holds.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// Its id.
    pub job: String,
    /// Its user.
    pub user: String,
    /// Its group.
    pub group: String,
    /// Accelerators it holds, `ACCELERATOR@NODE` bound statically, `ACCELERATOR(set N)` dynamically.
    pub accelerators: Vec<String>,
    /// Its `AC_Get` requests waiting for accelerators.
    pub waiting_requests: u32,
}

/// What is wrong, if anything.
#[derive(Debug, Serialize)]
pub struct Health {
    /// Hosts whose backend link is up (draining ones included).
    pub links_up: usize,
    /// Hosts whose backend link is down.
    pub links_down: Vec<String>,
    /// What the manager finds wrong (`armctl health`): its store (`store: ...`), hosts whose
    /// backend serves other devices (`host ...`), Slurm out of step or unreachable; empty: none.
    pub problems: Vec<String>,
    /// No link down and no problem.
    pub ok: bool,
}

/// Asks the manager for its hosts, jobs, reservations and health.
pub async fn gather(client: &ArmClient) -> Result<Status, ac_frontend::Error> {
    let mut hosts = match client.request(Request::HostList).await? {
        Response::Hosts(hosts) => hosts,
        other => return Err(unexpected("hosts", &other)),
    };
    if let Response::Reservations(reservations) = client.request(Request::ReservationList).await? {
        crate::mark_reserved(&mut hosts, &reservations);
    }
    let jobs = match client.request(Request::JobList { all: false }).await? {
        Response::Jobs(jobs) => jobs,
        other => return Err(unexpected("jobs", &other)),
    };
    let problems = match client.request(Request::Health).await? {
        Response::Health(problems) => problems,
        other => return Err(unexpected("health", &other)),
    };
    Ok(summarize(&hosts, &jobs, problems))
}

fn unexpected(what: &str, response: &Response) -> ac_frontend::Error {
    ac_frontend::Error::Protocol(format!("the manager answered a request for {what} with {response:?}"))
}

fn by_state<'a>(states: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = STATES.iter().map(|s| (s.to_string(), 0)).collect();
    states.for_each(|s| *counts.entry(s.to_string()).or_default() += 1);
    counts
}

fn summarize(hosts: &[HostView], jobs: &[JobView], problems: Vec<String>) -> Status {
    let pool = Pool {
        hosts: hosts
            .iter()
            .map(|h| HostStatus {
                name: h.name.clone(),
                addr: h.addr.to_string(),
                state: h.state.clone(),
                accelerators: by_state(h.accelerators.iter().map(|a| a.state.as_str())),
            })
            .collect(),
        accelerators: by_state(hosts.iter().flat_map(|h| &h.accelerators).map(|a| a.state.as_str())),
    };
    let queue = Queue {
        jobs: jobs
            .iter()
            .filter(|j| j.state == "queued")
            .map(|j| QueuedJob {
                id: j.id.clone(),
                user: j.user.clone(),
                acpn: j.acpn,
                nodes: j.nodes.clone(),
                expected_start: j.expected_start,
            })
            .collect(),
        waiting_requests: jobs.iter().map(|j| j.waiting_requests).sum(),
    };
    let holders = jobs
        .iter()
        .filter(|j| j.state == "running")
        .map(|j| Holder {
            job: j.id.clone(),
            user: j.user.clone(),
            group: j.group.clone(),
            accelerators: held(j),
            waiting_requests: j.waiting_requests,
        })
        .collect();
    let links_down: Vec<String> = hosts.iter().filter(|h| h.state == "down").map(|h| h.name.clone()).collect();
    let health = Health {
        links_up: hosts.len() - links_down.len(),
        ok: links_down.is_empty() && problems.is_empty(),
        links_down,
        problems,
    };
    Status { pool, queue, holders, health }
}

/// A job's accelerators as `job list` names them.
pub fn held(job: &JobView) -> Vec<String> {
    let bound = job.static_accelerators.iter().map(|(n, a)| format!("{a}@{n}"));
    bound.chain(job.dynamic_accelerators.iter().map(|(s, a)| format!("{a}(set {s})"))).collect()
}

fn counts(accelerators: &BTreeMap<String, usize>) -> String {
    STATES.iter().map(|s| format!("{} {s}", accelerators.get(*s).copied().unwrap_or(0))).collect::<Vec<_>>().join(", ")
}

/// The human screen.
pub fn print(status: &Status) {
    let Status { pool, queue, holders, health } = status;
    let total: usize = pool.accelerators.values().sum();
    println!("POOL: {} hosts, {total} accelerators: {}", pool.hosts.len(), counts(&pool.accelerators));
    println!(
        "  {:<20} {:<22} {:<9} {:>5} {:>9} {:>8} {:>8} {:>9} {:>5}",
        "HOST", "ADDRESS", "STATE", "FREE", "ALLOCATED", "RESERVED", "DRAINING", "UNHEALTHY", "DOWN"
    );
    for h in &pool.hosts {
        let n = |s: &str| h.accelerators.get(s).copied().unwrap_or(0);
        println!(
            "  {:<20} {:<22} {:<9} {:>5} {:>9} {:>8} {:>8} {:>9} {:>5}",
            h.name,
            h.addr,
            h.state,
            n("free"),
            n("allocated"),
            n("reserved"),
            n("draining"),
            n("unhealthy"),
            n("down")
        );
    }
    println!();
    println!("QUEUE: {} jobs waiting to start, {} AC_Get requests waiting", queue.jobs.len(), queue.waiting_requests);
    if !queue.jobs.is_empty() {
        println!("  {:<16} {:<10} {:>4} {:<24} STARTS IN", "JOB", "USER", "ACPN", "NODES");
        let now = ac_proto::capability::unix_now();
        for j in &queue.jobs {
            let starts = j.expected_start.map_or("never".into(), |t| format!("{}s", t.saturating_sub(now)));
            println!("  {:<16} {:<10} {:>4} {:<24} {starts}", j.id, j.user, j.acpn, j.nodes.join(","));
        }
    }
    println!();
    println!("HOLDERS: {} running jobs", holders.len());
    if !holders.is_empty() {
        println!("  {:<16} {:<10} {:<10} {:>7} ACCELERATORS", "JOB", "USER", "GROUP", "WAITING");
        for h in holders {
            let accelerators = if h.accelerators.is_empty() { "-".into() } else { h.accelerators.join(" ") };
            println!("  {:<16} {:<10} {:<10} {:>7} {accelerators}", h.job, h.user, h.group, h.waiting_requests);
        }
    }
    println!();
    println!("HEALTH: {}", if health.ok { "ok" } else { "PROBLEMS" });
    let down = if health.links_down.is_empty() { String::new() } else { format!(": {}", health.links_down.join(", ")) };
    println!("  backend links: {} up, {} down{down}", health.links_up, health.links_down.len());
    if health.problems.is_empty() {
        println!("  nothing wrong");
    }
    health.problems.iter().for_each(|p| println!("  {p}"));
}

#[cfg(test)]
mod tests {
    use ac_proto::arm::{AcceleratorView, HostView};

    #[test]
    fn counts_every_state_and_finds_down_links() {
        let accel = |id: &str, state: &str| AcceleratorView {
            id: id.into(),
            device: "cpu".into(),
            memory: 0,
            state: state.into(),
            holder: None,
        };
        let host = |name: &str, state: &str, accels| HostView {
            name: name.into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            state: state.into(),
            labels: vec![],
            accelerators: accels,
        };
        let hosts = [
            host("a", "up", vec![accel("a/0", "free"), accel("a/1", "allocated")]),
            host("b", "down", vec![accel("b/0", "down")]),
        ];
        let status = super::summarize(&hosts, &[], vec![]);
        assert_eq!(status.pool.accelerators["free"], 1);
        assert_eq!(status.pool.accelerators["down"], 1);
        assert_eq!(status.pool.accelerators["reserved"], 0);
        assert_eq!(status.health.links_down, ["b"]);
        assert!(!status.health.ok);
    }
}
