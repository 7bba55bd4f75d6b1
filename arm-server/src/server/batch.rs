//! The ARM beside a Slurm controller: jobs bound by Slurm's prolog, processes proving their user
//! with munge, grants recorded as the jobs' licenses before they are answered (and taken back
//! when Slurm's pool turns out to be overdrawn), and the reconciliation that releases what
//! Slurm no longer runs and keeps unusable accelerators out of Slurm's pool.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ac_proto::arm::{munge_payload, ArmError, ArmErrorKind};

use super::{err, Arm};
use crate::core::GetOutcome;
use crate::model::{BatchJob, Job, JobState};
use crate::slurm::{ActiveJob, JobLicenses, Slurm, SlurmError};

impl Arm {
    fn slurm(&self) -> Option<&Slurm> {
        self.slurm.as_ref()
    }

    /// `AC_Init` with a munge credential: munge says who made it; the core checks that the
    /// job is that user's and runs on `node`.
    pub(super) async fn open_munge_session(
        &self,
        token_hash: &str,
        job: &str,
        credential: &str,
        node: &str,
    ) -> Result<(), ArmError> {
        let slurm = self
            .slurm()
            .ok_or_else(|| err(ArmErrorKind::Unauthorized, "this resource manager does not work with Slurm"))?;
        let identity = slurm.verify_munge(credential).await.map_err(|e| err(ArmErrorKind::Unauthorized, e))?;
        if identity.payload != munge_payload(job, node) {
            return Err(err(ArmErrorKind::Unauthorized, "the munge credential was made for another job or node"));
        }
        let known = self.core.lock().expect("core poisoned").jobs().contains_key(job);
        if !known {
            self.register_on_demand(slurm, job).await?;
        }
        self.mutate(|core, _| core.open_batch_session(token_hash.to_string(), job, identity.uid, node)).await.map(drop)
    }

    /// Registers a running Slurm job the manager has not seen: one without static
    /// accelerators, whose prolog does not call the manager (so that a manager outage fails
    /// only the jobs that asked for accelerators). Slurm says whose it is and where it runs;
    /// the session that asked is then checked against that like any other.
    async fn register_on_demand(&self, slurm: &Slurm, job: &str) -> Result<(), ArmError> {
        // One at a time, so that the job's processes starting together register it once (a
        // second binding would end the first's). A job not yet known binds nothing in Slurm.
        let _one_at_a_time = self.slurm_grants.lock().await;
        if self.core.lock().expect("core poisoned").jobs().contains_key(job) {
            return Ok(());
        }
        let running = slurm.running_job(job).await.map_err(|e| err(ArmErrorKind::Unauthorized, e))?;
        tracing::info!(job, user = running.user, nodes = ?running.nodes, "registered on demand (no static accelerators)");
        self.bind_job(job.to_string(), running.nodes, 0, running.user, running.uid, running.time_limit_s).await
    }

    /// The prolog's binding of a job Slurm starts. A binding short of accelerators waits (up
    /// to 3 s) while `AC_Get`s are between their decision and their record in Slurm: Slurm
    /// counted this job's licenses before the ARM held those grants, so their records fail and
    /// undo them, and the job is bound instead of bounced back to Slurm's queue.
    pub(super) async fn bind_job(
        &self,
        id: String,
        nodes: Vec<String>,
        acpn: u32,
        user: String,
        uid: u32,
        walltime_s: u64,
    ) -> Result<(), ArmError> {
        // A job id seen before is a requeued job (or a reused id): Slurm may count the grants
        // of its last run in its licenses, fixed once it is bound.
        let rerun = self.core.lock().expect("core poisoned").jobs().contains_key(&id);
        let nodes = match self.slurm() {
            Some(slurm) if acpn > 0 => self.licensed_nodes(slurm, &id, nodes, acpn).await,
            _ => nodes,
        };
        let group = self.config.accounts.get(&user).cloned().unwrap_or_else(|| user.clone());
        let job = Job { batch: Some(BatchJob { uid }), ..Job::queued(id, user, group, nodes, acpn, walltime_s) };
        let start = std::time::Instant::now();
        let bound = loop {
            let bound = self.mutate(|core, now| core.bind_batch_job(job.clone(), now)).await;
            let settling = self.grants_in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0;
            match bound {
                Err(e) if e.kind == ArmErrorKind::Conflict && settling && start.elapsed() < SETTLE_LIMIT => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other,
            }
        };
        match &bound {
            Ok(None) => tracing::info!(job = job.id, acpn, "prolog: bound"),
            Ok(Some(earlier)) => tracing::info!(
                job = job.id,
                acpn,
                earlier_start = earlier,
                "prolog: bound; the binding of an earlier run of this job id (requeued, or the id reused) was ended"
            ),
            // The prolog's refusal reaches slurmctld only as an exit status: say why here.
            Err(e) => tracing::warn!(job = job.id, acpn, reason = e.message, "prolog refused: Slurm requeues the job"),
        }
        // Slurm may count more than is bound: a node range counted at its largest, or a
        // requeued job's licenses as its last run left them (grants included: they cannot be
        // shrunk while the job is pending or completing, since Slurm returns a changed count
        // when the job ends and would lose the difference). Running, they can. (A job
        // registered on demand binds nothing, and its caller holds the Slurm lock.)
        if bound.is_ok() && (acpn > 0 || rerun) {
            self.record_release(Some(job.id.clone())).await;
        }
        bound.map(drop)
    }

    /// The nodes on which the prolog binds `acpn` accelerators each, with Slurm counting
    /// every one. Slurm counted the job's licenses at submission, and may start it on more
    /// nodes than that count covers (a task count alone lets it spread the tasks); the count
    /// grows first, as a grant's does ([`Arm::grow_licenses`]). If Slurm has too few
    /// licenses left, accelerators are bound only on as many nodes as it counted, so that
    /// Slurm never starts another job on an accelerator that is taken.
    async fn licensed_nodes(&self, slurm: &Slurm, job: &str, nodes: Vec<String>, acpn: u32) -> Vec<String> {
        let _one_at_a_time = self.slurm_grants.lock().await;
        let wanted = acpn * nodes.len() as u32;
        let counted = async {
            let licenses = slurm.job_licenses(job).await.map_err(|e| (e, 0))?;
            let recorded = slurm.pool_licenses(&licenses);
            if wanted <= recorded {
                return Ok(());
            }
            grow_licenses(slurm, licenses, recorded, wanted).await.map_err(|e| (e, recorded))
        };
        match counted.await {
            Ok(()) => nodes,
            Err((reason, recorded)) => {
                let covered = (recorded / acpn).max(1) as usize;
                tracing::warn!(
                    job,
                    acpn,
                    nodes = nodes.len(),
                    covered,
                    reason,
                    "prolog: Slurm counts too few licenses for every node: accelerators bound on the nodes it counted"
                );
                nodes.into_iter().take(covered).collect()
            }
        }
    }

    /// The epilog: the job ends at the manager. An epilog may come late, after Slurm started
    /// the job again (requeued): when Slurm runs the job now, the epilog is an earlier run's and
    /// the current run's binding stays.
    pub(super) async fn end_job(&self, id: String) -> Result<(), ArmError> {
        if let Some(slurm) = self.slurm() {
            if slurm.jobs().await.is_ok_and(|jobs| jobs.active.contains_key(&id)) {
                tracing::info!(job = id, "epilog of an earlier run: Slurm runs the job again, its binding stays");
                return Ok(());
            }
        }
        let ended = self.mutate(|core, now| core.end_job(&id, now)).await;
        self.shrink_lent_if_returned().await;
        match &ended {
            // A job whose prolog failed was never bound: nothing to end.
            Err(e) if e.kind == ArmErrorKind::NotFound => {}
            // Slurm keeps nothing of what a failing epilog says: the manager's log does.
            Err(e) => tracing::warn!(job = id, reason = e.message, "job end (epilog) refused"),
            Ok(()) => {}
        }
        ended
    }

    /// A store that cannot write, hosts whose backends serve other devices than registered,
    /// then what the last reconciliation with Slurm found wrong.
    pub(super) fn health(&self) -> Vec<String> {
        let mut problems: Vec<String> = self.store_health().into_iter().collect();
        problems.extend(self.core.lock().expect("core poisoned").host_problems());
        problems.extend(self.slurm_problems.lock().expect("problems poisoned").iter().cloned());
        problems
    }

    /// The batch job a session belongs to, if Slurm is in charge of it.
    fn batch_job_of(&self, token_hash: &str) -> Option<String> {
        self.slurm()?;
        let core = self.core.lock().expect("core poisoned");
        let job = &core.session(token_hash).ok()?.job;
        core.jobs().get(job).filter(|j| j.batch.is_some()).map(|j| j.id.clone())
    }

    /// Accelerators `job` holds now as its own (static and dynamic, not lent): what Slurm
    /// counts as its licenses.
    fn held_count(&self, job: &str) -> u32 {
        self.core.lock().expect("core poisoned").firm_held_by(job) as u32
    }

    /// Sets the lent reservation to what batch jobs are lent now, ending when the first is
    /// due back (never sooner than two reconciliations away, so that it cannot lapse between
    /// them while they are lent). `lent` is what it holds, as last set (0 after a restart, so
    /// the first reconciliation adopts what was lent before). It grows as a grant's licenses
    /// do: the pool is read back, and if Slurm's jobs and reservations now hold more than
    /// there is, it goes back (`Err`), so Slurm's count never exceeds its total.
    async fn hold_lent(&self, slurm: &Slurm, lent: &mut u32) -> Result<(), SlurmError> {
        let now = super::accounting::unix_now_ms() / 1000;
        let (count, first_back) = self.core.lock().expect("core poisoned").lent_to_batch_jobs(now);
        if count == 0 && *lent == 0 {
            return Ok(());
        }
        let floor = 2 * self.config.slurm.reconcile_s.max(1) + 5;
        let ends_in = first_back.map_or(0, |back| back.saturating_sub(now)).max(floor);
        slurm.hold_lent(count, ends_in).await?;
        if count > *lent {
            let pool = slurm.license_use().await?;
            if pool.overdrawn() {
                slurm.hold_lent(*lent, ends_in).await?;
                return Err(format!(
                    "{} lent license(s) wanted; Slurm's jobs hold {} and reservations {} of {}",
                    count - *lent,
                    pool.used,
                    pool.reserved.saturating_sub(count - *lent),
                    pool.total
                ));
            }
        }
        *lent = count;
        Ok(())
    }

    /// Records a grant in Slurm before it is answered: the job's `ac` licenses become what it
    /// holds ([`grow_licenses`], which never overdraws Slurm's pool). If Slurm got there first
    /// or does not answer, the grant is undone and rejected with that reason.
    pub(super) async fn record_grant(&self, outcome: GetOutcome, token_hash: &str) -> Result<GetOutcome, ArmError> {
        let GetOutcome::Granted(set) = outcome else { return Ok(outcome) };
        let (Some(slurm), Some(job)) = (self.slurm(), self.batch_job_of(token_hash)) else { return Ok(outcome) };
        let mut one_at_a_time = self.slurm_grants.lock().await;
        let lent = &mut *one_at_a_time;
        let recorded = async {
            let held = self.held_count(&job);
            let licenses = slurm.job_licenses(&job).await?;
            let recorded = slurm.pool_licenses(&licenses);
            if held > recorded {
                grow_licenses(slurm, licenses, recorded, held).await?;
            }
            self.hold_lent(slurm, lent).await
        };
        let Err(reason) = recorded.await else { return Ok(outcome) };
        tracing::warn!(job, set, reason, "a grant could not be recorded in Slurm: undone");
        self.mutate(|core, now| core.free(token_hash, set, None, now)).await?;
        drop(one_at_a_time);
        // Slurm's record goes back to what the job holds, without holding up the answer (Slurm
        // may be the one not answering).
        let arm = self.me.upgrade();
        tokio::spawn(async move {
            if let Some(arm) = arm {
                arm.record_release(Some(job)).await;
                if let Some(slurm) = arm.slurm() {
                    let mut lent = arm.slurm_grants.lock().await;
                    let _ = slurm.hold_for_grant(0).await;
                    let _ = arm.hold_lent(slurm, &mut lent).await;
                }
            }
        });
        Ok(GetOutcome::Rejected(format!("Slurm: {reason}")))
    }

    /// Lent accelerators given back or revoked since Slurm's reservation of them was last set:
    /// it shrinks now, so that a job Slurm holds back for want of them starts at its next
    /// cycle rather than after the next reconciliation. Called from the 200 ms tick, it never
    /// waits for the Slurm lock: whoever holds it is talking to Slurm, and the next tick tries
    /// again.
    pub(super) async fn shrink_lent_if_returned(&self) {
        let Some(slurm) = self.slurm() else { return };
        let Ok(mut lent) = self.slurm_grants.try_lock() else { return };
        self.shrink_lent(slurm, &mut lent).await;
    }

    /// [`Arm::shrink_lent_if_returned`] with the Slurm lock held (`lent`).
    async fn shrink_lent(&self, slurm: &Slurm, lent: &mut u32) {
        let now = super::accounting::unix_now_ms() / 1000;
        let (count, _) = self.core.lock().expect("core poisoned").lent_to_batch_jobs(now);
        if count < *lent {
            if let Err(e) = self.hold_lent(slurm, lent).await {
                tracing::warn!(error = e, "could not shrink Slurm's reservation of lent accelerators");
            }
        }
    }

    /// After a release: the job's licenses in Slurm shrink back to what it holds, and the
    /// lent reservation to what is still lent. Only shrink: what it holds may include grants
    /// not yet recorded, which only `record_grant` may add.
    pub(super) async fn record_release(&self, job: Option<String>) {
        let (Some(slurm), Some(job)) = (self.slurm(), job) else { return };
        let mut lent = self.slurm_grants.lock().await;
        // What it gave back may have been lent to it.
        self.shrink_lent(slurm, &mut lent).await;
        let still_running = {
            let core = self.core.lock().expect("core poisoned");
            core.jobs().get(&job).is_some_and(|j| j.state == JobState::Running)
        };
        if !still_running {
            return;
        }
        let shrunk = async {
            let held = self.held_count(&job);
            let licenses = slurm.job_licenses(&job).await?;
            let recorded = slurm.pool_licenses(&licenses);
            if held < recorded {
                slurm.replace_job_licenses(licenses, held).await?;
            }
            Ok::<_, String>(())
        };
        if let Err(e) = shrunk.await {
            tracing::warn!(job, error = e, "could not shrink the job's licenses in Slurm");
        }
    }

    /// The session's batch job, for [`Arm::record_release`] after the session changes.
    pub(super) fn batch_job_for_release(&self, token_hash: &str) -> Option<String> {
        self.batch_job_of(token_hash)
    }

    /// One reconciliation with Slurm: batch jobs Slurm no longer runs are released, running
    /// ones follow Slurm's time limits and licenses, Slurm's queue goes into the view, Slurm's
    /// pool is checked against the manager's, and the licenses of unusable accelerators are
    /// held in the reservation. What is wrong is logged once when it appears, and kept for
    /// `armctl health`.
    async fn reconcile(&self, held_unavailable: &mut Option<u32>) {
        let Some(slurm) = self.slurm() else { return };
        let mut problems = Vec::new();
        // A job bound after this point is missing from the listing because it is new, not
        // because it ended: only jobs bound before it may be found gone.
        let listed_after = self.core.lock().expect("core poisoned").next_id();
        match slurm.jobs().await {
            Ok(jobs) => {
                self.follow_active(&jobs.active, listed_after).await;
                let on_licenses =
                    jobs.pending.iter().filter(|p| p.reason == "Licenses").map(|p| p.id.clone()).collect();
                let queue =
                    jobs.pending.into_iter().enumerate().map(|(order, p)| queued_job(p, order as u64)).collect();
                self.core.lock().expect("core poisoned").set_batch_queue(queue, on_licenses);
            }
            Err(e) => problems.push(format!("cannot list Slurm's jobs (jobs that ended are not released): {e}")),
        }
        let (registered, unavailable) = {
            let core = self.core.lock().expect("core poisoned");
            let count = |unusable: bool| {
                // Unusable: on a host down or draining, or not served by its backend.
                let devices = core.hosts().values().flat_map(|h| h.devices.iter().map(move |d| (h, d)));
                devices.filter(|(h, d)| !unusable || !h.grantable(d)).count() as u32
            };
            // What jobs Slurm does not know hold (ad-hoc jobs, `armctl job submit`) is kept out
            // of its pool with the unusable accelerators.
            let running = core.jobs().values().filter(|j| j.batch.is_none() && j.state == JobState::Running);
            let outside: u32 = running.map(|j| core.held_by(&j.id).len() as u32).sum();
            (count(false), count(true) + outside)
        };
        match slurm.license_use().await {
            Ok(pool) if pool.total != registered => problems.push(format!(
                "Slurm's pool is out of step: Licenses={}:{} in slurm.conf, {registered} accelerator(s) registered \
                 with the manager; jobs are refused at their prolog when Slurm grants what the manager lacks",
                slurm.license(),
                pool.total
            )),
            Ok(_) => {}
            Err(e) => problems.push(format!("cannot read Slurm's pool: {e}")),
        }
        {
            let mut lent = self.slurm_grants.lock().await;
            if let Err(e) = self.hold_lent(slurm, &mut lent).await {
                problems.push(format!("cannot update Slurm's reservation of lent accelerators: {e}"));
            }
        }
        if *held_unavailable != Some(unavailable) {
            match slurm.hold_unavailable(unavailable).await {
                Ok(()) => *held_unavailable = Some(unavailable),
                Err(e) => problems.push(format!("cannot resize Slurm's reservation of unusable accelerators: {e}")),
            }
        }
        let mut kept = self.slurm_problems.lock().expect("problems poisoned");
        for problem in problems.iter().filter(|p| !kept.contains(p)) {
            tracing::warn!(problem, "reconciliation with Slurm");
        }
        if problems.is_empty() && !kept.is_empty() {
            tracing::info!("reconciliation with Slurm: nothing wrong any more");
        }
        *kept = problems;
    }

    /// Running batch jobs against what Slurm runs (`active`): ended if Slurm no longer runs them
    /// (and they were bound before the listing, `seq < listed_after`), given Slurm's current
    /// time limit, and their licenses shrunk back where Slurm counts more than they hold (a
    /// release whose record failed).
    async fn follow_active(&self, active: &BTreeMap<String, ActiveJob>, listed_after: u64) {
        let (gone, limits, shrink) = {
            let core = self.core.lock().expect("core poisoned");
            let running = || core.jobs().values().filter(|j| j.batch.is_some() && j.state == JobState::Running);
            let gone: Vec<String> = running()
                .filter(|j| j.seq < listed_after && !active.contains_key(&j.id))
                .map(|j| j.id.clone())
                .collect();
            let limits: Vec<(String, u64)> = running()
                .filter_map(|j| Some((j, active.get(&j.id)?.time_limit_s)))
                .filter(|(j, limit)| j.walltime_s != *limit)
                .map(|(j, limit)| (j.id.clone(), limit))
                .collect();
            let shrink: Vec<String> = running()
                .filter(|j| active.get(&j.id).is_some_and(|a| a.accelerators > core.firm_held_by(&j.id) as u32))
                .map(|j| j.id.clone())
                .collect();
            (gone, limits, shrink)
        };
        for job in gone {
            tracing::info!(job, "Slurm no longer runs this job: released");
            let _ = self.mutate(|core, now| core.end_job(&job, now)).await;
        }
        for (job, limit_s) in limits {
            tracing::info!(job, limit_s, "Slurm's time limit of the job changed: followed");
            let _ = self.mutate(|core, _| core.set_walltime(&job, limit_s)).await;
        }
        for job in shrink {
            self.record_release(Some(job)).await;
        }
    }
}

/// How long a prolog's binding waits for `AC_Get`s in flight to settle.
const SETTLE_LIMIT: Duration = Duration::from_secs(3);

/// Counts an `AC_Get` from its decision to its record in Slurm.
#[derive(Debug)]
pub(super) struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> InFlight<'a> {
    pub(super) fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A pending Slurm job as a queued job of the scheduler's view (`order`: its place in
/// Slurm's priority order). Its accelerators count as one node's worth.
fn queued_job(pending: crate::slurm::PendingJob, order: u64) -> Job {
    let nodes = vec!["(pending in Slurm)".to_string()];
    let job =
        Job::queued(pending.id, pending.user.clone(), pending.user, nodes, pending.accelerators, pending.time_limit_s);
    Job { seq: order, ..job }
}

/// Reconciles with Slurm at start and then every `reconcile_s`.
pub(super) async fn reconcile_loop(arm: Arc<Arm>) {
    let period = Duration::from_secs(arm.config.slurm.reconcile_s.max(1));
    let mut held_unavailable = None;
    loop {
        if !arm.serves() {
            tokio::time::sleep(period).await;
            continue;
        }
        arm.reconcile(&mut held_unavailable).await;
        arm.metrics.reconciled(!arm.health().is_empty());
        tokio::time::sleep(period).await;
    }
}

/// Sets a job's `ac` licenses in Slurm to `held`, which may be more than the `recorded` count.
/// Slurm does not check capacity on such an update, and may start a job between any two
/// commands, so the difference is first held in a reservation (which Slurm checks against the
/// total only, and keeps jobs out of); then the pool is read: if Slurm's jobs and reservations
/// now hold more than there is, Slurm got there first and nothing changes (`Err`); else the
/// job's licenses grow and the reservation empties. So Slurm's `Used` never exceeds its total.
async fn grow_licenses(slurm: &Slurm, licenses: JobLicenses, recorded: u32, held: u32) -> Result<(), SlurmError> {
    let more = held.saturating_sub(recorded);
    if more == 0 {
        return slurm.replace_job_licenses(licenses, held).await;
    }
    slurm.hold_for_grant(more).await?;
    let pool = slurm.license_use().await?;
    if pool.overdrawn() {
        slurm.hold_for_grant(0).await?;
        return Err(format!(
            "{more} license(s) wanted; Slurm's jobs hold {} and reservations {} of {}",
            pool.used,
            pool.reserved.saturating_sub(more),
            pool.total
        ));
    }
    let updated = slurm.replace_job_licenses(licenses, held).await;
    slurm.hold_for_grant(0).await?;
    updated
}
