//! `armctl cert`: client certificates of the manager's CA, issued and revoked on the manager's
//! host (they need its state directory: the CA key, and the list the manager reads).

use std::path::{Path, PathBuf};

use arm_server::roles::{self, Role};
use clap::{Subcommand, ValueEnum};

/// A role, as the command line names it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Everything.
    Admin,
    /// Bind and release batch jobs only: for Slurm's prolog and epilog on the controller.
    Batch,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Admin => Role::Admin,
            RoleArg::Batch => Role::Batch,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Issue a client certificate signed by the manager's CA: NAME.pem and NAME.key (readable
    /// by their owner only) in --out.
    Issue {
        /// Its role.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Its common name: who holds it, as the audit log names them (e.g. slurmctld, alice).
        #[arg(long)]
        name: String,
        /// Days it is valid.
        #[arg(long, default_value_t = 365)]
        days: u64,
        /// Valid until this Unix time instead (for tests of expiry).
        #[arg(long, hide = true, conflicts_with = "days")]
        until: Option<i64>,
        /// Where the files go.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// The manager's state directory (its CA key).
        #[arg(long, default_value = "/var/lib/arm-server")]
        state_dir: PathBuf,
    },
    /// Revoke a client certificate before it expires: the manager refuses it from its next
    /// request on (it reads the list in its state directory again when it changes).
    Revoke {
        /// The certificate (PEM file).
        cert: PathBuf,
        /// The manager's state directory.
        #[arg(long, default_value = "/var/lib/arm-server")]
        state_dir: PathBuf,
    },
}

/// Runs a `cert` command; what to print.
pub fn run(command: &CertCommand) -> anyhow::Result<String> {
    match command {
        CertCommand::Issue { role, name, days, until, out, state_dir } => {
            let not_after = match until {
                Some(t) => *t,
                None => (ac_proto::capability::unix_now() + days * 86_400) as i64,
            };
            let role = Role::from(*role);
            let (cert, key) = ac_proto::tls::issue_client(state_dir, name, role.unit(), not_after)?;
            let (cert_file, key_file) = (out.join(format!("{name}.pem")), out.join(format!("{name}.key")));
            write(&key_file, &key, 0o600)?;
            write(&cert_file, &cert, 0o644)?;
            Ok(format!(
                "{} (role {}, valid until Unix time {not_after})\n{}",
                cert_file.display(),
                role.unit(),
                key_file.display()
            ))
        }
        CertCommand::Revoke { cert, state_dir } => {
            let pem = std::fs::read_to_string(cert).map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?;
            let fingerprint = roles::revoke(state_dir, &pem)?;
            Ok(format!("revoked {fingerprint} (listed in {})", roles::revoked_file(state_dir).display()))
        }
    }
}

fn write(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}
