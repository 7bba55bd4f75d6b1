//! Prometheus metrics (issue 26, item 1): a real Prometheus (the Debian package) scrapes a real
//! manager and two real backends every second while a program runs AC_Init, AC_Get, copies and
//! launches; its HTTP API shows the series move. Also `--metrics-listen` from the TOML file and
//! the environment, bad HTTP requests, and the example alert rules under `promtool`.

use std::net::SocketAddr;
use std::time::Duration;

use ac_frontend::Session;
use ac_proto::arm::Request;
use ac_tests::prometheus::{alert_rules, exchange, http_get, Prometheus};
use ac_tests::{arm_config, computes, pattern, ArmProcess, BackendProcess, TestBackend, TestCluster};

const ANY_PORT: &str = "127.0.0.1:0";
/// How long a series may take to show a change: a scrape (1 s) and an evaluation, with room
/// for a loaded machine.
const LIMIT: Duration = Duration::from_secs(20);

/// A manager and two one-accelerator backends (`h0`, `h1`), all serving metrics.
async fn cluster() -> TestCluster {
    let state = tempfile::tempdir().expect("temp dir");
    let mut config = arm_config(state.path());
    config.metrics_listen = Some(ANY_PORT.parse().expect("addr"));
    let arm = arm_server::start(config).await.expect("arm starts");
    let mut backends = Vec::new();
    for _ in 0..2 {
        backends.push(
            TestBackend::start_with(|c| {
                c.memory_mib = 64;
                c.metrics_listen = Some(ANY_PORT.parse().expect("addr"));
            })
            .await,
        );
    }
    let cluster = TestCluster { arm, backends, state };
    for i in 0..2 {
        cluster.add_host(i).await;
    }
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_both_daemons_and_the_series_move() {
    let mut c = cluster().await;
    let mut targets = vec![("arm-server", c.arm.metrics_addr().expect("manager metrics"))];
    targets.extend(c.backends.iter().map(|b| ("ac-backend", b.backend.metrics_addr().expect("backend metrics"))));
    let prom = Prometheus::start(&targets).await;
    prom.wait_for("count(up == 1)", LIMIT, |v| v == 3.0).await;
    prom.wait_for(r#"arm_accelerators{state="free"}"#, LIMIT, |v| v == 2.0).await;
    prom.wait_for("sum(arm_host_up)", LIMIT, |v| v == 2.0).await;
    let total = prom.wait_for("sum(ac_backend_device_memory_total_bytes)", LIMIT, |v| v > 0.0).await;
    assert_eq!(total, (2u64 * (64 << 20)) as f64, "two devices of 64 MiB");

    // A program: AC_Init binds its static accelerator, AC_Get takes the other, a second AC_Get
    // finds none left.
    let credential = c.submit("j", &["n1"], 1).await;
    let session = Session::init(c.session_options("j", &credential, "n1")).await.expect("AC_Init");
    let set = session.get(1).await.expect("AC_Get").expect("the other accelerator is free");
    assert!(session.get(1).await.expect("AC_Get").is_none(), "none left: rejected at once");
    prom.wait_for(r#"arm_accelerators{state="allocated"}"#, LIMIT, |v| v == 2.0).await;
    prom.wait_for(r#"arm_accelerators{state="free"}"#, LIMIT, |v| v == 0.0).await;
    prom.wait_for(r#"arm_jobs{state="running"}"#, LIMIT, |v| v == 1.0).await;
    prom.wait_for("sum(ac_backend_sessions)", LIMIT, |v| v == 2.0).await;
    prom.wait_for("arm_grants_total", LIMIT, |v| v >= 1.0).await;
    prom.wait_for(r#"arm_rejections_total{reason="no_idle"}"#, LIMIT, |v| v >= 1.0).await;
    prom.wait_for(r#"arm_request_duration_seconds_count{call="init"}"#, LIMIT, |v| v >= 1.0).await;
    prom.wait_for(r#"arm_request_duration_seconds_count{call="get"}"#, LIMIT, |v| v >= 2.0).await;

    // Copies each way (bulk: 4 MiB), a launch, and an error the backend answers.
    let acc = &set.handles[0].acc;
    let data = pattern(1 << 20, 7);
    let buffer = acc.alloc_from(&data).await.expect("upload");
    assert_eq!(buffer.to_vec().await.expect("download"), data);
    computes(acc).await.expect("a launch");
    assert!(acc.alloc::<f32>(1 << 30).await.is_err(), "4 GiB do not fit a 64 MiB device");
    let copied = (data.len() * 4) as f64;
    for way in ["host_to_device", "device_to_host"] {
        let bytes = format!(r#"sum(ac_backend_copied_bytes_total{{direction="{way}"}})"#);
        prom.wait_for(&bytes, LIMIT, |v| v >= copied).await;
        let copies = format!(r#"sum(ac_backend_copy_duration_seconds_count{{direction="{way}"}})"#);
        prom.wait_for(&copies, LIMIT, |v| v >= 1.0).await;
    }
    prom.wait_for("sum(ac_backend_launches_total)", LIMIT, |v| v >= 1.0).await;
    prom.wait_for(r#"sum(ac_backend_errors_total{kind="out_of_memory"})"#, LIMIT, |v| v >= 1.0).await;
    let used = prom.wait_for("sum(ac_backend_device_memory_used_bytes)", LIMIT, |v| v >= copied).await;
    assert!(used < total, "{used} of {total} bytes used");

    // AC_Free gives the dynamic accelerator back; the program then vanishes without
    // AC_Finalize, so its lease runs out; the job's end frees the static one.
    drop(buffer);
    session.free(set).await.expect("AC_Free");
    prom.wait_for(r#"arm_request_duration_seconds_count{call="free"}"#, LIMIT, |v| v >= 1.0).await;
    prom.wait_for(r#"arm_accelerators{state="allocated"}"#, LIMIT, |v| v == 1.0).await;
    drop(session);
    prom.wait_for("arm_lease_expiries_total", LIMIT, |v| v >= 1.0).await;
    c.admin().await.request(Request::JobEnd { id: "j".into() }).await.expect("job ended");
    prom.wait_for(r#"arm_accelerators{state="allocated"}"#, LIMIT, |v| v == 0.0).await;
    prom.wait_for(r#"arm_accelerators{state="free"}"#, LIMIT, |v| v == 2.0).await;
    prom.wait_for(r#"arm_jobs{state="ended"}"#, LIMIT, |v| v == 1.0).await;
    prom.wait_for("sum(ac_backend_sessions)", LIMIT, |v| v == 0.0).await;
    prom.wait_for("arm_revocations_unacknowledged", LIMIT, |v| v == 0.0).await;

    // A backend host goes away: the manager reports it down, and the example alert fires
    // (pending: its `for:` has not passed yet).
    let gone = c.backends.pop().expect("h1");
    gone.backend.shutdown().await;
    prom.wait_for(r#"arm_host_up{host="h1"}"#, LIMIT, |v| v == 0.0).await;
    prom.wait_for(r#"arm_accelerators{state="down"}"#, LIMIT, |v| v == 1.0).await;
    prom.wait_for(r#"count(ALERTS{alertname="AcBackendHostDown",host="h1"})"#, LIMIT, |v| v == 1.0).await;
    prom.wait_for(r#"count(ALERTS{alertname="AcBackendMetricsUnreachable"})"#, LIMIT, |v| v == 1.0).await;

    // Every rule of docs/alerts.yml loaded and evaluates without error.
    let (status, rules) = http_get(prom.addr, "/api/v1/rules").await.expect("rules");
    assert_eq!(status, 200, "{rules}");
    let rules: serde_json::Value = serde_json::from_str(&rules).expect("JSON");
    let health: Vec<&str> = rules["data"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["health"].as_str().unwrap_or("?"))
        .collect();
    let defined = std::fs::read_to_string(alert_rules()).expect("alert rules").matches("- alert:").count();
    assert_eq!(health, vec!["ok"; defined], "{rules}");
}

/// The metrics address a daemon announces on its log (`  metrics at http://ADDR/metrics`).
fn announced(log: &std::path::Path) -> SocketAddr {
    let text = std::fs::read_to_string(log).expect("daemon log");
    let line = text.lines().find_map(|l| l.split_once("metrics at http://")).map(|(_, rest)| rest);
    let addr =
        line.and_then(|rest| rest.strip_suffix("/metrics")).unwrap_or_else(|| panic!("no metrics line:\n{text}"));
    addr.parse().expect("an address")
}

/// A `GET /metrics` answers 200 with `series` in it.
async fn serves(addr: SocketAddr, series: &str) {
    let (status, body) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert_eq!(status, 200, "{body}");
    // A whole line: "... 1" must not be met by "... 10".
    assert!(body.lines().any(|line| line == series), "{series} missing:\n{body}");
}

/// A request whose header is 64 KiB long is refused with a 400, or cut by a reset while the
/// rest was still being written; not left unanswered (`exchange` gives up after 10 s, an error
/// of another kind). Then a normal scrape is answered in full, `series` in it: a daemon that
/// hung on the header, or hangs after it, fails here.
async fn refuses_an_oversized_header(addr: SocketAddr, series: &str) {
    let huge = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 64 << 10]].concat();
    match exchange(addr, &huge).await {
        Ok(answer) => {
            let text = String::from_utf8_lossy(&answer);
            assert_eq!(text.lines().next().unwrap_or_default(), "HTTP/1.1 400 Bad Request", "{text}");
        }
        Err(e) => assert!(
            matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe),
            "a 64 KiB header was neither refused nor cut: {e}"
        ),
    }
    serves(addr, series).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_from_toml_and_environment_and_bad_requests_harm_nothing() {
    let arm_dir = tempfile::tempdir().expect("temp dir");
    let arm = ArmProcess::start_with_config(arm_dir.path(), ANY_PORT, "metrics_listen = \"127.0.0.1:0\"\n");
    let arm_metrics = announced(&arm_dir.path().join("arm-server.log"));
    serves(arm_metrics, "arm_accelerators{state=\"free\"} 0").await;
    let backend_dir = tempfile::tempdir().expect("temp dir");
    let backend =
        BackendProcess::start_with_env(backend_dir.path(), ANY_PORT, &[("AC_BACKEND_METRICS_LISTEN", ANY_PORT)]);
    let backend_metrics = announced(&backend_dir.path().join("ac-backend.log"));
    serves(backend_metrics, "ac_backend_device_memory_total_bytes{device=\"0\"} 67108864").await;

    // Without the setting there is no endpoint: nothing in the log.
    let plain_dir = tempfile::tempdir().expect("temp dir");
    let _plain = BackendProcess::start(plain_dir.path(), ANY_PORT);
    let log = std::fs::read_to_string(plain_dir.path().join("ac-backend.log")).expect("log");
    assert!(!log.contains("metrics at"), "{log}");

    let series =
        [(arm_metrics, "arm_accelerators{state=\"free\"} 0"), (backend_metrics, "ac_backend_launches_total 0")];
    for (addr, series) in series {
        let status = |answer: Vec<u8>| String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string();
        let ask = |request: &'static [u8]| exchange(addr, request);
        assert_eq!(status(ask(b"POST /metrics HTTP/1.1\r\n\r\n").await.unwrap()), "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(status(ask(b"GET /admin HTTP/1.1\r\n\r\n").await.unwrap()), "HTTP/1.1 404 Not Found");
        assert_eq!(status(ask(b"\x16\x03\x01\x02\x00garbage\r\n\r\n").await.unwrap()), "HTTP/1.1 400 Bad Request");
        refuses_an_oversized_header(addr, series).await;
        // A client that goes away mid-request, and one that connects and says nothing.
        drop(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        let _silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        // The endpoint and the daemon go on.
        serves(addr, series).await;
    }
    // The daemons themselves still serve: an admin request and a backend session.
    let admin = ac_tests::admin_of(arm.addr, arm_dir.path()).await;
    admin.request(Request::HostList).await.expect("the manager answers");
    let mut options = ac_frontend::ConnectOptions::new(backend.addr, backend_dir.path().join("ca.pem"));
    options.tuning = ac_tests::quick_tuning();
    let acc = ac_frontend::Accelerator::connect(&options).await.expect("the backend serves");
    computes(&acc).await.expect("computes");
    serves(backend_metrics, "ac_backend_launches_total 1").await;
}

#[test]
fn example_alert_rules_pass_promtool() {
    let out = std::process::Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(alert_rules())
        .output()
        .expect("promtool runs (./scripts/install-packages installs the prometheus package)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let defined = std::fs::read_to_string(alert_rules()).expect("alert rules").matches("- alert:").count();
    assert!(text.contains(&format!("SUCCESS: {defined} rules found")), "{text}");
}
