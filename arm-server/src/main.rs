//! The `arm-server` daemon.

use std::path::PathBuf;

use ac_proto::daemon;
use anyhow::Context;
use arm_server::ArmConfig;
use clap::Parser;

// Every request allocates and frees dozens of small strings and buffers across two runtime
// threads; glibc's malloc spent a seventh of the manager's CPU on them under load
// (`ac-bench --only load`, BENCHMARKS.md). Without transparent huge pages (`no_thp`): with
// them its resident memory doubled, and faulting in 2 MiB pages slowed the handshakes.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Accelerator Resource Manager: owns the pool, serves AC_Init / AC_Get / AC_Free over QUIC.
#[derive(Debug, Parser)]
#[command(version, long_version = ac_proto::long_version(), about)]
struct Args {
    /// TOML configuration file (flags and environment override it).
    #[arg(long, env = "ARM_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "ARM_LISTEN")]
    listen: Option<std::net::SocketAddr>,
    /// Directory for certificates, keys and the database.
    #[arg(long, env = "ARM_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Extra names (DNS names or addresses) for the certificate it makes, comma-separated.
    #[arg(long, env = "ARM_NAMES", value_delimiter = ',')]
    names: Option<Vec<String>>,
    /// Lease of a program's dynamic accelerators, milliseconds.
    #[arg(long, env = "ARM_LEASE_MS")]
    lease_ms: Option<u64>,
    /// A backend silent this long is marked down, milliseconds.
    #[arg(long, env = "ARM_BACKEND_TIMEOUT_MS")]
    backend_timeout_ms: Option<u64>,
    /// Serve Prometheus metrics over HTTP at /metrics on this address, e.g. 10.1.0.1:7001: a
    /// management address, as it has no authentication (default: none).
    #[arg(long, env = "ARM_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Write the bound address to this file once listening.
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// Print the public half of the capability signing key (made if the state directory has
    /// none) and exit: what a replicated manager's `members` list as each replica's `key`.
    #[arg(long)]
    signing_key: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(ac_proto::daemon::log_colours())
        .init();
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => ArmConfig::from_toml(
            &std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        )?,
        None => ArmConfig::default(),
    };
    if let Some(v) = args.listen {
        config.listen = v;
    }
    if let Some(v) = args.state_dir {
        config.state_dir = v;
    }
    if let Some(v) = args.names {
        config.names = v;
    }
    if let Some(v) = args.lease_ms {
        config.lease_ms = v;
    }
    if let Some(v) = args.backend_timeout_ms {
        config.backend_timeout_ms = v;
    }
    if let Some(v) = args.metrics_listen {
        config.metrics_listen = Some(v);
    }
    if args.signing_key {
        let signer = arm_server::keys::signer(&config.state_dir)
            .with_context(|| format!("the signing key in {}", config.state_dir.display()))?;
        println!("{}", arm_server::keys::hex(&signer.public_key()));
        return Ok(());
    }
    let arm = arm_server::start(config).await.context("starting the resource manager")?;
    let (cert, key) = arm.admin_identity();
    eprintln!(
        "arm-server listening on {}; clients trust {}; admin certificate {} (key {})",
        arm.addr(),
        arm.ca_cert().display(),
        cert.display(),
        key.display()
    );
    if let Some(names) = arm.ca_cert().parent().and_then(ac_proto::tls::issued_names) {
        eprintln!("  its certificate names {} (add more with --names or ARM_NAMES)", names.join(", "));
    }
    if let Some(addr) = arm.metrics_addr() {
        eprintln!("  metrics at http://{addr}/metrics");
    }
    if let Some(path) = args.addr_file {
        daemon::write_addr_file(&path, arm.addr()).with_context(|| format!("writing {}", path.display()))?;
    }
    daemon::shutdown_signal().await?;
    eprintln!("arm-server shutting down");
    arm.shutdown().await;
    Ok(())
}
