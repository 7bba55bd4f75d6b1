//! Trust in the resource manager: whose capabilities this backend accepts.
//!
//! A backend nobody registered serves anyone who trusts its CA (standalone use). Once a resource
//! manager registers it, with a proof signed by the manager's key, every new session must
//! present a capability signed by that key, for this host, unexpired and not revoked. The key is
//! either pinned in the configuration or remembered from the first registration (`arm.pub` in the
//! state directory); a manager with another key is refused.
//!
//! Revoked capabilities are kept on disk (`revoked` in the state directory, one `id expires` per
//! line) until they expire, so that a backend restarted by a crash still refuses them. A
//! revocation is acknowledged to the manager only once it is on disk.

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
    file: PathBuf,
    manager: Mutex<Option<Manager>>,
    /// Revoked capability id -> when it expires anyway.
    revoked: Mutex<HashMap<u64, u64>>,
    revoked_file: PathBuf,
}

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
    /// Loads the remembered manager, if any.
    pub fn load(state_dir: &std::path::Path, pinned: Option<[u8; 32]>) -> Self {
        let file = state_dir.join("arm.pub");
        let manager = std::fs::read_to_string(&file).ok().and_then(|text| {
            let (key, host) = text.trim().split_once(' ')?;
            Some(Manager { public_key: parse_key(key)?, host: host.to_string() })
        });
        let revoked_file = state_dir.join("revoked");
        let now = unix_now();
        let revoked = std::fs::read_to_string(&revoked_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let (id, expires) = line.split_once(' ')?;
                Some((id.parse().ok()?, expires.parse().ok()?))
            })
            .filter(|(_, expires)| *expires > now)
            .collect();
        Self { pinned, file, manager: Mutex::new(manager), revoked: Mutex::new(revoked), revoked_file }
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
        if let Some(pinned) = self.pinned {
            if pinned != public_key {
                return Err("this backend trusts another resource manager (pinned key)".into());
            }
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
            return Ok(None);
        };
        if capability.is_empty() {
            return Err("this backend is managed: a capability from the resource manager is required".into());
        }
        let grant = capability::verify(&manager.public_key, capability, &manager.host, unix_now())?;
        if self.revoked.lock().expect("trust poisoned").contains_key(&grant.id) {
            return Err("capability was revoked".into());
        }
        if grant.device != device {
            return Err(format!("capability is for device {}, not device {device}", grant.device));
        }
        Ok(Some(grant))
    }

    /// Refuses a capability from now until it expires, and records that on disk first: `Ok`
    /// means a restart will still refuse it.
    pub fn revoke(&self, id: u64, expires: u64) -> std::io::Result<()> {
        let mut revoked = self.revoked.lock().expect("trust poisoned");
        let now = unix_now();
        revoked.retain(|_, e| *e > now);
        revoked.insert(id, expires);
        let text: String = revoked.iter().map(|(id, expires)| format!("{id} {expires}\n")).collect();
        write_durably(&self.revoked_file, text.as_bytes())
    }
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
