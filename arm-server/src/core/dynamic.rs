//! The `AC_Get` family: sets granted now or after a wait, idempotent retries, releases, and the
//! pre-allocations of CooRMv2: a job grows into its spare units without asking the fairness
//! policy, other jobs borrow spare units preemptibly, and a borrower whose units the owner takes
//! back is told and loses them after a grace.

use ac_proto::arm::{ArmErrorKind, Ask};

use super::view::Decision;
use super::{err, Core, GetOutcome, Key, Outcome, Told};
use crate::model::{DynSet, Holder, JobState, Loan, PendingGet};

pub use ac_proto::arm::Preemption;

impl Core {
    /// `AC_Get` (and its collective form, all or nothing with no wait): grants between
    /// `ask.min` and `ask.max` now, rejects, or, when the request may wait, keeps it pending
    /// for the next passes. A request whose key was seen gets the first answer again.
    pub fn get(
        &mut self,
        token_hash: &str,
        parts: &[(String, u32)],
        collective: bool,
        ask: &Ask,
        now: u64,
    ) -> Outcome<GetOutcome> {
        self.decide_get(token_hash, parts, collective, ask, None, now)
    }

    /// An elastic `AC_Get`: as [`Core::get`], but what it gets is lent, reclaimed with at
    /// least `notice_s` seconds of notice (`elastic.rs`); waiting, it is an offer.
    pub fn get_elastic(&mut self, token_hash: &str, ask: &Ask, notice_s: u64, now: u64) -> Outcome<GetOutcome> {
        self.decide_get(token_hash, &[], false, ask, Some(notice_s), now)
    }

    fn decide_get(
        &mut self,
        token_hash: &str,
        parts: &[(String, u32)],
        collective: bool,
        ask: &Ask,
        elastic: Option<u64>,
        now: u64,
    ) -> Outcome<GetOutcome> {
        let session = self.session(token_hash)?.clone();
        if let Some(seen) = self.replay(token_hash, &ask.key) {
            return Ok(seen);
        }
        let job = self.jobs.get(&session.job).ok_or_else(|| err(ArmErrorKind::NotFound, "job gone"))?;
        if job.state != JobState::Running {
            return Err(err(ArmErrorKind::Conflict, "the job's static accelerators are not bound yet"));
        }
        for (node, _) in parts {
            if !job.nodes.contains(node) {
                return Err(err(ArmErrorKind::Invalid, format!("node `{node}` is not one of the job's nodes")));
            }
        }
        if ask.min == 0 || ask.min > ask.max {
            return Err(err(ArmErrorKind::Invalid, format!("ask for 1 <= min <= max (got {}..{})", ask.min, ask.max)));
        }
        // The id is taken (a durable change) only if the request is granted or waits: a
        // rejection changes nothing, so it commits nothing.
        let id = self.next_id + 1;
        let plain = if elastic.is_some() { None } else { self.plain_decision(&session.job, ask, now) };
        let mut lent_by = None;
        let decision = match plain {
            Some(decision) => {
                self.roll_ledger(now);
                decision
            }
            None => {
                let mut view = self.view_with_batch_queue(&session.job, now);
                let decision = view.request(&session.job, ask, elastic, id, now);
                self.keep_ledger(&view);
                lent_by = elastic.map(|_| view);
                decision
            }
        };
        if !matches!(decision, Decision::Rejected(_)) {
            let taken = self.fresh_id();
            debug_assert_eq!(taken, id, "no id is taken while a request is decided");
        }
        match decision {
            Decision::Granted(picked) => {
                let parts = if collective { parts.to_vec() } else { vec![(session.node.clone(), picked.len() as u32)] };
                self.hold_set(id, &session.job, token_hash, &parts, picked, collective, ask.key.clone(), now);
                if let Some(view) = &lent_by {
                    self.lend_granted(view, id, &session.job);
                }
                Ok(GetOutcome::Granted(id))
            }
            Decision::Rejected(reason) => Ok(GetOutcome::Rejected(self.with_reservations(reason, now))),
            Decision::Waiting => {
                let get = PendingGet {
                    id,
                    job: session.job,
                    session: token_hash.to_string(),
                    node: session.node,
                    min: ask.min,
                    max: ask.max,
                    preemptible: ask.preemptible,
                    deadline: now.saturating_add(ask.wait_s),
                    key: ask.key.clone(),
                    rejected: None,
                };
                self.pending.insert(id, get);
                self.dirty.insert(Key::Pending(id));
                if let Some(notice) = elastic {
                    self.elastic_gets.insert(id, notice);
                    self.dirty.insert(Key::ElasticGet(id));
                }
                Ok(GetOutcome::Waiting(id))
            }
        }
    }

    /// Whether the request with `key` of this session was decided before and remembered (granted,
    /// waiting, or rejected while it waited): an answer to it repeats that decision.
    pub fn remembers(&self, token_hash: &str, key: &str) -> bool {
        self.replay(token_hash, key).is_some()
    }

    /// The answer already given to the request with `key` of this session, if any.
    fn replay(&self, token_hash: &str, key: &str) -> Option<GetOutcome> {
        if key.is_empty() {
            return None;
        }
        if let Some(set) = self.sets.values().find(|s| s.session == token_hash && s.key == key) {
            return Some(GetOutcome::Granted(set.id));
        }
        self.pending.values().find(|g| g.session == token_hash && g.key == key).map(|g| match &g.rejected {
            Some(reason) => GetOutcome::Rejected(reason.clone()),
            None => GetOutcome::Waiting(g.id),
        })
    }

    /// Where a waiting `AC_Get` stands, changing nothing.
    pub fn peek_get(&self, token_hash: &str, request: u64) -> Outcome<GetOutcome> {
        self.session(token_hash)?;
        if self.sets.get(&request).is_some_and(|s| s.session == token_hash) {
            return Ok(GetOutcome::Granted(request));
        }
        let get = self
            .pending
            .get(&request)
            .filter(|g| g.session == token_hash)
            .ok_or_else(|| err(ArmErrorKind::NotFound, format!("no waiting request {request} in this session")))?;
        Ok(get.rejected.clone().map_or(GetOutcome::Waiting(request), GetOutcome::Rejected))
    }

    /// Where a waiting `AC_Get` stands; a rejection is forgotten once told.
    pub fn await_get(&mut self, token_hash: &str, request: u64) -> Outcome<GetOutcome> {
        let outcome = self.peek_get(token_hash, request)?;
        if let GetOutcome::Rejected(_) = outcome {
            self.pending.remove(&request);
            self.dirty.insert(Key::Pending(request));
            self.forget_elastic_get(request);
        }
        Ok(outcome)
    }

    /// Withdraws a waiting `AC_Get` whose program stopped waiting (its deadline passed): a
    /// request decided meanwhile keeps its answer (the program takes a grant made in time).
    pub fn cancel_get(&mut self, token_hash: &str, request: u64, now: u64) -> Outcome<GetOutcome> {
        let outcome = self.await_get(token_hash, request)?;
        if let GetOutcome::Waiting(_) = outcome {
            self.pending.remove(&request);
            self.dirty.insert(Key::Pending(request));
            self.forget_elastic_get(request);
            // Requests behind it may now be served.
            self.schedule(now);
            return Ok(GetOutcome::Rejected("no accelerators were granted before the deadline".into()));
        }
        Ok(outcome)
    }

    /// Waiting requests ahead of `request`.
    pub fn waiting_ahead(&self, request: u64) -> u32 {
        self.pending.values().filter(|g| g.rejected.is_none() && g.id < request).count() as u32
    }

    /// Records a granted set and hands its accelerators to the job, node by node: a spare unit
    /// of its own pre-allocation is taken into use (a borrower of it is preempted), another
    /// job's spare unit is borrowed, a free one is held.
    #[allow(clippy::too_many_arguments)] // a set is all of these
    pub(super) fn hold_set(
        &mut self,
        id: u64,
        job: &str,
        session: &str,
        parts: &[(String, u32)],
        picked: Vec<String>,
        collective: bool,
        key: String,
        now: u64,
    ) {
        let mut picked = picked.into_iter();
        let mut accelerators = Vec::new();
        for (node, count) in parts {
            for accel in picked.by_ref().take(*count as usize) {
                let capability = self.fresh_id();
                let current = self.device_mut(&accel).and_then(|d| d.holder.clone());
                match current {
                    Some(owned) if owned.job == job && owned.preallocated => {
                        if owned.loan.is_some() {
                            self.preempt(&accel, now);
                        }
                        let holder = self.holder_mut(&accel).expect("held");
                        (holder.node, holder.set, holder.capability) = (node.clone(), Some(id), capability);
                    }
                    Some(spare) if spare.spare() => {
                        let loan = Loan { job: job.to_string(), node: node.clone(), set: id, capability };
                        self.holder_mut(&accel).expect("held").loan = Some(loan);
                    }
                    _ => self.hold(&accel, Holder::using(job, node, Some(id), capability)),
                }
                accelerators.push(accel);
            }
        }
        let set = DynSet { id, job: job.to_string(), session: session.to_string(), accelerators, collective, key };
        self.sets.insert(id, set);
        self.dirty.insert(Key::Set(id));
    }

    /// Takes a lent unit back for its owner: the borrower's set loses it, its program is told,
    /// and its capability is revoked once the grace is over.
    fn preempt(&mut self, accel: &str, now: u64) {
        let Some(loan) = self.holder_mut(accel).and_then(|h| h.loan.take()) else { return };
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        let revoke_at = now.saturating_add(self.preemption_grace_s);
        self.delayed.insert((revoke_at, host.clone(), loan.capability));
        self.dirty.insert(Key::Delayed(revoke_at, host, loan.capability));
        if let Some(set) = self.sets.get_mut(&loan.set) {
            set.accelerators.retain(|a| a != accel);
            let notice = Preemption { set: loan.set, accelerators: vec![accel.to_string()], revoke_at };
            self.notices.entry(set.session.clone()).or_default().push(notice);
            self.dirty.insert(Key::Set(loan.set));
        }
    }

    /// A borrower gives a lent unit back: it is its owner's spare again.
    pub(super) fn return_loan(&mut self, accel: &str) {
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        if let Some(loan) = self.holder_mut(accel).and_then(|h| h.loan.take()) {
            self.revoke(&host, loan.capability);
        }
    }

    /// Gives back an accelerator of set `set`: a loan to its owner, a pre-allocated unit to its
    /// job's spares, anything else to the pool.
    fn release_from_set(&mut self, accel: &str, set: u64) {
        let Some(holder) = self.device_mut(accel).and_then(|d| d.holder.clone()) else { return };
        let host = accel.rsplit_once('/').map(|(h, _)| h.to_string()).unwrap_or_default();
        if holder.loan.as_ref().is_some_and(|l| l.set == set) {
            self.return_loan(accel);
        } else if holder.set == Some(set) && holder.preallocated {
            self.revoke(&host, holder.capability);
            let spare = self.holder_mut(accel).expect("held");
            (spare.set, spare.capability) = (None, 0);
        } else if holder.set == Some(set) {
            self.release(accel);
        }
    }

    /// Revocations of preempted loans whose grace is over, now sent.
    pub fn revoke_due(&mut self, now: u64) {
        let due: Vec<(u64, String, u64)> = self.delayed.iter().take_while(|(at, _, _)| *at <= now).cloned().collect();
        for (at, host, capability) in due {
            self.delayed.remove(&(at, host.clone(), capability));
            self.dirty.insert(Key::Delayed(at, host.clone(), capability));
            self.revoke(&host, capability);
        }
    }

    /// Preemptions (and reclaims) this session's program has not been told of on connection
    /// `link`, told now (at Unix time `now`): the new ones, and, on a connection other than the
    /// one that last carried them, those told before whose deadline has not passed. An answer
    /// lost with its connection is so told again; a program may hear a notice twice.
    pub fn take_notices(&mut self, token_hash: &str, link: u64, now: u64) -> Outcome<Vec<Preemption>> {
        self.session(token_hash)?;
        let fresh = self.notices.remove(token_hash).unwrap_or_default();
        let told = self.told.entry(token_hash.to_string()).or_insert_with(|| Told { link, notices: Vec::new() });
        told.notices.retain(|n| n.revoke_at > now);
        let mut out = if told.link == link { Vec::new() } else { told.notices.clone() };
        told.link = link;
        told.notices.extend(fresh.iter().cloned());
        out.extend(fresh);
        Ok(out)
    }

    /// A session is gone: so are its notices, told or not.
    pub(super) fn forget_notices(&mut self, token_hash: &str) {
        self.notices.remove(token_hash);
        self.told.remove(token_hash);
    }

    pub(super) fn drop_pending(&mut self, which: impl Fn(&PendingGet) -> bool) {
        let gone: Vec<u64> = self.pending.values().filter(|g| which(g)).map(|g| g.id).collect();
        for id in gone {
            self.pending.remove(&id);
            self.dirty.insert(Key::Pending(id));
            self.forget_elastic_get(id);
        }
    }

    /// A waiting request is gone (granted, told its rejection, withdrawn): so is its notice.
    pub(super) fn forget_elastic_get(&mut self, id: u64) {
        if self.elastic_gets.remove(&id).is_some() {
            self.dirty.insert(Key::ElasticGet(id));
        }
    }

    /// The accelerators of a set for `node` (all nodes when `None`), with their holders.
    pub fn set_members(&self, set: u64, node: Option<&str>) -> Vec<(String, Holder)> {
        let Some(set) = self.sets.get(&set) else { return Vec::new() };
        self.held_by(&set.job)
            .into_iter()
            .filter(|(a, h)| h.set == Some(set.id) && set.accelerators.contains(a) && node.is_none_or(|n| h.node == n))
            .collect()
    }

    /// Checks that a session's job owns `set`.
    pub fn own_set(&self, token_hash: &str, set: u64) -> Outcome<&DynSet> {
        let session = self.session(token_hash)?;
        self.sets
            .get(&set)
            .filter(|s| s.job == session.job)
            .ok_or_else(|| err(ArmErrorKind::NotFound, format!("no set {set} in this job")))
    }

    /// `AC_Free`: releases a set or some of its accelerators.
    pub fn free(&mut self, token_hash: &str, set: u64, only: Option<&[String]>, now: u64) -> Outcome<()> {
        let owned = self.own_set(token_hash, set)?.clone();
        let releasing: Vec<String> = match only {
            None => owned.accelerators.clone(),
            Some(_) if owned.collective => {
                return Err(err(ArmErrorKind::Invalid, "a collective set is released only as a whole"));
            }
            Some(ids) => {
                // One the job no longer holds was given back already (by a free whose answer
                // was lost, then asked again) or revoked: done. One it holds elsewhere is not
                // this set's to free.
                let held = self.held_by(&owned.job);
                let elsewhere = |id: &&String| !owned.accelerators.contains(id) && held.iter().any(|(a, _)| a == *id);
                if let Some(stranger) = ids.iter().find(elsewhere) {
                    return Err(err(ArmErrorKind::NotFound, format!("`{stranger}` is not in set {set}")));
                }
                ids.iter().filter(|id| owned.accelerators.contains(id)).cloned().collect()
            }
        };
        for accel in &releasing {
            self.release_from_set(accel, set);
        }
        let set_entry = self.sets.get_mut(&set).expect("owned");
        set_entry.accelerators.retain(|a| !releasing.contains(a));
        if set_entry.accelerators.is_empty() {
            self.sets.remove(&set);
        }
        self.dirty.insert(Key::Set(set));
        self.schedule(now);
        Ok(())
    }

    /// `AC_Finalize` (or a lease that ran out): releases the session's dynamic sets, ends an
    /// ad-hoc job with its last session, and forgets the session.
    pub fn finalize(&mut self, token_hash: &str, now: u64) -> Outcome<()> {
        let session = self.session(token_hash)?.clone();
        let sets: Vec<u64> = self.sets.values().filter(|s| s.session == token_hash).map(|s| s.id).collect();
        for set in sets {
            self.free(token_hash, set, None, now)?;
        }
        self.drop_pending(|g| g.session == token_hash);
        self.forget_notices(token_hash);
        self.sessions.remove(token_hash);
        self.dirty.insert(Key::Session(token_hash.to_string()));
        let last = !self.sessions.values().any(|s| s.job == session.job);
        if last && self.jobs.get(&session.job).is_some_and(|j| j.ad_hoc && j.state != JobState::Ended) {
            self.end_job(&session.job, now)?;
        }
        Ok(())
    }
}
