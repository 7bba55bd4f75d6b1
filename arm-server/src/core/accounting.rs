//! Accounting: which job held which accelerator from when to when, static and dynamic apart.
//!
//! Plain functions over the core's state, time (Unix milliseconds) an argument. The core keeps
//! only the open intervals ([`Core::usage`], one per held accelerator, stored); a closed one
//! leaves the core as a [`Key::UsageRecord`], which the server appends to the store in the same
//! transaction as the release that closed it. An interval thus opens in the commit of its grant
//! and closes in the commit of its release: a crash can lose neither, nor count one twice.
//!
//! Intervals follow the holdings rather than the calls that change them: after every change
//! [`Core::account`] compares the holders of the hosts the change touched with the open
//! intervals of their accelerators, so no path that grants or releases (static starts,
//! `AC_Get`, loans, preemption, walltimes, Slurm's epilog, a host removed) can forget to
//! account.

use std::collections::BTreeMap;

use ac_proto::arm::{UsageBy, UsageRow};

use super::{Core, Key};
use crate::model::{Usage, UsageKind};

/// What makes a holding the same holding: another job, kind or capability is another one.
type Holding = (String, UsageKind, u64);

/// The part of `[start, end)` inside `[since, until)`, in milliseconds.
pub fn clip(start: u64, end: u64, since: u64, until: u64) -> u64 {
    end.min(until).saturating_sub(start.max(since))
}

impl Core {
    /// Brings the open intervals of the hosts changed since the last [`Core::take_dirty`] in
    /// step with their holders, at `now_ms`.
    pub fn account(&mut self, now_ms: u64) {
        let hosts: Vec<String> =
            self.dirty.iter().filter_map(|k| if let Key::Host(h) = k { Some(h.clone()) } else { None }).collect();
        for host in hosts {
            self.account_host(&host, now_ms);
        }
    }

    /// The same for every host and every open interval: after loading the store (a store from
    /// before accounting has holders without intervals; they open now).
    pub fn account_all(&mut self, now_ms: u64) {
        let mut hosts: Vec<String> = self.hosts.keys().cloned().collect();
        // Intervals of hosts no longer registered close too.
        hosts.extend(self.usage.keys().filter_map(|a| Some(a.rsplit_once('/')?.0.to_string())));
        hosts.sort();
        hosts.dedup();
        for host in hosts {
            self.account_host(&host, now_ms);
        }
    }

    /// The holdings of `host`'s accelerators now, by accelerator id (spare pre-allocated units
    /// are in nobody's use and count for nobody).
    fn holdings(&self, host: &str) -> BTreeMap<String, Holding> {
        let Some(h) = self.hosts.get(host) else { return BTreeMap::new() };
        h.devices
            .iter()
            .filter_map(|d| {
                let user = d.holder.as_ref()?.user()?;
                let kind = if user.set.is_some() { UsageKind::Dynamic } else { UsageKind::Static };
                Some((h.accelerator_id(d.index), (user.job, kind, user.capability)))
            })
            .collect()
    }

    fn account_host(&mut self, host: &str, now_ms: u64) {
        let mut now = self.holdings(host);
        // Accelerator ids are `host/index` and host names hold no `/`: `host/`..`host0` is
        // exactly this host's accelerators.
        let open: Vec<String> =
            self.usage.range(format!("{host}/")..format!("{host}0")).map(|(a, _)| a.clone()).collect();
        for accelerator in open {
            let same = self.usage.get(&accelerator).is_some_and(|u| {
                now.get(&accelerator)
                    .is_some_and(|(job, kind, cap)| *job == u.job && *kind == u.kind && *cap == u.capability)
            });
            if same {
                now.remove(&accelerator);
            } else {
                self.close(&accelerator, now_ms);
            }
        }
        for (accelerator, (job, kind, capability)) in now {
            let (user, group) = self
                .jobs
                .get(&job)
                .map_or_else(|| (String::new(), String::new()), |j| (j.user.clone(), j.group.clone()));
            let usage = Usage {
                job,
                user,
                group,
                kind,
                accelerator: accelerator.clone(),
                capability,
                start_ms: now_ms,
                end_ms: None,
            };
            self.usage.insert(accelerator.clone(), usage);
            self.dirty.insert(Key::OpenUsage(accelerator));
        }
    }

    /// Ends the open interval of `accelerator` at `now_ms`; a non-empty one becomes a record.
    fn close(&mut self, accelerator: &str, now_ms: u64) {
        let Some(mut usage) = self.usage.remove(accelerator) else { return };
        self.dirty.insert(Key::OpenUsage(accelerator.to_string()));
        // A wall clock stepped back must not make a negative interval.
        let end = now_ms.max(usage.start_ms);
        if end > usage.start_ms {
            usage.end_ms = Some(end);
            self.dirty.insert(Key::UsageRecord(usage));
        }
    }
}

/// Adds up `usages` (closed records and open intervals, an open one counting up to `now_ms`)
/// clipped to `[since, until)`, one row per user, group or job, sorted by key. Rows with no time
/// in the window are left out.
pub fn summarize<'a>(
    usages: impl IntoIterator<Item = &'a Usage>,
    by: UsageBy,
    since: u64,
    until: u64,
    now_ms: u64,
) -> Vec<UsageRow> {
    let mut rows: BTreeMap<String, UsageRow> = BTreeMap::new();
    for u in usages {
        let ms = clip(u.start_ms, u.end_ms.unwrap_or(now_ms), since, until);
        if ms == 0 {
            continue;
        }
        let key = match by {
            UsageBy::User => &u.user,
            UsageBy::Group => &u.group,
            UsageBy::Job => &u.job,
        };
        let row = rows.entry(key.clone()).or_insert_with(|| UsageRow {
            key: key.clone(),
            user: Some(u.user.clone()),
            group: Some(u.group.clone()),
            static_ms: 0,
            dynamic_ms: 0,
        });
        if row.user.as_ref() != Some(&u.user) {
            row.user = None;
        }
        if row.group.as_ref() != Some(&u.group) {
            row.group = None;
        }
        match u.kind {
            UsageKind::Static => row.static_ms += ms,
            UsageKind::Dynamic => row.dynamic_ms += ms,
        }
    }
    rows.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tests::{ask, core, job};
    use crate::core::GetOutcome;
    use ac_proto::arm::JobAuth;

    fn usage(job: &str, user: &str, group: &str, kind: UsageKind, start_ms: u64, end_ms: Option<u64>) -> Usage {
        Usage {
            job: job.into(),
            user: user.into(),
            group: group.into(),
            kind,
            accelerator: "h/0".into(),
            capability: 1,
            start_ms,
            end_ms,
        }
    }

    #[test]
    fn clipping_keeps_only_the_window() {
        assert_eq!(clip(10, 20, 0, 100), 10, "inside");
        assert_eq!(clip(10, 20, 15, 100), 5, "cut at the start");
        assert_eq!(clip(10, 20, 0, 12), 2, "cut at the end");
        assert_eq!(clip(10, 20, 12, 18), 6, "cut at both");
        assert_eq!(clip(10, 20, 20, 30), 0, "after: the end is exclusive");
        assert_eq!(clip(10, 20, 0, 10), 0, "before: the window's end is exclusive");
        assert_eq!(clip(20, 10, 0, 100), 0, "never negative");
    }

    #[test]
    fn rows_add_up_by_key_with_static_and_dynamic_apart_and_open_ones_up_to_now() {
        let records = [
            usage("j1", "ann", "phys", UsageKind::Static, 1_000, Some(5_000)),
            usage("j1", "ann", "phys", UsageKind::Dynamic, 2_000, Some(3_000)),
            usage("j2", "bob", "phys", UsageKind::Dynamic, 4_000, None),
            usage("j3", "ann", "chem", UsageKind::Static, 9_000, Some(9_500)),
        ];
        let by_job = summarize(&records, UsageBy::Job, 0, 10_000, 6_000);
        let j: Vec<_> = by_job.iter().map(|r| (r.key.as_str(), r.static_ms, r.dynamic_ms)).collect();
        assert_eq!(j, [("j1", 4_000, 1_000), ("j2", 0, 2_000), ("j3", 500, 0)]);
        let by_group = summarize(&records, UsageBy::Group, 0, 10_000, 6_000);
        assert_eq!(by_group[1].key, "phys");
        assert_eq!((by_group[1].static_ms, by_group[1].dynamic_ms), (4_000, 3_000));
        assert_eq!(by_group[1].user, None, "ann and bob");
        assert_eq!(by_group[1].group.as_deref(), Some("phys"));
        let by_user = summarize(&records, UsageBy::User, 2_500, 4_500, 6_000);
        let u: Vec<_> = by_user.iter().map(|r| (r.key.as_str(), r.static_ms, r.dynamic_ms)).collect();
        assert_eq!(u, [("ann", 2_000, 500), ("bob", 0, 500)], "clipped to [2.5 s, 4.5 s)");
        assert_eq!(by_user[0].group, Some("phys".into()));
    }

    /// The records a change closed, as the server would append them.
    fn closed(core: &mut Core) -> Vec<Usage> {
        core.take_dirty().into_iter().filter_map(|k| if let Key::UsageRecord(u) = k { Some(u) } else { None }).collect()
    }

    #[test]
    fn intervals_open_with_grants_and_close_with_releases_exactly_once() {
        let mut core = core(3);
        core.submit(job("j", &["n1"], 1), 1).unwrap();
        core.account(1_000);
        let dirty = core.take_dirty();
        assert_eq!(core.usage.len(), 1);
        let (accel, open) = core.usage.iter().next().unwrap();
        assert!(dirty.contains(&Key::OpenUsage(accel.clone())), "the open interval is stored with the grant");
        assert_eq!(
            (open.kind, open.start_ms, open.user.as_str(), open.group.as_str()),
            (UsageKind::Static, 1_000, "u", "g")
        );

        let auth = JobAuth::Credential { job: "j".into(), secret: "secret".into() };
        core.open_session("t".into(), &auth, "n1", 2).unwrap();
        let GetOutcome::Granted(set) = core.get("t", &[], false, &ask(2, 2, "k"), 2).unwrap() else { panic!() };
        core.account(2_000);
        assert!(closed(&mut core).is_empty());
        assert_eq!(core.usage.values().filter(|u| u.kind == UsageKind::Dynamic).count(), 2);

        core.free("t", set, None, 3).unwrap();
        core.account(3_500);
        let records = closed(&mut core);
        assert_eq!(records.len(), 2);
        assert!(records.iter().all(|r| r.kind == UsageKind::Dynamic && r.start_ms == 2_000 && r.end_ms == Some(3_500)));

        // Nothing changed: nothing closes or opens, however often it is asked (a restart).
        core.account_all(4_000);
        assert!(core.take_dirty().is_empty());

        core.end_job("j", 5).unwrap();
        core.account(5_000);
        let records = closed(&mut core);
        assert_eq!(records.len(), 1);
        assert_eq!((records[0].kind, records[0].start_ms, records[0].end_ms), (UsageKind::Static, 1_000, Some(5_000)));
        assert!(core.usage.is_empty());
    }

    #[test]
    fn holders_without_intervals_open_at_recovery_and_intervals_without_holders_close_there() {
        let mut core = core(2);
        core.submit(job("j", &["n1"], 1), 1).unwrap();
        core.take_dirty();
        // As a store written before accounting loads: a holder, no interval.
        assert!(core.usage.is_empty());
        core.account_all(7_000);
        assert_eq!(core.usage.values().map(|u| u.start_ms).collect::<Vec<_>>(), [7_000]);
        // An interval whose holding is gone (its host removed while the manager was down).
        let mut orphan = core.usage.values().next().unwrap().clone();
        orphan.accelerator = "gone/0".into();
        core.usage.insert("gone/0".into(), orphan);
        core.take_dirty();
        core.account_all(9_000);
        let records = closed(&mut core);
        assert_eq!(records.len(), 1);
        assert_eq!((records[0].accelerator.as_str(), records[0].end_ms), ("gone/0", Some(9_000)));
        // An interval never counts negative time, even when the clock stepped back.
        core.end_job("j", 10).unwrap();
        core.account(6_000);
        assert!(closed(&mut core).is_empty(), "an empty interval is no record");
        assert!(core.usage.is_empty());
    }
}
