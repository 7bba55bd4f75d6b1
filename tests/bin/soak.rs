//! `ac-soak`: the soak of the whole system (`ac_tests::soak`): minutes of churn against real
//! daemons on loopback, then the leak checks. Prints the report, writes it as JSON with
//! `--report`, and exits with 1 if the soak failed.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// Soak the manager and the backends with churning programs, restarts and kills.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Minutes of churn.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Programs running at once.
    #[arg(long, default_value_t = 12)]
    programs: usize,
    /// Seed of the churn.
    #[arg(long, default_value_t = 27)]
    seed: u64,
    /// Where to write the report as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where the daemons' state and logs go (kept); a temporary directory otherwise.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.minutes > 0.0 && args.programs > 0, "--minutes and --programs must be positive");
    let config = ac_tests::soak::Config {
        programs: args.programs,
        seed: args.seed,
        ..ac_tests::soak::Config::minutes(args.minutes)
    };
    let temp = tempfile::tempdir()?;
    let dir = args.state_dir.unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!("ac-soak: {:.1} min of churn, state and logs in {}", args.minutes, dir.display());
    let report = ac_tests::soak::run(&config, &dir).await;
    print!("{}", report.render());
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.failures().is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
