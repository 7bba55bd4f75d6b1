//! Secrets of the resource manager: job credentials and session tokens (random, stored hashed),
//! and the Ed25519 key that signs capabilities (created on first start, kept in the state
//! directory, readable by its owner only).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ac_proto::capability::Signer;

use crate::ArmServerError;

pub use ac_proto::capability::parse_public_key;
pub use ac_proto::hex;

/// A new random secret: 32 bytes as 64 hex digits.
pub fn random_secret() -> String {
    ac_proto::random_hex(32)
}

/// SHA-256 of a secret, hex: what the store keeps instead of the secret.
pub fn hash(secret: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()).as_ref())
}

/// Compares two strings without stopping at the first difference.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Loads the signing key from `dir/signing.key`, creating it on first start.
pub fn signer(dir: &Path) -> Result<Signer, ArmServerError> {
    let path = dir.join("signing.key");
    if !path.exists() {
        std::fs::create_dir_all(dir)?;
        std::fs::write(&path, Signer::generate_pkcs8()?)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(Signer::from_pkcs8(&std::fs::read(&path)?)?)
}

/// Prepares the state directories of a new replicated manager's replicas, as docs/admin.md
/// says: the first one's CA and admin certificate copied to the others, each replica with a
/// signing key of its own. Returns each one's public key, for its `members` entry.
pub fn prepare_replicas(dirs: &[std::path::PathBuf]) -> Result<Vec<String>, ArmServerError> {
    let first = dirs.first().ok_or_else(|| ArmServerError::Config("no replica".into()))?;
    ac_proto::tls::ensure_self_signed(first, &[], &["admin"])?;
    // The certificate made with the CA names no address of a replica: each issues its own.
    for file in ["cert.pem", "key.pem"] {
        std::fs::remove_file(first.join(file))?;
    }
    for dir in &dirs[1..] {
        std::fs::create_dir_all(dir)?;
        for file in ["ca.pem", "ca.key", "admin.pem", "admin.key"] {
            std::fs::copy(first.join(file), dir.join(file))?;
        }
    }
    dirs.iter().map(|dir| Ok(hex(&signer(dir)?.public_key()))).collect()
}

/// What this manager signs with and registers backends as: its key, and for a replica the
/// set of replicas' public keys backends trust (the current members', which a membership
/// change replaces: `set_cluster`).
#[derive(Debug)]
pub struct ManagerKeys {
    /// This manager's signing key.
    pub signer: Signer,
    /// The replicas' public keys (a replicated manager), or empty.
    cluster: std::sync::RwLock<Vec<[u8; 32]>>,
}

impl ManagerKeys {
    /// A manager's keys: `cluster` empty for a single manager.
    pub fn new(signer: Signer, cluster: Vec<[u8; 32]>) -> Self {
        Self { signer, cluster: std::sync::RwLock::new(cluster) }
    }

    /// The replicas' public keys backends are registered with (empty: a single manager).
    pub fn cluster(&self) -> Vec<[u8; 32]> {
        self.cluster.read().expect("keys poisoned").clone()
    }

    /// Makes `keys` the set backends are registered with from now on; whether it changed (the
    /// links then register again, so that backends trust the new set).
    pub fn set_cluster(&self, keys: Vec<[u8; 32]>) -> bool {
        let mut cluster = self.cluster.write().expect("keys poisoned");
        let changed = *cluster != keys;
        *cluster = keys;
        changed
    }

    /// What a backend's `arm_public_key` names to trust this manager only: its key, or every
    /// replica's, separated by commas.
    pub fn pinned(&self) -> String {
        let cluster = self.cluster();
        if cluster.is_empty() {
            hex(&self.signer.public_key())
        } else {
            cluster.iter().map(|k| hex(k)).collect::<Vec<_>>().join(",")
        }
    }

    /// The hello that registers this manager with `host`'s backend: a single manager's, or a
    /// replica's naming every replica's key.
    pub fn registration(&self, host: &str) -> ac_proto::backend::Hello {
        use ac_proto::backend::{register_cluster_message, register_message, Hello};
        let time = ac_proto::capability::unix_now();
        let (public_key, host, cluster) = (self.signer.public_key(), host.to_string(), self.cluster());
        if cluster.is_empty() {
            let proof = self.signer.sign(&register_message(&host, time));
            Hello::Register { public_key, host, time, proof }
        } else {
            let proof = self.signer.sign(&register_cluster_message(&host, time, &cluster));
            Hello::RegisterCluster { public_key, cluster, host, time, proof }
        }
    }
}
