//! The core's state as the rest of the manager sees it: what the store holds ([`Durable`],
//! read back with [`Core::restore`]), read-only views of each part, and the few settings that
//! are never stored. Every change to the state goes through the core's own methods, which mark
//! what they touch dirty: nothing outside `core/` can write a field.

use std::collections::{BTreeMap, BTreeSet};

use super::Core;
use crate::model::{DynSet, Host, Job, Lease, PendingGet, Reservation, Session, Usage};

/// What the store holds of the core, as read back (or built for a store, by a benchmark).
#[derive(Debug, Default)]
pub struct Durable {
    /// Hosts by name.
    pub hosts: BTreeMap<String, Host>,
    /// Jobs by id.
    pub jobs: BTreeMap<String, Job>,
    /// Dynamic sets by id.
    pub sets: BTreeMap<u64, DynSet>,
    /// Sessions by token hash.
    pub sessions: BTreeMap<String, Session>,
    /// Waiting (or rejected, not yet told) dynamic requests by id.
    pub pending: BTreeMap<u64, PendingGet>,
    /// Advance reservations by id.
    pub reservations: BTreeMap<u64, Reservation>,
    /// Revocations due at the end of a preemption's grace: (when, host, capability).
    pub delayed: BTreeSet<(u64, String, u64)>,
    /// Revocations not yet acknowledged: (host, capability).
    pub unacked: BTreeSet<(String, u64)>,
    /// Open accounting intervals by accelerator.
    pub usage: BTreeMap<String, Usage>,
    /// Lent accelerators of elastic sets by accelerator.
    pub leases: BTreeMap<String, Lease>,
    /// The notice of each waiting elastic request.
    pub elastic_gets: BTreeMap<u64, u64>,
    /// The fairness ledger.
    pub ledger: arm_sched::Ledger,
    /// The id counter.
    pub next_id: u64,
}

impl Core {
    /// Every key the store holds of this core (closed accounting records aside: the core never
    /// keeps them): with [`crate::store::Store::snapshot`], the whole state as records.
    pub fn stored_keys(&self) -> BTreeSet<super::Key> {
        use super::Key;
        let mut keys = BTreeSet::from([Key::Ledger, Key::NextId]);
        keys.extend(self.hosts.keys().cloned().map(Key::Host));
        keys.extend(self.jobs.keys().cloned().map(Key::Job));
        keys.extend(self.sets.keys().copied().map(Key::Set));
        keys.extend(self.sessions.keys().cloned().map(Key::Session));
        keys.extend(self.pending.keys().copied().map(Key::Pending));
        keys.extend(self.reservations.keys().copied().map(Key::Reservation));
        keys.extend(self.delayed.iter().map(|(at, host, capability)| Key::Delayed(*at, host.clone(), *capability)));
        keys.extend(self.unacked.iter().map(|(host, capability)| Key::Revocation(host.clone(), *capability)));
        keys.extend(self.usage.keys().cloned().map(Key::OpenUsage));
        keys.extend(self.leases.keys().cloned().map(Key::Lease));
        keys.extend(self.elastic_gets.keys().copied().map(Key::ElasticGet));
        keys
    }

    /// The core the store's contents describe, with the default settings (see
    /// [`Core::configure`]) and nothing in memory only.
    pub fn restore(durable: Durable) -> Core {
        let Durable {
            hosts,
            jobs,
            sets,
            sessions,
            pending,
            reservations,
            delayed,
            unacked,
            usage,
            leases,
            elastic_gets,
            ledger,
            next_id,
        } = durable;
        Core {
            // Reclaims are planned in passes: the first tick runs one.
            wake_at: (!leases.is_empty()).then_some(0),
            hosts,
            jobs,
            sets,
            sessions,
            pending,
            reservations,
            delayed,
            unacked,
            usage,
            leases,
            elastic_gets,
            ledger,
            next_id,
            ..Core::default()
        }
    }

    /// Sets what is configured, never stored: the scheduler's settings and how long a
    /// preempted borrower keeps an accelerator.
    pub fn configure(&mut self, scheduling: arm_sched::Config, preemption_grace_s: u64) {
        self.scheduling = scheduling;
        self.preemption_grace_s = preemption_grace_s;
    }

    /// Takes over from `old` (the memory a rollback drops) what the store never holds: whether
    /// each host's link is up and what its backend serves, the settings, Slurm's queue, and
    /// notices not yet told. Ids stay above every id `old` gave out: a capability of a change
    /// rolled back (or of a replicated commit that timed out) may have been seen, and an id
    /// names one grant only (backends revoke and fence by id).
    pub fn keep_unstored(&mut self, old: &mut Core) {
        self.ids_above(old.next_id);
        for (name, host) in &mut self.hosts {
            if let Some(old) = old.hosts.get_mut(name) {
                host.up = old.up;
                host.mismatch = old.mismatch.take();
                host.states = std::mem::take(&mut old.states);
            }
        }
        self.scheduling = std::mem::take(&mut old.scheduling);
        self.preemption_grace_s = old.preemption_grace_s;
        self.batch_queue = std::mem::take(&mut old.batch_queue);
        self.batch_on_licenses = std::mem::take(&mut old.batch_on_licenses);
        self.held_for = std::mem::take(&mut old.held_for);
        self.notices = std::mem::take(&mut old.notices);
        self.told = std::mem::take(&mut old.told);
    }

    /// Replaces the batch system's pending jobs (as last read from it, in its priority order),
    /// and which of them wait for licenses alone. A pass follows if one of those could start
    /// on lent accelerators (it plans their reclaim).
    pub fn set_batch_queue(&mut self, queue: Vec<Job>, on_licenses: BTreeSet<String>) {
        let newly_waiting = on_licenses.iter().any(|id| !self.batch_on_licenses.contains(id));
        if newly_waiting && !self.leases.is_empty() {
            self.wake_at = Some(0);
        }
        self.batch_queue = queue;
        self.batch_on_licenses = on_licenses;
    }

    /// Free accelerators that may be granted now (up, served, healthy, not drained).
    pub fn usable_free(&self) -> usize {
        super::view::usable_free(&self.hosts)
    }

    /// Hosts by name.
    pub fn hosts(&self) -> &BTreeMap<String, Host> {
        &self.hosts
    }

    /// Jobs by id.
    pub fn jobs(&self) -> &BTreeMap<String, Job> {
        &self.jobs
    }

    /// Dynamic sets by id.
    pub fn sets(&self) -> &BTreeMap<u64, DynSet> {
        &self.sets
    }

    /// Sessions by token hash.
    pub fn sessions(&self) -> &BTreeMap<String, Session> {
        &self.sessions
    }

    /// Waiting (or rejected, not yet told) dynamic requests by id.
    pub fn pending(&self) -> &BTreeMap<u64, PendingGet> {
        &self.pending
    }

    /// Advance reservations not yet over, by id.
    pub fn reservations(&self) -> &BTreeMap<u64, Reservation> {
        &self.reservations
    }

    /// Revocations due at the end of a preemption's grace: (when, host, capability).
    pub fn delayed(&self) -> &BTreeSet<(u64, String, u64)> {
        &self.delayed
    }

    /// Revocations sent but not yet acknowledged: (host, capability).
    pub fn unacked(&self) -> &BTreeSet<(String, u64)> {
        &self.unacked
    }

    /// Open accounting intervals by accelerator.
    pub fn usage(&self) -> &BTreeMap<String, Usage> {
        &self.usage
    }

    /// Lent accelerators of elastic sets by accelerator.
    pub fn leases(&self) -> &BTreeMap<String, Lease> {
        &self.leases
    }

    /// The notice of each waiting elastic request.
    pub fn elastic_gets(&self) -> &BTreeMap<u64, u64> {
        &self.elastic_gets
    }

    /// The fairness ledger.
    pub fn ledger(&self) -> &arm_sched::Ledger {
        &self.ledger
    }

    /// The next id to hand out.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The batch system's pending jobs that want accelerators.
    pub fn batch_queue(&self) -> &[Job] {
        &self.batch_queue
    }

    /// Reclaims sent, and accelerators revoked past a reclaim's deadline, since the start.
    pub fn reclaim_counts(&self) -> (u64, u64) {
        self.reclaim_counts
    }

    /// Seconds usable accelerators were held by nobody, since the start.
    pub fn idle_seconds(&self) -> u64 {
        self.idle_seconds.0
    }
}
