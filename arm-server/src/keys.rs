//! Secrets of the resource manager: job credentials and session tokens (random, stored hashed),
//! and the Ed25519 key that signs capabilities (created on first start, kept in the state
//! directory, readable by its owner only).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ac_proto::capability::Signer;

use crate::ArmServerError;

/// A new random secret: 32 bytes as 64 hex digits.
pub fn random_secret() -> String {
    ac_proto::random_hex(32)
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
