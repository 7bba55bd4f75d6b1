//! Certificates and TLS configurations.
//!
//! A daemon started without a configured certificate creates, in its state directory, a
//! self-signed CA (`ca.pem`, `ca.key`) and a certificate for itself signed by it (`cert.pem`,
//! `key.pem`). Clients trust exactly the CA file they are given. Every configuration built here
//! verifies the peer: there is no "accept any certificate" path.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::crypto::CryptoProvider;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::ProtoError;

/// A certificate chain and its private key.
#[derive(Debug)]
pub struct Identity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self { chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

/// Paths of the files [`ensure_self_signed`] manages in a state directory.
#[derive(Debug, Clone)]
pub struct IdentityFiles {
    /// The CA certificate clients should trust.
    pub ca_cert: PathBuf,
    /// The daemon's certificate.
    pub cert: PathBuf,
    /// The daemon's private key.
    pub key: PathBuf,
}

impl IdentityFiles {
    /// The file names inside `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self { ca_cert: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") }
    }
}

fn cert_err(e: impl std::fmt::Display) -> ProtoError {
    ProtoError::Certificate(e.to_string())
}

/// Writes `contents` to `path`, readable by the owner only when `secret`.
pub(crate) fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), ProtoError> {
    let mode = if secret { 0o600 } else { 0o644 };
    let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    f.write_all(contents.as_bytes())?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The CA's parameters: the same every time, so that a leaf signed later with the stored CA
/// key chains to the stored CA certificate.
fn ca_params() -> Result<CertificateParams, ProtoError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    params.distinguished_name.push(DnType::CommonName, "accelerator manager local CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

/// The file beside `cert.pem` that lists the names it was issued for, one a line.
fn names_file(dir: &Path) -> PathBuf {
    dir.join("cert.names")
}

/// The names the certificate in `dir` was issued for, when recorded.
pub fn issued_names(dir: &Path) -> Option<Vec<String>> {
    let text = fs::read_to_string(names_file(dir)).ok()?;
    Some(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
}

/// Makes sure `dir` holds a CA and a certificate for `names` signed by it, creating them on
/// first use, together with a client certificate `NAME.pem`/`NAME.key` for each of `clients`
/// (for mutual TLS). Existing files are kept as they are, except that a certificate lacking one
/// of `names` is issued again from the same CA: clients that trust the CA need nothing new when
/// an admin adds an address. A CA (`ca.pem`, `ca.key`) placed in `dir` before the first use
/// issues the certificates instead of a new one.
pub fn ensure_self_signed(dir: &Path, names: &[String], clients: &[&str]) -> Result<IdentityFiles, ProtoError> {
    let files = IdentityFiles::in_dir(dir);
    if files.ca_cert.exists() && files.cert.exists() && files.key.exists() {
        let covered = issued_names(dir).is_some_and(|have| names.iter().all(|n| have.contains(n)));
        let ca_key = dir.join("ca.key");
        if !covered && ca_key.exists() {
            let ca_key = KeyPair::from_pem(&fs::read_to_string(&ca_key)?).map_err(cert_err)?;
            let ca_pem = fs::read_to_string(&files.ca_cert)?;
            issue_leaf(dir, &files, names, &ca_params()?, &ca_key, &ca_pem)?;
            tracing::info!(dir = %dir.display(), ?names, "issued the certificate again for new names");
        }
        return Ok(files);
    }
    fs::create_dir_all(dir)?;
    let ca_params = ca_params()?;
    let ca_key_file = dir.join("ca.key");
    // A CA placed here before the first start (a replicated manager's replicas share the
    // first one's): the certificates are issued from it, so that clients trust one CA.
    let (ca_key, ca_pem) = if files.ca_cert.exists() && ca_key_file.exists() {
        let ca_key = KeyPair::from_pem(&fs::read_to_string(&ca_key_file)?).map_err(cert_err)?;
        (ca_key, fs::read_to_string(&files.ca_cert)?)
    } else {
        let ca_key = KeyPair::generate().map_err(cert_err)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_err)?;
        write_file(&ca_key_file, &ca_key.serialize_pem(), true)?;
        write_file(&files.ca_cert, &ca_cert.pem(), false)?;
        (ca_key, ca_cert.pem())
    };
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    for client in clients {
        if dir.join(format!("{client}.pem")).exists() {
            continue;
        }
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
        params.distinguished_name.push(DnType::CommonName, *client);
        let key = KeyPair::generate().map_err(cert_err)?;
        let cert = params.signed_by(&key, &issuer).map_err(cert_err)?;
        write_file(&dir.join(format!("{client}.key")), &key.serialize_pem(), true)?;
        write_file(&dir.join(format!("{client}.pem")), &cert.pem(), false)?;
    }
    issue_leaf(dir, &files, names, &ca_params, &ca_key, &ca_pem)?;
    tracing::info!(dir = %dir.display(), "created a self-signed CA and certificate");
    Ok(files)
}

/// A client certificate for mutual TLS, signed by the CA kept in `dir` (`ca.key`): common
/// name `name`, organisational unit `unit` (the role the resource manager reads from it), valid
/// from now until `not_after` (Unix seconds). Returns the certificate and its key, both PEM.
pub fn issue_client(dir: &Path, name: &str, unit: &str, not_after: i64) -> Result<(String, String), ProtoError> {
    let ca_key = fs::read_to_string(dir.join("ca.key"))
        .map_err(|e| ProtoError::Certificate(format!("the CA key {}: {e}", dir.join("ca.key").display())))?;
    let ca_key = KeyPair::from_pem(&ca_key).map_err(cert_err)?;
    let ca_params = ca_params()?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.distinguished_name.push(DnType::OrganizationalUnitName, unit);
    params.not_before = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
    params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).map_err(cert_err)?;
    // A serial of its own: two certificates issued for one name are told apart (revocation).
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut serial).map_err(cert_err)?;
    serial[0] &= 0x7f; // a positive DER integer
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let key = KeyPair::generate().map_err(cert_err)?;
    let cert = params.signed_by(&key, &Issuer::from_params(&ca_params, &ca_key)).map_err(cert_err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Signs a certificate for `names` with the CA and writes it, its key and its names.
fn issue_leaf(
    dir: &Path,
    files: &IdentityFiles,
    names: &[String],
    ca_params: &CertificateParams,
    ca_key: &KeyPair,
    ca_pem: &str,
) -> Result<(), ProtoError> {
    let mut leaf_params = CertificateParams::new(names.to_vec()).map_err(cert_err)?;
    leaf_params.distinguished_name.push(DnType::CommonName, names.first().map(String::as_str).unwrap_or("ac"));
    let leaf_key = KeyPair::generate().map_err(cert_err)?;
    let leaf = leaf_params.signed_by(&leaf_key, &Issuer::from_params(ca_params, ca_key)).map_err(cert_err)?;
    write_file(&files.key, &leaf_key.serialize_pem(), true)?;
    write_file(&files.cert, &format!("{}{ca_pem}", leaf.pem()), false)?;
    write_file(&names_file(dir), &names.join("\n"), false)
}

/// The names a daemon listening on `listen` puts in a certificate it makes: loopback, this
/// host's name, the listening address when it is a specific one (not `0.0.0.0` or `::`), and
/// the configured `extra` names, without repeats.
pub fn certificate_names(listen: std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    let mut names = default_names();
    let specific = (!listen.ip().is_unspecified()).then(|| listen.ip().to_string());
    for name in specific.into_iter().chain(extra.iter().cloned()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// How to reach a daemon by a name its certificate lacks, for error messages.
pub const ADD_NAME_HINT: &str = "add the name or address to the daemon's certificate names (`names` in its TOML file, \
    `--names`, or ARM_NAMES / AC_BACKEND_NAMES) and restart it: it issues its certificate again from the same CA";

/// The names a daemon's certificate covers by default: loopback and this host's name.
pub fn default_names() -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if let Ok(host) = fs::read_to_string("/etc/hostname") {
        let host = host.trim();
        if !host.is_empty() && !names.iter().any(|n| n == host) {
            names.push(host.to_string());
        }
    }
    names
}

/// Reads a certificate chain and key from PEM files.
pub fn load_identity(cert: &Path, key: &Path) -> Result<Identity, ProtoError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(format!("{}: {e}", cert.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(cert_err(format!("{}: no certificate", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| cert_err(format!("{}: {e}", key.display())))?;
    Ok(Identity { chain, key })
}

/// Reads the CA certificates to trust from a PEM file.
pub fn load_roots(ca: &Path) -> Result<RootCertStore, ProtoError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| cert_err(format!("{}: {e}", ca.display())))? {
        roots.add(cert.map_err(|e| cert_err(format!("{}: {e}", ca.display())))?)?;
    }
    if roots.is_empty() {
        return Err(cert_err(format!("{}: no CA certificate", ca.display())));
    }
    Ok(roots)
}

/// Reads the CA certificates to trust from PEM text.
pub fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore, ProtoError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert.map_err(|e| cert_err(format!("CA PEM: {e}")))?)?;
    }
    if roots.is_empty() {
        return Err(cert_err("CA PEM holds no certificate"));
    }
    Ok(roots)
}

/// The crypto provider: ring, with AES-128-GCM first. It is the cheapest AEAD on x86 with AES-NI,
/// and one QUIC connection is CPU-bound, so the cipher is a visible share of the cost.
pub fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites = vec![
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
        rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
        rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(p)
}

/// A QUIC server configuration presenting `identity`, for clients speaking `alpn`.
pub fn server_crypto(identity: Identity, alpn: &[u8]) -> Result<QuicServerConfig, ProtoError> {
    QuicServerConfig::try_from(server_tls(identity, alpn)?).map_err(|e| ProtoError::Certificate(e.to_string()))
}

/// The TLS 1.3 server configuration presenting `identity`, for clients speaking `alpn` (under
/// QUIC, or over TCP for a bulk lane).
pub fn server_tls(identity: Identity, alpn: &[u8]) -> Result<rustls::ServerConfig, ProtoError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(identity.chain, identity.key)?;
    tls.alpn_protocols = vec![alpn.to_vec()];
    tls.max_early_data_size = 0;
    Ok(tls)
}

/// A QUIC server configuration that also asks clients for a certificate signed by `client_roots`
/// (optional: connections without one are accepted and simply carry no peer identity).
pub fn server_crypto_with_clients(
    identity: Identity,
    alpn: &[u8],
    client_roots: RootCertStore,
) -> Result<QuicServerConfig, ProtoError> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(client_roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| ProtoError::Certificate(e.to_string()))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)?;
    tls.alpn_protocols = vec![alpn.to_vec()];
    QuicServerConfig::try_from(tls).map_err(|e| ProtoError::Certificate(e.to_string()))
}

/// A QUIC client configuration trusting `roots`, speaking `alpn`.
pub fn client_crypto(roots: RootCertStore, alpn: &[u8]) -> Result<QuicClientConfig, ProtoError> {
    client_crypto_with_identity(roots, alpn, None)
}

/// A QUIC client configuration that presents `identity` (mutual TLS) when given.
pub fn client_crypto_with_identity(
    roots: RootCertStore,
    alpn: &[u8],
    identity: Option<Identity>,
) -> Result<QuicClientConfig, ProtoError> {
    QuicClientConfig::try_from(client_tls(roots, alpn, identity)?).map_err(|e| ProtoError::Certificate(e.to_string()))
}

/// The TLS 1.3 client configuration trusting `roots`, speaking `alpn`, presenting `identity`
/// when given (under QUIC, or over TCP for a bulk lane).
pub fn client_tls(
    roots: RootCertStore,
    alpn: &[u8],
    identity: Option<Identity>,
) -> Result<rustls::ClientConfig, ProtoError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots);
    let mut tls = match identity {
        Some(id) => builder.with_client_auth_cert(id.chain, id.key)?,
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![alpn.to_vec()];
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_once_and_keeps_files() {
        let dir = std::env::temp_dir().join(format!("ac-tls-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let files = ensure_self_signed(&dir, &default_names(), &["admin"]).unwrap();
        let first = fs::read(&files.cert).unwrap();
        ensure_self_signed(&dir, &default_names(), &["admin"]).unwrap();
        load_identity(&dir.join("admin.pem"), &dir.join("admin.key")).unwrap();
        assert_eq!(first, fs::read(&files.cert).unwrap(), "existing certificate must be kept");
        let id = load_identity(&files.cert, &files.key).unwrap();
        assert_eq!(id.chain.len(), 2);
        assert_eq!(load_roots(&files.ca_cert).unwrap().len(), 1);
        let mode = fs::metadata(dir.join("ca.key")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_name_reissues_the_certificate_from_the_same_ca() {
        let dir = std::env::temp_dir().join(format!("ac-tls-names-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let listen: std::net::SocketAddr = "10.213.0.1:7000".parse().unwrap();
        let names = certificate_names(listen, &[]);
        assert!(names.contains(&"10.213.0.1".to_string()) && names.contains(&"127.0.0.1".to_string()));
        assert!(!certificate_names("0.0.0.0:7000".parse().unwrap(), &[]).contains(&"0.0.0.0".to_string()));
        let files = ensure_self_signed(&dir, &names, &[]).unwrap();
        let (ca, first) = (fs::read(&files.ca_cert).unwrap(), fs::read(&files.cert).unwrap());
        assert_eq!(issued_names(&dir).unwrap(), names);
        let more = certificate_names(listen, &["arm.example".to_string()]);
        ensure_self_signed(&dir, &more, &[]).unwrap();
        assert_ne!(first, fs::read(&files.cert).unwrap(), "a missing name issues the certificate again");
        assert_eq!(ca, fs::read(&files.ca_cert).unwrap(), "the CA stays, so clients keep trusting it");
        assert_eq!(issued_names(&dir).unwrap(), more);
        // The new leaf chains to the kept CA for the new name.
        let roots = load_roots(&files.ca_cert).unwrap();
        let id = load_identity(&files.cert, &files.key).unwrap();
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build().unwrap();
        use rustls::client::danger::ServerCertVerifier;
        for name in ["arm.example", "10.213.0.1"] {
            let server = rustls_pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&id.chain[0], &id.chain[1..], &server, &[], rustls_pki_types::UnixTime::now())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls_pki_types::ServerName::try_from("10.213.0.9").unwrap();
        let refused = verifier
            .verify_server_cert(&id.chain[0], &id.chain[1..], &other, &[], rustls_pki_types::UnixTime::now())
            .unwrap_err()
            .to_string();
        assert!(refused.contains("10.213.0.1"), "the refusal lists the names held: {refused}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
