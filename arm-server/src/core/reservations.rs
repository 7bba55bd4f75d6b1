//! Advance reservations: a window of accelerators for a user's jobs or one job, which the
//! scheduling core plans around (see `view.rs`).

use ac_proto::arm::ArmErrorKind;

use super::{err, Core, Key, Outcome};
use crate::model::{JobState, Reservation};

/// Whose jobs may use a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationOwner {
    /// Jobs of this user submitted into it.
    User(String),
    /// This queued job.
    Job(String),
}

impl Core {
    /// Reserves `count` accelerators from `start` for `duration` seconds, for `user`'s jobs or
    /// for one queued job; refused when it does not fit beside the running jobs and the other
    /// reservations. Returns its id.
    pub fn reserve(
        &mut self,
        count: u32,
        start: u64,
        duration: u64,
        owner: ReservationOwner,
        now: u64,
    ) -> Outcome<u64> {
        if count == 0 || duration == 0 {
            return Err(err(ArmErrorKind::Invalid, "a reservation needs at least one accelerator and one second"));
        }
        if start <= now {
            return Err(err(ArmErrorKind::Invalid, format!("the start ({start}) must be in the future (now {now})")));
        }
        let user = match &owner {
            ReservationOwner::User(user) => user.clone(),
            ReservationOwner::Job(id) => {
                let job = self.jobs.get(id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no job `{id}`")))?;
                if job.state != JobState::Queued || job.reservation.is_some() {
                    return Err(err(ArmErrorKind::Conflict, format!("job `{id}` is not queued outside a reservation")));
                }
                if job.nodes.len() as u32 * job.acpn > count {
                    return Err(err(ArmErrorKind::Invalid, format!("job `{id}` needs more than {count} accelerators")));
                }
                job.user.clone()
            }
        };
        self.view(now)
            .reservation_fits(count, start, duration, now)
            .map_err(|why| err(ArmErrorKind::Conflict, format!("the reservation does not fit: {why}")))?;
        let id = self.fresh_id();
        self.reservations.insert(id, Reservation { id, count, start, duration, user });
        self.dirty.insert(Key::Reservation(id));
        if let ReservationOwner::Job(job) = owner {
            self.jobs.get_mut(&job).expect("checked").reservation = Some(id);
            self.dirty.insert(Key::Job(job));
        }
        Ok(id)
    }

    /// Deletes a reservation: its queued jobs are planned as ordinary jobs again.
    pub fn unreserve(&mut self, id: u64, now: u64) -> Outcome<()> {
        self.reservations.remove(&id).ok_or_else(|| err(ArmErrorKind::NotFound, format!("no reservation {id}")))?;
        self.dirty.insert(Key::Reservation(id));
        self.leave_reservation(id);
        self.schedule(now);
        Ok(())
    }

    fn leave_reservation(&mut self, id: u64) {
        let inside: Vec<String> =
            self.jobs.values().filter(|j| j.reservation == Some(id)).map(|j| j.id.clone()).collect();
        for job in inside {
            self.jobs.get_mut(&job).expect("listed").reservation = None;
            self.dirty.insert(Key::Job(job));
        }
    }

    /// Forgets reservations that are over; returns whether there were any.
    pub fn purge_reservations(&mut self, now: u64) -> bool {
        let over: Vec<u64> = self.reservations.values().filter(|r| r.end() <= now).map(|r| r.id).collect();
        for &id in &over {
            self.reservations.remove(&id);
            self.dirty.insert(Key::Reservation(id));
            self.leave_reservation(id);
        }
        !over.is_empty()
    }

    /// A rejected `AC_Get`'s reason with the advance reservations that take accelerators out of
    /// the pool, now or later, by id: the scheduler's reason ("only 0 accelerator(s) idle", "it
    /// would collide with an advance reservation") does not say which, nor that one is why.
    pub(super) fn with_reservations(&self, reason: String, now: u64) -> String {
        let notes: Vec<String> = self
            .reservations
            .values()
            .filter(|r| r.end() > now)
            .map(|r| match r.start <= now {
                true => format!(
                    "advance reservation {} holds {} accelerator(s) for {}'s jobs until it ends in {} s",
                    r.id,
                    r.count,
                    r.user,
                    r.end() - now
                ),
                false => format!(
                    "advance reservation {} takes {} accelerator(s) for {}'s jobs in {} s, for {} s",
                    r.id,
                    r.count,
                    r.user,
                    r.start - now,
                    r.duration
                ),
            })
            .collect();
        match notes.is_empty() {
            true => reason,
            false => format!("{reason} ({})", notes.join("; ")),
        }
    }

    /// Whether a reservation that has begun still has a queued job to start.
    pub(super) fn reservation_due(&self, now: u64) -> bool {
        self.reservations
            .values()
            .filter(|r| r.start <= now)
            .any(|r| self.jobs.values().any(|j| j.reservation == Some(r.id) && j.state == JobState::Queued))
    }
}
