//! `--only net` (root): bulk copies between two emulated hosts (network namespaces on a veth
//! link, `ac_tests::netns`) against plain TCP on the same link, in alternation, at MTU 1500
//! (transport mtu 1452) and 9000 (6400). The bed is removed when the section ends.

use std::path::Path;
use std::time::Duration;

use ac_tests::netns::{Bed, Proc};
use ac_tests::workspace_binary;

const BACKEND: usize = 0;
const CLIENT: usize = 1;

fn line(proc: &mut Proc, needle: &str) -> anyhow::Result<String> {
    proc.wait_for(needle, Duration::from_secs(120))
        .map(|(_, l)| l)
        .ok_or_else(|| anyhow::anyhow!("no `{needle}`: {}", proc.output()))
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
    Ok(numbers(&line(&mut source, "tcp ")?)[0])
}

fn sdk_once(bed: &Bed, dir: &Path, mib: usize, transport_mtu: u16) -> anyhow::Result<(f64, f64)> {
    let env = [
        ("AC_BACKEND_ADDR", bed.sock(BACKEND, 7100).to_string()),
        ("AC_CA_CERT", dir.join("backend/ca.pem").to_string_lossy().into_owned()),
        ("AC_MTU", transport_mtu.to_string()),
    ];
    let args = ["copy", &mib.to_string(), "1"].map(String::from);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = bed.spawn(CLIENT, &workspace_binary("ac-net-client"), &args, &env, &dir.join("sdk.log"));
    let n = numbers(&line(&mut client, "h2d ")?);
    Ok((n[0], n[1]))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the section; `quick` moves 64 MiB once per row.
pub fn between_hosts(quick: bool) -> anyhow::Result<()> {
    if let Some(why) = ac_tests::netns::unavailable() {
        println!("## Between two hosts: skipped ({why})\n");
        return Ok(());
    }
    let (sizes, reps): (&[usize], usize) = if quick { (&[64], 1) } else { (&[256, 1024], 3) };
    println!("## Between two hosts (veth, network namespaces): SDK copies against plain TCP, same run\n");
    println!("| link MTU | transport mtu | MiB | plain TCP Mbit/s | SDK H2D Mbit/s | SDK D2H Mbit/s | H2D / TCP | D2H / TCP |");
    println!("|---|---|---|---|---|---|---|---|");
    for (mtu, transport_mtu) in [(1500u32, 1452u16), (9000, 6400)] {
        let bed = Bed::new(2, mtu);
        let dir = tempfile::tempdir()?;
        let state = dir.path().join("backend");
        let (listen, state_arg) = (bed.sock(BACKEND, 7100).to_string(), state.to_string_lossy().into_owned());
        // As the README advises: the daemon's transport mtu fits the link too.
        let config = dir.path().join("backend.toml");
        std::fs::write(&config, format!("[transport]\nmtu = {transport_mtu}\n"))?;
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
        let _backend = bed.start_daemon(BACKEND, "ac-backend", &backend_args, &[], dir.path(), "backend");
        for &mib in sizes {
            let (mut tcp, mut h2d, mut d2h) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..reps {
                tcp.push(tcp_once(&bed, dir.path(), mib)?);
                let (up, down) = sdk_once(&bed, dir.path(), mib, transport_mtu)?;
                h2d.push(up);
                d2h.push(down);
            }
            let (t, u, d) = (median(tcp), median(h2d), median(d2h));
            println!("| {mtu} | {transport_mtu} | {mib} | {t:.0} | {u:.0} | {d:.0} | {:.2} | {:.2} |", u / t, d / t);
        }
    }
    println!(
        "\n(medians of {reps} alternating runs; one TCP stream, unencrypted; SDK: TLS 1.3 over QUIC, 2 connections)\n"
    );
    Ok(())
}
