//! Capabilities: the resource manager's signed permission for one job to use one accelerator.
//!
//! A capability is an Ed25519 signature by the resource manager over a [`Grant`]. Backends learn
//! the manager's public key when it registers them, and serve a session only for a capability
//! that verifies, names this backend, and has not expired or been revoked.

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};

use crate::{codec, ProtoError};

/// What a capability allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Unique id, used to revoke it.
    pub id: u64,
    /// The job it belongs to.
    pub job: String,
    /// The backend (registered host name) it is valid on.
    pub host: String,
    /// The device index on that backend.
    pub device: u32,
    /// Unix time (seconds) after which it is void.
    pub expires: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Signed {
    grant: Vec<u8>,
    signature: Vec<u8>,
}

/// The resource manager's signing key.
#[derive(Debug)]
pub struct Signer {
    key: Ed25519KeyPair,
}

impl Signer {
    /// A new random key, as PKCS#8 bytes to store.
    pub fn generate_pkcs8() -> Result<Vec<u8>, ProtoError> {
        let rng = ring::rand::SystemRandom::new();
        Ed25519KeyPair::generate_pkcs8(&rng)
            .map(|doc| doc.as_ref().to_vec())
            .map_err(|_| ProtoError::Certificate("cannot generate an Ed25519 key".into()))
    }

    /// Loads a key from PKCS#8 bytes.
    pub fn from_pkcs8(bytes: &[u8]) -> Result<Self, ProtoError> {
        Ed25519KeyPair::from_pkcs8(bytes)
            .map(|key| Self { key })
            .map_err(|e| ProtoError::Certificate(format!("bad Ed25519 key: {e}")))
    }

    /// The public key backends verify with.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.public_key().as_ref().try_into().expect("Ed25519 public keys are 32 bytes")
    }

    /// Signs a grant into capability bytes.
    pub fn issue(&self, grant: &Grant) -> Vec<u8> {
        let mut body = Vec::new();
        codec::encode_into(grant, &mut body).expect("grants encode");
        let signature = self.key.sign(&body).as_ref().to_vec();
        let mut out = Vec::new();
        codec::encode_into(&Signed { grant: body, signature }, &mut out).expect("capabilities encode");
        out
    }

    /// Signs arbitrary bytes (the registration proof).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.key.sign(message).as_ref().to_vec()
    }
}

/// The grant of a capability signed by one of `keys` (a single manager's, or each replica's of
/// a replicated one), or why it was refused.
pub fn verify(keys: &[[u8; 32]], capability: &[u8], host: &str, now: u64) -> Result<Grant, String> {
    let signed: Signed = codec::decode(capability).map_err(|e| format!("capability does not parse: {e}"))?;
    if !keys.iter().any(|key| UnparsedPublicKey::new(&ED25519, key).verify(&signed.grant, &signed.signature).is_ok()) {
        return Err("capability signature is not the resource manager's".to_string());
    }
    let grant: Grant = codec::decode(&signed.grant).map_err(|e| format!("capability grant does not parse: {e}"))?;
    if grant.host != host {
        return Err(format!("capability is for host `{}`, this is `{host}`", grant.host));
    }
    if grant.expires <= now {
        return Err(format!("capability expired at {} (now {now})", grant.expires));
    }
    Ok(grant)
}

/// Checks a plain signature (the registration proof).
pub fn verify_signature(public_key: &[u8; 32], message: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&ED25519, public_key).verify(message, signature).is_ok()
}

/// Parses a public signing key written as 64 hex digits (blanks around it allowed): how
/// `arm_public_key`, `arm.pub` and a replica's `members` entry write one.
pub fn parse_public_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Writes a public signing key as 64 lowercase hex digits.
pub fn public_key_hex(key: &[u8; 32]) -> String {
    crate::hex(key)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant { id: 7, job: "j1".into(), host: "h1".into(), device: 0, expires: 1_000 }
    }

    #[test]
    fn issued_capabilities_verify_and_tampering_fails() {
        let signer = Signer::from_pkcs8(&Signer::generate_pkcs8().unwrap()).unwrap();
        let cap = signer.issue(&grant());
        let key = [signer.public_key()];
        assert_eq!(verify(&key, &cap, "h1", 999).unwrap(), grant());
        assert!(verify(&key, &cap, "h2", 999).unwrap_err().contains("for host"));
        assert!(verify(&key, &cap, "h1", 1_000).unwrap_err().contains("expired"));
        let other = Signer::from_pkcs8(&Signer::generate_pkcs8().unwrap()).unwrap();
        assert!(verify(&[other.public_key()], &cap, "h1", 999).unwrap_err().contains("signature"));
        // A replicated manager's: any of the replicas' keys.
        assert_eq!(verify(&[other.public_key(), signer.public_key()], &cap, "h1", 999).unwrap(), grant());
        let mut forged = cap.clone();
        let n = forged.len();
        forged[n / 2] ^= 1;
        assert!(verify(&key, &forged, "h1", 999).is_err());
    }
}
