//! Trust in the resource manager: whose capabilities this backend accepts.
//!
//! A backend nobody registered serves anyone who trusts its CA (standalone use), unless it is
//! closed (`open_until_registered = false`, the packaged default): then it serves nobody until
//! the manager whose key is pinned registers it, and no unpinned manager may. Once a resource
//! manager registers it, with a proof signed by the manager's key, every new session must
//! present a capability signed by that key, for this host, unexpired and not revoked. The key is
//! either pinned in the configuration or remembered from the first registration (`arm.pub` in the
//! state directory); a manager with another key is refused.
//!
//! A replicated manager is a set of keys, one per replica: a replica registers with its own key
//! and names the set, and capabilities signed by any of them are accepted. The set is pinned
//! (several keys in `arm_public_key`) or remembered from the first registration; a replica whose
//! key is trusted may name a new set (a member replaced), anyone else is refused.
//!
//! Fencing: capability ids grow with every grant, and a replicated manager's leader starts its
//! term's ids above every earlier term's. For each device the backend keeps the highest id a
//! session was opened with and refuses a lower one: a capability for an earlier holder, or one a
//! deposed leader signed for a grant it never committed, cannot open a session against a newer
//! grant. The fences are kept on disk (`fencing.rs`), so that a restart does not open that
//! window again.
//!
//! Revoked capabilities are kept on disk (`revoked` in the state directory, one `id expires` per
//! line) until they expire, so that a backend restarted by a crash still refuses them. A
//! revocation is acknowledged to the manager only once it is on disk. The file is a log:
//! revocations are appended (one sync per batch, however many revocations the manager has
//! sent), and it is rewritten with only the live ones once most of its lines are expired, so
//! that a revocation costs the same however many came before.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use ac_proto::backend::{register_cluster_message, register_message};
use ac_proto::capability::{self, unix_now, Grant};

use super::durable::{append_durably, write_durably};
use super::fencing::Fencing;

pub use ac_proto::capability::{parse_public_key as parse_key, public_key_hex as key_hex};

/// The registered manager: its key, or each of its replicas' keys.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manager {
    keys: Vec<[u8; 32]>,
    host: String,
}

/// A manager's registration as its hello carries it.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    /// The key that signed the proof.
    pub public_key: [u8; 32],
    /// A replicated manager's keys (with `public_key`); empty for a single manager.
    pub cluster: &'a [[u8; 32]],
    /// The name it knows this backend by.
    pub host: &'a str,
    /// When it was made (Unix seconds).
    pub time: u64,
    /// The signature over the registration message.
    pub proof: &'a [u8],
}

impl Registration<'_> {
    /// The keys the manager signs capabilities with.
    fn keys(&self) -> Vec<[u8; 32]> {
        if self.cluster.is_empty() {
            vec![self.public_key]
        } else {
            self.cluster.to_vec()
        }
    }

    /// What the proof signs.
    fn message(&self) -> Vec<u8> {
        if self.cluster.is_empty() {
            register_message(self.host, self.time)
        } else {
            register_cluster_message(self.host, self.time, self.cluster)
        }
    }
}

/// Trust state of one backend.
#[derive(Debug)]
pub struct Trust {
    /// The keys the configuration names (`arm_public_key`); empty: none.
    pinned: Vec<[u8; 32]>,
    /// Whether sessions are served before a manager registers this backend.
    open_until_registered: bool,
    file: PathBuf,
    manager: Mutex<Option<Manager>>,
    revoked: Mutex<Revoked>,
    revoked_file: PathBuf,
    /// Per device, the highest capability id a session was opened with, and its file.
    fencing: Mutex<Fencing>,
}

/// The revocations in force, and how many lines the file holds.
#[derive(Debug, Default)]
struct Revoked {
    /// Revoked capability id -> when it expires anyway.
    live: HashMap<u64, u64>,
    /// Lines in the file, live or not.
    lines: usize,
    /// When expired revocations were last forgotten (unix seconds).
    swept: u64,
}

/// Lines of expired revocations the file may carry beyond as many as are live.
const COMPACT_SLACK: usize = 4096;

/// Parses one or more keys, separated by commas or blanks (a replicated manager's).
pub fn parse_keys(text: &str) -> Option<Vec<[u8; 32]>> {
    let keys: Option<Vec<[u8; 32]>> =
        text.split(|c: char| c == ',' || c.is_whitespace()).filter(|k| !k.is_empty()).map(parse_key).collect();
    keys.filter(|k| !k.is_empty())
}

impl Trust {
    /// Loads the remembered manager, if any, for a backend that is open until registered.
    pub fn load(state_dir: &std::path::Path, pinned: Vec<[u8; 32]>) -> Self {
        Self::load_closed(state_dir, pinned, false)
    }

    /// Loads the remembered manager, if any; `closed`: nobody is served until the pinned manager
    /// registers this backend.
    pub fn load_closed(state_dir: &std::path::Path, pinned: Vec<[u8; 32]>, closed: bool) -> Self {
        let file = state_dir.join("arm.pub");
        let manager = std::fs::read_to_string(&file).ok().and_then(|text| {
            let (keys, host) = text.trim().split_once(' ')?;
            Some(Manager { keys: parse_keys(keys)?, host: host.to_string() })
        });
        let revoked_file = state_dir.join("revoked");
        let now = unix_now();
        let text = std::fs::read_to_string(&revoked_file).unwrap_or_default();
        // A line torn by a crash parses as nothing or as expired: it was never acknowledged, so
        // the manager sends it again.
        let live = text
            .lines()
            .filter_map(|line| {
                let (id, expires) = line.split_once(' ')?;
                Some((id.parse().ok()?, expires.parse().ok()?))
            })
            .filter(|(_, expires)| *expires > now)
            .collect();
        let revoked = Revoked { live, lines: text.lines().count(), swept: 0 };
        // Pinned keys are the ones trusted, whatever was remembered: the admin named them (a
        // replica added to the list is trusted at once, one taken off it no longer).
        let manager = match pinned.is_empty() {
            true => manager,
            false => manager.map(|m| Manager { keys: pinned.clone(), host: m.host }),
        };
        Self {
            pinned,
            open_until_registered: !closed,
            file,
            manager: Mutex::new(manager),
            revoked: Mutex::new(revoked),
            revoked_file,
            fencing: Mutex::new(Fencing::load(state_dir)),
        }
    }

    /// Whether sessions need capabilities.
    pub fn registered(&self) -> bool {
        self.manager.lock().expect("trust poisoned").is_some()
    }

    /// Checks a registration and remembers the manager (the keys it signs capabilities with).
    pub fn register(&self, registration: Registration<'_>) -> Result<(), String> {
        let Registration { public_key, cluster, host, time, proof } = registration;
        if !capability::verify_signature(&public_key, &registration.message(), proof) {
            return Err("registration proof does not verify".into());
        }
        if unix_now().abs_diff(time) > 300 {
            return Err("registration proof is more than 5 minutes old".into());
        }
        if !cluster.is_empty() && !cluster.contains(&public_key) {
            return Err("a replica registered without its own key in the set it names".into());
        }
        let mut keys = registration.keys();
        let pinned = !self.pinned.is_empty();
        if pinned {
            if !self.pinned.contains(&public_key) {
                return Err("this backend trusts another resource manager (arm_public_key)".into());
            }
            // The admin's word: the pinned keys, whatever set the manager names.
            keys = self.pinned.clone();
        } else if !self.open_until_registered {
            return Err("this backend trusts only the resource manager named by arm_public_key, and none is \
                        named (open_until_registered = false): set arm_public_key to what `armctl manager-key` \
                        prints"
                .into());
        }
        let mut manager = self.manager.lock().expect("trust poisoned");
        if let Some(current) = manager.as_ref() {
            if !pinned && !current.keys.contains(&public_key) {
                return Err(format!(
                    "this backend is registered to another resource manager; remove {} to reset",
                    self.file.display()
                ));
            }
        } else {
            // A first registration (or one after `arm.pub` was removed): the ids of the manager
            // fenced on before are not this one's.
            self.fencing
                .lock()
                .expect("trust poisoned")
                .reset()
                .map_err(|e| format!("cannot reset the fences: {e}"))?;
        }
        let written: Vec<String> = keys.iter().map(key_hex).collect();
        let text = format!("{} {host}\n", written.join(","));
        std::fs::write(&self.file, text).map_err(|e| format!("cannot remember the manager: {e}"))?;
        *manager = Some(Manager { keys, host: host.to_string() });
        Ok(())
    }

    /// Checks a capability for `device` (signed, for this host, unexpired, not revoked);
    /// `Ok(None)` when none is needed. A resumed session's: it was fenced when it opened.
    pub fn admit(&self, capability: &[u8], device: u32) -> Result<Option<Grant>, String> {
        let Some(manager) = self.manager.lock().expect("trust poisoned").clone() else {
            if self.open_until_registered {
                return Ok(None);
            }
            return Err("this backend serves nobody until its resource manager registers it \
                        (open_until_registered = false): ask the pool's admin"
                .into());
        };
        if capability.is_empty() {
            return Err("this backend is managed: a capability from the resource manager is required".into());
        }
        let grant = capability::verify(&manager.keys, capability, &manager.host, unix_now())?;
        if self.revoked.lock().expect("trust poisoned").live.contains_key(&grant.id) {
            return Err("capability was revoked".into());
        }
        if grant.device != device {
            return Err(format!("capability is for device {}, not device {device}", grant.device));
        }
        Ok(Some(grant))
    }

    /// Checks the capability a new session is opened with, as [`Trust::admit`], and fences: a
    /// capability older than the newest one a session on `device` was opened with is refused,
    /// and a newer one becomes the newest, on disk before this returns. Blocks on the disk.
    pub fn admit_new(&self, capability: &[u8], device: u32) -> Result<Option<Grant>, String> {
        let Some(grant) = self.admit(capability, device)? else { return Ok(None) };
        self.fencing.lock().expect("trust poisoned").admit(device, grant.id)?;
        Ok(Some(grant))
    }

    /// Refuses each capability of `revokes` (id, expiry) from now until it expires, and records
    /// that on disk first: `Ok` means a restart will still refuse them. Blocks on the disk.
    pub fn revoke(&self, revokes: &[(u64, u64)]) -> std::io::Result<()> {
        let mut revoked = self.revoked.lock().expect("trust poisoned");
        let now = unix_now();
        // At most once a second: a sweep walks every live revocation, and under churn batches
        // come hundreds of times a second (a fifth of a backend's CPU under `ac-bench --only load`).
        if now > revoked.swept {
            revoked.live.retain(|_, e| *e > now);
            revoked.swept = now;
        }
        revoked.live.extend(revokes.iter().copied().filter(|(_, expires)| *expires > now));
        let lines = revoked.lines + revokes.len();
        if lines > 2 * revoked.live.len() + COMPACT_SLACK || !self.revoked_file.exists() {
            let text: String = revoked.live.iter().map(|(id, expires)| format!("{id} {expires}\n")).collect();
            write_durably(&self.revoked_file, text.as_bytes())?;
            revoked.lines = revoked.live.len();
        } else {
            // Each record starts on a line of its own, so a torn one never spoils the next.
            let text: String = revokes.iter().map(|(id, expires)| format!("\n{id} {expires}")).collect();
            append_durably(&self.revoked_file, text.as_bytes())?;
            revoked.lines = lines;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ac-trust-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn live(trust: &Trust) -> Vec<u64> {
        let mut ids: Vec<u64> = trust.revoked.lock().unwrap().live.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// A single manager's registration of `host`, signed by `key`, as its proof.
    fn registration(key: &ac_proto::capability::Signer, host: &str) -> ([u8; 32], u64, Vec<u8>) {
        let time = unix_now();
        (key.public_key(), time, key.sign(&register_message(host, time)))
    }

    fn single<'a>((public_key, time, proof): &'a ([u8; 32], u64, Vec<u8>), host: &'a str) -> Registration<'a> {
        Registration { public_key: *public_key, cluster: &[], host, time: *time, proof }
    }

    #[test]
    fn a_closed_backend_serves_nobody_until_the_pinned_manager_registers_it() {
        let dir = state_dir("closed");
        let (ours, theirs) = (signer(), signer());
        let trust = Trust::load_closed(&dir, vec![ours.public_key()], true);
        let refused = trust.admit(&[], 0).unwrap_err();
        assert!(refused.contains("serves nobody until"), "{refused}");
        let theirs_registration = registration(&theirs, "h");
        assert!(trust.register(single(&theirs_registration, "h")).unwrap_err().contains("another resource manager"));
        assert!(trust.admit(&[], 0).is_err(), "another manager's attempt opened nothing");
        let ours_registration = registration(&ours, "h");
        trust.register(single(&ours_registration, "h")).unwrap();
        assert!(trust.admit(&[], 0).unwrap_err().contains("capability from the resource manager is required"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_closed_backend_without_a_pinned_key_accepts_no_manager() {
        let dir = state_dir("unpinned");
        let trust = Trust::load_closed(&dir, Vec::new(), true);
        let made = registration(&signer(), "h");
        let refused = trust.register(single(&made, "h")).unwrap_err();
        assert!(refused.contains("armctl manager-key"), "{refused}");
        assert!(trust.admit(&[], 0).is_err());
        // Open (the embedded default): served until registered, the first manager trusted.
        let open = Trust::load(&dir, Vec::new());
        assert_eq!(open.admit(&[], 0), Ok(None));
        open.register(single(&made, "h")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn signer() -> ac_proto::capability::Signer {
        ac_proto::capability::Signer::from_pkcs8(&ac_proto::capability::Signer::generate_pkcs8().unwrap()).unwrap()
    }

    fn capability(key: &ac_proto::capability::Signer, id: u64, device: u32) -> Vec<u8> {
        key.issue(&Grant { id, job: "j".into(), host: "h".into(), device, expires: unix_now() + 600 })
    }

    /// A replica's registration naming `cluster`.
    fn replica_registration(key: &ac_proto::capability::Signer, cluster: &[[u8; 32]]) -> (u64, Vec<u8>) {
        let time = unix_now();
        (time, key.sign(&register_cluster_message("h", time, cluster)))
    }

    #[test]
    fn a_replicated_manager_is_trusted_as_its_set_and_a_trusted_replica_may_name_a_new_one() {
        let dir = state_dir("cluster");
        let (a, b, c, d) = (signer(), signer(), signer(), signer());
        let set = [a.public_key(), b.public_key(), c.public_key()];
        let trust = Trust::load(&dir, Vec::new());
        let (time, proof) = replica_registration(&a, &set);
        trust
            .register(Registration { public_key: a.public_key(), cluster: &set, host: "h", time, proof: &proof })
            .unwrap();
        // Each replica signs with its own key: any of the set opens a session.
        assert!(trust.admit(&capability(&b, 1, 0), 0).unwrap().is_some());
        assert!(trust.admit(&capability(&d, 2, 0), 0).unwrap_err().contains("signature"));
        // The proof covers the set: swapped, it does not verify.
        let swapped = [a.public_key(), d.public_key()];
        let refused = trust.register(Registration {
            public_key: a.public_key(),
            cluster: &swapped,
            host: "h",
            time,
            proof: &proof,
        });
        assert!(refused.unwrap_err().contains("does not verify"));
        // A key outside the set cannot register, even naming itself with the others.
        let with_d = [b.public_key(), c.public_key(), d.public_key()];
        let (time, proof) = replica_registration(&d, &with_d);
        let refused = trust.register(Registration {
            public_key: d.public_key(),
            cluster: &with_d,
            host: "h",
            time,
            proof: &proof,
        });
        assert!(refused.unwrap_err().contains("another resource manager"));
        // A trusted replica replaces a member: the new set from now on, also after a restart.
        let (time, proof) = replica_registration(&b, &with_d);
        trust
            .register(Registration { public_key: b.public_key(), cluster: &with_d, host: "h", time, proof: &proof })
            .unwrap();
        let restarted = Trust::load(&dir, Vec::new());
        assert!(restarted.admit(&capability(&d, 3, 0), 0).unwrap().is_some());
        assert!(restarted.admit(&capability(&a, 4, 0), 0).unwrap_err().contains("signature"), "a was replaced");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pinned_keys_are_the_trusted_set_whatever_was_remembered() {
        let dir = state_dir("pinned-set");
        let (a, b, d) = (signer(), signer(), signer());
        let first = [a.public_key(), b.public_key()];
        let trust = Trust::load(&dir, first.to_vec());
        let (time, proof) = replica_registration(&a, &first);
        trust
            .register(Registration { public_key: a.public_key(), cluster: &first, host: "h", time, proof: &proof })
            .unwrap();
        // The admin pins a third replica's key: it registers and its capabilities open sessions,
        // though the remembered set lacks it.
        let grown = Trust::load(&dir, vec![a.public_key(), b.public_key(), d.public_key()]);
        assert!(grown.admit(&capability(&d, 1, 0), 0).unwrap().is_some());
        let named = [a.public_key(), b.public_key(), d.public_key()];
        let (time, proof) = replica_registration(&d, &named);
        grown
            .register(Registration { public_key: d.public_key(), cluster: &named, host: "h", time, proof: &proof })
            .unwrap();
        // Taken off the list, a key no longer opens anything, and the backend stays closed to
        // sessions without a capability.
        let shrunk = Trust::load(&dir, vec![b.public_key(), d.public_key()]);
        assert!(shrunk.admit(&capability(&a, 2, 0), 0).unwrap_err().contains("signature"));
        assert!(shrunk.admit(&[], 0).unwrap_err().contains("capability from the resource manager is required"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_capability_older_than_the_newest_a_device_was_opened_with_is_refused() {
        let dir = state_dir("fence");
        let key = signer();
        let trust = Trust::load(&dir, Vec::new());
        let made = registration(&key, "h");
        trust.register(single(&made, "h")).unwrap();
        assert!(trust.admit_new(&capability(&key, 5, 0), 0).unwrap().is_some());
        assert!(trust.admit_new(&capability(&key, 5, 0), 0).unwrap().is_some(), "the same grant again");
        assert!(trust.admit_new(&capability(&key, 7, 0), 0).unwrap().is_some());
        let refused = trust.admit_new(&capability(&key, 5, 0), 0).unwrap_err();
        assert!(refused.contains("superseded"), "{refused}");
        // Each device on its own; a resumed session (opened before) is not fenced again.
        assert!(trust.admit_new(&capability(&key, 6, 1), 1).unwrap().is_some());
        assert!(trust.admit(&capability(&key, 5, 0), 0).unwrap().is_some());
        // Restarted, the backend still fences.
        let restarted = Trust::load(&dir, Vec::new());
        assert!(restarted.admit_new(&capability(&key, 5, 0), 0).unwrap_err().contains("superseded"));
        assert!(restarted.admit_new(&capability(&key, 7, 0), 0).unwrap().is_some());
        // Registered afresh (`arm.pub` removed: a manager whose ids start again), it fences anew.
        std::fs::remove_file(dir.join("arm.pub")).unwrap();
        let reset = Trust::load(&dir, Vec::new());
        let again = registration(&key, "h");
        reset.register(single(&again, "h")).unwrap();
        assert!(reset.admit_new(&capability(&key, 1, 0), 0).unwrap().is_some());
        assert!(Trust::load(&dir, Vec::new()).admit_new(&capability(&key, 0, 0), 0).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn revocations_are_appended_survive_a_restart_and_a_torn_line_spoils_nothing_else() {
        let dir = state_dir("append");
        let later = unix_now() + 3600;
        let trust = Trust::load(&dir, Vec::new());
        trust.revoke(&[(1, later)]).unwrap();
        trust.revoke(&[(2, later), (3, later), (4, unix_now() - 1)]).unwrap();
        // A crash in the middle of an append: part of a record, no newline.
        let file = dir.join("revoked");
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("\n5 17");
        std::fs::write(&file, text).unwrap();
        let restarted = Trust::load(&dir, Vec::new());
        assert_eq!(live(&restarted), [1, 2, 3], "the expired and the torn ones are not in force");
        restarted.revoke(&[(6, later)]).unwrap();
        assert_eq!(live(&Trust::load(&dir, Vec::new())), [1, 2, 3, 6], "the record after the torn one counts");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_mostly_of_expired_revocations_is_rewritten_with_the_live_ones() {
        let dir = state_dir("compact");
        let trust = Trust::load(&dir, Vec::new());
        let later = unix_now() + 3600;
        let expired: Vec<(u64, u64)> = (100..100 + 2 * COMPACT_SLACK as u64).map(|id| (id, 1)).collect();
        trust.revoke(&[(1, later)]).unwrap();
        for chunk in expired.chunks(512) {
            trust.revoke(chunk).unwrap();
        }
        trust.revoke(&[(2, later)]).unwrap();
        let lines = std::fs::read_to_string(dir.join("revoked")).unwrap().lines().filter(|l| !l.is_empty()).count();
        assert!(lines <= COMPACT_SLACK + 2, "{lines} lines: the expired ones were dropped");
        assert_eq!(live(&Trust::load(&dir, Vec::new())), [1, 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
