//! `arm-sim`: replay workloads against the accelerator scheduler in simulated time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use arm_sim::engine::{simulate, Behaviour};
use arm_sim::experiment::{parse_config, reproduce, table};
use arm_sim::metrics::Metrics;
use arm_sim::workload::Workload;
use arm_sim::{esp, plot};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(version, about = "Discrete-event simulator for the accelerator scheduler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay an SWF workload and write metrics.json, jobs.json and utilisation.svg.
    Run {
        /// The workload (SWF, with the AC-EVOLVE / AC-JOB extension).
        #[arg(long)]
        workload: PathBuf,
        /// Scheduler configuration (TOML), with an optional [sim] table.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Units in the pool (default: the workload's MaxProcs).
        #[arg(long)]
        units: Option<u32>,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Evolving jobs never ask (overrides the config's [sim] dynamic).
        #[arg(long)]
        no_dynamic: bool,
    },
    /// Write the Dynamic ESP workload for one submission order as SWF.
    Esp {
        /// Seed of the submission order.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Units of the machine.
        #[arg(long, default_value_t = 120)]
        units: u32,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a synthetic workload (for speed tests) as SWF.
    Synth {
        /// Jobs.
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        /// Units of the machine.
        #[arg(long, default_value_t = 1024)]
        units: u32,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Measure the scheduler's speed (pass, dynamic decision, ESP, 100,000-job workload).
    Bench {
        /// Fewer repetitions and a 10,000-job workload.
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Compare a configuration with a baseline on the same Dynamic ESP orders, paired:
    /// makespan and mean wait (difference, standard error, orders won), waits per job type.
    Compare {
        /// The baseline configuration (TOML with an optional [sim] table).
        #[arg(long)]
        baseline: PathBuf,
        /// The candidate configuration.
        #[arg(long)]
        config: PathBuf,
        /// Submission orders, as FIRST-LAST (the rule: tune on 1-100, report 101-200).
        #[arg(long, default_value = "101-200")]
        seeds: String,
        /// Units of the machine.
        #[arg(long, default_value_t = 120)]
        units: u32,
        /// Seconds each resize costs the resized job, in both setups (overrides [sim]).
        #[arg(long)]
        resize_cost: Option<u64>,
        /// Print JSON instead of Markdown.
        #[arg(long)]
        json: bool,
    },
    /// Run the paper's four configurations and ours over several submission orders; write
    /// table.md, results.json and the comparison plots.
    Reproduce {
        /// Number of submission orders (seeds 1..=N).
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// Units of the machine.
        #[arg(long, default_value_t = 120)]
        units: u32,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Run { workload, config, units, out, no_dynamic } => {
            run(&workload, config.as_deref(), units, &out, no_dynamic)
        }
        Command::Esp { seed, units, out } => {
            let text = esp::dynamic_esp(seed, units).to_swf(&format!("Dynamic ESP, seed {seed}, {units} units"));
            std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))
        }
        Command::Synth { jobs, units, seed, out } => {
            let text = esp::synthetic(jobs, units, seed).to_swf(&format!("synthetic, {jobs} jobs, seed {seed}"));
            std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))
        }
        Command::Reproduce { seeds, units, out } => reproduce_all(seeds, units, &out),
        Command::Compare { baseline, config, seeds, units, resize_cost, json } => {
            compare(&baseline, &config, &seeds, units, resize_cost, json)
        }
        Command::Bench { quick, json } => bench(quick, json),
    }
}

fn run(workload: &Path, config: Option<&Path>, units: Option<u32>, out: &Path, no_dynamic: bool) -> Result<()> {
    let text = std::fs::read_to_string(workload).with_context(|| format!("reading {}", workload.display()))?;
    let workload = Workload::parse(&text)?;
    let (config, mut behaviour) = match config {
        Some(path) => {
            parse_config(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)?
        }
        None => (Default::default(), Behaviour::default()),
    };
    behaviour.dynamic &= !no_dynamic;
    let units = units.or(workload.max_procs).context("no --units and no MaxProcs in the workload")?;
    let bar = indicatif::ProgressBar::new(workload.jobs.len() as u64);
    if workload.jobs.len() < 10_000 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = Instant::now();
    let result = simulate(&workload, config, units, behaviour, &mut |done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let metrics = Metrics::of(&result);
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("metrics.json"), serde_json::to_string_pretty(&metrics)?)?;
    std::fs::write(out.join("jobs.json"), serde_json::to_string(&result.jobs)?)?;
    plot::utilisation(&[("this run", &result)], &out.join("utilisation.svg"))?;
    println!("{}", serde_json::to_string_pretty(&metrics)?);
    eprintln!("simulated {} jobs in {:.3} s", workload.jobs.len(), elapsed.as_secs_f64());
    Ok(())
}

fn reproduce_all(seeds: u64, units: u32, out: &Path) -> Result<()> {
    let seeds: Vec<u64> = (1..=seeds).collect();
    let started = Instant::now();
    let (rows, first) = reproduce(&seeds, units)?;
    let elapsed = started.elapsed();
    std::fs::create_dir_all(out)?;
    let table = table(&rows);
    std::fs::write(out.join("table.md"), &table)?;
    let json: Vec<_> = rows.iter().map(|r| serde_json::json!({ "config": r.config.name, "runs": r.runs })).collect();
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    let pairs = [
        ("utilisation-static-vs-dyn-hp.svg", "Static", "Dyn-HP", None, true),
        ("waits-static-vs-dyn-hp.svg", "Static", "Dyn-HP", None, false),
        ("waits-L-static-vs-dyn-500.svg", "Static", "Dyn-500", Some("L"), false),
        ("waits-dyn-hp-vs-dyn-500.svg", "Dyn-HP", "Dyn-500", None, false),
        ("waits-dyn-hp-vs-dyn-600.svg", "Dyn-HP", "Dyn-600", None, false),
        ("waits-dyn-hp-vs-dyn-plan.svg", "Dyn-HP", "Dyn-Plan (ours)", None, false),
    ];
    for (file, a, b, kind, utilisation) in pairs {
        let runs = [(a, &first[a]), (b, &first[b])];
        if utilisation {
            plot::utilisation(&runs, &out.join(file))?;
        } else {
            plot::waits(runs, kind, &out.join(file))?;
        }
    }
    println!("{table}");
    let runs = rows.len() * seeds.len();
    eprintln!(
        "{runs} simulations in {:.3} s ({:.2} ms each)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3 / runs as f64
    );
    Ok(())
}

fn read_setup(path: &Path, resize_cost: Option<u64>) -> Result<arm_sim::compare::Setup> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (config, mut behaviour) = parse_config(&text)?;
    if let Some(cost) = resize_cost {
        behaviour.resize_cost = cost;
    }
    Ok((config, behaviour))
}

fn compare(
    baseline: &Path,
    candidate: &Path,
    seeds: &str,
    units: u32,
    resize_cost: Option<u64>,
    json: bool,
) -> Result<()> {
    let (first, last) = seeds.split_once('-').context("--seeds is FIRST-LAST")?;
    let seeds: Vec<u64> = (first.parse()?..=last.parse()?).collect();
    let (a, b) = (read_setup(baseline, resize_cost)?, read_setup(candidate, resize_cost)?);
    let comparison = arm_sim::compare::compare(&a, &b, &seeds, units)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        let name = |p: &Path| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        print!("{}", arm_sim::compare::report(&comparison, &name(baseline), &name(candidate)));
    }
    Ok(())
}

fn bench(quick: bool, json: bool) -> Result<()> {
    let timings = arm_sim::bench::run(quick)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&timings)?);
        return Ok(());
    }
    println!("| measurement | samples | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    let ms = |us: f64| if us >= 1000.0 { format!("{:.2} ms", us / 1000.0) } else { format!("{us:.0} µs") };
    for t in timings {
        println!("| {} | {} | {} | {} | {} |", t.what, t.samples, ms(t.p50_us), ms(t.p99_us), ms(t.max_us));
    }
    Ok(())
}
