//! `--only net` (root): bulk copies between two emulated hosts (network namespaces on a veth
//! link, `ac_tests::netns`) against plain TCP on the same link, in alternation, at MTU 1500
//! (transport mtu 1452) and 9000 (6400). The bed is removed when the section ends.

use std::path::Path;
use std::time::Duration;

use ac_tests::netns::{Bed, Proc};
use ac_tests::workspace_binary;

use crate::setup::{median, BENCH_LANES};

const BACKEND: usize = 0;
const CLIENT: usize = 1;

/// A link the section can build: name (`--net-links`), MTU, the transport mtu the README
/// advises for it, and a tbf rate that shapes it.
type Link = (&'static str, u32, u16, Option<&'static str>);

const LINKS: [Link; 4] = [
    ("mtu1500", 1500, 1452, None),
    ("mtu9000", 9000, 6400, None),
    ("tbf1gbit", 1500, 1452, Some("1gbit")),
    ("tbf5gbit", 1500, 1452, Some("5gbit")),
];

/// What a run of the section measures; `Default` is the whole section as `BENCHMARKS.md`
/// records it.
#[derive(Debug, Default)]
pub struct Plan {
    /// 64 MiB once per row: checks that the section runs.
    pub quick: bool,
    /// The hosts' TCP congestion control; the machine's default when `None`.
    pub congestion: Option<String>,
    /// Names from `LINKS`; every link when empty.
    pub links: Vec<String>,
    /// Repetitions on unshaped links (11, or 1 when quick, when `None`).
    pub reps: Option<usize>,
    /// Copy sizes, MiB (256 and 1024, or 64 when quick, when empty).
    pub mib: Vec<usize>,
    /// The SDK's bulk lanes (`AC_LANES` of its programs), a row for each; its default when
    /// empty.
    pub lanes: Vec<usize>,
}

impl Plan {
    /// The links to build, in `LINKS`' order; an unknown name is an error naming the known ones.
    fn links(&self) -> anyhow::Result<Vec<Link>> {
        if let Some(unknown) = self.links.iter().find(|l| !LINKS.iter().any(|k| k.0 == l.as_str())) {
            let known: Vec<&str> = LINKS.iter().map(|k| k.0).collect();
            anyhow::bail!("no link `{unknown}` in the net section (known: {})", known.join(", "));
        }
        Ok(LINKS.into_iter().filter(|k| self.links.is_empty() || self.links.iter().any(|l| l == k.0)).collect())
    }

    /// The lane counts to measure, in turn within each row (`None`: the SDK's default).
    fn lane_counts(&self) -> Vec<Option<usize>> {
        if self.lanes.is_empty() {
            vec![None]
        } else {
            self.lanes.iter().map(|&n| Some(n)).collect()
        }
    }

    /// The SDK's lanes, as the caption names them.
    fn lanes_named(&self) -> String {
        match &self.lanes[..] {
            [] => lanes_of(None),
            [n] => lanes_of(Some(*n)),
            many => format!(
                "`AC_LANES` {} (the lanes column)",
                many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// One lane count as a caption names it (`None`: the SDK's default).
fn lanes_of(count: Option<usize>) -> String {
    count.map_or("the default bulk lanes".into(), |n| format!("`AC_LANES={n}`"))
}

fn line(proc: &mut Proc, needle: &str) -> anyhow::Result<String> {
    proc.wait_for(needle, Duration::from_secs(120))
        .map(|(_, l)| l)
        .ok_or_else(|| anyhow::anyhow!("no `{needle}`: {}", proc.output()))
}

/// Waits for `procs` to end, so that what they free on the way out (gigabytes for the larger
/// copies) is not freed while the next contender is timed.
fn ended(procs: &mut [&mut Proc]) -> anyhow::Result<()> {
    for proc in procs {
        let status =
            proc.wait(Duration::from_secs(60)).ok_or_else(|| anyhow::anyhow!("still running: {}", proc.output()))?;
        anyhow::ensure!(status.success(), "exited with {status}: {}", proc.output());
    }
    Ok(())
}

/// The numbers after the words of `line` (`h2d 3500 d2h 3600` -> [3500, 3600]).
fn numbers(line: &str) -> Vec<f64> {
    line.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

fn tcp_once(bed: &Bed, dir: &Path, mib: usize) -> anyhow::Result<f64> {
    let client = workspace_binary("ac-net-client");
    let size = mib.to_string();
    let mut sink = bed.spawn(BACKEND, &client, &["tcp-recv", "7200", &size], &[], &dir.join("sink.log"));
    line(&mut sink, "listening")?;
    let target = bed.sock(BACKEND, 7200).to_string();
    let mut source = bed.spawn(CLIENT, &client, &["tcp-send", &target, &size], &[], &dir.join("source.log"));
    let rate = numbers(&line(&mut source, "tcp ")?)[0];
    ended(&mut [&mut source, &mut sink])?;
    Ok(rate)
}

/// The bare encrypted stream: TLS 1.3 over TCP as the SDK's lanes make it, nothing around it,
/// from host `from` to host `to`; `whole`: from and into copy-sized buffers instead of one
/// cache-resident MiB.
fn tls_once(bed: &Bed, dir: &Path, mib: usize, whole: bool, from: usize, to: usize) -> anyhow::Result<f64> {
    let client = workspace_binary("ac-net-client");
    let (size, certs) = (mib.to_string(), dir.join("bare-tls").to_string_lossy().into_owned());
    let buffers = if whole { "whole" } else { "one" };
    let sink_args = ["tls-recv", "7300", &size, &certs, buffers];
    let mut sink = bed.spawn(to, &client, &sink_args, &[], &dir.join("tls-sink.log"));
    line(&mut sink, "listening")?;
    let target = bed.sock(to, 7300).to_string();
    let args = ["tls-send", &target, &size, &certs, buffers];
    let mut source = bed.spawn(from, &client, &args, &[], &dir.join("tls-source.log"));
    let rate = numbers(&line(&mut source, "tls ")?)[0];
    ended(&mut [&mut source, &mut sink])?;
    Ok(rate)
}

/// One SDK copy each way; `lanes` `Some(0)` keeps the bytes on QUIC streams (the design before
/// lanes), `None` leaves the SDK's default (or `AC_LANES` of the benchmark's environment).
fn sdk_once(bed: &Bed, dir: &Path, mib: usize, transport_mtu: u16, lanes: Option<usize>) -> anyhow::Result<(f64, f64)> {
    Ok(sdk_copies(bed, dir, mib, transport_mtu, lanes, 1)?[0])
}

/// `copies` SDK copies each way in one program, in turn (H2D, then D2H): each pair's Mbit/s.
fn sdk_copies(
    bed: &Bed,
    dir: &Path,
    mib: usize,
    transport_mtu: u16,
    lanes: Option<usize>,
    copies: usize,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut env = vec![
        ("AC_BACKEND_ADDR", bed.sock(BACKEND, 7100).to_string()),
        ("AC_CA_CERT", dir.join("backend/ca.pem").to_string_lossy().into_owned()),
        ("AC_MTU", transport_mtu.to_string()),
    ];
    env.extend(lanes.map(|n| ("AC_LANES", n.to_string())));
    let args = ["copy", &mib.to_string(), &copies.to_string()].map(String::from);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = bed.spawn(CLIENT, &workspace_binary("ac-net-client"), &args, &env, &dir.join("sdk.log"));
    let mut pairs = Vec::with_capacity(copies);
    for _ in 0..copies {
        let n = numbers(&line(&mut client, "h2d ")?);
        pairs.push((n[0], n[1]));
    }
    // The program frees its device buffer before it exits.
    ended(&mut [&mut client])?;
    Ok(pairs)
}

/// A program's first copy each way against its later ones (the first device-to-host copy is
/// the first time a lane carries bulk bytes towards the program): `programs` programs of
/// `copies` copies each way. Medians: first H2D, later H2D, first D2H, later D2H.
fn first_and_later(
    bed: &Bed,
    dir: &Path,
    mib: usize,
    transport_mtu: u16,
    lanes: Option<usize>,
    (programs, copies): (usize, usize),
) -> anyhow::Result<[f64; 4]> {
    anyhow::ensure!(programs > 0 && copies > 1, "a first copy and later ones need programs and 2 copies");
    let mut runs: [Vec<f64>; 4] = Default::default();
    for _ in 0..programs {
        let pairs = sdk_copies(bed, dir, mib, transport_mtu, lanes, copies)?;
        runs[0].push(pairs[0].0);
        runs[2].push(pairs[0].1);
        for &(up, down) in &pairs[1..] {
            runs[1].push(up);
            runs[3].push(down);
        }
    }
    Ok(runs.map(median))
}

/// `ratios` as `0.97 1.02 0.91`.
fn listed(ratios: &[f64]) -> String {
    ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ")
}

/// A row's medians, Mbit/s.
struct Row {
    tcp: f64,
    tls: f64,
    tls_whole: f64,
    /// The copy-sized bare stream the other way, backend host to program host, as a
    /// device-to-host copy goes.
    tls_back: f64,
    h2d: f64,
    d2h: f64,
    quic_h2d: f64,
    quic_d2h: f64,
    /// Each repetition's SDK H2D over the copy-sized bare stream and SDK D2H over the bare
    /// stream back, both taken within seconds of each other.
    paired_h2d: Vec<f64>,
    paired_d2h: Vec<f64>,
}

/// `reps` alternating runs of every contender at `mib` MiB.
fn measure(
    bed: &Bed,
    dir: &Path,
    mib: usize,
    reps: usize,
    transport_mtu: u16,
    lanes: Option<usize>,
) -> anyhow::Result<Row> {
    let mut runs: [Vec<f64>; 8] = Default::default();
    for _ in 0..reps {
        runs[0].push(tcp_once(bed, dir, mib)?);
        runs[1].push(tls_once(bed, dir, mib, false, CLIENT, BACKEND)?);
        runs[2].push(tls_once(bed, dir, mib, true, CLIENT, BACKEND)?);
        runs[3].push(tls_once(bed, dir, mib, true, BACKEND, CLIENT)?);
        let (up, down) = sdk_once(bed, dir, mib, transport_mtu, lanes)?;
        runs[4].push(up);
        runs[5].push(down);
        let (up, down) = sdk_once(bed, dir, mib, transport_mtu, Some(0))?;
        runs[6].push(up);
        runs[7].push(down);
    }
    let ratios = |sdk: &[f64], bare: &[f64]| sdk.iter().zip(bare).map(|(s, b)| s / b).collect::<Vec<_>>();
    let (paired_h2d, paired_d2h) = (ratios(&runs[4], &runs[2]), ratios(&runs[5], &runs[3]));
    let [tcp, tls, tls_whole, tls_back, h2d, d2h, quic_h2d, quic_d2h] = runs.map(median);
    Ok(Row { tcp, tls, tls_whole, tls_back, h2d, d2h, quic_h2d, quic_d2h, paired_h2d, paired_d2h })
}

/// Starts the backend on host `BACKEND` of `bed`, its state in `dir`.
fn start_backend(bed: &Bed, dir: &Path, transport_mtu: u16) -> anyhow::Result<Proc> {
    let state = dir.join("backend");
    let (listen, state_arg) = (bed.sock(BACKEND, 7100).to_string(), state.to_string_lossy().into_owned());
    // As the README advises: the daemon's transport mtu fits the link too.
    let config = dir.join("backend.toml");
    // The programs' lane counts are what is measured: the backend serves as many as they ask.
    std::fs::write(&config, format!("lanes_per_session = {BENCH_LANES}\n[transport]\nmtu = {transport_mtu}\n"))?;
    let config_arg = config.to_string_lossy().into_owned();
    let backend_args = [
        "--config",
        &config_arg,
        "--listen",
        &listen,
        "--state-dir",
        &state_arg,
        "--device",
        "cpu",
        "--memory-mib",
        "8192",
    ];
    Ok(bed.start_daemon(BACKEND, "ac-backend", &backend_args, &[], dir, "backend"))
}

/// Runs the section as `plan` says.
pub fn between_hosts(plan: &Plan) -> anyhow::Result<()> {
    let (quick, congestion, links) = (plan.quick, plan.congestion.as_deref(), plan.links()?);
    // `tc` shapes links, `nft` is for the tests' faults: a run of unshaped links needs `ip` only.
    let tools: &[&str] = if links.iter().any(|l| l.3.is_some()) { &["ip", "tc"] } else { &["ip"] };
    if let Some(why) = ac_tests::netns::unavailable_with(tools) {
        println!("## Between two hosts: skipped ({why})\n");
        return Ok(());
    }
    // Each contender's single transfer swings by about ±10% on a small VM (a sender and a
    // receiver that share its two cores), and the swings of two contenders are independent:
    // medians of 11 where the link is the machine's own speed, of 3 where a shaper sets it.
    let (default_sizes, default_reps, shaped_reps): (&[usize], usize, usize) =
        if quick { (&[64], 1, 1) } else { (&[256, 1024], 11, 3) };
    let sizes = if plan.mib.is_empty() { default_sizes } else { &plan.mib[..] };
    let reps = plan.reps.unwrap_or(default_reps);
    // Programs of several copies each way, so that each has a first copy and later ones to
    // compare it with (at least 2 copies: `first_and_later`).
    let (series_mib, programs, copies) = if quick { (64, 1, 2) } else { (256, 3, 5) };
    let mut series = Vec::new();
    let mut paired = Vec::new();
    let mut algorithm = String::new();
    println!("## Between two hosts (veth, network namespaces): SDK copies against plain TCP and a bare TLS stream, same run\n");
    println!(
        "| link | MiB | lanes | TCP | bare TLS | bare TLS, copy-sized | SDK H2D | SDK D2H | H2D/TCP | D2H/TCP | H2D/TLS | D2H/TLS | H2D/TLS copy-sized | D2H/TLS copy-sized | bare TLS copy-sized, backend to program | D2H/that | QUIC-only H2D | QUIC-only D2H |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (_, mtu, transport_mtu, rate) in links {
        let bed = Bed::new(2, mtu);
        if let Some(name) = congestion {
            bed.set_congestion(name).map_err(|e| {
                anyhow::anyhow!("congestion control {name} on the emulated hosts: {e} (the kernel takes only one that net.ipv4.tcp_allowed_congestion_control lists)")
            })?;
        }
        // Every contender's TCP runs under it: its name goes with the figures.
        algorithm =
            bed.congestion(CLIENT).map_err(|e| anyhow::anyhow!("reading the hosts' congestion control: {e}"))?;
        if let Some(rate) = rate {
            bed.rate(CLIENT, rate);
        }
        let dir = tempfile::tempdir()?;
        let _backend = start_backend(&bed, dir.path(), transport_mtu)?;
        // Each lane count in turn within a row: a run cut short still compares them.
        for (&mib, lanes) in sizes.iter().flat_map(|mib| plan.lane_counts().into_iter().map(move |l| (mib, l))) {
            let reps = if rate.is_some() { shaped_reps } else { reps };
            let r = measure(&bed, dir.path(), mib, reps, transport_mtu, lanes)?;
            let link = match rate {
                Some(rate) => format!("MTU {mtu}, tbf {rate}"),
                None => format!("MTU {mtu} (transport {transport_mtu})"),
            };
            let lanes = lanes.map_or("default".to_string(), |n| n.to_string());
            println!(
                "| {link} | {mib} | {lanes} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} |",
                r.tcp,
                r.tls,
                r.tls_whole,
                r.h2d,
                r.d2h,
                r.h2d / r.tcp,
                r.d2h / r.tcp,
                r.h2d / r.tls,
                r.d2h / r.tls,
                r.h2d / r.tls_whole,
                r.d2h / r.tls_whole,
                r.tls_back,
                r.d2h / r.tls_back,
                r.quic_h2d,
                r.quic_d2h
            );
            paired.push(format!(
                "| {link} | {mib} | {lanes} | {} | {:.2} | {} | {:.2} |",
                listed(&r.paired_h2d),
                median(r.paired_h2d.clone()),
                listed(&r.paired_d2h),
                median(r.paired_d2h.clone())
            ));
        }
        // On a shaped link every copy runs at the shaper's rate, first or not.
        if rate.is_none() {
            let [h2d_first, h2d_later, d2h_first, d2h_later] = first_and_later(
                &bed,
                dir.path(),
                series_mib,
                transport_mtu,
                plan.lane_counts()[0],
                (programs, copies),
            )?;
            series.push(format!(
                "| MTU {mtu} (transport {transport_mtu}) | {series_mib} | {h2d_first:.0} | {h2d_later:.0} | {:.2} | {d2h_first:.0} | {d2h_later:.0} | {:.2} |",
                h2d_first / h2d_later,
                d2h_first / d2h_later
            ));
        }
    }
    let (lanes, cores) = (plan.lanes_named(), std::thread::available_parallelism().map_or(0, |n| n.get()));
    let series_lanes = lanes_of(plan.lane_counts()[0]);
    println!(
        "\n(Mbit/s, medians of {reps} alternating runs, {shaped_reps} on shaped links; {cores} cores shared by both hosts; TCP congestion control on both hosts: {algorithm}; \
         TCP: one stream, unencrypted; bare TLS: one TLS 1.3 stream over \
         TCP as the lanes make it, program host to backend host, from and into one MiB, or from and into copy-sized \
         buffers (as a copy reads the program's memory and writes the device's), and the copy-sized one from the \
         backend host to the program's, as a device-to-host copy goes; SDK: {lanes}; QUIC-only: `AC_LANES=0`, 2 QUIC connections)\n"
    );
    println!("### Each repetition's SDK copy against the bare stream measured beside it\n");
    println!(
        "| link | MiB | lanes | H2D / bare copy-sized, each repetition | median | D2H / bare back, each repetition | median |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in paired {
        println!("{row}");
    }
    println!(
        "\n(ratios within one repetition, in the order they ran: the spread behind the medians above. The SDK's copy and \
         the bare stream it is compared with run seconds apart, yet their swings are independent: a ratio of one \
         repetition says little, a median of many says what the link gives each)\n"
    );
    println!("### A program's first copy each way against its later ones\n");
    println!("| link | MiB | first H2D | later H2D | first/later | first D2H | later D2H | first/later |");
    println!("|---|---|---|---|---|---|---|---|");
    for row in series {
        println!("{row}");
    }
    println!(
        "\n(Mbit/s, medians; {programs} programs, each {copies} copies each way in turn, H2D then D2H, on {series_lanes}, after one untimed H2D copy that maps the CPU device's memory; the first timed pair of each program against \
         the later ones)\n"
    );
    Ok(())
}
