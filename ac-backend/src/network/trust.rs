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
//! Revoked capabilities are kept on disk (`revoked` in the state directory, one `id expires` per
//! line) until they expire, so that a backend restarted by a crash still refuses them. A
//! revocation is acknowledged to the manager only once it is on disk. The file is a log:
//! revocations are appended (one sync per batch, however many revocations the manager has
//! sent), and it is rewritten with only the live ones once most of its lines are expired, so
//! that a revocation costs the same however many came before.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use ac_proto::backend::register_message;
use ac_proto::capability::{self, unix_now, Grant};

/// The registered manager.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manager {
    public_key: [u8; 32],
    host: String,
}

/// Trust state of one backend.
#[derive(Debug)]
pub struct Trust {
    pinned: Option<[u8; 32]>,
    /// Whether sessions are served before a manager registers this backend.
    open_until_registered: bool,
    file: PathBuf,
    manager: Mutex<Option<Manager>>,
    revoked: Mutex<Revoked>,
    revoked_file: PathBuf,
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

/// Parses a 32-byte key written as 64 hex digits.
pub fn parse_key(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Writes a key as hex.
pub fn key_hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

impl Trust {
    /// Loads the remembered manager, if any, for a backend that is open until registered.
    pub fn load(state_dir: &std::path::Path, pinned: Option<[u8; 32]>) -> Self {
        Self::load_closed(state_dir, pinned, false)
    }

    /// Loads the remembered manager, if any; `closed`: nobody is served until the pinned manager
    /// registers this backend.
    pub fn load_closed(state_dir: &std::path::Path, pinned: Option<[u8; 32]>, closed: bool) -> Self {
        let file = state_dir.join("arm.pub");
        let manager = std::fs::read_to_string(&file).ok().and_then(|text| {
            let (key, host) = text.trim().split_once(' ')?;
            Some(Manager { public_key: parse_key(key)?, host: host.to_string() })
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
        // A remembered manager that is not the pinned one is forgotten: the admin named another.
        let manager = manager.filter(|m| pinned.is_none_or(|key| key == m.public_key));
        Self {
            pinned,
            open_until_registered: !closed,
            file,
            manager: Mutex::new(manager),
            revoked: Mutex::new(revoked),
            revoked_file,
        }
    }

    /// Whether sessions need capabilities.
    pub fn registered(&self) -> bool {
        self.manager.lock().expect("trust poisoned").is_some()
    }

    /// Checks a registration and remembers the manager.
    pub fn register(&self, public_key: [u8; 32], host: &str, time: u64, proof: &[u8]) -> Result<(), String> {
        if !capability::verify_signature(&public_key, &register_message(host, time), proof) {
            return Err("registration proof does not verify".into());
        }
        if unix_now().abs_diff(time) > 300 {
            return Err("registration proof is more than 5 minutes old".into());
        }
        match self.pinned {
            Some(pinned) if pinned != public_key => {
                return Err("this backend trusts another resource manager (arm_public_key)".into())
            }
            None if !self.open_until_registered => {
                return Err("this backend trusts only the resource manager named by arm_public_key, and none is \
                            named (open_until_registered = false): set arm_public_key to what `armctl manager-key` \
                            prints"
                    .into())
            }
            _ => {}
        }
        let mut manager = self.manager.lock().expect("trust poisoned");
        if let Some(current) = manager.as_ref() {
            if current.public_key != public_key {
                return Err(format!(
                    "this backend is registered to another resource manager; remove {} to reset",
                    self.file.display()
                ));
            }
        }
        let text = format!("{} {host}\n", key_hex(&public_key));
        std::fs::write(&self.file, text).map_err(|e| format!("cannot remember the manager: {e}"))?;
        *manager = Some(Manager { public_key, host: host.to_string() });
        Ok(())
    }

    /// Checks the capability presented by a new session on `device`; `Ok(None)` when none is
    /// needed.
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
        let grant = capability::verify(&manager.public_key, capability, &manager.host, unix_now())?;
        if self.revoked.lock().expect("trust poisoned").live.contains_key(&grant.id) {
            return Err("capability was revoked".into());
        }
        if grant.device != device {
            return Err(format!("capability is for device {}, not device {device}", grant.device));
        }
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

/// Appends `bytes` to the existing file `path`, synced.
fn append_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_data()
}

/// Replaces `path` with `bytes` so that a crash leaves the old or the new contents, synced.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
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

    fn registration(key: &ac_proto::capability::Signer, host: &str) -> ([u8; 32], u64, Vec<u8>) {
        let time = unix_now();
        (key.public_key(), time, key.sign(&register_message(host, time)))
    }

    #[test]
    fn a_closed_backend_serves_nobody_until_the_pinned_manager_registers_it() {
        let dir = state_dir("closed");
        let (ours, theirs) = (signer(), signer());
        let trust = Trust::load_closed(&dir, Some(ours.public_key()), true);
        let refused = trust.admit(&[], 0).unwrap_err();
        assert!(refused.contains("serves nobody until"), "{refused}");
        let (key, time, proof) = registration(&theirs, "h");
        assert!(trust.register(key, "h", time, &proof).unwrap_err().contains("another resource manager"));
        assert!(trust.admit(&[], 0).is_err(), "another manager's attempt opened nothing");
        let (key, time, proof) = registration(&ours, "h");
        trust.register(key, "h", time, &proof).unwrap();
        assert!(trust.admit(&[], 0).unwrap_err().contains("capability from the resource manager is required"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_closed_backend_without_a_pinned_key_accepts_no_manager() {
        let dir = state_dir("unpinned");
        let trust = Trust::load_closed(&dir, None, true);
        let (key, time, proof) = registration(&signer(), "h");
        let refused = trust.register(key, "h", time, &proof).unwrap_err();
        assert!(refused.contains("armctl manager-key"), "{refused}");
        assert!(trust.admit(&[], 0).is_err());
        // Open (the embedded default): served until registered, the first manager trusted.
        let open = Trust::load(&dir, None);
        assert_eq!(open.admit(&[], 0), Ok(None));
        open.register(key, "h", time, &proof).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn signer() -> ac_proto::capability::Signer {
        ac_proto::capability::Signer::from_pkcs8(&ac_proto::capability::Signer::generate_pkcs8().unwrap()).unwrap()
    }

    #[test]
    fn revocations_are_appended_survive_a_restart_and_a_torn_line_spoils_nothing_else() {
        let dir = state_dir("append");
        let later = unix_now() + 3600;
        let trust = Trust::load(&dir, None);
        trust.revoke(&[(1, later)]).unwrap();
        trust.revoke(&[(2, later), (3, later), (4, unix_now() - 1)]).unwrap();
        // A crash in the middle of an append: part of a record, no newline.
        let file = dir.join("revoked");
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("\n5 17");
        std::fs::write(&file, text).unwrap();
        let restarted = Trust::load(&dir, None);
        assert_eq!(live(&restarted), [1, 2, 3], "the expired and the torn ones are not in force");
        restarted.revoke(&[(6, later)]).unwrap();
        assert_eq!(live(&Trust::load(&dir, None)), [1, 2, 3, 6], "the record after the torn one counts");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_mostly_of_expired_revocations_is_rewritten_with_the_live_ones() {
        let dir = state_dir("compact");
        let trust = Trust::load(&dir, None);
        let later = unix_now() + 3600;
        let expired: Vec<(u64, u64)> = (100..100 + 2 * COMPACT_SLACK as u64).map(|id| (id, 1)).collect();
        trust.revoke(&[(1, later)]).unwrap();
        for chunk in expired.chunks(512) {
            trust.revoke(chunk).unwrap();
        }
        trust.revoke(&[(2, later)]).unwrap();
        let lines = std::fs::read_to_string(dir.join("revoked")).unwrap().lines().filter(|l| !l.is_empty()).count();
        assert!(lines <= COMPACT_SLACK + 2, "{lines} lines: the expired ones were dropped");
        assert_eq!(live(&Trust::load(&dir, None)), [1, 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
