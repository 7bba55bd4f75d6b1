//! The manager's Prometheus metrics (`arm_*`). Counters and histograms are bumped where the
//! event happens (an answer to `AC_Get`, a lease that runs out, a reconciliation with Slurm);
//! the pool, the jobs and the queues are read from the core at each scrape
//! ([`StateCollector`]), so they are never out of step with it. The core itself counts nothing.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::Duration;

use ac_proto::arm::{HostView, Request, ReservationView};
use ac_proto::capability::unix_now;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use super::views::{host_view, reservation_view};
use super::Arm;
use crate::model::JobState;

type Labels = [(&'static str, &'static str); 1];

/// The accelerator states, as `armctl status` shows them.
pub const ACCELERATOR_STATES: [&str; 6] = ["free", "allocated", "reserved", "draining", "unhealthy", "down"];

/// Why an `AC_Get` was rejected, as the `reason` label: (label, what the reason's text starts
/// with). The texts are the scheduler's (`arm_sched::Rejection`) and the manager's own.
const REASONS: [(&str, &str); 8] = [
    ("no_idle", "only "),
    ("fairness_forbidden", "it would delay queued job"),
    ("reservation", "it would collide with an advance reservation"),
    ("timed_out", "no accelerators became available before the timeout"),
    ("timed_out", "no accelerators were granted before the deadline"),
    ("nothing_to_borrow", "no pre-allocated accelerators are idle to borrow"),
    ("slurm", "Slurm: "),
    ("unknown_job", "the job is not known to the scheduler"),
];

/// The `reason` label of a rejection's text; `other` for anything unforeseen.
fn reason_label(reason: &str) -> &'static str {
    // The fairness limits' two texts differ only at the end.
    if reason.starts_with("it would delay queued job") && reason.contains("beyond the fairness limit") {
        return "fairness_limit";
    }
    REASONS.iter().find(|(_, start)| reason.starts_with(start)).map_or("other", |(label, _)| label)
}

/// The `call` label of the requests whose latency is measured.
pub(super) fn call_label(request: &Request) -> Option<&'static str> {
    match request {
        Request::Init { .. } => Some("init"),
        Request::Get { .. } | Request::CollectiveGet { .. } | Request::GetElastic { .. } => Some("get"),
        Request::Free { .. } => Some("free"),
        _ => None,
    }
}

/// What the manager counts as it works.
#[derive(Debug, Clone)]
pub(super) struct Metrics {
    grants: Counter,
    rejections: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    lease_expiries: Counter,
    reconciliations: Counter,
    disagreements: Counter,
}

/// Request latencies from 100 µs to about 26 s, a factor of 4 apart.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 4.0, 10))
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            grants: Counter::default(),
            rejections: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            lease_expiries: Counter::default(),
            reconciliations: Counter::default(),
            disagreements: Counter::default(),
        };
        // Every label value known in advance exists from the start, so that `rate()` and
        // `increase()` see the first event.
        for call in ["init", "get", "free"] {
            let _ = metrics.latency.get_or_create(&[("call", call)]);
        }
        for (label, _) in REASONS.iter().chain(&[("fairness_limit", ""), ("other", "")]) {
            let _ = metrics.rejections.get_or_create(&[("reason", label)]);
        }
        metrics
    }
}

impl Metrics {
    /// A registry holding these metrics and a collector of `arm`'s state.
    pub(super) fn registry(&self, arm: Weak<Arm>) -> Registry {
        let mut registry = Registry::with_prefix("arm");
        registry.register("grants", "AC_Get answers that granted accelerators", self.grants.clone());
        registry.register("rejections", "AC_Get answers that rejected the request, by reason", self.rejections.clone());
        registry.register_with_unit(
            "request_duration",
            "Time to answer AC_Init, AC_Get and AC_Free (call), commit included",
            Unit::Seconds,
            self.latency.clone(),
        );
        registry.register(
            "lease_expiries",
            "Program leases that ran out (the program was silent): its dynamic accelerators released",
            self.lease_expiries.clone(),
        );
        registry.register("slurm_reconciliations", "Reconciliations with Slurm", self.reconciliations.clone());
        registry.register(
            "slurm_disagreements",
            "Reconciliations that found Slurm out of step with the pool, or could not ask it",
            self.disagreements.clone(),
        );
        registry.register_collector(Box::new(StateCollector { arm }));
        registry
    }

    /// An `AC_Get` was granted.
    pub(super) fn granted(&self) {
        self.grants.inc();
    }

    /// An `AC_Get` was rejected, saying `reason`.
    pub(super) fn rejected(&self, reason: &str) {
        self.rejections.get_or_create(&[("reason", reason_label(reason))]).inc();
    }

    /// A request of kind `call` took `took` to answer.
    pub(super) fn answered(&self, call: &'static str, took: Duration) {
        self.latency.get_or_create(&[("call", call)]).observe(took.as_secs_f64());
    }

    /// A program's lease ran out.
    pub(super) fn lease_expired(&self) {
        self.lease_expiries.inc();
    }

    /// A reconciliation with Slurm ended, `troubled` when it found something wrong.
    pub(super) fn reconciled(&self, troubled: bool) {
        self.reconciliations.inc();
        if troubled {
            self.disagreements.inc();
        }
    }
}

/// Marks as `reserved` the free accelerators that active advance reservations keep for their
/// jobs (beyond what those jobs hold already), as `armctl` and the metrics show the pool.
pub fn mark_reserved(hosts: &mut [HostView], reservations: &[ReservationView]) {
    for r in reservations.iter().filter(|r| r.state == "active") {
        // What the reservation's running jobs hold counts toward it.
        let used = hosts
            .iter()
            .flat_map(|h| &h.accelerators)
            .filter(|a| a.holder.as_ref().is_some_and(|job| r.jobs.contains(job)))
            .count();
        let rest = (r.count as usize).saturating_sub(used);
        let free = hosts.iter_mut().flat_map(|h| h.accelerators.iter_mut()).filter(|a| a.state == "free");
        for a in free.take(rest) {
            a.state = "reserved".into();
            a.holder = Some(format!("reservation {}", r.id));
        }
    }
}

/// The state of the pool, the jobs and the queues, read from the core at each scrape.
struct StateCollector {
    arm: Weak<Arm>,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

/// One scrape's figures.
#[derive(Debug, Default)]
struct Snapshot {
    accelerators: BTreeMap<&'static str, i64>,
    hosts_up: BTreeMap<String, i64>,
    jobs: BTreeMap<&'static str, i64>,
    queue: i64,
    waiting: i64,
    unacknowledged: i64,
    slurm_problems: i64,
    store_writable: i64,
    store_commit_failures: u64,
    lent: i64,
    reclaims: u64,
    reclaim_revocations: u64,
    idle_seconds: u64,
}

impl Snapshot {
    fn of(arm: &Arm) -> Self {
        let core = arm.core.lock().expect("core poisoned");
        let now = unix_now();
        let mut hosts: Vec<HostView> = core.hosts().values().map(host_view).collect();
        let reservations: Vec<ReservationView> =
            core.reservations().values().map(|r| reservation_view(&core, r, now)).collect();
        mark_reserved(&mut hosts, &reservations);
        let mut snapshot = Snapshot {
            accelerators: ACCELERATOR_STATES.iter().map(|s| (*s, 0)).collect(),
            jobs: [("queued", 0), ("running", 0), ("ended", 0)].into(),
            ..Snapshot::default()
        };
        for accelerator in hosts.iter().flat_map(|h| &h.accelerators) {
            if let Some(count) = snapshot.accelerators.get_mut(accelerator.state.as_str()) {
                *count += 1;
            }
        }
        snapshot.hosts_up = hosts.iter().map(|h| (h.name.clone(), i64::from(h.state != "down"))).collect();
        for job in core.jobs().values() {
            let state = match job.state {
                JobState::Queued => "queued",
                JobState::Running => "running",
                JobState::Ended => "ended",
            };
            *snapshot.jobs.entry(state).or_default() += 1;
        }
        snapshot.queue = snapshot.jobs["queued"] + core.batch_queue().len() as i64;
        snapshot.waiting = core.pending().values().filter(|g| g.rejected.is_none()).count() as i64;
        snapshot.unacknowledged = core.unacked().len() as i64;
        snapshot.lent = core.leases().len() as i64;
        (snapshot.reclaims, snapshot.reclaim_revocations) = core.reclaim_counts();
        snapshot.idle_seconds = core.idle_seconds();
        drop(core);
        snapshot.slurm_problems = arm.slurm_problems.lock().expect("problems poisoned").len() as i64;
        snapshot.store_writable = i64::from(arm.store.trouble().is_none());
        snapshot.store_commit_failures = arm.store.commit_failures();
        snapshot
    }
}

/// Encodes one gauge family: `name` with one series per (label value, value).
fn gauges<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    series: impl Iterator<Item = (&'a str, i64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
    for (value_of_label, value) in series {
        ConstGauge::new(value).encode(family.encode_family(&[(label, value_of_label)])?)?;
    }
    Ok(())
}

/// Encodes one gauge without labels.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(arm) = self.arm.upgrade() else { return Ok(()) };
        let e = &mut encoder;
        if let Some(status) = arm.replica_status() {
            replica_metrics(e, &status, arm.serves())?;
            // A replica that does not serve has not read the pool back since it last led: the
            // leader's figures are the pool's.
            if !arm.serves() {
                return Ok(());
            }
        }
        let s = Snapshot::of(&arm);
        let accelerators = s.accelerators.iter().map(|(k, v)| (*k, *v));
        gauges(e, "accelerators", "Accelerators of registered hosts by state", "state", accelerators)?;
        let hosts = s.hosts_up.iter().map(|(k, v)| (k.as_str(), *v));
        gauges(e, "host_up", "Whether each registered host's backend link is up (1) or down (0)", "host", hosts)?;
        let jobs = s.jobs.iter().map(|(k, v)| (*k, *v));
        gauges(e, "jobs", "Jobs by state (ended ones until their retention ends)", "state", jobs)?;
        gauge(e, "queue_length", "Jobs waiting for their static accelerators, Slurm's pending ones included", s.queue)?;
        gauge(e, "waiting_requests", "AC_Get requests waiting for accelerators", s.waiting)?;
        gauge(
            e,
            "revocations_unacknowledged",
            "Revocations a backend has not yet confirmed it stored",
            s.unacknowledged,
        )?;
        gauge(
            e,
            "slurm_problems",
            "What the last reconciliation found wrong with Slurm (0: in step)",
            s.slurm_problems,
        )?;
        gauge(
            e,
            "store_writable",
            "Whether the store's last write succeeded (1) or failed (0: changes fail; `armctl health` says why)",
            s.store_writable,
        )?;
        gauge(e, "accelerators_lent", "Accelerators of elastic sets, which the manager may reclaim", s.lent)?;
        counter(
            e,
            "store_commit_failures",
            "Commits of changes to the store that failed (each rolled back: the changes were not made)",
            s.store_commit_failures,
        )?;
        counter(e, "reclaims", "Reclaims of lent accelerators sent to programs (one per set)", s.reclaims)?;
        counter(
            e,
            "reclaim_revocations",
            "Reclaimed accelerators revoked because their program kept them past the deadline",
            s.reclaim_revocations,
        )?;
        counter(e, "idle_accelerator_seconds", "Seconds of usable accelerators held by nobody", s.idle_seconds)
    }
}

/// A replica's figures: its role, its term, its log, and (the leader's) each follower's lag.
fn replica_metrics(
    e: &mut DescriptorEncoder,
    status: &ac_proto::arm::ClusterStatus,
    serving: bool,
) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "replica_serving",
        "Whether this replica leads and serves (1) or sends clients to the leader (0)",
        i64::from(serving),
    )?;
    gauge(
        e,
        "replica_leader_known",
        "Whether this replica knows an elected leader (1) or not (0)",
        i64::from(status.leader.is_some()),
    )?;
    gauge(e, "replica_term", "This replica's Raft term (each election raises it)", status.term as i64)?;
    gauge(
        e,
        "replica_last_log_index",
        "The index of the last entry in this replica's Raft log",
        status.last_log.unwrap_or(0) as i64,
    )?;
    gauge(
        e,
        "replica_applied_index",
        "The index of the last entry this replica applied to its store",
        status.applied.unwrap_or(0) as i64,
    )?;
    if serving {
        let last = status.last_log.unwrap_or(0);
        let lags: Vec<(String, i64)> = status
            .members
            .iter()
            .filter(|m| m.id != status.replica)
            .map(|m| (m.id.to_string(), m.matched.map_or(last as i64, |matched| last.saturating_sub(matched) as i64)))
            .collect();
        gauges(
            e,
            "replica_follower_lag",
            "Entries of the leader's log each follower does not hold yet (the leader's view)",
            "replica",
            lags.iter().map(|(id, lag)| (id.as_str(), *lag)),
        )?;
    }
    Ok(())
}

/// Encodes one counter without labels.
fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let counter = ConstCounter::new(value);
    counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arm_sched::Rejection;

    #[test]
    fn every_rejection_has_its_reason_label() {
        let scheduler = [
            (Rejection::NoIdleUnits { idle: 0 }, "no_idle"),
            (Rejection::Forbidden { job: 1, user: "u".into() }, "fairness_forbidden"),
            (Rejection::OverLimit { job: 1, user: "u".into(), delay: 5 }, "fairness_limit"),
            (Rejection::Reserved, "reservation"),
            (Rejection::TimedOut, "timed_out"),
            (Rejection::NothingToBorrow, "nothing_to_borrow"),
        ];
        for (rejection, label) in scheduler {
            assert_eq!(reason_label(&rejection.to_string()), label, "{rejection}");
        }
        assert_eq!(reason_label("Slurm: the license is gone"), "slurm");
        assert_eq!(reason_label("no accelerators were granted before the deadline"), "timed_out");
        assert_eq!(reason_label("something new"), "other");
    }
}
