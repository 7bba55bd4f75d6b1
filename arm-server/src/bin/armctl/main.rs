//! `armctl`: the administrator's command line for the resource manager.
//!
//! Exit codes: 0 success, 1 other failure, 2 usage, 3 unauthorized, 4 not found, 5 conflict,
//! 6 invalid request, 7 backend unreachable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use ac_frontend::arm::{ArmClient, ArmOptions};
use ac_proto::arm::{ArmErrorKind, HostView, JobView, Request, ReservationView, Response};
use arm_server::server::mark_reserved;
use clap::{Parser, Subcommand};
use slurm_env::{env, log_slurm_line, prolog_request, slurm_job, slurm_refusal, spank_acpn};

mod accounting;
mod cert;
mod cluster;
mod device;
mod slurm_env;
mod status;

/// Manage the accelerator pool and jobs.
#[derive(Debug, Parser)]
#[command(name = "armctl", version, long_version = ac_proto::long_version(), about)]
struct Cli {
    /// The resource manager's address (IP:PORT), or several, comma-separated.
    #[arg(long, env = "ARM_ADDR", global = true, default_value = "127.0.0.1:7000")]
    arm: String,
    /// Its CA certificate (the packaged manager's: /var/lib/arm-server/ca.pem).
    #[arg(long, env = "ARM_CA_CERT", global = true, default_value = ".state/arm-server/ca.pem")]
    ca: PathBuf,
    /// Client certificate: role admin for every command but `manager-key` and `cert`, role
    /// batch enough for `slurm prolog` and `slurm epilog` (the packaged manager's admin:
    /// /var/lib/arm-server/admin.pem; `armctl cert issue` makes others). Unset: the embedded
    /// default's .state/arm-server/admin.pem when it exists.
    #[arg(long, env = "ARMCTL_CERT", global = true)]
    cert: Option<PathBuf>,
    /// The certificate's key (the packaged manager's admin: /var/lib/arm-server/admin.key).
    #[arg(long, env = "ARMCTL_KEY", global = true)]
    key: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Accelerator hosts.
    #[command(subcommand)]
    Host(HostCommand),
    /// Accelerators' identity and health: list, clear a fault.
    #[command(subcommand)]
    Device(device::DeviceCommand),
    /// Jobs.
    #[command(subcommand)]
    Job(JobCommand),
    /// Advance reservations.
    #[command(subcommand)]
    Reservation(ReservationCommand),
    /// Slurm's side: `PrologSlurmctld` and `EpilogSlurmctld` (docs/slurm.md).
    #[command(subcommand)]
    Slurm(SlurmCommand),
    /// What the manager finds wrong (a Slurm pool out of step with it, Slurm unreachable).
    Health,
    /// One screen: the pool by state, the queue, who holds what, and health (backend links,
    /// Slurm's agreement).
    Status,
    /// The manager's public key: what backends pin as `arm_public_key`.
    ManagerKey,
    /// A replicated manager's replicas: members, leader, term, lag; adding, removing and
    /// replacing them.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Client certificates of the manager's CA, with roles: issue, revoke (on the manager's
    /// host).
    #[command(subcommand)]
    Cert(cert::CertCommand),
    /// Accelerator time per user, group or job, static and dynamic apart (like Slurm's
    /// `sreport`): records of released holdings clipped to the window, holdings still open up
    /// to now.
    Accounting(accounting::AccountingArgs),
}

#[derive(Debug, Subcommand)]
enum SlurmCommand {
    /// Bind the starting job's accelerators (`--acpn` per node) now; fails when they cannot be
    /// bound, and Slurm then requeues the job, or kills it where it cannot be requeued
    /// (interactive jobs, `JobRequeue=0`, `--no-requeue`). A job without `--acpn` is left alone:
    /// it starts whether the manager is up or not, and an `AC_Get` registers it then. Reads
    /// SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_JOB_USER, SLURM_JOB_UID and SPANK_ACPN, as Slurm
    /// sets them.
    Prolog,
    /// Release everything the ending job holds, static and dynamic. Reads SLURM_JOB_ID. For a
    /// job without `--acpn` an unreachable manager is no failure: its reconciliation with Slurm
    /// releases what such a job held.
    Epilog,
}

#[derive(Debug, Subcommand)]
enum ReservationCommand {
    /// Reserve accelerators for a user's jobs (submitted with `job submit --reservation ID`) or
    /// for one queued job. Refused when it does not fit beside running jobs and other
    /// reservations.
    Create {
        /// Accelerators.
        #[arg(long)]
        count: u32,
        /// Start: Unix time, or `+SECONDS` from now.
        #[arg(long, value_parser = parse_start)]
        start: Start,
        /// Length, seconds.
        #[arg(long)]
        duration: u64,
        /// For this user's jobs.
        #[arg(long, conflicts_with = "job", required_unless_present = "job")]
        user: Option<String>,
        /// For this queued job.
        #[arg(long)]
        job: Option<String>,
    },
    /// Reservations not yet over.
    List,
    /// Delete a reservation; its jobs are planned as ordinary jobs again.
    Delete {
        /// Reservation id.
        id: u64,
    },
}

/// A start time as given on the command line.
#[derive(Debug, Clone, Copy)]
enum Start {
    At(u64),
    In(u64),
}

fn parse_start(s: &str) -> Result<Start, String> {
    let number = |t: &str| t.parse::<u64>().map_err(|e| format!("`{s}`: {e}"));
    match s.strip_prefix('+') {
        Some(rest) => Ok(Start::In(number(rest)?)),
        None => Ok(Start::At(number(s)?)),
    }
}

#[derive(Debug, Subcommand)]
enum HostCommand {
    /// Register a backend: the manager connects, checks its certificate and learns its devices.
    Add {
        /// HOST:PORT of the backend.
        addr: SocketAddr,
        /// The CA that signed the backend's certificate (its state directory's ca.pem).
        #[arg(long)]
        backend_ca: PathBuf,
        /// Name (default: the address).
        #[arg(long)]
        name: Option<String>,
        /// Name in the backend's certificate (default: the address's IP).
        #[arg(long)]
        server_name: Option<String>,
        /// Labels, k=v.
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
    },
    /// Every host and accelerator.
    List,
    /// Stop new allocations on a host (existing ones stay).
    Drain {
        /// The host.
        name: String,
        /// Resume allocations instead.
        #[arg(long)]
        undo: bool,
    },
    /// Remove a host (only when idle, unless --force: revokes and tells the holders).
    Remove {
        /// The host.
        name: String,
        /// Revoke its allocations.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Queue a job's static request (what a batch system calls before the job starts).
    Submit {
        /// Job id.
        #[arg(long)]
        job: String,
        /// Compute nodes, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
        /// Accelerators per node.
        #[arg(long)]
        acpn: u32,
        /// User.
        #[arg(long, default_value = "nobody")]
        user: String,
        /// Walltime, seconds (0: none).
        #[arg(long, default_value_t = 0)]
        walltime: u64,
        /// The group (account) whose fairness limits apply (default: the manager's
        /// `[accounts]` entry for the user, else the user).
        #[arg(long)]
        group: Option<String>,
        /// Run inside this advance reservation (one of the same user).
        #[arg(long)]
        reservation: Option<u64>,
        /// Pre-allocate this many accelerators in all (CooRMv2): the job grows into them without
        /// asking the fairness policy; others may borrow the unused ones until it does.
        #[arg(long)]
        peak: Option<u32>,
    },
    /// End a job and release everything it holds.
    End {
        /// Job id.
        id: String,
    },
    /// Queued and running jobs.
    List {
        /// Ended jobs too (kept for the manager's `job_retention_s`).
        #[arg(long)]
        all: bool,
    },
    /// One job.
    Show {
        /// Job id.
        id: String,
    },
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("`{s}` is not k=v"))
}

/// What a command asks of the manager.
enum Asked {
    /// One request.
    One(Request),
    /// `status`'s several.
    Status,
    /// Nothing: the command is done (a prolog with nothing to bind, `cert`), with this to print.
    Nothing(String),
}

/// What a command asks of the manager.
fn request(cli: &Cli) -> anyhow::Result<Asked> {
    Ok(Asked::One(match &cli.command {
        Command::Host(HostCommand::Add { addr, backend_ca, name, server_name, labels }) => Request::HostAdd {
            addr: *addr,
            name: name.clone().unwrap_or_else(|| addr.to_string()),
            server_name: server_name.clone().unwrap_or_else(|| addr.ip().to_string()),
            ca_pem: std::fs::read_to_string(backend_ca)
                .map_err(|e| anyhow::anyhow!("{}: {e}", backend_ca.display()))?,
            labels: labels.clone(),
        },
        Command::Host(HostCommand::List) => Request::HostList,
        Command::Host(HostCommand::Drain { name, undo }) => Request::HostDrain { name: name.clone(), drain: !undo },
        Command::Host(HostCommand::Remove { name, force }) => Request::HostRemove { name: name.clone(), force: *force },
        Command::Job(JobCommand::Submit { job, nodes, acpn, user, walltime, group, reservation, peak }) => {
            Request::JobSubmit {
                id: job.clone(),
                nodes: nodes.clone(),
                acpn: *acpn,
                user: user.clone(),
                walltime_s: *walltime,
                group: group.clone(),
                reservation: *reservation,
                peak: *peak,
            }
        }
        Command::Job(JobCommand::End { id }) => Request::JobEnd { id: id.clone() },
        Command::Job(JobCommand::List { all }) => Request::JobList { all: *all },
        Command::Job(JobCommand::Show { id }) => Request::JobShow { id: id.clone() },
        Command::Reservation(ReservationCommand::Create { count, start, duration, user, job }) => {
            let start = match *start {
                Start::At(t) => t,
                Start::In(seconds) => ac_proto::capability::unix_now() + seconds,
            };
            Request::ReservationCreate {
                count: *count,
                start,
                duration_s: *duration,
                user: user.clone(),
                job: job.clone(),
            }
        }
        Command::Reservation(ReservationCommand::List) => Request::ReservationList,
        Command::Reservation(ReservationCommand::Delete { id }) => Request::ReservationDelete { id: *id },
        Command::Slurm(SlurmCommand::Prolog) => match prolog_request()? {
            Some(request) => request,
            None => return Ok(Asked::Nothing(String::new())),
        },
        Command::Slurm(SlurmCommand::Epilog) => Request::JobEnd { id: env("SLURM_JOB_ID")? },
        Command::Health => Request::Health,
        Command::Device(command) => command.request(),
        Command::ManagerKey => Request::ManagerKey,
        Command::Cluster(command) => command.request(),
        Command::Cert(command) => return Ok(Asked::Nothing(cert::run(command)?)),
        Command::Status => return Ok(Asked::Status),
        Command::Accounting(args) => args.request(),
    }))
}

fn print_reservations(reservations: &[ReservationView]) {
    println!("{:>6} {:>5} {:<8} {:<10} {:>10} {:>10} JOBS", "ID", "COUNT", "STATE", "USER", "STARTS IN", "LASTS");
    let now = ac_proto::capability::unix_now();
    for r in reservations {
        println!(
            "{:>6} {:>5} {:<8} {:<10} {:>10} {:>10} {}",
            r.id,
            r.count,
            r.state,
            r.user,
            format!("{}s", r.start.saturating_sub(now)),
            format!("{}s", r.duration_s),
            r.jobs.join(",")
        );
    }
}

/// A host list with the free accelerators that open advance reservations hold shown as
/// `reserved`, held by `reservation ID`: the manager lists them as free, yet an `AC_Get` cannot
/// have them. A reservation holds a number of accelerators, not particular ones: those shown are
/// the first free ones, which the manager's planning keeps for it.
async fn with_reservations(client: &ArmClient, response: Response) -> Result<Response, ac_frontend::Error> {
    let Response::Hosts(mut hosts) = response else { return Ok(response) };
    if let Response::Reservations(reservations) = client.request(Request::ReservationList).await? {
        mark_reserved(&mut hosts, &reservations);
    }
    Ok(Response::Hosts(hosts))
}

fn print_hosts(hosts: &[HostView]) {
    println!(
        "{:<20} {:<22} {:<9} {:<16} {:<10} {:>9} HOLDER",
        "HOST", "ADDRESS", "STATE", "ACCELERATOR", "STATE", "MEM MiB"
    );
    for h in hosts {
        for a in &h.accelerators {
            println!(
                "{:<20} {:<22} {:<9} {:<16} {:<10} {:>9} {}",
                h.name,
                h.addr,
                h.state,
                a.id,
                a.state,
                a.memory >> 20,
                a.holder.as_deref().unwrap_or("-")
            );
        }
    }
}

fn print_jobs(jobs: &[JobView]) {
    println!(
        "{:<16} {:<10} {:<10} {:<8} {:>4} {:<24} {:<10} ACCELERATORS",
        "JOB", "USER", "GROUP", "STATE", "ACPN", "NODES", "STARTS IN"
    );
    let now = ac_proto::capability::unix_now();
    for j in jobs {
        let starts = match (j.state.as_str(), j.expected_start) {
            ("queued", Some(t)) => format!("{}s", t.saturating_sub(now)),
            ("queued", None) => "never".into(),
            _ => "-".into(),
        };
        let accels = status::held(j);
        println!(
            "{:<16} {:<10} {:<10} {:<8} {:>4} {:<24} {:<10} {}",
            j.id,
            j.user,
            j.group,
            j.state,
            j.acpn,
            j.nodes.join(","),
            starts,
            accels.join(" ")
        );
    }
}

/// `job show`: the table's row, then what only one job's view has: its peak, its spare
/// pre-allocated accelerators, its waiting requests, its reservation.
fn print_job(job: &JobView) {
    print_jobs(std::slice::from_ref(job));
    let spare = match job.preallocated_unused.is_empty() {
        true => "-".to_string(),
        false => job.preallocated_unused.join(" "),
    };
    println!("PEAK              {}", job.peak.map_or("-".into(), |p| p.to_string()));
    println!("SPARE             {spare}");
    println!("WAITING REQUESTS  {}", job.waiting_requests);
    println!("RESERVATION       {}", job.reservation.map_or("-".into(), |r| r.to_string()));
}

fn print(response: &Response, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(response).unwrap_or_default());
        return;
    }
    match response {
        Response::Hosts(hosts) => print_hosts(hosts),
        Response::Host(host) => print_hosts(std::slice::from_ref(host)),
        Response::Jobs(jobs) => print_jobs(jobs),
        Response::Job(job) => print_job(job),
        Response::Submitted { id, credential } => {
            println!("job {id} queued");
            println!("ARM_JOB_ID={id}");
            println!("ARM_JOB_CREDENTIAL={credential}");
        }
        Response::Reservations(reservations) => print_reservations(reservations),
        Response::Reservation(reservation) => print_reservations(std::slice::from_ref(reservation)),
        Response::Done => println!("done"),
        Response::Health(problems) if problems.is_empty() => println!("ok"),
        Response::Health(problems) => problems.iter().for_each(|p| println!("{p}")),
        Response::ManagerKey(key) => println!("{key}"),
        Response::Devices(devices) => device::print(devices),
        Response::Cluster(status) => cluster::print(status),
        Response::Accounting { since_ms, until_ms, rows } => accounting::print(*since_ms, *until_ms, rows),
        other => println!("{other:?}"),
    }
}

fn exit_code(e: &ac_frontend::Error) -> u8 {
    match e {
        ac_frontend::Error::Manager { kind, .. } => match kind {
            ArmErrorKind::Unauthorized => 3,
            ArmErrorKind::NotFound => 4,
            ArmErrorKind::Conflict => 5,
            ArmErrorKind::Invalid => 6,
            ArmErrorKind::Backend => 7,
            _ => 1,
        },
        _ => 1,
    }
}

/// What a command got from the manager.
enum Output {
    /// The answer to its one request.
    One(Response),
    /// `status`'s screen.
    Status(status::Status),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    ac_proto::daemon::quiet_on_closed_pipe();
    let cli = Cli::parse();
    let request = match request(&cli).and_then(|asked| Ok((asked, identity(&cli)?))) {
        Ok((Asked::Nothing(said), _)) => {
            if !said.is_empty() {
                println!("{said}");
            }
            return ExitCode::SUCCESS;
        }
        Ok(r) => r,
        Err(e) => {
            eprintln!("armctl: {e}");
            slurm_refusal(&cli.command, &e.to_string());
            return ExitCode::from(2);
        }
    };
    let (request, identity) = request;
    let result = async {
        let (addr, alternates) = ac_frontend::arm::parse_addresses(&cli.arm)?;
        let mut options = ArmOptions::new(addr, &cli.ca);
        (options.identity, options.alternates) = (identity, alternates);
        let client = ArmClient::connect(options).await?;
        let Asked::One(request) = request else { return status::gather(&client).await.map(Output::Status) };
        let response = match &cli.command {
            Command::Cluster(command) => command.ask(&client, request).await?,
            _ => client.request(request).await?,
        };
        with_reservations(&client, response).await.map(Output::One)
    }
    .await;
    match result {
        Ok(Output::One(response)) => {
            print(&response, cli.json);
            ExitCode::SUCCESS
        }
        Ok(Output::Status(s)) if cli.json => {
            println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(Output::Status(s)) => {
            status::print(&s);
            ExitCode::SUCCESS
        }
        // A job whose prolog failed was never bound: nothing to release.
        Err(ac_frontend::Error::Manager { kind: ArmErrorKind::NotFound, .. })
            if matches!(cli.command, Command::Slurm(SlurmCommand::Epilog)) =>
        {
            ExitCode::SUCCESS
        }
        // A job without static accelerators may have registered on demand; the manager's
        // reconciliation with Slurm releases it when it cannot be told here.
        Err(e @ (ac_frontend::Error::ManagerUnreachable { .. } | ac_frontend::Error::Timeout(_)))
            if matches!(cli.command, Command::Slurm(SlurmCommand::Epilog)) && spank_acpn().is_ok_and(|n| n == 0) =>
        {
            log_slurm_line(&format!("ac epilog of job {}: {e}; left to the manager's reconciliation", slurm_job()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("armctl: {e}");
            slurm_refusal(&cli.command, &e.to_string());
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The client identity to present: `--cert`/`--key` (or their variables), which must exist
/// when given, else the embedded default's admin identity when it exists.
fn identity(cli: &Cli) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    match (&cli.cert, &cli.key) {
        (Some(cert), Some(key)) => {
            for file in [cert, key] {
                std::fs::metadata(file).map_err(|e| anyhow::anyhow!("client identity {}: {e}", file.display()))?;
            }
            Ok(Some((cert.clone(), key.clone())))
        }
        (None, None) => {
            let (cert, key) =
                (PathBuf::from(".state/arm-server/admin.pem"), PathBuf::from(".state/arm-server/admin.key"));
            Ok((cert.exists() && key.exists()).then_some((cert, key)))
        }
        _ => anyhow::bail!("a client identity needs both --cert (ARMCTL_CERT) and --key (ARMCTL_KEY)"),
    }
}
