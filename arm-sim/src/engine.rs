//! The discrete-event engine: replays a workload against the scheduling core in simulated
//! time. At each instant it applies job ends, then dynamic requests, then arrivals (the
//! paper's Algorithm 2 serves dynamic requests before starting static jobs), then runs one
//! scheduling pass.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use arm_sched::{Config, DynOutcome, DynRequest, Event, JobSpec, Scheduler, Time, Unit};
use serde::{Deserialize, Serialize};

use crate::workload::{SimJob, Workload};
use crate::SimError;

/// How the simulated applications behave (the scheduler's settings are in [`Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Behaviour {
    /// Evolving jobs ask for more units (off: the paper's "Static" configuration).
    pub dynamic: bool,
    /// Instead of asking again later, the first request waits until the retry point.
    pub wait_until_retry: bool,
    /// Accept partial grants down to this many units (absent: all or nothing).
    pub min_units: Option<u32>,
    /// Tell the scheduler when the job will end if granted (its linear speed-up).
    pub declare_speedup: bool,
    /// Ask elastically, accepting reclaims with this notice (seconds); a reclaimed job gives
    /// the units back at once.
    pub elastic: Option<Time>,
    /// A request the scheduler cannot grant now waits (for an offer, if elastic) until the job's
    /// walltime ends, instead of asking again at the retry point.
    pub offers: bool,
    /// Seconds of no progress that each resize (a grant, a reclaim or a revocation) costs.
    pub resize_cost: Time,
    /// Evolving jobs are malleable (as in DMR): from their first request on, they take units
    /// up to this multiple of their size in extra units, and ask again (elastically, waiting
    /// for offers) after each partial grant or reclaim. Needs `elastic` and `offers`.
    pub malleable: Option<f64>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            dynamic: true,
            wait_until_retry: false,
            min_units: None,
            declare_speedup: false,
            elastic: None,
            offers: false,
            resize_cost: 0,
            malleable: None,
        }
    }
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// SWF id.
    pub id: u64,
    /// Type label.
    pub kind: String,
    /// User.
    pub user: u32,
    /// Units at start.
    pub size: u32,
    /// Submission time.
    pub submit: Time,
    /// Start time (`None`: never started).
    pub start: Option<Time>,
    /// End time.
    pub end: Option<Time>,
    /// Units granted dynamically.
    pub granted: u32,
    /// Of those, units reclaimed or revoked before the job ended.
    #[serde(default)]
    pub reclaimed: u32,
    /// It asked for units.
    pub evolving: bool,
    /// It started out of priority order.
    pub backfilled: bool,
}

impl JobRecord {
    /// Seconds from submission to start.
    pub fn wait(&self) -> Option<Time> {
        Some(self.start? - self.submit)
    }
}

/// The outcome of one simulation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimResult {
    /// Units simulated.
    pub units: u32,
    /// Per job, in workload order.
    pub jobs: Vec<JobRecord>,
    /// Busy units over time: (time, units) at every change.
    pub busy: Vec<(Time, u32)>,
    /// Dynamic requests made.
    pub requests: u64,
    /// Reclaims issued (one per lending job and reclaim).
    #[serde(default)]
    pub reclaims: u64,
    /// Units revoked because a job kept them past a reclaim's deadline.
    #[serde(default)]
    pub revoked: u64,
    /// The scheduler's counters.
    pub stats: arm_sched::Stats,
    /// Delay that dynamic grants caused to each user's jobs, seconds.
    pub delay_caused: BTreeMap<String, f64>,
    /// The most delay charged to each user within one fairness interval, seconds.
    pub delay_worst_interval: BTreeMap<String, f64>,
    /// Jobs the scheduler refused (larger than the machine).
    pub refused: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A job ends, if its generation still matches (a grant moves the end).
    End { generation: u32 },
    /// An evolving job asks (attempt 0 or 1; 2: a malleable job asks for more).
    Ask { attempt: u8 },
    /// A job arrives.
    Arrive,
    /// A scheduler timer.
    Wake,
}

/// A running job's progress in static-speed seconds.
#[derive(Debug, Clone, Copy)]
struct Progress {
    done: f64,
    rate: f64,
    since: Time,
    generation: u32,
}

struct Engine<'w> {
    workload: &'w Workload,
    behaviour: Behaviour,
    scheduler: Scheduler,
    queue: BinaryHeap<Reverse<(Time, Kind, usize)>>,
    index: BTreeMap<u64, usize>,
    records: Vec<JobRecord>,
    progress: Vec<Option<Progress>>,
    /// A request of the job waits in the scheduler.
    asking: Vec<bool>,
    busy: Vec<(Time, u32)>,
    requests: u64,
    reclaims: u64,
    revoked: u64,
    refused: Vec<u64>,
}

/// Runs `workload` on `units` units. `tick` is called with the number of jobs ended so far.
pub fn simulate(
    workload: &Workload,
    config: Config,
    units: u32,
    behaviour: Behaviour,
    tick: &mut dyn FnMut(usize),
) -> Result<SimResult, SimError> {
    let mut scheduler = Scheduler::new(config);
    for i in 0..units {
        scheduler.add_unit(Unit { host: format!("node{i}"), labels: Vec::new() });
    }
    let mut engine = Engine {
        workload,
        behaviour,
        scheduler,
        queue: BinaryHeap::new(),
        index: BTreeMap::new(),
        records: Vec::with_capacity(workload.jobs.len()),
        progress: vec![None; workload.jobs.len()],
        asking: vec![false; workload.jobs.len()],
        busy: Vec::new(),
        requests: 0,
        reclaims: 0,
        revoked: 0,
        refused: Vec::new(),
    };
    for (i, job) in workload.jobs.iter().enumerate() {
        if engine.index.insert(job.id, i).is_some() {
            return Err(SimError::Workload { line: 0, message: format!("job {} appears twice", job.id) });
        }
        engine.records.push(JobRecord {
            id: job.id,
            kind: job.kind.clone(),
            user: job.user,
            size: job.size,
            submit: job.submit,
            start: None,
            end: None,
            granted: 0,
            reclaimed: 0,
            evolving: false,
            backfilled: false,
        });
        engine.queue.push(Reverse((job.submit, Kind::Arrive, i)));
    }
    engine.run(tick)?;
    Ok(SimResult {
        units,
        jobs: engine.records,
        busy: engine.busy,
        requests: engine.requests,
        reclaims: engine.reclaims,
        revoked: engine.revoked,
        stats: engine.scheduler.stats(),
        delay_caused: engine.scheduler.ledger().caused.clone(),
        delay_worst_interval: engine.scheduler.ledger().worst.clone(),
        refused: engine.refused,
    })
}

fn spec(job: &SimJob) -> JobSpec {
    JobSpec {
        id: job.id,
        user: format!("user{:02}", job.user),
        group: format!("group{:02}", job.group),
        size: job.size,
        walltime: Some(job.walltime),
        priority: job.priority,
        exclusive: job.exclusive,
        ..Default::default()
    }
}

impl Engine<'_> {
    fn run(&mut self, tick: &mut dyn FnMut(usize)) -> Result<(), SimError> {
        let mut ended = 0;
        while let Some(&Reverse((now, _, _))) = self.queue.peek() {
            while let Some(&Reverse((t, kind, i))) = self.queue.peek() {
                if t != now {
                    break;
                }
                self.queue.pop();
                match kind {
                    Kind::End { generation } => {
                        if self.progress[i].is_some_and(|p| p.generation == generation) {
                            self.end(i, now)?;
                            ended += 1;
                        }
                    }
                    Kind::Ask { attempt } => self.ask(i, attempt, now)?,
                    Kind::Arrive => {
                        if self.scheduler.submit(spec(&self.workload.jobs[i]), now).is_err() {
                            self.refused.push(self.workload.jobs[i].id);
                        }
                    }
                    Kind::Wake => {}
                }
            }
            let events = self.scheduler.schedule(now);
            self.apply(events, now)?;
            if let Some(w) = self.scheduler.next_wakeup().filter(|w| *w > now) {
                self.queue.push(Reverse((w, Kind::Wake, 0)));
            }
            let busy = self.scheduler.usable_units() - self.scheduler.idle_units();
            if self.busy.last().is_none_or(|(_, b)| *b != busy) {
                self.busy.push((now, busy));
            }
            tick(ended);
        }
        Ok(())
    }

    fn end(&mut self, i: usize, now: Time) -> Result<(), SimError> {
        self.scheduler.finish(self.workload.jobs[i].id, now)?;
        self.records[i].end = Some(now);
        self.progress[i] = None;
        Ok(())
    }

    fn apply(&mut self, events: Vec<Event>, now: Time) -> Result<(), SimError> {
        for event in events {
            match event {
                Event::Started { job, backfilled, .. } => self.start(self.index[&job], backfilled, now),
                Event::Granted { job, units, .. } => {
                    let i = self.index[&job];
                    self.asking[i] = false;
                    self.grow(i, units.len() as u32, now);
                    self.ask_for_more(i, now);
                }
                Event::Reclaim { job, units, .. } => {
                    // The simulated application complies at once: it gives the units back and
                    // pays the resize; the units start the queued job in a pass at this instant.
                    self.reclaims += 1;
                    self.scheduler.release(job, &units, now)?;
                    self.shrink(self.index[&job], units.len() as u32, now);
                    self.queue.push(Reverse((now, Kind::Wake, 0)));
                    self.ask_for_more(self.index[&job], now);
                }
                Event::Revoked { job, units } => {
                    self.revoked += units.len() as u64;
                    self.shrink(self.index[&job], units.len() as u32, now);
                    self.ask_for_more(self.index[&job], now);
                }
                // Only waiting requests end this way; they waited until the retry point.
                Event::Rejected { job, .. } => self.asking[self.index[&job]] = false,
                Event::Preempted { .. } => {}
            }
        }
        Ok(())
    }

    fn start(&mut self, i: usize, backfilled: bool, now: Time) {
        let job = &self.workload.jobs[i];
        self.records[i].start = Some(now);
        self.records[i].backfilled = backfilled;
        self.progress[i] = Some(Progress { done: 0.0, rate: 1.0, since: now, generation: 0 });
        self.queue.push(Reverse((now + job.runtime, Kind::End { generation: 0 }, i)));
        if let Some(e) = job.evolve.filter(|_| self.behaviour.dynamic) {
            if e.at < job.runtime {
                self.queue.push(Reverse((now + e.at, Kind::Ask { attempt: 0 }, i)));
            }
        }
    }

    /// Work left, in static-speed seconds, at `now`.
    fn remaining(&self, i: usize, now: Time) -> f64 {
        let p = self.progress[i].expect("running");
        let ran = now.saturating_sub(p.since) as f64;
        (self.workload.jobs[i].runtime as f64 - p.done - ran * p.rate).max(0.0)
    }

    fn ask(&mut self, i: usize, attempt: u8, now: Time) -> Result<(), SimError> {
        let job = &self.workload.jobs[i];
        let (Some(evolve), Some(_)) = (job.evolve, self.progress[i]) else { return Ok(()) };
        let extra = self.records[i].granted - self.records[i].reclaimed;
        let most = match self.behaviour.malleable {
            Some(factor) => evolve.extra.max((factor * f64::from(job.size)).round() as u32),
            None if self.records[i].granted > 0 => return Ok(()),
            None => evolve.extra,
        };
        if self.asking[i] || extra >= most || (attempt == 2 && !self.records[i].evolving) {
            return Ok(());
        }
        let retry_at = evolve.retry.filter(|_| attempt == 0).map(|r| self.records[i].start.unwrap_or(now) + r);
        let run_end = self.records[i].start.unwrap_or(now) + job.walltime;
        let timeout = match retry_at {
            _ if self.behaviour.offers => run_end.saturating_sub(now),
            Some(at) if self.behaviour.wait_until_retry => at.saturating_sub(now),
            _ => 0,
        };
        let worth = self.worth_asking(i, now, extra);
        if worth > most - extra {
            return Ok(());
        }
        let sped_up = (job.size + most) as f64 / job.size as f64;
        let end_if_granted = self.behaviour.declare_speedup.then(|| {
            now + (self.remaining(i, now) / (self.progress[i].expect("running").rate * sped_up)).ceil() as Time
        });
        let req = DynRequest {
            id: i as u64,
            job: job.id,
            min: worth.max(self.behaviour.min_units.unwrap_or(most - extra)).clamp(1, most - extra),
            max: most - extra,
            preemptible: false,
            timeout,
            end_if_granted,
            elastic: self.behaviour.elastic,
        };
        self.requests += 1;
        self.records[i].evolving = true;
        let (outcome, events) = self.scheduler.request(req, now)?;
        self.apply(events, now)?;
        match outcome {
            DynOutcome::Granted(units) => {
                self.grow(i, units.len() as u32, now);
                self.ask_for_more(i, now);
            }
            DynOutcome::Rejected(_) => {
                if let Some(at) = retry_at.filter(|at| *at > now && attempt == 0) {
                    self.queue.push(Reverse((at, Kind::Ask { attempt: 1 }, i)));
                }
            }
            DynOutcome::Pending => self.asking[i] = true,
        }
        Ok(())
    }

    /// The fewest extra units whose speed-up saves more than the resizes cost (growing now
    /// and, for lent units, maybe shrinking later): a program that knows its resize cost
    /// does not ask for less. 1 when resizing is free.
    fn worth_asking(&self, i: usize, now: Time, extra: u32) -> u32 {
        let cost = self.behaviour.resize_cost as f64 * if self.behaviour.elastic.is_some() { 2.0 } else { 1.0 };
        if cost == 0.0 {
            return 1;
        }
        let size = f64::from(self.workload.jobs[i].size);
        let remaining = self.remaining(i, now);
        let time_at = |k: f64| remaining * size / (size + k);
        let now_extra = f64::from(extra);
        (1..=4 * self.workload.jobs[i].size)
            .find(|k| time_at(now_extra) - time_at(now_extra + f64::from(*k)) > cost)
            .unwrap_or(u32::MAX)
    }

    /// A malleable job that holds less than it would take asks again, at this instant but
    /// after the events being applied.
    fn ask_for_more(&mut self, i: usize, now: Time) {
        if self.behaviour.malleable.is_some() && self.progress[i].is_some() {
            self.queue.push(Reverse((now, Kind::Ask { attempt: 2 }, i)));
        }
    }

    fn grow(&mut self, i: usize, granted: u32, now: Time) {
        self.records[i].granted += granted;
        self.resize(i, now);
    }

    fn shrink(&mut self, i: usize, lost: u32, now: Time) {
        self.records[i].reclaimed += lost;
        self.resize(i, now);
    }

    /// Linear speed-up: the remaining work runs `(size + extra) / size` times faster, after
    /// the resize's cost.
    fn resize(&mut self, i: usize, now: Time) {
        let size = self.workload.jobs[i].size;
        let extra = self.records[i].granted - self.records[i].reclaimed;
        let remaining = self.remaining(i, now);
        let p = self.progress[i].as_mut().expect("running");
        p.done = self.workload.jobs[i].runtime as f64 - remaining;
        p.since = now.max(p.since) + self.behaviour.resize_cost;
        p.rate = f64::from(size + extra) / f64::from(size);
        p.generation += 1;
        let end = p.since + (remaining / p.rate).ceil() as Time;
        let generation = p.generation;
        self.queue.push(Reverse((end, Kind::End { generation }, i)));
    }
}
