//! Who may do what: the role a client certificate carries, the certificates revoked, and the
//! requests each role may make.
//!
//! Client certificates are signed by the manager's CA (`armctl cert issue`, on the manager's
//! host; a replica issues its own `replica.pem` on its first start). The role is the
//! certificate's organisational unit: `admin` may do everything, `batch` (the Slurm prolog and
//! epilog on the controller) may only bind and release jobs, `replica` (a replica of a
//! replicated manager) may only ask for the cluster's status. The manager's first-start
//! `admin.pem` (common name `admin`, no unit) is an admin. A certificate of the CA with none of
//! these, such as the manager's own server certificate, has no role. A certificate's
//! validity period is checked by TLS; one revoked before it expires is listed, by its SHA-256
//! fingerprint, in `revoked-certs` in the state directory (`armctl cert revoke`), which the
//! manager reads again whenever it changes: no new CA on a hundred nodes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use ac_proto::arm::Request;

use crate::ArmServerError;

/// What a client certificate allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything: hosts, jobs, reservations, health, accounting.
    Admin,
    /// Binding and releasing batch jobs only (Slurm's prolog and epilog).
    Batch,
    /// Another replica of a replicated manager: may ask this one who it is (`cluster status`)
    /// only, as a leader does before it makes it a member.
    Replica,
}

impl Role {
    /// The organisational unit that names the role in a certificate.
    pub fn unit(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Batch => "batch",
            Role::Replica => arm_raft::network::REPLICA_UNIT,
        }
    }

    /// The role an organisational unit names.
    pub fn from_unit(unit: &str) -> Option<Self> {
        [Role::Admin, Role::Batch, Role::Replica].into_iter().find(|r| r.unit() == unit)
    }
}

/// The client of a connection, as its certificate says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Caller {
    /// Its role; `None` for a program (no certificate) or a certificate without one.
    pub role: Option<Role>,
    /// The certificate's common name (empty without a certificate).
    pub name: String,
    /// SHA-256 of the certificate, hex (empty without one): what a revocation names.
    pub fingerprint: String,
}

impl Caller {
    /// The caller presenting `leaf` (DER), or a program when there is none.
    pub fn from_certificate(leaf: Option<&[u8]>) -> Self {
        let Some(der) = leaf else { return Self::default() };
        let fingerprint = fingerprint(der);
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
            return Self { fingerprint, ..Self::default() };
        };
        let subject = cert.subject();
        let first = |attrs: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
            attrs.next().and_then(|a| a.as_str().ok()).map(str::to_string)
        };
        let name = first(&mut subject.iter_common_name()).unwrap_or_default();
        let unit = first(&mut subject.iter_organizational_unit());
        let role = match unit.as_deref() {
            Some(unit) => Role::from_unit(unit),
            // The manager's first-start admin certificate predates roles.
            None if name == "admin" => Some(Role::Admin),
            None => None,
        };
        Self { role, name, fingerprint }
    }

    /// Whether this caller may make `request`.
    pub fn may(&self, request: &Request) -> bool {
        match (needs(request), self.role) {
            (None, _) | (Some(_), Some(Role::Admin)) => true,
            (Some(Role::Batch), Some(Role::Batch)) => true,
            (Some(_), Some(Role::Replica)) => matches!(request, Request::ClusterStatus),
            _ => false,
        }
    }
}

/// The role a request needs: `None` for a program's own requests (which authenticate with a
/// job credential, munge or a session token), `Batch` for binding and releasing batch jobs,
/// which an admin may do too.
pub fn needs(request: &Request) -> Option<Role> {
    match request {
        Request::JobBind { .. } | Request::JobEnd { .. } => Some(Role::Batch),
        Request::HostAdd { .. }
        | Request::HostList
        | Request::HostDrain { .. }
        | Request::HostRemove { .. }
        | Request::JobSubmit { .. }
        | Request::JobList { .. }
        | Request::JobShow { .. }
        | Request::ReservationCreate { .. }
        | Request::ReservationList
        | Request::ReservationDelete { .. }
        | Request::Health
        | Request::Devices
        | Request::ClearDevice { .. }
        | Request::Accounting { .. }
        | Request::ClusterStatus
        | Request::ClusterAdd { .. }
        | Request::ClusterRemove { .. }
        | Request::ClusterReplace { .. } => Some(Role::Admin),
        _ => None,
    }
}

/// The name of an admin or batch request, as `armctl` spells it, for the audit log and refusals.
pub fn request_name(request: &Request) -> &'static str {
    match request {
        Request::JobBind { .. } => "job bind",
        Request::JobEnd { .. } => "job end",
        Request::HostAdd { .. } => "host add",
        Request::HostList => "host list",
        Request::HostDrain { .. } => "host drain",
        Request::HostRemove { .. } => "host remove",
        Request::JobSubmit { .. } => "job submit",
        Request::JobList { .. } => "job list",
        Request::JobShow { .. } => "job show",
        Request::ReservationCreate { .. } => "reservation create",
        Request::ReservationList => "reservation list",
        Request::ReservationDelete { .. } => "reservation delete",
        Request::Health => "health",
        Request::Devices => "device list",
        Request::ClearDevice { .. } => "device clear",
        Request::Accounting { .. } => "accounting",
        Request::ClusterStatus => "cluster status",
        Request::ClusterAdd { .. } => "cluster add",
        Request::ClusterRemove { .. } => "cluster remove",
        Request::ClusterReplace { .. } => "cluster replace",
        _ => "a program's request",
    }
}

/// SHA-256 of a certificate (DER), hex.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The file of revoked certificates in a state directory.
pub fn revoked_file(state_dir: &Path) -> PathBuf {
    state_dir.join("revoked-certs")
}

/// Revokes the certificate `pem` (a file as `armctl cert issue` wrote it): its fingerprint is
/// appended to the state directory's list, which the manager reads again. Returns the
/// fingerprint.
pub fn revoke(state_dir: &Path, pem: &str) -> Result<String, ArmServerError> {
    use rustls_pki_types::pem::PemObject;
    use std::io::Write;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| ArmServerError::Config(format!("not a PEM certificate: {e}")))?;
    let caller = Caller::from_certificate(Some(&der));
    let line = format!("{} {} revoked at {}\n", caller.fingerprint, caller.name, ac_proto::capability::unix_now());
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(revoked_file(state_dir))?;
    file.write_all(line.as_bytes())?;
    file.sync_data()?;
    Ok(caller.fingerprint)
}

/// The revoked certificates, read again from their file when it changes.
#[derive(Debug)]
pub struct Revocations {
    file: PathBuf,
    /// The file's modification time when read, and the fingerprints it listed.
    read: Mutex<(Option<SystemTime>, HashSet<String>)>,
}

impl Revocations {
    /// The revocations of the manager whose state directory is `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        Self { file: revoked_file(state_dir), read: Mutex::new((None, HashSet::new())) }
    }

    /// Whether the certificate with `fingerprint` is revoked, as the file says now.
    pub fn revoked(&self, fingerprint: &str) -> bool {
        let modified = std::fs::metadata(&self.file).and_then(|m| m.modified()).ok();
        let mut read = self.read.lock().expect("revocations poisoned");
        if read.0 != modified || modified.is_none() {
            let text = std::fs::read_to_string(&self.file).unwrap_or_default();
            let listed: HashSet<String> =
                text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect();
            if listed.len() != read.1.len() {
                tracing::info!(revoked = listed.len(), file = %self.file.display(), "revoked certificates read");
            }
            *read = (modified, listed);
        }
        !fingerprint.is_empty() && read.1.contains(fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_role_binds_and_releases_jobs_only() {
        let batch = Caller { role: Some(Role::Batch), ..Caller::default() };
        let admin = Caller { role: Some(Role::Admin), ..Caller::default() };
        let nobody = Caller::default();
        let bind = Request::JobBind { id: "1".into(), nodes: vec![], acpn: 1, user: "u".into(), uid: 1, walltime_s: 0 };
        let end = Request::JobEnd { id: "1".into() };
        let drain = Request::HostDrain { name: "h".into(), drain: true };
        assert!(batch.may(&bind) && batch.may(&end) && !batch.may(&drain) && !batch.may(&Request::HostList));
        assert!(admin.may(&bind) && admin.may(&drain));
        assert!(!nobody.may(&bind) && !nobody.may(&drain));
    }

    /// Another replica may ask who this one is, and nothing an admin or the batch system may.
    #[test]
    fn the_replica_role_asks_the_cluster_status_only() {
        let replica = Caller { role: Some(Role::Replica), ..Caller::default() };
        let bind = Request::JobBind { id: "1".into(), nodes: vec![], acpn: 1, user: "u".into(), uid: 1, walltime_s: 0 };
        assert!(replica.may(&Request::ClusterStatus));
        assert!(!replica.may(&bind) && !replica.may(&Request::JobEnd { id: "1".into() }));
        assert!(!replica.may(&Request::ClusterRemove { id: 1 }) && !replica.may(&Request::HostList));
        assert!(!Caller::default().may(&Request::ClusterStatus));
    }

    #[test]
    fn roles_come_from_the_certificates_unit_and_revocations_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        ac_proto::tls::ensure_self_signed(dir.path(), &["localhost".to_string()], &["admin"]).unwrap();
        let later = ac_proto::capability::unix_now() as i64 + 3600;
        let of = |pem: &str| {
            use rustls_pki_types::pem::PemObject;
            let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
            Caller::from_certificate(Some(&der))
        };
        let (batch, _) = ac_proto::tls::issue_client(dir.path(), "slurmctld", "batch", later).unwrap();
        assert_eq!(of(&batch).role, Some(Role::Batch));
        assert_eq!(of(&batch).name, "slurmctld");
        let first = std::fs::read_to_string(dir.path().join("admin.pem")).unwrap();
        assert_eq!(of(&first).role, Some(Role::Admin), "the first-start admin certificate");
        let server = std::fs::read_to_string(dir.path().join("cert.pem")).unwrap();
        assert_eq!(of(&server).role, None, "the manager's own certificate is no client's");
        let (odd, _) = ac_proto::tls::issue_client(dir.path(), "x", "operator", later).unwrap();
        assert_eq!(of(&odd).role, None, "an unknown unit names no role");
        let (replica, _) = ac_proto::tls::issue_client(dir.path(), "replica-2", "replica", later).unwrap();
        assert_eq!(of(&replica).role, Some(Role::Replica));

        let revocations = Revocations::new(dir.path());
        assert!(!revocations.revoked(&of(&batch).fingerprint));
        assert_eq!(revoke(dir.path(), &batch).unwrap(), of(&batch).fingerprint);
        assert!(revocations.revoked(&of(&batch).fingerprint), "read again once the file changed");
        assert!(!revocations.revoked(&of(&first).fingerprint));
    }
}
