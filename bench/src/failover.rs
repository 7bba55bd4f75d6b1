//! The replicated manager (issue 55): three `arm-server` processes as the replicas of one
//! manager, on loopback addresses of their own; and its failover under load: programs loop
//! `AC_Get(1)` / `AC_Free` while the leader is killed with `kill -9` again and again (and
//! restarted, to catch up, before the next kill). Each trial's takeover is the time from the
//! kill to the first `AC_Get` granted after it; the run fails on any error, on a double grant
//! (the holdings' check of `load.rs`), or on an accelerator still held once every program has
//! freed what it was granted (a lost free).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_proto::arm::{Request, Response};
use anyhow::bail;

use crate::holdings::double_grants;
use crate::load::{add_hosts, connect_programs, start_churning, Behaviour, Order, Samples, Tally};
use crate::manager::Manager;
use crate::setup::median;

/// Replica `id`'s own view of the cluster: (leader, applied index).
async fn status_of(manager: &Manager, id: usize) -> Option<(Option<u64>, Option<u64>)> {
    let mut options = ArmOptions::new(manager.addrs[id - 1], manager.dirs[0].join("ca.pem"));
    options.identity = Some((manager.dirs[0].join("admin.pem"), manager.dirs[0].join("admin.key")));
    let client = tokio::time::timeout(Duration::from_secs(2), ArmClient::connect(options)).await.ok()?.ok()?;
    match client.request(Request::ClusterStatus).await.ok()? {
        Response::Cluster(status) => Some((status.leader, status.applied)),
        _ => None,
    }
}

/// The leader the running replicas agree on (a majority of them), within 10 s.
async fn leader(manager: &Manager) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut seen = Vec::new();
        let mut said = Vec::new();
        for id in 1..=3 {
            if manager.children[id - 1].is_some() {
                let status = status_of(manager, id).await;
                said.push((id, status));
                seen.extend(status.and_then(|(leader, _)| leader));
            }
        }
        if let Some(leader) = seen.iter().find(|l| seen.iter().filter(|m| m == l).count() >= 2) {
            return Ok(*leader as usize);
        }
        if Instant::now() > deadline {
            for dir in &manager.dirs {
                let log = std::fs::read_to_string(crate::setup::daemon_log(dir)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                eprintln!("{}:\n{}", dir.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
            }
            bail!("no leader agreed on: each replica's (leader, applied): {said:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until replica `id` has applied within 1,000 entries of the leader's (at most 30 s).
async fn caught_up(manager: &Manager, id: usize, leader: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let (Some((_, Some(mine))), Some((_, Some(theirs)))) =
            (status_of(manager, id).await, status_of(manager, leader).await)
        {
            if mine + 1_000 >= theirs {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// The first grant answered after `since`, waiting up to 20 s for one.
async fn first_grant_after(tally: &Tally, since: Instant) -> Option<Instant> {
    let times = tally.grant_times.as_ref()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let first = times.lock().expect("grant times poisoned").iter().filter(|t| **t > since).min().copied();
        if first.is_some() {
            return first;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The failover section: `trials` kills of the leader under `programs` paced programs.
pub async fn under_load(quick: bool, trials: Option<usize>) -> anyhow::Result<()> {
    let (programs, trials) = if quick { (100, trials.unwrap_or(3)) } else { (1000, trials.unwrap_or(20)) };
    println!(
        "## The replicated manager's failover ({programs} programs looping AC_Get(1)/AC_Free, paced, on three replicas; the leader killed with kill -9 {trials} times, restarted and caught up before the next kill)\n"
    );
    let mut manager = Manager::start_replicas()?;
    let admin = ArmClient::connect(manager.admin_options()).await?;
    let _backends = add_hosts(&admin).await?;
    let sessions = connect_programs(&manager, &admin, programs).await?;
    let tally = Arc::new(Tally { grant_times: Some(Mutex::default()), ..Tally::default() });
    let behaviour =
        Behaviour { back_off: Some(Duration::from_millis(200)), hold: Duration::ZERO, order: Order::HoldThenFree };
    let start = Instant::now();
    // Far off: the programs stop when the trials are done (`Tally::stop`).
    let end = start + Duration::from_secs(3600);
    let tasks = start_churning(sessions, end, behaviour, &tally);
    let mut takeovers = Vec::new();
    let mut missed = 0;
    for trial in 0..trials {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let leader = leader(&manager).await?;
        if let Some(mut child) = manager.children[leader - 1].take() {
            child.kill()?;
            child.wait()?;
        }
        let killed = Instant::now();
        let killed_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
        let takeover = first_grant_after(&tally, killed).await.map(|first| (first - killed).as_secs_f64());
        // The kill's time of day, to set against the replicas' logs (`AC_BENCH_DAEMON_LOG`).
        eprintln!(
            "trial {trial}: replica {leader} killed at {killed_at:.3} (Unix time), first grant after {takeover:.2?} s"
        );
        match takeover {
            Some(takeover) => takeovers.push(takeover),
            None => missed += 1,
        }
        manager.children[leader - 1] = Some(crate::manager::spawn_replica(&manager.dirs[leader - 1], leader)?);
        let next = crate::failover::leader(&manager).await?;
        if !caught_up(&manager, leader, next).await {
            bail!("trial {trial}: replica {leader}, restarted, did not catch up with {next}");
        }
    }
    tally.stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let mut samples = Samples::default();
    for task in tasks {
        let (client, mine) = task.await?;
        client.close_now().await;
        samples.holdings.extend(mine.holdings);
    }
    let held = still_held(&admin).await?;
    admin.close_now().await;
    let pairs = tally.pairs.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let doubles = double_grants(samples.holdings);
    let mut sorted = takeovers.clone();
    sorted.sort_by(f64::total_cmp);
    let rows = [
        ("trials (kill -9 of the leader)".to_string(), trials.to_string()),
        (
            "takeover, kill to the first AC_Get granted after it: median / worst, s".into(),
            match sorted.last() {
                Some(worst) => format!("{:.2} / {worst:.2}", median(sorted.clone())),
                None => "-".into(),
            },
        ),
        ("every takeover, s".into(), sorted.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(" ")),
        ("trials without a grant within 20 s".into(), missed.to_string()),
        ("pairs (granted AC_Get + AC_Free), per second".into(), format!("{pairs}, {:.0}", pairs as f64 / elapsed)),
        ("errors".into(), errors.to_string()),
        ("double grants".into(), doubles.to_string()),
        ("accelerators still held after every program freed (lost frees)".into(), held.to_string()),
    ];
    println!("| measure | value |\n|---|---|");
    for (measure, value) in &rows {
        println!("| {measure} | {value} |");
    }
    println!();
    let first_errors = tally.first_errors.lock().expect("errors poisoned").clone();
    if errors > 0 || doubles > 0 || held > 0 || missed > 0 {
        bail!("failover: {errors} errors (first: {first_errors:?}), {doubles} double grants, {held} held, {missed} trials without a grant");
    }
    Ok(())
}

/// Accelerators the manager still counts as dynamically held by any job.
async fn still_held(admin: &ArmClient) -> anyhow::Result<usize> {
    match admin.request(Request::JobList { all: false }).await? {
        Response::Jobs(jobs) => Ok(jobs.iter().map(|job| job.dynamic_accelerators.len()).sum()),
        other => bail!("job list answered {other:?}"),
    }
}
